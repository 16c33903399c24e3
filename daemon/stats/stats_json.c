/* The stats as one JSON object. Names are restricted at entry (group
 * names, framework tags), but strings are escaped all the same. */
#include <string.h>

#include "group.h"
#include "op.h"
#include "peer.h"
#include "session.h"
#include "stats.h"

static void json_str(FILE *out, const char *s) {
  fputc('"', out);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\')
      fprintf(out, "\\%c", c);
    else if (c < 0x20)
      fprintf(out, "\\u%04x", c);
    else
      fputc(c, out);
  }
  fputc('"', out);
}

static void json_ops(FILE *out, const spd_op_stats *st) {
  int first = 1;
  fputc('{', out);
  for (int i = 0; i < SPD_OP_SLOTS; i++) {
    const spd_op_stats *o = &st[i];
    if (o->count == 0 && o->errors == 0)
      continue;
    fprintf(out, "%s\"%s\":{\"count\":%llu,\"errors\":%llu,\"bytes\":%llu,"
            "\"seconds\":%.9f,\"p50_s\":%g,\"p90_s\":%g,\"p99_s\":%g}",
            first ? "" : ",", spd_op_slot_name(i),
            (unsigned long long)o->count, (unsigned long long)o->errors,
            (unsigned long long)o->bytes, o->seconds,
            spd_op_stats_quantile(o, 0.5), spd_op_stats_quantile(o, 0.9),
            spd_op_stats_quantile(o, 0.99));
    first = 0;
  }
  fputc('}', out);
}

static void json_clients(spd_ctx *ctx, FILE *out) {
  spd_session *s;
  const char *sep = "";
  fprintf(out, "\"clients\":[");
  TAILQ_FOREACH(s, &ctx->sessions, link) {
    int groups, buffers;
    uint64_t bytes;
    if (!spd_stats_sees_client(ctx, s))
      continue;
    spd_stats_session_usage(s, &groups, &buffers, &bytes);
    fprintf(out, "%s{\"id\":%llu,\"pid\":%d,\"uid\":%d,\"framework\":",
            sep,
            (unsigned long long)s->id, (int)s->pid, (int)s->uid);
    json_str(out, s->framework);
    fprintf(out, ",\"groups\":%d,\"buffers\":%d,\"registered_bytes\":%llu}",
            groups, buffers, (unsigned long long)bytes);
    sep = ",";
  }
  fprintf(out, "]");
}

static void json_pending(FILE *out, const spd_group *g, uint64_t now) {
  const spd_op *op;
  char miss[256];
  fprintf(out, ",\"pending\":[");
  TAILQ_FOREACH(op, &g->ops, link)
    fprintf(out, "%s{\"seq\":%llu,\"op\":\"%s\",\"age_s\":%.3f,"
            "\"running\":%s,\"stuck\":%s,\"waiting_for\":[%s]}",
            op == TAILQ_FIRST(&g->ops) ? "" : ",",
            (unsigned long long)op->seq,
            spd_op_slot_name(spd_op_slot_of(op)),
            (double)(now - op->created_ns) * 1e-9,
            op->running ? "true" : "false",
            op->stuck_reported ? "true" : "false",
            spd_op_missing(op, miss, sizeof(miss)));
  spd_group_wait fw; /* an op of the fast path waiting */
  if (spd_engines_group_waiting(&((spd_group *)g)->shared, now, &fw))
    fprintf(out, "%s{\"seq\":%llu,\"op\":\"%s\",\"age_s\":%.3f,"
            "\"running\":false,\"stuck\":%s,\"waiting_for\":[%s],"
            "\"path\":\"shm\"}",
            TAILQ_EMPTY(&g->ops) ? "" : ",", (unsigned long long)fw.seq,
            spd_op_slot_name(spd_op_slot(fw.kind)), (double)fw.age_ns * 1e-9,
            fw.stuck ? "true" : "false", fw.missing);
  fprintf(out, "]");
}

static void json_groups(spd_ctx *ctx, FILE *out, uint64_t now) {
  spd_group *g;
  const char *sep = "";
  fprintf(out, "\"groups\":[");
  TAILQ_FOREACH(g, &ctx->groups, link) {
    if (!spd_stats_sees_group(ctx, g))
      continue;
    fprintf(out, "%s{\"name\":", sep);
    sep = ",";
    char lb[160];
    json_str(out, spd_group_label(g, ctx->stats_viewer, lb, sizeof(lb)));
    char members[1024];
    spd_stats_members(g, members, sizeof(members));
    for (char *c = members; *c; c++) /* JSON: client id 0 = empty slot */
      if (*c == '-')
        *c = '0';
    fprintf(out, ",\"world\":%d,\"joined\":%d,\"nodes\":1,\"state\":\"%s\","
            "\"ops_done\":%llu,\"members\":[%s]", g->world, g->joined,
            spd_stats_group_state(g), (unsigned long long)g->ops_done,
            members);
    json_pending(out, g, now);
    fprintf(out, ",\"ops\":");
    json_ops(out, g->op_stats);
    fputc('}', out);
  }
  fprintf(out, "]");
}

void spd_stats_json(spd_ctx *ctx, FILE *out) {
  uint64_t now = spd_now_ns();
  fprintf(out, "{\"version\":\"%s\",\"uptime_s\":%.3f,\"config\":{"
          "\"socket\":", SPD_VERSION, (double)(now - ctx->started_ns) * 1e-9);
  json_str(out, ctx->cfg.socket_path);
  fprintf(out, ",\"workers\":%d,\"log_level\":\"%s\"},\"counters\":{",
          ctx->cfg.workers, spd_log_level_name(ctx->cfg.log_level));
  const char *sep = "";
#define SPD_COUNTER_JSON(name, metric, help)                            \
  fprintf(out, "%s\"" #name "\":%llu", sep,                             \
          (unsigned long long)ctx->stats.name);                         \
  sep = ",";
  SPD_COUNTERS(SPD_COUNTER_JSON)
#undef SPD_COUNTER_JSON
  for (int k = 0; k < SPD_ENGINE_COUNT; k++)
    fprintf(out, ",\"mover_%s_ops\":%llu,\"mover_%s_bytes\":%llu",
            spd_engine_name(k), (unsigned long long)ctx->engine_stats[k].ops,
            spd_engine_name(k),
            (unsigned long long)ctx->engine_stats[k].bytes);
  fprintf(out, ",\"running_ops\":%d,\"peer_nodes_up\":%d},",
          ctx->running_ops, spd_peer_nodes_up(ctx));
  json_clients(ctx, out);
  fputc(',', out);
  json_groups(ctx, out, now);
  fprintf(out, ",\"ops\":");
  json_ops(out, ctx->op_stats);
  fprintf(out, "}\n");
}
