/* The daemon's settings: one struct, one function that sets every default,
 * one parser for the command line, one dump of the effective values. */
#ifndef SPD_CONFIG_H
#define SPD_CONFIG_H

#include <limits.h>
#include <stddef.h>
#include <stdio.h>

#include "fast_tune.h"
#include "log.h"
#include "status.h"
#include "types.h"

#define SPD_MAX_NODES 64
/* Largest fast-path threshold: a segment stages twice this per rank. */
#define SPD_FAST_BYTES_MAX (64LL << 20)

/* A peer daemon's UCX address. */
typedef struct {
  char host[64];
  int port;
} spd_hostport;

/* The numeric limits and deadlines, one row each: field, flag, default
 * (0: derived at start from the machine, see spd_config_defaults), lowest
 * and highest value, help. The config file's key is the field name. The
 * fast path's tunables are rows too (kernels/fast_tune.h): the daemon
 * hands them to the ranks in each segment's header. */
#define SPD_LIMITS(X)                                                        \
  X(op_timeout, "op-timeout", 1800, 1, 604800,                               \
    "seconds an op may wait for its last rank; then it fails on every "      \
    "rank and the group breaks")                                             \
  X(drain_timeout, "drain-timeout", 300, 1, 604800,                          \
    "seconds a drain waits for ops in flight; then they fail")               \
  X(hello_timeout, "hello-timeout", 10, 1, 3600,                             \
    "seconds a new connection has to send its hello")                        \
  X(frame_timeout, "frame-timeout", 10, 1, 3600,                             \
    "seconds a started frame has to arrive whole")                           \
  X(max_connections, "max-connections", 0, 1, 1 << 24,                      \
    "clients at once (default: the fd limit less 256 kept for the daemon)")  \
  X(uid_max_connections, "uid-max-connections", 256, 1, 1 << 24,            \
    "clients of one uid at once")                                            \
  X(max_fds_in_flight, "max-fds-in-flight", 128, 1, 1 << 20,                \
    "file descriptors clients sent that the daemon has not yet mapped and "  \
    "closed, all clients (from the daemon's own reserve of 256)")           \
  X(uid_max_fds_in_flight, "uid-max-fds-in-flight", 96, 1, 1 << 20,         \
    "file descriptors of one uid in flight")                                 \
  X(max_stats_connections, "max-stats-connections", 64, 1, 128,              \
    "stats-socket clients at once, taken from the daemon's own reserve so "  \
    "operators get in during a flood of clients")                            \
  X(max_buffers, "max-buffers", 0, 1, 1 << 24,                              \
    "buffers mapped at once (default: half of vm.max_map_count)")           \
  X(uid_max_buffers, "uid-max-buffers", 0, 1, 1 << 24,                      \
    "buffers of one uid (default: a quarter of max_buffers)")               \
  X(max_bytes, "max-bytes", 0, 1, LLONG_MAX,                                 \
    "host bytes registered at once (default: physical memory)")             \
  X(uid_max_bytes, "uid-max-bytes", 0, 1, LLONG_MAX,                         \
    "host bytes one uid may register (default: physical memory)")           \
  X(uid_max_pending, "uid-max-pending", 16384, 1, 1 << 24,                   \
    "ops of one uid issued and not done")                                    \
  X(max_request_bytes, "max-request-bytes", 256LL << 20, 1 << 20, LLONG_MAX, \
    "daemon memory held by pending op requests, all clients")               \
  X(uid_max_request_bytes, "uid-max-request-bytes", 64LL << 20, 1 << 16,     \
    LLONG_MAX, "daemon memory held by one uid's pending op requests")        \
  X(client_max_queued, "client-max-queued", 16LL << 20, 1 << 20, LLONG_MAX,  \
    "reply bytes queued to a client that does not read, before it is "       \
    "dropped")                                                               \
  X(max_queued, "max-queued", 512LL << 20, 1 << 20, LLONG_MAX,               \
    "reply bytes queued to all clients; past it, clients with over 1 MiB "   \
    "queued are dropped")                                                    \
  X(metrics_groups, "metrics-groups", 0, 0, 1,                               \
    "1: /metrics shows per-group series too (names of every uid's groups)") \
  X(fast_bytes, "fast-bytes", 1048576, 0, SPD_FAST_BYTES_MAX,                \
    "ops whose input and output are at most this many bytes per rank run "  \
    "through the group's shared segment, without the daemon (groups of "    \
    "this node only; 0: never)")                                            \
  X(fast_map_bytes, "fast-map-bytes", 8388608, 0, LLONG_MAX,                \
    "ops of at most this many bytes per rank, even above fast_bytes, run "   \
    "through the segment reading the callers' buffers in place where the "  \
    "ranks may take each other's fds (same uid; 0: never in place)")        \
  X(stream_bytes, "stream-bytes", 0, 1, LLONG_MAX,                         \
    "ops whose inputs and outputs, this node's ranks', come to at least "   \
    "this many bytes copy with non-temporal stores, past the cache "        \
    "(default: the last-level cache's size from sysfs, at most 64 MiB; "   \
    "else 32 MiB)")                                                         \
  X(mid_spin_us, "mid-spin-us", 0, 0, 10000,                                \
    "a rank of a group with a shared segment polls it this long for the "   \
    "answer to a daemon-path op before it sleeps in recv (0: never; no "    \
    "gain measured where ranks and daemon share the CPUs)")                 \
  X(nccl_timeout, "nccl-timeout", 300, 1, 604800,                            \
    "seconds an NCCL op may go without finishing; then its communicators "  \
    "are aborted and the ops on them fail")                                  \
  X(xnode_staging_bytes, "xnode-staging-bytes", 256LL << 20, 1 << 20,       \
    LLONG_MAX, "pinned host memory per GPU staging device tensors of "      \
    "groups across nodes (UCX here moves host memory); an op that would "   \
    "need more than is free fails on every rank")                           \
  X(xnode_direct, "xnode-direct", 0, 0, 2,                                   \
    "device tensors across nodes: 0 sends from and receives into device "   \
    "memory when this node's UCX moves CUDA memory (said at start), else "  \
    "stages them through pinned host memory; 1 always stages; 2 always "    \
    "direct (a UCX whose report is wrong; the tests, on the simulator)")   \
  SPK_FAST_TUNES(X)

/* Operator commands (drain, abort): root, the daemon's own uid, and these. */
#define SPD_MAX_OPERATORS 16

typedef struct {
  char socket_path[108];   /* sun_path holds 108 bytes */
  char stats_socket_path[108]; /* "" until defaulted beside socket_path */
  unsigned socket_mode;    /* permission bits of the control socket */
  int workers;             /* host mover threads */
  char mover[16];          /* engine preferred when it can run an op
                            * (engine.h's names), or "auto" */
  int stuck_seconds;       /* a pending op older than this is reported */
  int join_timeout;        /* seconds a group may wait for its ranks */
  int metrics_port;        /* HTTP /metrics on 127.0.0.1; 0: off */
  int max_world;           /* largest group size accepted */
  char socket_group[64];   /* group owning the sockets; "" keeps ours */
  char stats_socket_group[64]; /* for the stats socket; "": socket_group */
  int client_max_frame_rate;   /* frames per second, 1 s of burst */
  unsigned allow_uid[16];  /* uids that may use any user's groups */
  int nallow_uid;
  int client_max_groups;   /* per client: group memberships */
  int client_max_buffers;  /* per client: registered buffers */
  long long client_max_bytes; /* per client: registered bytes */
  int client_max_pending;  /* per client: ops issued and not yet done */
  spd_log_level log_level;
  spd_hostport peers[SPD_MAX_NODES]; /* every node's daemon, by node index */
  int npeers;              /* 0: this daemon serves one node alone */
  int node_index;          /* this node's entry in peers */
  spd_hostport ucx_listen; /* where the peers' bootstrap listens (TCP);
                            * port 0: peers[node_index] */
  char peer_key_file[4096]; /* the node key (peer_auth.h); "": the systemd
                             * credential peer-key, if any */
  int peer_timeout;        /* seconds of silence before a peer is lost */
  unsigned operator_uid[SPD_MAX_OPERATORS];
  int noperator_uid;
  unsigned operator_gid[SPD_MAX_OPERATORS];
  int noperator_gid;
  long long fast_op_bytes[SPK_OP_COUNT]; /* per op; -1: fast_bytes */
  int upgrade;             /* take the sockets over from a running spcolld
                            * (upgrade.c); not a setting of the file */
#define SPD_LIMIT_FIELD(field, flag, def, lo, hi, help) long long field;
  SPD_LIMITS(SPD_LIMIT_FIELD)
#undef SPD_LIMIT_FIELD
} spd_config;

/* The limits' rows (config_limits.c): for the option parser, the config
 * file, --help and the dump. */
typedef struct {
  const char *field, *flag, *help;
  long long lo, hi;
  size_t offset;
} spd_limit_def;
#define SPD_MAX_LIMITS 48
extern const spd_limit_def spd_limit_defs[];
extern const int spd_nlimits;
/* Set limit i from text; SPK_EINVAL naming the flag and the range. */
int spd_limit_apply(spd_config *cfg, int i, const char *arg, spk_err *err);

/* --fast-op-bytes OP=BYTES,... (config_fast.c); "-" clears. */
int spd_config_fast_ops(spd_config *cfg, const char *arg, spk_err *err);
/* The fast-path threshold of op kind (its own, else fast_bytes). */
long long spd_config_fast_limit(const spd_config *cfg, int kind);
/* The staging a segment needs: the largest threshold. */
long long spd_config_fast_stage(const spd_config *cfg);
void spd_config_fast_dump(const spd_config *cfg, FILE *out);
/* Defaults, the derived ones from the machine (fd limit, vm.max_map_count,
 * physical memory). */
void spd_limits_defaults(spd_config *cfg);
void spd_limits_usage(FILE *out);
void spd_limits_dump(const spd_config *cfg, FILE *out);

/* "host:port" into hp; SPK_EINVAL naming flag and value. */
int spd_parse_hostport(const char *flag, const char *s, spd_hostport *hp,
                       spk_err *err);
/* A comma-separated "host:port" list into cfg->peers. */
int spd_parse_peers(spd_config *cfg, const char *s, spk_err *err);

/* Every default: socket under /run/spcolld for root, else under
 * $XDG_RUNTIME_DIR; one mover thread per online core. */
void spd_config_defaults(spd_config *cfg);

/* Apply command-line flags over cfg. Returns SPK_OK, 1 when the caller
 * should exit 0 (--help, --version printed), or SPK_EINVAL naming the flag
 * and value. */
int spd_config_parse_args(spd_config *cfg, int argc, char **argv,
                          spk_err *err);

#define SPD_DEFAULT_CONFIG "/etc/spcolld/spcolld.conf"

/* Apply a settings file ("key = value" lines, keys named as the flags with
 * '_' for '-'). A missing file is fine unless must_exist; an unknown key or
 * a bad value is SPK_EINVAL naming the file, line and key. */
int spd_config_load(spd_config *cfg, const char *path, int must_exist,
                    spk_err *err);

/* Fill the settings that default from others (the stats socket path). */
int spd_config_finish(spd_config *cfg, spk_err *err);

void spd_config_dump(const spd_config *cfg, FILE *out);

#endif
