/* Integration harness: a private spcolld on a temporary socket, rank
 * processes forked from the test, deterministic data and raw frames. */
#ifndef SPT_HARNESS_H
#define SPT_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "frame.h"
#include "spcoll.h"

typedef struct {
  pid_t pid;
  char dir[64];
  char socket[108];
  char log[128];
} spt_daemon;

/* Start $SPCOLLD (default build/bin/spcolld) with extra args (NULL-ended
 * list, may be NULL) and wait until its socket accepts. 0 on success. */
int spt_daemon_start(spt_daemon *d, const char *const *extra);
/* Start it again, in the same folder and on the same sockets, after it
 * was killed (d->pid 0); its log starts afresh. */
int spt_daemon_restart(spt_daemon *d, const char *const *extra);
/* SIGTERM, wait, remove the temp dir. Returns the daemon's exit status, or
 * -1 when it died from a signal (a sanitizer abort, a crash). */
int spt_daemon_stop(spt_daemon *d);
/* Number of open fds of the daemon (from /proc). */
int spt_daemon_fds(const spt_daemon *d);
/* A counter of the daemon's text stats ("name value" lines, read through
 * its stats socket); -1 when it cannot be read. */
long long spt_daemon_stat(const spt_daemon *d, const char *name);
/* Number of the daemon's memory mappings and its resident set in KiB
 * (from /proc), -1 when unreadable. */
int spt_daemon_maps(const spt_daemon *d);
long spt_daemon_rss_kb(const spt_daemon *d);
/* Run `spcollctl --socket <d's socket> args` (from $SPCOLLD's folder);
 * its exit status as system() gives it. */
int spt_ctl(const spt_daemon *d, const char *args);

/* Print the daemon log to stderr (for failing tests). */
void spt_daemon_dump_log(const spt_daemon *d);

/* Daemons peering over UCX on loopback tcp (UCX_TLS=tcp unless already
 * set), one per node, each on its own socket and a free port, sharing a
 * node key made for them (removed by spt_nodes_stop). */
#define SPT_MAX_NODES 16
typedef struct {
  int n;
  spt_daemon d[SPT_MAX_NODES];
  char peers[512];                /* the --peers list they share */
  char key[64];                   /* the --peer-key-file they share */
  const char *extra[16];          /* more flags for every node */
} spt_nodes;
int spt_nodes_start(spt_nodes *N, int n, const char *const *extra);
/* (Re)start node i with the same peers and port; spt_node_restart also
 * on the same sockets, in the same folder (after its daemon was killed),
 * as an operator restarting the service would. */
int spt_node_start(spt_nodes *N, int i);
int spt_node_restart(spt_nodes *N, int i);
/* Upgrade node i in place: a new daemon with its settings and --upgrade
 * takes its sockets over (the peers' bootstrap too); 0 once the old one
 * exited 0, N->d[i] then the new one. */
int spt_node_upgrade(spt_nodes *N, int i);
int spt_nodes_stop(spt_nodes *N);
/* The peer port of node i, from the --peers list. */
int spt_node_port(const spt_nodes *N, int i);

typedef int (*spt_rank_fn)(int rank, int world, void *arg);
/* Fork `world` processes running fn(rank); a rank that does not finish in
 * `guard_s` seconds is killed (a hang guard, not a timing check). Returns
 * the number of ranks that failed (nonzero exit, signal or hang). */
int spt_run_ranks(int world, spt_rank_fn fn, void *arg, int guard_s);

/* Wait for the processes pids[0..n), killing those still running after
 * guard_s (a hang guard, not a timing check): codes[i] is each one's exit
 * status, -1 for one killed or dead by a signal. Returns how many hung. */
int spt_reap(const pid_t *pids, int *codes, int n, int guard_s);

/* Deterministic test data: element i of (seed, rank) in any dtype.
 * Floats are multiples of 1/64 in [-32, 32) so sums are exact. */
void spt_fill(void *p, spc_dtype dt, size_t n, uint64_t seed, int rank);

/* Check a gathered output of shape oshape against the naive reference:
 * rank k's input (spt_fill(seed, k), size sizes[k] along dim d) must sit at
 * the sum of the sizes before it. 0 when equal; prints the first bad
 * element (as seen by `rank`) otherwise. */
int spt_check_gather(const void *out, spc_dtype dt, int ndim,
                     const int64_t *oshape, int d, const int64_t *sizes,
                     int world, uint64_t seed, int rank);

/* Connect with a check-style failure message on error. */
spc_client *spt_connect(const char *socket);

/* A join sent without waiting for it (so one process can hold several
 * ranks, or complete a group with a later blocking join), and the group
 * handle once the daemon answered it; both NULL on failure. */
spc_request *spt_join_send(spc_client *c, const char *name, int world,
                           int rank);
spc_group *spt_join_finish(spc_client *c, spc_request *req, int world,
                           int rank);

/* Raw protocol access for bad-input tests. */
int spt_raw_connect(const char *socket);
int spt_raw_send_bytes(int fd, const void *buf, size_t len);
int spt_raw_send(int fd, Spcoll__Frame *f);
/* One byte (`byte`: a frame's first, say) with n descriptors (at most
 * 64) attached by SCM_RIGHTS; 0 when sent. */
int spt_raw_send_fds(int fd, const int *fds, int n, char byte);
/* Next frame, or NULL on EOF/error (within guard seconds). */
Spcoll__Frame *spt_raw_recv(int fd, int guard_s);
/* 1 when the peer closed the connection (within guard seconds). */
int spt_raw_closed(int fd, int guard_s);
int spt_raw_hello(int fd);
/* A raw client that asks to join `rank` of a world-2 group and does not
 * wait; returns its fd once the daemon has processed the join (a stats
 * round trip proves it), or -1. */
int spt_raw_join_pending(const char *socket, const char *name, int rank);

#endif
