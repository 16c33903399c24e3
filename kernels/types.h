/* Element types, shapes and the per-rank description of an op: the
 * vocabulary of the planners. Values match spc_dtype / spc_op in the public
 * header (checked by static asserts in the client). */
#ifndef SPK_TYPES_H
#define SPK_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "op_list.h"
#include "status.h"

#define SPK_MAX_DIMS 8
/* cuMem allocations one device buffer registration may span (one file
 * descriptor each, all in one frame: BufRegister.vmm_sizes; libuv takes at
 * most 64 descriptors from one message). */
#define SPK_VMM_MAX_CHUNKS 64

typedef enum {
  SPK_F32 = 0,
  SPK_F64 = 1,
  SPK_F16 = 2,
  SPK_BF16 = 3,
  SPK_I8 = 4,
  SPK_U8 = 5,
  SPK_I32 = 6,
  SPK_I64 = 7,
  SPK_DTYPE_COUNT
} spk_dtype;

/* Ops and what their arguments mean (spk_op_args); the kinds themselves
 * are rows of the op list (op_list.h). Every op reads `in`
 * and writes `out` of the same dtype; d = dims[0] (Python-style).
 * SPLIT          out_r = piece r of in along d; sizes (w entries) or the
 *                split rule. Scale flag: the gather-backward "own slice".
 * ALL_GATHER     out = cat_k in_k along d; sizes optional, checked.
 * ALL_TO_ALL     dims = {scatter, gather}; scalar = gather_size G (0: the
 *                local gather size times w); the seeds' semantics.
 * ALL_TO_ALL_V   along dim 0; sizes = this rank's input splits, sizes2 =
 *                its output splits (per rank, not shared).
 * ALL_REDUCE     out = reduce_k in_k; flags & SPK_FLAG_RED_MASK = op.
 * REDUCE_SCATTER out_r = piece r (sizes or the rule) along d of sum_k in_k.
 * ZIGZAG_SPLIT   in is the full sequence along d, cut in 2w chunks; out_r =
 *                chunk r ++ chunk 2w-1-r. Length % 2w must be 0.
 * ZIGZAG_GATHER  inverse: out = the full sequence in natural order.
 * PACKED_SPLIT   sizes = sequence lengths packed along d; out_r = for each
 *                sequence, piece r of it by the rule, concatenated.
 * PACKED_GATHER  inverse of PACKED_SPLIT (same sizes).
 * Scale flags (SPK_FLAG_SCALE_*) multiply (up) or divide (down) every
 * copied element by w: the seeds' grad_scale of backward ops. */
/* The kinds, from the op list (op_list.h); SPK_OP_NONE is no op (the
 * gradient of an op that has none). */
typedef enum {
  SPK_OP_NONE = 0,
#define SPK_OP_ENUM(K, name, num, shape, data, shared, grad, scale) \
  SPK_OP_##K = num,
  SPK_OP_LIST(SPK_OP_ENUM)
#undef SPK_OP_ENUM
  /* 1 + the number of rows: the kinds run 1.. without gaps (planner.c
   * and unit_op_list.c hold them to it) */
  SPK_OP_COUNT = 1
#define SPK_OP_ROW(K, name, num, shape, data, shared, grad, scale) +1
  SPK_OP_LIST(SPK_OP_ROW)
#undef SPK_OP_ROW
} spk_op_kind;

enum {
  SPK_RED_SUM = 0,
  SPK_RED_MAX = 1,
  SPK_RED_MIN = 2,
  SPK_RED_COUNT,
  SPK_FLAG_RED_MASK = 0x0f,
  SPK_SCALE_NONE = 0,
  SPK_SCALE_UP = 1,
  SPK_SCALE_DOWN = 2,
  SPK_FLAG_SCALE_SHIFT = 4,
  SPK_FLAG_SCALE_MASK = 0x30,
  SPK_FLAG_KNOWN = 0x3f
};

typedef struct {
  int ndim;
  int64_t dim[SPK_MAX_DIMS];
} spk_shape;

/* One rank's view of an op: what that rank asked for. Size lists point
 * into memory the caller owns for the duration of the planning call. */
typedef struct {
  spk_op_kind op;
  spk_dtype dtype;
  spk_shape in;
  spk_shape out;
  int ndims;               /* entries used in dims[] */
  int dims[4];
  int nsizes;              /* 0 when the caller gave no size list */
  const int64_t *sizes;
  int nsizes2;
  const int64_t *sizes2;
  int64_t scalar;
  uint32_t flags;
} spk_op_args;

size_t spk_dtype_size(spk_dtype dtype);
const char *spk_dtype_name(spk_dtype dtype);
const char *spk_op_name(spk_op_kind op);

/* Element count of a shape; SPK_EINVAL for a negative dim or a count that
 * does not fit in int64 bytes for elements of `esize` bytes. */
int spk_shape_numel(const spk_shape *shape, size_t esize, int64_t *numel_p,
                    spk_err *err);

/* Python-style dim: -1 is the last. Fails naming `what` when out of range. */
int spk_dim_normalize(int dim, int ndim, const char *what, int *dim_p,
                      spk_err *err);

int spk_shape_equal(const spk_shape *a, const spk_shape *b);
/* "[2, 3, 4]" into buf; returns buf. */
const char *spk_shape_str(const spk_shape *shape, char *buf, size_t len);

#endif
