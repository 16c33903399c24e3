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

/* One planner and one single-rank check per op, each in plan_<op>.c
 * (and the output shape, for a CUSTOM shape rule), declared for every row
 * of the op list. */
#define SPK_PLANNER_DECL(K, name, num, shape, data, shared, grad, scale)    \
  int spk_plan_##name(const spk_op_args *const *args, int world,             \
                      spk_plan *plan, spk_err *err);                         \
  int spk_check_##name(const spk_op_args *args, int world, int rank,         \
                       spk_err *err);                                        \
  int spk_out_##name(const spk_op_args *args, int world, int rank,           \
                     spk_shape *out, spk_err *err);
SPK_OP_LIST(SPK_PLANNER_DECL)
#undef SPK_PLANNER_DECL

/* One row of the op list, as the code sees it (op_list.c). */
typedef struct {
  spk_op_kind kind;
  const char *name;
  spk_shape_rule shape;
  int reduces;       /* combines values: takes a reduce op */
  int shared_sizes;  /* every rank passes the same size lists */
  spk_op_kind grad;  /* SPK_OP_NONE: no gradient op */
  int grad_scale;    /* SPK_SCALE_* of that gradient */
  int (*plan)(const spk_op_args *const *, int, spk_plan *, spk_err *);
  int (*check)(const spk_op_args *, int, int, spk_err *);
  /* CUSTOM shape rule only: out starts as in; it sets the op's dims. */
  int (*out)(const spk_op_args *, int, int, spk_shape *, spk_err *);
} spk_op_row;

/* The row of op, or NULL when op is no row of the list. */
const spk_op_row *spk_op_row_get(spk_op_kind op);


#endif
