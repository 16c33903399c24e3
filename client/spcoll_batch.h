/* libspclient's public API, continued: batch preparation (local: no
 * daemon, no communication).
 * Included by spcoll.h (users include that one); exported like the rest
 * of it. */
#ifndef SPCOLL_BATCH_H
#define SPCOLL_BATCH_H

#ifndef SPCOLL_H
#error "include spcoll.h, which includes spcoll_batch.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

/* ---- Batch preparation (local: no daemon, no communication) ----------
 * A [b, L, ...] batch is padded along `dim` (1 for [b, s] batches) so L
 * divides by the group size w: pad = (w - L % w) % w; each rank keeps
 * chunk r of length c = (L + pad) / w. These functions work on any host
 * memory, C-contiguous. They return SPC_OK or SPC_EINVAL. */

/* (w - seq_len % w) % w; SPC_EINVAL for world < 1 or seq_len < 0. */
int64_t spc_sp_pad_len(int64_t seq_len, int world);

/* Copy rank's chunk of x (shape, ndim dims, padded along dim) into out
 * (shape with dim -> c). Positions at or past L = shape[dim] are filled
 * with *fill (one element of dtype: -100 for labels, 0 for the rest). */
int spc_sp_slice(const void *x, spc_dtype dtype, int ndim,
                 const int64_t *shape, int dim, int world, int rank,
                 const void *fill, void *out);

/* This rank's c position ids of a sequence of length L padded for w ranks:
 * 0 .. L-1, and the pad continues 0, 1, ... (as LightRFT does). */
int spc_sp_positions(int64_t seq_len, int world, int rank, int64_t *out);

/* An integer logits_to_keep as this rank's c-byte mask over its padded
 * chunk: 1 where the global position r*c + j is one of the last `keep`
 * real tokens, [max(0, L - keep), L); pad positions are never kept.
 * keep = 0 keeps every real token (transformers' logits[:, -0:]). */
int spc_sp_keep_mask(int64_t seq_len, int64_t keep, int world, int rank,
                     uint8_t *mask);

/* Drop the padding after a gather: x has shape (size L + pad along dim),
 * out gets the first seq_len positions along dim. */
int spc_sp_unpad(const void *x, spc_dtype dtype, int ndim,
                 const int64_t *shape, int dim, int64_t seq_len, void *out);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif
