/* libspclient's public API, continued: tensors in CUDA device memory.
 * Included by spcoll.h (users include that one); exported like the rest
 * of it. */
#ifndef SPCOLL_GPU_H
#define SPCOLL_GPU_H

#ifndef SPCOLL_H
#error "include spcoll.h, which includes spcoll_gpu.h"
#endif

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

/* ---- GPU: tensors in CUDA device memory -----------------------------
 * Buffers may be CUDA device memory; the daemon then moves their tensors on
 * the GPU: one batched copy kernel when a group's tensors share a GPU, NCCL
 * communicators it owns across GPUs. libspclient has no link-time CUDA
 * dependency: it loads the driver (libcuda.so.1, or $SPCOLL_LIBCUDA) on the
 * first device call, and these calls fail with SPC_EUNSUPPORTED, saying
 * why, when it cannot, or when the daemon has no GPU or no CUDA.
 *
 * Memory must come from cudaMalloc / cuMemAlloc (shared through legacy
 * CUDA IPC) or from cuMemCreate + cuMemMap with POSIX file descriptors
 * allowed (shared as descriptors: spc_buffer_register_device); stream-
 * ordered pools (cudaMallocAsync) and managed memory are not covered.
 * An op's tensors must be all host or all device memory, each
 * rank's two on one GPU, aligned to their element size. Groups that span
 * nodes take device tensors too: between nodes their bytes go through
 * pinned host memory, or straight from device memory where the node's
 * UCX moves CUDA memory (spcolld's xnode_direct).
 *
 * Stream order, queue and return: where the GPU has 64-bit stream memory
 * operations (and spcolld too), spc_start_on_stream sets a flag on the
 * caller's stream that the daemon's work waits for, and
 * spc_wait_on_stream queues on the stream the wait for the daemon's flag
 * and returns at once: neither call waits for the GPU or for the daemon,
 * and the caller's next kernels queue while the op runs. The op's answer
 * is taken when it comes; a failure is returned by the client's next op
 * call (the op failed on every rank, so every rank hears it there) or by
 * spc_async_error. A failed op still releases the stream (its output is
 * then undefined), as an NCCL op does. Otherwise (no such operations, or
 * SPCOLL_GPU_ORDER=events) the order goes through interprocess events and
 * spc_wait_on_stream blocks the host until the daemon answers, returning
 * the op's status; `spcollctl stats` counts which way ranks were ordered
 * (gpu_order_flags, gpu_order_events). spc_start / spc_run
 * on device tensors order on the legacy default stream: work issued
 * before them on blocking streams is waited for, work on non-blocking
 * streams (cudaStreamNonBlocking, such as PyTorch's) is not: use the
 * _on_stream forms there. spc_wait returns once the daemon's work is done.
 *
 * CUDA is not fork-safe: do not fork after the first device call and use
 * CUDA in the child. */

/* A cudaStream_t (CUstream) of the calling process; NULL: the legacy
 * default stream of the tensors' GPU. */
typedef void *spc_stream;

/* The number of CUDA devices this process sees (initializes the driver).
 * SPC_EUNSUPPORTED when it cannot be loaded or finds none; the message is
 * in spc_last_error(NULL). */
int spc_gpu_probe(int *ndev_p);

/* Register [ptr, ptr + size) of device memory as a buffer. The allocation
 * holding it (cuMemGetAddressRange) is registered with the daemon once
 * (cudaIpcGetMemHandle of its base) and shared by every buffer inside it
 * until the last is freed. spc_buffer_data gives ptr back (a device
 * address). Free the buffers of an allocation before the memory itself.
 *
 * Memory of CUDA's virtual memory management (cuMemCreate + cuMemMap, as
 * torch's expandable segments make it), which legacy IPC cannot share:
 * the run of mappings under [ptr, ptr + size) is registered instead, each
 * physical allocation exported as a POSIX file descriptor (it must have
 * been created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR among its
 * requestedHandleTypes; SPC_EINVAL names it otherwise), at most 64
 * allocations per buffer. A later buffer inside that run, over the same
 * physical allocations, shares the registration. Descriptors also reach a
 * daemon in another PID namespace. The daemon keeps what it mapped alive
 * until the buffer is freed, even if the caller unmaps it first. */
int spc_buffer_register_device(spc_client *client, void *ptr, size_t size,
                               spc_buffer **buf_p);

/* The whole device range the daemon registered for device buffer buf
 * (the allocation, or the run of cuMem mappings, holding it): a buffer
 * registered anywhere inside it shares that registration, with no call to
 * the daemon. SPC_EINVAL for host buffers. */
int spc_buffer_device_range(const spc_buffer *buf, void **base_p,
                            size_t *size_p);

/* Allocate `size` bytes on `device` (a CUDA ordinal of this process),
 * zero-filled, and register them. spc_buffer_free frees the memory too,
 * and fails with SPC_EINVAL while other buffers are registered inside it. */
int spc_buffer_alloc_device(spc_client *client, int device, size_t size,
                            spc_buffer **buf_p);

/* The CUDA ordinal of a device buffer's GPU; -1 for host memory. */
int spc_buffer_device(const spc_buffer *buf);

/* ---- symmetric buffers ------------------------------------------------
 * Device memory every rank of a group allocates alike and maps from every
 * other rank (CUDA IPC), so that an op on it runs on the ranks' own
 * streams, with no daemon between a trainer's kernels: each rank writes
 * what lands in its output, reading the other ranks' memory (copies:
 * cuMemcpyAsync, cuMemcpy2DAsync; reductions and scaled copies: the GPU
 * movers' kernel, which the library carries), between barriers of stream
 * memory operations on flags words of every rank's buffer (every rank's
 * input written before anyone reads it; every rank done reading before
 * anything after the op runs). spc_start_on_stream returns once that is
 * queued; spc_wait_on_stream then queues nothing on the op's stream (on
 * another, the waits for every rank's end of the op), and spc_wait
 * synchronizes the op's stream (spc_test queries it). Ops on the group,
 * symmetric or not, must be issued in the same order on every rank, and
 * an op on a symmetric buffer with the same arguments (shapes, offsets)
 * on every rank.
 *
 * Which path runs (decided by each rank from its arguments, so the same
 * on every rank): the symmetric path for ops with no size lists and every
 * rank's output of one shape (split, all_gather, all_to_all, all_reduce,
 * reduce_scatter, the zigzag ops, scaled or not; reductions and scaled
 * copies where every rank could load the kernel), tensors as
 * spc_tensor_init checks them, input and output in one symmetric buffer
 * at offsets that do not overlap, the group the buffer was allocated
 * over, at most 64 copy calls per rank (rows of a strided block are one
 * 2-D copy); anything else goes to the daemon as an op on any device
 * buffer. Arguments are not checked against the other ranks' on this
 * path: as with NCCL, ranks whose arguments differ may wait forever.
 * Counted per client (spc_gpu_path_stats) and in the daemon's stats, as
 * clients report them. Security: every rank of the group may read and
 * write every rank's symmetric buffer. docs/gpu-symmetric.md. */

/* Allocate `size` bytes of symmetric device memory on `device` for every
 * rank of group: collective (every rank calls it, at the same point of
 * the group's ops, with the same size; SPC_EMISMATCH otherwise). The
 * buffer is a device buffer as spc_buffer_alloc_device makes (zero-filled,
 * registered, freed by spc_buffer_free, which first waits for this rank's
 * streams). Where some rank cannot map the others' memory or lacks stream
 * memory operations (or sets SPCOLL_GPU_SYMMETRIC=0), every rank's buffer
 * works through the daemon alone; spc_buffer_symmetric says why. Free it
 * before leaving the group. */
int spc_buffer_alloc_symmetric(spc_group *group, int device, size_t size,
                               spc_buffer **buf_p);

/* 1 when ops on buf may take the symmetric path, with what still goes to
 * the daemon in why ("" when nothing); 0 with why not (len bytes at
 * most). */
int spc_buffer_symmetric(const spc_buffer *buf, char *why, size_t len);

/* Device ops of a client, by path. */
typedef struct {
  uint64_t sym_ops;           /* run on the symmetric path */
  uint64_t sym_bytes;         /* bytes those wrote into this rank */
  uint64_t sym_daemon_ops;    /* on symmetric buffers, sent to the daemon */
} spc_gpu_paths;
int spc_gpu_path_stats(const spc_client *client, spc_gpu_paths *st);

/* spc_start ordered on `stream`: the daemon reads in and writes out only
 * after the work queued on stream before this call. For host tensors the
 * stream is ignored. */
int spc_start_on_stream(spc_group *group, const spc_op *op,
                        const spc_tensor *in, const spc_tensor *out,
                        spc_stream stream, spc_request **req_p);

/* Work queued on stream after this call runs after the daemon's accesses
 * to this rank's tensors; frees the request and sets *req to NULL. With
 * stream flags it returns once that wait is queued (SPC_OK, or the op's
 * status if its answer is already here); with events it waits for the
 * daemon's answer and returns the op's status (see Stream order). */
int spc_wait_on_stream(spc_request **req, spc_stream stream);

/* The first failure among ops whose answers spc_wait_on_stream left to
 * come, returned once (with spc_last_error saying which op and why);
 * SPC_OK when none failed. wait 0: only answers already received; 1: waits
 * for every outstanding answer (each comes once the daemon's work on the
 * op is done). */
int spc_async_error(spc_client *client, int wait);

/* spc_start_on_stream, then spc_wait_on_stream. */
int spc_run_on_stream(spc_group *group, const spc_op *op, const spc_tensor *in,
                      const spc_tensor *out, spc_stream stream);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif

#endif
