/* spcoll-pair-bench: spcoll and Open MPI timed in the same processes, in
 * turn, at each point of the ladder up to --max-bytes. Under mpirun: rank 0
 * starts a private spcolld, every rank joins one spcoll group beside
 * MPI_COMM_WORLD, and each point is timed in --blocks blocks per library,
 * in the order MPI spcoll, spcoll MPI, MPI spcoll, ... So both libraries
 * are timed on the same CPUs, with the same neighbours, in the same
 * seconds of the machine: where separate runs draw a VM's fast or slow
 * states each on its own (docs/performance.md), here both share them.
 * Per op on rank 0, no barrier between iterations of a block (as
 * spcoll-bench and spcoll-mpi-bench); a barrier and a few untimed ops
 * start every block. CSV rows "mpi_paired" and "spcoll_paired" (with the
 * blocks and how many ended with two ranks on one CPU). Prints numbers;
 * asserts nothing about speed; spcoll's outputs are checked. */
#include <getopt.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "mpi_ops.h"
#include "spcoll_point.h"

enum { SIDE_MPI, SIDE_SPC, SIDES };
static const char *const side_source[SIDES] = {"mpi_paired", "spcoll_paired"};

typedef struct {
  int rank, world, iters, blocks;
  size_t max_bytes, mem_bound;
  unsigned ops;
  FILE *csv;
  spc_client *c;
  spc_group *g;
} pair_cfg;

/* Both libraries' buffers of one point and each side's times. */
typedef struct {
  bench_op op;
  bench_shape shape;
  mpi_point m;
  spc_point s;
  int blocks;           /* per side */
  double *t[SIDES];
  int n[SIDES];         /* times recorded */
  int same_cpu[SIDES];  /* blocks that ended with two ranks on one CPU */
} pair_point;

static void side_op(const pair_cfg *cfg, pair_point *p, int side) {
  if (side == SIDE_MPI) {
    mpi_point_run(p->op, &p->m, cfg->world);
    return;
  }
  int rc = spc_point_run(cfg->g, p->op, &p->s);
  if (rc != 0) {
    fprintf(stderr, "spcoll-pair-bench rank %d: %s at %zu B: %s\n",
            cfg->rank, bench_op_name(p->op), p->shape.bytes,
            spc_last_error(cfg->c));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* Whether two ranks are on one CPU now (-1 from sched_getcpu: unknown,
 * not shared). Kept to tell such blocks from the VM's slow states, which
 * were thought to be two ranks on one vCPU and are not: in those, the
 * ranks sit on different vCPUs (docs/performance.md). */
static int ranks_share_cpu(const pair_cfg *cfg) {
  int me = sched_getcpu(), all[256] = {0}, shared = 0;
  MPI_CHECK(MPI_Gather(&me, 1, MPI_INT, all, 1, MPI_INT, 0, MPI_COMM_WORLD));
  for (int i = 0; cfg->rank == 0 && i < cfg->world && !shared; i++)
    for (int j = 0; j < i && !shared; j++)
      shared = all[i] >= 0 && all[i] == all[j];
  return shared;
}

/* One block of k timed ops of one side, after a barrier and k/4 untimed
 * ones (at least one), so neither side's first op pays for the other's
 * last. */
static void side_block(const pair_cfg *cfg, pair_point *p, int side, int k) {
  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  for (int i = 0; i < k / 4 + 1; i++)
    side_op(cfg, p, side);
  for (int i = 0; i < k; i++) {
    double t0 = bench_now_s();
    side_op(cfg, p, side);
    p->t[side][p->n[side]++] = bench_now_s() - t0;
  }
  p->same_cpu[side] += ranks_share_cpu(cfg);
}

static void pair_time(const pair_cfg *cfg, pair_point *p, int iters) {
  int warmup = bench_warmup(p->shape.bytes);
  int nb = p->blocks = cfg->blocks < iters ? cfg->blocks : iters;
  for (int side = 0; side < SIDES; side++) {
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    for (int i = 0; i < warmup; i++)
      side_op(cfg, p, side);
  }
  for (int b = 0; b < nb; b++) {
    int k = (int)((long)iters * (b + 1) / nb - (long)iters * b / nb);
    int first = b & 1 ? SIDE_SPC : SIDE_MPI;
    side_block(cfg, p, first, k);
    side_block(cfg, p, 1 - first, k);
  }
}

static void pair_report(const pair_cfg *cfg, pair_point *p) {
  for (int side = 0; side < SIDES; side++) {
    bench_result r = {side_source[side], p->op, cfg->world, p->shape.bytes,
                      p->n[side], 0, 0, 0};
    bench_stats(p->t[side], p->n[side], &r.us, &r.p50_us, &r.p99_us);
    bench_table_row(stdout, &r);
    printf(" %6d %8d\n", p->blocks, p->same_cpu[side]);
    bench_csv_row(cfg->csv, &r);
    fprintf(cfg->csv, ",%d,%d\n", p->blocks, p->same_cpu[side]);
  }
  fflush(stdout);
}

/* Any failure ends the job: a rank that left the sweep would leave the
 * others waiting in their next collective. */
static void pair_fail(const char *what) {
  fprintf(stderr, "spcoll-pair-bench: %s\n", what);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

static void pair_run(const pair_cfg *cfg, pair_point *p) {
  int iters = bench_iters(p->shape.bytes, cfg->iters);
  if (mpi_point_alloc(&p->m, cfg->rank) < 0 ||
      spc_point_setup(cfg->c, &p->shape, cfg->rank, &p->s) != 0)
    pair_fail("a point's buffers could not be set up");
  for (int side = 0; side < SIDES; side++)
    if ((p->t[side] = bench_times(iters, "spcoll-pair-bench")) == NULL)
      pair_fail("no memory for the times");
  pair_time(cfg, p, iters);
  if (spc_point_verify(p->op, &p->s, cfg->rank, cfg->world) != 0)
    pair_fail("spcoll's output is wrong");
  if (cfg->rank == 0)
    pair_report(cfg, p);
  for (int side = 0; side < SIDES; side++)
    free(p->t[side]);
  mpi_point_free(&p->m);
  if (spc_point_free(&p->s) != 0)
    pair_fail("spc_buffer_free failed");
}

/* Whether the point runs: it has an element per rank, MPI's counts fit
 * an int, and both sides' buffers fit the memory bound. */
static int pair_fits(const pair_cfg *cfg, pair_point *p, size_t b) {
  if (!bench_shape_of(p->op, b, cfg->world, &p->shape))
    return 0;
  mpi_point_of(p->op, &p->shape, &p->m);
  const char *unfit = mpi_point_unfit(&p->m);
  size_t need = mpi_point_footprint(&p->m, cfg->world) +
                spc_point_need(&p->shape, cfg->world);
  if (unfit == NULL && need > cfg->mem_bound)
    unfit = "over the memory bound";
  if (unfit != NULL && cfg->rank == 0)
    printf("# skip %s %zu B: %s\n", bench_op_name(p->op), p->shape.bytes,
           unfit);
  return unfit == NULL;
}

static void sweep(const pair_cfg *cfg) {
  for (int op = 0; op < BENCH_NOPS; op++) {
    if (!(cfg->ops & (1u << op)))
      continue;
    for (size_t b = 8; b != 0; b = bench_next_size(b, cfg->max_bytes)) {
      pair_point p = {.op = (bench_op)op};
      if (pair_fits(cfg, &p, b))
        pair_run(cfg, &p);
    }
  }
}

/* Rank 0's daemon, its socket given to every rank; each rank joins the
 * group "pair". 0 on success on every rank. */
static int pair_connect(pair_cfg *cfg, spt_daemon *d) {
  char sock[sizeof(d->socket)] = "";
  int bad = 0;
  if (cfg->rank == 0) {
    char workers[16];
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(workers, sizeof(workers), "%ld", cores > 0 ? cores : 1);
    const char *extra[] = {"--workers", workers, "--log-level", "warn", NULL};
    bad = spt_daemon_start(d, extra) < 0;
    if (bad)
      fprintf(stderr, "spcoll-pair-bench: could not start spcolld "
              "(--spcolld or $SPCOLLD)\n");
    snprintf(sock, sizeof(sock), "%s", d->socket);
  }
  MPI_CHECK(MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD));
  MPI_CHECK(MPI_Bcast(sock, (int)sizeof(sock), MPI_CHAR, 0, MPI_COMM_WORLD));
  if (bad)
    return -1;
  int rc = spc_connect(sock, "bench", &cfg->c);
  if (rc < 0)
    fprintf(stderr, "spcoll-pair-bench rank %d: spc_connect(%s): %s\n",
            cfg->rank, sock, spc_last_error(NULL));
  else if ((rc = spc_group_join(cfg->c, "pair", cfg->world, cfg->rank,
                                &cfg->g)) < 0)
    fprintf(stderr, "spcoll-pair-bench rank %d: spc_group_join: %s\n",
            cfg->rank, spc_last_error(cfg->c));
  bad = rc < 0;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX,
                          MPI_COMM_WORLD));
  return bad ? -1 : 0;
}

static int pair_csv_open(pair_cfg *cfg, const char *path) {
  cfg->csv = fopen(path, "w");
  if (cfg->csv == NULL) {
    fprintf(stderr, "spcoll-pair-bench: cannot open %s: %m\n", path);
    return -1;
  }
  bench_csv_header(cfg->csv);
  fprintf(cfg->csv, ",blocks,same_cpu_blocks\n");
  printf("# spcoll-pair-bench: %d ranks, float32, up to %zu B, spcoll and "
         "Open MPI in the same processes, %d blocks each per point in "
         "turn, mean time of rank 0; same_cpu: blocks that ended with two "
         "ranks on one CPU\n", cfg->world, cfg->max_bytes, cfg->blocks);
  bench_table_header(stdout);
  printf(" %6s %8s\n", "blocks", "same_cpu");
  return 0;
}

static int pair_args(pair_cfg *cfg, const char **csv, int argc, char **argv) {
  static const struct option lo[] = {
      {"spcolld", required_argument, 0, 'S'},
      {"max-bytes", required_argument, 0, 'm'},
      {"iters", required_argument, 0, 'i'},
      {"blocks", required_argument, 0, 'b'},
      {"ops", required_argument, 0, 'o'},
      {"csv", required_argument, 0, 'c'},
      {0, 0, 0, 0}};
  int opt;
  while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    switch (opt) {
    case 'S': setenv("SPCOLLD", optarg, 1); break;
    case 'm': cfg->max_bytes = (size_t)strtoull(optarg, NULL, 0); break;
    case 'i': cfg->iters = atoi(optarg); break;
    case 'b': cfg->blocks = atoi(optarg); break;
    case 'o': cfg->ops = bench_ops_parse(optarg, "spcoll-pair-bench"); break;
    case 'c': *csv = optarg; break;
    default: cfg->ops = 0;
    }
  }
  if (cfg->ops != 0 && cfg->iters >= 1 && cfg->blocks >= 1 &&
      cfg->max_bytes >= 8 && cfg->world >= 2 && cfg->world <= 256)
    return 0;
  if (cfg->rank == 0)
    fprintf(stderr, "usage: mpirun -np N spcoll-pair-bench [--spcolld PATH] "
            "[--max-bytes B] [--iters N] [--blocks K] [--ops a,b] "
            "[--csv PATH] (2 <= N <= 256)\n");
  return -1;
}

int main(int argc, char **argv) {
  pair_cfg cfg = {.max_bytes = (size_t)1 << 20, .iters = 200, .blocks = 8,
                  .ops = (1u << BENCH_NOPS) - 1};
  const char *csv = "pair.csv";
  spt_daemon d = {0};
  MPI_CHECK(MPI_Init(&argc, &argv));
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &cfg.rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &cfg.world));
  if (pair_args(&cfg, &csv, argc, argv) < 0) {
    MPI_Finalize();
    return 2;
  }
  unsigned long long bound = bench_mem_bound();
  MPI_CHECK(MPI_Bcast(&bound, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD));
  cfg.mem_bound = (size_t)bound;
  int bad = cfg.rank == 0 && pair_csv_open(&cfg, csv) < 0;
  MPI_CHECK(MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD));
  if (!bad && pair_connect(&cfg, &d) == 0)
    sweep(&cfg);
  else
    bad = 1;
  spc_disconnect(cfg.c);
  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  if (cfg.rank == 0 && d.pid > 0 && spt_daemon_stop(&d) != 0) {
    fprintf(stderr, "spcoll-pair-bench: spcolld did not exit cleanly\n");
    bad = 1;
  }
  if (cfg.csv != NULL && fclose(cfg.csv) != 0) {
    fprintf(stderr, "spcoll-pair-bench: writing %s failed\n", csv);
    bad = 1;
  }
  MPI_CHECK(MPI_Finalize());
  return bad;
}
