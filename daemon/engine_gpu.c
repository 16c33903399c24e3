/* GPU engines: not built yet; no tensor is in device memory. */
#include "engine.h"

int spd_engine_gpu_wants(const spd_op *op) {
  (void)op;
  return 0;
}

int spd_engine_gpu_rank_fill(spd_op_rank *r, const Spcoll__OpRequest *rq,
                             spk_err *err) {
  (void)r, (void)rq, (void)err;
  return SPK_OK;
}

void spd_engine_gpu_rank_free(spd_op_rank *r) {
  (void)r;
}

void spd_engine_gpu_done_fill(const spd_op *op, int rank, Spcoll__Done *done) {
  (void)op, (void)rank, (void)done;
}

int spd_engine_gpu_submit(spd_op *op, spd_mover_done_cb done, spk_err *err) {
  (void)op, (void)done;
  return spk_err_set(err, SPK_EUNSUPPORTED, "no GPU engine in this build");
}
