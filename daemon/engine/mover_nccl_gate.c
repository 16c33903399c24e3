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
 * stream, then a stream callback that tells the loop (uv_async); the loop
 * then queues the job's work, each GPU's part behind the work the last
 * gated job of another set queued there (an event per GPU, turn_wait),
 * and records its own (turn_end). A set's streams run in order, so a turn
 * it records follows all its work there, ungated jobs too (queued before
 * the GPU was shared, or where a gate could not be set up), which may
 * wait, through a client's stream, for a gated job: a set records no turn
 * while it has ungated work in flight (set->ungated), and the turns start
 * once that is done. The price is a host hop per op on a shared GPU. */
#include "mover_nccl_internal.h"

#ifdef SPC_HAVE_NCCL

#include <stdio.h>
#include <stdlib.h>

typedef struct spd_nccl_gates {
  uv_async_t async;
  spd_gpu *gpu;
  nccl_job *fired;            /* ready, for the loop: a stack that CUDA
                               * threads push on, the loop takes whole */
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
  if (set->ungated > 0)
    return SPK_OK; /* its turn would follow work that may wait for others */
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

/* A CUDA thread: no CUDA call here. A stream callback rather than a host
 * function: after a device error it still runs, with the error, so the
 * job fails instead of never leaving its gate. */
static void CUDART_CB gate_fired(cudaStream_t s, cudaError_t status,
                                 void *arg) {
  (void)s;
  nccl_job *nj = arg;
  spd_nccl_gates *g = nj->gates;
  nj->gate_status = (int)status;
  nccl_job *head = __atomic_load_n(&g->fired, __ATOMIC_ACQUIRE);
  do
    nj->next_fired = head;
  while (!__atomic_compare_exchange_n(&g->fired, &head, nj, 1,
                                      __ATOMIC_RELEASE, __ATOMIC_ACQUIRE));
  (void)uv_async_send(&g->async); /* fails only for a closed handle */
}

/* The loop: the jobs whose ranks are ready take their turns. */
static void on_fired(uv_async_t *a) {
  spd_nccl_gates *g = a->data;
  nccl_job *list = __atomic_exchange_n(&g->fired, NULL, __ATOMIC_ACQ_REL);
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
    spd_gpu_stream_put(g->gpu, nj->probe_dev, nj->probe);
    nj->probe = NULL;
    spd_nccl_set *set = nj->set;
    if (nj->gate_status != cudaSuccess) { /* nothing queued but the waits */
      char msg[160];
      snprintf(msg, sizeof(msg), "waiting for the ranks on GPU %d: %s",
               nj->probe_dev,
               cudaGetErrorString((cudaError_t)nj->gate_status));
      spd_gpu_job_fail(&nj->job, SPK_EDEVICE, msg);
      continue;
    }
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
  free(h->data);
}

static int gates_of(spd_gpu *gpu, spd_nccl_gates **g_p, spk_err *err) {
  if ((*g_p = gpu->nccl_gates) != NULL)
    return SPK_OK;
  spd_nccl_gates *g = calloc(1, sizeof(*g));
  if (g == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of the NCCL gates "
                       "failed");
  int rc = uv_async_init(gpu->ctx->loop, &g->async, on_fired);
  if (rc < 0) {
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
    cudaError_t e = cudaStreamAddCallback(s, gate_fired, nj, 0);
    if (e != cudaSuccess)
      rc = spk_err_set(err, SPK_EDEVICE, "cudaStreamAddCallback for an "
                       "NCCL gate on GPU %d: %s", dev, cudaGetErrorString(e));
  }
  if (rc < 0) {
    /* Waits may be queued on it: not back to the pool, destroyed once
     * they pass (cudaStreamDestroy does not wait). */
    cudaError_t e = s != NULL ? cudaStreamDestroy(s) : cudaSuccess;
    if (e != cudaSuccess)
      SPD_WARN(&set->ctx->log, "cudaStreamDestroy of an NCCL gate's "
               "stream on GPU %d: %s", dev, cudaGetErrorString(e));
    return rc;
  }
  nj->probe = s;
  nj->probe_dev = dev;
  SPD_DEBUG(&set->ctx->log, "group '%s' op %llu: gated until its ranks are "
            "ready (its NCCL set shares a GPU)", w->name,
            (unsigned long long)w->seq);
  spd_nccl_inflight_add(nj); /* the watchdog sees it wait */
  return SPK_OK;
}

/* The engines stop only with no op running, so no gate waits. */
void spd_nccl_gates_stop(spd_gpu *gpu) {
  spd_nccl_gates *g = gpu->nccl_gates;
  if (g == NULL)
    return;
  gpu->nccl_gates = NULL;
  uv_close((uv_handle_t *)&g->async, gates_closed);
}

#endif /* SPC_HAVE_NCCL */
