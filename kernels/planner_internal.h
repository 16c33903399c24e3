/* Helpers shared by the planners; not part of the kernels' interface. */
#ifndef SPK_PLANNER_INTERNAL_H
#define SPK_PLANNER_INTERNAL_H

#include "planner.h"

int spk__agree_dim(const spk_op_args *const *args, int world, int i,
                   const char *what, int *dim_p, spk_err *err);

#endif
