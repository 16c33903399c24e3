/* The GPU engines' rows: ops on device tensors go to the CUDA mover (a
 * group's tensors on one GPU) or the NCCL mover (across GPUs), unless the
 * config's `mover` names one. Also each rank's stream order (the cuda
 * row's rank_open, shared by both rows): its stream events, opened when
 * the rank's request arrives, or its slot of a stream flags buffer (which
 * the cuda row registers: flags_open), waited on and recorded by the
 * movers, and reported in its Done. */
#include "engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

#ifdef SPC_HAVE_CUDA
#include "gpu.h"
#include "mover_cuda.h"
#include "mover_nccl.h"
#endif

#ifdef SPC_HAVE_CUDA

/* The done flag set from the host: whatever happened to the op, the
 * client's stream never waits for an op that will not write it. When the
 * op ran, the daemon's stream wrote the same value: the order of the two
 * does not matter. A stream still stuck (rank_release) may write it late;
 * the client never reuses the slot of a failed op. The ready flag is left
 * alone: the clients were let go, so the daemon's streams must not run
 * the op's work now (it would write outputs their next work may use). */
static void gpu_rank_release(void *state) {
  spd_gpu_rank *g = state;
  if (g->seq != 0)
    __atomic_store_n(g->done_host, g->seq, __ATOMIC_RELEASE);
}

static void gpu_rank_close(void *state) {
  spd_gpu_rank *g = state;
  gpu_rank_release(g);
  if (g->ready)
    spd_gpu_event_put(g->ready);
  if (g->done)
    spd_gpu_event_put(g->done);
  free(g);
}

/* A rank ordered through stream flags: the slot's words as the GPUs and
 * the daemon's host address them. */
static int flags_rank_open(const spd_rank_req *rq, spd_gpu_rank *g,
                           spk_err *err) {
  const spd_gpu_flags *f = rq->flags_state[SPD_ENGINE_CUDA];
  /* The done flag first: a rank refused below still has it set when the
   * op closes. */
  g->seq = rq->flags_seq;
  g->ready_host = (uint64_t *)(void *)(f->host + rq->flags_off);
  g->done_host = g->ready_host + 1;
  g->ready_dev = f->dev + rq->flags_off;
  g->done_dev = g->ready_dev + 8;
  int rc = spd_gpu_get(rq->ctx, &g->gpu, err);
  if (rc == SPK_OK)
    rc = spd_gpu_flags_dev_ok(g->gpu, g->dev, err);
  if (rc == SPK_OK)
    rq->ctx->stats.gpu_order_flags++;
  return rc;
}

static int gpu_rank_open(const spd_rank_req *rq, void **state_p,
                         spk_err *err) {
  size_t nr = rq->nready, nd = rq->ndone;
  int flags = rq->flags_state != NULL;
  if (nr == 0 && nd == 0 && !flags)
    return SPK_OK;
  if (flags && (nr != 0 || nd != 0))
    return spk_err_set(err, SPK_EINVAL, "an op came with stream events and "
                       "stream flags: one or the other");
  if ((nr != 0 && nr != SPD_GPU_HANDLE) || (nd != 0 && nd != SPD_GPU_HANDLE))
    return spk_err_set(err, SPK_EINVAL, "stream events of %zu and %zu bytes: "
                       "a CUDA IPC event handle has %d", nr, nd,
                       SPD_GPU_HANDLE);
  if (rq->in_dev < 0)
    return spk_err_set(err, SPK_EINVAL, "stream %s came with an input tensor "
                       "in host memory", flags ? "flags" : "events");
  spd_gpu_rank *g = calloc(1, sizeof(*g));
  if (g == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of a rank's GPU state "
                       "failed");
  *state_p = g; /* closed with the op, also on failure below */
  g->dev = rq->in_dev;
  if (flags)
    return flags_rank_open(rq, g, err);
  rq->ctx->stats.gpu_order_events++;
  int rc = SPK_OK;
  if (nr)
    rc = spd_gpu_event_open(rq->ctx->gpu, rq->session, rq->ready, g->dev,
                            rq->in_gpu_mem, &g->ready, err);
  if (rc == SPK_OK && nd)
    rc = spd_gpu_event_open(rq->ctx->gpu, rq->session, rq->done, g->dev,
                            rq->in_gpu_mem, &g->done, err);
  return rc;
}

static int gpu_rank_recorded(const void *state) {
  const spd_gpu_rank *g = state;
  return g->recorded;
}

static int one_gpu(const spd_work *w);

/* A rank ordered by stream flags whose tensors are on GPU dev. */
static int flagged_on(const void *state, int dev) {
  const spd_gpu_rank *g = state;
  return g != NULL && g->seq != 0 && g->dev == dev;
}

/* The group's next op goes behind prev when both have every rank on
 * prev's one GPU, ordered by stream flags, and prev's job recorded its end
 * event: this row is then the engine for it too (cuda_wants), and its
 * stream waits for that end (mover_cuda.c), so their done flags are
 * written in their order. With events a client waits for the daemon's
 * answer anyway. */
static int cuda_queues_behind(const spd_work *prev, void *const *next,
                              int world) {
  if (prev->multinode || prev->partial || prev->world != world ||
      !one_gpu(prev) || !spd_mover_cuda_orders_next(prev))
    return 0;
  for (int i = 0; i < world; i++)
    if (!flagged_on(prev->rank_state[i], prev->dev[0]) ||
        !flagged_on(next[i], prev->dev[0]))
      return 0;
  return 1;
}

static const char *where(int t) {
  return t == SPK_T_IN ? "input" : "output";
}

/* Every tensor on a GPU, each rank's two on the same one, aligned to the
 * element size (the kernels load elements as their type). Fills dev[r]. */
static int tensors_check(const spd_work *w, int *dev, spk_err *err) {
  size_t esize = spk_dtype_size(w->plan->dtype);
  int world = w->world, host = -1, device = -1;
  for (int i = 0; i < world; i++)
    for (int t = 0; t < SPK_T_COUNT; t++) {
      if (w->ranks[i].t[t].dev >= 0)
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
    int in = w->ranks[i].t[SPK_T_IN].dev, out = w->ranks[i].t[SPK_T_OUT].dev;
    if (in != out)
      return spk_err_set(err, SPK_EINVAL, "rank %d's input is on GPU %d and "
                         "its output on GPU %d: a rank's tensors must share "
                         "a GPU", i, in, out);
    dev[i] = in;
    for (int t = 0; t < SPK_T_COUNT; t++) {
      uintptr_t a = (uintptr_t)w->bases[i * SPK_T_COUNT + t];
      if (a % esize != 0)
        return spk_err_set(err, SPK_EINVAL, "rank %d's %s tensor is not "
                           "aligned to its %zu-byte elements (offset %llu in "
                           "its buffer): device tensors must be", i, where(t),
                           esize, (unsigned long long)w->ranks[i].t[t].off);
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
  int rc = tensors_check(w, dev, err);
  if (rc == SPK_OK)
    rc = spd_gpu_get(w->ctx, gpu_p, err);
  if (rc < 0) {
    free(dev);
    return rc;
  }
  *dev_p = dev;
  return SPK_OK;
}

/* A submission's result rc: a device failure also says when it found the
 * daemon's CUDA context lost (which then asks for a new daemon). */
static int submitted(spd_gpu *gpu, int rc, spk_err *err) {
  if (rc == SPK_EDEVICE)
    spd_gpu_lost_say(gpu, err->msg, sizeof(err->msg));
  return rc;
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
  return submitted(gpu, spd_mover_cuda_submit(gpu, w, at, err), err);
}

static int gpu_flags_open(spd_ctx *ctx, uint8_t *base, size_t size,
                          void **state, spk_err *err) {
  return spd_gpu_flags_open(ctx, base, size, state, err);
}

/* The cuda row keeps a buffer's state only for stream flags buffers. */
static void gpu_forget_buffer(spd_ctx *ctx, void **state) {
  (void)ctx;
  spd_gpu_flags_close(state);
}

#ifdef SPC_HAVE_NCCL
/* The group's next op goes behind prev when every rank of both is on the
 * same GPU as before, ordered by stream flags, and prev's work is on its
 * set's streams: the next then takes the same set (the same GPUs), whose
 * streams run it after prev, on every GPU in the same order. */
static int nccl_queues_behind(const spd_work *prev, void *const *next,
                              int world) {
  if (prev->multinode || prev->partial || prev->world != world ||
      !spd_mover_nccl_on_streams(prev))
    return 0;
  for (int i = 0; i < world; i++)
    if (!flagged_on(prev->rank_state[i], prev->dev[i]) ||
        !flagged_on(next[i], prev->dev[i]))
      return 0;
  return 1;
}

static int nccl_submit(spd_work *w, spk_err *err) {
  int *dev;
  spd_gpu *gpu;
  int rc = gpu_prepare(w, &dev, &gpu, err);
  if (rc < 0)
    return rc;
  free(dev); /* the same as w->dev, now checked */
  return submitted(gpu, spd_mover_nccl_submit(gpu, w, err), err);
}

/* Before the GPU state goes (spd_gpu_free): the communicators. */
static void nccl_fini(spd_ctx *ctx) {
  if (ctx->gpu != NULL)
    spd_mover_nccl_free(ctx->gpu);
}
#endif

#else /* !SPC_HAVE_CUDA */

static int gpu_rank_open(const spd_rank_req *rq, void **state_p,
                         spk_err *err) {
  (void)state_p;
  if (rq->nready != 0 || rq->ndone != 0 || rq->flags_state != NULL)
    return spk_err_set(err, SPK_EUNSUPPORTED, "stream events or flags, but "
                       "spcolld was built without CUDA");
  return SPK_OK;
}

#define gpu_rank_close NULL
#define gpu_rank_release NULL
#define gpu_rank_recorded NULL
#define cuda_queues_behind NULL
#define gpu_flags_open NULL
#define gpu_forget_buffer NULL

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
    .rank_open = gpu_rank_open,
    .rank_close = gpu_rank_close,
    .rank_release = gpu_rank_release,
    .rank_recorded = gpu_rank_recorded,
    .queues_behind = cuda_queues_behind,
    .flags_open = gpu_flags_open,
    .forget_buffer = gpu_forget_buffer,
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
    .queues_behind = nccl_queues_behind,
    .fini = nccl_fini,
};
#else
const spd_engine spd_engine_nccl = {.built = 0};
#endif
