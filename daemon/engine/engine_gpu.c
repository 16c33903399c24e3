/* The GPU engines' rows: ops on device tensors go to the CUDA mover (a
 * group's tensors on one GPU) or the NCCL mover (across GPUs), unless the
 * config's `mover` names one. Also each rank's stream events: opened when
 * the rank's request arrives, waited on and recorded by the movers, and
 * reported in its Done. */
#include "op_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"

#ifdef SPC_HAVE_CUDA
#include "gpu.h"
#include "mover_cuda.h"
#include "mover_nccl.h"
#endif

/* Device tensors cross nodes only once the UCX engine moves device memory;
 * until then it must never see a device address. */
static int device_off_node(const spd_op_rank *r, const Spcoll__OpRequest *rq,
                           spk_err *err) {
  int device = 0;
  for (int t = 0; t < SPK_T_COUNT; t++)
    device |= r->buf[t] != NULL && r->buf[t]->kind == SPD_BUF_DEVICE;
  spd_member *m = device ? spd_session_member(r->session, rq->group_id)
                         : NULL;
  if (m != NULL && m->group->multinode)
    return spk_err_set(err, SPK_EUNSUPPORTED, "device tensors in group '%s', "
                       "which spans nodes: not supported yet",
                       m->group->name);
  return SPK_OK;
}

#ifdef SPC_HAVE_CUDA

int spd_engine_gpu_rank_fill(spd_op_rank *r, const Spcoll__OpRequest *rq,
                             spk_err *err) {
  size_t nr = rq->ready_event.len, nd = rq->done_event.len;
  int rc = device_off_node(r, rq, err);
  if (rc < 0 || (nr == 0 && nd == 0))
    return rc;
  if ((nr != 0 && nr != SPD_GPU_HANDLE) || (nd != 0 && nd != SPD_GPU_HANDLE))
    return spk_err_set(err, SPK_EINVAL, "stream events of %zu and %zu bytes: "
                       "a CUDA IPC event handle has %d", nr, nd,
                       SPD_GPU_HANDLE);
  spd_buffer *b = r->buf[SPK_T_IN];
  if (b == NULL || b->kind != SPD_BUF_DEVICE)
    return spk_err_set(err, SPK_EINVAL, "stream events came with an input "
                       "tensor in host memory");
  spd_ctx *ctx = r->session->ctx;
  spd_gpu_rank *g = calloc(1, sizeof(*g));
  if (g == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of a rank's GPU state "
                       "failed");
  r->gpu = g; /* freed with the op, also on failure below */
  g->dev = b->device;
  if (nr)
    rc = spd_gpu_event_open(ctx->gpu, r->session->id, rq->ready_event.data,
                            g->dev, b->gpu_mem, &g->ready, err);
  if (rc == SPK_OK && nd)
    rc = spd_gpu_event_open(ctx->gpu, r->session->id, rq->done_event.data,
                            g->dev, b->gpu_mem, &g->done, err);
  return rc;
}

void spd_engine_gpu_rank_free(spd_op_rank *r) {
  spd_gpu_rank *g = r->gpu;
  if (g == NULL)
    return;
  if (g->ready)
    spd_gpu_event_put(g->ready);
  if (g->done)
    spd_gpu_event_put(g->done);
  free(g);
  r->gpu = NULL;
}

void spd_engine_gpu_done_fill(const spd_op *op, int rank, Spcoll__Done *done) {
  const spd_gpu_rank *g = op->ranks[rank].gpu;
  done->done_event_recorded = g != NULL && g->recorded;
}

static const char *where(int t) {
  return t == SPK_T_IN ? "input" : "output";
}

/* Every tensor on a GPU, each rank's two on the same one, aligned to the
 * element size (the kernels load elements as their type). Fills dev[r]. */
static int tensors_check(spd_op *op, int *dev, spk_err *err) {
  size_t esize = spk_dtype_size(op->plan.dtype);
  int world = op->group->world, host = -1, device = -1;
  for (int i = 0; i < world; i++)
    for (int t = 0; t < SPK_T_COUNT; t++) {
      spd_buffer *b = op->ranks[i].buf[t];
      if (b->kind == SPD_BUF_DEVICE)
        device = i * SPK_T_COUNT + t;
      else
        host = i * SPK_T_COUNT + t;
    }
  if (host >= 0)
    return spk_err_set(err, SPK_EINVAL, "rank %d's %s tensor is in host "
                       "memory but rank %d's %s is on a GPU: an op's tensors "
                       "must all be host or all device memory",
                       host / SPK_T_COUNT, where(host % SPK_T_COUNT),
                       device / SPK_T_COUNT, where(device % SPK_T_COUNT));
  for (int i = 0; i < world; i++) {
    spd_buffer *in = op->ranks[i].buf[SPK_T_IN];
    spd_buffer *out = op->ranks[i].buf[SPK_T_OUT];
    if (in->device != out->device)
      return spk_err_set(err, SPK_EINVAL, "rank %d's input is on GPU %d and "
                         "its output on GPU %d: a rank's tensors must share "
                         "a GPU", i, in->device, out->device);
    dev[i] = in->device;
    for (int t = 0; t < SPK_T_COUNT; t++) {
      uintptr_t a = (uintptr_t)op->bases[i * SPK_T_COUNT + t];
      if (a % esize != 0)
        return spk_err_set(err, SPK_EINVAL, "rank %d's %s tensor is not "
                           "aligned to its %zu-byte elements (offset %llu in "
                           "its buffer): device tensors must be", i, where(t),
                           esize, (unsigned long long)op->ranks[i].off[t]);
    }
  }
  return SPK_OK;
}

/* What both GPU rows do first: the tensors checked, dev[r] filled, the
 * GPU state made on the first device op. */
static int gpu_prepare(spd_work *w, int **dev_p, spd_gpu **gpu_p,
                       spk_err *err) {
  int *dev = malloc((size_t)w->world * sizeof(int));
  if (dev == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "malloc of %d device numbers "
                       "failed", w->world);
  int rc = tensors_check(w->op, dev, err);
  if (rc == SPK_OK)
    rc = spd_gpu_get(w->ctx, gpu_p, err);
  if (rc < 0) {
    free(dev);
    return rc;
  }
  *dev_p = dev;
  return SPK_OK;
}

static int cuda_submit(spd_work *w, spk_err *err) {
  int *dev;
  spd_gpu *gpu;
  int rc = gpu_prepare(w, &dev, &gpu, err);
  if (rc < 0)
    return rc;
  /* Across GPUs, the kernels run on the lowest one and reach the others
   * through peer access. */
  int at = dev[0];
  for (int i = 1; i < w->world; i++)
    at = dev[i] < at ? dev[i] : at;
  free(dev);
  return spd_mover_cuda_submit(gpu, w->op, at, spd_work_op_done, err);
}

#ifdef SPC_HAVE_NCCL
static int nccl_submit(spd_work *w, spk_err *err) {
  int *dev;
  spd_gpu *gpu;
  int rc = gpu_prepare(w, &dev, &gpu, err);
  if (rc < 0)
    return rc;
  rc = spd_mover_nccl_submit(gpu, w->op, dev, spd_work_op_done, err);
  free(dev);
  return rc;
}

/* Before the GPU state goes (spd_gpu_free): the communicators. */
static void nccl_fini(spd_ctx *ctx) {
  if (ctx->gpu != NULL)
    spd_mover_nccl_free(ctx->gpu);
}
#endif

#else /* !SPC_HAVE_CUDA */

int spd_engine_gpu_rank_fill(spd_op_rank *r, const Spcoll__OpRequest *rq,
                             spk_err *err) {
  int rc = device_off_node(r, rq, err);
  if (rc < 0)
    return rc;
  if (rq->ready_event.len != 0 || rq->done_event.len != 0)
    return spk_err_set(err, SPK_EUNSUPPORTED, "stream events, but spcolld was "
                       "built without CUDA");
  return SPK_OK;
}

void spd_engine_gpu_rank_free(spd_op_rank *r) {
  (void)r;
}

void spd_engine_gpu_done_fill(const spd_op *op, int rank, Spcoll__Done *done) {
  (void)op, (void)rank, (void)done;
}

static int cuda_submit(spd_work *w, spk_err *err) {
  (void)w;
  return spk_err_set(err, SPK_EUNSUPPORTED, "an op on device tensors, but "
                     "spcolld was built without CUDA");
}

#endif

/* Whether every rank's tensors are on one GPU. */
static int one_gpu(const spd_work *w) {
  for (int i = 1; i < w->world; i++)
    if (w->dev[i] != w->dev[0])
      return 0;
  return 1;
}

/* Within one GPU the CUDA mover is the engine (NCCL refuses several
 * ranks on one device); across GPUs it can, through peer access. */
static int cuda_wants(const spd_work *w) {
  if (!w->device || w->multinode)
    return 0;
  return one_gpu(w) ? 2 : 1;
}

const spd_engine spd_engine_cuda = {
    .built = 1, /* without CUDA no device buffer registers: never picked */
    .wants = cuda_wants,
    .submit = cuda_submit,
};

#if defined(SPC_HAVE_CUDA) && defined(SPC_HAVE_NCCL)
/* Across GPUs, NCCL; within one it can (send/recv to itself): the way to
 * exercise it on a one-GPU machine is `mover = nccl`. */
static int nccl_wants(const spd_work *w) {
  if (!w->device || w->multinode)
    return 0;
  return one_gpu(w) ? 1 : 2;
}

const spd_engine spd_engine_nccl = {
    .built = 1,
    .wants = nccl_wants,
    .submit = nccl_submit,
    .fini = nccl_fini,
};
#else
const spd_engine spd_engine_nccl = {.built = 0};
#endif
