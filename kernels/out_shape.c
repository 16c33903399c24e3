/* The output shape each op gives a rank, from that rank's arguments alone:
 * what the client tells a caller before anything is sent. The op list's
 * shape column says how; CUSTOM rows compute it in their planner file. */
#include "planner_internal.h"
#include "split_rule.h"

int64_t spk__list_sum(const int64_t *l, int n) {
  int64_t s = 0;
  for (int i = 0; i < n; i++)
    if (l[i] < 0 || __builtin_add_overflow(s, l[i], &s))
      return -1;
  return s;
}

int64_t spk__times_world(int64_t n, int world) {
  int64_t r;
  return __builtin_mul_overflow(n, (int64_t)world, &r) ? -1 : r;
}

int spk__out_dim(const spk_op_args *a, int *d_p, spk_err *err) {
  *d_p = 0;
  return a->ndims >= 1
             ? spk_dim_normalize(a->dims[0], a->in.ndim, "dim", d_p, err)
             : SPK_OK;
}

/* Size along the op's dim d under a table-like rule. */
static int64_t rule_len(const spk_op_row *row, const spk_op_args *a,
                        int world, int rank, int d) {
  switch (row->shape) {
  case SPK_SHAPE_SPLIT:
    return a->nsizes ? a->sizes[rank]
                     : spk_split_size(a->in.dim[d], world, rank);
  case SPK_SHAPE_GATHER:
    return a->nsizes ? spk__list_sum(a->sizes, a->nsizes)
                     : spk__times_world(a->in.dim[d], world);
  case SPK_SHAPE_DIVIDED: return a->in.dim[d] / world;
  default: return a->in.dim[d];
  }
}

int spk_out_shape(const spk_op_args *a, int world, int rank, spk_shape *out_p,
                  spk_err *err) {
  const spk_op_row *row = spk_op_row_get(a->op);
  spk_op_args probe = *a;
  spk_shape out = a->in;
  int d = 0, rc;
  if (row != NULL && row->shape == SPK_SHAPE_CUSTOM) {
    if ((rc = row->out(a, world, rank, &out, err)) < 0)
      return rc;
  } else if (row != NULL && row->shape != SPK_SHAPE_SAME) {
    if ((rc = spk__out_dim(a, &d, err)) < 0)
      return rc;
    out.dim[d] = rule_len(row, a, world, rank, d);
  }
  /* Run the rank's own checks on the answer (an unknown op fails there):
   * a bad argument is reported here, before any rank waits on the op. */
  probe.out = out;
  rc = spk_args_check(&probe, world, rank, err);
  if (rc < 0)
    return rc;
  *out_p = out;
  return SPK_OK;
}
