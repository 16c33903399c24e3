/* Connection to the daemon: connect and Hello, frame send/receive, reply
 * routing to outstanding requests (a client's errors: client_base.c). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "client_fast.h"
#include "client_gpu.h"

/* Every status of the one list (kernels/status.h) has the same number in
 * spcoll.h and on the wire. */
#define SPC_STATUS_SAME(name, pub, wire, val, msg)                           \
  _Static_assert((int)SPC_##pub == (int)SPK_E##name &&                       \
                     (int)SPCOLL__STATUS__STATUS_##wire == (val),            \
                 "SPC_" #pub " and STATUS_" #wire " must be " #val);
SPK_STATUS_MAP(SPC_STATUS_SAME)
#undef SPC_STATUS_SAME
_Static_assert((int)SPC_INT64 == (int)SPK_I64 &&
                   (int)SPC_BFLOAT16 == (int)SPK_BF16,
               "public and internal dtypes must match");

const char *spc_strerror(int status) {
  return spk_strerror(status);
}

const char *spc_default_socket(char *buf, size_t len) {
  const char *env = getenv("SPCOLL_SOCKET");
  const char *xdg = getenv("XDG_RUNTIME_DIR");
  if (env != NULL && env[0] != '\0')
    snprintf(buf, len, "%s", env);
  else if (geteuid() != 0 && xdg != NULL && xdg[0] != '\0')
    snprintf(buf, len, "%s/spcolld.sock", xdg);
  else
    snprintf(buf, len, "/run/spcolld/spcolld.sock");
  return buf;
}

/* The connection is unusable after a transport error: fail everything
 * outstanding so no waiter blocks forever. */
static int conn_broken(spc_client *c, const char *what, int err) {
  c->broken = 1;
  for (spc_request *r = c->requests; r != NULL; r = r->next)
    if (!r->done)
      r->done = 1, r->status = SPC_ECONNECTION;
  return spc__fail(c, SPC_ECONNECTION, "%s: %s", what,
                   err ? strerror(err) : "daemon closed the connection");
}

static void detached_done(spc_client *c, spc_request *req);

/* The daemon went away: every request outstanding fails with
 * SPC_ERESTARTED; the next call reconnects (client_restart.c), closing
 * the old socket, which until then may still hold the daemon's last
 * words (last_words). */
static int conn_lost(spc_client *c, const char *what, int err) {
  char msg[400];
  snprintf(msg, sizeof(msg), "spcolld went away (%s: %s) while this was in "
           "flight; the client reconnects at its next call", what,
           err ? strerror(err) : "the daemon closed the connection");
  c->lost = 1;
  spf_reader_free(&c->reader);
  spf_reader_init(&c->reader);
  spc__seg_forget(c);
  for (spc_request *r = c->requests, *next; r != NULL; r = next) {
    next = r->next;
    if (r->done)
      continue;
    r->done = 1, r->status = SPC_ERESTARTED;
    free(r->msg);
    r->msg = strdup(msg);
    if (r->detached)
      detached_done(c, r);
  }
  return spc__fail(c, SPC_ERESTARTED, "%s", msg);
}

int spc__conn_gone(spc_client *c, const char *what, int err) {
  if (c->broken || c->reconnect_ms == 0 ||
      (err != 0 && err != EPIPE && err != ECONNRESET))
    return conn_broken(c, what, err);
  return conn_lost(c, what, err);
}

/* A daemon that refuses a connection (a limit of its uid, say) sends an
 * Error and closes; a send racing the close fails, and the reason is
 * still waiting in the socket: report it instead of the bare EPIPE. */
static int last_words(spc_client *c, int status) {
  uint8_t *space;
  size_t avail;
  spk_err err;
  Spcoll__Frame *f = NULL;
  if (spf_reader_space(&c->reader, 64 * 1024, &space, &avail, &err) < 0)
    return status;
  ssize_t n = recv(c->fd, space, avail, MSG_DONTWAIT);
  if (n > 0)
    spf_reader_commit(&c->reader, (size_t)n);
  if (spf_reader_next(&c->reader, &f, &err) <= 0)
    return status;
  /* The daemon closed this client on purpose, saying why: for good. */
  if (f->body_case == SPCOLL__FRAME__BODY_ERROR) {
    c->lost = 0, c->broken = 1;
    status = spc__fail(c, -(int)f->error->status, "spcolld: %s",
                       f->error->message);
  }
  spcoll__frame__free_unpacked(f, NULL);
  return status;
}

/* One whole frame on the socket; counted (c->frames_sent), since the
 * submission ring's records say how many came before them. */
static int send_all(spc_client *c, const uint8_t *buf, size_t len,
                    const int *fds, int nfds) {
  char cbuf[CMSG_SPACE(sizeof(int) * SPK_VMM_MAX_CHUNKS)];
  if (nfds < 0 || nfds > SPK_VMM_MAX_CHUNKS)
    return spc__fail(c, SPC_EINVAL, "%d file descriptors for one frame: at "
                     "most %d", nfds, SPK_VMM_MAX_CHUNKS);
  while (len > 0) {
    struct iovec iov = {(void *)buf, len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
      size_t fl = sizeof(int) * (size_t)nfds;
      memset(cbuf, 0, sizeof(cbuf));
      msg.msg_control = cbuf;
      msg.msg_controllen = CMSG_SPACE(fl);
      struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
      cm->cmsg_level = SOL_SOCKET;
      cm->cmsg_type = SCM_RIGHTS;
      cm->cmsg_len = CMSG_LEN(fl);
      memcpy(CMSG_DATA(cm), fds, fl);
    }
    ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return last_words(c, spc__conn_gone(c, "sendmsg to spcolld", errno));
    buf += n, len -= (size_t)n;
    nfds = 0; /* the descriptors ride with the first bytes only */
  }
  c->frames_sent++;
  return SPC_OK;
}

/* The daemon may be asleep with records in the client's submission ring:
 * a Kick (no answer) wakes it. */
static int kick(spc_client *c) {
  Spcoll__Kick k = SPCOLL__KICK__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  uint8_t *buf;
  size_t len;
  spk_err err;
  f.body_case = SPCOLL__FRAME__BODY_KICK;
  f.kick = &k;
  int rc = spf_encode(&f, &buf, &len, &err);
  if (rc < 0)
    return spc__fail(c, rc, "%s", err.msg);
  rc = send_all(c, buf, len, NULL, 0);
  free(buf);
  return rc;
}

int spc__send(spc_client *c, Spcoll__Frame *f, int fd, spc_request **req_p) {
  return spc__send_fds(c, f, &fd, fd >= 0 ? 1 : 0, req_p);
}

int spc__hangup_take(spc_client *c) {
  if (!c->hangup)
    return SPC_OK;
  c->hangup = 0;
  return spc__conn_gone(c, "seen from the shared segment", 0);
}

int spc__send_fds(spc_client *c, Spcoll__Frame *f, const int *fds, int nfds,
                  spc_request **req_p) {
  int rc = spc__hangup_take(c);
  if (c->lost)
    return spc__fail(c, SPC_ERESTARTED, "spcolld went away: %s",
                     c->reviving ? "again, while the client reconnected"
                                 : "the client reconnects at its next op");
  if (rc < 0)
    return rc;
  if (c->broken)
    return spc__fail(c, SPC_ECONNECTION, "the connection to spcolld is "
                     "closed: %s", "reconnect with spc_connect");
  /* Made before this request takes its id: ids follow the send order. */
  int ring = nfds == 0 && spc__ring_ready(c, f);
  spc_request *req = calloc(1, sizeof(*req));
  if (req == NULL)
    return spc__fail(c, SPC_ENOMEM, "calloc of a request failed");
  req->client = c;
  req->id = f->id = ++c->next_id;
  uint8_t *buf;
  size_t len;
  spk_err err;
  /* An op frame may go through the submission ring (client_ring.c): 1
   * when it did. */
  rc = ring ? spc__ring_put(c, f) : 0;
  if (rc == 2 && (rc = kick(c)) == SPC_OK)
    rc = 1;
  else if (rc == -1) /* as a send to a closed socket fails */
    rc = spc__conn_gone(c, "spcolld closed the connection (its submission "
                        "ring)", 0);
  if (rc == 0) {
    rc = spf_encode(f, &buf, &len, &err);
    if (rc < 0) {
      free(req);
      return spc__fail(c, rc, "%s", err.msg);
    }
    rc = send_all(c, buf, len, fds, nfds);
    free(buf);
  }
  if (rc < 0) {
    free(req);
    return rc;
  }
  req->next = c->requests;
  c->requests = req;
  *req_p = req;
  return SPC_OK;
}

static spc_request *request_find(spc_client *c, uint64_t id) {
  for (spc_request *r = c->requests; r != NULL; r = r->next)
    if (r->id == id)
      return r;
  return NULL;
}

static void request_unlink(spc_client *c, spc_request *req);

/* The answer of a request nobody waits for: taken and freed here; a
 * failure is kept for the client's next op call (spc__async_take). */
static void detached_done(spc_client *c, spc_request *req) {
  request_unlink(c, req);
  c->ndetached--;
  spc__gpu_flags_answered(c, req);
  if (req->status == SPC_OK && req->reply != NULL &&
      req->reply->body_case == SPCOLL__FRAME__BODY_DONE) {
    const Spcoll__Done *d = req->reply->done;
    c->last_timing = (spc_timing){d->daemon_ns, d->wait_ns, d->plan_ns,
                                  d->move_ns};
  }
  if (req->status < 0 && c->async_status == 0) {
    c->async_status = req->status;
    snprintf(c->async_msg, sizeof(c->async_msg), "an earlier op on a stream "
             "(request %llu) failed: %s", (unsigned long long)req->id,
             req->msg ? req->msg : "");
  }
  if (req->reply != NULL)
    spcoll__frame__free_unpacked(req->reply, NULL);
  free(req->msg);
  free(req);
}

void spc__detach(spc_client *c, spc_request *req) {
  req->detached = 1;
  c->ndetached++;
}

int spc_async_error(spc_client *c, int wait) {
  if (c == NULL)
    return SPC_EINVAL;
  while (wait && c->ndetached > 0 && !c->broken) {
    int rc = spc__pump_any(c, 1);
    if (rc < 0)
      return rc;
  }
  return spc__async_take(c);
}

int spc__async_take(spc_client *c) {
  if (c->ndetached > 0)
    (void)spc__pump_any(c, 0); /* answers already here */
  int status = c->async_status;
  if (status == 0)
    return SPC_OK;
  c->async_status = 0;
  return spc__fail(c, status, "%s", c->async_msg);
}

/* An op of group id failed with SPC_ERESTARTED while this daemon lives:
 * a node the group spans restarted, and its record here broke. The
 * group rejoins at its next op (client_sequence.c). */
static void group_restarted(spc_client *c, uint64_t id, const char *msg) {
  for (spc_group *g = c->groups; g != NULL; g = g->next)
    if (g->id == id && !g->lost && !g->reform) {
      g->reform = SPC__REFORM_LEAVE;
      snprintf(g->why, sizeof(g->why), "%s", msg);
    }
}

/* Hand a decoded frame to its request; takes ownership of f. */
static void route(spc_client *c, Spcoll__Frame *f) {
  spc_request *req = request_find(c, f->id);
  if (f->body_case == SPCOLL__FRAME__BODY_GROUP_JOINED &&
      f->group_joined->fast_seg_size != 0) /* its descriptor came first */
    spc__seg_keep(c, req != NULL && !req->done, f->group_joined->group_id,
                  f->group_joined->fast_seg_size);
  int is_error = f->body_case == SPCOLL__FRAME__BODY_ERROR;
  if (req == NULL || req->done) {
    /* An unsolicited error is the daemon closing us for a protocol error. */
    if (is_error) {
      conn_broken(c, "spcolld", 0);
      spc__fail(c, -(int)f->error->status, "spcolld: %s", f->error->message);
    }
    spcoll__frame__free_unpacked(f, NULL);
    return;
  }
  req->done = 1;
  if (is_error) {
    req->status = -(int)f->error->status;
    req->not_run = f->error->not_run;
    req->msg = strdup(f->error->message ? f->error->message : "");
    if (req->status == SPC_ERESTARTED && !req->not_run && req->group_id)
      group_restarted(c, req->group_id, f->error->message ? f->error->message
                                                          : "");
    spcoll__frame__free_unpacked(f, NULL);
  } else {
    req->status = SPC_OK;
    req->reply = f;
  }
  if (req->detached)
    detached_done(c, req);
}

static int read_some(spc_client *c, int block) {
  uint8_t *space;
  size_t avail;
  spk_err err;
  if (spf_reader_space(&c->reader, 64 * 1024, &space, &avail, &err) < 0)
    return spc__fail(c, SPC_ENOMEM, "%s", err.msg);
  ssize_t n;
  /* A frame may bring a descriptor (a group's shared segment, issue 18):
   * keep it for the reply that announces it. */
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } cbuf;
  struct iovec iov = {space, avail};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  do {
    msg.msg_control = cbuf.buf;
    msg.msg_controllen = sizeof(cbuf.buf);
    n = recvmsg(c->fd, &msg, (block ? 0 : MSG_DONTWAIT) | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n > 0)
    spc__fds_take(c, &msg);
  if (n < 0 && !block && (errno == EAGAIN || errno == EWOULDBLOCK))
    return 0;
  if (n <= 0)
    return spc__conn_gone(c, "recv from spcolld", n < 0 ? errno : 0);
  spf_reader_commit(&c->reader, (size_t)n);
  return 1;
}

static int drain_frames(spc_client *c) {
  Spcoll__Frame *f;
  spk_err err;
  int rc;
  while ((rc = spf_reader_next(&c->reader, &f, &err)) > 0)
    route(c, f);
  if (rc < 0) {
    conn_broken(c, "bad frame from spcolld", 0);
    return spc__fail(c, SPC_ECONNECTION, "bad frame from spcolld: %s",
                     err.msg);
  }
  return SPC_OK;
}

int spc__pump_any(spc_client *c, int block) {
  if (c->lost)
    return SPC_ERESTARTED;
  if (c->broken)
    return SPC_ECONNECTION;
  int rc;
  while ((rc = read_some(c, block)) > 0) {
    if ((rc = drain_frames(c)) < 0)
      return rc;
    if (block)
      return SPC_OK;
  }
  return rc;
}

int spc__pump(spc_client *c, spc_request *req, int block) {
  while (!req->done) {
    if (c->lost)
      return SPC_ERESTARTED;
    if (c->broken)
      return SPC_ECONNECTION;
    int rc = read_some(c, block);
    if (rc < 0)
      return rc;
    if (rc == 0)
      return SPC_OK;
    if ((rc = drain_frames(c)) < 0)
      return rc;
  }
  return SPC_OK;
}

static void request_unlink(spc_client *c, spc_request *req) {
  for (spc_request **p = &c->requests; *p != NULL; p = &(*p)->next)
    if (*p == req) {
      *p = req->next;
      return;
    }
}

/* Unlink and free a done request; its status and message become the
 * client's last error. */
static int request_complete(spc_client *c, spc_request *req,
                            Spcoll__Frame **reply_p) {
  int status = req->status;
  c->not_run = status < 0 && req->not_run;
  request_unlink(c, req);
  spc__gpu_flags_answered(c, req);
  if (req->sym)
    spc__sym_req_done(req);
  if (status < 0 && req->msg != NULL)
    spc__fail(c, status, "%s", req->msg);
  if (status == SPC_OK && req->reply != NULL &&
      req->reply->body_case == SPCOLL__FRAME__BODY_DONE &&
      req->reply->done->daemon_ns != 0) {
    const Spcoll__Done *d = req->reply->done;
    c->last_timing = (spc_timing){d->daemon_ns, d->wait_ns, d->plan_ns,
                                  d->move_ns};
  }
  if (status == SPC_OK && req->source_p != NULL && req->reply != NULL &&
      req->reply->body_case == SPCOLL__FRAME__BODY_DONE)
    *req->source_p = req->reply->done->source;
  if (reply_p != NULL && status == SPC_OK)
    *reply_p = req->reply;
  else if (req->reply != NULL)
    spcoll__frame__free_unpacked(req->reply, NULL);
  free(req->msg);
  free(req);
  return status;
}

int spc__finish(spc_client *c, spc_request *req, Spcoll__Frame **reply_p) {
  spc__pump(c, req, 1);
  return request_complete(c, req, reply_p);
}

int spc__call(spc_client *c, Spcoll__Frame *f, int fd,
              Spcoll__Frame **reply_p) {
  return spc__call_fds(c, f, &fd, fd >= 0 ? 1 : 0, reply_p);
}

int spc__call_fds(spc_client *c, Spcoll__Frame *f, const int *fds, int nfds,
                  Spcoll__Frame **reply_p) {
  spc_request *req;
  int rc = spc__send_fds(c, f, fds, nfds, &req);
  if (rc < 0)
    return rc;
  return spc__finish(c, req, reply_p);
}

int spc__register_call(spc_client *c, Spcoll__Frame *f, const int *fds,
                       int nfds, Spcoll__Frame **reply_p) {
  for (int tries = 0;; tries++) {
    int rc = spc__call_fds(c, f, fds, nfds, reply_p);
    if (rc != SPC_ENOMEM || nfds == 0 || tries == 200 ||
        strstr(c->last_error, "fds_in_flight") == NULL)
      return rc;
    usleep(10000);
  }
}

int spc_client_fd(const spc_client *c) {
  return c == NULL ? -1 : c->fd;
}

int spc_last_timing(const spc_client *c, spc_timing *t) {
  if (c == NULL || t == NULL)
    return SPC_EINVAL;
  *t = c->last_timing;
  return SPC_OK;
}

int spc_wait(spc_request **reqp) {
  if (reqp == NULL || *reqp == NULL)
    return SPC_EINVAL;
  spc_request *req = *reqp;
  *reqp = NULL;
  int done, rc = req->sym ? spc__sym_wait(req, 1, &done) : SPC_OK;
  int frc = spc__finish(req->client, req, NULL);
  return rc < 0 ? rc : frc;
}

int spc_test(spc_request **reqp, int *done_p) {
  if (reqp == NULL || *reqp == NULL || done_p == NULL)
    return SPC_EINVAL;
  spc_request *req = *reqp;
  if (req->sym) {
    int rc = spc__sym_wait(req, 0, done_p);
    if (rc == SPC_OK && !*done_p)
      return SPC_OK;
    *reqp = NULL;
    int frc = request_complete(req->client, req, NULL);
    return rc < 0 ? rc : frc;
  }
  spc__pump(req->client, req, 0);
  *done_p = req->done;
  if (!req->done)
    return SPC_OK;
  *reqp = NULL;
  return request_complete(req->client, req, NULL);
}
