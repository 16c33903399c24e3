// spcoll._c10d: the C++ backend's Python face. spcoll/c10d.py registers
// it with torch.distributed; this module only makes connections and
// backends and lends spcoll memory as tensors.
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/python.h>

#include "allocator.hpp"
#include "backend.hpp"
#include "cuda.hpp"
#include "device.hpp"

namespace py = pybind11;

namespace spcoll {
namespace {

// device: the Python backend for CUDA tensors, or None.
c10::intrusive_ptr<c10d::Backend> make_backend(std::shared_ptr<Conn> conn,
                                               const std::string& name,
                                               int rank, int size,
                                               std::chrono::milliseconds t,
                                               py::object device, size_t pg_id,
                                               std::vector<uint64_t> ranks) {
  c10::intrusive_ptr<Backend> b;
  {
    py::gil_scoped_release nogil;  // the join waits for every rank
    b = c10::make_intrusive<Backend>(std::move(conn), name, rank, size, t,
                                     pg_id, std::move(ranks));
  }
  if (!device.is_none())
    b->set_device(std::make_shared<Device>(std::move(device)));
  return b;
}

Backend& ours(const c10::intrusive_ptr<c10d::Backend>& b) {
  auto* s = dynamic_cast<Backend*>(b.get());
  TORCH_CHECK_VALUE(s != nullptr, "spcoll: not a backend of spcoll: ",
                    b->getBackendName());
  return *s;
}

// A 1-D uint8 tensor of n bytes in spcoll memory: ops on tensors viewing
// it go without staging. It keeps the connection alive.
at::Tensor empty_bytes(std::shared_ptr<Conn> conn, int64_t n) {
  TORCH_CHECK_VALUE(n >= 0, "spcoll: empty: negative size ", n);
  Arena::Block b = conn->block(n > 0 ? (size_t)n : 1);
  auto* hold = new Staged(conn, b);
  return at::from_blob(
      b.data(), {n}, [hold](void*) { delete hold; },
      at::TensorOptions().dtype(at::kByte));
}

}  // namespace
}  // namespace spcoll

PYBIND11_MODULE(_c10d, m) {
  using namespace spcoll;
  m.doc() = "spcoll's c10d backend (C++ over libspclient)";
  py::class_<Conn, std::shared_ptr<Conn>>(m, "Conn")
      .def(py::init<const std::string&>(), py::arg("socket") = "",
           py::call_guard<py::gil_scoped_release>());
  m.def("make_backend", &make_backend, py::arg("conn"), py::arg("name"),
        py::arg("rank"), py::arg("size"), py::arg("timeout"),
        py::arg("device") = py::none(), py::arg("pg_id") = 0,
        py::arg("ranks") = std::vector<uint64_t>());
  // Whether the backend feeds torch's FlightRecorder itself (flight.hpp).
  m.def("records_flight", [] { return Flight::records(); });
  m.def("group_name", [](const c10::intrusive_ptr<c10d::Backend>& b) {
    return ours(b).spcoll_name();
  });
  m.def("empty_bytes", &empty_bytes, py::arg("conn"), py::arg("nbytes"));
  // Whether the backend takes t as an op's operand without a copy: a
  // contiguous CPU tensor in this connection's spcoll memory, or a CUDA
  // tensor in a segment of torch's caching allocator.
  m.def("in_place", [](std::shared_ptr<Conn> c, const at::Tensor& t) {
    if (t.is_cuda())
      return cuda_in_segment(t);
    spc_buffer* buf;
    uint64_t off;
    return t.device().is_cpu() && t.nbytes() > 0 && t.is_contiguous() &&
           c->arena().locate(t.data_ptr(), t.nbytes(), &buf, &off);
  });
  m.def("use_cpu_allocator", &use_cpu_allocator, py::arg("conn"));
  // spcoll's CUDA MemPool of device dev (torch.cuda.MemPool id (a, b))
  // allocates through conn: spcoll.c10d.mem_pool.
  m.def("pool_use", [](std::shared_ptr<Conn> c, int dev, int64_t a,
                       int64_t b) { cuda_pool_use(std::move(c), dev, a, b); });
  // Whether torch's own CUDA memory goes in place (expandable segments
  // too: cuMem memory, sent to the daemon as file descriptors).
  m.def("cuda_direct", [] { return cuda_direct(); });
  m.def("built_with_cuda", [] {
#ifdef SPC_TORCH_CUDA
    return true;
#else
    return false;
#endif
  });
  m.def("counts", [](std::shared_ptr<Conn> c) {
    auto& k = c->counts();
    py::dict d;
    d["direct_bytes"] = k.direct.load();
    d["staged_in_bytes"] = k.staged_in.load();
    d["staged_out_bytes"] = k.staged_out.load();
    d["allocator_refused_bytes"] = k.refused.load();
    d["wrapped_bytes"] = k.wrapped.load();
    d["cuda_segments"] = k.segments.load();
    d["cuda_segments_released"] = k.segments_released.load();
    d["cuda_pool_allocs"] = k.pool_allocs.load();
    d["cuda_pool_frees"] = k.pool_frees.load();
    return d;
  });
}
