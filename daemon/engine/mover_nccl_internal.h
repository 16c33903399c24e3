/* What the NCCL mover's files share (mover_nccl_set.c: communicator sets;
 * mover_nccl.c: running plans on them; mover_nccl_watch.c: the watchdog of
 * ops in flight). */
#ifndef SPD_MOVER_NCCL_INTERNAL_H
#define SPD_MOVER_NCCL_INTERNAL_H

#include "mover_nccl.h"

#ifdef SPC_HAVE_NCCL

#include <nccl.h>

enum { SET_INIT, SET_READY };

typedef struct nccl_job nccl_job;

/* Communicators over one set of GPUs, with a stream per GPU. Every op on
 * the set goes through these streams, so ops on a communicator are issued
 * in one order on every device (NCCL requires it). Making, destroying and
 * aborting the communicators can block (on the GPUs, on the other ranks),
 * so each runs on libuv's thread pool in set->work, one at a time, the
 * loop thread hearing of it in the work's after callback. A set taken
 * down (`down`) stays in gpu->nccl_sets, unused, until its communicators
 * are gone; a new set on any of its GPUs waits for that (`deferred`), so
 * an aborted clique's work there is over before a new clique's starts. */
typedef struct spd_nccl_set {
  struct spd_nccl_set *next;
  uint64_t id;                /* > 0, unique among the GPU state's sets */
  spd_gpu *gpu;               /* NULL once the GPU state is gone (stop):
                               * the pool's callbacks then take the set
                               * down and free it alone */
  spd_ctx *ctx;               /* the loop and the log; outlives gpu */
  int n;
  int *devs;                  /* ascending; NCCL rank i is on devs[i] */
  ncclComm_t *comms;
  cudaStream_t *streams;
  int state;
  int deferred;               /* SET_INIT, its init not queued yet: a set
                               * sharing a GPU is being taken down */
  int broken;                 /* aborted: no new work; freed when the
                               * abort is done and its last job finished */
  int down;                   /* its communicators are being destroyed or
                               * aborted on the pool */
  int down_abort;             /* ncclCommAbort, else ncclCommDestroy */
  ncclResult_t down_rc;       /* the first failure of it, */
  int down_dev;               /* on this GPU */
  nccl_job *inflight;         /* jobs on the streams, oldest last */
  int ungated;                /* of them, queued without a gate
                               * (mover_nccl_gate.c): no turn recorded */
  ncclResult_t init_rc;
  uv_work_t work;
  nccl_job *waiting, **wait_tail; /* ops that came during the init */
} spd_nccl_set;

struct nccl_job {
  spd_gpu_job job;            /* first: the job callbacks get this struct */
  spd_work *w;
  spd_nccl_set *set;          /* may be freed before the job (failed init) */
  int ndev;
  int *rank_dev;              /* rank -> index in set->devs */
  void **host;                /* per device: its descriptors */
  nccl_job *next_wait;
  nccl_job *next_in;          /* in set->inflight */
  int in_flight;
  uint64_t start_ms;          /* uv_now when its work was queued */
  /* Gated (mover_nccl_gate.c): its ranks' ready waits on a probe stream
   * of GPU probe_dev, until the loop hears they passed. */
  struct spd_nccl_gates *gates;
  cudaStream_t probe;
  int probe_dev;
  int gate_status;            /* the probe's cudaError_t */
  nccl_job *next_fired;
  int ungated;                /* counted in set->ungated */
  int published;              /* w->priv is this job (spd_nccl_on_streams):
                               * its work item lives until the job's end */
};

/* Whether sets a and b have a GPU in common. */
int spd_nccl_sets_overlap(const spd_nccl_set *a, const spd_nccl_set *b);
/* "0,1,3": the set's GPUs, for messages. */
void spd_nccl_set_str(const spd_nccl_set *set, char *buf, size_t len);
void spd_nccl_set_free(spd_nccl_set *set);
/* An NCCL failure of `call` over the set's GPUs, as err (SPK_EDEVICE). */
int spd_nccl_err(int rc_nccl, const char *call, const spd_nccl_set *set,
                 spk_err *err);
/* The set over the GPUs of dev[0..world) (each once), made (its init
 * queued on the pool) when there is none usable. */
int spd_nccl_set_get(spd_gpu *gpu, const int *dev, int world,
                     spd_nccl_set **set_p, spk_err *err);
/* Queue nj's plan on its ready set's streams (mover_nccl.c). */
int spd_nccl_run(nccl_job *nj, spk_err *err);
/* Destroy (abort: abort) the set's communicators on the pool. Once that
 * is done the set leaves gpu->nccl_sets, the sets waiting for it start
 * their init, and the set is freed with its streams when no job of it
 * is in flight (else by spd_nccl_inflight_remove, at its last). */
void spd_nccl_set_down(spd_nccl_set *set, int abort);
/* Destroy the set's streams (those made) and free it: its communicators
 * are gone and no job of it is in flight. */
void spd_nccl_set_dispose(spd_nccl_set *set);

/* nj's work is on the set's streams: the watchdog watches it until
 * spd_nccl_inflight_remove (which frees a set aborted meanwhile once its
 * last job is out). */
void spd_nccl_inflight_add(nccl_job *nj);
void spd_nccl_inflight_remove(nccl_job *nj);
/* Close the watchdog's timer (at GPU teardown). */
void spd_nccl_watch_stop(spd_gpu *gpu);

/* Sets sharing a GPU take turns on it (mover_nccl_gate.c). shared:
 * another usable set shares one of set's GPUs. gate: the job goes on once
 * its ranks are ready, through spd_nccl_run_turn; < 0: not gated, err
 * says why. turn_wait/turn_end: set's work on its i-th GPU (current) waits
 * for, and then is, the last turn there. turns_forget: an aborted set's
 * turns are not waited for. gates_stop: at GPU teardown. */
int spd_nccl_shared(const spd_nccl_set *set);
int spd_nccl_gate(nccl_job *nj, spk_err *err);
int spd_nccl_turn_wait(spd_nccl_set *set, int i, spk_err *err);
int spd_nccl_turn_end(spd_nccl_set *set, int i, spk_err *err);
void spd_nccl_turns_forget(spd_nccl_set *set);
void spd_nccl_gates_stop(spd_gpu *gpu);
/* Queue a gated job's work, taking its turns (mover_nccl.c); < 0: nothing
 * queued, the job is the caller's to fail. */
int spd_nccl_run_turn(nccl_job *nj, spk_err *err);

#endif /* SPC_HAVE_NCCL */
#endif
