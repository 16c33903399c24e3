/* The control socket: bind (clearing a stale file), listen, accept. */
#include <errno.h>
#include <grp.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "lifecycle.h"
#include "daemon.h"
#include "sd.h"
#include "session.h"

static void on_connection(uv_stream_t *server, int status) {
  spd_listener *l = server->data;
  if (status < 0) {
    SPD_ERROR(&l->ctx->log, "accept on %s failed: %s", l->path,
              uv_strerror(status));
    return;
  }
  spd_session_accept(l->ctx, server, l->stats_only);
}

int spd_unix_socket(const char *path, struct sockaddr_un *sa, spk_err *err) {
  *sa = (struct sockaddr_un){.sun_family = AF_UNIX};
  snprintf(sa->sun_path, sizeof(sa->sun_path), "%s", path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    spk_err_set(err, SPK_ESYSTEM, "socket(AF_UNIX) for %s: %s", path,
                strerror(errno));
  return fd;
}

/* A socket file left by a daemon that died is stale when nobody answers on
 * it; one that answers belongs to a live daemon and must not be taken. */
static int clear_stale_socket(const char *path, spk_err *err) {
  struct stat st;
  if (lstat(path, &st) < 0)
    return errno == ENOENT ? SPK_OK
                           : spk_err_set(err, SPK_ESYSTEM, "lstat(%s): %s",
                                         path, strerror(errno));
  if (!S_ISSOCK(st.st_mode))
    return spk_err_set(err, SPK_EINVAL, "%s exists and is not a socket", path);
  struct sockaddr_un sa;
  int fd = spd_unix_socket(path, &sa, err);
  if (fd < 0)
    return SPK_ESYSTEM;
  int live = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
  close(fd);
  if (live)
    return spk_err_set(err, SPK_ECONFLICT,
                       "another spcolld is listening on %s", path);
  if (unlink(path) < 0)
    return spk_err_set(err, SPK_ESYSTEM, "unlink(stale socket %s): %s", path,
                       strerror(errno));
  return SPK_OK;
}

static int ensure_parent_dir(const char *path, spk_err *err) {
  char dir[sizeof(((struct sockaddr_un *)0)->sun_path)];
  snprintf(dir, sizeof(dir), "%s", path);
  char *slash = strrchr(dir, '/');
  if (slash == NULL || slash == dir)
    return SPK_OK;
  *slash = '\0';
  if (mkdir(dir, 0755) < 0 && errno != EEXIST)
    return spk_err_set(err, SPK_ESYSTEM, "mkdir(%s): %s", dir,
                       strerror(errno));
  return SPK_OK;
}

/* Hand the socket to the configured group, so its members may connect. */
static int socket_chgrp(spd_ctx *ctx, const char *path, int stats,
                        spk_err *err) {
  const char *name = stats && ctx->cfg.stats_socket_group[0]
                         ? ctx->cfg.stats_socket_group
                         : ctx->cfg.socket_group;
  if (name[0] == '\0')
    return SPK_OK;
  struct group gr, *found = NULL;
  char buf[4096];
  int rc = getgrnam_r(name, &gr, buf, sizeof(buf), &found);
  if (found == NULL)
    return spk_err_set(err, SPK_EINVAL, "socket_group: no group '%s'%s%s",
                       name, rc ? ": " : "", rc ? strerror(rc) : "");
  if (chown(path, (uid_t)-1, gr.gr_gid) < 0)
    return spk_err_set(err, SPK_ESYSTEM, "chown(%s, group %s): %s", path,
                       name, strerror(errno));
  return SPK_OK;
}

/* A socket bound to path, by us rather than by libuv: libuv removes the
 * file of a pipe it bound when the handle closes, and after an upgrade
 * (upgrade.c) the file is the new daemon's. Whether it is removed is
 * ours to say (l->bound). */
static int socket_bind(const char *path, int *fd_p, spk_err *err) {
  struct sockaddr_un sa;
  int fd = spd_unix_socket(path, &sa, err);
  if (fd < 0)
    return SPK_ESYSTEM;
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
    int saved = errno;
    close(fd);
    return spk_err_set(err, SPK_ESYSTEM, "bind(%s): %s", path,
                       strerror(saved));
  }
  *fd_p = fd;
  return SPK_OK;
}

/* A listening socket's descriptor: one systemd created and passed (its
 * file is systemd's, not removed at exit), one the running daemon handed
 * over (upgrade.c), or our own (socket_bind). */
static int listener_adopt(spd_ctx *ctx, spd_listener *l, int fd,
                          spk_err *err) {
  int rc = uv_pipe_init(ctx->loop, &l->pipe, 0);
  if (rc < 0)
    return spk_err_set(err, SPK_ESYSTEM, "uv_pipe_init: %s", uv_strerror(rc));
  l->pipe.data = l;
  l->listening = 1;
  if ((rc = uv_pipe_open(&l->pipe, fd)) < 0)
    return spk_err_set(err, SPK_ESYSTEM, "uv_pipe_open(fd %d): %s", fd,
                       uv_strerror(rc));
  if ((rc = uv_listen((uv_stream_t *)&l->pipe, 128, on_connection)) < 0)
    return spk_err_set(err, SPK_ESYSTEM, "listen(fd %d): %s", fd,
                       uv_strerror(rc));
  return SPK_OK;
}

/* fd: the socket systemd passed, or -1 (bound here). */
static int listener_open(spd_ctx *ctx, spd_listener *l, const char *path,
                         int stats_only, int fd, spk_err *err) {
  l->ctx = ctx;
  l->path = path;
  l->stats_only = stats_only;
  if (fd >= 0)
    return listener_adopt(ctx, l, fd, err);
  int rc = ensure_parent_dir(path, err);
  if (rc == SPK_OK)
    rc = clear_stale_socket(path, err);
  if (rc == SPK_OK)
    rc = socket_bind(path, &fd, err);
  if (rc < 0)
    return rc;
  l->bound = 1; /* from here on the socket file is ours to remove */
  if (chmod(path, ctx->cfg.socket_mode) < 0) {
    close(fd);
    return spk_err_set(err, SPK_ESYSTEM, "chmod(%s, %04o): %s", path,
                       ctx->cfg.socket_mode, strerror(errno));
  }
  if ((rc = socket_chgrp(ctx, path, stats_only, err)) < 0) {
    close(fd);
    return rc;
  }
  if ((rc = listener_adopt(ctx, l, fd, err)) < 0)
    return rc;
  SPD_INFO(&ctx->log, "listening on %s (%s, mode %04o)", path,
           stats_only ? "stats" : "control", ctx->cfg.socket_mode);
  return SPK_OK;
}

/* The running daemon's sockets, taken over (spd_upgrade_take, at start):
 * their files are ours now. */
static int listen_taken(spd_ctx *ctx, spk_err *err) {
  int *fds = ctx->taken, rc = SPK_OK;
  spd_listener *ls[2] = {&ctx->control, &ctx->stats_listener};
  const char *paths[2] = {ctx->cfg.socket_path, ctx->cfg.stats_socket_path};
  for (int i = 0; i < 2; i++) {
    ls[i]->ctx = ctx, ls[i]->path = paths[i], ls[i]->stats_only = i;
    if (rc == SPK_OK && (rc = listener_adopt(ctx, ls[i], fds[i], err)) == 0)
      ls[i]->bound = 1;
    else if (rc < 0 && !ls[i]->listening)
      close(fds[i]);
    fds[i] = -1;
  }
  return rc;
}

/* Under systemd, both sockets go to the service's fd store, so that a
 * restart (or a crash) gets them back: clients then find the very socket
 * they knew, and none is refused meanwhile. Its file is then systemd's
 * to keep: not removed at exit. */
static void listeners_store(spd_ctx *ctx) {
  spd_listener *ls[2] = {&ctx->control, &ctx->stats_listener};
  const char *names[2] = {"control", "stats"};
  for (int i = 0; i < 2; i++) {
    uv_os_fd_t fd;
    if (ls[i]->listening && uv_fileno((uv_handle_t *)&ls[i]->pipe, &fd) == 0 &&
        spd_sd_store(ctx, fd, names[i]))
      ls[i]->bound = 0;
  }
}

int spd_server_listen(spd_ctx *ctx, spk_err *err) {
  int rc, sd[2];
  if (ctx->cfg.upgrade) {
    rc = listen_taken(ctx, err);
  } else if ((rc = spd_sd_fds(ctx, sd, err)) == SPK_OK) {
    rc = listener_open(ctx, &ctx->control, ctx->cfg.socket_path, 0, sd[0],
                       err);
    if (rc == SPK_OK)
      rc = listener_open(ctx, &ctx->stats_listener,
                         ctx->cfg.stats_socket_path, 1, sd[1], err);
    else if (sd[1] >= 0)
      close(sd[1]);
  }
  if (rc == SPK_OK)
    listeners_store(ctx);
  return rc;
}

static void listener_close(spd_listener *l) {
  if (!l->listening)
    return;
  l->listening = 0;
  uv_close((uv_handle_t *)&l->pipe, NULL);
  if (l->bound && unlink(l->path) < 0 && errno != ENOENT)
    SPD_WARN(&l->ctx->log, "unlink(%s) failed: %m", l->path);
}

void spd_server_close(spd_ctx *ctx) {
  listener_close(&ctx->control);
  listener_close(&ctx->stats_listener);
}
