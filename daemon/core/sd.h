/* systemd integration through libsystemd: readiness and stop
 * notifications, sockets passed by socket activation or kept in the
 * service's fd store. */
#ifndef SPD_SD_H
#define SPD_SD_H

#include "daemon.h"

/* The listening sockets systemd passed: the socket unit's or a stored
 * one named "control" as fds[0], one stored as "stats" as fds[1]; -1 for
 * one not passed. A second fd of the same kind (the store's copy of the
 * unit's socket) is closed. SPK_EINVAL when an fd is not a listening
 * Unix stream socket. */
int spd_sd_fds(spd_ctx *ctx, int fds[2], spk_err *err);
/* Keep listening socket fd in systemd's fd store under name ("control",
 * "stats"), so that a restart of the service gets it back (and clients
 * find the same socket): 1 when it went to systemd (which keeps it when
 * the unit has FileDescriptorStoreMax), 0 outside systemd. */
int spd_sd_store(spd_ctx *ctx, int fd, const char *name);

/* READY=1 with a STATUS line; STOPPING=1. No-ops outside systemd. */
void spd_sd_ready(spd_ctx *ctx);
void spd_sd_stopping(spd_ctx *ctx);

#endif
