/* The daemon's GPU state (ctx->gpu), made on the first device
 * registration: the devices it sees, CUDA IPC mappings and events opened
 * once and cached, stream pools, and the jobs the GPU movers hand to CUDA
 * streams with their completion delivered on the loop thread. Loop thread
 * only, but for the stream callbacks of gpu_job.c. Only files built with
 * GPU_CFLAGS include this (it needs cuda_runtime.h). */
#ifndef SPD_GPU_H
#define SPD_GPU_H

#ifdef SPC_HAVE_CUDA

#include <cuda_runtime.h>
#include <stdint.h>

#include "daemon.h"
#include "gpu_desc.h"
#include "gpu_ipc.h"

#define SPD_GPU_MAX_DEV 64
#define SPD_GPU_HANDLE 64 /* bytes of a CUDA IPC memory or event handle */

typedef struct {
  uint8_t uuid[16];
  int sms;                     /* multiprocessors: sizes kernel launches */
  cudaStream_t *streams;       /* free streams of the pool */
  int nstreams, cap;
  int opened;                  /* the daemon has a context here */
  void **stage_free;           /* pinned staging chunks kept for reuse */
  int nstage_free, stage_cap;
  size_t stage_size;           /* bytes of each */
  long long staged;            /* bytes of them reserved now */
  int memops;                  /* 64-bit stream memory operations: 0 not
                                * asked yet, 1 yes, -1 no */
  /* NCCL sets' turns here (mover_nccl_gate.c): an event recorded after the
   * last gated job's work on this GPU, and its set's id (0: none). */
  cudaEvent_t nccl_tail;
  uint64_t nccl_tail_set;
} spd_gpu_dev;

/* An allocation of a client, opened with cudaIpcOpenMemHandle or mapped
 * from cuMem file descriptors (gpu_vmm.c). */
typedef struct spd_gpu_mem {
  struct spd_gpu_mem *next;
  uint8_t handle[SPD_GPU_HANDLE];
  int dev;
  uint8_t *base;
  uint64_t size;               /* 0: cuMemGetAddressRange could not tell */
  int refs;                    /* buffers registered on it */
  int orphan;                  /* closed at exit under buffers still
                                * held: the last unref frees it */
  struct spd_gpu_vmm *vmm;     /* cuMem allocations (gpu_vmm.c); NULL: a
                                * legacy IPC mapping of `handle` */
} spd_gpu_mem;

/* Unmap m's cuMem allocations on libuv's thread pool (m is then free to
 * go); fn(arg), when not NULL, once they are unmapped. */
void spd_gpu_vmm_close(spd_gpu_mem *m, spd_gpu_closed_fn fn, void *arg);

/* A client's IPC event, opened with cudaIpcOpenEventHandle; cached per
 * session, least recently used first out. */
typedef struct spd_gpu_event {
  struct spd_gpu_event *prev, *next;
  uint64_t session;
  uint8_t handle[SPD_GPU_HANDLE];
  int dev;
  cudaEvent_t ev;
  int refs;                    /* op ranks holding it */
  void *mem;                   /* the IPC mapping it came with: the event
                                * is closed with it (gpu_ipc.c) */
} spd_gpu_event;

struct spd_nccl_set;
struct spd_nccl_gates;
typedef struct spd_desc_cache spd_desc_cache;
typedef struct spd_desc_entry spd_desc_entry;

typedef struct spd_gpu {
  spd_ctx *ctx;
  int ndev;
  spd_gpu_dev dev[SPD_GPU_MAX_DEV];
  spd_gpu_mem *mems;
  spd_gpu_event *ev_head, *ev_tail; /* most recently used first */
  int nevents;
  int range_warned;            /* cuMemGetAddressRange unavailable: said */
  int lost;                    /* a device fault ended the context
                                * (gpu_lost.c): device work is refused */
  char lost_why[160];
  uint64_t lost_asked_ns;      /* when a new daemon was last asked for */
  struct spd_nccl_set *nccl_sets;
  uint64_t nccl_set_ids;       /* the last id given to a set */
  struct spd_nccl_gates *nccl_gates; /* mover_nccl_gate.c */
  struct spd_nccl_watch *nccl_watch; /* mover_nccl.c's watchdog */
  struct spd_gpu_pinned *pinned; /* free pinned blocks, for uploads */
  int npinned;
  /* Pinned memory given back to CUDA off the loop thread (gpu_ctx.c). */
  struct spd_gpu_reaper *reaper;
  /* Stream memory operations (gpu_flags.c), looked up on the first stream
   * flags buffer: the driver's entry points, or why there are none. */
  int memops_looked;
  void *write64, *wait64, *attr;
  char memops_why[160];
  spd_desc_cache *descs;       /* gpu_desc_cache.c */
} spd_gpu;

/* A client's stream flags buffer, registered with CUDA (the cuda row's
 * state of the buffer). */
typedef struct {
  uint8_t *host;               /* the daemon's mapping */
  uint64_t dev;                /* the same words as the GPUs address them */
  size_t size;
} spd_gpu_flags;

/* Per rank of an op on device tensors: its stream events (the state the
 * GPU engines keep of a rank's request, spd_work.rank_state). */
typedef struct {
  spd_gpu_event *ready, *done;
  int dev;                     /* the rank's GPU */
  int recorded;                /* done was recorded (or its flag written) */
  /* Stream flags instead of events: the slot's words and the op's seq. */
  spd_gpu *gpu;
  uint64_t seq;                /* 0: events */
  uint64_t ready_dev, done_dev;
  uint64_t *ready_host, *done_host;
} spd_gpu_rank;

/* ctx->gpu, made on first use. SPK_EUNSUPPORTED naming why when CUDA
 * finds no device; SPK_EDEVICE naming the fault once the context is lost
 * (gpu_lost.c). */
int spd_gpu_get(spd_ctx *ctx, spd_gpu **gpu_p, spk_err *err);

/* Whether CUDA error e (a cudaError_t) is one after which the process's
 * CUDA context is lost for good (gpu_lost.c). */
int spd_gpu_error_sticky(int e);
/* After a GPU op failed or was refused: 1 when the daemon's CUDA context
 * is lost, found by asking each GPU it uses. The first time it is said
 * and counted (gpu_contexts_lost); a new spcolld is asked for
 * (spd_core_up.restart), again while none has taken over or is starting,
 * at most once a second. */
int spd_gpu_lost_check(spd_gpu *gpu);
/* After a GPU op failed with msg (len bytes): the same check, and when the
 * context is lost, msg says so. */
void spd_gpu_lost_say(spd_gpu *gpu, char *msg, size_t len);

/* Release everything but the IPC mappings (gpu_ipc.c closes those) and
 * free gpu: the end of spd_gpu_free. The pinned memory goes back to CUDA
 * on libuv's thread pool after gpu is gone (the loop runs until it has). */
void spd_gpu_state_free(spd_gpu *gpu);

/* The daemon's ordinal of the GPU with this UUID. */
int spd_gpu_dev_of_uuid(spd_gpu *gpu, const uint8_t *uuid, size_t len,
                        int *dev_p, spk_err *err);

/* The driver's entry point sym (its CUDA 12 version), or NULL with why
 * (len bytes) filled unless it already says something (gpu_driver.c). */
void *spd_gpu_driver_entry(const char *sym, char *why, size_t len);

/* "set device" with the call named on failure. */
int spd_gpu_set_device(int dev, spk_err *err);
/* Make dev current, setting it up on its first use (gpu_ctx.c). Called
 * when a buffer on dev is first opened: every GPU a group uses. */
int spd_gpu_dev_open(spd_gpu *gpu, int dev, spk_err *err);

/* A stream of dev's pool (made when the pool is empty); put it back when
 * the work on it is done. */
int spd_gpu_stream_get(spd_gpu *gpu, int dev, cudaStream_t *s_p,
                       spk_err *err);
void spd_gpu_stream_put(spd_gpu *gpu, int dev, cudaStream_t s);

/* The client's event `handle` of session on dev, opened once; put drops
 * the reference the open gave. `mem` is the IPC mapping of the op's
 * tensor it came with: when that mapping closes (the client released its
 * buffers, which it does before destroying its events), the event is
 * closed too, so no client event dies while the daemon holds it open. */
int spd_gpu_event_open(spd_gpu *gpu, uint64_t session, const uint8_t *handle,
                       int dev, void *mem, spd_gpu_event **ev_p,
                       spk_err *err);
void spd_gpu_event_put(spd_gpu_event *ev);
/* Close the cached events that came with mapping mem (held ones are only
 * detached from it). */
void spd_gpu_events_drop_mem(spd_gpu *gpu, void *mem);

/* ---- stream flags (gpu_flags.c) ----------------------------------------- */

/* Register a client's stream flags buffer [base, base + size) with CUDA
 * (portable and mapped: every GPU's streams reach its words) and look up
 * the driver's stream memory operations; *state gets the spd_gpu_flags.
 * SPK_EUNSUPPORTED, saying why, without a GPU or those operations. */
int spd_gpu_flags_open(spd_ctx *ctx, uint8_t *base, size_t size,
                       void **state, spk_err *err);
void spd_gpu_flags_close(void **state);
/* Whether dev's streams may wait on and write 64-bit words (asked once
 * per GPU); SPK_EUNSUPPORTED naming the GPU otherwise. */
int spd_gpu_flags_dev_ok(spd_gpu *gpu, int dev, spk_err *err);
/* Queue on s: wait until the word at device address `word` >= seq; set
 * it to seq (after the stream's earlier work). */
int spd_gpu_flag_wait(spd_gpu *gpu, cudaStream_t s, uint64_t word,
                      uint64_t seq, int rank, spk_err *err);
int spd_gpu_flag_write(spd_gpu *gpu, cudaStream_t s, uint64_t word,
                       uint64_t seq, int rank, spk_err *err);

/* ---- descriptors kept on the GPUs (gpu_desc_cache.c) ------------------ */

/* The kept copy on dev of these `size` descriptor bytes, held for the
 * caller (put it when its job is done); NULL when none. *hash_p: the
 * bytes' hash, for spd_gpu_desc_keep. */
spd_desc_entry *spd_gpu_desc_find(spd_gpu *gpu, int dev, const void *host,
                                  size_t size, uint64_t *hash_p);
/* Keep d (dev's stream-ordered allocation, holding these bytes) for the
 * ops to come, held for the caller; NULL when it is not kept (too large,
 * the cache full of held entries): the caller frees d itself then. Idle
 * entries evicted to make room are freed in the order of stream s. */
spd_desc_entry *spd_gpu_desc_keep(spd_gpu *gpu, int dev, void *d,
                                  const void *host, size_t size,
                                  uint64_t hash, cudaStream_t s);
void *spd_gpu_desc_dev(const spd_desc_entry *e);
/* The holder's job is done; ok: its streams ran without error (the first
 * holder's upload is then on the GPU, and the entry serves others). */
void spd_gpu_desc_put(spd_desc_entry *e, int ok);
/* At shutdown, no job running. */
void spd_gpu_desc_cache_free(spd_gpu *gpu);

/* ---- jobs: work on CUDA streams, finished on the loop thread ---------- */

typedef struct spd_gpu_job spd_gpu_job;
#define SPD_GPU_MARKS 6
/* The job's report: SPK_OK, or an SPK_E* and why; on the loop thread. */
typedef void (*spd_gpu_done_cb)(void *arg, int status, const char *msg);
/* The mover's cleanup when every stream of the job is done (streams back
 * to their pools, host memory freed); runs on the loop thread. */
typedef void (*spd_gpu_job_fn)(spd_gpu_job *job);

struct spd_gpu_job {
  uv_async_t async;            /* signalled by the last stream callback */
  spd_gpu *gpu;
  spd_gpu_done_cb done;
  void *arg;
  const char *name;            /* for the log: the group and op */
  uint64_t seq;
  spd_gpu_job_fn finish;
  int pending;                 /* stream callbacks outstanding, + 1 until
                                * spd_gpu_job_arm */
  int status;                  /* first cudaError_t a callback saw */
  int fail_status;             /* an SPK_E* the mover found late */
  char fail_msg[256];
  /* Where an op's time on the GPU path goes (debug log at completion):
   * made, armed (all queued), last stream callback (a CUDA thread). */
  uint64_t t_init_ns, t_armed_ns, t_streams_ns;
  /* At debug level, timing events at the stages of one stream's work
   * (spd_gpu_job_mark): the GPU time between them is logged. */
  int nmarks, marks_stopped;
  cudaEvent_t mark[SPD_GPU_MARKS];
  const char *mark_name[SPD_GPU_MARKS];
};

/* Initialize job (the mover's struct starts with it) on the loop; done(arg,
 * status, msg) reports it once every stream is done. name and seq say
 * whose work it is in the log. */
int spd_gpu_job_init(spd_gpu *gpu, spd_gpu_job *job, spd_gpu_done_cb done,
                     void *arg, const char *name, uint64_t seq,
                     spd_gpu_job_fn finish, spk_err *err);
/* Count the work queued on s so far as the job's (a stream callback). */
int spd_gpu_job_watch(spd_gpu_job *job, cudaStream_t s, spk_err *err);
/* At debug level, a timing event on s named for the stage that ends here;
 * the first mark starts the count. Nothing otherwise, and a failure only
 * stops the marks (they are for the log). */
void spd_gpu_job_mark(spd_gpu_job *job, cudaStream_t s, const char *stage);
/* Every stream is watched: the job completes once their work is done. */
void spd_gpu_job_arm(spd_gpu_job *job);
/* Complete the job at once with an error for every rank (the mover found
 * it after submission succeeded; nothing of it is on a stream). */
void spd_gpu_job_fail(spd_gpu_job *job, int status, const char *msg);
/* A submission failed after queueing work on streams[0..n) (NULL entries
 * skipped): that work reads the op's buffers, so the op must outlive it.
 * Rather than waiting on the loop thread, the job watches the streams and
 * completes, failed with status and msg, once they are done; the mover
 * reports the submission as made and the op fails through its done path. */
void spd_gpu_job_fail_after(spd_gpu_job *job, const cudaStream_t *streams,
                            int n, int status, const char *msg);
/* Forget a job that was never armed and has nothing queued (submission
 * failed): frees it without calling done. */
void spd_gpu_job_drop(spd_gpu_job *job);

/* Make each rank's ready event (or ready flag) a dependency of s;
 * ranks[r] is rank r's spd_gpu_rank or NULL (world of them). */
int spd_gpu_wait_ready(void *const *ranks, int world, cudaStream_t s,
                       spk_err *err);
/* A failed op's ready waits let go from the host: each flag-ordered
 * rank's ready flag raised to the op's seq (never lowered), so the
 * daemon's streams run past the wait of a rank whose stream will never
 * get there, and the op's work ends (aborted, or with undefined outputs)
 * instead of holding the daemon's streams and the healthy ranks' answers
 * for ever. Only while every rank's stream still waits for the op's done
 * flag, which its work writes last (nothing, once one was let go): none
 * of them runs on meanwhile. A rank ordered by an event cannot be let go
 * this way. */
void spd_gpu_release_ready(void *const *ranks, int world);
/* Record the done event (or write the done flag) of every rank on `dev`
 * on stream s. partial (spd_work.partial): no done flag, the op goes on
 * after this (events are recorded again by the later steps). */
int spd_gpu_record_done(void *const *ranks, int world, int dev, int partial,
                        cudaStream_t s, spk_err *err);

/* Pinned host memory for descriptors on their way up: an async copy
 * from pageable memory would be synchronous, and the loop thread would
 * wait for the clients' streams (their ready events) before it. Blocks
 * are kept for reuse; put them back once the copy is done (the job's
 * finish). Those beyond the kept number go back to CUDA on libuv's
 * thread pool (cudaFreeHost synchronizes the device). */
int spd_gpu_pinned_get(spd_gpu *gpu, size_t bytes, void **p_out,
                       spk_err *err);
void spd_gpu_pinned_put(spd_gpu *gpu, void *p);

/* Pinned chunks of `size` bytes staging device tensors across nodes
 * (engine/xnode_stage.c), n of them into bufs: reserved against dev's
 * bound `cap` (bytes reserved at once; SPK_ENO_MEMORY naming the
 * xnode_staging_bytes key past it) and kept for reuse when put back (the
 * host no longer uses them; the daemon may write into a chunk put back). */
int spd_gpu_stage_get(spd_gpu *gpu, int dev, int n, size_t size,
                      long long cap, void **bufs, spk_err *err);
void spd_gpu_stage_put(spd_gpu *gpu, int dev, void **bufs, int n);

/* Stream-ordered allocation on s's device (cudaMallocAsync), and the
 * copy of host descriptors into it; free with cudaFreeAsync on s after
 * the work that uses it. */
int spd_gpu_alloc(cudaStream_t s, size_t bytes, void **dev_p, spk_err *err);
int spd_gpu_copy_up(cudaStream_t s, void *dev, const void *host, size_t bytes,
                    spk_err *err);

/* One launch on s (the current device, with sms multiprocessors) of the
 * list spk_cdesc_pack laid out for L, with plan p's dtype, scale and
 * reduce op. */
int spd_gpu_launch(const spk_plan *p, spk_claunch *L, int sms, cudaStream_t s,
                   spk_err *err);

#endif /* SPC_HAVE_CUDA */
#endif
