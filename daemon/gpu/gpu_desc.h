/* Flattening plans into the GPU movers' descriptor lists (kernels/
 * plan_cuda.h): absolute addresses, vector width, chunks. Plain C with no
 * CUDA call, so it is unit-tested on the host. */
#ifndef SPD_GPU_DESC_H
#define SPD_GPU_DESC_H

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
  uint64_t chunk;            /* bytes per chunk (spd_cdesc_chunk_for) */
} spd_cdesc_list;

/* Flags of spd_cdesc_add_copy: a side laid out contiguously (a staging
 * buffer) instead of with the move's strides. */
enum { SPD_CD_SRC_CONTIG = 1, SPD_CD_DST_CONTIG = 2 };

/* An empty list cut in chunks of `chunk` bytes (0: SPK_CU_CHUNK). */
void spd_cdesc_list_init(spd_cdesc_list *l, uint64_t chunk);

/* The chunk size for a launch moving `bytes` on a device with `sms`
 * multiprocessors: about 8 chunks per multiprocessor, a power of two
 * within [SPK_CU_CHUNK_MIN, SPK_CU_CHUNK_MAX]. */
uint64_t spd_cdesc_chunk_for(uint64_t bytes, int sms);
void spd_cdesc_list_free(spd_cdesc_list *l);

/* Bytes a move's block covers (rows x run). */
uint64_t spd_cdesc_block_bytes(const spk_move *m);

/* Append the copy of m's block from address src to address dst (the
 * block's first bytes: offsets already added). kind is SPK_CU_COPY or
 * SPK_CU_SCALE (esize: the dtype's bytes). SPK_ENO_MEMORY on allocation
 * failure. */
int spd_cdesc_add_copy(spd_cdesc_list *l, const spk_move *m, uint64_t src,
                       uint64_t dst, int kind, size_t esize, int flags,
                       spk_err *err);

/* Append a reduce step of geometry geo (dst side and the sources' shared
 * strides) writing at dst, reading srcs[0 .. nsrc) in order. */
int spd_cdesc_add_reduce(spd_cdesc_list *l, const spk_move *geo, uint64_t dst,
                         const spk_csrc *srcs, uint32_t nsrc, size_t esize,
                         spk_err *err);

/* Append one phase of plan p (0: its reduce steps, 1: its moves) with
 * bases[rank * SPK_T_COUNT + t] the device address of rank's tensor t. */
int spd_cdesc_from_plan(spd_cdesc_list *l, const spk_plan *p,
                        uint8_t *const *bases, int phase, spk_err *err);

/* Bytes spd_cdesc_pack writes for l: the steps, then the sources. */
size_t spd_cdesc_packed_size(const spd_cdesc_list *l);

/* Lay l out at host (which will be copied to device address dev) and
 * fill the launch's list fields; dtype, scale, red_op and world are the
 * caller's. */
void spd_cdesc_pack(const spd_cdesc_list *l, void *host, uint64_t dev,
                    spk_claunch *launch);

#endif
