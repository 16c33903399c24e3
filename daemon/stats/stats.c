#include "stats.h"

#include <stdlib.h>
#include <string.h>

#include "group.h"
#include "op.h"
#include "op_engine.h"
#include "peer.h"
#include "session.h"

int spd_stats_sees_group(const spd_ctx *ctx, const spd_group *g) {
  return ctx->stats_viewer != SPD_STATS_AGGREGATE &&
         spd_group_may_use(ctx, g, ctx->stats_viewer);
}

int spd_stats_sees_client(const spd_ctx *ctx, const spd_session *s) {
  if (ctx->stats_viewer == SPD_STATS_AGGREGATE)
    return 0;
  if (ctx->stats_viewer == 0 || s->uid == ctx->stats_viewer)
    return 1;
  for (int i = 0; i < ctx->cfg.nallow_uid; i++)
    if (ctx->cfg.allow_uid[i] == ctx->stats_viewer)
      return 1;
  return 0;
}

char *spd_stats_render(spd_ctx *ctx, const char *format, uid_t viewer) {
  ctx->stats_viewer = viewer;
  spd_group *g;
  TAILQ_FOREACH(g, &ctx->groups, link)
    spd_engines_group_harvest(&g->shared); /* the fast path's ops count too */
  spd_session *s;
  spd_buffer *b;
  TAILQ_FOREACH(s, &ctx->sessions, link) /* and the symmetric path's */
    TAILQ_FOREACH(b, &s->buffers, link)
      spd_buffer_counts_harvest(ctx, b);
  static const struct {
    const char *name;
    void (*render)(spd_ctx *, FILE *);
  } formats[] = {{"", spd_stats_text},
                 {"text", spd_stats_text},
                 {"json", spd_stats_json},
                 {"prometheus", spd_stats_prometheus}};
  for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++) {
    if (strcmp(format ? format : "", formats[i].name) != 0)
      continue;
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    if (out == NULL)
      return NULL;
    formats[i].render(ctx, out);
    if (fclose(out) != 0) {
      free(text);
      return NULL;
    }
    return text;
  }
  return NULL;
}

void spd_stats_session_usage(const spd_session *s, int *groups, int *buffers,
                             uint64_t *bytes) {
  const spd_member *m;
  const spd_buffer *b;
  *groups = *buffers = 0;
  *bytes = 0;
  TAILQ_FOREACH(m, &s->members, link)
    (*groups)++;
  TAILQ_FOREACH(b, &s->buffers, link) {
    (*buffers)++;
    *bytes += b->size;
  }
}

const char *spd_stats_group_state(const spd_group *g) {
  return g->broken ? "broken" : g->ready ? "ready" : "joining";
}

const char *spd_stats_members(const spd_group *g, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int r = 0; r < g->world && used + 24 < len; r++) {
    const spd_session *s = g->ranks[r].session;
    int n = s ? snprintf(buf + used, len - used, "%s%llu", r ? "," : "",
                         (unsigned long long)s->id)
              : snprintf(buf + used, len - used, "%s-", r ? "," : "");
    used += n > 0 ? (size_t)n : 0;
  }
  return buf;
}

static void text_ops(FILE *out, const char *prefix, const spd_op_stats *st) {
  for (int i = 0; i < SPD_OP_SLOTS; i++) {
    const spd_op_stats *o = &st[i];
    if (o->count == 0 && o->errors == 0)
      continue;
    fprintf(out, "%s%s count=%llu errors=%llu bytes=%llu p50_s=%g p90_s=%g "
            "p99_s=%g\n", prefix, spd_op_slot_name(i),
            (unsigned long long)o->count, (unsigned long long)o->errors,
            (unsigned long long)o->bytes, spd_op_stats_quantile(o, 0.5),
            spd_op_stats_quantile(o, 0.9), spd_op_stats_quantile(o, 0.99));
  }
}

static void text_groups(spd_ctx *ctx, FILE *out, uint64_t now) {
  spd_group *g;
  char miss[256];
  fprintf(out, "# groups\n");
  TAILQ_FOREACH(g, &ctx->groups, link) {
    if (!spd_stats_sees_group(ctx, g))
      continue;
    char members[1024], lb[160];
    const char *label = spd_group_label(g, ctx->stats_viewer, lb, sizeof(lb));
    fprintf(out, "group %s world=%d joined=%d nodes=1 state=%s ops_done=%llu "
            "members=%s\n", label, g->world, g->joined,
            spd_stats_group_state(g), (unsigned long long)g->ops_done,
            spd_stats_members(g, members, sizeof(members)));
    spd_op *op;
    char eng[256];
    TAILQ_FOREACH(op, &g->ops, link) {
      fprintf(out, "pending %s seq=%llu op=%s age_s=%.3f running=%d "
              "stuck=%d waiting_for=%s", label,
              (unsigned long long)op->seq,
              spd_op_slot_name(spd_op_slot_of(op)),
              (double)(now - op->created_ns) * 1e-9, op->running,
              op->stuck_reported, spd_op_missing(op, miss, sizeof(miss)));
      if (spd_engine_describe(op, eng, sizeof(eng))[0] != '\0')
        fprintf(out, " engine=%s %s", spd_engine_name(op->engine), eng);
      fputc('\n', out);
    }
    spd_group_wait fw; /* an op of the fast path waiting */
    if (spd_engines_group_waiting(&g->shared, now, &fw))
      fprintf(out, "pending %s seq=%llu op=%s age_s=%.3f running=0 stuck=%d "
              "waiting_for=%s path=shm\n", label, (unsigned long long)fw.seq,
              spd_op_slot_name(spd_op_slot(fw.kind)),
              (double)fw.age_ns * 1e-9, fw.stuck, fw.missing);
    spd_engines_group_line(&g->shared, label, out); /* "shm LABEL ops=..." */
    char prefix[160];
    snprintf(prefix, sizeof(prefix), "group_op %s ", label);
    text_ops(out, prefix, g->op_stats);
  }
}

void spd_stats_text(spd_ctx *ctx, FILE *out) {
  uint64_t now = spd_now_ns();
  fprintf(out, "# server\nversion %s\nuptime_s %.3f\n", SPD_VERSION,
          (double)(now - ctx->started_ns) * 1e-9);
  fprintf(out, "# config\n");
  spd_config_dump(&ctx->cfg, out);
  fprintf(out, "# counters\n");
#define SPD_COUNTER_PRINT(name, metric, help) \
  fprintf(out, #name " %llu\n", (unsigned long long)ctx->stats.name);
  SPD_COUNTERS(SPD_COUNTER_PRINT)
#undef SPD_COUNTER_PRINT
  for (int k = 0; k < SPD_ENGINE_COUNT; k++)
    fprintf(out, "mover_%s_ops %llu\nmover_%s_bytes %llu\n",
            spd_engine_name(k), (unsigned long long)ctx->engine_stats[k].ops,
            spd_engine_name(k),
            (unsigned long long)ctx->engine_stats[k].bytes);
  fprintf(out, "running_ops %d\npeer_nodes_up %d\n# clients\n",
          ctx->running_ops, spd_peer_nodes_up(ctx));
  spd_session *s;
  TAILQ_FOREACH(s, &ctx->sessions, link) {
    int groups, buffers;
    uint64_t bytes;
    if (!spd_stats_sees_client(ctx, s))
      continue;
    spd_stats_session_usage(s, &groups, &buffers, &bytes);
    fprintf(out, "client %llu pid=%d uid=%d framework=%s groups=%d "
            "buffers=%d registered_bytes=%llu\n", (unsigned long long)s->id,
            (int)s->pid, (int)s->uid, s->framework[0] ? s->framework : "-",
            groups, buffers, (unsigned long long)bytes);
  }
  text_groups(ctx, out, now);
  fprintf(out, "# ops\n");
  text_ops(out, "op ", ctx->op_stats);
}
