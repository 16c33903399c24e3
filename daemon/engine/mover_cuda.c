#include "mover_cuda.h"

#ifdef SPC_HAVE_CUDA

#include <stdlib.h>
#include <string.h>


typedef struct {
  spd_gpu_job job;            /* first: the job callbacks get this struct */
  spd_work *w;
  int dev;
  cudaStream_t stream;
  cudaEvent_t joint;          /* end of the kernels, for other GPUs' events */
  int nhelpers;
  int *helper_dev;            /* streams of other GPUs recording done events */
  cudaStream_t *helper;
  void *host;                 /* the descriptors, until the copy is done */
  spd_desc_entry *kept;       /* their copy kept on the GPU, held */
  int reused;                 /* kept from an earlier op: no upload */
  cudaEvent_t end;            /* after its done flags: a next op of the
                               * group queued behind it waits on it */
  int published;              /* w->priv is this job: its work item lives
                               * until the job's end (not when dropped) */
} cuda_job;

static void cuda_finish(spd_gpu_job *j) {
  cuda_job *cj = (cuda_job *)j;
  if (cj->published)
    cj->w->priv = NULL; /* no later op queues behind a job that is gone */
  if (cj->end != NULL && cudaEventDestroy(cj->end) != cudaSuccess)
    SPD_WARN(&j->gpu->ctx->log, "cudaEventDestroy of a job's end event "
             "failed");
  if (cj->stream != NULL)
    spd_gpu_stream_put(j->gpu, cj->dev, cj->stream);
  for (int i = 0; i < cj->nhelpers; i++)
    spd_gpu_stream_put(j->gpu, cj->helper_dev[i], cj->helper[i]);
  if (cj->joint != NULL && cudaEventDestroy(cj->joint) != cudaSuccess)
    SPD_WARN(&j->gpu->ctx->log, "cudaEventDestroy of a job's joint event "
             "failed");
  free(cj->helper_dev);
  free(cj->helper);
  spd_gpu_pinned_put(j->gpu, cj->host);
  spd_gpu_desc_put(cj->kept, j->status == cudaSuccess &&
                                 j->fail_status == SPK_OK);
}

/* Peer access from dev to every other GPU the op's tensors are on. */
static int peers_enable(const spd_work *w, int dev, spk_err *err) {
  for (int i = 0; i < w->world; i++)
    for (int t = 0; t < SPK_T_COUNT; t++) {
      int peer = w->ranks[i].t[t].dev, ok = 0;
      if (peer == dev)
        continue;
      cudaError_t e = cudaDeviceCanAccessPeer(&ok, dev, peer);
      if (e != cudaSuccess || !ok)
        return spk_err_set(err, SPK_EUNSUPPORTED, "the CUDA mover on GPU %d "
                           "cannot reach rank %d's tensor on GPU %d: no peer "
                           "access (%s)", dev, i, peer,
                           e != cudaSuccess ? cudaGetErrorString(e) : "none");
      e = cudaDeviceEnablePeerAccess(peer, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled)
        cudaGetLastError(); /* not an error here: clear it */
      else if (e != cudaSuccess)
        return spk_err_set(err, SPK_EDEVICE, "cudaDeviceEnablePeerAccess(%d) "
                           "from GPU %d: %s", peer, dev,
                           cudaGetErrorString(e));
    }
  return SPK_OK;
}

/* Done events of ranks on other GPUs: recorded on a stream of their GPU
 * once the kernels are done (an event records only on its own GPU). */
static int record_done_elsewhere(cuda_job *cj, spk_err *err) {
  spd_work *w = cj->w;
  int world = w->world, rc = SPK_OK;
  cj->helper_dev = calloc((size_t)world, sizeof(int));
  cj->helper = calloc((size_t)world, sizeof(cudaStream_t));
  if (cj->helper_dev == NULL || cj->helper == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of helper streams failed");
  for (int i = 0; rc == SPK_OK && i < world; i++) {
    spd_gpu_rank *g = w->rank_state[i];
    int seen = g == NULL || g->done == NULL || g->dev == cj->dev;
    for (int k = 0; !seen && k < cj->nhelpers; k++)
      seen = cj->helper_dev[k] == g->dev;
    if (seen)
      continue;
    cudaError_t e = cudaSuccess;
    if (cj->joint == NULL) {
      e = cudaEventCreateWithFlags(&cj->joint, cudaEventDisableTiming);
      if (e == cudaSuccess)
        e = cudaEventRecord(cj->joint, cj->stream);
      if (e != cudaSuccess)
        return spk_err_set(err, SPK_EDEVICE, "a joint event on GPU %d: %s",
                           cj->dev, cudaGetErrorString(e));
    }
    cudaStream_t s;
    rc = spd_gpu_stream_get(cj->job.gpu, g->dev, &s, err);
    if (rc < 0)
      break;
    cj->helper_dev[cj->nhelpers] = g->dev;
    cj->helper[cj->nhelpers++] = s;
    e = cudaStreamWaitEvent(s, cj->joint, 0);
    if (e != cudaSuccess)
      return spk_err_set(err, SPK_EDEVICE, "cudaStreamWaitEvent on GPU %d: "
                         "%s", g->dev, cudaGetErrorString(e));
    rc = spd_gpu_set_device(g->dev, err);
    if (rc == SPK_OK)
      rc = spd_gpu_record_done(w->rank_state, world, g->dev, w->partial, s,
                               err);
    if (rc == SPK_OK)
      rc = spd_gpu_job_watch(&cj->job, s, err);
  }
  return rc;
}

/* A launch packed at device offset 0 (spk_cdesc_pack), placed at d. */
static void launch_at(spk_claunch *L, void *d) {
  uintptr_t base = (uintptr_t)d;
  L->descs = (const spk_cdesc *)(base + (uintptr_t)L->descs);
  L->srcs = (const spk_csrc *)(base + (uintptr_t)L->srcs);
}

/* The op's descriptors on the GPU, both phases in one block: the copy
 * kept from an earlier op with the same bytes, or uploaded now (and kept
 * for the next ones where the cache has room). *fresh: d is this op's
 * own, to free after its launches. */
static int descs_up(cuda_job *cj, const spk_cdesc_list *l, size_t at1,
                    size_t total, spk_claunch *L, void **d_p, int *fresh,
                    spk_err *err) {
  spd_gpu *gpu = cj->job.gpu;
  /* The bytes do not depend on where they go on the device; the launches
   * are placed at d once it is known (launch_at). */
  spk_cdesc_pack(&l[0], cj->host, 0, &L[0]);
  spk_cdesc_pack(&l[1], (uint8_t *)cj->host + at1, at1, &L[1]);
  uint64_t hash;
  cj->kept = spd_gpu_desc_find(gpu, cj->dev, cj->host, total, &hash);
  *fresh = 0;
  if (cj->kept != NULL) {
    *d_p = spd_gpu_desc_dev(cj->kept);
    cj->reused = 1;
    return SPK_OK;
  }
  int rc = spd_gpu_alloc(cj->stream, total, d_p, err);
  if (rc == SPK_OK)
    rc = spd_gpu_copy_up(cj->stream, *d_p, cj->host, total, err);
  if (rc < 0)
    return rc;
  cj->kept = spd_gpu_desc_keep(gpu, cj->dev, *d_p, cj->host, total, hash,
                               cj->stream);
  *fresh = cj->kept == NULL;
  return SPK_OK;
}

/* Every rank ordered by stream flags: an op of the group may then be
 * queued behind this one (engine_gpu.c, cuda_queues_behind). */
static int all_flagged(const spd_work *w) {
  for (int i = 0; i < w->world; i++) {
    const spd_gpu_rank *g = w->rank_state[i];
    if (g == NULL || g->seq == 0)
      return 0;
  }
  return 1;
}

/* Queued behind the group's previous op (still running): after its end
 * on the GPU, so the done flags of a rank's slot rise in op order. The
 * row queues an op only behind a job with an end event
 * (spd_mover_cuda_orders_next). */
static int after_previous(cuda_job *cj, spk_err *err) {
  const cuda_job *prev = cj->w->behind ? cj->w->behind->priv : NULL;
  if (prev == NULL || prev->end == NULL)
    return SPK_OK;
  cudaError_t e = cudaStreamWaitEvent(cj->stream, prev->end, 0);
  return e == cudaSuccess ? SPK_OK
                          : spk_err_set(err, SPK_EDEVICE, "cudaStreamWaitEvent "
                                        "on the group's previous op: %s",
                                        cudaGetErrorString(e));
}

/* The end event, after the done flags, where a next op may follow. */
static int record_end(cuda_job *cj, spk_err *err) {
  if (cj->nhelpers != 0 || !all_flagged(cj->w))
    return SPK_OK;
  cudaError_t e = cudaEventCreateWithFlags(&cj->end, cudaEventDisableTiming);
  if (e == cudaSuccess)
    e = cudaEventRecord(cj->end, cj->stream);
  return e == cudaSuccess ? SPK_OK
                          : spk_err_set(err, SPK_EDEVICE, "an op's end event "
                                        "on GPU %d: %s", cj->dev,
                                        cudaGetErrorString(e));
}

/* Descriptors of both phases in one upload (or none: kept from an earlier
 * op); the kernels, the done events and the completion callback, in
 * stream order. */
static int cuda_enqueue(cuda_job *cj, spk_cdesc_list *l, spk_err *err) {
  spd_work *w = cj->w;
  spd_gpu *gpu = cj->job.gpu;
  size_t at1 = (spk_cdesc_packed_size(&l[0]) + 255) & ~(size_t)255;
  size_t total = at1 + spk_cdesc_packed_size(&l[1]);
  void *d = NULL;
  int fresh = 0;
  spk_claunch L[2];
  int rc = spd_gpu_pinned_get(gpu, total, &cj->host, err);
  if (rc < 0)
    return rc;
  spd_gpu_job_mark(&cj->job, cj->stream, "start");
  rc = after_previous(cj, err);
  if (rc == SPK_OK)
    rc = spd_gpu_wait_ready(w->rank_state, w->world, cj->stream, err);
  spd_gpu_job_mark(&cj->job, cj->stream, "ranks ready");
  if (rc == SPK_OK)
    rc = descs_up(cj, l, at1, total, L, &d, &fresh, err);
  if (rc < 0)
    return rc;
  launch_at(&L[0], d);
  launch_at(&L[1], d);
  int sms = gpu->dev[cj->dev].sms;
  spd_gpu_job_mark(&cj->job, cj->stream, "descriptors up");
  /* Moves may read what reduce steps wrote: phase 1 after phase 0. */
  for (int ph = 0; rc == SPK_OK && ph < 2; ph++)
    rc = spd_gpu_launch(w->plan, &L[ph], sms, cj->stream, err);
  spd_gpu_job_mark(&cj->job, cj->stream, "kernels");
  cudaError_t e = fresh ? cudaFreeAsync(d, cj->stream) : cudaSuccess;
  if (rc == SPK_OK && e != cudaSuccess)
    rc = spk_err_set(err, SPK_EDEVICE, "cudaFreeAsync of descriptors: %s",
                     cudaGetErrorString(e));
  if (rc == SPK_OK)
    rc = spd_gpu_record_done(w->rank_state, w->world, cj->dev, w->partial,
                             cj->stream, err);
  spd_gpu_job_mark(&cj->job, cj->stream, "done events");
  if (rc == SPK_OK)
    rc = record_done_elsewhere(cj, err);
  if (rc == SPK_OK)
    rc = record_end(cj, err);
  if (rc == SPK_OK)
    rc = spd_gpu_job_watch(&cj->job, cj->stream, err);
  return rc;
}

/* The job's streams: its own and the helpers on other GPUs. */
static void cuda_fail_after(cuda_job *cj, int rc, const spk_err *err) {
  cudaStream_t s[1 + SPD_GPU_MAX_DEV];
  int n = 0;
  s[n++] = cj->stream;
  for (int i = 0; i < cj->nhelpers && n < 1 + SPD_GPU_MAX_DEV; i++)
    s[n++] = cj->helper[i];
  spd_gpu_job_fail_after(&cj->job, s, n, rc, err->msg);
}

int spd_mover_cuda_submit(spd_gpu *gpu, spd_work *w, int dev, spk_err *err) {
  cuda_job *cj = calloc(1, sizeof(*cj));
  if (cj == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of a CUDA job failed");
  int rc = spd_gpu_job_init(gpu, &cj->job, w->done, w->arg, w->name, w->seq,
                            cuda_finish, err);
  if (rc < 0) {
    free(cj);
    return rc;
  }
  cj->w = w;
  cj->dev = dev;
  spk_cdesc_list l[2];
  uint64_t chunk = spk_cdesc_chunk_for(w->plan->bytes, gpu->dev[dev].sms);
  spk_cdesc_list_init(&l[0], chunk);
  spk_cdesc_list_init(&l[1], chunk);
  for (int ph = 0; rc == SPK_OK && ph < 2; ph++)
    rc = spk_cdesc_from_plan(&l[ph], w->plan, w->bases, ph, err);
  if (rc == SPK_OK)
    rc = spd_gpu_set_device(dev, err);
  if (rc == SPK_OK)
    rc = peers_enable(w, dev, err);
  if (rc == SPK_OK)
    rc = spd_gpu_stream_get(gpu, dev, &cj->stream, err);
  int queued = rc == SPK_OK;
  if (rc == SPK_OK)
    rc = cuda_enqueue(cj, l, err);
  SPD_DEBUG(&gpu->ctx->log, "group '%s' op %llu: cuda mover on GPU %d, %zu "
            "reduce and %zu copy steps in %llu + %llu chunks of %llu bytes, "
            "descriptors %s", w->name, (unsigned long long)w->seq, dev,
            l[0].n, l[1].n, (unsigned long long)l[0].nchunks,
            (unsigned long long)l[1].nchunks, (unsigned long long)chunk,
            cj->reused ? "kept from an earlier op" : "uploaded");
  spk_cdesc_list_free(&l[0]);
  spk_cdesc_list_free(&l[1]);
  if (rc < 0 && !queued) {
    spd_gpu_job_drop(&cj->job);
    return rc;
  }
  w->priv = cj;
  cj->published = 1;
  if (rc < 0) {
    /* Whatever was queued reads the op's buffers: the op fails once it is
     * done, through the job, and the loop never waits for the GPU. */
    cuda_fail_after(cj, rc, err);
    return SPK_OK;
  }
  spd_gpu_job_arm(&cj->job);
  return SPK_OK;
}

int spd_mover_cuda_orders_next(const spd_work *w) {
  const cuda_job *cj = w->priv;
  return cj != NULL && cj->end != NULL;
}

#endif /* SPC_HAVE_CUDA */
