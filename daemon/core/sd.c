#include "sd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <systemd/sd-daemon.h>

/* fd's place: 1 for the stats socket (named "stats"), 0 for the control
 * socket (the socket unit's, or one named "control"). */
static int fd_kind(char **names, int i) {
  return names != NULL && names[i] != NULL && strcmp(names[i], "stats") == 0;
}

int spd_sd_fds(spd_ctx *ctx, int fds[2], spk_err *err) {
  char **names = NULL;
  fds[0] = fds[1] = -1;
  int n = sd_listen_fds_with_names(1, &names);
  if (n < 0)
    return spk_err_set(err, SPK_ESYSTEM, "sd_listen_fds_with_names: %s",
                       strerror(-n));
  int rc = SPK_OK;
  for (int i = 0; i < n; i++) {
    int fd = SD_LISTEN_FDS_START + i, k = fd_kind(names, i);
    if (rc == SPK_OK && sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) <= 0)
      rc = spk_err_set(err, SPK_EINVAL, "the fd %d systemd passed (%s) is "
                       "not a listening Unix stream socket", fd,
                       names && names[i] ? names[i] : "unnamed");
    if (rc == SPK_OK && fds[k] < 0) {
      fds[k] = fd;
      SPD_INFO(&ctx->log, "%s socket passed by systemd (fd %d, %s)",
               k ? "stats" : "control", fd,
               names && names[i] ? names[i] : "unnamed");
    } else {
      close(fd); /* the same socket again (the store's and the unit's) */
    }
  }
  for (int i = 0; names != NULL && i < n; i++)
    free(names[i]);
  free(names);
  if (rc < 0)
    for (int k = 0; k < 2; k++)
      if (fds[k] >= 0)
        close(fds[k]), fds[k] = -1;
  return rc;
}

int spd_sd_store(spd_ctx *ctx, int fd, const char *name) {
  char msg[64];
  snprintf(msg, sizeof(msg), "FDSTORE=1\nFDNAME=%s", name);
  int rc = sd_pid_notify_with_fds(0, 0, msg, &fd, 1);
  if (rc < 0)
    SPD_WARN(&ctx->log, "sd_pid_notify_with_fds(FDSTORE=1, %s): %s", name,
             strerror(-rc));
  return rc > 0;
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
