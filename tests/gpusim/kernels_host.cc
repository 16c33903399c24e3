/* The project's kernels built for the host from their own source
 * (daemon/gpu/plan_cuda.cu, through shim/cuda_runtime.h), and the table that
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

#define SPCSIM_KERNEL(f, check)                                                \
  {                                                                            \
    (void *)&f, decltype(deduce(&f))::nargs, decltype(deduce(&f))::sizes,      \
        &decltype(deduce(&f))::template run<&f>, check                         \
  }

extern "C" void sim_check_access(const void *p, uint64_t len, int dev,
                                 const char *call);

/* Everything plan_kernel will read or write, checked before it runs on
 * GPU dev: its descriptors and reduce sources, and every row of every
 * step, must be memory that GPU may dereference (own memory, peers with
 * access enabled, IPC mappings with lazy peer access, pools that granted
 * it access). */
static void plan_kernel_access(void **args, int dev) {
  const spk_claunch *L = (const spk_claunch *)args[0];
  const char *call = "plan_kernel";
  if (L->nchunks == 0)
    return;
  sim_check_access(L->descs, L->ndesc * sizeof(spk_cdesc), dev, call);
  uint64_t nsrc = 0;
  for (uint64_t i = 0; i < L->ndesc; i++) {
    const spk_cdesc *d = &L->descs[i];
    if (d->kind == SPK_CU_REDUCE && d->rsrc0 + d->nsrc > nsrc)
      nsrc = d->rsrc0 + d->nsrc;
  }
  if (nsrc > 0)
    sim_check_access(L->srcs, nsrc * sizeof(spk_csrc), dev, call);
  for (uint64_t i = 0; i < L->ndesc; i++) {
    const spk_cdesc *d = &L->descs[i];
    for (uint64_t r = 0; r < d->rows; r++) {
      uint64_t so, dof;
      spk_cdesc_row(d, r, &so, &dof);
      sim_check_access((const void *)(uintptr_t)(d->dst + dof), d->run, dev,
                       call);
      if (d->kind != SPK_CU_REDUCE) {
        sim_check_access((const void *)(uintptr_t)(d->src + so), d->run, dev,
                         call);
        continue;
      }
      for (uint32_t j = 0; j < d->nsrc; j++) {
        spk_csrc c = L->srcs[d->rsrc0 + j];
        sim_check_access(
            (const void *)(uintptr_t)(c.addr + (c.contig ? r * d->run : so)),
            d->run, dev, call);
      }
    }
  }
}

extern "C" {
struct spcsim_kernel_entry {
  void *fn;
  int nargs;
  void (*sizes)(size_t *);
  void (*run)(void **);
  void (*access)(void **, int); /* what a launch will touch, checked */
};
extern const struct spcsim_kernel_entry spcsim_kernels[];
const struct spcsim_kernel_entry spcsim_kernels[] = {
    SPCSIM_KERNEL(plan_kernel, plan_kernel_access),
    {NULL, 0, NULL, NULL, NULL},
};
}
