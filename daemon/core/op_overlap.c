#include "op_overlap.h"

#include <stdlib.h>

#include "plan_overlap.h"

/* Host buffers are keyed by their memfd (mapped from file offset 0, so a
 * tensor's offset in the buffer is its offset in the file); device
 * buffers by the daemon's one unified device address space, where two
 * mappings of one allocation are one address (gpu_ipc.c opens each
 * allocation once). */
static void tensor_loc(const spd_op_rank *r, int t, spk_tensor_loc *l) {
  const spd_buffer *b = r->buf[t];
  if (b == NULL)
    return; /* another node's rank, or no tensor */
  l->buf = b->id;
  if (b->kind == SPD_BUF_DEVICE) {
    l->mem[0] = UINT64_MAX;
    l->off = (uint64_t)(uintptr_t)b->base + r->off[t];
  } else {
    l->mem[0] = b->file_dev;
    l->mem[1] = b->file_ino; /* never 0: the key is never "not here" */
    l->off = r->off[t];
  }
}

int spd_op_overlap_check(spd_op *op, spk_err *err) {
  int world = op->group->world;
  const spk_op_args **args = malloc((size_t)world * sizeof(*args));
  spk_tensor_loc *locs = calloc((size_t)world * SPK_T_COUNT, sizeof(*locs));
  int rc = SPK_OK;
  if (args == NULL || locs == NULL)
    rc = spk_err_set(err, SPK_ENO_MEMORY,
                     "malloc of tensor places for %d ranks failed", world);
  for (int i = 0; rc == SPK_OK && i < world; i++) {
    args[i] = &op->ranks[i].args;
    for (int t = 0; t < SPK_T_COUNT; t++)
      tensor_loc(&op->ranks[i], t, &locs[i * SPK_T_COUNT + t]);
  }
  if (rc == SPK_OK)
    rc = spk_plan_overlap(args, world, locs, &op->plan, err);
  free(args);
  free(locs);
  /* Only this node knows where its ranks' tensors lie, so the other nodes
   * of the group may have found nothing wrong and be about to run: they
   * hear the refusal, and the group breaks, as when a node cannot prepare
   * its part (engine_ucx.c); nobody waits on streams that never come. */
  if (rc < 0 && op->group->multinode) {
    spd_op_peer_tell_failed(op, rc, err->msg);
    spd_group_break(op->group, rc, err->msg);
  }
  return rc;
}
