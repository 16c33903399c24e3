/* The op cases the GPU suites run on device tensors, and what runs one:
 * each rank runs a case on host buffers through its daemon (the host
 * mover, or UCX across nodes, both checked element by element against
 * naive references by tests/integ) and again on device buffers, and the
 * outputs must be bitwise equal. Shared so that every placement (one
 * daemon: test_gpu_ops; several daemons: test_gpu_multinode) runs the same
 * table, the same values and the same comparison; a case added here is run
 * by all of them. The suites keep what differs: where ranks are, which
 * daemon they talk to and which movers' counters must have moved. */
#ifndef GPC_GPU_CASES_H
#define GPC_GPU_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "gpu_testlib.h"
#include "spcoll.h"

#ifdef SPC_HAVE_CUDA

enum { GPC_SPLIT, GPC_GATHER, GPC_GATHER_UNEQ, GPC_A2A, GPC_A2AV, GPC_AR,
       GPC_RS, GPC_ZZS, GPC_ZZG, GPC_PKS, GPC_PKG };

typedef struct {
  const char *name;
  int kind;           /* GPC_SPLIT... */
  spc_dtype dt;
  int nd;
  int64_t shape[SPC_MAX_DIMS];
  int d, g;
  int flags;          /* reduce op (GPC_AR), else a grad scale; and GPC_H* */
} gpc_case;

/* Values that expose the summation order, or NaNs for max/min. */
#define GPC_HORDER 0x100
#define GPC_HNAN 0x200
#define GPC_FLAGS(c) ((c)->flags & 0xff)

#define GPC_MB ((size_t)1 << 20)
/* What one rank of a world up to 4 needs for every case: its host buffer
 * (input, then the output at the next 4 KiB), and its device memory and
 * pinned read-back buffer. Bigger worlds need more (the big gather's
 * output is 16 MiB per rank). */
#define GPC_HOST_BYTES ((size_t)96 * GPC_MB)
#define GPC_DEV_BYTES ((size_t)80 * GPC_MB)

extern const gpc_case gpc_cases[];
extern const size_t gpc_ncases;

/* Piece r of n split over w ranks (the first n % w get one more). */
int64_t gpc_rule(int64_t n, int w, int r);

/* Rank r's (of w, at most 8) op and input shape for case c; lists holds
 * 16 int64s for the op's size lists, and must live as long as the op. */
spc_op gpc_case_op(const gpc_case *c, int r, int w, int64_t *shape,
                   int64_t *lists);

/* Floats of magnitudes 2^-k .. 2^k, so a sum's rounding depends on the
 * order of the additions; with nan, some elements of some ranks are NaN. */
void gpc_fill_hard(void *p, spc_dtype dt, size_t n, int rank, uint64_t seed,
                   int nan);

size_t gpc_bytes_of(const int64_t *s, int nd, spc_dtype dt);

/* One rank process: its connection, group, host buffer, device memory
 * (registered whole as dev_all) and the pinned buffer device outputs are
 * read back into. */
typedef struct {
  spc_client *c;
  spc_group *g;
  spc_buffer *host, *dev_all;
  uint8_t *dev;            /* cudaMalloc'd, registered whole as dev_all */
  size_t vmm_chunk;        /* set before gpc_rank_open: dev is cuMem
                            * memory in allocations of this many bytes
                            * (gpt_vmm_alloc), and big outputs stay in it */
  int sym;                 /* set before gpc_rank_open: device ops run in
                            * a symmetric buffer (symbuf, dev_bytes) */
  spc_buffer *symbuf;
  cudaStream_t stream;
  uint8_t *got;
  int rank, world;
  size_t host_bytes, dev_bytes;
  char why[512];           /* the first failure gpc_rank_fail printed */
} gpc_rank;

/* Print why rank k failed at what (with the client's last error), and
 * keep the first such line in k->why (a suite may pass it on); 1. */
int gpc_rank_fail(gpc_rank *k, const char *cs, const char *what, int rc);

/* Set up rank k (rank, world set) on GPU dev: stream, device and pinned
 * memory of dev_bytes, a connection to socket, group joined, host buffer
 * of host_bytes, the device memory registered. 0, or 1 having said why. */
int gpc_rank_open(gpc_rank *k, const char *socket, const char *group,
                  int dev, size_t host_bytes, size_t dev_bytes);
/* Undo gpc_rank_open (the group left, the connection closed). */
void gpc_rank_close(gpc_rank *k);

/* The case on device memory: inputs copied and the output poisoned on the
 * rank's stream, the op ordered after them, the result read back after
 * it, all without synchronizing in between (use_stream), or with
 * synchronous copies and spc_run. Big cases put the output in memory
 * spc_buffer_alloc_device made. */
int gpc_device_run(gpc_rank *k, const gpc_case *c, const spc_op *op,
                   const spc_tensor *hin, const int64_t *oshape, size_t in_b,
                   size_t out_b, int use_stream);

/* Case c on host buffers, then on device buffers (on the rank's stream
 * when use_stream); 0 when the outputs are bitwise equal. */
int gpc_run_case(gpc_rank *k, const gpc_case *c, int use_stream);

/* The cases gpc_cases[which[i]] for i < n (every case when which is NULL),
 * those at even places of the table on the rank's stream (so a case runs
 * the same way in a subset); each failure is named, and rank 0 says each
 * case that passed, tagged with tag. Returns the failures. */
int gpc_run_cases(gpc_rank *k, const char *tag, const size_t *which,
                  size_t n);

#endif /* SPC_HAVE_CUDA */

#endif
