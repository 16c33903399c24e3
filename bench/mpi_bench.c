/* spcoll-mpi-bench: the Open MPI baseline of spcoll-bench, run under
 * mpirun on the same machine, at the same sizes (bench_common.c), timed
 * the same way (per op on rank 0, no barrier between iterations):
 * MPI_Allgather, MPI_Allreduce, MPI_Reduce_scatter_block, MPI_Alltoall,
 * and the Ulysses exchange the way the seeds do it (permute into a
 * contiguous [P, b*s/P, h/P, d], all-to-all, permute back into
 * [b, s, h/P, d]). Buffers are allocated once per point, so the baseline
 * pays for its copies but not for the allocations torch would make.
 * Built with mpicc; prints numbers and writes CSV; asserts nothing. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_ops.h"

typedef struct {
  int rank, world;
  size_t max_bytes, mem_bound;
  int iters;
  unsigned ops;
  const char *source;
  FILE *csv;
} mpi_cfg;

static int point_time(const mpi_cfg *cfg, bench_op op, mpi_point *p) {
  if (mpi_point_alloc(p, cfg->rank) < 0)
    return -1;
  int iters = bench_iters(p->bytes, cfg->iters);
  int warmup = bench_warmup(p->bytes);
  double *t = bench_times(iters, "spcoll-mpi-bench");
  if (t == NULL) {
    mpi_point_free(p);
    return -1;
  }
  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  for (int i = -warmup; i < iters; i++) {
    double t0 = MPI_Wtime();
    mpi_point_run(op, p, cfg->world);
    if (i >= 0)
      t[i] = MPI_Wtime() - t0;
  }
  if (cfg->rank == 0) {
    bench_result r = {cfg->source, op, cfg->world, p->bytes, iters, 0, 0, 0};
    bench_stats(t, iters, &r.us, &r.p50_us, &r.p99_us);
    bench_table_row(stdout, &r);
    printf("\n");
    fflush(stdout);
    bench_csv_row(cfg->csv, &r);
    fprintf(cfg->csv, "\n");
  }
  free(t);
  mpi_point_free(p);
  return 0;
}

static int sweep(const mpi_cfg *cfg) {
  for (int op = 0; op < BENCH_NOPS; op++) {
    if (!(cfg->ops & (1u << op)))
      continue;
    for (size_t b = 8; b != 0; b = bench_next_size(b, cfg->max_bytes)) {
      bench_shape s;
      mpi_point p;
      if (!bench_shape_of((bench_op)op, b, cfg->world, &s))
        continue;
      mpi_point_of((bench_op)op, &s, &p);
      const char *unfit = mpi_point_unfit(&p);
      if (unfit != NULL) {
        if (cfg->rank == 0)
          printf("# skip %s %zu B: %s\n", bench_op_name((bench_op)op),
                 p.bytes, unfit);
        continue;
      }
      size_t need = mpi_point_footprint(&p, cfg->world);
      if (need > cfg->mem_bound) {
        if (cfg->rank == 0)
          printf("# skip %s %zu B: needs %.1f GiB, bound %.1f GiB\n",
                 bench_op_name((bench_op)op), p.bytes,
                 (double)need / (1 << 30), (double)cfg->mem_bound / (1 << 30));
        continue;
      }
      if (point_time(cfg, (bench_op)op, &p) < 0)
        return -1;
    }
  }
  return 0;
}

int main(int argc, char **argv) {
  static const struct option lo[] = {
      {"max-bytes", required_argument, 0, 'm'},
      {"iters", required_argument, 0, 'i'},
      {"ops", required_argument, 0, 'o'},
      {"source", required_argument, 0, 's'},
      {"csv", required_argument, 0, 'c'},
      {0, 0, 0, 0}};
  mpi_cfg cfg = {.max_bytes = (size_t)1 << 30, .iters = 200,
                 .ops = (1u << BENCH_NOPS) - 1, .source = "mpi"};
  const char *csv_path = "mpi.csv";
  MPI_CHECK(MPI_Init(&argc, &argv));
  MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &cfg.rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &cfg.world));
  int opt;
  while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    switch (opt) {
    case 'm': cfg.max_bytes = (size_t)strtoull(optarg, NULL, 0); break;
    case 'i': cfg.iters = atoi(optarg); break;
    case 'o': cfg.ops = bench_ops_parse(optarg, "spcoll-mpi-bench"); break;
    case 's': cfg.source = optarg; break;
    case 'c': csv_path = optarg; break;
    default: cfg.ops = 0;
    }
  }
  if (cfg.ops == 0 || cfg.iters < 1 || cfg.max_bytes < 8 || cfg.world < 2) {
    if (cfg.rank == 0)
      fprintf(stderr, "usage: mpirun -np N spcoll-mpi-bench [--max-bytes B] "
              "[--iters N] [--ops a,b] [--source NAME] [--csv PATH] "
              "(N >= 2)\n");
    MPI_Finalize();
    return 2;
  }
  /* One bound for all ranks: rank 0 measures it before anything is
   * allocated. */
  unsigned long long bound = bench_mem_bound();
  MPI_CHECK(MPI_Bcast(&bound, 1, MPI_UNSIGNED_LONG_LONG, 0, MPI_COMM_WORLD));
  cfg.mem_bound = (size_t)bound;
  int bad = 0;
  if (cfg.rank == 0) {
    cfg.csv = fopen(csv_path, "w");
    if (cfg.csv == NULL) {
      fprintf(stderr, "spcoll-mpi-bench: cannot open %s: %m\n", csv_path);
      bad = 1;
    } else {
      bench_csv_header(cfg.csv);
      fprintf(cfg.csv, "\n");
      printf("# spcoll-mpi-bench (%s): %d ranks, float32, up to %zu B, "
             "memory bound %.1f GiB, mean time of rank 0\n", cfg.source,
             cfg.world, cfg.max_bytes, (double)cfg.mem_bound / (1 << 30));
      bench_table_header(stdout);
      printf("\n");
    }
  }
  MPI_CHECK(MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD));
  if (!bad && sweep(&cfg) < 0)
    MPI_Abort(MPI_COMM_WORLD, 1);
  if (cfg.rank == 0 && cfg.csv != NULL && fclose(cfg.csv) != 0) {
    fprintf(stderr, "spcoll-mpi-bench: writing %s failed\n", csv_path);
    bad = 1;
  }
  MPI_CHECK(MPI_Finalize());
  return bad;
}
