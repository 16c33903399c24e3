/* What keeps one client from holding the daemon: sessions dropped from the
 * loop (not from a reply loop's stack), the hello and partial-frame
 * deadlines, and who counts as an operator. */
#include <stdio.h>

#include "session.h"

static void on_reap(uv_idle_t *h) {
  spd_session_reap(h->data);
}

void spd_session_doom(spd_session *s, const char *why) {
  spd_ctx *ctx = s->ctx;
  if (s->doomed || s->closing)
    return;
  SPD_WARN(&ctx->log, "client %llu (pid %d uid %d) %s; closing",
           (unsigned long long)s->id, (int)s->pid, (int)s->uid, why);
  s->doomed = 1;
  ctx->ndoomed++;
  ctx->stats.clients_dropped++;
  uv_read_stop((uv_stream_t *)&s->pipe);
  if (ctx->reaper.data == NULL) {
    int rc = uv_idle_init(ctx->loop, &ctx->reaper);
    if (rc < 0) {
      SPD_ERROR(&ctx->log, "uv_idle_init of the reaper failed: %s",
                uv_strerror(rc));
      return; /* the watchdog reaps it within a second */
    }
    ctx->reaper.data = ctx;
  }
  int rc = uv_idle_start(&ctx->reaper, on_reap);
  if (rc < 0)
    SPD_ERROR(&ctx->log, "uv_idle_start of the reaper failed: %s",
              uv_strerror(rc));
}

void spd_session_reap(spd_ctx *ctx) {
  spd_session *s, *next;
  for (s = TAILQ_FIRST(&ctx->sessions); s && ctx->ndoomed > 0; s = next) {
    next = TAILQ_NEXT(s, link);
    if (s->doomed)
      spd_session_close(s); /* may close others' ops, never other sessions */
  }
  if (ctx->reaper.data != NULL)
    uv_idle_stop(&ctx->reaper);
}

void spd_session_deadlines(spd_ctx *ctx, uint64_t now) {
  uint64_t hello = (uint64_t)ctx->cfg.hello_timeout * 1000000000u;
  uint64_t frame = (uint64_t)ctx->cfg.frame_timeout * 1000000000u;
  char why[96];
  spd_session *s;
  TAILQ_FOREACH(s, &ctx->sessions, link) {
    if (!s->hello_done && now - s->accepted_ns > hello)
      snprintf(why, sizeof(why), "sent no hello within %lld s "
               "(hello_timeout)", ctx->cfg.hello_timeout);
    else if (s->partial_ns != 0 && now - s->partial_ns > frame)
      snprintf(why, sizeof(why), "left a frame unfinished for %lld s "
               "(frame_timeout)", ctx->cfg.frame_timeout);
    else
      continue;
    spd_session_doom(s, why);
  }
  spd_session_reap(ctx);
}

int spd_session_is_operator(const spd_session *s) {
  const spd_config *cfg = &s->ctx->cfg;
  if (s->uid == 0 || s->uid == s->ctx->self_uid)
    return 1;
  for (int i = 0; i < cfg->noperator_uid; i++)
    if (cfg->operator_uid[i] == s->uid)
      return 1;
  for (int i = 0; i < cfg->noperator_gid; i++) {
    if (cfg->operator_gid[i] == s->gid)
      return 1;
    for (int j = 0; j < s->ngroups_sup; j++)
      if (cfg->operator_gid[i] == s->groups[j])
        return 1;
  }
  return 0;
}
