/* Upgrading under running jobs. A new spcolld started with --upgrade asks
 * the running one, as an operator on its stats socket, for its listening
 * sockets (command "upgrade"). The running one sends them (a Done frame
 * each, with one descriptor: control, stats, and the peers' bootstrap
 * when it peers with other nodes, which then hear the new daemon's Hello
 * as this node's restart), stops accepting and drains: ops
 * some rank already issued finish here, fast-path ones too; what nobody
 * started is refused as not run (spd_session_refuse), and the client
 * sends it again to the new daemon; then it closes its clients and exits,
 * leaving the socket files to the new one. Its clients reconnect, to the
 * new daemon on the same sockets, and rejoin (client_restart.c). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "frame.h"
#include "lifecycle.h"
#include "peer.h"
#include "session.h"

/* ---- the running daemon: giving ---- */

/* A Done for request id, carrying a duplicate of socket fd (what). */
static int give_fd(spd_session *s, uint64_t id, int fd, const char *what,
                   spk_err *err) {
  int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0)
    return spk_err_set(err, SPK_ESYSTEM, "fcntl(F_DUPFD_CLOEXEC) of %s's "
                       "socket (fd %d): %s", what, fd, strerror(errno));
  Spcoll__Done d = SPCOLL__DONE__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  f.id = id;
  f.body_case = SPCOLL__FRAME__BODY_DONE;
  f.done = &d;
  int rc = spd_session_send_fd(s, &f, dup_fd); /* takes dup_fd */
  return rc < 0 ? spk_err_set(err, rc, "sending %s's socket failed", what)
                : SPK_OK;
}

/* The same for listener l. */
static int give_one(spd_session *s, uint64_t id, spd_listener *l,
                    spk_err *err) {
  uv_os_fd_t fd;
  int rc = uv_fileno((uv_handle_t *)&l->pipe, &fd);
  if (rc < 0)
    return spk_err_set(err, SPK_ESYSTEM, "uv_fileno(%s): %s", l->path,
                       uv_strerror(rc));
  return give_fd(s, id, fd, l->path, err);
}

void spd_upgrade_give(spd_session *s, uint64_t id, int peers) {
  spd_ctx *ctx = s->ctx;
  spk_err err;
  /* Whoever holds the sockets is sent every client's memory: root and
   * the daemon's own uid only, not every operator. */
  if (s->uid != 0 && s->uid != ctx->self_uid) {
    char msg[160];
    snprintf(msg, sizeof(msg), "upgrade is for root and the daemon's uid "
             "%d (its sockets carry every client's memory); uid %d is "
             "neither", (int)ctx->self_uid, (int)s->uid);
    spd_session_send_error(s, id, SPK_EPERM, msg);
    return;
  }
  if (ctx->stopping || ctx->draining || !ctx->control.listening ||
      !ctx->stats_listener.listening) {
    spd_session_send_error(s, id, SPK_ESHUTDOWN, "this spcolld is already "
                           "stopping: nothing to hand over");
    return;
  }
  int boot = spd_peers_boot_fd(ctx);
  if ((boot >= 0) != (peers != 0)) {
    char msg[160];
    snprintf(msg, sizeof(msg), "this spcolld %s peers and the new one %s: "
             "their settings differ", boot >= 0 ? "has" : "has no",
             peers ? "has" : "has none");
    spd_session_send_error(s, id, SPK_ECONFLICT, msg);
    return;
  }
  int rc = give_one(s, id, &ctx->control, &err);
  if (rc == SPK_OK)
    rc = give_one(s, id, &ctx->stats_listener, &err);
  if (rc == SPK_OK && boot >= 0)
    rc = give_fd(s, id, boot, "the peers' bootstrap", &err);
  if (rc < 0) {
    SPD_ERROR(&ctx->log, "upgrade: %s", err.msg);
    spd_session_send_error(s, id, rc, err.msg);
    return;
  }
  SPD_INFO(&ctx->log, "upgrade: sockets handed to pid %d; draining, the "
           "clients move there", (int)s->pid);
  ctx->upgrading = 1;
  /* The socket files are the new daemon's now: not removed at exit. */
  ctx->control.bound = ctx->stats_listener.bound = 0;
  spd_server_close(ctx);
  spd_peers_boot_give_up(ctx); /* peers dial the new one, which says Hello
                                * as this node restarted */
  spd_drain(ctx);
}

/* ---- the new daemon: taking ---- */

static int write_frame(int fd, Spcoll__Frame *f, spk_err *err) {
  uint8_t *buf;
  size_t len;
  int rc = spf_encode(f, &buf, &len, err);
  if (rc < 0)
    return rc;
  for (size_t off = 0; off < len;) {
    ssize_t n = write(fd, buf + off, len - off);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      free(buf);
      return spk_err_set(err, SPK_ESYSTEM, "write to the running spcolld: "
                         "%s", strerror(errno));
    }
    off += (size_t)n;
  }
  free(buf);
  return SPK_OK;
}

/* The running daemon's answers: frames, and the descriptors that came
 * with their bytes, in order (a read may take several frames and their
 * descriptors at once). */
typedef struct {
  spf_reader r;
  int fds[4];
  int nfds;
} conn_in;

static void fds_keep(conn_in *in, struct msghdr *msg) {
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm != NULL;
       cm = CMSG_NXTHDR(msg, cm)) {
    if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
      continue;
    size_t n = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; i++) {
      int fd;
      memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
      if (in->nfds < 4)
        in->fds[in->nfds++] = fd;
      else
        close(fd);
    }
  }
}

static int read_frame(int fd, conn_in *in, Spcoll__Frame **f_p,
                      spk_err *err) {
  for (;;) {
    int rc = spf_reader_next(&in->r, f_p, err);
    if (rc != 0)
      return rc < 0 ? rc : SPK_OK;
    uint8_t *space;
    size_t avail;
    if ((rc = spf_reader_space(&in->r, 4096, &space, &avail, err)) < 0)
      return rc;
    union {
      char buf[CMSG_SPACE(4 * sizeof(int))];
      struct cmsghdr align;
    } cbuf;
    struct iovec iov = {space, avail};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = cbuf.buf,
                         .msg_controllen = sizeof(cbuf.buf)};
    ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return spk_err_set(err, SPK_ECONNECTION, "the running spcolld closed "
                         "the connection: %s",
                         n < 0 ? strerror(errno) : "end of file");
    fds_keep(in, &msg);
    spf_reader_commit(&in->r, (size_t)n);
  }
}

/* The next answer: a frame of kind `body`, or the daemon's Error as ours.
 * A Done takes the oldest descriptor received (*fd_p). */
static int answer(int fd, conn_in *in, int body, int *fd_p, spk_err *err) {
  Spcoll__Frame *f;
  int rc = read_frame(fd, in, &f, err);
  if (rc < 0)
    return rc;
  if (f->body_case == SPCOLL__FRAME__BODY_ERROR)
    rc = spk_err_set(err, spk_error_or(-(int)f->error->status, SPK_EPROTOCOL),
                     "the running spcolld refused: %s", f->error->message);
  else if ((int)f->body_case != body)
    rc = spk_err_set(err, SPK_EPROTOCOL, "the running spcolld answered %s",
                     spf_body_name(f->body_case));
  else if (body == SPCOLL__FRAME__BODY_DONE && in->nfds == 0)
    rc = spk_err_set(err, SPK_EPROTOCOL, "the running spcolld answered "
                     "without a socket");
  else if (body == SPCOLL__FRAME__BODY_DONE) {
    *fd_p = in->fds[0];
    memmove(in->fds, in->fds + 1, (size_t)--in->nfds * sizeof(int));
  }
  spcoll__frame__free_unpacked(f, NULL);
  return rc;
}

static int ask(int fd, int *fds, int n, spk_err *err) {
  Spcoll__Hello h = SPCOLL__HELLO__INIT;
  Spcoll__Control c = SPCOLL__CONTROL__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  h.protocol_version = SPF_PROTOCOL_VERSION;
  h.framework = "spcolld-upgrade";
  h.pid = getpid();
  f.id = 1, f.body_case = SPCOLL__FRAME__BODY_HELLO, f.hello = &h;
  int rc = write_frame(fd, &f, err);
  c.command = "upgrade";
  c.group = "";
  c.peers = n > 2;
  f.id = 2, f.body_case = SPCOLL__FRAME__BODY_CONTROL, f.control = &c;
  if (rc == SPK_OK)
    rc = write_frame(fd, &f, err);
  conn_in in = {.nfds = 0};
  spf_reader_init(&in.r);
  if (rc == SPK_OK)
    rc = answer(fd, &in, SPCOLL__FRAME__BODY_WELCOME, NULL, err);
  for (int i = 0; i < n && rc == SPK_OK; i++)
    rc = answer(fd, &in, SPCOLL__FRAME__BODY_DONE, &fds[i], err);
  while (in.nfds > 0)
    close(in.fds[--in.nfds]);
  spf_reader_free(&in.r);
  return rc;
}

int spd_upgrade_take(spd_ctx *ctx, spk_err *err) {
  const char *path = ctx->cfg.stats_socket_path;
  struct sockaddr_un sa;
  int *fds = ctx->taken, n = ctx->cfg.npeers > 0 ? 3 : 2;
  int fd = spd_unix_socket(path, &sa, err);
  if (fd < 0)
    return SPK_ESYSTEM;
  fds[0] = fds[1] = fds[2] = -1;
  int rc = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0
               ? ask(fd, fds, n, err)
               : spk_err_set(err, SPK_ECONNECTION, "--upgrade: connect(%s): "
                             "%s (is an spcolld running there?)", path,
                             strerror(errno));
  close(fd);
  if (rc < 0) {
    for (int i = 0; i < 3; i++)
      if (fds[i] >= 0)
        close(fds[i]), fds[i] = -1;
    return rc;
  }
  SPD_INFO(&ctx->log, "upgrade: took the sockets %s and %s over",
           ctx->cfg.socket_path, path);
  return SPK_OK;
}
