/* The op list: every op kind, once. The enum (types.h), the names
 * (types.c), the planner table (planner.c), the output-shape rule
 * (out_shape.c), the gradient pairs of the client and the Python package
 * (spc_op_info) and the checks of spcoll.h's SPC_OP_* values
 * (client/client_op.c) are all made from it.
 *
 * Adding an op: one row here and one planner file plan_<name>.c that
 * defines spk_plan_<name> and spk_check_<name> (and spk_out_<name> when
 * its shape rule is CUSTOM); spcoll.h then needs SPC_OP_<KIND> (the build
 * fails until it has it). docs/architecture.md, "Adding an op".
 *
 * A row: X(KIND, name, number, shape, data, shared, grad, scale)
 *   KIND    SPK_OP_<KIND>, SPC_OP_<KIND>
 *   name    spk_op_name(), the planner's functions, the Python op
 *   number  the wire value (OpRequest.op); 1.. without gaps, never reused
 *   shape   how out's shape follows from in's along the op's dim d:
 *           SAME     out = in (all_reduce)
 *           SPLIT    piece r of in along d (sizes[r], or the split rule)
 *           GATHER   the sum of sizes when given, else in * w along d
 *           DIVIDED  in / w along d
 *           CUSTOM   spk_out_<name> (its planner file) computes it
 *   data    COPY moves values; REDUCE combines them (takes a reduce op)
 *   shared  1: every rank passes the same size lists (checked); 0: each
 *           rank its own (all_to_all_v)
 *   grad    the op whose run with the same arguments is this op's
 *           gradient (NONE: none; all_to_all and all_to_all_v swap their
 *           dims or lists, all_gather has a second one, reduce_scatter)
 *   scale   that gradient's grad scale (spk scale: NONE, UP, DOWN) */
#ifndef SPK_OP_LIST_H
#define SPK_OP_LIST_H

#define SPK_OP_LIST(X)                                                       \
  X(SPLIT, split, 1, SPLIT, COPY, 1, ALL_GATHER, DOWN)                       \
  X(ALL_GATHER, all_gather, 2, GATHER, COPY, 1, SPLIT, UP)                   \
  X(ALL_TO_ALL, all_to_all, 3, CUSTOM, COPY, 1, ALL_TO_ALL, NONE)            \
  X(ALL_TO_ALL_V, all_to_all_v, 4, CUSTOM, COPY, 0, ALL_TO_ALL_V, NONE)      \
  X(ALL_REDUCE, all_reduce, 5, SAME, REDUCE, 1, NONE, NONE)                  \
  X(REDUCE_SCATTER, reduce_scatter, 6, SPLIT, REDUCE, 1, ALL_GATHER, NONE)   \
  X(ZIGZAG_SPLIT, zigzag_split, 7, DIVIDED, COPY, 1, ZIGZAG_GATHER, DOWN)    \
  X(ZIGZAG_GATHER, zigzag_gather, 8, GATHER, COPY, 1, ZIGZAG_SPLIT, UP)      \
  X(PACKED_SPLIT, packed_split, 9, CUSTOM, COPY, 1, PACKED_GATHER, DOWN)     \
  X(PACKED_GATHER, packed_gather, 10, GATHER, COPY, 1, PACKED_SPLIT, UP)

/* How an op's output shape follows from its input's (the shape column). */
typedef enum {
  SPK_SHAPE_SAME,
  SPK_SHAPE_SPLIT,
  SPK_SHAPE_GATHER,
  SPK_SHAPE_DIVIDED,
  SPK_SHAPE_CUSTOM
} spk_shape_rule;

/* The data column. */
enum { SPK_DATA_COPY = 0, SPK_DATA_REDUCE = 1 };

#endif
