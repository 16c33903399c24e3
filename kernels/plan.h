/* A copy plan: the work descriptor that movers execute. Planners decide
 * what moves where; movers only read these structs and move bytes. */
#ifndef SPK_PLAN_H
#define SPK_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "types.h"

enum { SPK_T_IN = 0, SPK_T_OUT = 1, SPK_T_COUNT = 2 };

/* Up to every tensor dim stays strided, plus the element as a byte run. */
#define SPK_MOVE_DIMS (SPK_MAX_DIMS + 1)

/* One strided block copy from a tensor of src_rank to a tensor of dst_rank.
 * Dims are coalesced: dim nd-1 is a contiguous run of len[nd-1] bytes on
 * both sides; outer dims i < nd-1 repeat it len[i] times with byte strides
 * src_stride[i] / dst_stride[i]. */
typedef struct {
  uint32_t src_rank, dst_rank;
  uint8_t src_t, dst_t;
  uint8_t nd;
  uint64_t src_off, dst_off;
  uint64_t len[SPK_MOVE_DIMS];
  uint64_t src_stride[SPK_MOVE_DIMS];
  uint64_t dst_stride[SPK_MOVE_DIMS];
} spk_move;

/* One source of a reduce step: the block at byte `off` of rank's tensor t. */
typedef struct {
  uint32_t rank;
  uint8_t t;
  uint64_t off;
} spk_rsrc;

/* dst block = reduce over sources of their blocks, elementwise. The
 * geometry is a move's (dst_*, len, strides); src_stride is shared by every
 * source and src_rank/src_t/src_off are unused. Sources are
 * plan->rsrcs[src0 .. src0 + nsrc), reduced in that order. */
typedef struct {
  spk_move geo;
  uint32_t src0, nsrc;
} spk_reduce;

/* A plan runs in two phases: every reduce step, then every move (moves may
 * read what reduce steps wrote, as all-reduce does). Within a phase the
 * steps are independent and may run in any order or in parallel. */
typedef struct {
  int world;
  spk_dtype dtype;
  int scale;               /* SPK_SCALE_*: applied to every move */
  int red_op;              /* SPK_RED_*: applied by every reduce step */
  spk_move *moves;
  size_t nmoves, cap;
  spk_reduce *reduces;
  size_t nreduces, rcap;
  spk_rsrc *rsrcs;
  size_t nrsrcs, scap;
  uint64_t bytes;          /* total bytes the plan writes */
  /* The input bytes its steps read, a byte read twice counted once, of
   * this node's ranks (planner.c; 0: not known). */
  uint64_t in_bytes;
  /* A plan that touches (writes, plus in_bytes) at least this many bytes
   * copies with non-temporal stores, past the cache (0: never; the
   * daemon's option starts at 1, and a value above every op's bytes turns
   * streaming off): its output cannot stay cached anyway, and skipping
   * the read-for-ownership of every destination line makes a copy about
   * 1.4x faster (19 vs 13.5 GB/s for 32 MiB on the development VM).
   * Below, inputs and outputs may all be in the cache when the op comes
   * again, and streaming would send every byte to memory (2 ranks' 8 MiB
   * all_gather, 24 MiB touched: about 1.7x slower streamed on the same VM,
   * docs/performance.md). The daemon sets it to its stream_bytes (the
   * last-level cache's size by default), the fast path to the segment's
   * copy of it; SPK_STREAM_BYTES until then. */
  uint64_t stream_bytes;
  /* One node's part of a plan across nodes (spk_plan_part; NULL: the
   * whole plan). mine[r] is 1 when rank r's tensors are on this node;
   * steps that touch none of them are left out, reduce steps landing
   * elsewhere keep only this node's sources, and bytes counts what lands
   * in this node's tensors. local[0..nlocal) are those ranks, ascending. */
  uint8_t *mine;
  uint32_t *local;
  uint32_t nlocal;
} spk_plan;

/* One side of a block: a rank's tensor, its shape and the block's origin. */
typedef struct {
  uint32_t rank;
  uint8_t t;
  const spk_shape *shape;
  const int64_t *origin;
} spk_block_end;

/* Grow an array of `size`-byte items (*items, *cap of them) so item n
 * fits: doubles, from 16. SPK_ENO_MEMORY naming `what` when realloc
 * fails (*items is then unchanged). */
int spk_grow(void **items, size_t n, size_t *cap, size_t size,
             const char *what, spk_err *err);

/* stream_bytes of a plan nobody set it for: as copies streamed when
 * they wrote 16 MiB before touched bytes were counted. */
#define SPK_STREAM_BYTES ((uint64_t)32 << 20)

void spk_plan_init(spk_plan *plan, int world);
void spk_plan_free(spk_plan *plan);

/* Make plan (initialized, still empty) this node's part: mine[r] for
 * each of its world ranks (copied). So a node of a big group holds
 * O(local ranks x world) steps, not the world's O(world^2). Every node
 * builds its part from the same arguments in the same order, so the
 * steps two nodes share come in the same order at both (plan_cut.h
 * relies on it). SPK_ENO_MEMORY when the copy cannot be made. */
int spk_plan_part(spk_plan *plan, const uint8_t *mine, spk_err *err);

/* The ranks a planner pairs rank r with, for steps with r at one end:
 * every rank (returns world, *list NULL) when the plan is whole or r is
 * this node's, else this node's ranks (ascending, in *list). Rank i of
 * the answer is SPK_PARTNER(*list, i). Planners loop over it so that a
 * part costs O(local ranks x world) time too. */
uint32_t spk_plan_partners(const spk_plan *plan, uint32_t r,
                           const uint32_t **list);
#define SPK_PARTNER(list, i) ((list) != NULL ? (list)[i] : (uint32_t)(i))

/* Append the copy of the block `extent` (elements of esize bytes) from src
 * to dst. An empty block appends nothing. SPK_ENO_MEMORY on allocation
 * failure. */
int spk_plan_add_block(spk_plan *plan, const spk_block_end *src,
                       const spk_block_end *dst, const int64_t *extent,
                       size_t esize, spk_err *err);

/* Append a reduce step: dst block = red_op over the blocks of srcs (all
 * of srcs[0].shape's geometry) of extent `extent`. */
int spk_plan_add_reduce(spk_plan *plan, const spk_block_end *dst,
                        const spk_block_end *srcs, int nsrc,
                        const int64_t *extent, size_t esize, spk_err *err);

/* Units a move can be cut into for parallel execution: rows of its
 * outermost dim, or bytes when it is one contiguous run. */
uint64_t spk_move_units(const spk_move *m);
/* Bytes a move (or a reduce step's geometry) writes. */
uint64_t spk_move_bytes(const spk_move *m);
/* Whether the plan's copies stream past the cache (stream_bytes). */
int spk_plan_streams(const spk_plan *plan);

/* Execute units [u0, u1) of m; src and dst are the base addresses of the
 * source and destination tensors (offsets are added here). A plain copy:
 * use spk_move_exec for plans that scale. */
void spk_move_run(const spk_move *m, const uint8_t *src, uint8_t *dst,
                  uint64_t u0, uint64_t u1);

/* Execute units [u0, u1) of move m of plan, with the plan's scale.
 * bases[rank * SPK_T_COUNT + t] is the base address of rank's tensor t. */
void spk_move_exec(const spk_plan *plan, const spk_move *m,
                   uint8_t *const *bases, uint64_t u0, uint64_t u1);

/* Execute units [u0, u1) of reduce step r of plan. */
void spk_reduce_exec(const spk_plan *plan, const spk_reduce *r,
                     uint8_t *const *bases, uint64_t u0, uint64_t u1);

/* Whether the plan's reduce steps, all run into one output, are one flat
 * reduce of bytes: each a single run of the output, at the offset where
 * the one before ended, over every rank's input at that same offset, in
 * rank order (an all_reduce planned on one node). */
int spk_plan_flat(const spk_plan *plan, uint64_t bytes);

/* dst = the reduction of srcs[0 .. nsrc), bytes each, elementwise in that
 * order, with the plan's dtype and op: for a plan that spk_plan_flat
 * accepts, the same bytes as its reduce steps, in one call. */
void spk_reduce_flat(const spk_plan *plan, const uint8_t *const *srcs,
                     uint32_t nsrc, uint8_t *dst, uint64_t bytes);

/* Run a whole plan on this thread: the reference executor of tests and the
 * fallback of movers. */
void spk_plan_exec(const spk_plan *plan, uint8_t *const *bases);

#endif
