#include "tensor_check.h"

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
