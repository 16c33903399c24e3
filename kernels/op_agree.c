#include <string.h>

#include "planner.h"

static int list_equal(int n1, const int64_t *l1, int n2, const int64_t *l2) {
  if (n1 != n2)
    return 0;
  return n1 == 0 || memcmp(l1, l2, sizeof(*l1) * (size_t)n1) == 0;
}

static int disagree(spk_err *err, const char *field, int r, long long a,
                    long long b) {
  return spk_err_set(err, SPK_EMISMATCH,
                     "ranks disagree on %s: rank 0 has %lld, rank %d has %lld",
                     field, a, r, b);
}

int spk_args_agree(const spk_op_args *const *args, int world,
                   int shared_sizes, spk_err *err) {
  const spk_op_args *a0 = args[0];
  for (int r = 1; r < world; r++) {
    const spk_op_args *a = args[r];
    if (a->op != a0->op)
      return spk_err_set(err, SPK_EMISMATCH,
                         "ranks disagree on op: rank 0 has %s, rank %d has %s",
                         spk_op_name(a0->op), r, spk_op_name(a->op));
    if (a->dtype != a0->dtype)
      return spk_err_set(
          err, SPK_EMISMATCH,
          "ranks disagree on dtype: rank 0 has %s, rank %d has %s",
          spk_dtype_name(a0->dtype), r, spk_dtype_name(a->dtype));
    if (a->in.ndim != a0->in.ndim)
      return disagree(err, "input ndim", r, a0->in.ndim, a->in.ndim);
    if (a->ndims != a0->ndims)
      return disagree(err, "number of dims", r, a0->ndims, a->ndims);
    if (shared_sizes &&
        !list_equal(a->nsizes, a->sizes, a0->nsizes, a0->sizes))
      return spk_err_set(err, SPK_EMISMATCH,
                         "ranks disagree on sizes: rank 0 and rank %d differ",
                         r);
    if (shared_sizes &&
        !list_equal(a->nsizes2, a->sizes2, a0->nsizes2, a0->sizes2))
      return spk_err_set(err, SPK_EMISMATCH,
                         "ranks disagree on sizes2: rank 0 and rank %d differ",
                         r);
    for (int i = 0; i < a->ndims; i++)
      if (a->dims[i] != a0->dims[i] && a->in.ndim == a0->in.ndim) {
        int d0 = a0->dims[i] < 0 ? a0->dims[i] + a0->in.ndim : a0->dims[i];
        int d = a->dims[i] < 0 ? a->dims[i] + a->in.ndim : a->dims[i];
        if (d != d0)
          return disagree(err, i == 0 ? "dim" : "second dim", r, d0, d);
      }
    if (a->scalar != a0->scalar)
      return disagree(err, "scalar parameter", r, a0->scalar, a->scalar);
    if (a->flags != a0->flags)
      return disagree(err, "flags", r, a0->flags, a->flags);
  }
  return SPK_OK;
}

/* Normalize dims[i] of every rank and check they name the same dim. */
int spk__agree_dim(const spk_op_args *const *args, int world, int i,
                   const char *what, int *dim_p, spk_err *err) {
  int d0, d;
  int rc = spk_dim_normalize(args[0]->dims[i], args[0]->in.ndim, what, &d0,
                             err);
  if (rc < 0)
    return rc;
  for (int r = 1; r < world; r++) {
    rc = spk_dim_normalize(args[r]->dims[i], args[r]->in.ndim, what, &d, err);
    if (rc < 0)
      return rc;
    if (d != d0)
      return disagree(err, what, r, d0, d);
  }
  *dim_p = d0;
  return SPK_OK;
}
