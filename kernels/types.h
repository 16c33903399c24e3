/* Element types, shapes and the per-rank description of an op: the
 * vocabulary of the planners. Values match spc_dtype / spc_op in the public
 * header (checked by static asserts in the client). */
#ifndef SPK_TYPES_H
#define SPK_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define SPK_MAX_DIMS 8

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

typedef enum {
  SPK_OP_ALL_GATHER = 1,
  SPK_OP_COUNT
} spk_op_kind;

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
