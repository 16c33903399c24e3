/* A rank of the fast-path suites (test_fast, test_fast_uid): a client in
 * one group with a 4 MiB buffer carved into float tensors, and a verified
 * all_reduce whose sums are exact. */
#ifndef SPT_FAST_RANKS_H
#define SPT_FAST_RANKS_H

#include <stddef.h>
#include <stdint.h>

#include "harness.h"
#include "spcoll.h"

typedef struct {
  spc_client *c;
  spc_group *g;
  spc_buffer *b;
  size_t used;
} spt_rk;

/* A private daemon started with extra (NULL-ended, may be NULL) and n
 * zeroed bytes that the test's forked ranks share; NULL when either
 * fails (said on stderr). spt_fixture_down stops the daemon (its exit
 * status, as spt_daemon_stop) and unmaps the bytes. */
void *spt_fixture_up(spt_daemon *d, const char *const *extra, size_t n);
int spt_fixture_down(spt_daemon *d, void *shared, size_t n);

/* Connect to socket, ask for timeout_ms (0: the daemon's), join group as
 * rank of world, allocate the buffer. -1 on failure (said on stderr). */
int spt_rk_open(spt_rk *k, const char *socket, const char *group, int rank,
                int world, int64_t timeout_ms);
/* The next float tensor of shape s in the buffer; NULL on failure. */
float *spt_rk_tensor(spt_rk *k, spc_tensor *t, int nd, const int64_t *s);
/* Disconnect; returns bad. */
int spt_rk_close(spt_rk *k, int bad);
/* Value i of rank r's input at step (exact in float sums). */
float spt_rk_val(int r, size_t i, int step);
/* all_reduce of the 1-D float tensor in (filled here) into out (which may
 * be in), by spc_start + spc_wait when async, checked against the
 * rank-order sum; 0 when right. */
int spt_rk_reduce_check(spt_rk *k, int rank, int w, const spc_tensor *in,
                        const spc_tensor *out, int step, int async);
/* all_reduce of n floats (spc_start + spc_wait when async), checked
 * against the rank-order sum; 0 when right. */
int spt_rk_reduce_once(spt_rk *k, int rank, int w, size_t n, int step,
                       int async);

/* An all_reduce of n floats after the daemon was asked to drain: 0 when
 * it is refused in the daemon's words ("no new ops") or finds the daemon
 * gone (a drained daemon exits), as no op issued after a drain may run.
 * Then it waits until all w ranks had their answer (*answered: a counter
 * they share), so that none leaves the group before the others are
 * refused (they would hear "rank ... was lost" instead). */
int spt_rk_refused_after_drain(spt_rk *k, int rank, int64_t n, int w,
                               int *answered);

/* Most ranks of a test. */
#define SPT_RK_MAXW 8
/* all_gather along 0 of [n + d * rank, cols] floats, checked. */
int spt_rk_gather_once(spt_rk *k, int rank, int w, int64_t n, int64_t d,
                       int64_t cols, int step);
/* all_to_all_v of floats where rank `from` (every rank when from < 0)
 * sends `big` to rank `to`, and 1 + r + j go from r to j otherwise,
 * checked. */
int spt_rk_a2av_once(spt_rk *k, int rank, int w, int from, int to,
                     int64_t big, int step);

/* What the stats socket sock answers in format (NULL: the daemon's
 * default), malloc'd; NULL on failure. The text, and whether it holds
 * needle (said on stderr when not). */
char *spt_stats_fetch(const char *sock, const char *format);
char *spt_stats_text(const char *sock);
int spt_stats_has(const char *sock, const char *needle);

#endif
