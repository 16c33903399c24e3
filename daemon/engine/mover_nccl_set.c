/* The NCCL mover's communicator sets: made, shared by every op on the
 * same GPUs, taken down (destroyed at stop, aborted by the watchdog), each
 * of those on libuv's thread pool (mover_nccl_internal.h says why). The
 * ops that run on them are mover_nccl.c's. */
#include "mover_nccl.h"

#ifdef SPC_HAVE_NCCL

#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mover_nccl_internal.h"

void spd_nccl_set_str(const spd_nccl_set *set, char *buf, size_t len) {
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; i < set->n && at < len; i++) {
    int w = snprintf(buf + at, len - at, "%s%d", i ? "," : "", set->devs[i]);
    at += w > 0 ? (size_t)w : 0;
  }
}

int spd_nccl_err(int rc_nccl, const char *call, const spd_nccl_set *set,
                 spk_err *err) {
  char devs[128];
  spd_nccl_set_str(set, devs, sizeof(devs));
  return spk_err_set(err, SPK_EDEVICE, "%s over GPUs %s: %s (%s)", call, devs,
                     ncclGetErrorString((ncclResult_t)rc_nccl),
                     ncclGetLastError(NULL));
}

/* ---- communicator sets -------------------------------------------------- */

void spd_nccl_set_free(spd_nccl_set *set) {
  free(set->devs);
  free(set->comms);
  free(set->streams);
  free(set);
}

void spd_nccl_set_dispose(spd_nccl_set *set) {
  for (int i = 0; i < set->n; i++)
    if (set->streams[i] != NULL &&
        cudaStreamDestroy(set->streams[i]) != cudaSuccess)
      cudaGetLastError(); /* nothing to answer: the set goes */
  spd_nccl_set_free(set);
}

static void set_unlink(spd_gpu *gpu, spd_nccl_set *set) {
  for (spd_nccl_set **p = &gpu->nccl_sets; *p != NULL; p = &(*p)->next)
    if (*p == set) {
      *p = set->next;
      break;
    }
}

int spd_nccl_sets_overlap(const spd_nccl_set *a, const spd_nccl_set *b) {
  for (int i = 0; i < a->n; i++)
    for (int j = 0; j < b->n; j++)
      if (a->devs[i] == b->devs[j])
        return 1;
  return 0;
}

/* Whether a set being taken down shares a GPU with set. */
static int waits_for_down(spd_gpu *gpu, const spd_nccl_set *set) {
  for (const spd_nccl_set *s = gpu->nccl_sets; s != NULL; s = s->next)
    if (s != set && s->down && spd_nccl_sets_overlap(s, set))
      return 1;
  return 0;
}

/* Threadpool: ncclCommInitAll can take seconds, the loop must not wait. */
static void set_init_work(uv_work_t *w) {
  spd_nccl_set *set = w->data;
  set->init_rc = ncclCommInitAll(set->comms, set->n, set->devs);
}

static void set_init_after(uv_work_t *w, int status);

/* Threadpool: ncclCommDestroy finalizes first (it waits for the
 * communicator's operations) and ncclCommAbort stops its work and
 * threads: either may block, the loop must not wait. */
static void set_down_work(uv_work_t *w) {
  spd_nccl_set *set = w->data;
  for (int i = 0; i < set->n; i++) {
    ncclResult_t r = set->down_abort ? ncclCommAbort(set->comms[i])
                                     : ncclCommDestroy(set->comms[i]);
    set->comms[i] = NULL;
    if (r != ncclSuccess && set->down_rc == ncclSuccess) {
      set->down_rc = r;
      set->down_dev = set->devs[i];
    }
  }
}

static void set_down_after(uv_work_t *w, int status) {
  spd_nccl_set *set = w->data;
  const char *call = set->down_abort ? "ncclCommAbort" : "ncclCommDestroy";
  char devs[128];
  spd_nccl_set_str(set, devs, sizeof(devs));
  set->down = 0;
  if (status < 0)
    SPD_ERROR(&set->ctx->log, "%s over GPUs %s did not run: %s", call, devs,
              uv_strerror(status));
  else if (set->down_rc != ncclSuccess)
    SPD_WARN(&set->ctx->log, "%s on GPU %d: %s", call, set->down_dev,
             ncclGetErrorString(set->down_rc));
  else
    SPD_DEBUG(&set->ctx->log, "NCCL communicators over GPUs %s gone (%s)",
              devs, call);
  spd_gpu *gpu = set->gpu;
  if (gpu != NULL) {
    set_unlink(gpu, set);
    spd_nccl_set *next;
    for (spd_nccl_set *s = gpu->nccl_sets; s != NULL; s = next) {
      next = s->next;
      if (!s->deferred || waits_for_down(gpu, s))
        continue;
      s->deferred = 0;
      int rc = uv_queue_work(set->ctx->loop, &s->work, set_init_work,
                             set_init_after);
      if (rc < 0)
        set_init_after(&s->work, rc); /* fails its ops, frees it */
    }
  }
  if (set->inflight == NULL)
    spd_nccl_set_dispose(set);
}

void spd_nccl_set_down(spd_nccl_set *set, int abort) {
  set->down = 1;
  set->down_abort = abort;
  set->down_rc = ncclSuccess;
  set->work.data = set;
  int rc = uv_queue_work(set->ctx->loop, &set->work, set_down_work,
                         set_down_after);
  if (rc < 0)
    set_down_after(&set->work, rc); /* left as they are, said */
}

/* Staging and descriptor buffers come from each GPU's default pool
 * (cudaMallocAsync). In one process NCCL's peers use each other's buffers
 * directly, and pool memory is reachable from another GPU only once the
 * pool grants it access: grant it to every other GPU of the set. */
static int pools_share(spd_nccl_set *set, spk_err *err) {
  for (int i = 0; i < set->n && set->n > 1; i++) {
    cudaMemPool_t pool;
    cudaError_t e = cudaDeviceGetDefaultMemPool(&pool, set->devs[i]);
    for (int j = 0; e == cudaSuccess && j < set->n; j++) {
      if (j == i)
        continue;
      struct cudaMemAccessDesc a = {0};
      a.location.type = cudaMemLocationTypeDevice;
      a.location.id = set->devs[j];
      a.flags = cudaMemAccessFlagsProtReadWrite;
      e = cudaMemPoolSetAccess(pool, &a, 1);
    }
    if (e != cudaSuccess)
      return spk_err_set(err, SPK_EDEVICE, "cudaMemPoolSetAccess of GPU %d's "
                         "pool for the other GPUs of an NCCL set: %s",
                         set->devs[i], cudaGetErrorString(e));
  }
  return SPK_OK;
}

static void set_init_after(uv_work_t *w, int status) {
  spd_nccl_set *set = w->data;
  spd_gpu *gpu = set->gpu;
  int made = status >= 0 && set->init_rc == ncclSuccess;
  if (gpu == NULL) {
    /* The daemon stopped meanwhile (no op waits for the set then). */
    if (made)
      spd_nccl_set_down(set, 0);
    else
      spd_nccl_set_free(set);
    return;
  }
  spk_err err;
  int rc = SPK_OK;
  char devs[128];
  spd_nccl_set_str(set, devs, sizeof(devs));
  if (status < 0)
    rc = spk_err_set(&err, SPK_ESYSTEM, "NCCL init over GPUs %s did not run: "
                     "%s", devs, uv_strerror(status));
  else if (set->init_rc != ncclSuccess)
    rc = spd_nccl_err(set->init_rc, "ncclCommInitAll", set, &err);
  for (int i = 0; rc == SPK_OK && i < set->n; i++) {
    rc = spd_gpu_set_device(set->devs[i], &err);
    cudaError_t e = rc == SPK_OK ? cudaStreamCreateWithFlags(
                                       &set->streams[i], cudaStreamNonBlocking)
                                 : cudaSuccess;
    if (e != cudaSuccess)
      rc = spk_err_set(&err, SPK_EDEVICE, "cudaStreamCreateWithFlags on GPU "
                       "%d: %s", set->devs[i], cudaGetErrorString(e));
  }
  if (rc == SPK_OK)
    rc = pools_share(set, &err);
  nccl_job *waiting = set->waiting;
  set->waiting = NULL;
  set->wait_tail = &set->waiting;
  if (rc == SPK_OK) {
    SPD_INFO(&gpu->ctx->log, "NCCL communicators over GPUs %s ready", devs);
    set->state = SET_READY;
  } else {
    /* Forget the set: the next op on these GPUs tries again (once the
     * communicators made are gone, when there are). */
    SPD_ERROR(&gpu->ctx->log, "%s", err.msg);
    if (!made)
      set_unlink(gpu, set);
  }
  while (waiting != NULL) {
    nccl_job *nj = waiting;
    waiting = nj->next_wait;
    spk_err jerr;
    int jrc = rc == SPK_OK ? spd_nccl_run(nj, &jerr) : rc;
    if (jrc < 0)
      spd_gpu_job_fail(&nj->job, jrc, rc == SPK_OK ? jerr.msg : err.msg);
  }
  if (rc < 0 && made)
    spd_nccl_set_down(set, 0); /* and the streams made, at its end */
  else if (rc < 0)
    spd_nccl_set_free(set);
}

int spd_nccl_set_get(spd_gpu *gpu, const int *dev, int world,
                     spd_nccl_set **set_p, spk_err *err) {
  int sorted[SPD_GPU_MAX_DEV], n = 0;
  for (int r = 0; r < world; r++) {
    int at = 0;
    while (at < n && sorted[at] < dev[r])
      at++;
    if (at < n && sorted[at] == dev[r])
      continue;
    memmove(&sorted[at + 1], &sorted[at], (size_t)(n - at) * sizeof(int));
    sorted[at] = dev[r];
    n++;
  }
  for (spd_nccl_set *s = gpu->nccl_sets; s != NULL; s = s->next)
    if (!s->down && !s->broken && s->n == n &&
        memcmp(s->devs, sorted, (size_t)n * sizeof(int)) == 0) {
      *set_p = s;
      return SPK_OK;
    }
  spd_nccl_set *set = calloc(1, sizeof(*set));
  if (set != NULL) {
    set->devs = malloc((size_t)n * sizeof(int));
    set->comms = calloc((size_t)n, sizeof(ncclComm_t));
    set->streams = calloc((size_t)n, sizeof(cudaStream_t));
  }
  if (set == NULL || !set->devs || !set->comms || !set->streams) {
    if (set)
      spd_nccl_set_free(set);
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of an NCCL set of %d "
                       "GPUs failed", n);
  }
  memcpy(set->devs, sorted, (size_t)n * sizeof(int));
  set->id = ++gpu->nccl_set_ids;
  set->n = n;
  set->gpu = gpu;
  set->ctx = gpu->ctx;
  set->state = SET_INIT;
  set->wait_tail = &set->waiting;
  set->work.data = set;
  /* Its init starts when the sets being taken down there are gone
   * (set_down_after). */
  set->deferred = waits_for_down(gpu, set);
  int rc = set->deferred ? 0
                         : uv_queue_work(gpu->ctx->loop, &set->work,
                                         set_init_work, set_init_after);
  if (rc < 0) {
    spd_nccl_set_free(set);
    return spk_err_set(err, SPK_ESYSTEM, "uv_queue_work for NCCL init: %s",
                       uv_strerror(rc));
  }
  set->next = gpu->nccl_sets;
  gpu->nccl_sets = set;
  *set_p = set;
  return SPK_OK;
}

/* The communicators go on the pool like any (ncclCommDestroy may block),
 * after the GPU state; the loop runs until they are gone. */
void spd_mover_nccl_free(spd_gpu *gpu) {
  spd_nccl_watch_stop(gpu);
  spd_nccl_gates_stop(gpu);
  while (gpu->nccl_sets != NULL) {
    spd_nccl_set *set = gpu->nccl_sets;
    gpu->nccl_sets = set->next;
    set->gpu = NULL; /* its pool callbacks finish it alone */
    if (set->down || (set->state == SET_INIT && !set->deferred))
      continue; /* on the pool now: its after callback frees it */
    if (set->state == SET_INIT)
      spd_nccl_set_free(set); /* no communicators yet, no op waiting */
    else
      spd_nccl_set_down(set, 0);
  }
}

#endif /* SPC_HAVE_NCCL */
