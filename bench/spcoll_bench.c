/* spcoll-bench: every op through a private spcolld at sizes from 8 B up,
 * with nccl-tests' columns (size, count, type, time, algbw, busbw), the
 * copy efficiency against a memcpy measured in the same run, and p50/p99
 * latency; or (--latency) tiny ops back to back with where the round trip
 * went. Prints numbers and writes CSV/JSON; asserts nothing about speed.
 * The baselines (Open MPI, gloo, ucx_perftest) and the merged table with
 * ratios are scripts/bench_run.sh's. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"
#include "spcoll_bench.h"

static void usage(void) {
  fprintf(stderr,
          "usage: spcoll-bench [--spcolld PATH] [--ranks N] [--max-bytes B]\n"
          "         [--iters N] [--ops a,b,..] [--workers T] [--guard S]\n"
          "         [--csv PATH] [--json PATH] [--latency] [--no-verify]\n"
          "         [--fast-bytes B (spcolld's shared-memory path; 0: off)]\n"
          "         [--mid-spin-us U (spcolld's answer polling; 0: off)]\n"
          "ops: all_gather, all_reduce, reduce_scatter, all_to_all, ulysses\n"
          "--latency: 8 B ops, p50/p99 round trip and its split (default "
          "--iters 10000)\n"
          "every output is checked after its timed iterations unless "
          "--no-verify\n");
}

typedef struct {
  int world, threads, iters, latency, guard, verify;
  size_t max_bytes;
  unsigned ops;
  const char *csv, *json;
  sweep_cfg sweep;
  latency_cfg lat;
} bench_opts;

static void *shared_alloc(size_t len) {
  void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    fprintf(stderr, "spcoll-bench: mmap of %zu shared bytes: %m\n", len);
    return NULL;
  }
  return p;
}

/* The rank processes' results land in shared memory set up here. */
static int bench_prepare(bench_opts *o, const char *socket) {
  if (o->latency) {
    o->lat = (latency_cfg){.socket = socket, .iters = o->iters};
    o->lat.samples = shared_alloc(latency_samples_size(o->world, o->iters));
    return o->lat.samples == NULL;
  }
  o->sweep = (sweep_cfg){.socket = socket, .max_bytes = o->max_bytes,
                         .mem_bound = bench_mem_bound(), .iters = o->iters,
                         .ops = o->ops, .verify = o->verify};
  o->sweep.rows = shared_alloc(sizeof(bench_result) * SWEEP_MAXROWS +
                               sizeof(int));
  if (o->sweep.rows == NULL)
    return 1;
  o->sweep.nrows = (int *)(o->sweep.rows + SWEEP_MAXROWS);
  printf("# spcoll-bench: %d ranks, float32, mover threads %d, up to %zu B, "
         "memory bound %.1f GiB, %d iterations from 64 KiB to 1 MiB (up to "
         "50x below, fewer above, at least 3), mean time of rank 0; "
         "copy_eff = bytes written to all "
         "outputs / time / memcpyT (T = mover threads)\n", o->world,
         o->threads, o->max_bytes, (double)o->sweep.mem_bound / (1 << 30),
         o->iters);
  fflush(stdout);
  return 0;
}

static int bench_ranks(bench_opts *o) {
  int failed = o->latency
                   ? spt_run_ranks(o->world, latency_rank, &o->lat, o->guard)
                   : spt_run_ranks(o->world, sweep_rank, &o->sweep, o->guard);
  if (failed)
    fprintf(stderr, "spcoll-bench: %d rank(s) failed\n", failed);
  return failed != 0;
}

/* After the daemon stopped: the memcpy ceiling runs on a quiet machine. */
static int bench_report(const bench_opts *o) {
  if (o->latency)
    return latency_report(&o->lat, o->world, o->csv, o->json);
  return sweep_report(&o->sweep, o->world, o->threads, o->csv, o->json);
}

int main(int argc, char **argv) {
  static const struct option lo[] = {
      {"spcolld", required_argument, 0, 's'},
      {"ranks", required_argument, 0, 'r'},
      {"max-bytes", required_argument, 0, 'm'},
      {"iters", required_argument, 0, 'i'},
      {"ops", required_argument, 0, 'o'},
      {"workers", required_argument, 0, 'w'},
      {"guard", required_argument, 0, 'g'},
      {"csv", required_argument, 0, 'c'},
      {"json", required_argument, 0, 'j'},
      {"latency", no_argument, 0, 'l'},
      {"no-verify", no_argument, 0, 'n'},
      {"fast-bytes", required_argument, 0, 'f'},
      {"mid-spin-us", required_argument, 0, 'M'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  bench_opts o = {.world = 4, .threads = cores > 0 ? (int)cores : 1,
                  .iters = 0, .guard = 3600, .verify = 1,
                  .max_bytes = (size_t)1 << 30, .ops = (1u << BENCH_NOPS) - 1, .csv = NULL, .json = NULL};
  const char *fast_bytes = NULL, *mid_spin = NULL; /* spcolld's defaults */
  int opt;
  while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    switch (opt) {
    case 's': setenv("SPCOLLD", optarg, 1); break;
    case 'r': o.world = atoi(optarg); break;
    case 'm': o.max_bytes = (size_t)strtoull(optarg, NULL, 0); break;
    case 'i': o.iters = atoi(optarg); break;
    case 'o': o.ops = bench_ops_parse(optarg, "spcoll-bench"); break;
    case 'w': o.threads = atoi(optarg); break;
    case 'g': o.guard = atoi(optarg); break;
    case 'c': o.csv = optarg; break;
    case 'j': o.json = optarg; break;
    case 'l': o.latency = 1; break;
    case 'n': o.verify = 0; break;
    case 'f': fast_bytes = optarg; break; /* spcolld's; 0: no fast path */
    case 'M': mid_spin = optarg; break;
    default: usage(); return 2;
    }
  }
  if (o.iters == 0)
    o.iters = o.latency ? 10000 : 200;
  if (o.world < 2 || o.world > 256 || o.iters < 1 || o.max_bytes < 8 ||
      o.ops == 0 || o.threads < 1 || o.threads > 64 || o.guard < 1) {
    fprintf(stderr, "spcoll-bench: --ranks 2..256, --iters >= 1, "
            "--max-bytes >= 8, --workers 1..64, known --ops\n");
    usage();
    return 2;
  }
  if (o.csv == NULL)
    o.csv = o.latency ? "latency.csv" : "bench.csv";
  if (o.json == NULL)
    o.json = o.latency ? "latency.json" : "bench.json";
  char workers[16];
  snprintf(workers, sizeof(workers), "%d", o.threads);
  const char *extra[9] = {"--workers", workers, "--log-level", "warn"};
  int nextra = 4;
  if (fast_bytes != NULL)
    extra[nextra++] = "--fast-bytes", extra[nextra++] = fast_bytes;
  if (mid_spin != NULL)
    extra[nextra++] = "--mid-spin-us", extra[nextra++] = mid_spin;
  extra[nextra] = NULL;
  spt_daemon d;
  if (spt_daemon_start(&d, extra) < 0) {
    fprintf(stderr, "spcoll-bench: could not start spcolld ($SPCOLLD or "
            "--spcolld)\n");
    return 1;
  }
  int rc = bench_prepare(&o, d.socket);
  if (rc == 0)
    rc = bench_ranks(&o);
  int st = spt_daemon_stop(&d);
  if (st != 0) {
    fprintf(stderr, "spcoll-bench: spcolld exited with status %d\n", st);
    rc = 1;
  }
  if (rc == 0)
    rc = bench_report(&o);
  if (rc == 0)
    printf("# wrote %s and %s\n", o.csv, o.json);
  return rc;
}
