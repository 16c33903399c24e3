/* The daemon's context: everything mutable the daemon owns hangs from one
 * spd_ctx. Touched only on the loop thread, except the mover's own queue. */
#ifndef SPD_DAEMON_H
#define SPD_DAEMON_H

#include <stdint.h>
#include <sys/queue.h>
#include <uv.h>

#include "config.h"
#include "log.h"

#define SPD_VERSION "0.1.0"

struct spd_session;
struct spd_group;
struct spd_mover;

/* Counters, declared once. */
#define SPD_COUNTERS(X)      \
  X(clients_accepted)        \
  X(clients_rejected)        \
  X(protocol_errors)         \
  X(ops_completed)           \
  X(ops_failed)              \
  X(bytes_moved)             \
  X(buffers_registered)

typedef struct {
#define SPD_COUNTER_FIELD(name) uint64_t name;
  SPD_COUNTERS(SPD_COUNTER_FIELD)
#undef SPD_COUNTER_FIELD
} spd_counters;

typedef struct spd_ctx {
  uv_loop_t *loop;
  spd_config cfg;
  spd_logger log;
  uv_pipe_t listener;
  int listening;
  int bound;                 /* we created the socket file */
  uv_signal_t sig_term, sig_int;
  TAILQ_HEAD(, spd_session) sessions;
  TAILQ_HEAD(, spd_group) groups;
  struct spd_mover *mover;
  uint64_t next_id;          /* clients, groups handles, buffers */
  int running_ops;           /* ops handed to the mover, not yet done */
  int stopping;
  spd_counters stats;
} spd_ctx;

static inline uint64_t spd_next_id(spd_ctx *ctx) {
  return ++ctx->next_id;
}

/* Begin an orderly stop: no new clients, pending ops fail with "daemon
 * shutting down", running ops finish, then every handle closes. */
void spd_shutdown(spd_ctx *ctx);
/* Called when the last running op finished during a stop. */
void spd_shutdown_continue(spd_ctx *ctx);

int spd_server_listen(spd_ctx *ctx, spk_err *err);
void spd_server_close(spd_ctx *ctx);

#endif
