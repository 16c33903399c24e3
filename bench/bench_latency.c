/* The latency mode: tiny ops back to back between the ranks, and where
 * each round trip went: the daemon says (spc_last_timing) how long it
 * held the op, waiting for the other ranks (matching), planning and
 * moving; the rest of the client's round trip is the socket, the wake-ups
 * on both sides and the client library. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "spcoll_bench.h"

enum { F_RT, F_DAEMON, F_WAIT, F_PLAN, F_MOVE };

static const bench_op lat_ops[LAT_NOPS] = {BENCH_ALL_GATHER, BENCH_ALL_TO_ALL,
                                           BENCH_ALL_REDUCE,
                                           BENCH_REDUCE_SCATTER};

size_t latency_samples_size(int world, int iters) {
  return (size_t)LAT_NOPS * (size_t)world * (size_t)iters * LAT_FIELDS *
         sizeof(uint64_t);
}

static uint64_t *sample_at(const latency_cfg *cfg, int world, int op,
                           int rank, int iter) {
  return cfg->samples +
         (((size_t)op * (size_t)world + (size_t)rank) * (size_t)cfg->iters +
          (size_t)iter) * LAT_FIELDS;
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The op's size: 8 B, or one float per rank when that is more. */
static size_t lat_bytes(int world) {
  return (size_t)world * 4 > 8 ? (size_t)world * 4 : 8;
}

static int lat_run(spc_group *g, bench_op op, spc_tensor *in,
                   spc_tensor *out) {
  switch (op) {
  case BENCH_ALL_GATHER: return spc_all_gather(g, in, out, 0, NULL);
  case BENCH_ALL_TO_ALL: return spc_all_to_all(g, in, out, 0, 1, 0);
  case BENCH_ALL_REDUCE: return spc_all_reduce(g, in, out, SPC_SUM);
  default: return spc_reduce_scatter(g, in, out, 0, NULL);
  }
}

static int lat_op(spc_client *c, spc_group *g, const latency_cfg *cfg,
                  int k, int rank, int w) {
  bench_op op = lat_ops[k];
  int64_t n = (int64_t)(lat_bytes(w) / 4), si[2], so[2];
  int nd = 1;
  switch (op) {
  case BENCH_ALL_GATHER: si[0] = n / w, so[0] = n; break;
  case BENCH_ALL_REDUCE: si[0] = so[0] = n; break;
  case BENCH_REDUCE_SCATTER: si[0] = n, so[0] = n / w; break;
  default:
    nd = 2, si[0] = w, si[1] = n / w, so[0] = 1, so[1] = n;
  }
  spc_buffer *b;
  spc_tensor in, out;
  if (spc_buffer_alloc(c, 8192, &b) < 0 ||
      spc_tensor_init(&in, b, 0, SPC_FLOAT32, nd, si) < 0 ||
      spc_tensor_init(&out, b, 4096, SPC_FLOAT32, nd, so) < 0) {
    fprintf(stderr, "latency rank %d: buffer setup: %s\n", rank,
            spc_last_error(c));
    return 1;
  }
  int rc = 0;
  /* As many warm-up ops as the sweep's points (bench_warmup): 200 were
   * timed after the busiest baseline left the ranks placed on one CPU
   * (all_gather p50 7.2 us, the next op 0.45 us, in one make bench). */
  for (int i = -bench_warmup(lat_bytes(w)); i < cfg->iters && rc == 0; i++) {
    uint64_t t0 = now_ns();
    rc = lat_run(g, op, &in, &out);
    uint64_t rt = now_ns() - t0;
    spc_timing t;
    if (rc == 0 && i >= 0 && spc_last_timing(c, &t) == 0) {
      uint64_t *s = sample_at(cfg, w, k, rank, i);
      s[F_RT] = rt, s[F_DAEMON] = t.daemon_ns, s[F_WAIT] = t.wait_ns;
      s[F_PLAN] = t.plan_ns, s[F_MOVE] = t.move_ns;
    }
  }
  if (rc != 0)
    fprintf(stderr, "latency rank %d: %s: %s\n", rank, bench_op_name(op),
            spc_last_error(c));
  if (spc_buffer_free(b) < 0) {
    fprintf(stderr, "latency rank %d: spc_buffer_free: %s\n", rank,
            spc_last_error(c));
    rc = 1;
  }
  return rc != 0;
}

int latency_rank(int rank, int world, void *arg) {
  const latency_cfg *cfg = arg;
  spc_client *c = spt_connect(cfg->socket);
  spc_group *g;
  if (c == NULL)
    return 1;
  if (spc_group_join(c, "latency", world, rank, &g) < 0) {
    fprintf(stderr, "latency rank %d: spc_group_join: %s\n", rank,
            spc_last_error(c));
    spc_disconnect(c);
    return 1;
  }
  int bad = 0;
  for (int k = 0; k < LAT_NOPS && !bad; k++)
    bad = lat_op(c, g, cfg, k, rank, world);
  spc_disconnect(c);
  return bad;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Percentile q of n values (sorts v), in microseconds. */
static double pct_us(uint64_t *v, size_t n, double q) {
  qsort(v, n, sizeof(*v), cmp_u64);
  return (double)v[(size_t)((double)(n - 1) * q)] / 1e3;
}

typedef struct {
  double p50, p99, mean;           /* round trip, us */
  double part_p50[4], part_mean[4]; /* socket, wait, plan, move */
} lat_summary;

/* Over every sample of every rank: each rank sees its own round trip. */
static int lat_summarize(const latency_cfg *cfg, int world, int k,
                         lat_summary *s) {
  size_t n = (size_t)world * (size_t)cfg->iters;
  uint64_t *v = malloc(n * sizeof(*v));
  if (v == NULL) {
    fprintf(stderr, "spcoll-bench: malloc of %zu latency samples failed\n",
            n);
    return 1;
  }
  for (int part = -1; part < 4; part++) {
    double sum = 0;
    for (int r = 0; r < world; r++)
      for (int i = 0; i < cfg->iters; i++) {
        const uint64_t *x = sample_at(cfg, world, k, r, i);
        /* The socket part: the client's round trip less the daemon's
         * hold (clocks are the same CLOCK_MONOTONIC on one node). */
        uint64_t val = part == -1 ? x[F_RT]
                       : part == 0 ? (x[F_RT] > x[F_DAEMON]
                                          ? x[F_RT] - x[F_DAEMON] : 0)
                                   : x[F_WAIT + part - 1];
        v[(size_t)r * (size_t)cfg->iters + (size_t)i] = val;
        sum += (double)val;
      }
    double mean = sum / (double)n / 1e3;
    if (part == -1) {
      s->mean = mean;
      s->p50 = pct_us(v, n, 0.5);
      s->p99 = pct_us(v, n, 0.99);
    } else {
      s->part_mean[part] = mean;
      s->part_p50[part] = pct_us(v, n, 0.5);
    }
  }
  free(v);
  return 0;
}

int latency_report(const latency_cfg *cfg, int world, const char *csv_path,
                   const char *json_path) {
  FILE *csv = fopen(csv_path, "w"), *json = fopen(json_path, "w");
  if (csv == NULL || json == NULL) {
    fprintf(stderr, "spcoll-bench: cannot open %s: %m\n",
            csv == NULL ? csv_path : json_path);
    if (csv != NULL)
      fclose(csv);
    return 1;
  }
  static const char *const parts[4] = {"socket", "wait", "plan", "move"};
  printf("# latency: %zu B ops, %d ranks, %d round trips per rank (after %d "
         "warm-up), all ranks' samples\n", lat_bytes(world), world,
         cfg->iters, bench_warmup(lat_bytes(world)));
  printf("# socket = client round trip - daemon hold (socket, wake-ups, "
         "client library); wait = for the other ranks (matching); plan = "
         "stream order + planning; move = mover incl. its thread hand-offs\n");
  printf("%-15s %7s %9s %9s %9s | %8s %8s %8s %8s | %s\n", "# op", "size",
         "p50(us)", "p99(us)", "mean(us)", "socket", "wait", "plan", "move",
         "share of mean: socket/wait/plan/move");
  fprintf(csv, "op,ranks,size_bytes,iters,p50_us,p99_us,mean_us,"
          "socket_p50_us,wait_p50_us,plan_p50_us,move_p50_us,"
          "socket_share,wait_share,plan_share,move_share\n");
  fprintf(json, "{\"ranks\":%d,\"iters\":%d,\"rows\":[", world, cfg->iters);
  int bad = 0;
  for (int k = 0; k < LAT_NOPS && !bad; k++) {
    lat_summary s = {0};
    if ((bad = lat_summarize(cfg, world, k, &s)) != 0)
      break;
    double share[4];
    for (int p = 0; p < 4; p++)
      share[p] = s.mean > 0 ? s.part_mean[p] / s.mean : 0;
    const char *name = bench_op_name(lat_ops[k]);
    printf("%-15s %7zu %9.1f %9.1f %9.1f | %8.1f %8.1f %8.1f %8.1f | "
           "%.0f%% / %.0f%% / %.0f%% / %.0f%%\n", name, lat_bytes(world),
           s.p50, s.p99, s.mean, s.part_p50[0], s.part_p50[1], s.part_p50[2],
           s.part_p50[3], share[0] * 100, share[1] * 100, share[2] * 100,
           share[3] * 100);
    fprintf(csv, "%s,%d,%zu,%d,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.3f,%.3f,"
            "%.3f,%.3f\n", name, world, lat_bytes(world), cfg->iters, s.p50,
            s.p99, s.mean, s.part_p50[0], s.part_p50[1], s.part_p50[2],
            s.part_p50[3], share[0], share[1], share[2], share[3]);
    fprintf(json, "%s{\"op\":\"%s\",\"size_bytes\":%zu,\"p50_us\":%.2f,"
            "\"p99_us\":%.2f,\"mean_us\":%.2f", k ? "," : "", name,
            lat_bytes(world), s.p50, s.p99, s.mean);
    for (int p = 0; p < 4; p++)
      fprintf(json, ",\"%s_p50_us\":%.2f,\"%s_share\":%.3f", parts[p],
              s.part_p50[p], parts[p], share[p]);
    fprintf(json, "}");
  }
  fprintf(json, "]}\n");
  bad |= fclose(csv) != 0;
  bad |= fclose(json) != 0;
  return bad;
}
