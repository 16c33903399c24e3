/* The daemon's settings: one struct, one function that sets every default,
 * one parser for the command line, one dump of the effective values. */
#ifndef SPD_CONFIG_H
#define SPD_CONFIG_H

#include <stdio.h>

#include "log.h"
#include "status.h"

#define SPD_MAX_NODES 64

/* A peer daemon's UCX address. */
typedef struct {
  char host[64];
  int port;
} spd_hostport;

typedef struct {
  char socket_path[108];   /* sun_path holds 108 bytes */
  char stats_socket_path[108]; /* "" until defaulted beside socket_path */
  unsigned socket_mode;    /* permission bits of the control socket */
  int workers;             /* host mover threads */
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
  spd_hostport ucx_listen; /* where to listen; port 0: peers[node_index] */
  int peer_timeout;        /* seconds of silence before a peer is lost */
} spd_config;

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
