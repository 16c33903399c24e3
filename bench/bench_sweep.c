/* The op sweep: every op at every ladder size through the daemon, timed
 * on rank 0 per op (no barrier between iterations, as in training), and
 * its report against the memcpy ceiling measured right after. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "spcoll_bench.h"
#include "spcoll_point.h"

/* One point on every rank; rank 0 appends its row. */
static int sweep_point(spc_client *c, spc_group *g, const sweep_cfg *cfg,
                       bench_op op, const bench_shape *ps, int rank, int w) {
  spc_point p;
  if (spc_point_setup(c, ps, rank, &p) != 0)
    return 1;
  int iters = bench_iters(ps->bytes, cfg->iters);
  int warmup = bench_warmup(ps->bytes);
  double *t = bench_times(iters, "spcoll-bench");
  if (t == NULL) {
    spc_point_free(&p);
    return 1;
  }
  int rc = 0;
  for (int i = -warmup; i < iters && rc == 0; i++) {
    double t0 = bench_now_s();
    rc = spc_point_run(g, op, &p);
    if (i >= 0)
      t[i] = bench_now_s() - t0;
  }
  if (rc != 0)
    fprintf(stderr, "bench rank %d: %s at %zu bytes: %s\n", rank,
            bench_op_name(op), ps->bytes, spc_last_error(c));
  else if (cfg->verify)
    rc = spc_point_verify(op, &p, rank, w);
  if (rc == 0 && rank == 0 && *cfg->nrows < SWEEP_MAXROWS) {
    bench_result *r = &cfg->rows[(*cfg->nrows)++];
    *r = (bench_result){"spcoll", op, w, ps->bytes, iters, 0, 0, 0};
    bench_stats(t, iters, &r->us, &r->p50_us, &r->p99_us);
  }
  free(t);
  rc |= spc_point_free(&p);
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
      bench_shape ps;
      if (!bench_shape_of((bench_op)op, b, world, &ps))
        continue;
      /* Every rank decides alike: the bound is measured once, before the
       * ranks are forked. */
      size_t need = spc_point_need(&ps, world);
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
