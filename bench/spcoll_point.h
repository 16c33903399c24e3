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
  bench_shape ps;
  spc_buffer *buf;        /* input, then the output at a page boundary */
  spc_tensor in, out;
} spc_point;

/* Bytes the buffers of all w ranks take at a point of shape ps. */
size_t spc_point_need(const bench_shape *ps, int w);

/* Rank's buffer and tensors for ps, its input filled. 0, or 1 after a
 * message naming the failed call (nothing left allocated). */
int spc_point_setup(spc_client *c, const bench_shape *ps, int rank,
                    spc_point *p);
/* 0, or 1 after a message. */
int spc_point_free(spc_point *p);
/* One op of the point; spcoll's return code. */
int spc_point_run(spc_group *g, bench_op op, spc_point *p);
/* Rank r's output element by element against what op must produce:
 * 0 when right; else 1 after printing the first wrong element. */
int spc_point_verify(bench_op op, const spc_point *p, int r, int w);

#endif
