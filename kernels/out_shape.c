/* The output shape each op gives a rank, from that rank's arguments alone:
 * what the client tells a caller before anything is sent. */
#include "planner_internal.h"
#include "split_rule.h"

/* The list's sum, or -1 when it overflows or holds a negative entry: the
 * caller's list is not checked yet, and the check that follows rejects
 * the -1 with a message naming the list. */
static int64_t sum(const int64_t *l, int n) {
  int64_t s = 0;
  for (int i = 0; i < n; i++)
    if (l[i] < 0 || __builtin_add_overflow(s, l[i], &s))
      return -1;
  return s;
}

static int64_t piece(const spk_op_args *a, int world, int rank, int d) {
  return a->nsizes ? a->sizes[rank] : spk_split_size(a->in.dim[d], world, rank);
}

static int64_t packed_local(const spk_op_args *a, int world, int rank) {
  int64_t n = 0;
  for (int i = 0; i < a->nsizes; i++)
    if (a->sizes[i] < 0 ||
        __builtin_add_overflow(n, spk_split_size(a->sizes[i], world, rank), &n))
      return -1;
  return n;
}

/* n * world, or -1 when it does not fit (then the check below fails). */
static int64_t times(int64_t n, int world) {
  int64_t r;
  return __builtin_mul_overflow(n, (int64_t)world, &r) ? -1 : r;
}

/* Size along the op's dim(s); every other dim keeps the input's. */
static int64_t out_len(const spk_op_args *a, int world, int rank, int d) {
  switch (a->op) {
  case SPK_OP_SPLIT:
  case SPK_OP_REDUCE_SCATTER: return piece(a, world, rank, d);
  case SPK_OP_ALL_GATHER:
    return a->nsizes ? sum(a->sizes, a->nsizes) : times(a->in.dim[d], world);
  case SPK_OP_ZIGZAG_SPLIT: return a->in.dim[d] / world;
  case SPK_OP_ZIGZAG_GATHER: return times(a->in.dim[d], world);
  case SPK_OP_PACKED_SPLIT: return packed_local(a, world, rank);
  case SPK_OP_PACKED_GATHER: return sum(a->sizes, a->nsizes);
  case SPK_OP_ALL_TO_ALL_V: return sum(a->sizes2, a->nsizes2);
  default: return a->in.dim[d];
  }
}

int spk_out_shape(const spk_op_args *a, int world, int rank, spk_shape *out_p,
                  spk_err *err) {
  spk_op_args probe = *a;
  spk_shape out = a->in;
  int d = 0, rc;
  if (a->op == SPK_OP_ALL_TO_ALL) {
    int g;
    rc = spk_dim_normalize(a->dims[0], a->in.ndim, "scatter dim", &d, err);
    if (rc == SPK_OK)
      rc = spk_dim_normalize(a->dims[1], a->in.ndim, "gather dim", &g, err);
    if (rc < 0)
      return rc;
    out.dim[d] = spk_split_size(a->in.dim[d], world, rank);
    out.dim[g] = a->scalar ? a->scalar : times(a->in.dim[g], world);
  } else if (a->op != SPK_OP_ALL_REDUCE) {
    if (a->ndims >= 1 &&
        (rc = spk_dim_normalize(a->dims[0], a->in.ndim, "dim", &d, err)) < 0)
      return rc;
    out.dim[d] = out_len(a, world, rank, d);
  }
  /* Run the rank's own checks on the answer: a bad argument is reported
   * here, before any rank waits on the op. */
  probe.out = out;
  rc = spk_args_check(&probe, world, rank, err);
  if (rc < 0)
    return rc;
  *out_p = out;
  return SPK_OK;
}
