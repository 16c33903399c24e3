#include "planner.h"

typedef int (*plan_fn)(const spk_op_args *const *, int, spk_plan *,
                       spk_err *);
typedef int (*check_fn)(const spk_op_args *, int, int, spk_err *);

/* One row per op: a new op is a new row and a new planner file. */
static const struct {
  plan_fn plan;
  check_fn check;
} planners[SPK_OP_COUNT] = {
    [SPK_OP_ALL_GATHER] = {spk_plan_all_gather, spk_check_all_gather},
};

static int op_known(spk_op_kind op, spk_err *err) {
  if ((unsigned)op >= SPK_OP_COUNT || planners[op].plan == NULL)
    return spk_err_set(err, SPK_EINVAL, "unknown op %d", (int)op);
  return SPK_OK;
}

static int dtype_known(spk_dtype dtype, spk_err *err) {
  if ((unsigned)dtype >= SPK_DTYPE_COUNT)
    return spk_err_set(err, SPK_EINVAL, "unknown dtype %d", (int)dtype);
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
  if (rc < 0)
    return rc;
  return planners[a->op].check(a, world, rank, err);
}

int spk_plan_build(const spk_op_args *const *args, int world, spk_plan *plan,
                   spk_err *err) {
  for (int r = 0; r < world; r++) {
    int rc = spk_args_check(args[r], world, r, err);
    if (rc < 0)
      return rc;
  }
  int rc = spk_args_agree(args, world, err);
  if (rc < 0)
    return rc;
  return planners[args[0]->op].plan(args, world, plan, err);
}
