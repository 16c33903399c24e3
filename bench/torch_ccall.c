/* spcoll-torch-ccall: the C side of scripts/bench_torch.py (`make
 * bench-torch`). For each op of torch.distributed that the benchmark times
 * on backend "spcoll", the spcoll op that the C++ backend (client/torch)
 * runs for it, at the same size, called straight from C with blocking
 * spc_run on tensors already in spcoll memory (no staging, no torch,
 * no Python), through a private spcolld:
 *   all_reduce              spc_op_all_reduce(SUM), float32, in place
 *   all_gather_into_tensor  spc_op_all_gather(0, NULL) on the bytes
 *   reduce_scatter_tensor   spc_op_reduce_scatter(0, equal sizes), float32
 *   all_to_all_single       spc_op_all_to_all_v on the bytes, equal splits
 *   ulysses                 the native one-copy exchange of the seeds'
 *                           [s/P, 1, h, d] -> [s, 1, h/P, d]:
 *                           spc_op_all_to_all(2, 0, 0), float32
 * The sizes, the iteration rule and the CSV columns are bench_torch.py's
 * (which repeats this file's geometry in Python). Timed per op on rank 0,
 * no barrier between iterations. Prints numbers; asserts nothing. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bench_common.h"
#include "harness.h"
#include "spcoll.h"

enum { T_ALL_REDUCE, T_ALL_GATHER, T_REDUCE_SCATTER, T_ALL_TO_ALL, T_ULYSSES,
       T_NOPS, MAXROWS = 512, WARM_MAX = 50000 };
static const char *const top_names[T_NOPS] = {
    "all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor",
    "all_to_all_single", "ulysses"};

typedef struct {
  int op;
  size_t bytes;
  int64_t seq;             /* ulysses: the full sequence s; else 0 */
  int iters, warmup;
  double mean, p50, p90, p99;
} row;

typedef struct {
  const char *socket;
  size_t max_bytes;
  int iters, min_iters;     /* cap and floor of timed iterations */
  double block_s;           /* time a block's timed iterations aim at */
  unsigned ops;
  row *rows;                /* MAP_SHARED, rank 0's */
  int *nrows;
} cfg_t;

/* One point's tensors: in (float32 or bytes) and out, in one buffer. */
typedef struct {
  int op;
  size_t bytes;             /* the point's size (nccl-tests convention) */
  int64_t seq;
  spc_buffer *buf;
  spc_tensor in, out;
  spc_op sop;
  int64_t *splits;          /* all_to_all_v's byte splits, reduce_scatter's */
} point;

static size_t page_up(size_t n) { return (n + 4095) / 4096 * 4096; }

/* The point's geometry, as bench_torch.py's geometry(): 0 when the size
 * gives some rank no element. */
static int geometry(int op, size_t b, int w, int nd[2], int64_t in[4],
                    int64_t out[4], spc_dtype *dt, size_t *size, int64_t *seq) {
  int64_t n = (int64_t)(b / 4), per = n / w;
  *seq = 0;
  *dt = SPC_FLOAT32;
  nd[0] = nd[1] = 1;
  switch (op) {
  case T_ALL_REDUCE:
    if (n < 1)
      return 0;
    in[0] = out[0] = n;
    *size = (size_t)n * 4;
    return 1;
  case T_ALL_GATHER:
    if (per < 1)
      return 0;
    *dt = SPC_UINT8;
    in[0] = per * 4, out[0] = per * 4 * w;
    *size = (size_t)(per * w * 4);
    return 1;
  case T_REDUCE_SCATTER:
    if (per < 1)
      return 0;
    in[0] = per * w, out[0] = per;
    *size = (size_t)(per * w * 4);
    return 1;
  case T_ALL_TO_ALL:
    if (per < 1)
      return 0;
    *dt = SPC_UINT8;
    in[0] = out[0] = per * w * 4;
    *size = (size_t)(per * w * 4);
    return 1;
  default: { /* [s/P, 1, h, d] -> [s, 1, h/P, d], d = 128 */
    int64_t h = 32 % w == 0 ? 32 : 4 * w, d = 128, sp = n / (h * d);
    if (sp < 1)
      return 0;
    nd[0] = nd[1] = 4;
    in[0] = sp, in[1] = 1, in[2] = h, in[3] = d;
    out[0] = sp * w, out[1] = 1, out[2] = h / w, out[3] = d;
    *size = (size_t)(sp * h * d * 4);
    *seq = sp * w;
    return 1;
  }
  }
}

static size_t numel(const int64_t *s, int nd) {
  size_t n = 1;
  for (int i = 0; i < nd; i++)
    n *= (size_t)s[i];
  return n;
}

static int point_setup(spc_client *c, int op, size_t b, int w, int rank,
                       point *p) {
  int nd[2];
  int64_t in[4], out[4];
  spc_dtype dt;
  memset(p, 0, sizeof(*p));
  p->op = op;
  if (!geometry(op, b, w, nd, in, out, &dt, &p->bytes, &p->seq))
    return 0;
  size_t es = dt == SPC_UINT8 ? 1 : 4;
  size_t inb = numel(in, nd[0]) * es, outb = numel(out, nd[1]) * es;
  size_t len = page_up(inb) + (op == T_ALL_REDUCE ? 0 : page_up(outb));
  if (spc_buffer_alloc(c, len, &p->buf) < 0) {
    fprintf(stderr, "ccall rank %d: spc_buffer_alloc of %zu B: %s\n", rank,
            len, spc_last_error(c));
    return -1;
  }
  uint64_t off = op == T_ALL_REDUCE ? 0 : page_up(inb);
  if (spc_tensor_init(&p->in, p->buf, 0, dt, nd[0], in) < 0 ||
      spc_tensor_init(&p->out, p->buf, off, dt, nd[1], out) < 0) {
    fprintf(stderr, "ccall rank %d: spc_tensor_init: %s\n", rank,
            spc_last_error(c));
    return -1;
  }
  /* all_reduce in place stays at zero; the others carry small values */
  if (op != T_ALL_REDUCE) {
    if (dt == SPC_FLOAT32) {
      float *x = spc_tensor_data(&p->in);
      for (size_t i = 0; i < inb / 4; i++)
        x[i] = (float)((i + (size_t)rank) & 63);
    } else {
      memset(spc_tensor_data(&p->in), rank + 1, inb);
    }
  }
  switch (op) {
  case T_ALL_REDUCE: p->sop = spc_op_all_reduce(SPC_SUM); break;
  case T_ALL_GATHER: p->sop = spc_op_all_gather(0, NULL); break;
  case T_REDUCE_SCATTER:
  case T_ALL_TO_ALL:
    p->splits = malloc(sizeof(int64_t) * (size_t)w);
    if (p->splits == NULL)
      return -1;
    for (int j = 0; j < w; j++)
      p->splits[j] = op == T_ALL_TO_ALL ? (int64_t)(p->bytes / (size_t)w)
                                         : out[0];
    p->sop = op == T_ALL_TO_ALL
                 ? spc_op_all_to_all_v(p->splits, p->splits)
                 : spc_op_reduce_scatter(0, p->splits);
    break;
  default: p->sop = spc_op_all_to_all(2, 0, 0); break;
  }
  return 1;
}

static void point_free(point *p) {
  if (p->buf != NULL)
    spc_buffer_free(p->buf);
  free(p->splits);
  p->buf = NULL;
  p->splits = NULL;
}

/* bench_torch.py's iters_cap(): the most timed iterations of a point,
 * bench_iters' rule (up to 50x base below 64 KiB, base up to 1 MiB, fewer
 * above) with a floor of 5. */
static int iters_cap(size_t b, int base) {
  int n = bench_iters(b, base);
  return n < 5 ? 5 : n;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Two untimed ops, a few calibration ops, then rank 0's choice of warm-up
 * (about block_s, at most WARM_MAX ops) and timed iterations (about
 * block_s, min_iters to iters_cap) from their time (bench_torch.py's
 * plan()), agreed
 * through an all_reduce MAX of the others' zeros; then the warm-up and the
 * timed ops. */
static int run_point(spc_client *c, spc_group *g, spc_tensor *agree,
                     const cfg_t *cfg, point *p, int rank) {
  int calib = p->bytes <= ((size_t)1 << 20) ? 5 : 2, rc = 0;
  for (int i = 0; i < 2 && rc == 0; i++) /* first calls: plans, faults */
    rc = spc_run(g, &p->sop, &p->in, &p->out);
  double t0 = bench_now_s();
  for (int i = 0; i < calib && rc == 0; i++)
    rc = spc_run(g, &p->sop, &p->in, &p->out);
  double est = (bench_now_s() - t0) / calib;
  int32_t *plan = spc_tensor_data(agree);
  plan[0] = plan[1] = 0;
  if (rank == 0) {
    int cap = iters_cap(p->bytes, cfg->iters);
    double n = est > 0 ? cfg->block_s / est : cap;
    int iters = n > cap ? cap : n < cfg->min_iters ? cfg->min_iters : (int)n;
    double wn = est > 0 ? cfg->block_s / est : WARM_MAX;
    int warm = wn > WARM_MAX ? WARM_MAX : (int)wn;
    plan[0] = warm < 2 ? 2 : warm;
    plan[1] = iters;
  }
  if (rc == 0)
    rc = spc_all_reduce(g, agree, agree, SPC_MAX);
  int warm = plan[0], iters = plan[1];
  double *t = rc == 0 ? bench_times(iters, "spcoll-torch-ccall") : NULL;
  if (rc == 0 && t == NULL)
    return 1;
  for (int i = -warm; i < iters && rc == 0; i++) {
    double s = bench_now_s();
    rc = spc_run(g, &p->sop, &p->in, &p->out);
    if (i >= 0)
      t[i] = bench_now_s() - s;
  }
  if (rc != 0) {
    fprintf(stderr, "ccall rank %d: %s at %zu B: %s\n", rank,
            top_names[p->op], p->bytes, spc_last_error(c));
    free(t);
    return 1;
  }
  if (rank == 0 && *cfg->nrows < MAXROWS) {
    row *r = &cfg->rows[(*cfg->nrows)++];
    double sum = 0;
    for (int i = 0; i < iters; i++)
      sum += t[i];
    qsort(t, (size_t)iters, sizeof(double), cmp_d);
    *r = (row){p->op, p->bytes, p->seq, iters, warm, sum / iters * 1e6,
               t[iters / 2] * 1e6, t[(int)((iters - 1) * 0.9)] * 1e6,
               t[(int)((iters - 1) * 0.99)] * 1e6};
  }
  free(t);
  return 0;
}

static int rank_main(int rank, int world, void *arg) {
  const cfg_t *cfg = arg;
  spc_client *c = spt_connect(cfg->socket);
  spc_group *g;
  spc_buffer *ab;
  spc_tensor agree;
  int64_t two = 2;
  if (c == NULL)
    return 1;
  if (spc_group_join(c, "torch-ccall", world, rank, &g) < 0 ||
      spc_buffer_alloc(c, 4096, &ab) < 0 ||
      spc_tensor_init(&agree, ab, 0, SPC_INT32, 1, &two) < 0) {
    fprintf(stderr, "ccall rank %d: %s\n", rank, spc_last_error(c));
    spc_disconnect(c);
    return 1;
  }
  int bad = 0;
  for (int op = 0; op < T_NOPS && !bad; op++) {
    if (!(cfg->ops & (1u << op)))
      continue;
    for (size_t b = 8; b != 0 && !bad; b = bench_next_size(b, cfg->max_bytes)) {
      point p;
      int st = point_setup(c, op, b, world, rank, &p);
      if (st < 0)
        bad = 1;
      else if (st > 0)
        bad = run_point(c, g, &agree, cfg, &p, rank);
      point_free(&p);
    }
  }
  spc_disconnect(c);
  return bad;
}

static void usage(void) {
  fprintf(stderr,
          "usage: spcoll-torch-ccall [--spcolld PATH] [--ranks N] "
          "[--max-bytes B]\n"
          "         [--iters CAP] [--min-iters N] [--block-ms MS] "
          "[--ops a,b,..]\n"
          "         [--workers T] [--guard S] [--csv PATH]\n"
          "ops: all_reduce, all_gather_into_tensor, reduce_scatter_tensor,\n"
          "     all_to_all_single, ulysses\n");
}

int main(int argc, char **argv) {
  static const struct option lo[] = {
      {"spcolld", required_argument, 0, 's'},
      {"ranks", required_argument, 0, 'r'},
      {"max-bytes", required_argument, 0, 'm'},
      {"iters", required_argument, 0, 'i'},
      {"min-iters", required_argument, 0, 'n'},
      {"block-ms", required_argument, 0, 'b'},
      {"ops", required_argument, 0, 'o'},
      {"workers", required_argument, 0, 'w'},
      {"guard", required_argument, 0, 'g'},
      {"csv", required_argument, 0, 'c'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  int world = 2, threads = cores > 0 ? (int)cores : 1, guard = 1800;
  double block_ms = 250;
  const char *csv = "torch_ccall.csv";
  cfg_t cfg = {.max_bytes = (size_t)32 << 20, .iters = 200, .min_iters = 10,
               .ops = (1u << T_NOPS) - 1};
  int opt;
  while ((opt = getopt_long(argc, argv, "", lo, NULL)) != -1) {
    switch (opt) {
    case 's': setenv("SPCOLLD", optarg, 1); break;
    case 'r': world = atoi(optarg); break;
    case 'm': cfg.max_bytes = (size_t)strtoull(optarg, NULL, 0); break;
    case 'i': cfg.iters = atoi(optarg); break;
    case 'n': cfg.min_iters = atoi(optarg); break;
    case 'b': block_ms = atof(optarg); break;
    case 'o': {
      char buf[256];
      cfg.ops = 0;
      snprintf(buf, sizeof(buf), "%s", optarg);
      for (char *sv, *tok = strtok_r(buf, ",", &sv); tok != NULL;
           tok = strtok_r(NULL, ",", &sv)) {
        int k = 0;
        while (k < T_NOPS && strcmp(tok, top_names[k]) != 0)
          k++;
        if (k == T_NOPS) {
          fprintf(stderr, "spcoll-torch-ccall: unknown op '%s'\n", tok);
          return 2;
        }
        cfg.ops |= 1u << k;
      }
      break;
    }
    case 'w': threads = atoi(optarg); break;
    case 'g': guard = atoi(optarg); break;
    case 'c': csv = optarg; break;
    default: usage(); return 2;
    }
  }
  if (world < 2 || world > 256 || cfg.iters < 1 || cfg.min_iters < 1 ||
      cfg.max_bytes < 8 || cfg.ops == 0 || threads < 1 || block_ms <= 0) {
    usage();
    return 2;
  }
  cfg.block_s = block_ms / 1e3;
  cfg.rows = mmap(NULL, sizeof(row) * MAXROWS + sizeof(int),
                  PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (cfg.rows == MAP_FAILED) {
    perror("spcoll-torch-ccall: mmap");
    return 1;
  }
  cfg.nrows = (int *)(cfg.rows + MAXROWS);
  char workers[16];
  snprintf(workers, sizeof(workers), "%d", threads);
  const char *extra[] = {"--workers", workers, "--log-level", "warn", NULL};
  spt_daemon d;
  if (spt_daemon_start(&d, extra) < 0) {
    fprintf(stderr, "spcoll-torch-ccall: could not start spcolld ($SPCOLLD "
            "or --spcolld)\n");
    return 1;
  }
  cfg.socket = d.socket;
  int failed = spt_run_ranks(world, rank_main, &cfg, guard);
  int st = spt_daemon_stop(&d);
  if (failed)
    fprintf(stderr, "spcoll-torch-ccall: %d rank(s) failed\n", failed);
  if (st != 0)
    fprintf(stderr, "spcoll-torch-ccall: spcolld exited with status %d\n", st);
  FILE *f = fopen(csv, "w");
  if (f == NULL) {
    perror(csv);
    return 1;
  }
  fprintf(f, "source,op,ranks,size_bytes,seq,iters,warmup,mean_us,p50_us,"
          "p90_us,p99_us\n");
  for (int i = 0; i < *cfg.nrows; i++) {
    const row *r = &cfg.rows[i];
    fprintf(f, "c_call,%s,%d,%zu,%lld,%d,%d,%.3f,%.3f,%.3f,%.3f\n",
            top_names[r->op], world, r->bytes, (long long)r->seq, r->iters,
            r->warmup, r->mean, r->p50, r->p90, r->p99);
  }
  if (fclose(f) != 0) {
    perror(csv);
    return 1;
  }
  return failed || st != 0;
}
