/* The restart suites' verified ops (test_restart, test_restart_nodes):
 * every op kind of the op list on dim 0 of [rows, n] float tensors in a
 * rank's buffer (host, or device: test_gpu_restart), run and checked
 * against what each output row must hold.
 * SPT_RO_W ranks. */
#ifndef SPT_RESTART_OPS_H
#define SPT_RESTART_OPS_H

#include "fast_ranks.h"

#define SPT_RO_W 4
#define SPT_RO_KINDS 10
#define SPT_RO_LARGE 40000 /* floats per row: what over fast_bytes takes */

typedef struct {
  spt_rk k;
  int rank;
  spc_tensor in, out;
  float *x, *y;
  /* Device tensors (test_gpu_restart): the ops run in dev, as large as
   * the host buffer, which mirrors it through copy (0 when done). */
  spc_buffer *dev;
  int (*copy)(void *dst, const void *src, size_t n, int to_dev);
} spt_ro;

/* Op `kind` (0..SPT_RO_KINDS-1) on rows of n floats at step: SPC_OK or
 * the op's failure; *wrong set when it ran but the data is not right. */
int spt_ro_op(spt_ro *r, int kind, int64_t n, int step, int *wrong);

/* What one rank's loop saw, in memory the test's ranks share. */
typedef struct {
  volatile int round;          /* the round it is in */
  volatile int restarted;      /* ops failed with SPC_ERESTARTED */
  volatile int bad;            /* wrong data, or another failure */
  volatile int last_fail;      /* the last round with a failed op; -1 */
} spt_ro_tally;

/* `rounds` rounds of every op kind at n floats a row, each followed by
 * the same at n2 when n2 > 0, tallied in t (a failure other than
 * SPC_ERESTARTED said on stderr). */
void spt_ro_loop(spt_ro *r, int rounds, int64_t n, int64_t n2,
                 spt_ro_tally *t);

/* The tallies of w ranks whose loops of `rounds` lived through a
 * restart: 0 when no op failed otherwise than with SPC_ERESTARTED and
 * none failed in the last `last_ok` rounds, else 1 with why said.
 * *restarted_p: how many failed with SPC_ERESTARTED. */
int spt_ro_tally_bad(const spt_ro_tally *t, int w, int rounds, int last_ok,
                     int *restarted_p, char *why, size_t len);

/* Daemon old replaced under running ranks, as an operator would: killed
 * (SIGKILL) and `again` started a moment later with argv (old's sockets,
 * NULL-ended); or, upgrade, `again` started with argv and --upgrade, to
 * which old hands its sockets and then exits 0 by itself. old->pid is 0
 * after. 0, or -1 with why said. */
int spt_ro_replace(spt_daemon *old, spt_daemon *again,
                   const char *const *argv, int upgrade, char *why,
                   size_t len);

#endif
