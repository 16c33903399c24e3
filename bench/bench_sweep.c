/* The op sweep: every op at every ladder size through the daemon, timed
 * on rank 0 per op (no barrier between iterations, as in training), and
 * its report against the memcpy ceiling measured right after. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "spcoll_bench.h"

typedef struct {
  int nd_in, nd_out;
  int64_t in[4], out[4];
  size_t in_bytes, out_bytes;
  size_t bytes;           /* nccl-tests' size of this point */
} point_shape;

static size_t numel(const int64_t *s, int nd) {
  size_t n = 1;
  for (int i = 0; i < nd; i++)
    n *= (size_t)s[i];
  return n;
}

/* Float32 tensors of op at nccl-tests size `bytes` for w ranks: the
 * output for all-gather, the input for reduce-scatter, the buffer for
 * all-reduce, the per-rank buffer for the all-to-alls. 0 when the size
 * is too small to give every rank an element. */
static int point_shape_of(bench_op op, size_t bytes, int w, point_shape *p) {
  int64_t n = (int64_t)(bytes / 4), per = n / w;
  memset(p, 0, sizeof(*p));
  p->nd_in = p->nd_out = 1;
  switch (op) {
  case BENCH_ALL_GATHER:
    p->in[0] = per, p->out[0] = per * w;
    break;
  case BENCH_ALL_REDUCE:
    p->in[0] = p->out[0] = n;
    break;
  case BENCH_REDUCE_SCATTER:
    p->in[0] = per * w, p->out[0] = per;
    break;
  case BENCH_ALL_TO_ALL: /* [w, n/w] -> [1, n]: row r of every rank */
    p->nd_in = p->nd_out = 2;
    p->in[0] = w, p->in[1] = per, p->out[0] = 1, p->out[1] = per * w;
    break;
  case BENCH_ULYSSES: /* [b, s/P, h, d] -> [b, s, h/P, d] */
    if (bench_ulysses_shape(bytes, w, 4, p->in) == 0)
      return 0;
    p->nd_in = p->nd_out = 4;
    p->out[0] = p->in[0], p->out[1] = p->in[1] * w;
    p->out[2] = p->in[2] / w, p->out[3] = p->in[3];
    break;
  default:
    return 0;
  }
  if (per < 1 || n < 1)
    return 0;
  p->in_bytes = numel(p->in, p->nd_in) * 4;
  p->out_bytes = numel(p->out, p->nd_out) * 4;
  p->bytes = op == BENCH_ALL_GATHER ? p->out_bytes : p->in_bytes;
  return 1;
}

/* Element i of rank k's input: small exact values, so sums stay normal
 * floats (no denormal slow path), exact, and the fill is cheap at 1 GiB. */
static float fill_value(int k, size_t i) {
  return (float)((i + (size_t)k) & 63);
}

/* Rank r's output after the timed iterations, element by element against
 * what the op must produce: the numbers are for correct results (and the
 * mover's large-plan paths, streaming stores included, are checked at the
 * sizes that use them). 0 when right; prints the first wrong element. */
static int verify(bench_op op, const point_shape *ps, const float *y, int r,
                  int w) {
  size_t n = ps->out_bytes / 4;
  size_t per = op == BENCH_ALL_GATHER || op == BENCH_ALL_TO_ALL
                   ? n / (size_t)w : ps->in_bytes / 4 / (size_t)w;
  int64_t sl = ps->in[1], h = ps->in[2], d = ps->in[3], hp = h / w;
  for (size_t i = 0; i < n; i++) {
    float want = 0;
    switch (op) {
    case BENCH_ALL_GATHER: want = fill_value((int)(i / per), i % per); break;
    case BENCH_ALL_REDUCE:
      for (int k = 0; k < w; k++)
        want += fill_value(k, i);
      break;
    case BENCH_REDUCE_SCATTER:
      for (int k = 0; k < w; k++)
        want += fill_value(k, (size_t)r * per + i);
      break;
    case BENCH_ALL_TO_ALL: /* row r of rank i / per's [w, per] input */
      want = fill_value((int)(i / per), (size_t)r * per + i % per);
      break;
    default: { /* y[0, k*sl + s, hh, dd] = x_k[0, s, r*hp + hh, dd] */
      size_t dd = i % (size_t)d, hh = i / (size_t)d % (size_t)hp;
      size_t tok = i / (size_t)(d * hp), k = tok / (size_t)sl;
      size_t s = tok % (size_t)sl;
      want = fill_value((int)k, (s * (size_t)h + (size_t)r * (size_t)hp + hh) *
                                    (size_t)d + dd);
    }
    }
    if (y[i] != want) {
      fprintf(stderr, "bench rank %d: %s at %zu bytes: element %zu is %g, "
              "not %g\n", r, bench_op_name(op), ps->bytes, i, (double)y[i],
              (double)want);
      return 1;
    }
  }
  return 0;
}

static int run_op(spc_group *g, bench_op op, spc_tensor *in, spc_tensor *out) {
  switch (op) {
  case BENCH_ALL_GATHER: return spc_all_gather(g, in, out, 0, NULL);
  case BENCH_ALL_REDUCE: return spc_all_reduce(g, in, out, SPC_SUM);
  case BENCH_REDUCE_SCATTER: return spc_reduce_scatter(g, in, out, 0, NULL);
  case BENCH_ALL_TO_ALL: return spc_all_to_all(g, in, out, 0, 1, 0);
  default: return spc_all_to_all(g, in, out, 2, 1, 0); /* Ulysses */
  }
}

static size_t page_up(size_t n) {
  return (n + 4095) / 4096 * 4096;
}

/* One point on every rank; rank 0 appends its row. */
static int sweep_point(spc_client *c, spc_group *g, const sweep_cfg *cfg,
                       bench_op op, const point_shape *ps, int rank, int w) {
  size_t off = page_up(ps->in_bytes);
  spc_buffer *b;
  spc_tensor in, out;
  if (spc_buffer_alloc(c, off + page_up(ps->out_bytes), &b) < 0) {
    fprintf(stderr, "bench rank %d: spc_buffer_alloc of %zu bytes: %s\n",
            rank, off + page_up(ps->out_bytes), spc_last_error(c));
    return 1;
  }
  if (spc_tensor_init(&in, b, 0, SPC_FLOAT32, ps->nd_in, ps->in) < 0 ||
      spc_tensor_init(&out, b, off, SPC_FLOAT32, ps->nd_out, ps->out) < 0) {
    fprintf(stderr, "bench rank %d: spc_tensor_init: %s\n", rank,
            spc_last_error(c));
    spc_buffer_free(b);
    return 1;
  }
  float *x = spc_tensor_data(&in);
  for (size_t i = 0; i < ps->in_bytes / 4; i++)
    x[i] = fill_value(rank, i);
  int iters = bench_iters(ps->bytes, cfg->iters);
  int warmup = bench_warmup(ps->bytes);
  double *t = malloc((size_t)iters * sizeof(double));
  if (t == NULL) {
    fprintf(stderr, "bench rank %d: malloc of %d times failed\n", rank, iters);
    spc_buffer_free(b);
    return 1;
  }
  int rc = 0;
  for (int i = -warmup; i < iters && rc == 0; i++) {
    double t0 = bench_now_s();
    rc = run_op(g, op, &in, &out);
    if (i >= 0)
      t[i] = bench_now_s() - t0;
  }
  if (rc != 0)
    fprintf(stderr, "bench rank %d: %s at %zu bytes: %s\n", rank,
            bench_op_name(op), ps->bytes, spc_last_error(c));
  else if (cfg->verify)
    rc = verify(op, ps, spc_tensor_data(&out), rank, w);
  if (rc == 0 && rank == 0 && *cfg->nrows < SWEEP_MAXROWS) {
    bench_result *r = &cfg->rows[(*cfg->nrows)++];
    *r = (bench_result){"spcoll", op, w, ps->bytes, iters, 0, 0, 0};
    bench_stats(t, iters, &r->us, &r->p50_us, &r->p99_us);
  }
  free(t);
  spc_buffer_free(b);
  return rc != 0;
}

int sweep_rank(int rank, int world, void *arg) {
  const sweep_cfg *cfg = arg;
  spc_client *c = spt_connect(cfg->socket);
  spc_group *g;
  if (c == NULL)
    return 1;
  if (spc_group_join(c, "bench", world, rank, &g) < 0) {
    fprintf(stderr, "bench rank %d: spc_group_join: %s\n", rank,
            spc_last_error(c));
    spc_disconnect(c);
    return 1;
  }
  int bad = 0;
  for (int op = 0; op < BENCH_NOPS && !bad; op++) {
    if (!(cfg->ops & (1u << op)))
      continue;
    for (size_t b = 8; b != 0 && !bad; b = bench_next_size(b, cfg->max_bytes)) {
      point_shape ps;
      if (!point_shape_of((bench_op)op, b, world, &ps))
        continue;
      /* Every rank decides alike: the bound is measured once, before the
       * ranks are forked. */
      size_t need = (size_t)world * (page_up(ps.in_bytes) +
                                     page_up(ps.out_bytes));
      if (need > cfg->mem_bound) {
        if (rank == 0)
          printf("# skip %s %zu B: needs %.1f GiB, bound %.1f GiB\n",
                 bench_op_name((bench_op)op), ps.bytes,
                 (double)need / (1 << 30),
                 (double)cfg->mem_bound / (1 << 30));
        continue;
      }
      bad = sweep_point(c, g, cfg, (bench_op)op, &ps, rank, world);
    }
  }
  spc_disconnect(c);
  return bad;
}

/* The memcpy ceiling at one size, measured once for all ops using it. */
typedef struct {
  size_t bytes;
  double one, all;
} ceiling;

static const ceiling *ceiling_at(ceiling *cache, int *n, size_t bytes,
                                 int threads) {
  for (int i = 0; i < *n; i++)
    if (cache[i].bytes == bytes)
      return &cache[i];
  ceiling *c = &cache[(*n)++];
  c->bytes = bytes;
  c->one = memcpy_gbs(bytes, 1);
  c->all = threads > 1 ? memcpy_gbs(bytes, threads) : c->one;
  return c;
}

int sweep_report(const sweep_cfg *cfg, int world, int threads,
                 const char *csv_path, const char *json_path) {
  FILE *csv = fopen(csv_path, "w"), *json = fopen(json_path, "w");
  if (csv == NULL || json == NULL) {
    fprintf(stderr, "spcoll-bench: cannot open %s: %m\n",
            csv == NULL ? csv_path : json_path);
    if (csv != NULL)
      fclose(csv);
    return 1;
  }
  ceiling *cache = calloc(SWEEP_MAXROWS, sizeof(*cache));
  if (cache == NULL) {
    fprintf(stderr, "spcoll-bench: calloc of the memcpy cache failed\n");
    fclose(csv);
    fclose(json);
    return 1;
  }
  int ncache = 0;
  bench_table_header(stdout);
  printf(" %8s %9s %9s\n", "copy_eff", "memcpy1", "memcpyT");
  bench_csv_header(csv);
  fprintf(csv, ",copy_efficiency,memcpy1_gbs,memcpyT_gbs,mover_threads\n");
  fprintf(json, "{\"source\":\"spcoll\",\"ranks\":%d,\"mover_threads\":%d,"
          "\"rows\":[", world, threads);
  for (int i = 0; i < *cfg->nrows; i++) {
    const bench_result *r = &cfg->rows[i];
    const ceiling *m = ceiling_at(cache, &ncache, r->bytes, threads);
    /* The measure: bytes landed in outputs per second, against a
     * memcpy with as many threads as the daemon's mover. */
    double eff = m->all > 0 ? bench_written(r->op, r->bytes, world) /
                                  (r->us * 1e-6) / 1e9 / m->all
                            : 0;
    bench_table_row(stdout, r);
    printf(" %8.2f %9.2f %9.2f\n", eff, m->one, m->all);
    bench_csv_row(csv, r);
    fprintf(csv, ",%.3f,%.3f,%.3f,%d\n", eff, m->one, m->all, threads);
    fprintf(json, "%s", i ? "," : "");
    bench_json_row(json, r);
    fprintf(json, ",\"copy_efficiency\":%.3f,\"memcpy1_gbs\":%.3f,"
            "\"memcpyT_gbs\":%.3f}", eff, m->one, m->all);
  }
  fprintf(json, "]}\n");
  free(cache);
  int bad = fclose(csv) != 0;
  bad |= fclose(json) != 0;
  if (bad)
    fprintf(stderr, "spcoll-bench: writing %s or %s failed\n", csv_path,
            json_path);
  return bad;
}
