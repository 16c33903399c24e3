#include "types.h"

#include <stdio.h>
#include <string.h>

size_t spk_dtype_size(spk_dtype dtype) {
  static const size_t sizes[SPK_DTYPE_COUNT] = {4, 8, 2, 2, 1, 1, 4, 8};
  if ((unsigned)dtype >= SPK_DTYPE_COUNT)
    return 0;
  return sizes[dtype];
}

const char *spk_dtype_name(spk_dtype dtype) {
  static const char *names[SPK_DTYPE_COUNT] = {
      "float32", "float64", "float16", "bfloat16",
      "int8",    "uint8",   "int32",   "int64"};
  if ((unsigned)dtype >= SPK_DTYPE_COUNT)
    return "unknown-dtype";
  return names[dtype];
}

int spk_shape_numel(const spk_shape *shape, size_t esize, int64_t *numel_p,
                    spk_err *err) {
  int64_t n = 1;
  if (esize == 0)
    return spk_err_set(err, SPK_EINVAL, "element size 0 (unknown dtype)");
  if (shape->ndim < 0 || shape->ndim > SPK_MAX_DIMS)
    return spk_err_set(err, SPK_EINVAL, "ndim %d outside 0..%d", shape->ndim,
                       SPK_MAX_DIMS);
  for (int i = 0; i < shape->ndim; i++) {
    int64_t d = shape->dim[i];
    if (d < 0)
      return spk_err_set(err, SPK_EINVAL, "shape dim %d is negative (%lld)", i,
                         (long long)d);
    if (d != 0 && n > INT64_MAX / (int64_t)esize / d)
      return spk_err_set(err, SPK_EINVAL, "shape too large at dim %d (%lld)",
                         i, (long long)d);
    n *= d;
  }
  *numel_p = n;
  return SPK_OK;
}

int spk_dim_normalize(int dim, int ndim, const char *what, int *dim_p,
                      spk_err *err) {
  if (dim < -ndim || dim >= ndim)
    return spk_err_set(err, SPK_EINVAL,
                       "%s %d out of range for a %d-d tensor", what, dim,
                       ndim);
  *dim_p = dim < 0 ? dim + ndim : dim;
  return SPK_OK;
}

int spk_shape_equal(const spk_shape *a, const spk_shape *b) {
  if (a->ndim != b->ndim)
    return 0;
  return memcmp(a->dim, b->dim, sizeof(a->dim[0]) * (size_t)a->ndim) == 0;
}

const char *spk_shape_str(const spk_shape *shape, char *buf, size_t len) {
  size_t used = 0;
  int n = snprintf(buf, len, "[");
  used = n > 0 ? (size_t)n : 0;
  for (int i = 0; i < shape->ndim && used < len; i++) {
    n = snprintf(buf + used, len - used, "%s%lld", i ? ", " : "",
                 (long long)shape->dim[i]);
    used += n > 0 ? (size_t)n : 0;
  }
  if (used < len)
    snprintf(buf + used, len - used, "]");
  return buf;
}
