// CUDA tensors in place (cuda.hpp): the registered segments, the
// allocator's hook that releases them, torch's current stream, and the
// Work of an op queued on it.
#include "cuda.hpp"

#include "backend.hpp"

#ifdef SPC_TORCH_CUDA

#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdlib>
#include <cstring>
#include <climits>
#include <cstdint>
#include <map>
#include <tuple>
#include <mutex>
#include <utility>

namespace spcoll {
namespace CA = c10::cuda::CUDACachingAllocator;

namespace {

// The registered segments of every Conn of the process. The allocator and
// its hook are process-wide, so this table is too: its lock is taken
// inside the allocator's lock (by the hook) and takes each Conn's lock,
// never the other way round.
struct Seg {
  std::weak_ptr<Conn> conn;
  spc_buffer* buf;
};

// (conn, base, size): a segment of the allocator, or under expandable
// segments the run of cuMem mappings a tensor lay in (runs may overlap).
using SegKey = std::tuple<Conn*, uintptr_t, size_t>;

struct Segments {
  std::mutex mu;
  std::map<SegKey, Seg> map;
};

Segments& segments() {
  static Segments* s = new Segments();  // outlives every static destructor
  return *s;
}

// Each registration for which pick(conn, base, size, seg) returns its Conn is
// released there (spc_buffer_free under that Conn's lock; nothing to do
// if it fails) and forgotten; nullptr keeps it. pick runs under the
// table's lock.
template <class Pick>
void release_where(Pick pick) {
  Segments& s = segments();
  std::lock_guard<std::mutex> g(s.mu);
  for (auto it = s.map.begin(); it != s.map.end();) {
    Conn* c = pick(std::get<0>(it->first), std::get<1>(it->first),
                   std::get<2>(it->first), it->second);
    if (c == nullptr) {
      ++it;
      continue;
    }
    Conn::Lock l(*c);
    (void)spc_buffer_free(it->second.buf);
    it = s.map.erase(it);
  }
}

// The allocator gives [base, base + size) back to CUDA (a segment, or
// part of an expandable one): release what overlaps it in every Conn
// first (spc_buffer_free waits for the daemon's ops still running, then
// the daemon closes its mapping). Conns are dropped after the table's
// lock, since the last reference may destroy one (cuda_forget).
void segment_freed(uintptr_t base, size_t size) {
  std::vector<std::shared_ptr<Conn>> held;
  release_where([&](Conn* conn, uintptr_t b, size_t n,
                    const Seg& seg) -> Conn* {
    if (b >= base + size || base >= b + n)
      return nullptr;
    auto c = seg.conn.lock();
    if (c == nullptr)
      return nullptr;
    c->counts().segments_released++;
    held.push_back(c);
    return conn;
  });
}

void attach_hook() {
  static std::once_flag once;
  std::call_once(once, [] {
    CA::attachAllocatorTraceTracker([](const CA::TraceEntry& te) {
      if (te.action_ == CA::TraceEntry::SEGMENT_FREE ||
          te.action_ == CA::TraceEntry::SEGMENT_UNMAP)
        segment_freed((uintptr_t)te.addr_, te.size_ > 0 ? te.size_ : 1);
    });
  });
}

}  // namespace

bool cuda_segment_of(const at::Tensor& t, uintptr_t* base, size_t* size) {
  void* block = t.storage().data_ptr().get();
  if (block == nullptr)
    return false;
  try {
    void* b = CA::getBaseAllocation(block, size);
    *base = (uintptr_t)b;
    return b != nullptr;
  } catch (const c10::Error&) {
    return false;  // not a block of the caching allocator
  }
}

bool cuda_direct() {
  static const bool off = [] {
    const char* v = std::getenv("SPCOLL_CUDA_DIRECT");
    return v != nullptr && std::strcmp(v, "0") == 0;
  }();
  return !off;
}

namespace {

bool expandable() { return CA::CUDAAllocatorConfig::expandable_segments(); }

// A block of torch's caching allocator (not spcoll's pool, not memory
// from elsewhere, whose frees no hook reports).
bool in_caching_allocator(const at::Tensor& t) {
  return t.storage().data_ptr().get_deleter() == CA::get()->raw_deleter();
}

// Under expandable segments: the registration of ss's table that holds
// [p, p + n) for conn, or end().
std::map<SegKey, Seg>::iterator run_of(Segments& ss, Conn* conn, uintptr_t p,
                                       size_t n) {
  auto it = ss.map.upper_bound(SegKey{conn, p, SIZE_MAX});
  while (it != ss.map.begin()) {
    --it;
    if (std::get<0>(it->first) != conn)
      break;
    uintptr_t b = std::get<1>(it->first);
    if (p + n <= b + std::get<2>(it->first))
      return it;
  }
  return ss.map.end();
}

void throw_register(Conn& conn, int rc, uintptr_t p, size_t n,
                    const char* what) {
  C10_THROW_ERROR(DistBackendError,
                  "spcoll: registering torch's CUDA " + std::string(what) +
                      " at " + c10::str((void*)p) + " (" + std::to_string(n) +
                      " bytes) with spcolld: " +
                      status_text(rc, spc_last_error(conn.client())));
}

// Why the last tensor of this thread was not taken in place (cuda_refused).
thread_local std::string refusal;

// A registration of expandable-segment memory the daemon or the library
// refused: the tensor is staged instead (false), and why is kept. Lost
// connections still throw.
bool refused(Conn& conn, int rc, const char* what, void* p, size_t n) {
  if (rc == SPC_ECONNECTION || rc == SPC_ESHUTDOWN || rc == SPC_ERESTARTED)
    throw_register(conn, rc, (uintptr_t)p, n, what);
  refusal = std::string(what) + " at " + c10::str(p) + " (" +
            std::to_string(n) + " bytes) not registered: " +
            status_text(rc, spc_last_error(conn.client()));
  TORCH_WARN_ONCE("spcoll: ", refusal, "; such tensors are staged");
  return false;
}

// Expandable segments are cuMem memory: the run of mappings under the
// tensor is registered (libspclient sends each as a file descriptor) and
// kept until the allocator unmaps any of it (SEGMENT_UNMAP). Where that
// is refused (more mappings than one registration carries, memory not
// exportable, a daemon without CUDA), false: the tensor is staged.
bool take_expandable(const std::shared_ptr<Conn>& conn, const at::Tensor& t,
                     Span* s) {
  if (!in_caching_allocator(t))
    return false;
  attach_hook();
  char* p = static_cast<char*>(t.data_ptr());
  size_t n = t.nbytes();
  Segments& ss = segments();
  std::lock_guard<std::mutex> g(ss.mu);
  auto it = run_of(ss, conn.get(), (uintptr_t)p, n);
  if (it == ss.map.end()) {
    Conn::Lock l(*conn);
    spc_buffer *part = nullptr, *run = nullptr;
    void* base = nullptr;
    size_t size = 0;
    int rc = spc_buffer_register_device(conn->client(), p, n, &part);
    if (rc < 0)
      return refused(*conn, rc, "expandable segment memory", p, n);
    (void)spc_buffer_device_range(part, &base, &size);
    rc = spc_buffer_register_device(conn->client(), base, size, &run);
    (void)spc_buffer_free(part);  // run shares its registration
    if (rc < 0)
      return refused(*conn, rc, "cuMem mappings", base, size);
    it = ss.map.emplace(SegKey{conn.get(), (uintptr_t)base, size},
                        Seg{conn, run}).first;
    conn->counts().segments++;
  }
  uintptr_t base = std::get<1>(it->first);
  *s = Span{it->second.buf, (uint64_t)((uintptr_t)p - base), p, (int64_t)n,
            false, (int)t.get_device()};
  return true;
}

}  // namespace

std::string cuda_refused() { return refusal; }

bool cuda_in_segment(const at::Tensor& t) {
  uintptr_t base;
  size_t size;
  if (!t.is_cuda() || t.nbytes() == 0 || !t.is_contiguous())
    return false;
  if (cuda_pool_holds(t))
    return true;
  if (!cuda_direct())
    return false;
  return expandable() ? in_caching_allocator(t)
                      : cuda_segment_of(t, &base, &size);
}

bool cuda_take(const std::shared_ptr<Conn>& conn, const at::Tensor& t,
               Span* s) {
  int64_t n = (int64_t)t.nbytes();
  uintptr_t base;
  size_t size;
  refusal.clear();
  if (!t.is_cuda() || n == 0 || !t.is_contiguous())
    return false;
  if (!cuda_segment_of(t, &base, &size))  // throws for expandable segments
    return cuda_direct() && expandable() && take_expandable(conn, t, s);
  char* p = static_cast<char*>(t.data_ptr());
  spc_buffer* pooled;
  if (cuda_pool_find(conn.get(), base, size, &pooled)) {
    *s = Span{pooled, (uint64_t)((uintptr_t)p - base), p, n, false,
              (int)t.get_device()};
    return true;
  }
  if (!cuda_direct())
    return false;
  attach_hook();
  Segments& ss = segments();
  std::lock_guard<std::mutex> g(ss.mu);
  auto it = ss.map.lower_bound(SegKey{conn.get(), base, 0});
  if (it != ss.map.end() && std::get<0>(it->first) == conn.get() &&
      std::get<1>(it->first) == base && std::get<2>(it->first) != size) {
    // Another segment at the same address: the hook missed the old one's
    // free (it should not), so its registration is stale. Drop it.
    Conn::Lock l(*conn);
    (void)spc_buffer_free(it->second.buf);
    ss.map.erase(it);
  }
  it = ss.map.find(SegKey{conn.get(), base, size});
  if (it == ss.map.end()) {
    spc_buffer* buf = nullptr;
    Conn::Lock l(*conn);
    int rc = spc_buffer_register_device(conn->client(), (void*)base, size, &buf);
    if (rc < 0)
      throw_register(*conn, rc, base, size, "segment");
    it = ss.map.emplace(SegKey{conn.get(), base, size}, Seg{conn, buf}).first;
    conn->counts().segments++;
  }
  *s = Span{it->second.buf, (uint64_t)((uintptr_t)p - base), p, n, false,
            (int)t.get_device()};
  return true;
}

void cuda_forget(Conn* conn) {
  release_where([conn](Conn* c, uintptr_t, size_t, const Seg&) {
    return c == conn ? c : nullptr;  // its weak reference is gone already
  });
}

void* cuda_stream(int dev) {
  return c10::cuda::getCurrentCUDAStream((c10::DeviceIndex)dev).stream();
}

namespace {

class QueuedWork final : public c10d::Work {
 public:
  QueuedWork(c10d::OpType type, int dev, std::vector<at::Tensor> outs)
      : c10d::Work(-1, type),
        stream_(c10::cuda::getCurrentCUDAStream((c10::DeviceIndex)dev)),
        outs_(std::move(outs)),
        ev_(c10::DeviceType::CUDA) {
    ev_.record(stream_);
  }
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  std::vector<at::Tensor> result() override { return outs_; }
  bool wait(std::chrono::milliseconds) override {
    synchronize();
    return true;
  }
  void synchronize() override {
    ev_.block(c10::cuda::getCurrentCUDAStream(stream_.device_index()));
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    c10::StreamGuard g(stream_);  // completion recorded on the op's stream
    auto f = c10::make_intrusive<c10::ivalue::Future>(
        c10::ListType::create(c10::TensorType::get()),
        std::vector<c10::Device>{stream_.device()});
    f->markCompleted(c10::IValue(outs_));
    return f;
  }

 private:
  c10::cuda::CUDAStream stream_;
  std::vector<at::Tensor> outs_;
  c10::Event ev_;
};

}  // namespace

c10::intrusive_ptr<c10d::Work> cuda_work(c10d::OpType type, int dev,
                                         std::vector<at::Tensor> outputs) {
  return c10::make_intrusive<QueuedWork>(type, dev, std::move(outputs));
}

}  // namespace spcoll

#else  // torch without CUDA, or its headers not found

namespace spcoll {

bool cuda_direct() { return false; }
std::string cuda_refused() { return "built without CUDA"; }
bool cuda_in_segment(const at::Tensor&) { return false; }
bool cuda_segment_of(const at::Tensor&, uintptr_t*, size_t*) { return false; }
bool cuda_take(const std::shared_ptr<Conn>&, const at::Tensor&, Span*) {
  return false;
}
void cuda_forget(Conn*) {}
void* cuda_stream(int) { return nullptr; }
c10::intrusive_ptr<c10d::Work> cuda_work(c10d::OpType, int,
                                         std::vector<at::Tensor>) {
  TORCH_CHECK(false, "spcoll: built without CUDA");
}

}  // namespace spcoll

#endif
