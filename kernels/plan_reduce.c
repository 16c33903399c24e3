/* all_reduce and reduce_scatter. Reduce steps read every input once:
 * all_reduce reduces chunk c of the flat tensor into one owner's output
 * (owners rotate so the work spreads), then copies the chunk to the other
 * ranks' outputs; reduce_scatter reduces each rank's piece straight into
 * that rank's output. */
#include <stdlib.h>

#include "planner_internal.h"
#include "split_rule.h"

int spk_check_all_reduce(const spk_op_args *a, int world, int rank,
                         spk_err *err) {
  (void)world;
  if (a->ndims != 0 || a->nsizes != 0 || a->nsizes2 != 0)
    return spk_err_set(err, SPK_EINVAL, "all_reduce takes no dims or sizes");
  return spk__out_equals(a, rank, &a->in, err);
}

int spk_plan_all_reduce(const spk_op_args *const *args, int world,
                        spk_plan *plan, spk_err *err) {
  int rc = spk__same_in_shape(args, world, err);
  if (rc < 0)
    return rc;
  size_t esize = spk_dtype_size(args[0]->dtype);
  int64_t n;
  spk_shape_numel(&args[0]->in, esize, &n, NULL);
  spk_shape flat = {1, {n}};
  spk_block_end *srcs = malloc((size_t)world * sizeof(*srcs));
  if (srcs == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "malloc of %d sources failed",
                       world);
  for (int c = 0; c < world && rc == SPK_OK; c++) {
    int64_t at[1] = {spk_split_offset(n, world, c)};
    int64_t ext[1] = {spk_split_size(n, world, c)};
    uint32_t owner = (uint32_t)c;
    spk_block_end dst = {owner, SPK_T_OUT, &flat, at};
    const uint32_t *list;
    uint32_t np = spk_plan_partners(plan, owner, &list);
    for (uint32_t i = 0; i < np; i++)
      srcs[i] = (spk_block_end){SPK_PARTNER(list, i), SPK_T_IN, &flat, at};
    rc = spk_plan_add_reduce(plan, &dst, srcs, (int)np, ext, esize, err);
    for (uint32_t i = 0; rc == SPK_OK && i < np; i++) {
      spk_block_end to = {SPK_PARTNER(list, i), SPK_T_OUT, &flat, at};
      if (to.rank != owner)
        rc = spk_plan_add_block(plan, &dst, &to, ext, esize, err);
    }
  }
  free(srcs);
  return rc;
}

/* Piece sizes along d: the caller's list or the split rule. */
static void pieces(const spk_op_args *a, int world, int d, int64_t *sizes) {
  if (a->nsizes)
    for (int r = 0; r < world; r++)
      sizes[r] = a->sizes[r];
  else
    spk_split_sizes(a->in.dim[d], world, sizes);
}

int spk_check_reduce_scatter(const spk_op_args *a, int world, int rank,
                             spk_err *err) {
  int d;
  int rc = spk_dim_normalize(a->dims[0], a->in.ndim, "reduce_scatter dim", &d,
                             err);
  if (rc < 0)
    return rc;
  if (a->ndims != 1)
    return spk_err_set(err, SPK_EINVAL, "reduce_scatter takes 1 dim, got %d",
                       a->ndims);
  if (a->nsizes != 0) {
    if (a->nsizes != world)
      return spk_err_set(err, SPK_EINVAL,
                         "reduce_scatter sizes has %d entries, world size is "
                         "%d", a->nsizes, world);
    int64_t sum = 0;
    for (int r = 0; r < world; r++)
      sum += a->sizes[r];
    if (sum != a->in.dim[d])
      return spk_err_set(err, SPK_EINVAL,
                         "reduce_scatter sizes sum to %lld but dim %d has "
                         "size %lld", (long long)sum, d,
                         (long long)a->in.dim[d]);
  }
  spk_shape want = a->in;
  want.dim[d] = a->nsizes ? a->sizes[rank]
                          : spk_split_size(a->in.dim[d], world, rank);
  return spk__out_equals(a, rank, &want, err);
}

int spk_plan_reduce_scatter(const spk_op_args *const *args, int world,
                            spk_plan *plan, spk_err *err) {
  int d;
  int rc = spk__agree_dim(args, world, 0, "reduce_scatter dim", &d, err);
  if (rc == SPK_OK)
    rc = spk__same_in_shape(args, world, err);
  int64_t *sizes = malloc((size_t)world * sizeof(*sizes));
  spk_block_end *srcs = malloc((size_t)world * sizeof(*srcs));
  if (rc == SPK_OK && (sizes == NULL || srcs == NULL))
    rc = spk_err_set(err, SPK_ENO_MEMORY, "malloc for %d ranks failed", world);
  if (rc == SPK_OK)
    pieces(args[0], world, d, sizes);
  size_t esize = spk_dtype_size(args[0]->dtype);
  int64_t zero[SPK_MAX_DIMS] = {0}, at[SPK_MAX_DIMS] = {0};
  for (int r = 0; rc == SPK_OK && r < world; r++) {
    spk_block_end dst = {(uint32_t)r, SPK_T_OUT, &args[r]->out, zero};
    const uint32_t *list;
    uint32_t np = spk_plan_partners(plan, (uint32_t)r, &list);
    for (uint32_t i = 0; i < np; i++) {
      uint32_t k = SPK_PARTNER(list, i);
      srcs[i] = (spk_block_end){k, SPK_T_IN, &args[k]->in, at};
    }
    rc = spk_plan_add_reduce(plan, &dst, srcs, (int)np, args[r]->out.dim,
                             esize, err);
    at[d] += sizes[r];
  }
  free(sizes);
  free(srcs);
  return rc;
}
