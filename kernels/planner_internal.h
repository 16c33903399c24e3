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

#endif
