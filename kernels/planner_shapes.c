/* Shape checks that several planners share. */
#include "planner_internal.h"

int spk__out_equals(const spk_op_args *a, int rank, const spk_shape *want,
                    spk_err *err) {
  char b1[128], b2[128];
  if (spk_shape_equal(&a->out, want))
    return SPK_OK;
  return spk_err_set(err, SPK_EINVAL, "rank %d: output shape %s should be %s",
                     rank, spk_shape_str(&a->out, b1, sizeof(b1)),
                     spk_shape_str(want, b2, sizeof(b2)));
}

int spk__out_resized(const spk_op_args *a, int rank, int d, int64_t len,
                     spk_err *err) {
  spk_shape want = a->in;
  want.dim[d] = len;
  return spk__out_equals(a, rank, &want, err);
}

int spk__same_in_shape(const spk_op_args *const *args, int world,
                       spk_err *err) {
  char b1[128], b2[128];
  for (int r = 1; r < world; r++)
    if (!spk_shape_equal(&args[r]->in, &args[0]->in))
      return spk_err_set(err, SPK_EMISMATCH,
                         "ranks disagree on input shape: rank 0 has %s, "
                         "rank %d has %s",
                         spk_shape_str(&args[0]->in, b1, sizeof(b1)), r,
                         spk_shape_str(&args[r]->in, b2, sizeof(b2)));
  return SPK_OK;
}
