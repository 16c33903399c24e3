/* systemd integration through libsystemd: readiness and stop
 * notifications, and a control socket passed by socket activation. */
#ifndef SPD_SD_H
#define SPD_SD_H

#include "daemon.h"

/* The activated control socket's fd, or -1 when not socket-activated.
 * SPK_EINVAL when systemd passed something else than one listening Unix
 * stream socket. */
int spd_sd_control_fd(spd_ctx *ctx, int *fd_p, spk_err *err);

/* READY=1 with a STATUS line; STOPPING=1. No-ops outside systemd. */
void spd_sd_ready(spd_ctx *ctx);
void spd_sd_stopping(spd_ctx *ctx);

#endif
