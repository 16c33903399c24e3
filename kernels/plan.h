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

typedef struct {
  int world;
  spk_move *moves;
  size_t nmoves, cap;
  uint64_t bytes;          /* total bytes the moves write */
} spk_plan;

/* One side of a block: a rank's tensor, its shape and the block's origin. */
typedef struct {
  uint32_t rank;
  uint8_t t;
  const spk_shape *shape;
  const int64_t *origin;
} spk_block_end;

void spk_plan_init(spk_plan *plan, int world);
void spk_plan_free(spk_plan *plan);

/* Append the copy of the block `extent` (elements of esize bytes) from src
 * to dst. An empty block appends nothing. SPK_ENO_MEMORY on allocation
 * failure. */
int spk_plan_add_block(spk_plan *plan, const spk_block_end *src,
                       const spk_block_end *dst, const int64_t *extent,
                       size_t esize, spk_err *err);

/* Units a move can be cut into for parallel execution: rows of its
 * outermost dim, or bytes when it is one contiguous run. */
uint64_t spk_move_units(const spk_move *m);

/* Execute units [u0, u1) of m; src and dst are the base addresses of the
 * source and destination tensors (offsets are added here). */
void spk_move_run(const spk_move *m, const uint8_t *src, uint8_t *dst,
                  uint64_t u0, uint64_t u1);

#endif
