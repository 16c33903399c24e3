/* The client's side of the op list (kernels/op_list.h): spcoll.h's public
 * kinds held against it at build time, spc_op_info for bindings, and the
 * gradient op of a forward op for the backward functions. */
#include "client_internal.h"
#include "planner.h"

/* A row that spcoll.h lacks, or numbers otherwise, fails the build. */
#define SPC_OP_SAME(K, name, num, shape, data, shared, grad, scale)         \
  _Static_assert((int)SPC_OP_##K == (int)SPK_OP_##K,                         \
                 "SPC_OP_" #K " must be " #num " (kernels/op_list.h)");
SPK_OP_LIST(SPC_OP_SAME)
#undef SPC_OP_SAME
_Static_assert((int)SPC_SCALE_NONE == (int)SPK_SCALE_NONE &&
                   (int)SPC_SCALE_UP == (int)SPK_SCALE_UP &&
                   (int)SPC_SCALE_DOWN == (int)SPK_SCALE_DOWN,
               "public and internal grad scales must match");
_Static_assert((int)SPC_SUM == (int)SPK_RED_SUM &&
                   (int)SPC_MAX == (int)SPK_RED_MAX &&
                   (int)SPC_MIN == (int)SPK_RED_MIN,
               "public and internal reduce ops must match");

int spc_op_info(int kind, const char **name_p, int *grad_kind_p,
                spc_grad_scale *grad_scale_p, int *reduces_p) {
  const spk_op_row *r = spk_op_row_get((spk_op_kind)kind);
  if (r == NULL)
    return SPC_ENOTFOUND;
  if (name_p != NULL)
    *name_p = r->name;
  if (grad_kind_p != NULL)
    *grad_kind_p = (int)r->grad;
  if (grad_scale_p != NULL)
    *grad_scale_p = (spc_grad_scale)r->grad_scale;
  if (reduces_p != NULL)
    *reduces_p = r->reduces;
  return SPC_OK;
}

spc_op spc__op_grad(spc_op op) {
  const spk_op_row *r = spk_op_row_get((spk_op_kind)op.kind);
  op.kind = r != NULL ? (int)r->grad : SPK_OP_NONE;
  return spc_op_scaled(op, r != NULL ? (spc_grad_scale)r->grad_scale
                                     : SPC_SCALE_NONE);
}
