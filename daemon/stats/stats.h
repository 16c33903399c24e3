/* What the daemon reports about itself: counters, per-op latency, clients,
 * groups and their pending ops, in three renderings of the same walk. */
#ifndef SPD_STATS_H
#define SPD_STATS_H

#include <stdio.h>

#include "daemon.h"

/* Render in `format` ("text", "json", "prometheus"; NULL or "" is text)
 * for a client of uid `viewer`.
 * malloc'd; NULL for an unknown format or when out of memory. */
/* A viewer that sees no group and no client: the daemon's totals only. */
#define SPD_STATS_AGGREGATE ((uid_t)-1)

char *spd_stats_render(spd_ctx *ctx, const char *format, uid_t viewer);

/* What the viewer may see: groups it may use (spd_group_may_use), clients
 * of its own uid; root and allow_uid see everything. */
int spd_stats_sees_group(const spd_ctx *ctx, const struct spd_group *g);
int spd_stats_sees_client(const spd_ctx *ctx, const struct spd_session *s);

void spd_stats_text(spd_ctx *ctx, FILE *out);
void spd_stats_json(spd_ctx *ctx, FILE *out);
void spd_stats_prometheus(spd_ctx *ctx, FILE *out);

/* Helpers shared by the renderings. */
struct spd_session;
struct spd_group;
struct spd_op;
void spd_stats_session_usage(const struct spd_session *s, int *groups,
                             int *buffers, uint64_t *bytes);
/* "ready", "joining" or "broken". */
const char *spd_stats_group_state(const struct spd_group *g);
/* Client ids of the group's ranks in rank order, "-" for an empty slot:
 * "3,7,-,9" into buf. */
const char *spd_stats_members(const struct spd_group *g, char *buf,
                              size_t len);
/* The optional HTTP /metrics listener (metrics_http.c). */
int spd_metrics_http_start(spd_ctx *ctx, spk_err *err);
void spd_metrics_http_stop(spd_ctx *ctx);

#endif
