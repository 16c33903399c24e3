/* Engine choice: device tensors go to the GPU engines, everything else to
 * the host mover. */
#include "engine.h"

#include "daemon.h"
#include "engine_ucx.h"

const char *spd_engine_name(spd_engine_kind kind) {
  switch (kind) {
  case SPD_ENGINE_HOST: return "host";
  case SPD_ENGINE_CUDA: return "cuda";
  case SPD_ENGINE_NCCL: return "nccl";
  case SPD_ENGINE_UCX: return "ucx";
  }
  return "?";
}

int spd_engine_submit(spd_op *op, spd_mover_done_cb done, spk_err *err) {
  if (op->group->multinode)
    return spd_engine_ucx_submit(op, done, err);
  if (spd_engine_gpu_wants(op))
    return spd_engine_gpu_submit(op, done, err);
  op->engine = SPD_ENGINE_HOST;
  return spd_mover_submit(op->group->ctx->mover, &op->plan, op->bases, done,
                          op, err);
}

void spd_engine_account(spd_op *op) {
  spd_counters *c = &op->group->ctx->stats;
  uint64_t bytes = op->plan.bytes;
  switch ((spd_engine_kind)op->engine) {
  case SPD_ENGINE_HOST: c->mover_host_ops++, c->mover_host_bytes += bytes; break;
  case SPD_ENGINE_CUDA: c->mover_cuda_ops++, c->mover_cuda_bytes += bytes; break;
  case SPD_ENGINE_NCCL: c->mover_nccl_ops++, c->mover_nccl_bytes += bytes; break;
  case SPD_ENGINE_UCX: c->mover_ucx_ops++; break; /* bytes: as sent */
  }
}
