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

/* The GPU time between the job's marks, for the log; the events are
 * complete (every stream is done), so reading them does not wait. */
static void marks_report(spd_gpu_job *job) {
  char line[512] = "";
  size_t at = 0;
  for (int i = 1; i < job->nmarks && at < sizeof(line); i++) {
    float ms = 0;
    if (cudaEventElapsedTime(&ms, job->mark[i - 1], job->mark[i]) !=
        cudaSuccess) {
      cudaGetLastError();
      break;
    }
    at += (size_t)snprintf(line + at, sizeof(line) - at, "%s%s %.1f us",
                           i > 1 ? ", " : "", job->mark_name[i],
                           (double)ms * 1e3);
  }
  if (line[0] != '\0')
    SPD_DEBUG(&job->gpu->ctx->log, "group '%s' op %llu: on the GPU: %s",
              job->name, (unsigned long long)job->seq, line);
}

static void marks_free(spd_gpu_job *job) {
  for (int i = 0; i < job->nmarks; i++)
    if (cudaEventDestroy(job->mark[i]) != cudaSuccess)
      cudaGetLastError();
  job->nmarks = 0;
}

void spd_gpu_job_mark(spd_gpu_job *job, cudaStream_t s, const char *stage) {
  if (job->gpu->ctx->log.level < SPD_LOG_DEBUG || job->marks_stopped ||
      job->nmarks == SPD_GPU_MARKS)
    return;
  cudaEvent_t e;
  if (cudaEventCreate(&e) != cudaSuccess) {
    cudaGetLastError();
    job->marks_stopped = 1; /* the created ones are still destroyed */
    return;
  }
  if (cudaEventRecord(e, s) != cudaSuccess) {
    cudaGetLastError();
    if (cudaEventDestroy(e) != cudaSuccess)
      cudaGetLastError();
    job->marks_stopped = 1;
    return;
  }
  job->mark[job->nmarks] = e;
  job->mark_name[job->nmarks++] = stage;
}

/* Every stream of the job is done: the mover cleans up, then the job
 * reports, failed (every rank hears why) when a stream reported an error
 * or the mover found one after submission. */
static void on_job_closed(uv_handle_t *h) {
  spd_gpu_job *job = h->data;
  marks_report(job);
  marks_free(job);
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
  if (status < 0)
    spd_gpu_lost_say(job->gpu, msg, sizeof(msg));
  if (status == SPK_OK && job->t_streams_ns != 0) {
    uint64_t now = uv_hrtime();
    SPD_DEBUG(&job->gpu->ctx->log, "group '%s' op %llu: GPU job queued in "
              "%.1f us, streams done %.1f us later, loop woke %.1f us later",
              job->name, (unsigned long long)job->seq,
              (double)(job->t_armed_ns - job->t_init_ns) / 1e3,
              (double)(job->t_streams_ns - job->t_armed_ns) / 1e3,
              (double)(now - job->t_streams_ns) / 1e3);
  }
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
  job->t_init_ns = uv_hrtime();
  job->nmarks = job->marks_stopped = 0;
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
  if (__atomic_sub_fetch(&job->pending, 1, __ATOMIC_ACQ_REL) == 0) {
    job->t_streams_ns = uv_hrtime(); /* the last callback: no other writer */
    uv_async_send(&job->async);
  }
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
  job->t_armed_ns = uv_hrtime();
  if (__atomic_sub_fetch(&job->pending, 1, __ATOMIC_ACQ_REL) == 0) {
    job->t_streams_ns = job->t_armed_ns; /* done before all was queued */
    uv_async_send(&job->async);
  }
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
  marks_free(job);
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
    /* A flag already set (the client's stream was idle, or has got there)
     * needs no wait on the stream. */
    if (g != NULL && g->seq != 0 &&
        (int64_t)(__atomic_load_n(g->ready_host, __ATOMIC_ACQUIRE) -
                  g->seq) >= 0)
      continue;
    if (g != NULL && g->seq != 0) {
      int rc = spd_gpu_flag_wait(g->gpu, s, g->ready_dev, g->seq, i, err);
      if (rc < 0)
        return rc;
      continue;
    }
    if (g == NULL || g->ready == NULL)
      continue;
    cudaError_t e = cudaStreamWaitEvent(s, g->ready->ev, 0);
    if (e != cudaSuccess)
      return spk_err_set(err, SPK_EDEVICE, "cudaStreamWaitEvent on rank %d's "
                         "ready event: %s", i, cudaGetErrorString(e));
  }
  return SPK_OK;
}

/* Only raised: the client's stream writes this op's seq or a later op's,
 * and a client reuses the slot only once the word holds its last seq.
 * Not at all once some rank's done flag is set (the op was given up on at
 * the op timeout, rank_release): that client's stream runs on, and the
 * op's work must not write its outputs under it. */
void spd_gpu_release_ready(void *const *ranks, int world) {
  for (int i = 0; i < world; i++) {
    const spd_gpu_rank *g = ranks[i];
    if (g != NULL && g->seq != 0 &&
        (int64_t)(__atomic_load_n(g->done_host, __ATOMIC_ACQUIRE) -
                  g->seq) >= 0)
      return;
  }
  for (int i = 0; i < world; i++) {
    spd_gpu_rank *g = ranks[i];
    if (g == NULL || g->seq == 0)
      continue;
    uint64_t cur = __atomic_load_n(g->ready_host, __ATOMIC_ACQUIRE);
    while ((int64_t)(cur - g->seq) < 0 &&
           !__atomic_compare_exchange_n(g->ready_host, &cur, g->seq, 0,
                                        __ATOMIC_RELEASE, __ATOMIC_ACQUIRE))
      ;
  }
}

int spd_gpu_record_done(void *const *ranks, int world, int dev, int partial,
                        cudaStream_t s, spk_err *err) {
  for (int i = 0; i < world; i++) {
    spd_gpu_rank *g = ranks[i];
    if (g != NULL && g->seq != 0 && (g->dev != dev || partial))
      continue;
    if (g != NULL && g->seq != 0) {
      int rc = spd_gpu_flag_write(g->gpu, s, g->done_dev, g->seq, i, err);
      if (rc < 0)
        return rc;
      g->recorded = 1;
      continue;
    }
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
