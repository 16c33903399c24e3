#include "mover_nccl_internal.h"

#ifdef SPC_HAVE_NCCL

#include <stdio.h>
#include <stdlib.h>

/* NCCL's communicators here are blocking: a peer that never arrives (a
 * rank's stream stuck before its ready event, a failed GPU) holds every
 * stream of the set, and every later op behind it, forever. A timer
 * checks the sets with work in flight: an asynchronous NCCL error, or an
 * op older than the config's nccl_timeout (default 300 s), aborts the set's
 * communicators (ncclCommAbort, on libuv's thread pool: it may block),
 * fails its ops with the reason, lets its streams past the ranks' ready
 * flags (spd_gpu_release_ready), and takes the set out of use; the next
 * op on those GPUs makes a new one once the abort is done. Nothing of
 * this waits on the loop thread. */
typedef struct spd_nccl_watch {
  uv_timer_t timer;
  spd_gpu *gpu;
} spd_nccl_watch;

#define WATCH_MS 200

void spd_nccl_inflight_remove(nccl_job *nj) {
  if (!nj->in_flight)
    return;
  spd_nccl_set *set = nj->set;
  for (nccl_job **p = &set->inflight; *p != NULL; p = &(*p)->next_in)
    if (*p == nj) {
      *p = nj->next_in;
      break;
    }
  nj->in_flight = 0;
  /* The set's streams moved on: the jobs queued on them after this one
   * count their time from now (ops queued behind their group's previous
   * one wait for it there). A gated job waits for its own ranks. */
  if (nj->ungated)
    for (nccl_job *j = set->inflight; j != NULL; j = j->next_in)
      if (j->ungated)
        j->start_ms = uv_now(set->ctx->loop);
  if (set->broken && !set->down && set->inflight == NULL)
    spd_nccl_set_dispose(set); /* aborted; its streams have run dry */
}

/* Out of use at once; the abort itself runs on the pool
 * (spd_nccl_set_down), and the set goes when that and its jobs are done. */
static void set_abort(spd_nccl_set *set, const char *why) {
  char devs[128];
  spd_nccl_set_str(set, devs, sizeof(devs));
  set->broken = 1;
  SPD_ERROR(&set->ctx->log, "NCCL communicators over GPUs %s aborted: %s",
            devs, why);
  for (nccl_job *nj = set->inflight; nj != NULL; nj = nj->next_in) {
    nj->job.fail_status = SPK_EDEVICE;
    snprintf(nj->job.fail_msg, sizeof(nj->job.fail_msg), "NCCL over GPUs "
             "%s: %s; its communicators were aborted (the next op makes "
             "new ones)", devs, why);
    /* A stuck rank's stream may never set its ready flag: without this the
     * streams of the healthy GPUs, and their ranks' answers, wait for it. */
    spd_gpu_release_ready(nj->w->rank_state, nj->w->world);
  }
  spd_nccl_turns_forget(set);
  spd_nccl_set_down(set, 1);
}

static void watch_tick(uv_timer_t *t) {
  spd_nccl_watch *w = t->data;
  spd_gpu *gpu = w->gpu;
  uint64_t now = uv_now(gpu->ctx->loop), limit = (uint64_t)gpu->ctx->cfg.nccl_timeout * 1000;
  int busy = 0;
  spd_nccl_set *next;
  for (spd_nccl_set *set = gpu->nccl_sets; set != NULL; set = next) {
    next = set->next;
    if (set->inflight == NULL || set->state != SET_READY || set->broken)
      continue;
    busy = 1;
    ncclResult_t bad = ncclSuccess;
    for (int i = 0; i < set->n && bad == ncclSuccess; i++) {
      ncclResult_t e = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(set->comms[i], &e);
      bad = r != ncclSuccess ? r : e == ncclInProgress ? ncclSuccess : e;
    }
    uint64_t oldest = now;
    for (nccl_job *nj = set->inflight; nj != NULL; nj = nj->next_in)
      oldest = nj->start_ms < oldest ? nj->start_ms : oldest;
    char why[160];
    if (bad != ncclSuccess) {
      snprintf(why, sizeof(why), "asynchronous error %s",
               ncclGetErrorString(bad));
      set_abort(set, why);
    } else if (now - oldest > limit) {
      snprintf(why, sizeof(why), "an op made no progress in %.1f s "
               "(nccl_timeout)", (double)(now - oldest) / 1000.0);
      set_abort(set, why);
    }
  }
  if (!busy)
    uv_timer_stop(t);
}

static void watch_closed(uv_handle_t *h) {
  free(h->data);
}

void spd_nccl_inflight_add(nccl_job *nj) {
  if (nj->in_flight)
    return; /* gated first: watched since */
  spd_gpu *gpu = nj->job.gpu;
  nj->start_ms = uv_now(gpu->ctx->loop);
  nj->next_in = nj->set->inflight;
  nj->set->inflight = nj;
  nj->in_flight = 1;
  spd_nccl_watch *w = gpu->nccl_watch;
  if (w == NULL) {
    w = calloc(1, sizeof(*w));
    if (w == NULL || uv_timer_init(gpu->ctx->loop, &w->timer) < 0) {
      SPD_WARN(&gpu->ctx->log, "no NCCL watchdog: calloc or uv_timer_init "
               "failed");
      free(w);
      return;
    }
    w->gpu = gpu;
    w->timer.data = w;
    /* It must not keep the loop alive at shutdown. */
    uv_unref((uv_handle_t *)&w->timer);
    gpu->nccl_watch = w;
  }
  if (!uv_is_active((uv_handle_t *)&w->timer))
    uv_timer_start(&w->timer, watch_tick, WATCH_MS, WATCH_MS);
}

void spd_nccl_watch_stop(spd_gpu *gpu) {
  if (gpu->nccl_watch == NULL)
    return;
  uv_timer_stop(&gpu->nccl_watch->timer);
  uv_close((uv_handle_t *)&gpu->nccl_watch->timer, watch_closed);
  gpu->nccl_watch = NULL;
}

#endif /* SPC_HAVE_NCCL */
