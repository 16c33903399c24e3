/* all_gather along any dim: output = concatenation of every rank's input
 * along dim, in rank order. Ranks may hold different sizes along dim (the
 * seeds' unaligned gather); when a size list is given it must match. */
#include <string.h>

#include "planner_internal.h"

static int check_sizes(const spk_op_args *a, int world, int rank, int d,
                       spk_err *err) {
  if (a->nsizes == 0)
    return SPK_OK;
  if (a->nsizes != world)
    return spk_err_set(err, SPK_EINVAL,
                       "gather sizes has %d entries, world size is %d",
                       a->nsizes, world);
  for (int r = 0; r < world; r++)
    if (a->sizes[r] < 0)
      return spk_err_set(err, SPK_EINVAL, "gather sizes[%d] is negative (%lld)",
                         r, (long long)a->sizes[r]);
  if (a->sizes[rank] != a->in.dim[d])
    return spk_err_set(err, SPK_EINVAL,
                       "rank %d holds %lld along dim %d but gather sizes[%d] "
                       "is %lld",
                       rank, (long long)a->in.dim[d], d, rank,
                       (long long)a->sizes[rank]);
  return SPK_OK;
}

static int check_out(const spk_op_args *a, int rank, int d, int64_t total,
                     spk_err *err) {
  spk_shape want = a->in;
  char b1[128], b2[128];
  if (total >= 0)
    want.dim[d] = total;
  int ok = a->out.ndim == want.ndim;
  for (int i = 0; ok && i < want.ndim; i++)
    ok = (i == d && total < 0) || a->out.dim[i] == want.dim[i];
  if (ok)
    return SPK_OK;
  if (total < 0)
    want.dim[d] = a->out.ndim > d ? a->out.dim[d] : 0;
  return spk_err_set(err, SPK_EINVAL,
                     "rank %d: output shape %s should be %s", rank,
                     spk_shape_str(&a->out, b1, sizeof(b1)),
                     spk_shape_str(&want, b2, sizeof(b2)));
}

int spk_check_all_gather(const spk_op_args *a, int world, int rank,
                         spk_err *err) {
  int d;
  int rc = spk_dim_normalize(a->dims[0], a->in.ndim, "gather dim", &d, err);
  if (rc < 0)
    return rc;
  if (a->ndims != 1)
    return spk_err_set(err, SPK_EINVAL, "all_gather takes 1 dim, got %d",
                       a->ndims);
  rc = check_sizes(a, world, rank, d, err);
  if (rc < 0)
    return rc;
  int64_t total = -1; /* unknown without a size list: checked at match */
  if (a->nsizes) {
    total = 0;
    for (int r = 0; r < world; r++)
      total += a->sizes[r];
  }
  return check_out(a, rank, d, total, err);
}

int spk_plan_all_gather(const spk_op_args *const *args, int world,
                        spk_plan *plan, spk_err *err) {
  int d;
  int rc = spk__agree_dim(args, world, 0, "gather dim", &d, err);
  if (rc < 0)
    return rc;
  int64_t total = 0;
  for (int r = 0; r < world; r++) {
    for (int i = 0; i < args[0]->in.ndim; i++)
      if (i != d && args[r]->in.dim[i] != args[0]->in.dim[i])
        return spk_err_set(err, SPK_EMISMATCH,
                           "ranks disagree on input dim %d: rank 0 has %lld, "
                           "rank %d has %lld",
                           i, (long long)args[0]->in.dim[i], r,
                           (long long)args[r]->in.dim[i]);
    /* An empty tensor may carry a huge dim: the sum must not wrap. */
    if (__builtin_add_overflow(total, args[r]->in.dim[d], &total))
      return spk_err_set(err, SPK_EINVAL,
                         "gathered size along dim %d overflows int64 at "
                         "rank %d (%lld)",
                         d, r, (long long)args[r]->in.dim[d]);
  }
  for (int r = 0; r < world; r++) {
    rc = check_out(args[r], r, d, total, err);
    if (rc < 0)
      return rc;
  }
  size_t esize = spk_dtype_size(args[0]->dtype);
  int64_t zero[SPK_MAX_DIMS] = {0}, at[SPK_MAX_DIMS] = {0};
  for (int k = 0; k < world; k++) {
    spk_block_end src = {(uint32_t)k, SPK_T_IN, &args[k]->in, zero};
    const uint32_t *list;
    uint32_t n = spk_plan_partners(plan, (uint32_t)k, &list);
    for (uint32_t i = 0; i < n; i++) {
      uint32_t r = SPK_PARTNER(list, i);
      spk_block_end dst = {r, SPK_T_OUT, &args[r]->out, at};
      rc = spk_plan_add_block(plan, &src, &dst, args[k]->in.dim, esize, err);
      if (rc < 0)
        return rc;
    }
    at[d] += args[k]->in.dim[d];
  }
  return SPK_OK;
}
