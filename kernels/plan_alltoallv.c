/* all_to_all_v along dim 0. Rank i's sizes[j] rows go to rank j: rank i
 * sends rows [sum(sizes_i[:j]), + sizes_i[j]) of its input, and rank j puts
 * them at rows [sum(sizes2_j[:i]), + sizes2_j[i]) of its output, so every
 * output holds its sources' rows in rank order. The lists are per rank
 * (what it sends, what it receives), not shared: each pair of ranks must
 * agree on the rows between them. Every byte is copied once, input to its
 * final place in the output. */
#include <stdlib.h>
#include <string.h>

#include "planner_internal.h"

/* The op has one dim, 0: given or not, spelled from either end. */
static int check_dim(const spk_op_args *a, spk_err *err) {
  if (a->ndims == 0)
    return SPK_OK;
  if (a->ndims != 1)
    return spk_err_set(err, SPK_EINVAL,
                       "all_to_all_v takes at most 1 dim (0), got %d",
                       a->ndims);
  int d;
  int rc = spk_dim_normalize(a->dims[0], a->in.ndim, "all_to_all_v dim", &d,
                             err);
  if (rc == SPK_OK && d != 0)
    rc = spk_err_set(err, SPK_EINVAL,
                     "all_to_all_v runs along dim 0, got dim %d", a->dims[0]);
  return rc;
}

/* One split list: w entries summing to the rows of its tensor. Entries are
 * non-negative and their sum fits in int64 (spk_args_check's list_check). */
static int check_list(const int64_t *l, int n, int world, int rank,
                      const char *what, const char *tensor, int64_t rows,
                      spk_err *err) {
  if (n != world)
    return spk_err_set(err, SPK_EINVAL,
                       "rank %d: %s has %d entries, world size is %d", rank,
                       what, n, world);
  int64_t sum = 0;
  for (int j = 0; j < n; j++)
    sum += l[j];
  if (sum != rows)
    return spk_err_set(err, SPK_EINVAL,
                       "rank %d: %s sums to %lld but its %s has %lld rows",
                       rank, what, (long long)sum, tensor, (long long)rows);
  return SPK_OK;
}

/* The output is the input but for its rows (checked against sizes2). */
static int check_out(const spk_op_args *a, int rank, spk_err *err) {
  spk_shape want = a->in;
  want.dim[0] = a->out.dim[0];
  return spk__out_equals(a, rank, &want, err);
}

int spk_check_all_to_all_v(const spk_op_args *a, int world, int rank,
                           spk_err *err) {
  int rc = check_dim(a, err);
  if (rc == SPK_OK)
    rc = check_out(a, rank, err);
  if (rc == SPK_OK)
    rc = check_list(a->sizes, a->nsizes, world, rank, "sizes (input splits)",
                    "input", a->in.dim[0], err);
  if (rc == SPK_OK)
    rc = check_list(a->sizes2, a->nsizes2, world, rank,
                    "sizes2 (output splits)", "output", a->out.dim[0], err);
  return rc;
}

/* Rows may differ between ranks; every other dim may not. */
static int agree_rest(const spk_op_args *const *args, int r, spk_err *err) {
  const spk_shape *i0 = &args[0]->in, *ir = &args[r]->in;
  for (int i = 1; i < i0->ndim; i++)
    if (ir->dim[i] != i0->dim[i])
      return spk_err_set(err, SPK_EMISMATCH,
                         "ranks disagree on input dim %d: rank 0 has %lld, "
                         "rank %d has %lld",
                         i, (long long)i0->dim[i], r, (long long)ir->dim[i]);
  return SPK_OK;
}

/* What rank i sends to j is what j expects from i. */
static int agree_pair(const spk_op_args *const *args, int i, int j,
                      spk_err *err) {
  int64_t sent = args[i]->sizes[j], want = args[j]->sizes2[i];
  if (sent == want)
    return SPK_OK;
  return spk_err_set(err, SPK_EMISMATCH,
                     "rank %d sends %lld rows to rank %d (its sizes[%d]) but "
                     "rank %d expects %lld rows from rank %d (its sizes2[%d])",
                     i, (long long)sent, j, j, j, (long long)want, i, i);
}

/* Rank i's blocks in order of destination j; placed[j] counts the rows
 * rank j already received from ranks before i, where i's rows land. */
static int add_moves(const spk_op_args *const *args, int world,
                     int64_t *placed, spk_plan *plan, spk_err *err) {
  size_t esize = spk_dtype_size(args[0]->dtype);
  int64_t src_at[SPK_MAX_DIMS] = {0}, dst_at[SPK_MAX_DIMS] = {0};
  int64_t ext[SPK_MAX_DIMS];
  for (int i = 0; i < world; i++) {
    src_at[0] = 0;
    spk_block_end src = {(uint32_t)i, SPK_T_IN, &args[i]->in, src_at};
    memcpy(ext, args[i]->in.dim, sizeof(ext));
    for (int j = 0; j < world; j++) {
      spk_block_end dst = {(uint32_t)j, SPK_T_OUT, &args[j]->out, dst_at};
      dst_at[0] = placed[j];
      ext[0] = args[i]->sizes[j];
      int rc = spk_plan_add_block(plan, &src, &dst, ext, esize, err);
      if (rc < 0)
        return rc;
      src_at[0] += ext[0];
      placed[j] += ext[0];
    }
  }
  return SPK_OK;
}

int spk_plan_all_to_all_v(const spk_op_args *const *args, int world,
                          spk_plan *plan, spk_err *err) {
  for (int i = 0; i < world; i++) {
    int rc = agree_rest(args, i, err);
    for (int j = 0; rc == SPK_OK && j < world; j++)
      rc = agree_pair(args, i, j, err);
    if (rc < 0)
      return rc;
  }
  int64_t *placed = calloc((unsigned)world, sizeof(*placed));
  if (placed == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY,
                       "all_to_all_v: calloc of %d row counts failed", world);
  int rc = add_moves(args, world, placed, plan, err);
  free(placed);
  return rc;
}

/* Output: the rows this rank receives, the sum of its output splits. */
int spk_out_all_to_all_v(const spk_op_args *a, int world, int rank,
                         spk_shape *out, spk_err *err) {
  (void)world, (void)rank;
  int d, rc = spk__out_dim(a, &d, err);
  if (rc < 0)
    return rc;
  out->dim[d] = spk__list_sum(a->sizes2, a->nsizes2);
  return SPK_OK;
}
