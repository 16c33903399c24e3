/* The daemon's lifecycle, the top of daemon/core (tests/layers.py rule
 * 11): the listening sockets (server.c), the watchdog's tick
 * (watchdog.c), operator commands and the drain (control.c), and the
 * stop (shutdown.c). The layers below reach the drain and the stop only
 * through spd_core_up (daemon.h). Loop thread only. */
#ifndef SPD_LIFECYCLE_H
#define SPD_LIFECYCLE_H

#include <sys/types.h>

#include "daemon.h"

/* A Unix stream socket (close-on-exec) and sa filled for path; -1 with
 * err set when socket() fails. path fits sun_path (the config checks). */
struct sockaddr_un;
int spd_unix_socket(const char *path, struct sockaddr_un *sa, spk_err *err);

/* Bind and listen on both sockets; close them (removing the files). With
 * --upgrade, listen on the running daemon's (spd_upgrade_take). */
int spd_server_listen(spd_ctx *ctx, spk_err *err);
void spd_server_close(spd_ctx *ctx);

/* Start/stop the stuck-op watchdog. */
int spd_watchdog_start(spd_ctx *ctx, spk_err *err);
void spd_watchdog_stop(spd_ctx *ctx);

/* Operator commands. */
int spd_abort_group(spd_ctx *ctx, const char *name, uid_t uid, spk_err *err);
/* A command of a client that is not an operator: counted, and logged with
 * its words escaped, a bounded number of times a minute. */
void spd_control_refused(spd_ctx *ctx, int pid, uid_t uid, gid_t gid,
                         const char *command, const char *group);
/* Tell the refused commands not logged, once their minute is over (the
 * watchdog's tick). */
void spd_control_tick(spd_ctx *ctx, uint64_t now);
/* Drain: no new groups or ops; stop once nothing is under way, or at the
 * drain deadline. */
void spd_drain(spd_ctx *ctx);
/* While draining: stop once no group has an op left. */
void spd_drain_check(spd_ctx *ctx);

/* Upgrade (upgrade.c). The running daemon: hand its listening sockets
 * (control, stats, and the peers' bootstrap when it has peers) to the
 * operator session s that asked (request id), then stop, its clients
 * moving to the new daemon. The new one: ask the daemon on the
 * configured sockets for them, into ctx->taken, before the peers start
 * (they listen on the one taken). */
struct spd_session;
void spd_upgrade_give(struct spd_session *s, uint64_t id, int peers);
int spd_upgrade_take(spd_ctx *ctx, spk_err *err);

/* Reload (reload.c): on SIGHUP, start the binary at the path this one
 * was started from (a package upgrade's new one) with this one's
 * arguments and --upgrade; it takes the sockets over. argv lives for the
 * process. */
int spd_reload_start(spd_ctx *ctx, int argc, char **argv, spk_err *err);
void spd_reload_stop(spd_ctx *ctx);
/* The same, asked by the daemon itself (spd_core_up.restart): why is
 * logged; a reload under way, a stop, or an unknown binary path leaves
 * this daemon serving, which the log says. */
void spd_reload_self(spd_ctx *ctx, const char *why);

/* Begin an orderly stop: no new clients, pending ops fail with "daemon
 * shutting down", running ops finish, then every handle closes. */
void spd_shutdown(spd_ctx *ctx);
/* Called when the last running op finished during a stop. */
void spd_shutdown_continue(spd_ctx *ctx);

#endif
