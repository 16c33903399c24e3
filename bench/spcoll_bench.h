/* spcoll-bench's parts: the op sweep through a private daemon, the
 * latency mode, and the memcpy ceiling measured in the same run. */
#ifndef SPCOLL_BENCH_H
#define SPCOLL_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "bench_common.h"

enum { SWEEP_MAXROWS = 512 };

typedef struct {
  const char *socket;
  size_t max_bytes;
  size_t mem_bound;     /* bytes all ranks' buffers may take at one point */
  int iters;            /* bench_iters' base */
  unsigned ops;         /* bit i: bench_op i is measured */
  int verify;           /* check every output after its timed iterations */
  bench_result *rows;   /* shared with the parent (MAP_SHARED), rank 0's */
  int *nrows;
} sweep_cfg;

/* Rank body of the sweep (an spt_rank_fn): every op of cfg->ops at every
 * ladder size that fits the memory bound. 0 on success. */
int sweep_rank(int rank, int world, void *cfg);

/* Print the table with copy efficiency against the memcpy ceiling at
 * `threads` threads, and write CSV and JSON. 0 on success. */
int sweep_report(const sweep_cfg *cfg, int world, int threads,
                 const char *csv_path, const char *json_path);

typedef struct {
  const char *socket;
  int iters;
  uint64_t *samples;    /* MAP_SHARED: [op][rank][iter][LAT_FIELDS] */
} latency_cfg;

enum { LAT_FIELDS = 5, LAT_NOPS = 4 };

size_t latency_samples_size(int world, int iters);
/* Rank body of the latency mode: 8 B ops (4 * world bytes when larger)
 * back to back, recording the round trip and spc_last_timing. */
int latency_rank(int rank, int world, void *cfg);
/* p50/p99 of the round trip and where it went; CSV and JSON. */
int latency_report(const latency_cfg *cfg, int world, const char *csv_path,
                   const char *json_path);

/* Median GB/s of copying `bytes` with `threads` threads (a pool started
 * once per call, so small sizes do not measure thread start-up). 0 when
 * the buffers cannot be allocated. */
double memcpy_gbs(size_t bytes, int threads);

#endif
