/* spcoll's side of one benchmark point, shared by spcoll-bench's sweep
 * (through its own daemon) and spcoll-pair-bench (beside Open MPI in the
 * same processes): the float32 tensors of an op at a size of the ladder,
 * in a daemon-shared buffer, the op, and the check of its output. */
#ifndef SPCOLL_POINT_H
#define SPCOLL_POINT_H

#include <stddef.h>
#include <stdint.h>

#include "bench_common.h"
#include "spcoll.h"

typedef struct {
  int nd_in, nd_out;
  int64_t in[4], out[4];
  size_t in_bytes, out_bytes;
  size_t bytes;           /* nccl-tests' size of this point */
} point_shape;

typedef struct {
  point_shape ps;
  spc_buffer *buf;        /* input, then the output at a page boundary */
  spc_tensor in, out;
} spc_point;

/* Float32 tensors of op at nccl-tests size `bytes` for w ranks: the
 * output for all-gather, the input for reduce-scatter, the buffer for
 * all-reduce, the per-rank buffer for the all-to-alls. 0 when the size
 * is too small to give every rank an element. */
int point_shape_of(bench_op op, size_t bytes, int w, point_shape *p);
/* Bytes the buffers of all w ranks take at the point. */
size_t point_shape_need(const point_shape *p, int w);

/* Rank's buffer and tensors for ps, its input filled. 0, or 1 after a
 * message naming the failed call (nothing left allocated). */
int spc_point_setup(spc_client *c, const point_shape *ps, int rank,
                    spc_point *p);
/* 0, or 1 after a message. */
int spc_point_free(spc_point *p);
/* One op of the point; spcoll's return code. */
int spc_point_run(spc_group *g, bench_op op, spc_point *p);
/* Rank r's output element by element against what op must produce:
 * 0 when right; else 1 after printing the first wrong element. */
int spc_point_verify(bench_op op, const spc_point *p, int r, int w);

#endif
