/* Helpers shared by the planners; not part of the kernels' interface. */
#ifndef SPK_PLANNER_INTERNAL_H
#define SPK_PLANNER_INTERNAL_H

#include "planner.h"

int spk__agree_dim(const spk_op_args *const *args, int world, int i,
                   const char *what, int *dim_p, spk_err *err);

/* The output must be `want` (SPK_EINVAL naming the rank and both shapes). */
int spk__out_equals(const spk_op_args *a, int rank, const spk_shape *want,
                    spk_err *err);
/* The output must be the input with dim d resized to len. */
int spk__out_resized(const spk_op_args *a, int rank, int d, int64_t len,
                     spk_err *err);
/* Every rank's input has rank 0's shape (SPK_EMISMATCH otherwise). */
int spk__same_in_shape(const spk_op_args *const *args, int world,
                       spk_err *err);

/* The list's sum, or -1 when it overflows or holds a negative entry (the
 * caller's list is not checked yet; the check that follows rejects the -1
 * with a message naming the list). */
int64_t spk__list_sum(const int64_t *l, int n);
/* n * world, or -1 when it does not fit (then the op's check fails). */
int64_t spk__times_world(int64_t n, int world);
/* The op's dim for its output shape: dims[0] normalized, 0 without. */
int spk__out_dim(const spk_op_args *a, int *d_p, spk_err *err);

#endif
