/* The project's kernels built for the host from their own source
 * (kernels/plan_cuda.cu, through shim/cuda_runtime.h), and the table that
 * maps each to the name nvcc registers it under: its C++ mangled name,
 * which the host build shares (found with dladdr). */
#include <stddef.h>
#include <string.h>
#include <utility>

#include "plan_cuda_host.inc"

namespace {
template <typename... A> struct kern {
  static constexpr int nargs = sizeof...(A);
  static void sizes(size_t *s) {
    const size_t v[] = {sizeof(A)..., 0};
    for (int i = 0; i < nargs; i++)
      s[i] = v[i];
  }
  template <void (*F)(A...), size_t... I>
  static void call(void **args, std::index_sequence<I...>) {
    F(*(A *)args[I]...);
  }
  template <void (*F)(A...)> static void run(void **args) {
    call<F>(args, std::index_sequence_for<A...>{});
  }
};
template <typename... A> kern<A...> deduce(void (*)(A...));
} // namespace

#define SPCSIM_KERNEL(f)                                                       \
  {                                                                            \
    (void *)&f, decltype(deduce(&f))::nargs, decltype(deduce(&f))::sizes,      \
        &decltype(deduce(&f))::template run<&f>                                \
  }

extern "C" {
struct spcsim_kernel_entry {
  void *fn;
  int nargs;
  void (*sizes)(size_t *);
  void (*run)(void **);
};
extern const struct spcsim_kernel_entry spcsim_kernels[];
const struct spcsim_kernel_entry spcsim_kernels[] = {
    SPCSIM_KERNEL(plan_kernel),
    {NULL, 0, NULL, NULL},
};
}
