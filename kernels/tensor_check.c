#include "tensor_check.h"

#include <stdio.h>

int spk_tensor_align_check(const char *what, uint64_t offset, uint64_t addr,
                           spk_dtype dtype, spk_err *err) {
  size_t esize = spk_dtype_size(dtype);
  if (esize == 0)
    return spk_err_set(err, SPK_EINVAL, "%s tensor has unknown dtype %d",
                       what, (int)dtype);
  if (addr % esize == 0)
    return SPK_OK;
  return spk_err_set(err, SPK_EINVAL,
                     "%s tensor offset %llu is not a multiple of %zu, the "
                     "size of a %s element (misaligned by %llu bytes)",
                     what, (unsigned long long)offset, esize,
                     spk_dtype_name(dtype),
                     (unsigned long long)(addr % esize));
}

/* "[d0, d1, ...]" of the shape's first ndim dims (at most SPK_MAX_DIMS). */
static void shape_str(char *buf, size_t size, const spk_shape *shape) {
  size_t n = (size_t)snprintf(buf, size, "[");
  int ndim = shape->ndim < SPK_MAX_DIMS ? shape->ndim : SPK_MAX_DIMS;
  for (int i = 0; i < ndim && n < size; i++)
    n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? ", " : "",
                          (long long)shape->dim[i]);
  if (n < size)
    snprintf(buf + n, size - n, "]");
}

/* The tensor's bytes, or 0 with *over set when they pass UINT64_MAX. */
static uint64_t extent_bytes(const spk_shape *shape, size_t esize,
                             int *over_p) {
  uint64_t n = esize;
  *over_p = 0;
  for (int i = 0; i < shape->ndim; i++)
    if (__builtin_mul_overflow(n, (uint64_t)shape->dim[i], &n)) {
      *over_p = 1;
      return 0;
    }
  return n;
}

int spk_tensor_extent_check(const char *what, const spk_shape *shape,
                            spk_dtype dtype, uint64_t offset,
                            uint64_t buf_size, uint64_t *bytes_p,
                            spk_err *err) {
  size_t esize = spk_dtype_size(dtype);
  if (esize == 0)
    return spk_err_set(err, SPK_EINVAL, "%s tensor has unknown dtype %d",
                       what, (int)dtype);
  if (shape->ndim < 1 || shape->ndim > SPK_MAX_DIMS)
    return spk_err_set(err, SPK_EINVAL, "%s tensor has %d dims, not 1..%d",
                       what, shape->ndim, SPK_MAX_DIMS);
  char dims[SPK_MAX_DIMS * 22 + 4];
  shape_str(dims, sizeof(dims), shape);
  for (int i = 0; i < shape->ndim; i++)
    if (shape->dim[i] < 0)
      return spk_err_set(err, SPK_EINVAL, "%s tensor of shape %s has a "
                         "negative dim %d (%lld)", what, dims, i,
                         (long long)shape->dim[i]);
  int over;
  uint64_t bytes = extent_bytes(shape, esize, &over);
  if (over)
    return spk_err_set(err, SPK_EINVAL, "%s tensor of shape %s %s has more "
                       "than 2^64 bytes: it does not fit in a buffer of %llu "
                       "bytes", what, dims, spk_dtype_name(dtype),
                       (unsigned long long)buf_size);
  if (offset > buf_size || bytes > buf_size - offset)
    return spk_err_set(err, SPK_EINVAL, "%s tensor of shape %s %s at offset "
                       "%llu (%llu bytes) does not fit in a buffer of %llu "
                       "bytes", what, dims, spk_dtype_name(dtype),
                       (unsigned long long)offset,
                       (unsigned long long)bytes,
                       (unsigned long long)buf_size);
  if (bytes_p != NULL)
    *bytes_p = bytes;
  return SPK_OK;
}

static int name_char_ok(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
         (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':' ||
         c == '/' || c == '@' || c == '-';
}

int spk_name_check(const char *name, size_t len, spk_err *err) {
  if (name == NULL || len == 0 || len > SPK_NAME_MAX)
    return spk_err_set(err, SPK_EINVAL,
                       "group name must be 1..%d bytes, got %zu",
                       SPK_NAME_MAX, name == NULL ? 0 : len);
  for (size_t i = 0; i < len; i++)
    if (!name_char_ok((unsigned char)name[i]))
      return spk_err_set(err, SPK_EINVAL,
                         "group name has byte 0x%02x at offset %zu: names "
                         "use only %s", (unsigned char)name[i], i,
                         SPK_NAME_CHARS);
  return SPK_OK;
}
