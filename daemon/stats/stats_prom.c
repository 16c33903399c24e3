/* The stats in the Prometheus text exposition format (version 0.0.4):
 * each family once with HELP and TYPE, then its samples; base units
 * (seconds, bytes); counters end in _total. */
#include "group.h"
#include "op.h"
#include "peer.h"
#include "session.h"
#include "stats.h"

static void family(FILE *out, const char *name, const char *type,
                   const char *help) {
  fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample per (live group, op) with ops; `field` picks the value. */
static void per_group(spd_ctx *ctx, FILE *out, const char *name,
                      uint64_t (*field)(const spd_op_stats *)) {
  spd_group *g;
  TAILQ_FOREACH(g, &ctx->groups, link)
    for (int i = 0; i < SPD_OP_SLOTS && spd_stats_sees_group(ctx, g); i++) {
      const spd_op_stats *o = &g->op_stats[i];
      char lb[160];
      if (o->count || o->errors)
        fprintf(out, "%s{op=\"%s\",group=\"%s\"} %llu\n", name,
                spd_op_slot_name(i),
                spd_group_label(g, ctx->stats_viewer, lb, sizeof(lb)),
                (unsigned long long)field(o));
    }
}

static uint64_t f_count(const spd_op_stats *o) { return o->count; }
static uint64_t f_errors(const spd_op_stats *o) { return o->errors; }
static uint64_t f_bytes(const spd_op_stats *o) { return o->bytes; }

static void histogram(spd_ctx *ctx, FILE *out) {
  const char *n = "spcoll_op_duration_seconds";
  family(out, n, "histogram",
         "Time from the last rank's request to the op's completion.");
  spd_group *g;
  TAILQ_FOREACH(g, &ctx->groups, link)
    for (int i = 0; i < SPD_OP_SLOTS && spd_stats_sees_group(ctx, g); i++) {
      const spd_op_stats *o = &g->op_stats[i];
      if (o->count == 0)
        continue;
      char lb[160];
      const char *label = spd_group_label(g, ctx->stats_viewer, lb,
                                          sizeof(lb));
      uint64_t cum = 0;
      for (int b = 0; b < SPD_LAT_BUCKETS - 1; b++) {
        cum += o->lat[b];
        fprintf(out, "%s_bucket{op=\"%s\",group=\"%s\",le=\"%g\"} %llu\n", n,
                spd_op_slot_name(i), label, spd_lat_bucket_le(b),
                (unsigned long long)cum);
      }
      fprintf(out, "%s_bucket{op=\"%s\",group=\"%s\",le=\"+Inf\"} %llu\n", n,
              spd_op_slot_name(i), label, (unsigned long long)o->count);
      fprintf(out, "%s_sum{op=\"%s\",group=\"%s\"} %.9f\n", n,
              spd_op_slot_name(i), label, o->seconds);
      fprintf(out, "%s_count{op=\"%s\",group=\"%s\"} %llu\n", n,
              spd_op_slot_name(i), label, (unsigned long long)o->count);
    }
}

static void gauges(spd_ctx *ctx, FILE *out) {
  int clients = 0, groups = 0, pending = 0;
  spd_session *s;
  spd_group *g;
  spd_op *op;
  TAILQ_FOREACH(s, &ctx->sessions, link)
    clients++;
  TAILQ_FOREACH(g, &ctx->groups, link) {
    groups++;
    TAILQ_FOREACH(op, &g->ops, link)
      pending += !op->running;
  }
  family(out, "spcoll_info", "gauge", "Daemon version (value is 1).");
  fprintf(out, "spcoll_info{version=\"%s\"} 1\n", SPD_VERSION);
  family(out, "spcoll_uptime_seconds", "gauge", "Seconds since start.");
  fprintf(out, "spcoll_uptime_seconds %.3f\n",
          (double)(spd_now_ns() - ctx->started_ns) * 1e-9);
  family(out, "spcoll_clients", "gauge", "Connected clients.");
  fprintf(out, "spcoll_clients %d\n", clients);
  family(out, "spcoll_groups", "gauge", "Live groups.");
  fprintf(out, "spcoll_groups %d\n", groups);
  family(out, "spcoll_pending_ops", "gauge",
         "Ops waiting for ranks or for the group's previous op.");
  fprintf(out, "spcoll_pending_ops %d\n", pending);
  family(out, "spcoll_running_ops", "gauge", "Ops in a mover.");
  fprintf(out, "spcoll_running_ops %d\n", ctx->running_ops);
  family(out, "spcoll_peer_nodes_up", "gauge",
         "Other nodes up: authenticated, their Hello heard.");
  fprintf(out, "spcoll_peer_nodes_up %d\n", spd_peer_nodes_up(ctx));
}

void spd_stats_prometheus(spd_ctx *ctx, FILE *out) {
  gauges(ctx, out);
#define SPD_COUNTER_PROM(name, metric, help)                              \
  family(out, #metric, "counter", help);                                  \
  fprintf(out, #metric " %llu\n", (unsigned long long)ctx->stats.name);
  SPD_COUNTERS(SPD_COUNTER_PROM)
#undef SPD_COUNTER_PROM
  for (int k = 0; k < SPD_ENGINE_COUNT; k++)
    for (int b = 0; b < 2; b++) {
      char name[64];
      snprintf(name, sizeof(name), "spcoll_mover_%s_%s_total",
               spd_engine_name(k), b ? "bytes" : "ops");
      family(out, name, "counter", spd_engine_help(k, b));
      fprintf(out, "%s %llu\n", name,
              (unsigned long long)(b ? ctx->engine_stats[k].bytes
                                     : ctx->engine_stats[k].ops));
    }
  family(out, "spcoll_ops_total", "counter", "Ops completed, per live group.");
  per_group(ctx, out, "spcoll_ops_total", f_count);
  family(out, "spcoll_op_errors_total", "counter",
         "Ops failed, per live group.");
  per_group(ctx, out, "spcoll_op_errors_total", f_errors);
  family(out, "spcoll_bytes_total", "counter",
         "Bytes written by completed ops, per live group.");
  per_group(ctx, out, "spcoll_bytes_total", f_bytes);
  histogram(ctx, out);
}
