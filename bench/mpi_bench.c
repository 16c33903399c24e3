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
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
      fprintf(stderr, "spcoll-mpi-bench: %s failed: %s\n", #call, msg_);     \
      MPI_Abort(MPI_COMM_WORLD, 1);                                          \
    }                                                                        \
  } while (0)

typedef struct {
  int rank, world;
  size_t max_bytes, mem_bound;
  int iters;
  unsigned ops;
  const char *source;
  FILE *csv;
} mpi_cfg;

typedef struct {
  float *in, *out, *pack, *unpack; /* pack/unpack: the Ulysses staging */
  size_t n_in, n_out, n_stage;     /* elements */
  int64_t shape[4];                /* Ulysses [b, s/P, h, d] */
  size_t bytes;                    /* nccl-tests' size */
} mpi_point;

/* Sizes of op's buffers at nccl-tests size `bytes` (as bench_sweep.c).
 * 0 when too small to give every rank an element. */
static int point_of(bench_op op, size_t bytes, int w, mpi_point *p) {
  size_t n = bytes / 4, per = n / (size_t)w;
  memset(p, 0, sizeof(*p));
  switch (op) {
  case BENCH_ALL_GATHER: p->n_in = per, p->n_out = per * (size_t)w; break;
  case BENCH_ALL_REDUCE: p->n_in = p->n_out = n; break;
  case BENCH_REDUCE_SCATTER: p->n_in = per * (size_t)w, p->n_out = per; break;
  case BENCH_ALL_TO_ALL: p->n_in = p->n_out = per * (size_t)w; break;
  case BENCH_ULYSSES:
    if (bench_ulysses_shape(bytes, w, 4, p->shape) == 0)
      return 0;
    p->n_in = p->n_out = p->n_stage =
        (size_t)(p->shape[0] * p->shape[1] * p->shape[2] * p->shape[3]);
    break;
  default: return 0;
  }
  if (per < 1)
    return 0;
  p->bytes = (op == BENCH_ALL_GATHER ? p->n_out : p->n_in) * 4;
  return 1;
}

static size_t footprint(const mpi_point *p, int w) {
  /* Open MPI's reductions take a temporary the size of the buffer. */
  return (size_t)w * (p->n_in + p->n_out + 2 * p->n_stage + p->n_in) * 4;
}

static int point_alloc(mpi_point *p, int rank) {
  p->in = malloc(p->n_in * 4);
  p->out = malloc(p->n_out * 4);
  p->pack = p->n_stage ? malloc(p->n_stage * 4) : NULL;
  p->unpack = p->n_stage ? malloc(p->n_stage * 4) : NULL;
  if (p->in == NULL || p->out == NULL ||
      (p->n_stage && (p->pack == NULL || p->unpack == NULL))) {
    fprintf(stderr, "spcoll-mpi-bench rank %d: malloc of %zu + %zu + 2 x %zu "
            "floats failed\n", rank, p->n_in, p->n_out, p->n_stage);
    return -1;
  }
  for (size_t i = 0; i < p->n_in; i++)
    p->in[i] = (float)((i + (size_t)rank) & 63);
  memset(p->out, 0, p->n_out * 4);
  if (p->n_stage) {
    memset(p->pack, 0, p->n_stage * 4);
    memset(p->unpack, 0, p->n_stage * 4);
  }
  return 0;
}

static void point_free(mpi_point *p) {
  free(p->in);
  free(p->out);
  free(p->pack);
  free(p->unpack);
}

/* The seeds' aligned all-to-all for scatter dim 2, gather dim 1:
 * x [b, s/P, h, d] -> reshape [b*s/P, P, h/P, d] -> transpose(0, 1)
 * .contiguous() -> all_to_all_single -> view [P, b, s/P, h/P, d] ->
 * transpose(0, 1).contiguous() -> [b, s, h/P, d]. */
static void ulysses_seeds(const mpi_point *p, int w) {
  size_t b = (size_t)p->shape[0], sl = (size_t)p->shape[1];
  size_t hp = (size_t)p->shape[2] / (size_t)w, d = (size_t)p->shape[3];
  size_t row = hp * d, rows = b * sl; /* floats per (token, rank) piece */
  for (size_t j = 0; j < (size_t)w; j++)
    for (size_t t = 0; t < rows; t++)
      memcpy(p->pack + (j * rows + t) * row, p->in + (t * (size_t)w + j) * row,
             row * 4);
  MPI_CHECK(MPI_Alltoall(p->pack, (int)(rows * row), MPI_FLOAT, p->unpack,
                         (int)(rows * row), MPI_FLOAT, MPI_COMM_WORLD));
  for (size_t j = 0; j < (size_t)w; j++)
    for (size_t bi = 0; bi < b; bi++)
      memcpy(p->out + (bi * (size_t)w + j) * sl * row,
             p->unpack + (j * b + bi) * sl * row, sl * row * 4);
}

static void run_op(bench_op op, const mpi_point *p, int w) {
  switch (op) {
  case BENCH_ALL_GATHER:
    MPI_CHECK(MPI_Allgather(p->in, (int)p->n_in, MPI_FLOAT, p->out,
                            (int)p->n_in, MPI_FLOAT, MPI_COMM_WORLD));
    break;
  case BENCH_ALL_REDUCE:
    MPI_CHECK(MPI_Allreduce(p->in, p->out, (int)p->n_in, MPI_FLOAT, MPI_SUM,
                            MPI_COMM_WORLD));
    break;
  case BENCH_REDUCE_SCATTER:
    MPI_CHECK(MPI_Reduce_scatter_block(p->in, p->out, (int)p->n_out,
                                       MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    break;
  case BENCH_ALL_TO_ALL:
    MPI_CHECK(MPI_Alltoall(p->in, (int)(p->n_in / (size_t)w), MPI_FLOAT,
                           p->out, (int)(p->n_in / (size_t)w), MPI_FLOAT,
                           MPI_COMM_WORLD));
    break;
  default:
    ulysses_seeds(p, w);
  }
}

static int mpi_point_run(const mpi_cfg *cfg, bench_op op, mpi_point *p) {
  if (point_alloc(p, cfg->rank) < 0) {
    point_free(p);
    return -1;
  }
  int iters = bench_iters(p->bytes, cfg->iters);
  int warmup = bench_warmup(p->bytes);
  double *t = malloc((size_t)iters * sizeof(double));
  if (t == NULL) {
    fprintf(stderr, "spcoll-mpi-bench: malloc of %d times failed\n", iters);
    point_free(p);
    return -1;
  }
  MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
  for (int i = -warmup; i < iters; i++) {
    double t0 = MPI_Wtime();
    run_op(op, p, cfg->world);
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
  point_free(p);
  return 0;
}

static int sweep(const mpi_cfg *cfg) {
  for (int op = 0; op < BENCH_NOPS; op++) {
    if (!(cfg->ops & (1u << op)))
      continue;
    for (size_t b = 8; b != 0; b = bench_next_size(b, cfg->max_bytes)) {
      mpi_point p;
      if (!point_of((bench_op)op, b, cfg->world, &p))
        continue;
      if (p.n_in > (size_t)0x7fffffff || p.n_out > (size_t)0x7fffffff) {
        if (cfg->rank == 0)
          printf("# skip %s %zu B: count over MPI's int\n",
                 bench_op_name((bench_op)op), p.bytes);
        continue;
      }
      size_t need = footprint(&p, cfg->world);
      if (need > cfg->mem_bound) {
        if (cfg->rank == 0)
          printf("# skip %s %zu B: needs %.1f GiB, bound %.1f GiB\n",
                 bench_op_name((bench_op)op), p.bytes,
                 (double)need / (1 << 30), (double)cfg->mem_bound / (1 << 30));
        continue;
      }
      if (mpi_point_run(cfg, (bench_op)op, &p) < 0)
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
