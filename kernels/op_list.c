/* The op list (op_list.h) as a table: what the planners, the output-shape
 * rule, the client and the Python package (through spc_op_info) read. */
#include "planner.h"

/* Only a CUSTOM shape rule has a function of its own. */
#define SPK_OUT_FN_SAME(name) NULL
#define SPK_OUT_FN_SPLIT(name) NULL
#define SPK_OUT_FN_GATHER(name) NULL
#define SPK_OUT_FN_DIVIDED(name) NULL
#define SPK_OUT_FN_CUSTOM(name) spk_out_##name

#define SPK_OP_ROW(K, name, num, shape, data, shared, grad, scale)          \
  [SPK_OP_##K] = {SPK_OP_##K,                                                \
                  #name,                                                     \
                  SPK_SHAPE_##shape,                                         \
                  SPK_DATA_##data == SPK_DATA_REDUCE,                        \
                  shared,                                                    \
                  SPK_OP_##grad,                                             \
                  SPK_SCALE_##scale,                                         \
                  spk_plan_##name,                                           \
                  spk_check_##name,                                          \
                  SPK_OUT_FN_##shape(name)},
static const spk_op_row rows[SPK_OP_COUNT] = {SPK_OP_LIST(SPK_OP_ROW)};
#undef SPK_OP_ROW

/* Kinds are 1..SPK_OP_COUNT-1: a number past that would index past the
 * table (and a duplicate fails -Woverride-init). */
#define SPK_OP_IN_RANGE(K, name, num, shape, data, shared, grad, scale)     \
  _Static_assert(num > 0 && num < SPK_OP_COUNT,                              \
                 "op " #name ": number " #num " outside 1..rows");
SPK_OP_LIST(SPK_OP_IN_RANGE)
#undef SPK_OP_IN_RANGE

const spk_op_row *spk_op_row_get(spk_op_kind op) {
  if ((unsigned)op >= SPK_OP_COUNT || rows[op].name == NULL)
    return NULL;
  return &rows[op];
}

const char *spk_op_name(spk_op_kind op) {
  const spk_op_row *row = spk_op_row_get(op);
  return row ? row->name : "unknown-op";
}
