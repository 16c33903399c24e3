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

#endif
