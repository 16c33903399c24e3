#include "sd.h"

#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <systemd/sd-daemon.h>

int spd_sd_control_fd(spd_ctx *ctx, int *fd_p, spk_err *err) {
  int n = sd_listen_fds(1);
  if (n < 0)
    return spk_err_set(err, SPK_ESYSTEM, "sd_listen_fds: %s", strerror(-n));
  if (n == 0) {
    *fd_p = -1;
    return SPK_OK;
  }
  if (n > 1)
    return spk_err_set(err, SPK_EINVAL, "socket activation passed %d sockets, "
                       "spcolld takes one (the control socket)", n);
  int fd = SD_LISTEN_FDS_START;
  if (sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) <= 0)
    return spk_err_set(err, SPK_EINVAL, "the activated fd %d is not a "
                       "listening Unix stream socket", fd);
  SPD_INFO(&ctx->log, "control socket passed by systemd (fd %d)", fd);
  *fd_p = fd;
  return SPK_OK;
}

/* MAINPID: a daemon started by a reload (reload.c) is the service's main
 * process from now on, not the one that started it. */
void spd_sd_ready(spd_ctx *ctx) {
  int rc = sd_notifyf(0, "READY=1\nMAINPID=%d\nSTATUS=serving on %s, %d "
                      "mover threads", (int)getpid(), ctx->cfg.socket_path,
                      ctx->cfg.workers);
  if (rc < 0)
    SPD_WARN(&ctx->log, "sd_notify(READY=1) failed: %s", strerror(-rc));
}

void spd_sd_stopping(spd_ctx *ctx) {
  int rc = sd_notify(0, "STOPPING=1\nSTATUS=shutting down");
  if (rc < 0)
    SPD_WARN(&ctx->log, "sd_notify(STOPPING=1) failed: %s", strerror(-rc));
}
