/* Conformance against the seed libraries, batch preparation: the seeds'
 * sequence-parallel batch functions around the collectives, replayed from
 * $SPC_TEST_DATA/conformance/ws2/batch_cases.txt (made by
 * scripts/conformance_import.py) by the runner of conformance_cases.c.
 *   axolotl apply_sequence_parallelism    sp_slice, arange, keep_mask,
 *                                         pad_len, count_ne
 *   LightRFT sp_slice_and_pad_input       sp_slice, sp_positions, pad_len
 *   axolotl gather_outputs (unpad hook),  all_gather + sp_unpad; backward
 *   LightRFT gather_..._and_unpad         zero_pad + ag_bwd_own
 * Our API does the work (spc_sp_*, the collectives); the few local steps
 * that have no API function (arange, count_ne, zero_pad and the copy of
 * the real positions in sp_positions) are written here, small enough to
 * check by eye.
 *
 * One line per failing case, then "conformance (batch): N passed, N
 * failed, N skipped". The suite fails if any case fails. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "conformance_cases.h"
#include "harness.h"

#include "conformance_cases.h"


/* Rows before dim and elements after it, of t with dim (may be negative)
 * normalised into *dim_p; -1 for a dim out of range. */
static int split_at(conf_t *t, int dim, int *dim_p, size_t *outer,
                    size_t *inner) {
  if (dim < 0)
    dim += t->ndim;
  if (dim < 0 || dim >= t->ndim)
    return -1;
  *dim_p = dim, *outer = 1, *inner = 1;
  for (int i = 0; i < t->ndim; i++)
    if (i < dim)
      *outer *= (size_t)t->shape[i];
    else if (i > dim)
      *inner *= (size_t)t->shape[i];
  return 0;
}

/* t's shape with dim set to len, into shape. */
static void shape_with(conf_t *t, int dim, int64_t len, int64_t *shape) {
  memcpy(shape, t->shape, sizeof(t->shape));
  shape[dim] = len;
}

/* fill=V as one element of dt. */
static int fill_of(spc_dtype dt, int64_t v, void *out) {
  float f = (float)v;
  uint8_t b = (uint8_t)v;
  if (dt == SPC_INT64)
    memcpy(out, &v, 8);
  else if (dt == SPC_FLOAT32)
    memcpy(out, &f, 4);
  else if (dt == SPC_UINT8)
    memcpy(out, &b, 1);
  else
    return -1;
  return 0;
}

/* The padded chunk length c = (L + pad) / w. */
static int64_t chunk_len(int64_t len, int w) {
  return (len + spc_sp_pad_len(len, w)) / w;
}

/* sp_slice SRC>DST dim= fill=: pad SRC along dim with fill to a multiple
 * of the group size and keep this rank's chunk (spc_sp_slice). */
static int op_sp_slice(spc_group *g, conf_t *s, conf_t *d,
                       const conf_args *a) {
  int w = spc_group_size(g), dim;
  size_t outer, inner;
  int64_t want[SPC_MAX_DIMS];
  uint8_t fill[8];
  if (s == NULL || d == NULL || s->dtype != d->dtype ||
      split_at(s, a->dim, &dim, &outer, &inner) < 0 ||
      fill_of(s->dtype, a->fill, fill) < 0)
    return CONF_EBADSTEP;
  shape_with(s, dim, chunk_len(s->shape[dim], w), want);
  if (!conf_shape_is(d, s->ndim, want))
    return CONF_EBADSTEP;
  /* a->dim as written (maybe negative): the API takes Python-style dims */
  return spc_sp_slice(spc_tensor_data(s), s->dtype, s->ndim, s->shape,
                      a->dim, w, spc_group_rank(g), fill, spc_tensor_data(d));
}

/* arange >DST: an int64 [b, L] tensor whose rows are 0 .. L-1 (axolotl's
 * position_ids when the batch has none). */
static int op_arange(spc_group *g, conf_t *s, conf_t *d, const conf_args *a) {
  (void)g, (void)s, (void)a;
  if (d == NULL || d->dtype != SPC_INT64 || d->ndim != 2)
    return CONF_EBADSTEP;
  int64_t *p = spc_tensor_data(d);
  for (int64_t i = 0; i < d->shape[0]; i++)
    for (int64_t j = 0; j < d->shape[1]; j++)
      *p++ = j;
  return SPC_OK;
}

/* keep_mask >DST seq= keep=: an int logits_to_keep as this rank's mask
 * over its padded chunk (spc_sp_keep_mask). */
static int op_keep_mask(spc_group *g, conf_t *s, conf_t *d,
                        const conf_args *a) {
  (void)s;
  int w = spc_group_size(g);
  int64_t c = chunk_len(a->seq, w);
  if (d == NULL || d->dtype != SPC_UINT8 || !conf_shape_is(d, 1, &c))
    return CONF_EBADSTEP;
  return spc_sp_keep_mask(a->seq, a->keep, w, spc_group_rank(g),
                          spc_tensor_data(d));
}

/* pad_len >#RESULT seq=: spc_sp_pad_len for the group size. */
static int op_pad_len(spc_group *g, conf_t *s, conf_t *d, const conf_args *a) {
  (void)s, (void)d;
  if (a->res == NULL)
    return CONF_EBADSTEP;
  *a->res = spc_sp_pad_len(a->seq, spc_group_size(g));
  return SPC_OK;
}

/* count_ne SRC>#RESULT value= times=: the elements of an int64 tensor that
 * differ from value, times `times` (axolotl's num_items_in_batch: local
 * labels != -100, times the gradient accumulation steps). */
static int op_count_ne(spc_group *g, conf_t *s, conf_t *d,
                       const conf_args *a) {
  (void)g, (void)d;
  if (s == NULL || s->dtype != SPC_INT64 || a->res == NULL)
    return CONF_EBADSTEP;
  const int64_t *p = spc_tensor_data(s);
  int64_t n = 0;
  for (size_t i = 0; i < conf_numel(s); i++)
    n += p[i] != a->value;
  *a->res = n * a->times;
  return SPC_OK;
}

/* sp_positions SRC>DST: LightRFT's position_ids, [b, L] -> [b, L + pad],
 * not sliced: each row keeps its L positions (packed ones restart) and the
 * pad continues 0, 1, ... The padded row is the concatenation over ranks
 * of spc_sp_positions; its first L entries (0 .. L-1) are replaced by the
 * row's own, which spc_sp_positions cannot know. */
static int op_sp_positions(spc_group *g, conf_t *s, conf_t *d,
                           const conf_args *a) {
  (void)a;
  int w = spc_group_size(g);
  if (s == NULL || d == NULL || s->dtype != SPC_INT64 ||
      d->dtype != SPC_INT64 || s->ndim != 2)
    return CONF_EBADSTEP;
  int64_t len = s->shape[1], c = chunk_len(len, w), want[2];
  want[0] = s->shape[0], want[1] = c * w;
  if (!conf_shape_is(d, 2, want))
    return CONF_EBADSTEP;
  int64_t *full = malloc((size_t)(c * w + 1) * sizeof(*full));
  if (full == NULL)
    return SPC_ENOMEM;
  int rc = SPC_OK;
  for (int r = 0; r < w && rc == SPC_OK; r++)
    rc = spc_sp_positions(len, w, r, full + r * c);
  const int64_t *src = spc_tensor_data(s);
  int64_t *dst = spc_tensor_data(d);
  for (int64_t b = 0; b < want[0] && rc == SPC_OK; b++)
    for (int64_t j = 0; j < want[1]; j++)
      dst[b * want[1] + j] = j < len ? src[b * len + j] : full[j];
  free(full);
  return rc;
}

/* sp_unpad SRC>DST dim= seq=: keep the first seq positions along dim
 * (spc_sp_unpad). */
static int op_sp_unpad(spc_group *g, conf_t *s, conf_t *d,
                       const conf_args *a) {
  (void)g;
  int dim;
  size_t outer, inner;
  int64_t want[SPC_MAX_DIMS];
  if (s == NULL || d == NULL || s->dtype != d->dtype ||
      split_at(s, a->dim, &dim, &outer, &inner) < 0)
    return CONF_EBADSTEP;
  shape_with(s, dim, a->seq, want);
  if (!conf_shape_is(d, s->ndim, want))
    return CONF_EBADSTEP;
  return spc_sp_unpad(spc_tensor_data(s), s->dtype, s->ndim, s->shape,
                      a->dim, a->seq, spc_tensor_data(d));
}

/* zero_pad SRC>DST dim=: the backward of an unpad, local: SRC goes to the
 * first positions of DST along dim, the cut positions get 0. */
static int op_zero_pad(spc_group *g, conf_t *s, conf_t *d,
                       const conf_args *a) {
  (void)g;
  int dim;
  size_t outer, inner, es = spc_dtype_size(s ? s->dtype : SPC_FLOAT32);
  int64_t want[SPC_MAX_DIMS];
  if (s == NULL || d == NULL || s->dtype != d->dtype ||
      split_at(d, a->dim, &dim, &outer, &inner) < 0 ||
      s->shape[dim] > d->shape[dim])
    return CONF_EBADSTEP;
  shape_with(d, dim, s->shape[dim], want);
  if (!conf_shape_is(s, d->ndim, want))
    return CONF_EBADSTEP;
  size_t row = (size_t)s->shape[dim] * inner * es;
  size_t full = (size_t)d->shape[dim] * inner * es;
  const uint8_t *src = spc_tensor_data(s);
  uint8_t *dst = spc_tensor_data(d);
  for (size_t o = 0; o < outer; o++) {
    memcpy(dst + o * full, src + o * row, row);
    memset(dst + o * full + row, 0, full - row); /* 0.0f is all zero bits */
  }
  return SPC_OK;
}

/* The collectives the unpad hooks wrap. */
static int op_all_gather(spc_group *g, conf_t *s, conf_t *d,
                         const conf_args *a) {
  return spc_all_gather(g, s, d, a->dim, CONF_LIST(a));
}
static int op_ag_bwd_own(spc_group *g, conf_t *s, conf_t *d,
                         const conf_args *a) {
  return spc_all_gather_backward_own(g, s, d, a->dim, CONF_LIST(a), a->scale);
}

/* Op names of batch_cases.txt: op_NAME above. */
static const conf_op op_table[] = {
    CONF_OP(sp_slice),   CONF_OP(arange),       CONF_OP(keep_mask),
    CONF_OP(pad_len),    CONF_OP(count_ne),     CONF_OP(sp_positions),
    CONF_OP(sp_unpad),   CONF_OP(zero_pad),     CONF_OP(all_gather),
    CONF_OP(ag_bwd_own),
};

int main(void) {
  return conf_main("conformance_batch", "batch_cases.txt", "conformance (batch)", op_table,
                   sizeof(op_table) / sizeof(op_table[0]), 300);
}
