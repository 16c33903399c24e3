#include "session.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "group.h"
#include "types.h"

/* A client that sends more descriptors than it registers buffers is bad;
 * the cap bounds the fds libuv holds for it. */
#define SESSION_MAX_PENDING_FDS SPK_VMM_MAX_CHUNKS

static void on_closed(uv_handle_t *h) {
  spd_session *s = h->data;
  spf_reader_free(&s->reader);
  free(s);
}

static void session_give_back(spd_session *s) {
  spd_quotas *q = &s->ctx->quotas;
  if (s->counted)
    spd_quota_give(q, s->uid, s->stats_only ? SPD_Q_STATS_CONNECTIONS
                                            : SPD_Q_CONNECTIONS, 1);
  s->counted = 0;
  spd_quota_give(q, s->uid, SPD_Q_REQUEST_BYTES, s->reader_charge);
  s->reader_charge = 0;
  for (int i = 0; i < s->fds_queued; i++) /* libuv closes them */
    if (s->fd_charged[(s->fd_head + i) % SPK_VMM_MAX_CHUNKS])
      spd_quota_give(q, s->uid, SPD_Q_FDS, 1);
  s->fds_queued = 0;
}

static void session_release(spd_session *s) {
  spd_member *m;
  while ((m = TAILQ_FIRST(&s->members)) != NULL) {
    TAILQ_REMOVE(&s->members, m, link);
    spd_group_depart(m->group, m, 1);
    free(m);
  }
  spd_buffer *b;
  while ((b = TAILQ_FIRST(&s->buffers)) != NULL)
    spd_session_buffer_drop(s, b);
}

void spd_session_buffer_drop(spd_session *s, spd_buffer *b) {
  (void)spd_session_buffer_drop_then(s, b, NULL, NULL);
}

int spd_session_buffer_drop_then(spd_session *s, spd_buffer *b,
                                 spd_gpu_closed_fn fn, void *arg) {
  if (b == s->ring)
    spd_session_ring_close(s);
  long long bytes = b->kind == SPD_BUF_HOST ? (long long)b->size : 0;
  TAILQ_REMOVE(&s->buffers, b, link);
  s->nbuffers--;
  s->registered_bytes -= (uint64_t)bytes;
  spd_quota_give(&s->ctx->quotas, s->uid, SPD_Q_BUFFERS, 1);
  spd_quota_give(&s->ctx->quotas, s->uid, SPD_Q_BYTES, bytes);
  return spd_buffer_unref_then(s->ctx, b, fn, arg);
}

spd_session *spd_session_find(spd_ctx *ctx, uint64_t id) {
  spd_session *s;
  TAILQ_FOREACH(s, &ctx->sessions, link)
    if (s->id == id)
      return s;
  return NULL;
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
  if (s->doomed)
    s->ctx->ndoomed--;
  session_release(s);
  session_give_back(s);
  uv_read_stop((uv_stream_t *)&s->pipe);
  /* Flush what is queued (an error reply, say) before closing; a doomed
   * client does not read, so its queue would never drain. */
  uv_shutdown_t *req = s->doomed ? NULL : malloc(sizeof(*req));
  if (req != NULL) {
    req->data = s;
    if (uv_shutdown(req, (uv_stream_t *)&s->pipe, on_shutdown) == 0)
      return;
    free(req);
  }
  uv_close((uv_handle_t *)&s->pipe, on_closed);
}

void spd_session_fail(spd_session *s, uint64_t id, int status,
                      const char *msg) {
  SPD_WARN(&s->ctx->log, "client %llu (pid %d): %s; closing",
           (unsigned long long)s->id, (int)s->pid, msg);
  s->ctx->stats.protocol_errors++;
  spd_session_send_error(s, id, status, msg);
  spd_session_close(s);
}

/* A frame in progress costs up to twice the frame cap of reader memory:
 * beyond the first 64 KiB it counts as request memory of the client's
 * uid, so many connections each holding a large partial frame are bounded
 * by the request budgets. */
#define READER_FREE ((long long)128 << 10)
static int session_charge_reader(spd_session *s) {
  long long want = (long long)s->reader.cap - READER_FREE;
  if (want <= s->reader_charge)
    return SPK_OK;
  char msg[200];
  int rc = spd_quota_take(&s->ctx->quotas, &s->ctx->cfg, s->uid,
                          SPD_Q_REQUEST_BYTES, want - s->reader_charge, msg,
                          sizeof(msg));
  if (rc < 0) {
    SPD_WARN(&s->ctx->log, "client %llu (pid %d): frame buffer refused: %s",
             (unsigned long long)s->id, (int)s->pid, msg);
    return rc;
  }
  s->reader_charge = want;
  return SPK_OK;
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b) {
  spd_session *s = h->data;
  uint8_t *space;
  size_t avail;
  spk_err err;
  (void)suggested;
  if (spf_reader_space(&s->reader, 64 * 1024, &space, &avail, &err) < 0 ||
      session_charge_reader(s) < 0) {
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

void spd_session_take_frame(spd_session *s, Spcoll__Frame *f) {
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

/* Socket frames, each after the ring's records sent before it
 * (kernels/submit_ring.h). */
static void session_drain(spd_session *s) {
  spk_err err;
  Spcoll__Frame *f;
  int rc;
  (void)spd_session_ring_take(s);
  while (!s->closing && !s->doomed &&
         (rc = spf_reader_next(&s->reader, &f, &err)) != 0) {
    if (rc < 0) {
      spd_session_fail(s, 0, rc, err.msg);
      return;
    }
    spd_session_take_frame(s, f);
    s->frames_read++;
    (void)spd_session_ring_take(s);
  }
}

/* Descriptors that came with this read: more than one frame's worth
 * queued drops the client; each counts against its uid's SPD_Q_FDS until
 * taken and closed, and one past that quota is marked, so that the frame
 * it came with is refused (a limit, not a fault: others of the uid may
 * hold theirs only for a moment). */
static int fds_count(spd_session *s) {
  int n = uv_pipe_pending_count(&s->pipe);
  if (n > SESSION_MAX_PENDING_FDS) {
    char msg[96];
    snprintf(msg, sizeof(msg), "more than %d file descriptors sent ahead "
             "of their buf_register frames", SESSION_MAX_PENDING_FDS);
    spd_session_fail(s, 0, SPK_EPROTOCOL, msg);
    return SPK_EPROTOCOL;
  }
  for (; s->fds_queued < n; s->fds_queued++) {
    char msg[sizeof(s->fds_why)];
    int ok = spd_quota_take(&s->ctx->quotas, &s->ctx->cfg, s->uid, SPD_Q_FDS,
                            1, msg, sizeof(msg)) == SPK_OK;
    if (!ok)
      memcpy(s->fds_why, msg, sizeof(msg));
    s->fd_charged[(s->fd_head + s->fds_queued) % SPK_VMM_MAX_CHUNKS] =
        (uint8_t)ok;
  }
  return SPK_OK;
}

/* Descriptors left after every whole frame was handled came with frames
 * that take none: the client is dropped, so none is parked. */
static void fds_unclaimed(spd_session *s) {
  if (s->closing || s->doomed || s->reader.len != 0 ||
      uv_pipe_pending_count(&s->pipe) == 0)
    return;
  char msg[112];
  snprintf(msg, sizeof(msg), "%d file descriptors came with frames that "
           "take none", uv_pipe_pending_count(&s->pipe));
  spd_session_fail(s, 0, SPK_EPROTOCOL, msg);
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
  if (fds_count(s) < 0)
    return;
  session_drain(s);
  fds_unclaimed(s);
  if (s->closing || s->doomed)
    return;
  /* The partial-frame deadline runs from the first byte of a frame. */
  if (s->reader.len == 0)
    s->partial_ns = 0;
  else if (s->partial_ns == 0)
    s->partial_ns = spd_now_ns();
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
  /* Supplementary groups as of connect (Linux 4.13+): operator_gid may
   * name any of them. */
  len = sizeof(s->groups);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, s->groups, &len) == 0)
    s->ngroups_sup = (int)(len / sizeof(gid_t));
  else if (errno != ERANGE)
    SPD_WARN(&s->ctx->log, "getsockopt(fd %d, SO_PEERGROUPS) failed: %m; "
             "operator_gid sees only the primary group", fd);
  return 0;
}

/* A connection past its uid's or the daemon's connection limit is
 * answered with the reason and closed; the log says so at most once a
 * second so a flood cannot flood the journal too. */
static int session_count(spd_session *s) {
  spd_ctx *ctx = s->ctx;
  char msg[200];
  int rc = spd_quota_take(&ctx->quotas, &ctx->cfg, s->uid,
                          s->stats_only ? SPD_Q_STATS_CONNECTIONS
                                        : SPD_Q_CONNECTIONS,
                          1, msg, sizeof(msg));
  if (rc == SPK_OK) {
    s->counted = 1;
    return SPK_OK;
  }
  uint64_t now = spd_now_ns();
  if (now - ctx->refused_log_ns > 1000000000u) {
    ctx->refused_log_ns = now;
    SPD_WARN(&ctx->log, "connection of pid %d refused: %s (%llu refused so "
             "far)", (int)s->pid, msg,
             (unsigned long long)ctx->stats.clients_rejected + 1);
  }
  ctx->stats.clients_rejected++;
  spd_session_send_error(s, 0, rc, msg);
  spd_session_close(s);
  return rc;
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
  s->accepted_ns = spd_now_ns();
  TAILQ_INSERT_TAIL(&ctx->sessions, s, link);
  if (session_count(s) < 0)
    return;
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
int spd_session_take_fd(spd_session *s, int *fd_p, int *charged,
                        spk_err *err) {
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
  *charged = s->fd_charged[s->fd_head]; /* off the queue: the caller's */
  s->fd_head = (s->fd_head + 1) % SPK_VMM_MAX_CHUNKS;
  s->fds_queued--;
  if (dup_fd < 0) {
    if (*charged)
      spd_session_fds_give(s->ctx, s->uid, 1);
    return spk_err_set(err, SPK_ESYSTEM, "fcntl(%d, F_DUPFD_CLOEXEC): %s", fd,
                       strerror(saved));
  }
  *fd_p = dup_fd;
  return SPK_OK;
}

void spd_session_fds_give(spd_ctx *ctx, uid_t uid, int n) {
  spd_quota_give(&ctx->quotas, uid, SPD_Q_FDS, n);
}
