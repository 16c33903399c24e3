/* NCCL communicator sets that share a GPU take turns on it. NCCL documents
 * operations of two communicator cliques in flight on one device at once
 * as unsafe (one may hold the GPU while its peers wait for the other's).
 *
 * The order of the turns must respect every client's stream order, or a
 * job would wait for one that waits, through a client's stream, for it.
 * The order in which jobs become ready (every rank's ready flag or event
 * passed) does: a job that follows another on a client's stream becomes
 * ready only after the other's done. So a job whose set shares a GPU with
 * another usable set is gated: its ranks' ready waits go on a probe
 * stream, then a host function that tells the loop (uv_async); the loop
 * then queues the job's work, each GPU's part behind the work the last
 * gated job of another set queued there (an event per GPU, turn_wait),
 * and records its own (turn_end). Jobs queued before their GPU was shared
 * are not waited for (they may wait for a gated one through a client's
 * stream): the turns start with the sharing. The price is a host hop per
 * op on a shared GPU. */
#include "mover_nccl_internal.h"

#ifdef SPC_HAVE_NCCL

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct spd_nccl_gates {
  uv_async_t async;
  spd_gpu *gpu;
  pthread_mutex_t mu;
  nccl_job *fired;            /* ready, for the loop; under mu */
  int pending;                /* gated jobs not back on the loop yet */
} spd_nccl_gates;

/* Whether another usable set shares one of set's GPUs. */
int spd_nccl_shared(const spd_nccl_set *set) {
  for (const spd_nccl_set *s = set->gpu->nccl_sets; s != NULL; s = s->next)
    if (s != set && !s->broken && !s->down && spd_nccl_sets_overlap(s, set))
      return 1;
  return 0;
}

int spd_nccl_turn_wait(spd_nccl_set *set, int i, spk_err *err) {
  spd_gpu_dev *d = &set->gpu->dev[set->devs[i]];
  if (d->nccl_tail_set == 0 || d->nccl_tail_set == set->id)
    return SPK_OK;
  cudaError_t e = cudaStreamWaitEvent(set->streams[i], d->nccl_tail, 0);
  if (e != cudaSuccess)
    return spk_err_set(err, SPK_EDEVICE, "cudaStreamWaitEvent on the NCCL "
                       "work queued before on GPU %d: %s", set->devs[i],
                       cudaGetErrorString(e));
  return SPK_OK;
}

int spd_nccl_turn_end(spd_nccl_set *set, int i, spk_err *err) {
  spd_gpu_dev *d = &set->gpu->dev[set->devs[i]];
  if (d->nccl_tail == NULL) {
    cudaError_t e = cudaEventCreateWithFlags(&d->nccl_tail,
                                             cudaEventDisableTiming);
    if (e != cudaSuccess)
      return spk_err_set(err, SPK_EDEVICE, "cudaEventCreateWithFlags for "
                         "the NCCL turns on GPU %d: %s", set->devs[i],
                         cudaGetErrorString(e));
  }
  cudaError_t e = cudaEventRecord(d->nccl_tail, set->streams[i]);
  if (e != cudaSuccess)
    return spk_err_set(err, SPK_EDEVICE, "cudaEventRecord of the NCCL turn "
                       "on GPU %d: %s", set->devs[i], cudaGetErrorString(e));
  d->nccl_tail_set = set->id;
  return SPK_OK;
}

void spd_nccl_turns_forget(spd_nccl_set *set) {
  for (int i = 0; i < set->n && set->gpu != NULL; i++)
    if (set->gpu->dev[set->devs[i]].nccl_tail_set == set->id)
      set->gpu->dev[set->devs[i]].nccl_tail_set = 0;
}

/* A CUDA thread: no CUDA call here (CUDA's rule for host functions). */
static void CUDART_CB gate_fired(void *arg) {
  nccl_job *nj = arg;
  spd_nccl_gates *g = nj->gates;
  pthread_mutex_lock(&g->mu);
  nj->next_fired = g->fired;
  g->fired = nj;
  pthread_mutex_unlock(&g->mu);
  uv_async_send(&g->async);
}

/* The loop: the jobs whose ranks are ready take their turns. */
static void on_fired(uv_async_t *a) {
  spd_nccl_gates *g = a->data;
  pthread_mutex_lock(&g->mu);
  nccl_job *list = g->fired;
  g->fired = NULL;
  pthread_mutex_unlock(&g->mu);
  /* Pushed newest first: run them oldest first. */
  nccl_job *rev = NULL;
  while (list != NULL) {
    nccl_job *n = list->next_fired;
    list->next_fired = rev;
    rev = list;
    list = n;
  }
  for (nccl_job *nj = rev, *next; nj != NULL; nj = next) {
    next = nj->next_fired;
    g->pending--;
    spd_gpu_stream_put(g->gpu, nj->probe_dev, nj->probe);
    nj->probe = NULL;
    spd_nccl_set *set = nj->set;
    if (set->broken) { /* aborted while it waited: nothing was queued */
      char msg[sizeof(nj->job.fail_msg)]; /* fail() writes fail_msg */
      snprintf(msg, sizeof(msg), "%s", nj->job.fail_msg[0]
                                           ? nj->job.fail_msg
                                           : "its NCCL set was aborted");
      spd_gpu_job_fail(&nj->job, nj->job.fail_status ? nj->job.fail_status
                                                     : SPK_EDEVICE, msg);
      continue;
    }
    spk_err err = {{0}};
    int rc = spd_nccl_run_turn(nj, &err);
    if (rc < 0)
      spd_gpu_job_fail(&nj->job, rc, err.msg);
  }
}

static void gates_closed(uv_handle_t *h) {
  spd_nccl_gates *g = h->data;
  pthread_mutex_destroy(&g->mu);
  free(g);
}

static int gates_of(spd_gpu *gpu, spd_nccl_gates **g_p, spk_err *err) {
  if ((*g_p = gpu->nccl_gates) != NULL)
    return SPK_OK;
  spd_nccl_gates *g = calloc(1, sizeof(*g));
  if (g == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of the NCCL gates "
                       "failed");
  int rc = pthread_mutex_init(&g->mu, NULL);
  if (rc != 0) {
    free(g);
    return spk_err_set(err, SPK_ESYSTEM, "pthread_mutex_init for the NCCL "
                       "gates: error %d", rc);
  }
  rc = uv_async_init(gpu->ctx->loop, &g->async, on_fired);
  if (rc < 0) {
    pthread_mutex_destroy(&g->mu);
    free(g);
    return spk_err_set(err, SPK_ESYSTEM, "uv_async_init for the NCCL gates: "
                       "%s", uv_strerror(rc));
  }
  g->async.data = g;
  g->gpu = gpu;
  uv_unref((uv_handle_t *)&g->async); /* it must not keep the loop alive */
  gpu->nccl_gates = *g_p = g;
  return SPK_OK;
}

int spd_nccl_gate(nccl_job *nj, spk_err *err) {
  spd_nccl_set *set = nj->set;
  spd_nccl_gates *g;
  int rc = gates_of(set->gpu, &g, err);
  if (rc < 0)
    return rc;
  const spd_work *w = nj->w;
  int dev = set->devs[0];
  cudaStream_t s = NULL;
  rc = spd_gpu_set_device(dev, err);
  if (rc == SPK_OK)
    rc = spd_gpu_stream_get(set->gpu, dev, &s, err);
  if (rc == SPK_OK)
    rc = spd_gpu_wait_ready(w->rank_state, w->world, s, err);
  /* Before the launch: the function may run at once, on a CUDA thread. */
  nj->gates = g;
  if (rc == SPK_OK) {
    cudaError_t e = cudaLaunchHostFunc(s, gate_fired, nj);
    if (e != cudaSuccess)
      rc = spk_err_set(err, SPK_EDEVICE, "cudaLaunchHostFunc for an NCCL "
                       "gate on GPU %d: %s", dev, cudaGetErrorString(e));
  }
  if (rc < 0) {
    /* Waits may be queued on it: not back to the pool, destroyed once
     * they pass (cudaStreamDestroy does not wait). */
    if (s != NULL && cudaStreamDestroy(s) != cudaSuccess)
      cudaGetLastError();
    return rc;
  }
  nj->probe = s;
  nj->probe_dev = dev;
  g->pending++;
  SPD_DEBUG(&set->ctx->log, "group '%s' op %llu: gated until its ranks are "
            "ready (its NCCL set shares a GPU)", w->name,
            (unsigned long long)w->seq);
  spd_nccl_inflight_add(nj); /* the watchdog sees it wait */
  return SPK_OK;
}

void spd_nccl_gates_stop(spd_gpu *gpu) {
  spd_nccl_gates *g = gpu->nccl_gates;
  if (g == NULL)
    return;
  gpu->nccl_gates = NULL;
  /* A gate still waiting (a rank that never came) may yet fire on a CUDA
   * thread: its state is left to the process's exit. */
  if (g->pending == 0)
    uv_close((uv_handle_t *)&g->async, gates_closed);
}

#endif /* SPC_HAVE_NCCL */
