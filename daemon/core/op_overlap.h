/* The overlap check of an op's tensors (kernels/plan_overlap.c), fed with
 * where this node's tensors lie. Loop thread only. */
#ifndef SPD_OP_OVERLAP_H
#define SPD_OP_OVERLAP_H

#include "op.h"

/* After the plan is built: refuse tensors that overlap outside an
 * in-place layout (SPK_EINVAL naming them), and drop the moves an
 * in-place op does not need. Other nodes' ranks overlap nothing here; a
 * refusal in a group that spans nodes is told to the other nodes and
 * breaks the group (they cannot see this node's memory). */
int spd_op_overlap_check(spd_op *op, spk_err *err);

#endif
