/* Open MPI's side of one benchmark point, shared by spcoll-mpi-bench (the
 * plain baseline) and spcoll-pair-bench (both libraries in the same
 * processes): buffers at a size of the ladder and the op the way a user
 * of MPI would call it. Built with mpicc. */
#ifndef MPI_OPS_H
#define MPI_OPS_H

#include <errno.h> /* program_invocation_short_name (_GNU_SOURCE) */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

#include "bench_common.h"

/* Every MPI call is checked: with MPI_ERRORS_RETURN a failure comes back
 * here, is named, and ends the job. */
#define MPI_CHECK(call)                                                      \
  do {                                                                       \
    int rc_ = (call);                                                        \
    if (rc_ != MPI_SUCCESS) {                                                \
      char msg_[MPI_MAX_ERROR_STRING];                                       \
      int len_ = 0;                                                          \
      MPI_Error_string(rc_, msg_, &len_);                                    \
      fprintf(stderr, "%s: %s failed: %s\n", program_invocation_short_name, \
              #call, msg_);                                                  \
      MPI_Abort(MPI_COMM_WORLD, 1);                                          \
    }                                                                        \
  } while (0)

typedef struct {
  float *in, *out, *pack, *unpack; /* pack/unpack: the Ulysses staging */
  size_t n_in, n_out, n_stage;     /* elements */
  int64_t shape[4];                /* Ulysses [b, s/P, h, d] */
  size_t bytes;                    /* nccl-tests' size */
} mpi_point;

/* Counts of op's buffers at the point of shape s (bench_shape_of, as
 * every source's), nothing allocated yet. */
void mpi_point_of(bench_op op, const bench_shape *s, mpi_point *p);
/* NULL when the point's counts fit MPI's int, else why not. */
const char *mpi_point_unfit(const mpi_point *p);
/* Bytes all w ranks hold at the point, Open MPI's temporaries included. */
size_t mpi_point_footprint(const mpi_point *p, int w);
/* Allocate and fill rank's buffers. 0, or -1 after a message (nothing
 * left allocated). */
int mpi_point_alloc(mpi_point *p, int rank);
void mpi_point_free(mpi_point *p);
/* One op on MPI_COMM_WORLD of w ranks. */
void mpi_point_run(bench_op op, const mpi_point *p, int w);

#endif
