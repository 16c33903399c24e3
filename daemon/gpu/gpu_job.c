/* GPU jobs: an op's work queued on CUDA streams, its completion seen by
 * stream callbacks (on a CUDA thread) and delivered to the loop thread
 * with uv_async, as the host mover delivers its own. A device error a
 * callback reports fails the op on every rank instead of leaving it
 * hanging. */
#include "gpu.h"

#ifdef SPC_HAVE_CUDA

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every stream of the job is done: the mover cleans up, then the job
 * reports, failed (every rank hears why) when a stream reported an error
 * or the mover found one after submission. */
static void on_job_closed(uv_handle_t *h) {
  spd_gpu_job *job = h->data;
  if (job->finish != NULL)
    job->finish(job);
  /* The mover's own finding first: it says why (an aborted NCCL set
   * also fails its streams, with a less telling error). */
  int status = SPK_OK;
  char msg[sizeof(job->fail_msg)] = "";
  if (job->fail_status < 0) {
    status = job->fail_status;
    snprintf(msg, sizeof(msg), "%s", job->fail_msg);
  } else if (job->status != cudaSuccess) {
    status = SPK_EDEVICE;
    snprintf(msg, sizeof(msg), "a CUDA stream of the op failed: %s",
             cudaGetErrorString((cudaError_t)job->status));
  }
  if (status < 0)
    SPD_ERROR(&job->gpu->ctx->log, "group '%s' op %llu failed on the GPU: "
              "%s", job->name, (unsigned long long)job->seq, msg);
  spd_gpu_done_cb done = job->done;
  void *arg = job->arg;
  free(job);
  done(arg, status, msg);
}

static void on_job_async(uv_async_t *a) {
  uv_close((uv_handle_t *)a, on_job_closed);
}

int spd_gpu_job_init(spd_gpu *gpu, spd_gpu_job *job, spd_gpu_done_cb done,
                     void *arg, const char *name, uint64_t seq,
                     spd_gpu_job_fn finish, spk_err *err) {
  int rc = uv_async_init(gpu->ctx->loop, &job->async, on_job_async);
  if (rc < 0)
    return spk_err_set(err, SPK_ESYSTEM, "uv_async_init for a GPU job: %s",
                       uv_strerror(rc));
  job->async.data = job;
  job->gpu = gpu;
  job->done = done;
  job->arg = arg;
  job->name = name;
  job->seq = seq;
  job->finish = finish;
  job->pending = 1; /* held until spd_gpu_job_arm */
  job->status = cudaSuccess;
  return SPK_OK;
}

/* Runs on a CUDA thread: no CUDA call here; record the first error and
 * wake the loop once the job's last stream is done. */
static void CUDART_CB on_stream_done(cudaStream_t s, cudaError_t status,
                                     void *arg) {
  spd_gpu_job *job = arg;
  (void)s;
  if (status != cudaSuccess) {
    int ok = cudaSuccess;
    __atomic_compare_exchange_n(&job->status, &ok, (int)status, 0,
                                __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  }
  if (__atomic_sub_fetch(&job->pending, 1, __ATOMIC_ACQ_REL) == 0)
    uv_async_send(&job->async);
}

int spd_gpu_job_watch(spd_gpu_job *job, cudaStream_t s, spk_err *err) {
  __atomic_add_fetch(&job->pending, 1, __ATOMIC_ACQ_REL);
  /* cudaStreamAddCallback rather than cudaLaunchHostFunc: after a device
   * error the callback still runs, with the error, so the op fails
   * instead of never completing. */
  cudaError_t e = cudaStreamAddCallback(s, on_stream_done, job, 0);
  if (e != cudaSuccess) {
    __atomic_sub_fetch(&job->pending, 1, __ATOMIC_ACQ_REL);
    return spk_err_set(err, SPK_EDEVICE, "cudaStreamAddCallback: %s",
                       cudaGetErrorString(e));
  }
  return SPK_OK;
}

void spd_gpu_job_arm(spd_gpu_job *job) {
  if (__atomic_sub_fetch(&job->pending, 1, __ATOMIC_ACQ_REL) == 0)
    uv_async_send(&job->async);
}

void spd_gpu_job_fail(spd_gpu_job *job, int status, const char *msg) {
  job->fail_status = status;
  snprintf(job->fail_msg, sizeof(job->fail_msg), "%s", msg);
  spd_gpu_job_arm(job);
}

void spd_gpu_job_fail_after(spd_gpu_job *job, const cudaStream_t *streams,
                            int n, int status, const char *msg) {
  spk_err err;
  for (int i = 0; i < n; i++)
    if (streams[i] != NULL && spd_gpu_job_watch(job, streams[i], &err) < 0) {
      /* A stream that takes no callback (a broken context) returns at
       * once from a synchronize: the only wait left on the loop. */
      SPD_WARN(&job->gpu->ctx->log, "a failed GPU op waits for its queued "
               "work: %s", err.msg);
      if (cudaStreamSynchronize(streams[i]) != cudaSuccess)
        cudaGetLastError();
    }
  spd_gpu_job_fail(job, status, msg);
}

static void on_dropped(uv_handle_t *h) {
  spd_gpu_job *job = h->data;
  if (job->finish != NULL)
    job->finish(job);
  free(job);
}

void spd_gpu_job_drop(spd_gpu_job *job) {
  uv_close((uv_handle_t *)&job->async, on_dropped);
}

int spd_gpu_wait_ready(void *const *ranks, int world, cudaStream_t s,
                       spk_err *err) {
  for (int i = 0; i < world; i++) {
    spd_gpu_rank *g = ranks[i];
    if (g == NULL || g->ready == NULL)
      continue;
    cudaError_t e = cudaStreamWaitEvent(s, g->ready->ev, 0);
    if (e != cudaSuccess)
      return spk_err_set(err, SPK_EDEVICE, "cudaStreamWaitEvent on rank %d's "
                         "ready event: %s", i, cudaGetErrorString(e));
  }
  return SPK_OK;
}

int spd_gpu_record_done(void *const *ranks, int world, int dev,
                        cudaStream_t s, spk_err *err) {
  for (int i = 0; i < world; i++) {
    spd_gpu_rank *g = ranks[i];
    if (g == NULL || g->done == NULL || g->dev != dev)
      continue;
    cudaError_t e = cudaEventRecord(g->done->ev, s);
    if (e != cudaSuccess)
      return spk_err_set(err, SPK_EDEVICE, "cudaEventRecord of rank %d's "
                         "done event: %s", i, cudaGetErrorString(e));
    g->recorded = 1;
  }
  return SPK_OK;
}

int spd_gpu_alloc(cudaStream_t s, size_t bytes, void **dev_p, spk_err *err) {
  void *d = NULL;
  cudaError_t e = cudaMallocAsync(&d, bytes ? bytes : 1, s);
  if (e != cudaSuccess)
    return spk_err_set(err, SPK_EDEVICE, "cudaMallocAsync of %zu bytes: %s",
                       bytes, cudaGetErrorString(e));
  *dev_p = d;
  return SPK_OK;
}

int spd_gpu_copy_up(cudaStream_t s, void *dev, const void *host, size_t bytes,
                    spk_err *err) {
  if (bytes == 0)
    return SPK_OK;
  cudaError_t e = cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s);
  if (e != cudaSuccess)
    return spk_err_set(err, SPK_EDEVICE, "cudaMemcpyAsync of %zu descriptor "
                       "bytes: %s", bytes, cudaGetErrorString(e));
  return SPK_OK;
}

int spd_gpu_launch(const spk_plan *p, spk_claunch *L, int sms, cudaStream_t s,
                   spk_err *err) {
  if (L->nchunks == 0)
    return SPK_OK;
  L->dtype = p->dtype;
  L->scale = p->scale;
  L->red_op = p->red_op;
  L->world = p->world;
  /* Four blocks of 512 threads fill a multiprocessor. */
  if (spk_cuda_launch(L, 4 * sms, s, err->msg, sizeof(err->msg)) < 0)
    return SPK_EDEVICE;
  return SPK_OK;
}

#endif /* SPC_HAVE_CUDA */
