/* spcsim: a strict CUDA/NCCL simulator for CI machines without a GPU.
 * libspcsim.so holds the state every front library shares (devices,
 * device memory in memfds, IPC, streams with a worker thread each,
 * events, kernels run on the host); libcudart.so.13, libcuda.so.1 and
 * libnccl.so.2 are thin fronts compiled against the real headers.
 * Misuse that CUDA or NCCL document as undefined or erroneous is a
 * violation: one line "spcsim: RULE <id>: <call>: <detail>" on stderr,
 * then abort (SPCSIM_ON_VIOLATION=continue only logs it). */
#ifndef SPCSIM_H
#define SPCSIM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SIM_MAX_DEV 16
#define SIM_HDR 4096 /* shared header page before device memory */

/* Error codes the core returns; the fronts map them to their own enums
 * (equal to cudaError_t values where one exists). */
enum {
  SIM_OK = 0,
  SIM_EINVAL = 1,        /* cudaErrorInvalidValue */
  SIM_ENOMEM = 2,        /* cudaErrorMemoryAllocation */
  SIM_EDEVICE = 101,     /* cudaErrorInvalidDevice */
  SIM_EHANDLE = 400,     /* cudaErrorInvalidResourceHandle */
  SIM_ENOTREADY = 600,   /* cudaErrorNotReady */
  SIM_EMAPFAIL = 205,    /* cudaErrorMapBufferObjectFailed */
  SIM_EPEERON = 704,     /* cudaErrorPeerAccessAlreadyEnabled */
  SIM_ENOPEER = 217,     /* cudaErrorPeerAccessUnsupported */
  SIM_ELAUNCH = 719,     /* cudaErrorLaunchFailure */
  SIM_ENOKERNEL = 98,    /* cudaErrorInvalidDeviceFunction */
  SIM_ECONFIG = 9,       /* cudaErrorInvalidConfiguration */
  SIM_EILLEGAL = 700,    /* cudaErrorIllegalAddress: sticky, see sim_poison */
  SIM_EREGISTERED = 712, /* cudaErrorHostMemoryAlreadyRegistered */
  SIM_ENOTREGISTERED = 713, /* cudaErrorHostMemoryNotRegistered */
  SIM_ENOTSUP = 801         /* cudaErrorNotSupported */
};

/* ---- core: config, devices, rules ---------------------------------- */

typedef struct {
  int ndev;
  uint64_t mem_limit; /* bytes per device */
  int sms;
  /* SPCSIM_NO_PEER: bit t of nopeer[f]: GPU f cannot reach GPU t's
   * memory directly (symmetric pairs, "0-1,2-3"). */
  uint32_t nopeer[SIM_MAX_DEV];
  int no_memops; /* SIM_MEMOPS_*, from SPCSIM_NO_STREAM_MEM_OPS */
} sim_config;

/* Stream memory operations the GPUs have: all (the default); none
 * (SPCSIM_NO_STREAM_MEM_OPS=1: attributes 0, calls not supported); all
 * but the deprecated v1 API (=v1: its plain entry points and *_V1
 * attributes, as a driver loaded without NVreg_EnableStreamMemOPs=1). */
enum { SIM_MEMOPS_ALL, SIM_MEMOPS_NONE, SIM_MEMOPS_NO_V1 };

const sim_config *sim_cfg(void);
/* Report a broken rule; aborts unless SPCSIM_ON_VIOLATION=continue. */
void sim_violation(const char *rule, const char *call, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Rules this thread has broken so far (they matter under
 * SPCSIM_ON_VIOLATION=continue, where the call goes on). */
int sim_violations_here(void);
/* A device fault (an illegal address) ends this process's use of CUDA,
 * as on a GPU: from now on every call that needs the context fails with
 * SIM_EILLEGAL, in every thread, and cudaGetLastError does not clear it;
 * queued work is dropped. Only a new process starts clean (a forked child
 * of a poisoned process is clean too: it is another process). The reason
 * is said on stderr once. */
void sim_poison(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* SIM_EILLEGAL when this process is poisoned, else e. */
int sim_sticky(int e);
/* Per-thread current device (cudaSetDevice, context push/pop). */
int sim_cur_dev(void);
void sim_set_cur_dev(int dev);
void sim_uuid(int dev, uint8_t out[16]);
/* Bytes of device dev in use, across processes sharing SPCSIM_STATE. */
int sim_dev_reserve(int dev, uint64_t bytes);
void sim_dev_unreserve(int dev, uint64_t bytes);
uint64_t sim_dev_used(int dev);
/* A device attribute the simulator does not model: 0, said on stderr once
 * per process and attribute (torch asks for many at start). */
void sim_attr_unmodelled(const char *call, int attr);
/* Whether GPU from may reach GPU to's memory directly at all (the
 * topology: SPCSIM_NO_PEER). */
int sim_peer_possible(int from, int to);
/* Devices dev has enabled peer access to (cudaDeviceEnablePeerAccess). */
int sim_peer_enabled(int from, int to);
int sim_peer_enable(int from, int to);
void sim_leak_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A call that needs dev's primary context made this process create it (as
 * CUDA does lazily: cudaSetDevice since CUDA 12, allocations, streams,
 * events, IPC, memory pools). The first time per device and process it is
 * appended as "pid dev" to SPCSIM_CONTEXT_LOG, so a test can see on which
 * GPUs a process holds a context (each costs real GPU memory). */
void sim_ctx_touch(int dev);
/* Whether the environment variable names this program: "1" (every
 * program) or its short name (e.g. spcolld). */
int sim_applies_here(const char *var);
/* Rule host-sync: under SPCSIM_FORBID_SYNC (=1 or a program's short
 * name, spcolld in simrun.sh) the program's main thread must never make a
 * call that may block the host on the GPU or on other ranks: that thread
 * runs its event loop (spcolld's uv_run, daemon/main.c), which every
 * client's requests wait on. Other threads (libuv's thread pool, where
 * spcolld makes NCCL communicators, say) may block: the contract is the
 * thread, not the call. Each such entry point calls this first; `how`
 * says how the call blocks ("waits for the GPU"). A violation on the main
 * thread, nothing elsewhere. */
void sim_no_block(const char *call, const char *how);
/* SPCSIM_FAIL_LAUNCH=PROGRAM:N: the Nth kernel launch of PROGRAM fails
 * (cudaErrorInvalidConfiguration, as a bad launch does), to test how a
 * failure in the middle of queueing an op is handled. */
int sim_launch_should_fail(void);
/* SPCSIM_FAULT_LAUNCH=PROGRAM:N: the Nth kernel launch of PROGRAM is
 * queued normally and faults when it runs (an illegal address), which
 * poisons the process (sim_poison). PROGRAM:N:once: only in the first
 * process of PROGRAM that gets there, across SPCSIM_STATE (one fault on
 * the machine; the daemon that replaces a faulted one runs clean). The
 * same suffix works for SPCSIM_FAIL_LAUNCH. */
int sim_launch_should_fault(void);

/* ---- memory ----------------------------------------------------------- */

/* PINNED: cudaMallocHost/cudaHostAlloc memory the simulator mapped;
 * HOSTREG: the caller's memory registered with cudaHostRegister (never
 * unmapped by the simulator). Both are host memory the GPUs reach at the
 * same address (unified addressing). VMM: one cuMemMap mapping of a
 * cuMemCreate allocation (sim_vmm.c), device memory of the allocation's
 * GPU that a GPU reaches only once cuMemSetAccess granted it. */
enum {
  SIM_M_DEVICE,
  SIM_M_IMPORT,
  SIM_M_POOL,
  SIM_M_PINNED,
  SIM_M_HOSTREG,
  SIM_M_VMM
};

static inline int sim_is_host(int kind) {
  return kind == SIM_M_PINNED || kind == SIM_M_HOSTREG;
}

/* The shared header of a cudaMalloc allocation (first page of its memfd). */
#define SIM_IMPORTERS 64
#define SIM_MHDR_MAGIC 0x73706373696d4d45ull /* "spcsimME" */
typedef struct {
  uint64_t magic;
  uint64_t id;
  int32_t dev, exporter;
  uint64_t size;
  int32_t importers; /* processes holding it open beyond importer[] */
  int32_t freed;
  /* The processes that hold it open (0: a free slot). The driver closes
   * a process's imports when it exits: a dead one does not count. */
  int32_t importer[SIM_IMPORTERS];
} sim_mhdr;

/* Processes that hold allocation hdr open, the dead ones not counted. */
int sim_importers_live(sim_mhdr *hdr);

typedef struct sim_map {
  struct sim_map *next;
  int kind; /* SIM_M_* */
  int slot; /* IMPORT: its slot in hdr->importer, -1 the overflow count */
  int dev;
  uint8_t *ptr; /* what the API hands out */
  uint64_t size;
  uint8_t *map; /* the mmap (header included) */
  uint64_t map_size;
  sim_mhdr *hdr; /* DEVICE, IMPORT */
  int fd;        /* DEVICE: the memfd, for importers */
  uint64_t ino;
  int peer_lazy; /* IMPORT: opened with lazy peer access */
  /* IMPORT: the device whose context opened it, and how many opens of
   * the handle in that context it stands for (CUDA counts them: a second
   * open returns the same pointer, each close takes one back). */
  int ctx_dev;
  int refs;
  uint64_t buffer_id;
  /* VMM: the physical allocation's process-wide id
   * (CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID; other kinds use buffer_id),
   * the handle types it may be exported as, and the GPUs granted access
   * by cuMemSetAccess: bit d of access, and of readonly when only for
   * reading (both written and read atomically). */
  uint64_t block_id;
  int handle_types;
  uint32_t access, readonly;
} sim_map;

int sim_malloc(int dev, uint64_t size, void **p_out);
int sim_free(void *p, const char *call);
int sim_malloc_pool(int dev, uint64_t size, void **p_out);
void sim_free_pool_now(void *p);
int sim_host_alloc(uint64_t size, void **p_out);
int sim_host_free(void *p);
/* cudaHostRegister: [p, p+size) must be mapped in this process and
 * overlap no other registration or allocation (SIM_EREGISTERED). */
int sim_host_register(void *p, uint64_t size);
/* cudaHostUnregister: p must be the base of a registration
 * (SIM_ENOTREGISTERED). */
int sim_host_unregister(void *p);
/* cudaHostGetDevicePointer: host memory the GPUs reach has the same
 * address there; anything else is SIM_EINVAL. */
int sim_host_device_ptr(void *p, void **dev_p);
/* Whether [p, p+len) is in one mapping, or in cuMem (VMM) mappings laid
 * back to back (a GPU sees one range there, as CUDA's do); *m_out is a
 * snapshot copy of the mapping holding p. */
int sim_lookup(const void *p, uint64_t len, sim_map *m_out);
/* Whether device `dev` may dereference mapping m (a snapshot; for VMM
 * memory only that mapping: sim_check_access covers a whole range). */
int sim_accessible(const sim_map *m, int dev);
/* Whole-range check for a device access; violation when not allowed. */
void sim_check_access(const void *p, uint64_t len, int dev, const char *call);
/* The check of a copy or memset touching [p, p+len) (device memory or
 * not): cuMem (VMM) memory no GPU was granted (cuMemSetAccess) is out of
 * every copy engine's reach, a violation (access-from-device). */
void sim_check_copy(const void *p, uint64_t len, const char *call);
/* For sim_vmm.c: record m (given a buffer id) / forget it, under the
 * memory lock; a new process-wide id (buffer and memory block ids). */
void sim_map_add(sim_map *m);
void sim_map_remove(sim_map *m);
uint64_t sim_new_id(void);
/* The lock of the mapping records, for the code outside sim_mem.c that
 * looks through them (sim_ipc.c): the first record (->next: the others),
 * the one holding [p, p+len), unlinking one. */
void sim_maps_lock(void);
void sim_maps_unlock(void);
sim_map *sim_maps_first_locked(void);
sim_map *sim_maps_find_locked(const void *p, uint64_t len);
void sim_maps_unlink_locked(sim_map *m);
/* munmap itself, past the interposed check (sim_munmap). */
int sim_raw_munmap(void *p, size_t len);
int sim_pool_set_access(int pool_dev, int dev, int on);

typedef struct {
  char reserved[64];
} sim_handle64;
int sim_ipc_get(const void *p, sim_handle64 *h, const char *call);
int sim_ipc_open(const sim_handle64 *h, int lazy_peer, void **p_out,
                 const char *call);
int sim_ipc_close(void *p, const char *call);
int sim_range(const void *p, uint8_t **base_p, uint64_t *size_p);
/* munmap with the device-memory check (cudart.c interposes munmap). */
int sim_munmap(void *addr, size_t len);
/* The inode of this process's PID namespace (/proc/self/ns/pid), or 0
 * when it cannot be told (said on stderr). Legacy CUDA IPC handles carry
 * their exporter's: CUDA opens them only in the same PID namespace. */
uint64_t sim_pidns(void);
/* Whether a handle exported from PID namespace `exporter` (0: unknown)
 * is opened in another one, said on stderr for call (what: "memory",
 * "event"); the open then fails with SIM_EMAPFAIL. */
int sim_ipc_pidns_differs(uint64_t exporter, const char *what,
                          const char *call);

/* ---- virtual memory management (sim_vmm.c) --------------------------------
 * cuMemCreate allocations are memfds with a shared header page (magic,
 * global id, GPU, size, handle types), so one exported as a file
 * descriptor maps in any process that receives it. A handle value stands
 * for one physical allocation in this process, with a count of
 * references (cuMemCreate, cuMemImportFromShareableHandle,
 * cuMemRetainAllocationHandle each add one, cuMemRelease takes one); each
 * cuMemMap mapping holds the allocation too, which lives until both are
 * gone. Reservations (cuMemAddressReserve) are PROT_NONE mappings that
 * cuMemMap maps into and cuMemUnmap gives back. The allocation creating
 * process counts it against its GPU (sim_dev_reserve) while it lives
 * there. Allocation sizes, and mappings' addresses, sizes and offsets,
 * are multiples of SIM_VMM_GRAN (reservations: of the host page). */
#define SIM_VMM_GRAN ((uint64_t)2 << 20)
enum { SIM_VMM_FD = 1 }; /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */
typedef struct {
  int dev;
  int flags; /* 0 none, 1 read, 3 read-write (CUmemAccess_flags) */
} sim_vmm_access;
int sim_vmm_create(int dev, uint64_t size, int handle_types, uint64_t *h_out);
int sim_vmm_release(uint64_t h, const char *call);
int sim_vmm_reserve(uint64_t size, uint64_t align, uint64_t hint,
                    void **p_out);
int sim_vmm_addr_free(void *p, uint64_t size, const char *call);
int sim_vmm_map(void *p, uint64_t size, uint64_t offset, uint64_t h);
int sim_vmm_unmap(void *p, uint64_t size);
int sim_vmm_set_access(void *p, uint64_t size, const sim_vmm_access *a,
                       int n);
int sim_vmm_get_access(const void *p, int dev, int *flags_out);
int sim_vmm_retain(const void *p, uint64_t *h_out);
int sim_vmm_props(uint64_t h, int *dev_out, int *handle_types_out);
int sim_vmm_export_fd(uint64_t h, int *fd_out);
int sim_vmm_import_fd(int fd, uint64_t *h_out, const char *call);
/* The reservation holding p (CU_POINTER_ATTRIBUTE_RANGE_*), SIM_EINVAL
 * when none does. */
int sim_vmm_reservation(const void *p, uint8_t **base_p, uint64_t *size_p);
/* Whether [p, p+len) overlaps a reservation (munmap's check). */
int sim_vmm_overlaps(const void *p, uint64_t len, uint8_t **base_p);
/* Between sim_vmm.c and sim_vmm_resv.c: whether [p, p+len) is within one
 * reservation; the reservation takes [p, p+size) back (PROT_NONE; -1
 * after saying why, for call); the first mapping in [p, p+len), or NULL;
 * the reservations' part of the leak report. */
int sim_vmm_in_reservation(const void *p, uint64_t len);
int sim_vmm_give_back(void *p, uint64_t size, const char *call);
uint8_t *sim_vmm_mapped_in(const void *p, uint64_t len);
void sim_vmm_resv_leaks(void);

/* ---- streams and events ------------------------------------------------ */

typedef struct sim_stream sim_stream;
/* SPCSIM_SLOW_STREAMS's delay for this process's streams, as of now. */
uint64_t sim_slow_streams(void);
typedef struct sim_event sim_event;
typedef void (*sim_op_fn)(void *arg, int *status);

/* NULL: the legacy default stream of the current device. */
sim_stream *sim_stream_resolve(sim_stream *s);
int sim_stream_create(int dev, unsigned flags, sim_stream **s_p);
int sim_stream_destroy(sim_stream *s);
int sim_stream_dev(sim_stream *s);
/* Queue fn(arg) on s; it runs on the stream's worker in order. free_arg:
 * free(arg) after it ran. */
int sim_enqueue(sim_stream *s, sim_op_fn fn, void *arg, int free_arg);
int sim_stream_sync(sim_stream *s);
int sim_stream_query(sim_stream *s);
int sim_device_sync(int dev);
/* Host callback with the stream's status. */
int sim_stream_callback(sim_stream *s, void (*cb)(void *, int, void *),
                        void *arg);
/* Called by an op while it runs on its stream's worker: on (1) while it
 * waits for something outside the stream that may never come (a stream
 * memory wait), off (0) after. cudaStreamDestroy of a stream so blocked
 * returns at once, as CUDA's does, instead of waiting for it. */
void sim_stream_blocked(int on);

/* ---- stream memory operations (sim_memop.c) ------------------------------
 * cuStreamWriteValue32/64, cuStreamWaitValue32/64, cuStreamBatchMemOp on
 * device memory (own, imported, pool) or host memory the GPUs reach,
 * also across processes. Sizes 4 or 8; flags are the driver's
 * (CU_STREAM_WAIT_VALUE_*, CU_STREAM_WRITE_VALUE_*). */
enum { SIM_MEMOP_WAIT, SIM_MEMOP_WRITE };
typedef struct {
  int kind; /* SIM_MEMOP_* */
  int size; /* 4 or 8 */
  uint64_t addr, value;
  unsigned flags;
} sim_memop;
/* Check ops[0..n) (each address mapped, aligned, reachable from the
 * stream's GPU; flags known), then queue them all on s in order; nothing
 * is queued when one is wrong. SIM_ENOTSUP without stream memory
 * operations (SPCSIM_NO_STREAM_MEM_OPS). */
int sim_memops(sim_stream *s, const sim_memop *ops, int n, const char *call);

enum { SIM_EV_NOTIMING = 2, SIM_EV_IPC = 4 };
int sim_event_create(int dev, unsigned flags, sim_event **e_p,
                     const char *call);
int sim_event_destroy(sim_event *e, const char *call);
int sim_event_record(sim_event *e, sim_stream *s);
int sim_stream_wait(sim_stream *s, sim_event *e);
int sim_event_sync(sim_event *e);
int sim_event_query(sim_event *e);
int sim_event_elapsed(float *ms, sim_event *a, sim_event *b);
int sim_event_ipc_get(sim_event *e, sim_handle64 *h, const char *call);
int sim_event_ipc_open(const sim_handle64 *h, sim_event **e_p,
                       const char *call);

/* Copies: synchronous ones wait; pageable host memory in an async copy
 * makes it synchronous (CUDA's behaviour), a violation under
 * SPCSIM_FORBID_PAGEABLE_ASYNC=1. */
int sim_memcpy(void *dst, const void *src, uint64_t n, sim_stream *s, int async,
               const char *call);
int sim_memset(void *dst, int v, uint64_t n, sim_stream *s, int async,
               const char *call);
/* An async copy of height rows of width bytes, each pitch apart (device
 * or pinned memory on both sides); SIM_EINVAL for a pitch below width. */
int sim_memcpy2d(void *dst, uint64_t dpitch, const void *src, uint64_t spitch,
                 uint64_t width, uint64_t height, sim_stream *s,
                 const char *call);

/* ---- kernels --------------------------------------------------------------
 */

typedef struct {
  unsigned x, y, z;
} sim_dim3;
void **sim_register_fatbin(void *fatbin);
void sim_unregister_fatbin(void **h);
void sim_register_function(void **h, const char *host_fun,
                           const char *device_name);
int sim_get_kernel(void **k_p, const void *host_fun);
/* The kernel whose device (mangled) name is name, for the driver's
 * modules: SIM_ENOKERNEL when it has no host build. */
int sim_kernel_named(void **k_p, const char *name);
int sim_launch(const void *host_fun_or_kernel, int is_kernel, sim_dim3 grid,
               sim_dim3 block, void **args, size_t shmem, sim_stream *s);
void sim_push_config(sim_dim3 grid, sim_dim3 block, size_t shmem, void *s);
int sim_pop_config(sim_dim3 *grid, sim_dim3 *block, size_t *shmem, void **s);

/* ---- last error (the runtime's, per thread) ------------------------------ */

int sim_set_last(int e); /* returns e */
/* The sticky error of a poisoned process (sim_poison), whatever clear. */
int sim_get_last(int clear);

#endif
