/* The daemon's context: everything mutable the daemon owns hangs from one
 * spd_ctx. Touched only on the loop thread, except the mover's own queue. */
#ifndef SPD_DAEMON_H
#define SPD_DAEMON_H

#include <stdint.h>
#include <sys/queue.h>
#include <time.h>
#include <uv.h>

#include "config.h"
#include "log.h"
#include "op_stats.h"
#include "quota.h"

#define SPD_VERSION "0.1.0"

struct spd_session;
struct spd_group;
struct spd_op;
struct spd_gpu;
struct spd_peers;

/* Each engine's counters. The context holds room for SPD_MAX_ENGINES of
 * them, so that it depends on no layer: the list of engines is
 * SPD_ENGINES (daemon/engine/engine.h), which checks that it fits. */
#define SPD_MAX_ENGINES 16
typedef struct {
  uint64_t ops, bytes;
} spd_engine_counters;

/* Counters, declared once: field, Prometheus metric, help text. Each
 * engine's two follow them, from SPD_ENGINES (engine.h). */
#define SPD_COUNTERS(X)                                                      \
  X(clients_accepted, spcoll_clients_accepted_total,                         \
    "Client connections accepted.")                                          \
  X(clients_rejected, spcoll_clients_rejected_total,                         \
    "Client connections refused at accept.")                                 \
  X(clients_dropped, spcoll_clients_dropped_total,                           \
    "Clients closed for not reading replies or missing a deadline.")         \
  X(plans_off_loop, spcoll_plans_off_loop_total,                             \
    "Plans of large groups built on the thread pool, not the loop.")        \
  X(ops_timed_out, spcoll_ops_timed_out_total,                               \
    "Ops failed because a rank did not issue them in time.")                 \
  X(protocol_errors, spcoll_protocol_errors_total,                           \
    "Connections closed for a protocol error.")                              \
  X(control_refused, spcoll_control_refused_total,                           \
    "Operator commands refused to a client that is not an operator.")       \
  X(ops_completed, spcoll_daemon_ops_total,                                  \
    "Ops completed since start, every group.")                               \
  X(ops_failed, spcoll_daemon_op_errors_total,                               \
    "Ops failed since start, every group.")                                  \
  X(bytes_moved, spcoll_daemon_bytes_total,                                  \
    "Bytes written by completed ops since start.")                           \
  X(buffers_registered, spcoll_buffers_registered_total,                     \
    "Buffers registered since start.")                                       \
  X(buffers_ipc, spcoll_device_buffers_ipc_total,                            \
    "Device buffers registered through legacy CUDA IPC handles.")            \
  X(buffers_vmm, spcoll_device_buffers_vmm_total,                            \
    "Device buffers registered as cuMem allocations sent as file "           \
    "descriptors (torch's expandable segments, other PID namespaces).")      \
  X(peer_streams_sent, spcoll_peer_streams_sent_total,                       \
    "Op data streams (UCX messages) sent to other nodes.")                   \
  X(peer_refused, spcoll_peer_refused_total,                                 \
    "Peer messages refused: a number out of range or not the sender's, "     \
    "an op past its window, a quota spent.")                                 \
  X(peer_unauthenticated, spcoll_peer_unauthenticated_total,                 \
    "Peer bootstrap connections and control messages refused before "        \
    "authentication: no or a wrong proof of the node key, a wrong MAC, a "   \
    "replay, garbage.")                                                      \
  X(gpu_order_flags, spcoll_gpu_order_flags_total,                           \
    "Ranks of device ops ordered with their client's stream through stream " \
    "flags (stream memory operations).")                                     \
  X(ops_queued_behind, spcoll_ops_queued_behind_total,                       \
    "Ops handed to their engine while an earlier op of their group still "  \
    "ran, ordered behind it on the GPU (device ops ordered by stream "       \
    "flags).")                                                               \
  X(gpu_contexts_lost, spcoll_gpu_contexts_lost_total,                       \
    "Device faults that ended this daemon's CUDA context (it then starts "   \
    "a new spcolld, which takes its clients over).")                        \
  X(ring_frames, spcoll_ring_frames_total,                                   \
    "Op frames taken from clients' submission rings, not their sockets.")   \
  X(ring_kicks, spcoll_ring_kicks_total,                                     \
    "Kicks: a client woke the daemon for its submission ring.")             \
  X(gpu_sym_ops, spcoll_gpu_symmetric_ops_total,                            \
    "Device ops clients ran on symmetric buffers on their own streams, "     \
    "without the daemon, as the clients report them.")                       \
  X(gpu_sym_bytes, spcoll_gpu_symmetric_bytes_total,                         \
    "Bytes those ops copied, as the clients report them.")                   \
  X(gpu_sym_daemon_ops, spcoll_gpu_symmetric_daemon_ops_total,               \
    "Ops on symmetric buffers that the rule sent through the daemon, as "    \
    "the clients report them.")                                              \
  X(gpu_order_events, spcoll_gpu_order_events_total,                         \
    "Ranks of device ops ordered with their client's stream through "        \
    "interprocess events (the client has no stream memory operations or "    \
    "asked for events).")

typedef struct {
#define SPD_COUNTER_FIELD(name, metric, help) uint64_t name;
  SPD_COUNTERS(SPD_COUNTER_FIELD)
#undef SPD_COUNTER_FIELD
} spd_counters;

/* A listening Unix socket: the control socket or the stats socket. */
typedef struct spd_listener {
  uv_pipe_t pipe;
  struct spd_ctx *ctx;
  const char *path;
  int listening;
  int bound;                 /* we created the socket file */
  int stats_only;            /* its clients may only ask for stats */
} spd_listener;

struct spd_ctx;

/* What the layers above core do for it, set by main.c at start: core
 * calls up only through these (as libuv's callbacks), never by name, so
 * daemon/stats depends on daemon/core and not the other way round. NULL:
 * not there (a unit suite's context). */
typedef struct spd_hooks {
  /* The Stats request: malloc'd text in `format` for viewer; NULL for an
   * unknown format or out of memory (stats.h: spd_stats_render). */
  char *(*stats_render)(struct spd_ctx *ctx, const char *format,
                        uid_t viewer);
  /* Shutdown: stop serving /metrics (metrics_http.c). */
  void (*metrics_stop)(struct spd_ctx *ctx);
} spd_hooks;

/* Calls up daemon/core's own layers (tests/layers.py rule 11), set by
 * main.c at start: the group and op layers tell the daemon's lifecycle
 * (core/lifecycle.h) that work ended, the op layer hands a group
 * split whose ranks all arrived to the group layer, and the GPU layer
 * asks for a new daemon when its CUDA context is lost. NULL: not there (a
 * unit suite's context). */
typedef struct spd_core_up {
  /* Draining: stop once nothing is under way (spd_drain_check). */
  void (*drain_check)(struct spd_ctx *ctx);
  /* Stopping: the last running op ended (spd_shutdown_continue). */
  void (*stop_continue)(struct spd_ctx *ctx);
  /* Run a group split every rank asked for (spd_group_split_run). */
  void (*split_run)(struct spd_op *op);
  /* This process can no longer serve (its CUDA context is lost, gpu/):
   * start a new spcolld that takes the sockets over (spd_reload_self);
   * why names the cause. */
  void (*restart)(struct spd_ctx *ctx, const char *why);
} spd_core_up;

typedef struct spd_ctx {
  uv_loop_t *loop;
  spd_hooks hooks;
  spd_core_up up;
  spd_config cfg;
  spd_logger log;
  spd_listener control, stats_listener;
  uv_signal_t sig_term, sig_int;
  /* systemctl reload (reload.c): SIGHUP starts this binary again, from
   * the path it was started from, with these arguments and --upgrade. */
  uv_signal_t sig_hup;
  uv_process_t reloader;     /* the new daemon, while this one runs */
  int reload_started;
  char exe[4096];
  int argc;
  char **argv;
  uv_timer_t watchdog;       /* looks for stuck ops once a second */
  uv_timer_t grace;          /* bounds the last flush at shutdown */
  uv_timer_t stop_limit;     /* bounds a stop's wait for running ops */
  uv_tcp_t metrics;          /* optional HTTP /metrics on 127.0.0.1 */
  TAILQ_HEAD(, spd_session) sessions;
  TAILQ_HEAD(, spd_group) groups;
  struct spd_gpu *gpu;       /* GPU movers (gpu.h); NULL until a device buffer */
  struct spd_peers *peers;   /* peer daemons over UCX; NULL: one node */
  uint64_t next_id;          /* clients, groups handles, buffers */
  int running_ops;           /* ops handed to the mover, not yet done */
  int stopping;
  int draining;              /* no new groups or ops; exit when idle */
  int upgrading;             /* handed its sockets to a new spcolld: its
                              * clients move there (upgrade.c) */
  int taken[3];              /* --upgrade: the sockets taken over (control,
                              * stats, peers' bootstrap), -1 once used or
                              * when none */
  spd_counters stats;
  spd_engine_counters engine_stats[SPD_MAX_ENGINES]; /* by spd_engine_kind
                                    * (engine.h), the first
                                    * SPD_ENGINE_COUNT used */
  /* Each engine row's own state, by spd_engine_kind: set by its start,
   * dropped by its fini (the host row's mover, the serial row's queue).
   * The GPU and UCX rows share layers with the rest of the daemon (device
   * buffers' IPC imports, the peer plane): gpu and peers above. */
  void *engine_state[SPD_MAX_ENGINES];
  spd_op_stats op_stats[SPD_OP_SLOTS]; /* per op type, every group */
  uint64_t started_ns;              /* for uptime */
  uid_t stats_viewer;               /* uid the stats are rendered for */
  uid_t self_uid;                   /* the daemon's own uid: an operator */
  spd_quotas quotas;                /* what each uid holds (quota.h) */
  uint64_t queued_bytes;            /* replies queued to every client */
  uv_idle_t reaper;                 /* closes doomed sessions */
  /* Submission rings (session_ring.c): the sessions that have one. A
   * check after each poll disarms them; a prepare before the next takes
   * their records and arms them; the idle keeps the loop from sleeping
   * while a ring holds records the prepare left. Started while a ring
   * exists. */
  TAILQ_HEAD(, spd_session) rings;
  uv_prepare_t ring_prepare;
  uv_check_t ring_check;
  uv_idle_t ring_idle;
  int rings_running;
  int metrics_conns;                /* open HTTP /metrics connections */
  int ndoomed;
  uint64_t refused_log_ns;          /* last "connection refused" log line */
  spd_log_limit control_refused_log; /* lines of refused operator commands */
  spd_log_limit peer_refused_log;   /* lines of refused peer messages */
  spd_log_limit peer_auth_log;      /* lines of unauthenticated ones */
  uint64_t drain_started_ns;        /* for the drain deadline */
  uint64_t drain_quiet_ns;          /* since when nothing is under way */
} spd_ctx;

static inline uint64_t spd_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t spd_next_id(spd_ctx *ctx) {
  return ++ctx->next_id;
}

/* The calls up of spd_core_up, where set. */
static inline void spd_up_drain_check(spd_ctx *ctx) {
  if (ctx->up.drain_check != NULL)
    ctx->up.drain_check(ctx);
}
static inline void spd_up_stop_continue(spd_ctx *ctx) {
  if (ctx->up.stop_continue != NULL)
    ctx->up.stop_continue(ctx);
}
static inline void spd_up_restart(spd_ctx *ctx, const char *why) {
  if (ctx->up.restart != NULL)
    ctx->up.restart(ctx, why);
}

#endif
