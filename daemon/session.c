#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "group.h"

/* A client that sends more descriptors than it registers buffers is bad;
 * the cap bounds the fds libuv holds for it. */
#define SESSION_MAX_PENDING_FDS 16
/* Replies queued to a client that does not read, before it is dropped. */
#define SESSION_MAX_QUEUED ((size_t)64 << 20)

typedef struct {
  uv_write_t req;
  uint8_t *buf;
} session_write;

static void on_closed(uv_handle_t *h) {
  spd_session *s = h->data;
  spf_reader_free(&s->reader);
  free(s);
}

static void session_release(spd_session *s) {
  spd_member *m;
  while ((m = TAILQ_FIRST(&s->members)) != NULL) {
    TAILQ_REMOVE(&s->members, m, link);
    spd_group_depart(m->group, m, 1);
    free(m);
  }
  spd_buffer *b;
  while ((b = TAILQ_FIRST(&s->buffers)) != NULL) {
    TAILQ_REMOVE(&s->buffers, b, link);
    spd_buffer_unref(s->ctx, b);
  }
}

static void on_shutdown(uv_shutdown_t *req, int status) {
  spd_session *s = req->data;
  (void)status; /* the peer may be gone already: close either way */
  free(req);
  uv_close((uv_handle_t *)&s->pipe, on_closed);
}

void spd_session_close(spd_session *s) {
  if (s->closing)
    return;
  s->closing = 1;
  SPD_DEBUG(&s->ctx->log, "client %llu closing", (unsigned long long)s->id);
  TAILQ_REMOVE(&s->ctx->sessions, s, link);
  session_release(s);
  uv_read_stop((uv_stream_t *)&s->pipe);
  /* Flush what is queued (an error reply, say) before closing. */
  uv_shutdown_t *req = malloc(sizeof(*req));
  if (req != NULL) {
    req->data = s;
    if (uv_shutdown(req, (uv_stream_t *)&s->pipe, on_shutdown) == 0)
      return;
    free(req);
  }
  uv_close((uv_handle_t *)&s->pipe, on_closed);
}

static void on_written(uv_write_t *req, int status) {
  session_write *w = (session_write *)req;
  spd_session *s = req->data;
  if (status < 0 && status != UV_ECANCELED && !s->closing)
    SPD_DEBUG(&s->ctx->log, "write to client %llu failed: %s",
              (unsigned long long)s->id, uv_strerror(status));
  free(w->buf);
  free(w);
}


void spd_session_send(spd_session *s, const Spcoll__Frame *f) {
  if (s->closing)
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
  uv_buf_t b = uv_buf_init((char *)w->buf, (unsigned)len);
  w->req.data = s;
  int rc = uv_write(&w->req, (uv_stream_t *)&s->pipe, &b, 1, on_written);
  if (rc < 0) {
    SPD_DEBUG(&s->ctx->log, "uv_write to client %llu failed: %s",
              (unsigned long long)s->id, uv_strerror(rc));
    free(w->buf);
    free(w);
  }
}

void spd_session_send_error(spd_session *s, uint64_t id, int status,
                            const char *msg) {
  Spcoll__Error e = SPCOLL__ERROR__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  e.status = (Spcoll__Status)(-status);
  e.message = (char *)msg;
  f.id = id;
  f.body_case = SPCOLL__FRAME__BODY_ERROR;
  f.error = &e;
  spd_session_send(s, &f);
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

void spd_session_fail(spd_session *s, uint64_t id, int status,
                      const char *msg) {
  SPD_WARN(&s->ctx->log, "client %llu (pid %d): %s; closing",
           (unsigned long long)s->id, (int)s->pid, msg);
  s->ctx->stats.protocol_errors++;
  spd_session_send_error(s, id, status, msg);
  spd_session_close(s);
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  spd_session *s = h->data;
  uint8_t *space;
  size_t avail;
  spk_err err;
  (void)suggested;
  if (spf_reader_space(&s->reader, 64 * 1024, &space, &avail, &err) < 0) {
    *b = uv_buf_init(NULL, 0); /* libuv reports UV_ENOBUFS to on_read */
    return;
  }
  *b = uv_buf_init((char *)space, (unsigned)avail);
}

/* A token bucket of one second's worth of frames: a client over the rate
 * is closed with an error naming the limit. */
static int frame_allowed(spd_session *s) {
  double rate = s->ctx->cfg.client_max_frame_rate;
  uint64_t now = spd_now_ns();
  if (s->frame_ns == 0)
    s->frame_tokens = rate;
  else
    s->frame_tokens += (double)(now - s->frame_ns) * 1e-9 * rate;
  if (s->frame_tokens > rate)
    s->frame_tokens = rate;
  s->frame_ns = now;
  if (s->frame_tokens < 1)
    return 0;
  s->frame_tokens -= 1;
  return 1;
}

static void session_drain(spd_session *s) {
  spk_err err;
  Spcoll__Frame *f;
  int rc;
  while (!s->closing && (rc = spf_reader_next(&s->reader, &f, &err)) != 0) {
    if (rc < 0) {
      spd_session_fail(s, 0, rc, err.msg);
      return;
    }
    if (!frame_allowed(s)) {
      char msg[128];
      snprintf(msg, sizeof(msg), "client sent more than %d frames per second "
               "(client_max_frame_rate)", s->ctx->cfg.client_max_frame_rate);
      spcoll__frame__free_unpacked(f, NULL);
      spd_session_fail(s, 0, SPK_EPROTOCOL, msg);
      return;
    }
    spd_session_dispatch(s, f);
    spcoll__frame__free_unpacked(f, NULL);
  }
}

static void on_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *b) {
  spd_session *s = stream->data;
  (void)b;
  if (nread == UV_EOF) {
    SPD_DEBUG(&s->ctx->log, "client %llu hung up", (unsigned long long)s->id);
    spd_session_close(s);
    return;
  }
  if (nread < 0) {
    SPD_INFO(&s->ctx->log, "read from client %llu failed: %s",
             (unsigned long long)s->id, uv_strerror((int)nread));
    spd_session_close(s);
    return;
  }
  spf_reader_commit(&s->reader, (size_t)nread);
  /* A client that sends requests but does not read the replies would make
   * them pile up without bound: it is dropped here, where closing it
   * cannot pull a session out from under a reply loop. */
  size_t queued = uv_stream_get_write_queue_size((uv_stream_t *)&s->pipe);
  if (queued > SESSION_MAX_QUEUED) {
    SPD_WARN(&s->ctx->log, "client %llu (pid %d) does not read its replies "
             "(%zu bytes queued); closing", (unsigned long long)s->id,
             (int)s->pid, queued);
    spd_session_close(s);
    return;
  }
  if (uv_pipe_pending_count(&s->pipe) > SESSION_MAX_PENDING_FDS) {
    spd_session_fail(s, 0, SPK_EPROTOCOL,
                     "more than 16 file descriptors sent ahead of their "
                     "buf_register frames");
    return;
  }
  session_drain(s);
}

static int session_peercred(spd_session *s) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  uv_os_fd_t fd;
  int rc = uv_fileno((uv_handle_t *)&s->pipe, &fd);
  if (rc < 0) {
    SPD_ERROR(&s->ctx->log, "uv_fileno of a new client failed: %s",
              uv_strerror(rc));
    return rc;
  }
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0) {
    SPD_ERROR(&s->ctx->log, "getsockopt(fd %d, SO_PEERCRED) failed: %m", fd);
    return -errno;
  }
  s->pid = cred.pid, s->uid = cred.uid, s->gid = cred.gid;
  return 0;
}

void spd_session_accept(spd_ctx *ctx, uv_stream_t *server, int stats_only) {
  spd_session *s = calloc(1, sizeof(*s));
  if (s == NULL) {
    SPD_ERROR(&ctx->log, "calloc of a session failed; connection refused");
    return;
  }
  s->ctx = ctx;
  s->stats_only = stats_only;
  spf_reader_init(&s->reader);
  TAILQ_INIT(&s->buffers);
  TAILQ_INIT(&s->members);
  int rc = uv_pipe_init(ctx->loop, &s->pipe, 1);
  if (rc < 0) {
    SPD_ERROR(&ctx->log, "uv_pipe_init failed: %s", uv_strerror(rc));
    free(s);
    return;
  }
  s->pipe.data = s;
  s->closing = 1; /* until fully set up: close must not unlink it */
  rc = uv_accept(server, (uv_stream_t *)&s->pipe);
  if (rc < 0)
    SPD_ERROR(&ctx->log, "uv_accept failed: %s", uv_strerror(rc));
  if (rc == 0 && (rc = session_peercred(s)) == 0)
    rc = uv_read_start((uv_stream_t *)&s->pipe, on_alloc, on_read);
  if (rc < 0) {
    ctx->stats.clients_rejected++;
    uv_close((uv_handle_t *)&s->pipe, on_closed);
    return;
  }
  s->closing = 0;
  s->id = spd_next_id(ctx);
  TAILQ_INSERT_TAIL(&ctx->sessions, s, link);
  ctx->stats.clients_accepted++;
  SPD_DEBUG(&ctx->log, "client %llu connected: pid %d uid %d",
            (unsigned long long)s->id, (int)s->pid, (int)s->uid);
}

static void on_scratch_closed(uv_handle_t *h) {
  free(h);
}

/* libuv queues the descriptors that came with SCM_RIGHTS on the pipe; the
 * public way to take one is to accept it into a handle. We keep a dup of
 * it and let the scratch handle close the original. */
int spd_session_take_fd(spd_session *s, int *fd_p, spk_err *err) {
  if (uv_pipe_pending_count(&s->pipe) == 0)
    return spk_err_set(err, SPK_EPROTOCOL,
                       "buf_register came without a file descriptor");
  uv_pipe_t *scratch = malloc(sizeof(*scratch));
  if (scratch == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "malloc of a scratch pipe failed");
  int rc = uv_pipe_init(s->ctx->loop, scratch, 0);
  if (rc < 0) {
    free(scratch);
    return spk_err_set(err, SPK_ESYSTEM, "uv_pipe_init: %s", uv_strerror(rc));
  }
  uv_os_fd_t fd = -1;
  rc = uv_accept((uv_stream_t *)&s->pipe, (uv_stream_t *)scratch);
  if (rc == 0)
    rc = uv_fileno((uv_handle_t *)scratch, &fd);
  int dup_fd = rc == 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 0) : -1;
  int saved = errno;
  uv_close((uv_handle_t *)scratch, on_scratch_closed);
  if (rc < 0)
    return spk_err_set(err, SPK_ESYSTEM, "taking the sent descriptor: %s",
                       uv_strerror(rc));
  if (dup_fd < 0)
    return spk_err_set(err, SPK_ESYSTEM, "fcntl(%d, F_DUPFD_CLOEXEC): %s", fd,
                       strerror(saved));
  *fd_p = dup_fd;
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
