/* Packed (varlen) sequence split and its inverse. sizes holds the lengths
 * L_0..L_{n-1} of sequences packed one after another along d; each
 * sequence is split over the ranks by the split rule, and rank r holds its
 * pieces of every sequence, concatenated in sequence order. */
#include "planner_internal.h"
#include "split_rule.h"

static int one_dim(const spk_op_args *a, int *d, spk_err *err) {
  if (a->ndims != 1)
    return spk_err_set(err, SPK_EINVAL, "%s takes 1 dim, got %d",
                       spk_op_name(a->op), a->ndims);
  if (a->nsizes < 1)
    return spk_err_set(err, SPK_EINVAL,
                       "%s needs the sequence lengths in sizes, got %d",
                       spk_op_name(a->op), a->nsizes);
  return spk_dim_normalize(a->dims[0], a->in.ndim, "packed dim", d, err);
}

/* Sum of the lengths; spk_args_check made sure it fits. */
static int64_t total_len(const spk_op_args *a) {
  int64_t sum = 0;
  for (int i = 0; i < a->nsizes; i++)
    sum += a->sizes[i];
  return sum;
}

/* Length of rank's packed pieces: its piece of every sequence. */
static int64_t local_len(const spk_op_args *a, int world, int rank) {
  int64_t sum = 0;
  for (int i = 0; i < a->nsizes; i++)
    sum += spk_split_size(a->sizes[i], world, rank);
  return sum;
}

/* Inputs agree on every dim but `skip` (-1: on every dim). */
static int same_input(const spk_op_args *const *args, int world, int skip,
                      spk_err *err) {
  const spk_shape *s0 = &args[0]->in;
  for (int r = 1; r < world; r++)
    for (int i = 0; i < s0->ndim; i++)
      if (i != skip && args[r]->in.dim[i] != s0->dim[i])
        return spk_err_set(err, SPK_EMISMATCH,
                           "ranks disagree on input dim %d: rank 0 has %lld, "
                           "rank %d has %lld",
                           i, (long long)s0->dim[i], r,
                           (long long)args[r]->in.dim[i]);
  return SPK_OK;
}

int spk_check_packed_split(const spk_op_args *a, int world, int rank,
                           spk_err *err) {
  int d;
  int rc = one_dim(a, &d, err);
  if (rc < 0)
    return rc;
  int64_t total = total_len(a);
  if (total > a->in.dim[d]) /* elements past the sum are padding */
    return spk_err_set(err, SPK_EINVAL,
                       "packed sequence lengths sum to %lld but input dim %d "
                       "has size %lld",
                       (long long)total, d, (long long)a->in.dim[d]);
  return spk__out_resized(a, rank, d, local_len(a, world, rank), err);
}

int spk_check_packed_gather(const spk_op_args *a, int world, int rank,
                            spk_err *err) {
  int d;
  int rc = one_dim(a, &d, err);
  if (rc < 0)
    return rc;
  int64_t local = local_len(a, world, rank);
  if (a->in.dim[d] != local)
    return spk_err_set(err, SPK_EINVAL,
                       "rank %d holds %lld along dim %d but its pieces of "
                       "the packed sequences sum to %lld",
                       rank, (long long)a->in.dim[d], d, (long long)local);
  /* The output may be longer than the packed part, as the input of the
   * packed split was: the tail is the caller's (zero for a gradient). */
  int64_t len = total_len(a);
  if (a->out.ndim == a->in.ndim && a->out.dim[d] > len)
    len = a->out.dim[d];
  return spk__out_resized(a, rank, d, len, err);
}

typedef struct {
  const spk_op_args *a0; /* the shared size list and dtype */
  int world, d;
} pk_ctx;

/* Copy rank k's piece of every sequence between `full` (the packing, at
 * the piece's position) and `packed` (rank k's pieces, back to back). */
static int add_pieces(const pk_ctx *p, int k, spk_block_end full,
                      spk_block_end packed, int gather, spk_plan *plan,
                      spk_err *err) {
  int64_t fo[SPK_MAX_DIMS] = {0}, po[SPK_MAX_DIMS] = {0};
  int64_t ext[SPK_MAX_DIMS], start = 0;
  size_t esize = spk_dtype_size(p->a0->dtype);
  for (int i = 0; i < packed.shape->ndim; i++)
    ext[i] = packed.shape->dim[i];
  full.origin = fo, packed.origin = po;
  int rc = SPK_OK;
  for (int i = 0; rc == SPK_OK && i < p->a0->nsizes; i++) {
    int64_t len = p->a0->sizes[i];
    fo[p->d] = start + spk_split_offset(len, p->world, k);
    ext[p->d] = spk_split_size(len, p->world, k);
    rc = gather ? spk_plan_add_block(plan, &packed, &full, ext, esize, err)
                : spk_plan_add_block(plan, &full, &packed, ext, esize, err);
    po[p->d] += ext[p->d];
    start += len;
  }
  return rc;
}

int spk_plan_packed_split(const spk_op_args *const *args, int world,
                          spk_plan *plan, spk_err *err) {
  pk_ctx p = {args[0], world, 0};
  int rc = spk__agree_dim(args, world, 0, "packed dim", &p.d, err);
  if (rc == SPK_OK)
    rc = same_input(args, world, -1, err);
  for (int r = 0; rc == SPK_OK && r < world; r++) {
    spk_block_end full = {(uint32_t)r, SPK_T_IN, &args[r]->in, NULL};
    spk_block_end packed = {(uint32_t)r, SPK_T_OUT, &args[r]->out, NULL};
    rc = add_pieces(&p, r, full, packed, 0, plan, err);
  }
  return rc;
}

/* Every rank's output gets every rank's pieces. */
int spk_plan_packed_gather(const spk_op_args *const *args, int world,
                           spk_plan *plan, spk_err *err) {
  pk_ctx p = {args[0], world, 0};
  int rc = spk__agree_dim(args, world, 0, "packed dim", &p.d, err);
  if (rc == SPK_OK) /* dim d was checked per rank against the rule */
    rc = same_input(args, world, p.d, err);
  for (int k = 0; rc == SPK_OK && k < world; k++) {
    const uint32_t *list;
    uint32_t n = spk_plan_partners(plan, (uint32_t)k, &list);
    for (uint32_t i = 0; rc == SPK_OK && i < n; i++) {
      uint32_t r = SPK_PARTNER(list, i);
      spk_block_end packed = {(uint32_t)k, SPK_T_IN, &args[k]->in, NULL};
      spk_block_end full = {r, SPK_T_OUT, &args[r]->out, NULL};
      rc = add_pieces(&p, k, full, packed, 1, plan, err);
    }
  }
  return rc;
}

/* Output: this rank's pieces of every sequence. The list is not checked
 * yet: a negative entry or an overflow gives -1, which the check that
 * follows rejects naming the list. */
int spk_out_packed_split(const spk_op_args *a, int world, int rank,
                         spk_shape *out, spk_err *err) {
  int d, rc = spk__out_dim(a, &d, err);
  if (rc < 0)
    return rc;
  int64_t n = 0;
  for (int i = 0; i < a->nsizes && n >= 0; i++)
    if (a->sizes[i] < 0 ||
        __builtin_add_overflow(n, spk_split_size(a->sizes[i], world, rank), &n))
      n = -1;
  out->dim[d] = n;
  return SPK_OK;
}
