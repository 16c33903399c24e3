#include "planner.h"

#include <stdint.h>

/* The planners are the op list's rows (op_list.c): a new op is a row
 * there and a planner file, nothing here. */

static int flags_check(const spk_op_args *a, spk_err *err) {
  unsigned red = a->flags & SPK_FLAG_RED_MASK;
  unsigned scale = (a->flags & SPK_FLAG_SCALE_MASK) >> SPK_FLAG_SCALE_SHIFT;
  if (a->flags & ~(uint32_t)SPK_FLAG_KNOWN)
    return spk_err_set(err, SPK_EINVAL, "unknown flag bits 0x%x",
                       a->flags & ~(uint32_t)SPK_FLAG_KNOWN);
  if (scale > SPK_SCALE_DOWN)
    return spk_err_set(err, SPK_EINVAL, "grad scale %u is not none, up or "
                       "down", scale);
  if (red >= SPK_RED_COUNT)
    return spk_err_set(err, SPK_EINVAL, "reduce op %u is not sum, max or min",
                       red);
  if (!spk_op_row_get(a->op)->reduces && red != SPK_RED_SUM)
    return spk_err_set(err, SPK_EINVAL, "%s takes no reduce op",
                       spk_op_name(a->op));
  return SPK_OK;
}

static int op_known(spk_op_kind op, spk_err *err) {
  if (spk_op_row_get(op) == NULL)
    return spk_err_set(err, SPK_EINVAL, "unknown op %d", (int)op);
  return SPK_OK;
}

static int dtype_known(spk_dtype dtype, spk_err *err) {
  if ((unsigned)dtype >= SPK_DTYPE_COUNT)
    return spk_err_set(err, SPK_EINVAL, "unknown dtype %d", (int)dtype);
  return SPK_OK;
}

/* Both shapes must have non-negative dims and a byte size that fits. */
static int shapes_check(const spk_op_args *a, spk_err *err) {
  size_t esize = spk_dtype_size(a->dtype);
  int64_t n;
  spk_err why;
  int rc = spk_shape_numel(&a->in, esize, &n, &why);
  if (rc < 0)
    return spk_err_set(err, rc, "input %s", why.msg);
  rc = spk_shape_numel(&a->out, esize, &n, &why);
  if (rc < 0)
    return spk_err_set(err, rc, "output %s", why.msg);
  return SPK_OK;
}

/* Size lists hold non-negative entries whose sum fits in int64, so a
 * planner can add them up without overflow. */
static int list_check(const int64_t *l, int n, const char *what,
                      spk_err *err) {
  int64_t sum = 0;
  for (int i = 0; i < n; i++) {
    if (l[i] < 0)
      return spk_err_set(err, SPK_EINVAL, "%s[%d] is negative (%lld)", what,
                         i, (long long)l[i]);
    if (l[i] > INT64_MAX - sum)
      return spk_err_set(err, SPK_EINVAL, "%s sums past int64 at [%d]", what,
                         i);
    sum += l[i];
  }
  return SPK_OK;
}

int spk_args_check(const spk_op_args *a, int world, int rank, spk_err *err) {
  int rc = op_known(a->op, err);
  if (rc == SPK_OK)
    rc = dtype_known(a->dtype, err);
  if (rc == SPK_OK && (a->in.ndim < 1 || a->in.ndim > SPK_MAX_DIMS))
    rc = spk_err_set(err, SPK_EINVAL, "input ndim %d outside 1..%d",
                     a->in.ndim, SPK_MAX_DIMS);
  if (rc == SPK_OK && (a->out.ndim < 1 || a->out.ndim > SPK_MAX_DIMS))
    rc = spk_err_set(err, SPK_EINVAL, "output ndim %d outside 1..%d",
                     a->out.ndim, SPK_MAX_DIMS);
  if (rc == SPK_OK && (world < 1 || rank < 0 || rank >= world))
    rc = spk_err_set(err, SPK_EINVAL, "rank %d outside world of %d", rank,
                     world);
  if (rc == SPK_OK)
    rc = shapes_check(a, err);
  if (rc == SPK_OK)
    rc = flags_check(a, err);
  if (rc == SPK_OK)
    rc = list_check(a->sizes, a->nsizes, "sizes", err);
  if (rc == SPK_OK)
    rc = list_check(a->sizes2, a->nsizes2, "sizes2", err);
  if (rc < 0)
    return rc;
  return spk_op_row_get(a->op)->check(a, world, rank, err);
}

/* The input bytes a plan touches, for its stream_bytes test: its reads of
 * inputs, counting a byte read twice once (an all_gather reads every
 * input w times) and none that no step reads (a split's rank reads 1/w of
 * the tensor it holds), i.e. the smaller of this node's ranks' inputs and
 * the steps' reads. An in-place op's input is its output too; counting it
 * twice streams it as soon as when written bytes alone decided. */
static uint64_t input_bytes(const spk_op_args *const *args, int world,
                            const spk_plan *plan) {
  uint64_t held = 0, reads = 0;
  size_t esize = spk_dtype_size(plan->dtype);
  for (int r = 0; r < world; r++) {
    int64_t n;
    if ((plan->mine == NULL || plan->mine[r]) &&
        spk_shape_numel(&args[r]->in, esize, &n, NULL) == SPK_OK)
      held += (uint64_t)n * esize;
  }
  for (size_t i = 0; i < plan->nmoves; i++)
    if (plan->moves[i].src_t == SPK_T_IN)
      reads += spk_move_bytes(&plan->moves[i]);
  for (size_t i = 0; i < plan->nreduces; i++)
    for (uint32_t k = 0; k < plan->reduces[i].nsrc; k++)
      if (plan->rsrcs[plan->reduces[i].src0 + k].t == SPK_T_IN)
        reads += spk_move_bytes(&plan->reduces[i].geo);
  return reads < held ? reads : held;
}

int spk_plan_build(const spk_op_args *const *args, int world, spk_plan *plan,
                   spk_err *err) {
  if (world < 1)
    return spk_err_set(err, SPK_EINVAL, "world size %d is less than 1", world);
  for (int r = 0; r < world; r++) {
    int rc = spk_args_check(args[r], world, r, err);
    if (rc < 0)
      return rc;
  }
  const spk_op_args *a0 = args[0];
  const spk_op_row *row = spk_op_row_get(a0->op);
  int rc = spk_args_agree(args, world, row->shared_sizes, err);
  if (rc < 0)
    return rc;
  plan->world = world;
  plan->dtype = a0->dtype;
  plan->scale = (int)((a0->flags & SPK_FLAG_SCALE_MASK) >>
                      SPK_FLAG_SCALE_SHIFT);
  plan->red_op = (int)(a0->flags & SPK_FLAG_RED_MASK);
  if ((rc = row->plan(args, world, plan, err)) < 0)
    return rc;
  plan->in_bytes = input_bytes(args, world, plan);
  return SPK_OK;
}
