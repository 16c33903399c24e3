/* Batch preparation for sequence parallelism: padding, slicing, position
 * ids, logits_to_keep masks, unpadding. Local computation only. */
#include <string.h>

#include "client_internal.h"

int64_t spc_sp_pad_len(int64_t seq_len, int world) {
  if (world < 1 || seq_len < 0)
    return SPC_EINVAL;
  return (world - seq_len % world) % world;
}

/* Rows before dim, elements after it (times the element size). */
static int outer_inner(spc_dtype dt, int ndim, const int64_t *shape, int dim,
                       size_t *outer, size_t *inner) {
  size_t es = spc_dtype_size(dt);
  if (es == 0 || shape == NULL || ndim < 1 || ndim > SPC_MAX_DIMS ||
      dim < 0 || dim >= ndim)
    return SPC_EINVAL;
  *outer = 1, *inner = es;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0)
      return SPC_EINVAL;
    if (i < dim)
      *outer *= (size_t)shape[i];
    else if (i > dim)
      *inner *= (size_t)shape[i];
  }
  return SPC_OK;
}

int spc_sp_slice(const void *x, spc_dtype dt, int ndim, const int64_t *shape,
                 int dim, int world, int rank, const void *fill, void *out) {
  size_t outer, inner, es = spc_dtype_size(dt);
  if (dim < 0)
    dim += ndim;
  if (x == NULL || out == NULL || fill == NULL || world < 1 || rank < 0 ||
      rank >= world || outer_inner(dt, ndim, shape, dim, &outer, &inner) < 0)
    return SPC_EINVAL;
  int64_t len = shape[dim], c = (len + spc_sp_pad_len(len, world)) / world;
  const uint8_t *src = x;
  uint8_t *dst = out;
  for (size_t o = 0; o < outer; o++)
    for (int64_t j = 0; j < c; j++) {
      int64_t p = rank * c + j;
      uint8_t *d = dst + (o * (size_t)c + (size_t)j) * inner;
      if (p < len) {
        memcpy(d, src + (o * (size_t)len + (size_t)p) * inner, inner);
        continue;
      }
      for (size_t b = 0; b < inner; b += es)
        memcpy(d + b, fill, es);
    }
  return SPC_OK;
}

int spc_sp_positions(int64_t seq_len, int world, int rank, int64_t *out) {
  if (out == NULL || seq_len < 0 || world < 1 || rank < 0 || rank >= world)
    return SPC_EINVAL;
  int64_t c = (seq_len + spc_sp_pad_len(seq_len, world)) / world;
  for (int64_t j = 0; j < c; j++) {
    int64_t p = rank * c + j;
    out[j] = p < seq_len ? p : p - seq_len;
  }
  return SPC_OK;
}

int spc_sp_keep_mask(int64_t seq_len, int64_t keep, int world, int rank,
                     uint8_t *mask) {
  if (mask == NULL || seq_len < 0 || keep < 0 || world < 1 || rank < 0 ||
      rank >= world)
    return SPC_EINVAL;
  int64_t c = (seq_len + spc_sp_pad_len(seq_len, world)) / world;
  /* keep 0 keeps every token, as logits[:, -0:] does in transformers */
  int64_t first = keep > 0 && seq_len > keep ? seq_len - keep : 0;
  for (int64_t j = 0; j < c; j++) {
    int64_t p = rank * c + j;
    mask[j] = p >= first && p < seq_len;
  }
  return SPC_OK;
}

int spc_sp_unpad(const void *x, spc_dtype dt, int ndim, const int64_t *shape,
                 int dim, int64_t seq_len, void *out) {
  size_t outer, inner;
  if (dim < 0)
    dim += ndim;
  if (x == NULL || out == NULL ||
      outer_inner(dt, ndim, shape, dim, &outer, &inner) < 0 || seq_len < 0 ||
      seq_len > shape[dim])
    return SPC_EINVAL;
  size_t row = (size_t)seq_len * inner, full = (size_t)shape[dim] * inner;
  for (size_t o = 0; o < outer; o++)
    memcpy((uint8_t *)out + o * row, (const uint8_t *)x + o * full, row);
  return SPC_OK;
}
