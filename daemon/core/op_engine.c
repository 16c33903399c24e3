/* The op layer's side of the engine contract: the work item of an op,
 * handed to the engine the table picks, and the engine's report turned
 * back into the op's completion. */
#include "op_engine.h"

#include <stdio.h>
#include <stdlib.h>

#include "daemon.h"

/* The engine finished: its status becomes the op's (unless the op already
 * failed for a reason of its own), then the op layer's completion. */
static void work_done(void *arg, int status, const char *msg) {
  spd_op *op = arg;
  if (status < 0 && op->fail_status >= 0) {
    op->fail_status = status;
    snprintf(op->fail_msg, sizeof(op->fail_msg), "%s",
             msg != NULL ? msg : "the engine failed");
  }
  free(op->work_dev);
  op->work_dev = NULL;
  op->finish(op);
}

void spd_work_op_done(void *arg) {
  spd_op *op = arg;
  op->work.done(op->work.arg, op->fail_status, op->fail_msg);
}

int spd_engine_submit(spd_op *op, spd_mover_done_cb done, spk_err *err) {
  spd_group *g = op->group;
  spd_ctx *ctx = g->ctx;
  int world = g->world, device = 0;
  int *dev = malloc((size_t)world * sizeof(int));
  if (dev == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "malloc of %d device numbers "
                       "failed", world);
  for (int i = 0; i < world; i++) {
    const spd_buffer *in = op->ranks[i].buf[SPK_T_IN];
    dev[i] = in != NULL && in->kind == SPD_BUF_DEVICE ? in->device : -1;
    for (int t = 0; t < SPK_T_COUNT; t++)
      device |= op->ranks[i].buf[t] != NULL &&
                op->ranks[i].buf[t]->kind == SPD_BUF_DEVICE;
  }
  op->work = (spd_work){.plan = &op->plan, .bases = op->bases, .dev = dev,
                        .world = world, .device = device,
                        .multinode = g->multinode, .ctx = ctx,
                        .done = work_done, .arg = op, .op = op};
  op->work_dev = dev;
  op->finish = done;
  int kind = spd_engine_pick(&op->work, spd_engine_find(ctx->cfg.mover));
  int rc;
  if (kind < 0)
    rc = spk_err_set(err, SPK_EUNSUPPORTED, "no engine of this spcolld runs "
                     "an op of group '%s' on %s tensors (mover %s)", g->name,
                     device ? "device" : "host", ctx->cfg.mover);
  else {
    op->engine = kind;
    rc = spd_engines[kind]->submit(&op->work, err);
  }
  if (rc < 0) {
    free(dev);
    op->work_dev = NULL;
  }
  return rc; /* SPK_OK: op may be gone already (done inside submit) */
}

void spd_engine_abort(spd_op *op, int status, const char *msg,
                      int dead_node) {
  const spd_engine *e = spd_engines[op->engine];
  /* Running but not yet submitted (a plan built off the loop): the op
   * layer fails it itself once the plan is back. */
  if (op->work.op == op && e->abort != NULL)
    e->abort(&op->work, status, msg, dead_node);
}

void spd_engine_account(spd_op *op) {
  spd_engine_counters *c = &op->group->ctx->engine_stats[op->engine];
  c->ops++;
  if (!spd_engines[op->engine]->counts_own_bytes)
    c->bytes += op->plan.bytes;
}
