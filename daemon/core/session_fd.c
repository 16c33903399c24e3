/* Replies that carry a file descriptor (a group's shared segment). libuv
 * sends a descriptor only as a handle's with uv_write2 on an IPC pipe (the
 * session's pipe is one), so the descriptor is wrapped in a pipe handle
 * for the duration of the write. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "group_seg.h"

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

static void on_written(uv_write_t *req, int status) {
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
                   (uv_stream_t *)&w->carrier, on_written);
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
