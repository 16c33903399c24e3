/* split along any dim: every rank passes the full tensor and keeps piece r
 * of it, cut by the size list or the split rule. Each rank copies from its
 * own input: the op is also gather's backward, where ranks hold different
 * gradients of the same shape and each keeps its own slice. */
#include "planner_internal.h"
#include "split_rule.h"

static int check_sizes(const spk_op_args *a, int world, int d, spk_err *err) {
  if (a->nsizes == 0)
    return SPK_OK;
  if (a->nsizes != world)
    return spk_err_set(err, SPK_EINVAL,
                       "split sizes has %d entries, world size is %d",
                       a->nsizes, world);
  int64_t sum = 0; /* entries are non-negative and their sum fits */
  for (int r = 0; r < world; r++)
    sum += a->sizes[r];
  if (sum != a->in.dim[d])
    return spk_err_set(err, SPK_EINVAL,
                       "split sizes sum to %lld but input dim %d has size "
                       "%lld",
                       (long long)sum, d, (long long)a->in.dim[d]);
  return SPK_OK;
}

static int64_t piece(const spk_op_args *a, int world, int d, int rank) {
  return a->nsizes ? a->sizes[rank] : spk_split_size(a->in.dim[d], world, rank);
}

int spk_check_split(const spk_op_args *a, int world, int rank, spk_err *err) {
  int d;
  if (a->ndims != 1)
    return spk_err_set(err, SPK_EINVAL, "split takes 1 dim, got %d", a->ndims);
  int rc = spk_dim_normalize(a->dims[0], a->in.ndim, "split dim", &d, err);
  if (rc == SPK_OK)
    rc = check_sizes(a, world, d, err);
  if (rc == SPK_OK)
    rc = spk__out_resized(a, rank, d, piece(a, world, d, rank), err);
  return rc;
}

int spk_plan_split(const spk_op_args *const *args, int world, spk_plan *plan,
                   spk_err *err) {
  int d;
  int rc = spk__agree_dim(args, world, 0, "split dim", &d, err);
  if (rc == SPK_OK)
    rc = spk__same_in_shape(args, world, err);
  size_t esize = spk_dtype_size(args[0]->dtype);
  int64_t zero[SPK_MAX_DIMS] = {0}, at[SPK_MAX_DIMS] = {0};
  for (int r = 0; rc == SPK_OK && r < world; r++) {
    const spk_op_args *a = args[r];
    spk_block_end src = {(uint32_t)r, SPK_T_IN, &a->in, at};
    spk_block_end dst = {(uint32_t)r, SPK_T_OUT, &a->out, zero};
    rc = spk_plan_add_block(plan, &src, &dst, a->out.dim, esize, err);
    at[d] += a->out.dim[d];
  }
  return rc;
}
