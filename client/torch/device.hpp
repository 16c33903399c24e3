// CUDA tensors under the C++ backend: for now they take the Python
// backend's device path (spcoll.distributed.ProcessGroupSpcoll on a
// second spcoll group, made beside this one where torch sees a GPU). Each
// op with a CUDA tensor is handed to it whole, with the GIL taken for the
// call; its Work is held with its Python object (PyWorkHolder).
#pragma once

#include <torch/csrc/distributed/c10d/py/PyProcessGroup.hpp>
#include <torch/csrc/utils/pybind.h>

#include <vector>

namespace spcoll {

class Device {
 public:
  explicit Device(py::object pg) : pg_(std::move(pg)) {}
  ~Device() {
    if (!Py_IsInitialized()) {  // at exit, after Python: nothing to release
      (void)pg_.release();
      return;
    }
    py::gil_scoped_acquire g;
    pg_ = py::object();
  }

  // pg.<method>(args...) as torch's Work.
  template <class... A>
  c10::intrusive_ptr<c10d::Work> call(const char* method, A&&... args) {
    py::gil_scoped_acquire g;
    py::object w = pg_.attr(method)(std::forward<A>(args)...);
    return c10::make_intrusive<c10d::PyProcessGroup::PyWorkHolder>(std::move(w));
  }

  void shutdown() {
    if (!Py_IsInitialized())
      return;
    py::gil_scoped_acquire g;
    try {
      pg_.attr("shutdown")();
    } catch (py::error_already_set&) {
      // leaving is best effort: the daemon frees the group with the client
    }
  }

 private:
  py::object pg_;
};

inline bool any_cuda(const std::vector<at::Tensor>& ts) {
  for (const auto& t : ts)
    if (t.is_cuda())
      return true;
  return false;
}

inline bool any_cuda(const std::vector<std::vector<at::Tensor>>& ls) {
  for (const auto& l : ls)
    if (any_cuda(l))
      return true;
  return false;
}

}  // namespace spcoll
