/* spcoll-bench: every op through a private spcolld at sizes from 8 B up,
 * with nccl-tests' columns (size, count, type, time, algbw, busbw), the
 * copy efficiency against a memcpy baseline measured in the same run, and
 * p50/p99 latency. Prints numbers; asserts nothing about speed. */
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

typedef struct {
  const char *name;
  int kind;             /* 0 gather, 1 all_reduce, 2 reduce_scatter, 3 a2a */
} bench_op;

static const bench_op ops[] = {{"all_gather", 0},
                               {"all_reduce", 1},
                               {"reduce_scatter", 2},
                               {"all_to_all", 3}};
enum { NOPS = sizeof(ops) / sizeof(ops[0]), MAXROWS = 256 };

typedef struct {      /* one measured point, filled by rank 0 */
  int op;
  size_t bytes;       /* nccl-tests' size: the op's buffer in bytes */
  double us, p50_us, p99_us;
} bench_row;

typedef struct {
  const char *socket;
  size_t min_bytes, max_bytes;
  int iters, warmup;
  bench_row *rows;    /* shared with the parent (MAP_SHARED) */
  int *nrows;
} bench_cfg;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Tensors for op kind at nccl-tests size `bytes` (float32, w ranks):
 * all_gather and all_to_all: bytes is the output; reduce_scatter: the
 * input; all_reduce: both. */
static void shapes(int kind, size_t bytes, int w, int64_t *in, int64_t *out,
                   int *nd) {
  int64_t n = (int64_t)(bytes / 4 / (size_t)w) * w; /* divisible by w */
  *nd = 1;
  switch (kind) {
  case 0: in[0] = n / w, out[0] = n; break;
  case 1: in[0] = out[0] = n; break;
  case 2: in[0] = n, out[0] = n / w; break;
  default: /* [w, n/w] -> [1, n]: each rank gets row r of every rank */
    *nd = 2;
    in[0] = w, in[1] = n / w, out[0] = 1, out[1] = n;
  }
}

static int run_one(spc_group *g, int kind, spc_tensor *in, spc_tensor *out) {
  switch (kind) {
  case 0: return spc_all_gather(g, in, out, 0, NULL);
  case 1: return spc_all_reduce(g, in, out, SPC_SUM);
  case 2: return spc_reduce_scatter(g, in, out, 0, NULL);
  default: return spc_all_to_all(g, in, out, 0, 1, 0);
  }
}

static int bench_point(spc_client *c, spc_group *g, const bench_cfg *cfg,
                       int op, size_t bytes, int rank, int w) {
  int64_t si[2], so[2];
  int nd;
  shapes(ops[op].kind, bytes, w, si, so, &nd);
  size_t ib = (size_t)si[0] * (nd == 2 ? (size_t)si[1] : 1) * 4,
         ob = (size_t)so[0] * (nd == 2 ? (size_t)so[1] : 1) * 4;
  size_t off = (ib + 4095) / 4096 * 4096;
  spc_buffer *b;
  spc_tensor in, out;
  if (spc_buffer_alloc(c, off + ob + 4096, &b) < 0 ||
      spc_tensor_init(&in, b, 0, SPC_FLOAT32, nd, si) < 0 ||
      spc_tensor_init(&out, b, off, SPC_FLOAT32, nd, so) < 0) {
    fprintf(stderr, "bench rank %d: %s\n", rank, spc_last_error(c));
    return 1;
  }
  spt_fill(spc_tensor_data(&in), SPC_FLOAT32, ib / 4, 1, rank);
  int iters = bytes <= (1 << 20) ? cfg->iters : cfg->iters / 4 + 1;
  double *t = malloc((size_t)iters * sizeof(double));
  int rc = 0;
  for (int i = -cfg->warmup; i < iters && rc == 0; i++) {
    double t0 = now_s();
    rc = run_one(g, ops[op].kind, &in, &out);
    if (i >= 0)
      t[i] = now_s() - t0;
  }
  if (rc == 0 && rank == 0 && *cfg->nrows < MAXROWS) {
    double sum = 0;
    for (int i = 0; i < iters; i++)
      sum += t[i];
    qsort(t, (size_t)iters, sizeof(double), cmp_d);
    cfg->rows[(*cfg->nrows)++] =
        (bench_row){op, bytes, sum / iters * 1e6, t[iters / 2] * 1e6,
                    t[(int)(iters * 0.99)] * 1e6};
  }
  free(t);
  spc_buffer_free(b);
  return rc != 0;
}

static int bench_rank(int rank, int world, void *arg) {
  const bench_cfg *cfg = arg;
  spc_client *c = spt_connect(cfg->socket);
  spc_group *g;
  if (c == NULL || spc_group_join(c, "bench", world, rank, &g) < 0)
    return 1;
  int bad = 0;
  /* Sizes 8 B * 4^k, as for every world size; those too small to give
   * each rank 2 floats are skipped. */
  for (int op = 0; op < NOPS && !bad; op++)
    for (size_t b = cfg->min_bytes; b <= cfg->max_bytes && !bad; b *= 4)
      if (b >= 8u * (size_t)world)
        bad = bench_point(c, g, cfg, op, b, rank, world);
  spc_disconnect(c);
  return bad;
}

/* ---- the memcpy ceiling, measured in the same run ---- */

typedef struct {
  uint8_t *dst;
  const uint8_t *src;
  size_t n;
} copy_part;

static void *copy_thread(void *arg) {
  copy_part *p = arg;
  memcpy(p->dst, p->src, p->n);
  return NULL;
}

/* GB/s of copying `bytes` with `threads` threads (best of a few rounds). */
static double memcpy_gbs(size_t bytes, int threads) {
  uint8_t *src = malloc(bytes), *dst = malloc(bytes);
  memset(src, 1, bytes);
  memset(dst, 2, bytes);
  double best = 1e30;
  int rounds = bytes <= (1 << 20) ? 200 : 5;
  for (int r = 0; r < rounds; r++) {
    pthread_t th[64];
    copy_part part[64];
    size_t per = bytes / (size_t)threads;
    double t0 = now_s();
    for (int i = 0; i < threads; i++) {
      part[i] = (copy_part){dst + i * per, src + i * per,
                            i == threads - 1 ? bytes - i * per : per};
      if (threads > 1)
        pthread_create(&th[i], NULL, copy_thread, &part[i]);
      else
        copy_thread(&part[i]);
    }
    for (int i = 0; threads > 1 && i < threads; i++)
      pthread_join(th[i], NULL);
    double t = now_s() - t0;
    best = t < best ? t : best;
  }
  free(src);
  free(dst);
  return (double)bytes / best / 1e9;
}

/* Bytes one op writes into all ranks' outputs (the copy-efficiency
 * numerator) and nccl-tests' bus-bandwidth factor. */
static double written(int kind, size_t bytes, int w) {
  return kind == 2 ? (double)bytes : (double)bytes * w;
}

static double bus_factor(int kind, int w) {
  return kind == 1 ? 2.0 * (w - 1) / w : (double)(w - 1) / w;
}

static void report(FILE *csv, FILE *json, const bench_row *r, int nrows,
                   int w, int threads) {
  printf("%-15s %11s %10s %6s %10s %10s %10s %9s %9s %8s %9s %9s\n", "# op",
         "size(B)", "count", "type", "time(us)", "algbw", "busbw", "p50(us)",
         "p99(us)", "copy_eff", "memcpy1", "memcpyT");
  fprintf(csv, "op,ranks,size_bytes,count,type,time_us,algbw_gbs,busbw_gbs,"
          "p50_us,p99_us,copy_efficiency,memcpy1_gbs,memcpy%d_gbs\n", threads);
  fprintf(json, "{\"ranks\":%d,\"mover_threads\":%d,\"rows\":[", w, threads);
  for (int i = 0; i < nrows; i++) {
    int kind = ops[r[i].op].kind;
    double alg = (double)r[i].bytes / (r[i].us * 1e-6) / 1e9;
    double bus = alg * bus_factor(kind, w);
    double m1 = memcpy_gbs(r[i].bytes, 1), mt = memcpy_gbs(r[i].bytes, threads);
    /* The ceiling is the better memcpy: small copies lose to thread
     * start-up, and the mover does not split them either. */
    double ceiling = m1 > mt ? m1 : mt;
    double eff = written(kind, r[i].bytes, w) / (r[i].us * 1e-6) / 1e9 /
                 ceiling;
    size_t count = r[i].bytes / 4;
    printf("%-15s %11zu %10zu %6s %10.1f %10.3f %10.3f %9.1f %9.1f %8.2f "
           "%9.2f %9.2f\n", ops[r[i].op].name, r[i].bytes, count, "float",
           r[i].us, alg, bus, r[i].p50_us, r[i].p99_us, eff, m1, mt);
    fprintf(csv, "%s,%d,%zu,%zu,float,%.2f,%.4f,%.4f,%.2f,%.2f,%.3f,%.3f,"
            "%.3f\n", ops[r[i].op].name, w, r[i].bytes, count, r[i].us, alg,
            bus, r[i].p50_us, r[i].p99_us, eff, m1, mt);
    fprintf(json, "%s{\"op\":\"%s\",\"size_bytes\":%zu,\"time_us\":%.2f,"
            "\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,\"p50_us\":%.2f,"
            "\"p99_us\":%.2f,\"copy_efficiency\":%.3f,\"memcpy1_gbs\":%.3f,"
            "\"memcpyT_gbs\":%.3f}", i ? "," : "", ops[r[i].op].name,
            r[i].bytes, r[i].us, alg, bus, r[i].p50_us, r[i].p99_us, eff, m1,
            mt);
  }
  fprintf(json, "]}\n");
}

int main(int argc, char **argv) {
  static const struct option lo[] = {
      {"spcolld", required_argument, 0, 's'}, {"ranks", required_argument, 0, 'r'},
      {"max-bytes", required_argument, 0, 'm'}, {"iters", required_argument, 0, 'i'},
      {"csv", required_argument, 0, 'c'}, {"json", required_argument, 0, 'j'},
      {0, 0, 0, 0}};
  int world = 4, opt;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int threads = cores > 0 ? (int)cores : 1;
  const char *csv_path = "bench.csv", *json_path = "bench.json";
  bench_cfg cfg = {.min_bytes = 8, .max_bytes = 64u << 20, .iters = 40,
                   .warmup = 3};
  while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    if (opt == 's') setenv("SPCOLLD", optarg, 1);
    else if (opt == 'r') world = atoi(optarg);
    else if (opt == 'm') cfg.max_bytes = (size_t)atoll(optarg);
    else if (opt == 'i') cfg.iters = atoi(optarg);
    else if (opt == 'c') csv_path = optarg;
    else if (opt == 'j') json_path = optarg;
    else return 2;
  }
  if (world < 2 || world > 64 || cfg.iters < 1 || cfg.max_bytes < 8) {
    fprintf(stderr, "spcoll-bench: --ranks 2..64, --iters >= 1\n");
    return 2;
  }
  cfg.rows = mmap(NULL, sizeof(bench_row) * MAXROWS + sizeof(int),
                  PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  cfg.nrows = (int *)(cfg.rows + MAXROWS);
  char workers[16];
  snprintf(workers, sizeof(workers), "%d", threads);
  const char *extra[] = {"--workers", workers, "--log-level", "warn", NULL};
  spt_daemon d;
  if (cfg.rows == MAP_FAILED || spt_daemon_start(&d, extra) < 0) {
    fprintf(stderr, "spcoll-bench: could not start spcolld\n");
    return 1;
  }
  cfg.socket = d.socket;
  printf("# spcoll-bench: %d ranks, float32, daemon mover threads %d, "
         "%d iterations (large sizes: %d), mean time; copy_eff = bytes "
         "written to all outputs / time / max(memcpy1, memcpyT)\n", world, threads,
         cfg.iters, cfg.iters / 4 + 1);
  int failed = spt_run_ranks(world, bench_rank, &cfg, 600);
  spt_daemon_stop(&d);
  FILE *csv = fopen(csv_path, "w"), *json = fopen(json_path, "w");
  if (failed || csv == NULL || json == NULL) {
    fprintf(stderr, "spcoll-bench: %d rank(s) failed\n", failed);
    return 1;
  }
  report(csv, json, cfg.rows, *cfg.nrows, world, threads);
  fclose(csv);
  fclose(json);
  printf("# wrote %s and %s\n", csv_path, json_path);
  return 0;
}
