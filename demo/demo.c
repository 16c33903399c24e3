/* spcoll-demo: a private spcolld plus 4 trainer processes doing
 * all-gathers of random float32 tensors (aligned and unaligned), every
 * result checked against a single-process reference, with per-op latency
 * and bandwidth. Exits non-zero on any mismatch or error. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "split_rule.h"
#include "ulysses.h"

typedef struct {
  const char *what;
  int ndim;
  int64_t shape[4];   /* full (gathered) shape */
  int dim;
} demo_case;

static const demo_case cases[] = {
    {"hidden [s, h], aligned rows", 2, {4096, 1024}, 0},
    {"hidden [b, s, h], unaligned seq 4099", 3, {2, 4099, 512}, 1},
    {"ulysses [b, s, heads, d], seq 8190", 4, {1, 8190, 16, 64}, 1},
    {"logits [b, s, v], last dim 32003", 3, {1, 64, 32003}, -1},
    {"small [7, 5], unaligned", 2, {7, 5}, 0},
};

typedef struct {
  const char *socket;
  int iters;
} demo_opts;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Run one case on this rank; rank 0 prints the timing line. */
static int demo_case_run(spc_client *c, spc_group *g, const demo_case *dc,
                         int rank, int world, int iters) {
  int d = dc->dim < 0 ? dc->dim + dc->ndim : dc->dim;
  int64_t sizes[64], ishape[4], total = 1;
  spk_split_sizes(dc->shape[d], world, sizes);
  memcpy(ishape, dc->shape, sizeof(ishape));
  ishape[d] = sizes[rank];
  for (int i = 0; i < dc->ndim; i++)
    total *= dc->shape[i];
  size_t ob = (size_t)total * 4, ib = ob / (size_t)dc->shape[d] *
                                      (size_t)sizes[rank];
  size_t ioff = (ob + 4095) / 4096 * 4096;
  spc_buffer *b;
  spc_tensor in, out;
  if (spc_buffer_alloc(c, ioff + ib + 4, &b) < 0 ||
      spc_tensor_init(&out, b, 0, SPC_FLOAT32, dc->ndim, dc->shape) < 0 ||
      spc_tensor_init(&in, b, ioff, SPC_FLOAT32, dc->ndim, ishape) < 0) {
    fprintf(stderr, "rank %d: setup: %s\n", rank, spc_last_error(c));
    return 1;
  }
  spt_fill(spc_tensor_data(&in), SPC_FLOAT32, ib / 4, 7, rank);
  double t[1000];
  int rc = 0;
  for (int it = -2; it < iters && rc == 0; it++) { /* 2 warm-up rounds */
    double t0 = now_s();
    rc = spc_all_gather(g, &in, &out, dc->dim, sizes);
    if (it >= 0)
      t[it] = now_s() - t0;
  }
  if (rc < 0)
    fprintf(stderr, "rank %d: all_gather: %s\n", rank, spc_last_error(c));
  else
    rc = spt_check_gather(spc_tensor_data(&out), SPC_FLOAT32, dc->ndim,
                          dc->shape, d, sizes, world, 7, rank);
  if (rc == 0 && rank == 0) {
    qsort(t, (size_t)iters, sizeof(double), cmp_double);
    double p50 = t[iters / 2];
    printf("%-40s %10.1f KiB %9.1f us %8.2f GB/s %8.2f GB/s  verified\n",
           dc->what, (double)ob / 1024.0, p50 * 1e6, (double)ob / p50 / 1e9,
           (double)ob * world / p50 / 1e9);
  }
  spc_buffer_free(b);
  return rc != 0;
}

static int demo_rank(int rank, int world, void *arg) {
  const demo_opts *o = arg;
  spc_client *c = spt_connect(o->socket);
  spc_group *g;
  if (c == NULL || spc_group_join(c, "demo", world, rank, &g) < 0) {
    fprintf(stderr, "rank %d: join: %s\n", rank, spc_last_error(c));
    return 1;
  }
  int bad = 0;
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    bad += demo_case_run(c, g, &cases[i], rank, world, o->iters);
  spc_group_leave(g);
  spc_disconnect(c);
  if (bad == 0 && world % 2 == 0 && world <= 8)
    bad += demo_ulysses_rank(o->socket, rank, world);
  return bad;
}

int main(int argc, char **argv) {
  static const struct option opts[] = {{"spcolld", required_argument, 0, 's'},
                                       {"ranks", required_argument, 0, 'r'},
                                       {"iters", required_argument, 0, 'i'},
                                       {0, 0, 0, 0}};
  int world = 4, opt;
  demo_opts o = {NULL, 20};
  while ((opt = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    if (opt == 's')
      setenv("SPCOLLD", optarg, 1);
    else if (opt == 'r')
      world = atoi(optarg);
    else if (opt == 'i')
      o.iters = atoi(optarg);
    else
      return 2;
  }
  if (world < 1 || world > 64 || o.iters < 1 || o.iters > 1000) {
    fprintf(stderr, "spcoll-demo: --ranks 1..64, --iters 1..1000\n");
    return 2;
  }
  spt_daemon d;
  if (spt_daemon_start(&d, NULL) < 0) {
    fprintf(stderr, "spcoll-demo: could not start spcolld\n");
    return 1;
  }
  o.socket = d.socket;
  printf("spcoll demo: spcolld on %s, %d trainer processes, all_gather "
         "float32, p50 of %d iterations\n", d.socket, world, o.iters);
  printf("%-40s %14s %12s %13s %13s\n", "case (full gathered shape)",
         "output/rank", "latency", "algbw/rank", "total written");
  int failed = spt_run_ranks(world, demo_rank, &o, 300);
  int drc = spt_daemon_stop(&d);
  if (failed || drc != 0) {
    printf("demo FAILED: %d rank(s) failed, daemon exit %d\n", failed, drc);
    return 1;
  }
  printf("demo OK: every result on every rank matched the single-process "
         "reference\n");
  return 0;
}
