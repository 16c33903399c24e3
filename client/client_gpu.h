/* libspclient's GPU internals (client_gpu.c, client_gpu_op.c) and the hooks
 * the host code calls. Not installed. */
#ifndef SPC_CLIENT_GPU_H
#define SPC_CLIENT_GPU_H

#include <stdint.h>

#include "client_gpu_cu.h"
#include "client_internal.h"
#include "plan_cuda.h"
#include "stream_flags.h"

/* The CUDA driver, loaded once per process: NULL (with why in the
 * client's or this thread's error) when libcuda.so.1 cannot be loaded or
 * initialized. */
const spc__cu_api *spc__cu(spc_client *c);
/* Name a driver result for messages. */
const char *spc__cu_str(const spc__cu_api *cu, spc__CUresult r);

/* One cuMem mapping: where it is, and the physical allocation mapped
 * there (CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID). */
typedef struct {
  uint64_t base, size, block;
} spc__gpu_chunk;

/* A device allocation registered with the daemon (whole, once), shared by
 * every spc_buffer inside it. cuMem memory registers the run of mappings
 * under a buffer instead (chunks), and a later buffer inside that run,
 * with the same physical allocations, shares it. */
typedef struct spc__gpu_alloc {
  struct spc__gpu_alloc *next;
  uint64_t base, size;
  uint64_t alloc_id;          /* CU_POINTER_ATTRIBUTE_BUFFER_ID */
  uint64_t daemon_id;         /* the daemon's buffer */
  int device, refs;
  int free_mem;               /* at disconnect: cuMemFree once released */
  spc__gpu_chunk *chunks;     /* cuMem memory; NULL: legacy IPC */
  int nchunks;
} spc__gpu_alloc;

/* client_gpu_vmm.c: the cuMem mappings holding [p, p + size), in address
 * order (at most SPK_VMM_MAX_CHUNKS, each on `device` and exportable as a
 * file descriptor, else a failure naming why). */
int spc__gpu_vmm_chunks(spc_client *c, const spc__cu_api *cu, uint64_t p,
                        size_t size, int device, spc__gpu_chunk *out,
                        int *n_p);
/* Each chunk's allocation exported as a POSIX file descriptor into fds
 * (the caller closes them); on failure none is left open. */
int spc__gpu_vmm_export(spc_client *c, const spc__cu_api *cu,
                        const spc__gpu_chunk *ch, int n, int *fds);
/* Whether a's chunks hold ch[0..n) in a row (same mappings, same
 * physical allocations). */
int spc__gpu_vmm_covers(const spc__gpu_alloc *a, const spc__gpu_chunk *ch,
                        int n);

struct spc__sym;

/* spc_buffer->gpu of a device buffer. */
typedef struct {
  spc__gpu_alloc *alloc;
  uint64_t off;               /* of the buffer's first byte in the alloc */
  int owned;                  /* made by spc_buffer_alloc_device: freed */
  struct spc__sym *sym;       /* spc_buffer_alloc_symmetric's, or NULL */
} spc__gpu_buf;

/* A device's stream events: a pool of interprocess event pairs, each
 * pair's handles sent with an op and reused round-robin. */
#define SPC__GPU_EVENTS 32
typedef struct {
  int device;
  spc__CUdevice cudev;
  spc__CUcontext ctx;         /* the primary context, retained */
  int nev;                    /* pairs made so far */
  int next;
  spc__CUevent ready[SPC__GPU_EVENTS], done[SPC__GPU_EVENTS];
  spc__CUipcEventHandle ready_h[SPC__GPU_EVENTS], done_h[SPC__GPU_EVENTS];
  uint64_t req[SPC__GPU_EVENTS]; /* request that last used the pair */
  int memops;                 /* 64-bit stream memory operations: 0 not
                               * asked, 1 yes, -1 no */
  /* The GPU movers' kernel, for symmetric buffers (client_gpu_sym_kernel.c):
   * 0 not loaded yet, 1 loaded, -1 cannot be (why in kernel_why). */
  int kernel_state;
  spc__CUmodule module;
  spc__CUfunction kernel;
  int sms;
  char kernel_why[160];
} spc__gpu_dev;

/* The client's stream flags (client_gpu_flags.c): one host buffer of
 * SPC__FLAG_SLOTS slots, shared by its GPUs. */
#define SPC__FLAG_SLOTS SPK_SFLAG_SLOTS
typedef struct {
  int state;                  /* 0 not tried, 1 in use, -1 events */
  spc_buffer *buf;            /* registered with the daemon for flags */
  uint64_t *words;            /* slot k: ready [2k], done [2k + 1] */
  spc__CUdeviceptr dev;       /* the words as the GPUs address them */
  uint64_t seq;               /* the last one handed out */
  unsigned next;              /* where the search for a free slot starts */
  uint64_t slot_seq[SPC__FLAG_SLOTS];
  uint64_t slot_req[SPC__FLAG_SLOTS]; /* its op's request until answered */
  spc_gpu_paths base;         /* the client's counts when it was made: it
                               * holds those since (each op counted once) */
} spc__gpu_flags;

/* spc_client->gpu. */
typedef struct {
  spc__gpu_alloc *allocs;
  spc__gpu_dev *devs;
  int ndevs;
  spc__gpu_flags flags;
  spc_gpu_paths paths;   /* spc_gpu_path_stats */
} spc__gpu_client;

/* The driver if it is already loaded, else NULL: for paths that must not
 * load it (freeing). */
const spc__cu_api *spc__cu_if_loaded(void);
/* The driver (loaded now if need be) and the client's GPU state: SPC_OK,
 * or SPC_EUNSUPPORTED / SPC_ENOMEM with the reason said. */
int spc__gpu_begin(spc_client *c, const spc__cu_api **cu_p,
                   spc__gpu_client **g_p);
/* The client's state for device `device` (made on first use). */
int spc__gpu_dev_get(spc_client *c, int device, spc__gpu_dev **d_p);
/* Push / pop a device's primary context around driver calls. */
int spc__gpu_push(spc_client *c, const spc__cu_api *cu, spc__CUcontext ctx);
void spc__gpu_pop(const spc__cu_api *cu);

/* ---- hooks of the host code ------------------------------------------- */

/* The offset the daemon knows for byte `offset` of buffer b. */
uint64_t spc__gpu_wire_offset(const spc_buffer *b, uint64_t offset);
/* Free a device buffer (spc_buffer_free). */
int spc__gpu_buffer_free(spc_buffer *b);
/* At disconnect: forget device buffer b; the last of an allocation releases
 * it with the daemon (while the connection works) and then frees memory
 * the library allocated. The caller frees b. */
void spc__gpu_buffer_forget(spc_buffer *b);
/* After a daemon restart (client_restart.c): every device allocation
 * registered with the new daemon, the buffers on their new ids. */
int spc__gpu_register_again(spc_client *c);
/* At disconnect, after the buffers: events, contexts. */
void spc__gpu_client_free(spc_client *c);

/* An op on device tensors: the ready event recorded on stream (NULL: the
 * legacy default stream) and both handles put in rq. ev->dev is -1 for
 * host tensors (nothing done). */
typedef struct {
  spc__gpu_dev *dev;
  int slot;
  uint32_t flag_slot1;        /* stream flags: the slot + 1; 0 events */
  uint64_t flag_seq;
  Spcoll__StreamFlags sf;     /* rq->stream_flags points here */
} spc__gpu_opev;
int spc__gpu_op_events(spc_client *c, const spc_tensor *in, void *stream,
                       Spcoll__OpRequest *rq, spc__gpu_opev *ev);
/* The request the events or flags went with. */
void spc__gpu_op_sent(spc_client *c, const spc__gpu_opev *ev,
                      spc_request *req);

/* Whether every piece of work queued on stream is complete (so the daemon
 * may touch the tensors at once); never for the NULL and per-thread
 * default streams. Call with the stream's context current. */
int spc__gpu_stream_idle(const spc__cu_api *cu, void *stream);

/* ---- stream flags (client_gpu_flags.c) -------------------------------- */

/* The client's path counts (spc_gpu_path_stats) copied where the daemon
 * reads them (kernels/stream_flags.h), when it has a flags buffer. */
void spc__gpu_counts_publish(spc_client *c);
/* Whether ops on d go with stream flags (set up on first use); 0: events. */
int spc__gpu_flags_usable(spc_client *c, spc__gpu_dev *d);
/* The op's slot: its ready flag set on stream after the work queued
 * there, and rq->stream_flags filled (from sf). */
int spc__gpu_flags_ready(spc_client *c, spc__gpu_dev *d, void *stream,
                         Spcoll__OpRequest *rq, Spcoll__StreamFlags *sf,
                         spc__gpu_opev *ev);
/* The slot's op went as req; NULL: its send failed, and the slot's done
 * flag is set from here (no daemon will). */
void spc__gpu_flags_sent(spc_client *c, const spc__gpu_opev *ev,
                         spc_request *req);
/* Queue on stream the wait for req's done flag. */
int spc__gpu_flags_wait(spc_client *c, spc_request *req, void *stream);
/* req's answer came (or the caller took it): its slot is free once both
 * words show it, and a failure sets the done flag from here. */
void spc__gpu_flags_answered(spc_client *c, const spc_request *req);
/* At disconnect, before the buffers go: every answer taken, the client's
 * streams past their waits, the words unregistered from CUDA. */
void spc__gpu_flags_free(spc_client *c);

/* ---- symmetric buffers (client_gpu_sym.c, client_gpu_sym_op.c) ------- */

/* Bytes of flags words in front of each rank's symmetric buffer. */
#define SPC__SYM_HDR 256
/* Copy calls one rank's part of an op may take, and the largest group;
 * past them the op goes to the daemon. */
#define SPC__SYM_MAX_COPIES 64
#define SPC__SYM_MAX_WORLD 64

/* One copy of an op's part: height rows of width bytes (1: a plain one). */
typedef struct {
  spc__CUdeviceptr src, dst;
  uint64_t width, height, spitch, dpitch;
} spc__sym_copy;

/* An op as every rank's planner sees it, and where its tensors are:
 * compared bytewise (made with its padding zeroed). */
typedef struct {
  spk_op_args a;
  uint64_t in_off, out_off;
  int lists;                  /* the op came with size lists */
} spc__sym_key;

/* An op the kernel runs (reductions, scaled copies), kept with its key:
 * this rank's steps as the kernel's descriptors, in pinned host memory
 * the GPU reads (client_gpu_sym_kernel.c). Kept until the buffer goes: a
 * queued launch may still read them. */
typedef struct {
  spc__sym_key key;
  void *host;
  size_t bytes;
  spk_claunch launch[2];      /* reduce steps, then copies */
  int mid;                    /* every rank's reduce steps done before any
                               * copy: the plan's copies read outputs */
  uint64_t bytes_in;          /* what its steps write into this rank */
  int failed;                 /* this rank could not make it */
} spc__sym_launch;
#define SPC__SYM_LAUNCHES 16

typedef struct spc__sym {
  spc_group *group;           /* the group it was allocated over */
  int rank, world;
  spc__CUcontext ctx;
  spc__CUdeviceptr own;       /* this rank's allocation (flags first) */
  spc__CUdeviceptr *peer;     /* every rank's, as this process maps it */
  int refs;                   /* the buffer's, and its requests' */
  int freed;                  /* the buffer was freed (its requests may
                               * outlive it) */
  int mapped;                 /* this rank mapped every rank's */
  int usable;                 /* every rank did: ops may take the path */
  int kernel;                 /* every rank can launch the kernel */
  spc__CUfunction fn;         /* this rank's copy of it, and its GPU's */
  int sms;                    /* multiprocessors */
  char why[256];              /* why not */
  uint64_t seq;               /* ops queued on it */
  /* The last op's copies (its key), kept for a repeat. */
  spc__sym_key key;
  int has_key, key_ok;
  spc__sym_copy *copies;
  int ncopies;
  int cur;                    /* the kept key's launch, -1: its copies */
  spc__sym_launch *launches;  /* SPC__SYM_LAUNCHES, made on first use */
  int nlaunches;
} spc__sym;

/* client_gpu_sym_kernel.c. Whether d's context has the kernel (loaded on
 * first ask); 0 with d->kernel_why. */
int spc__sym_kernel_ready(spc_client *c, const spc__cu_api *cu,
                          spc__gpu_dev *d);
/* Plan p's steps landing in this rank as s->launches[s->nlaunches]
 * (keyed k), with bases[rank * SPK_T_COUNT + t] every rank's tensor t as
 * this process maps it: 1 made, 0 no room (the op goes to the daemon),
 * < 0 failed. */
int spc__sym_kernel_plan(spc_client *c, spc__sym *s, const spk_plan *p,
                         uint8_t *const *bases, const spc__sym_key *k);
/* Queue launch phase ph (0, 1) of L on st, with s's GPU's geometry. */
spc__CUresult spc__sym_kernel_run(const spc__cu_api *cu, const spc__sym *s,
                                  const spc__sym_launch *L, int ph,
                                  spc__CUstream st);
/* At disconnect: the kernel's module unloaded (in d's context). */
void spc__sym_kernel_unload(const spc__cu_api *cu, spc__gpu_dev *d);
/* The kept launches' memory, once no launch can read it. */
void spc__sym_kernel_free(const spc__cu_api *cu, spc__sym *s);

/* An op on a symmetric buffer of g, taken by the symmetric path: 1 with
 * *req_p (done; spc__sym_wait waits for its stream) and *rc_p, or 1 with
 * *rc_p < 0 on failure; 0 when it goes to the daemon. */
int spc__sym_try(spc_group *g, const spc_op *op, const spc_tensor *in,
                 const spc_tensor *out, void *stream, spc_request **req_p,
                 int *rc_p);
/* spc_wait (block 1) or spc_test (0) of such a request: its stream
 * synchronized or queried (*done_p). */
int spc__sym_wait(spc_request *req, int block, int *done_p);
/* spc_wait_on_stream of such a request on another stream than its op's:
 * that stream's wait for every rank's done word of the op queued. */
int spc__sym_wait_on_stream(spc_request *req, void *stream);
/* A symmetric request is freed: its hold on its buffer's state goes. */
void spc__sym_req_done(spc_request *req);
/* g is being left: its symmetric buffers take no op any more (freed
 * later, without a collective). */
void spc__sym_group_gone(spc_client *c, spc_group *g);
/* At the buffer's free: this rank's streams past its ops, the others'
 * mappings closed, and (collective) every rank's closed, through an op of
 * the group (not at a disconnect, where the group may be gone). */
int spc__sym_free(spc_client *c, spc__sym *s, int collective);

/* spc_start with an explicit stream (client_op.c). */
int spc__start(spc_group *g, const spc_op *op, const spc_tensor *in,
               const spc_tensor *out, void *stream, spc_request **req_p);

#endif
