/* Flattening plans into the GPU movers' descriptor lists (kernels/
 * plan_cuda.h): absolute addresses, vector width, chunks. Plain C with no
 * CUDA call, so it is unit-tested on the host. */
#ifndef SPK_GPU_DESC_H
#define SPK_GPU_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "plan_cuda.h"

/* The steps of one kernel launch, and their reduce sources. */
typedef struct {
  spk_cdesc *descs;
  size_t n, cap;
  spk_csrc *srcs;
  size_t nsrcs, scap;
  uint64_t nchunks;
  uint64_t chunk;            /* bytes per chunk (spk_cdesc_chunk_for) */
} spk_cdesc_list;

/* Flags of spk_cdesc_add_copy: a side laid out contiguously (a staging
 * buffer) instead of with the move's strides. */
enum { SPK_CD_SRC_CONTIG = 1, SPK_CD_DST_CONTIG = 2 };

/* An empty list cut in chunks of `chunk` bytes (0: SPK_CU_CHUNK). */
void spk_cdesc_list_init(spk_cdesc_list *l, uint64_t chunk);

/* The chunk size for a launch moving `bytes` on a device with `sms`
 * multiprocessors: about 8 chunks per multiprocessor, a power of two
 * within [SPK_CU_CHUNK_MIN, SPK_CU_CHUNK_MAX]. */
uint64_t spk_cdesc_chunk_for(uint64_t bytes, int sms);
void spk_cdesc_list_free(spk_cdesc_list *l);

/* Append the copy of m's block from address src to address dst (the
 * block's first bytes: offsets already added). kind is SPK_CU_COPY or
 * SPK_CU_SCALE (esize: the dtype's bytes). SPK_ENO_MEMORY on allocation
 * failure. */
int spk_cdesc_add_copy(spk_cdesc_list *l, const spk_move *m, uint64_t src,
                       uint64_t dst, int kind, size_t esize, int flags,
                       spk_err *err);

/* Append a reduce step of geometry geo (dst side and the sources' shared
 * strides) writing at dst, reading srcs[0 .. nsrc) in order. */
int spk_cdesc_add_reduce(spk_cdesc_list *l, const spk_move *geo, uint64_t dst,
                         const spk_csrc *srcs, uint32_t nsrc, size_t esize,
                         spk_err *err);

/* Append one phase of plan p (0: its reduce steps, 1: its moves) with
 * bases[rank * SPK_T_COUNT + t] the device address of rank's tensor t. */
int spk_cdesc_from_plan(spk_cdesc_list *l, const spk_plan *p,
                        uint8_t *const *bases, int phase, spk_err *err);

/* The same for the steps that land in rank `to`'s tensors alone (-1:
 * every step): one rank's part, where each rank runs its own. */
int spk_cdesc_from_plan_to(spk_cdesc_list *l, const spk_plan *p,
                           uint8_t *const *bases, int phase, int64_t to,
                           spk_err *err);

/* Bytes spk_cdesc_pack writes for l: the steps, then the sources. */
size_t spk_cdesc_packed_size(const spk_cdesc_list *l);

/* Lay l out at host (which will be copied to device address dev) and
 * fill the launch's list fields; dtype, scale, red_op and world are the
 * caller's. */
void spk_cdesc_pack(const spk_cdesc_list *l, void *host, uint64_t dev,
                    spk_claunch *launch);

#endif
