/* libFuzzer target: every planner with random op, world, dtype, shapes,
 * dims, size lists, scalar and flags. Output shapes mostly come from
 * spk_out_shape so many plans are valid; those that build are run on
 * buffers of exactly their tensors' sizes, so ASan sees any move that
 * strays. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"

typedef struct {
  const uint8_t *p;
  size_t n;
} bytes;

static unsigned take(bytes *b) {
  if (b->n == 0)
    return 0;
  b->n--;
  return *b->p++;
}

static void random_shape(bytes *b, spk_shape *s, int ndim) {
  s->ndim = ndim;
  for (int i = 0; i < ndim; i++)
    s->dim[i] = take(b) % 6;
}

static int list(bytes *b, int64_t *l, int n) {
  for (int i = 0; i < n; i++)
    l[i] = take(b) % 7;
  return n;
}

static void run_plan(const spk_op_args *const *args, int world,
                     const spk_plan *plan) {
  uint8_t *bases[16] = {0};
  size_t es = spk_dtype_size(args[0]->dtype);
  for (int r = 0; r < world; r++) {
    const spk_shape *sh[2] = {&args[r]->in, &args[r]->out};
    for (int t = 0; t < 2; t++) {
      int64_t n;
      if (spk_shape_numel(sh[t], es, &n, NULL) < 0)
        n = 0;
      bases[r * 2 + t] = malloc((size_t)n * es + 1);
      memset(bases[r * 2 + t], 0x5a, (size_t)n * es + 1);
    }
  }
  spk_plan_exec(plan, bases);
  for (int i = 0; i < world * 2; i++)
    free(bases[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  bytes b = {data, size};
  int world = 1 + (int)(take(&b) % 8), ndim = 1 + (int)(take(&b) % 5);
  spk_op_args args[8];
  const spk_op_args *argp[8];
  int64_t sizes[8][8], sizes2[8][8];
  spk_op_args base = {.op = (spk_op_kind)(1 + take(&b) % (SPK_OP_COUNT - 1)),
                      .dtype = (spk_dtype)(take(&b) % SPK_DTYPE_COUNT)};
  random_shape(&b, &base.in, ndim);
  base.ndims = (int)(take(&b) % 3);
  base.dims[0] = (int)(take(&b) % (2 * ndim + 1)) - ndim;
  base.dims[1] = (int)(take(&b) % (2 * ndim + 1)) - ndim;
  base.scalar = take(&b) % 3 ? 0 : take(&b) % 20;
  base.flags = take(&b) % 4 ? 0 : take(&b) & 0x3f;
  int nsizes = take(&b) % 3 ? 0 : 1 + (int)(take(&b) % 8);
  list(&b, sizes[0], nsizes);
  for (int r = 0; r < world; r++) {
    args[r] = base;
    if (take(&b) % 4 == 0) /* this rank's input differs */
      args[r].in.dim[take(&b) % ndim] = take(&b) % 6;
    args[r].sizes = sizes[base.op == SPK_OP_ALL_TO_ALL_V ? r : 0];
    args[r].nsizes = nsizes;
    if (base.op == SPK_OP_ALL_TO_ALL_V) {
      list(&b, sizes[r], nsizes);
      args[r].nsizes2 = list(&b, sizes2[r], nsizes);
      args[r].sizes2 = sizes2[r];
    }
    if (spk_out_shape(&args[r], world, r, &args[r].out, NULL) < 0 ||
        take(&b) % 8 == 0) /* or a wrong output on purpose */
      random_shape(&b, &args[r].out, ndim);
    argp[r] = &args[r];
  }
  spk_plan plan;
  spk_plan_init(&plan, world);
  if (spk_plan_build(argp, world, &plan, NULL) == SPK_OK)
    run_plan(argp, world, &plan);
  spk_plan_free(&plan);
  return 0;
}
