/* What every benchmark of bench/ shares, so spcoll and its baselines
 * (Open MPI: mpi_bench.c; gloo: scripts/bench_gloo.py, which repeats
 * these rules in Python) measure the same sizes the same way: the size
 * ladder, iteration counts, the memory bound, the Ulysses tensor shape,
 * nccl-tests' bandwidth formulas and one CSV/JSON row format.
 * Plain C and libc only: mpi_bench.c is built with mpicc. */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The ops every source measures. BENCH_ULYSSES is the all-to-all of a
 * [b, s/P, h, d] tensor into [b, s, h/P, d]: spcoll does it in one copy;
 * the baselines the way the seeds do (permute + contiguous +
 * all_to_all_single + permute + contiguous). */
typedef enum {
  BENCH_ALL_GATHER = 0,
  BENCH_ALL_REDUCE,
  BENCH_REDUCE_SCATTER,
  BENCH_ALL_TO_ALL,
  BENCH_ULYSSES,
  BENCH_NOPS
} bench_op;

const char *bench_op_name(bench_op op);
/* -1 when name is none of them. */
int bench_op_parse(const char *name);
/* Bit mask of comma-separated op names; 0 (after a message naming prog and
 * the name) on an unknown one. */
unsigned bench_ops_parse(const char *list, const char *prog);

/* nccl-tests' bus-bandwidth factor: (n-1)/n, all-reduce 2(n-1)/n. */
double bench_bus_factor(bench_op op, int world);

/* Bytes one op writes into all ranks' outputs at nccl-tests size `bytes`
 * (the copy-efficiency numerator): the output on every rank for
 * all-gather, all-to-all and all-reduce; the input once in total for
 * reduce-scatter. */
double bench_written(bench_op op, size_t bytes, int world);

/* The size ladder: 8 B, then x4, and the maximum itself as the last
 * point when x4 steps over it (8 B .. 512 MiB, 1 GiB). 0 after max. */
size_t bench_next_size(size_t bytes, size_t max_bytes);

/* Timed iterations at a size: `base` from 64 KiB to 1 MiB; more below,
 * up to 50 times as many; fewer above, so a large point costs about as
 * much as a 1 MiB one, never under 3. */
int bench_iters(size_t bytes, int base);
/* Warm-up iterations: about 64 MiB of ops, at most 50000, at least 1. */
int bench_warmup(size_t bytes);

/* Bytes a run may allocate at one point: $BENCH_MEM_BYTES when set, else
 * fraction (default 0.5, $BENCH_MEM_FRACTION) of MemAvailable at start. */
size_t bench_mem_bound(void);

/* The Ulysses tensor [b, s/P, h, d] of `bytes` per rank for `world`
 * ranks: b = 1, h = 32 (4 * world when world does not divide 32),
 * d = 128 or less for small sizes. Returns its size in bytes (at most
 * `bytes`), or 0 when bytes is too small for h elements. */
size_t bench_ulysses_shape(size_t bytes, int world, size_t esize,
                           int64_t shape[4]);

/* The float32 tensors of an op at nccl-tests size `bytes`, which every
 * source's buffers follow: the output for all-gather, the input for
 * reduce-scatter, the buffer for all-reduce, the per-rank buffer for the
 * all-to-alls ([w, n/w] -> [1, n]: row r of every rank), and the Ulysses
 * [b, s/P, h, d] -> [b, s, h/P, d]. */
typedef struct {
  int nd_in, nd_out;
  int64_t in[4], out[4];
  size_t in_bytes, out_bytes;
  size_t bytes;           /* nccl-tests' size of this point */
} bench_shape;

/* 0 when the size is too small to give every rank an element. */
int bench_shape_of(bench_op op, size_t bytes, int w, bench_shape *p);

/* One measured point of any source. */
typedef struct {
  const char *source;   /* spcoll, mpi, mpi_tuned, gloo, memcpy1, ... */
  bench_op op;
  int ranks;
  size_t bytes;         /* nccl-tests' size */
  int iters;
  double us, p50_us, p99_us; /* mean, median, 99th percentile */
} bench_result;

/* Mean, median and 99th percentile of n times in seconds (sorts t). */
void bench_stats(double *t, int n, double *mean_us, double *p50_us,
                 double *p99_us);

double bench_now_s(void);

/* An array for n times, every page of it written: a page's first write
 * faults (microseconds), and one inside the timed loop stalled the op
 * after it on every 512th iteration, on both ranks through the one that
 * waited. NULL, after a message naming prog, when out of memory. */
double *bench_times(int n, const char *prog);

/* algbw and busbw in GB/s (1e9 bytes per second). */
double bench_algbw(const bench_result *r);
double bench_busbw(const bench_result *r);

/* The shared CSV columns; sources may append their own after them. */
void bench_csv_header(FILE *f);
void bench_csv_row(FILE *f, const bench_result *r);
/* The row as a JSON object without its closing brace, for callers to
 * add fields. */
void bench_json_row(FILE *f, const bench_result *r);
/* nccl-tests-style table line (and its header). */
void bench_table_header(FILE *f);
void bench_table_row(FILE *f, const bench_result *r);

#endif
