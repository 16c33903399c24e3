/* What the layers below the session use of it (tests/layers.py rule
 * 11): frames out to the client (replies, errors, a frame carrying a file
 * descriptor) and the lookup of its buffers and memberships. A client
 * that does not read its replies is doomed here, and closed later from
 * the loop (session_guard.c), never from the sender's stack. Loop thread
 * only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "session.h"

/* Past the daemon-wide reply budget, only clients with more than this
 * queued are dropped: one that reads its replies never is. */
#define SESSION_SMALL_QUEUE ((size_t)1 << 20)

typedef struct {
  uv_write_t req;
  uint8_t *buf;
  size_t len;
} session_write;

static void on_written(uv_write_t *req, int status) {
  session_write *w = (session_write *)req;
  spd_session *s = req->data;
  s->ctx->queued_bytes -= w->len;
  if (status < 0 && status != UV_ECANCELED && !s->closing)
    SPD_DEBUG(&s->ctx->log, "write to client %llu failed: %s",
              (unsigned long long)s->id, uv_strerror(status));
  free(w->buf);
  free(w);
}


/* The reply caps are checked as replies are queued: a client that asks
 * and never reads is dropped before its replies cost more than its cap. */
static int send_allowed(spd_session *s, size_t len) {
  const spd_config *cfg = &s->ctx->cfg;
  size_t queued = uv_stream_get_write_queue_size((uv_stream_t *)&s->pipe);
  char why[160];
  if ((long long)(queued + len) > cfg->client_max_queued)
    snprintf(why, sizeof(why), "does not read its replies: %zu bytes queued "
             "(client_max_queued %lld)", queued, cfg->client_max_queued);
  else if ((long long)(s->ctx->queued_bytes + len) > cfg->max_queued &&
           queued > SESSION_SMALL_QUEUE)
    snprintf(why, sizeof(why), "holds %zu bytes of unread replies while "
             "every client's together pass max_queued %lld", queued,
             cfg->max_queued);
  else
    return 1;
  spd_session_doom(s, why);
  return 0;
}

void spd_session_send(spd_session *s, const Spcoll__Frame *f) {
  if (s->closing || s->doomed)
    return;
  spk_err err;
  session_write *w = calloc(1, sizeof(*w));
  size_t len;
  if (w == NULL || spf_encode(f, &w->buf, &len, &err) < 0) {
    SPD_ERROR(&s->ctx->log, "cannot encode a reply to client %llu: %s",
              (unsigned long long)s->id, w ? err.msg : "out of memory");
    free(w);
    /* The request must still be answered, or its caller waits forever. */
    if (f->body_case != SPCOLL__FRAME__BODY_ERROR)
      spd_session_send_error(s, f->id, SPK_ENO_MEMORY,
                             "the reply does not fit in a frame (1 MiB)");
    return;
  }
  if (!send_allowed(s, len)) {
    free(w->buf);
    free(w);
    return;
  }
  uv_buf_t b = uv_buf_init((char *)w->buf, (unsigned)len);
  w->req.data = s;
  w->len = len;
  int rc = uv_write(&w->req, (uv_stream_t *)&s->pipe, &b, 1, on_written);
  if (rc == 0)
    s->ctx->queued_bytes += len;
  if (rc < 0) {
    SPD_DEBUG(&s->ctx->log, "uv_write to client %llu failed: %s",
              (unsigned long long)s->id, uv_strerror(rc));
    free(w->buf);
    free(w);
  }
}

static void send_error(spd_session *s, uint64_t id, int status,
                       const char *msg, int not_run) {
  Spcoll__Error e = SPCOLL__ERROR__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  e.status = (Spcoll__Status)(-status);
  e.message = (char *)msg;
  e.not_run = not_run != 0;
  f.id = id;
  f.body_case = SPCOLL__FRAME__BODY_ERROR;
  f.error = &e;
  spd_session_send(s, &f);
}

void spd_session_send_error(spd_session *s, uint64_t id, int status,
                            const char *msg) {
  send_error(s, id, status, msg, 0);
}

void spd_session_refuse(spd_session *s, uint64_t id, const char *what) {
  char msg[160];
  int up = s->ctx->upgrading;
  snprintf(msg, sizeof(msg), up ? "daemon upgrading: no new %s here; the "
                                  "client sends it to the new daemon"
                                : "daemon draining: no new %s", what);
  send_error(s, id, up ? SPK_ERESTARTED : SPK_ESHUTDOWN, msg, up);
}

void spd_session_send_done(spd_session *s, uint64_t id,
                           const Spcoll__Done *timing) {
  Spcoll__Done d = SPCOLL__DONE__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  if (timing != NULL)
    d = *timing;
  f.id = id;
  f.body_case = SPCOLL__FRAME__BODY_DONE;
  f.done = &d;
  spd_session_send(s, &f);
}

/* Replies that carry a file descriptor (a group's shared segment). libuv
 * sends a descriptor only as a handle's with uv_write2 on an IPC pipe (the
 * session's pipe is one), so the descriptor is wrapped in a pipe handle
 * for the duration of the write. */
typedef struct {
  uv_write_t req;
  uv_pipe_t carrier;          /* wraps a dup of the descriptor sent */
  uint8_t *buf;
  size_t len;
  spd_ctx *ctx;
} fd_write;

static void on_carrier_closed(uv_handle_t *h) {
  fd_write *w = h->data;
  free(w->buf);
  free(w);
}

static void on_fd_written(uv_write_t *req, int status) {
  fd_write *w = (fd_write *)req;
  w->ctx->queued_bytes -= w->len;
  if (status < 0 && status != UV_ECANCELED)
    SPD_DEBUG(&w->ctx->log, "write of a descriptor to a client failed: %s",
              uv_strerror(status));
  uv_close((uv_handle_t *)&w->carrier, on_carrier_closed);
}

int spd_session_send_fd(spd_session *s, const Spcoll__Frame *f, int fd) {
  spd_ctx *ctx = s->ctx;
  int dup_fd = fd; /* ours from here: sent, or closed */
  if (s->closing || s->doomed) {
    close(dup_fd);
    return SPK_ECONNECTION;
  }
  spk_err err;
  fd_write *w = calloc(1, sizeof(*w));
  if (w == NULL) {
    SPD_WARN(&ctx->log, "calloc of %zu bytes failed", sizeof(*w));
    close(dup_fd);
    return SPK_ENO_MEMORY;
  }
  if (spf_encode(f, &w->buf, &w->len, &err) < 0) {
    SPD_WARN(&ctx->log, "cannot encode a reply to client %llu: %s",
             (unsigned long long)s->id, err.msg);
    close(dup_fd);
    free(w);
    return SPK_ENO_MEMORY;
  }
  w->ctx = ctx;
  int rc = uv_pipe_init(ctx->loop, &w->carrier, 0);
  if (rc < 0) {
    SPD_WARN(&ctx->log, "uv_pipe_init failed: %s", uv_strerror(rc));
    close(dup_fd);
    free(w->buf);
    free(w);
    return SPK_ESYSTEM;
  }
  w->carrier.data = w;
  /* From here the handle owns dup_fd; its close callback frees w. */
  if ((rc = uv_pipe_open(&w->carrier, dup_fd)) < 0) {
    close(dup_fd);
  } else {
    uv_buf_t b = uv_buf_init((char *)w->buf, (unsigned)w->len);
    rc = uv_write2(&w->req, (uv_stream_t *)&s->pipe, &b, 1,
                   (uv_stream_t *)&w->carrier, on_fd_written);
  }
  if (rc < 0) {
    SPD_WARN(&ctx->log, "sending a descriptor to client %llu failed: %s",
             (unsigned long long)s->id, uv_strerror(rc));
    uv_close((uv_handle_t *)&w->carrier, on_carrier_closed);
    return SPK_ESYSTEM;
  }
  ctx->queued_bytes += w->len;
  return SPK_OK;
}

spd_member *spd_session_member(spd_session *s, uint64_t id) {
  spd_member *m;
  TAILQ_FOREACH(m, &s->members, link)
    if (m->id == id)
      return m;
  return NULL;
}

spd_buffer *spd_session_buffer(spd_session *s, uint64_t id) {
  spd_buffer *b;
  TAILQ_FOREACH(b, &s->buffers, link)
    if (b->id == id)
      return b;
  return NULL;
}
