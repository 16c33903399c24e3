/* Plans of large groups are built on libuv's thread pool, so one group's
 * world^2 moves never stall the other clients' requests. While it builds,
 * the op counts as running: its group starts nothing else, a stop waits
 * for it, and departures only forget sessions (the ranks' arguments, all
 * the plan reads, stay put). */
#include "op.h"

static void plan_work(uv_work_t *w) {
  spd_op *op = w->data;
  op->plan_rc = spd_op_plan(op, &op->plan_err);
}

static void plan_after(uv_work_t *w, int status) {
  spd_op *op = w->data;
  spd_group *g = op->group;
  spd_ctx *ctx = g->ctx;
  op->running = 0;
  g->running--;
  ctx->running_ops--;
  int rc = op->plan_rc;
  if (status < 0)
    rc = spk_err_set(&op->plan_err, SPK_ESYSTEM, "building the plan on the "
                     "thread pool: %s", uv_strerror(status));
  else if (rc == SPK_OK && ctx->stopping)
    rc = spk_err_set(&op->plan_err, SPK_ESHUTDOWN, "daemon shutting down");
  else if (rc == SPK_OK && op->fail_status < 0) {
    /* Aborted while it was planned (a node lost, another node's OpFail;
     * spd_engine_abort kept it): the others may be running it, they hear
     * this node will not. A rank that merely left after its part does
     * not abort it: that op goes on. */
    rc = spk_err_set(&op->plan_err, op->fail_status, "%s", op->fail_msg);
    op->fail_status = 0;
    spd_group_peer_op_failed(g, op, rc, op->plan_err.msg);
  }
  if (spd_op_launch(op, rc, &op->plan_err) < 0)
    spd_op_after(g); /* failed and gone: the group goes on */
}

int spd_op_plan_off_loop(spd_op *op) {
  spd_group *g = op->group;
  spd_ctx *ctx = g->ctx;
  op->plan_work.data = op;
  int rc = uv_queue_work(ctx->loop, &op->plan_work, plan_work, plan_after);
  if (rc < 0) {
    SPD_WARN(&ctx->log, "uv_queue_work for the plan of group '%s' failed: "
             "%s; building it on the loop", g->name, uv_strerror(rc));
    return SPK_ESYSTEM;
  }
  op->running = 1;
  g->running++;
  ctx->running_ops++;
  ctx->stats.plans_off_loop++;
  return SPK_OK;
}
