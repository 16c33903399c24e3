/* The GPU movers' work descriptor: a plan flattened to absolute device
 * addresses and cut into chunks, each chunk the work of one thread block.
 * Plain C shared by the host code that builds it (kernels/gpu_desc.c), the
 * kernel that executes it (daemon/gpu/plan_cuda.cu) and the unit test that
 * executes it on the host (tests/unit/unit_daemon_cuda_desc.c), so the
 * geometry the kernel walks is the geometry the test checks. */
#ifndef SPK_PLAN_CUDA_H
#define SPK_PLAN_CUDA_H

#include <stdint.h>

#include "plan.h"

#ifdef __CUDACC__
#define SPK_HD static inline __host__ __device__
#else
#define SPK_HD static inline
#endif

/* The repeated (outer) dims of a move: every dim but the byte run. */
#define SPK_CU_OUTER (SPK_MOVE_DIMS - 1)
/* Bytes a block moves per chunk, by default: 512 threads x 16 bytes x 8.
 * A launch may pick smaller chunks (more blocks for a small plan) or
 * larger ones (less per-chunk work for a big one), a power of two between
 * SPK_CU_CHUNK_MIN and SPK_CU_CHUNK_MAX. */
#define SPK_CU_CHUNK ((uint64_t)64 << 10)
#define SPK_CU_CHUNK_MIN ((uint64_t)4 << 10)
#define SPK_CU_CHUNK_MAX ((uint64_t)256 << 10)
/* Most rows in one chunk: their offsets sit in the block's shared memory. */
#define SPK_CU_MAX_ROWS 1024
/* Threads per block of plan_kernel (its __launch_bounds__), and its
 * device name, by which a module's copy of it is found. */
#define SPK_CU_THREADS 512
#define SPK_CU_KERNEL_NAME "_Z11plan_kernel11spk_claunch"

enum {
  SPK_CU_COPY = 0,   /* plain copy: vector accesses of `vec` bytes */
  SPK_CU_SCALE = 1,  /* copy with the launch's grad scale, per element */
  SPK_CU_REDUCE = 2  /* dst = red_op over the sources, per element */
};

/* One block move or reduce step. Row r (0 <= r < rows) of the block starts
 * at src + soff(r) and dst + doff(r), where r is split over len[] (the
 * last outer dim varies fastest) and the offsets are sums of index x
 * stride; each row is `run` contiguous bytes. */
typedef struct {
  uint64_t src, dst;         /* the block's first byte (reduce: src unused) */
  uint64_t run;              /* contiguous bytes of a row */
  uint64_t rows;             /* product of len[0 .. nouter) */
  uint64_t piece;            /* bytes of a row one chunk covers: run, or
                              * the launch's chunk size when rows are cut */
  uint64_t rows_per_chunk;   /* 1 when rows are cut */
  uint64_t chunk0;           /* this step's first chunk in its launch */
  uint64_t nchunks;
  uint32_t rsrc0, nsrc;      /* reduce: sources srcs[rsrc0 .. + nsrc) */
  uint8_t kind;              /* SPK_CU_* */
  uint8_t nouter;            /* outer dims in use, 0 .. SPK_CU_OUTER */
  uint8_t vec;               /* bytes per access: 16, 8, 4, 2 or 1 */
  uint8_t esize;             /* element bytes (scale, reduce) */
  uint8_t pad[4];
  uint64_t len[SPK_CU_OUTER];
  uint64_t sstride[SPK_CU_OUTER];
  uint64_t dstride[SPK_CU_OUTER];
} spk_cdesc;

/* One source of a reduce step: the address of its block's first byte, laid
 * out with the step's sstride, or contiguously (row r at r * run) when it
 * was staged through a buffer. */
typedef struct {
  uint64_t addr;
  uint32_t contig;
  uint32_t pad;
} spk_csrc;

/* What one kernel launch executes: every step of a list. Passed by value;
 * descs and srcs are device addresses. */
typedef struct {
  const spk_cdesc *descs;
  const spk_csrc *srcs;
  uint64_t ndesc, nchunks;
  int32_t dtype;             /* spk_dtype, for scale and reduce steps */
  int32_t scale;             /* SPK_SCALE_* of scale steps */
  int32_t red_op;            /* SPK_RED_* of reduce steps */
  int32_t world;             /* the scale factor */
} spk_claunch;

/* Rows [*r0, *r1) and bytes [*b0, *b1) of each of them that chunk k of the
 * step (0 <= k < nchunks) covers. */
SPK_HD void spk_cdesc_chunk(const spk_cdesc *d, uint64_t k, uint64_t *r0,
                            uint64_t *r1, uint64_t *b0, uint64_t *b1) {
  if (d->piece < d->run) {
    uint64_t per_row = (d->run + d->piece - 1) / d->piece;
    *r0 = k / per_row;
    *r1 = *r0 + 1;
    *b0 = (k % per_row) * d->piece;
    *b1 = *b0 + d->piece < d->run ? *b0 + d->piece : d->run;
  } else {
    *r0 = k * d->rows_per_chunk;
    *r1 = *r0 + d->rows_per_chunk < d->rows ? *r0 + d->rows_per_chunk
                                            : d->rows;
    *b0 = 0;
    *b1 = d->run;
  }
}

/* Byte offsets of row r from the block's first byte, source and
 * destination side. */
SPK_HD void spk_cdesc_row(const spk_cdesc *d, uint64_t r, uint64_t *soff,
                          uint64_t *doff) {
  uint64_t s = 0, t = 0;
  for (int i = (int)d->nouter - 1; i >= 0; i--) {
    uint64_t idx = r % d->len[i];
    r /= d->len[i];
    s += idx * d->sstride[i];
    t += idx * d->dstride[i];
  }
  *soff = s;
  *doff = t;
}

/* The step among descs[lo .. n) that chunk c of a launch belongs to:
 * steps are in chunk order, none is empty, and descs[lo] starts at or
 * before c. */
SPK_HD uint64_t spk_cdesc_find_from(const spk_cdesc *descs, uint64_t lo,
                                    uint64_t n, uint64_t c) {
  uint64_t hi = n - 1;
  while (lo < hi) {
    uint64_t mid = (lo + hi + 1) / 2;
    if (descs[mid].chunk0 <= c)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

SPK_HD uint64_t spk_cdesc_find(const spk_cdesc *descs, uint64_t n,
                               uint64_t c) {
  return spk_cdesc_find_from(descs, 0, n, c);
}

#ifdef __cplusplus
extern "C" {
#endif
/* Launch one kernel executing every step of l on `stream` (a
 * cudaStream_t) of the current device, with `blocks` blocks. 0 on
 * success; -1 with msg naming the failed call and its error. */
int spk_cuda_launch(const spk_claunch *l, int blocks, void *stream,
                    char *msg, size_t len);
#ifdef __cplusplus
}
#endif

#endif
