/* Planners: (op, each rank's arguments) -> copy plan. Pure functions: no
 * I/O, no global state; linked into the daemon and the client. */
#ifndef SPK_PLANNER_H
#define SPK_PLANNER_H

#include "plan.h"
#include "types.h"

/* Check that the world's ranks agree on the op (args[r] is rank r's
 * request) and append its moves to plan. On failure the plan is left for
 * the caller to free and err names the field and the ranks:
 * SPK_EMISMATCH when ranks disagree, SPK_EINVAL for a bad argument. */
int spk_plan_build(const spk_op_args *const *args, int world, spk_plan *plan,
                   spk_err *err);

/* Checks one rank can make alone, before anything is sent: dims in range,
 * size lists of the right length and sum, output shape where it follows
 * from this rank's arguments. */
int spk_args_check(const spk_op_args *args, int world, int rank, spk_err *err);

/* The output shape of this rank from its own arguments (args->out is
 * ignored), checked with spk_args_check. Where the op needs other ranks'
 * sizes and no list is given (an unequal all_gather), it assumes every rank
 * holds what this one does. */
int spk_out_shape(const spk_op_args *args, int world, int rank,
                  spk_shape *out_p, spk_err *err);

/* Fields every op's ranks must share (op, dtype, ndim, scalar, flags, and
 * the size lists when shared_sizes); SPK_EMISMATCH naming the first field
 * and the two ranks. */
int spk_args_agree(const spk_op_args *const *args, int world,
                   int shared_sizes, spk_err *err);

/* One planner and one single-rank check per op, each in plan_<op>.c. */
#define SPK_PLANNER_DECL(name)                                               \
  int spk_plan_##name(const spk_op_args *const *args, int world,             \
                      spk_plan *plan, spk_err *err);                         \
  int spk_check_##name(const spk_op_args *args, int world, int rank,         \
                       spk_err *err);
SPK_PLANNER_DECL(split)
SPK_PLANNER_DECL(all_gather)
SPK_PLANNER_DECL(all_to_all)
SPK_PLANNER_DECL(all_to_all_v)
SPK_PLANNER_DECL(all_reduce)
SPK_PLANNER_DECL(reduce_scatter)
SPK_PLANNER_DECL(zigzag_split)
SPK_PLANNER_DECL(zigzag_gather)
SPK_PLANNER_DECL(packed_split)
SPK_PLANNER_DECL(packed_gather)
#undef SPK_PLANNER_DECL

#endif
