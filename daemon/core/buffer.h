/* Buffers shared by a client: host memory (a sealed memfd mapped once) or
 * device memory (a CUDA IPC mapping, gpu_ipc.c). A buffer is referenced by
 * its owning session and by every op that uses it, so the mapping outlives
 * a client that goes away mid-op. Loop thread only. */
#ifndef SPD_BUFFER_H
#define SPD_BUFFER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "daemon.h"
#include "engine.h"
#include "gpu_ipc.h"
#include "status.h"

typedef enum { SPD_BUF_HOST = 0, SPD_BUF_DEVICE = 1 } spd_buffer_kind;

typedef struct spd_buffer {
  TAILQ_ENTRY(spd_buffer) link;   /* in the owner's list */
  uint64_t id;
  uint8_t *base;                  /* device buffers: the daemon's device
                                   * address of the first byte */
  size_t size;
  int refs;
  void *engine_state[SPD_ENGINE_COUNT]; /* each engine's own (the ucx
                                   * row: the UCX registration, made on
                                   * first send), dropped through the
                                   * table when the buffer goes */
  spd_buffer_kind kind;
  int device;                     /* device buffers: the daemon's CUDA
                                   * ordinal of their GPU */
  void *gpu_mem;                  /* device buffers: the IPC mapping */
  spd_gpu_closed_fn closed;       /* device buffers released while an op
                                   * still held them: told once the
                                   * mapping is closed (the release's
                                   * answer waits for it) */
  void *closed_arg;
  int stream_flags;               /* host buffers: registered to hold
                                   * stream flags (an engine opened them) */
  uint64_t counts_seen[3];        /* stream flags: the client's counts
                                   * (kernels/stream_flags.h) last added */
  uint64_t file_dev, file_ino;    /* host buffers: the memfd's identity.
                                   * Two registrations of one memfd (the
                                   * same client twice, or two clients it
                                   * was passed to) are one memory: the
                                   * overlap check of ops keys on these */
} spd_buffer;

/* Check that fd is a memfd sealed against shrinking whose size is exactly
 * `size`, and map it. Always consumes fd. */
int spd_buffer_map(spd_ctx *ctx, int fd, uint64_t size, spd_buffer **buf_p,
                   spk_err *err);

/* Map [offset, offset + size) of a client's device allocation, named by
 * its CUDA IPC handle and its GPU's UUID (gpu_ipc.c: opened once per
 * allocation). SPK_EUNSUPPORTED when the daemon has no CUDA or no such
 * GPU. */
int spd_buffer_open_device(spd_ctx *ctx, const uint8_t *handle, size_t hlen,
                           const uint8_t *uuid, size_t ulen, uint64_t offset,
                           uint64_t size, spd_buffer **buf_p, spk_err *err);

/* The buffer for [base, base + size) of a device mapping already open
 * (mem, from spd_gpu_vmm_open's answer): takes mem's reference, which
 * failure drops. */
int spd_buffer_of_device(spd_ctx *ctx, void *mem, uint8_t *base, int dev,
                         uint64_t size, spd_buffer **buf_p, spk_err *err);

void spd_buffer_ref(spd_buffer *buf);
/* Drop a reference; the last one unmaps (or closes the IPC mapping) and
 * frees. */
void spd_buffer_unref(spd_ctx *ctx, spd_buffer *buf);
/* The same for a release: 1 when fn(arg) follows, once the device
 * mapping is closed after the call: a cuMem one is unmapped on the thread
 * pool, and a device buffer an op still holds is closed when that op
 * drops it. 0 (host memory, or closed now): fn is not called. */
int spd_buffer_unref_then(spd_ctx *ctx, spd_buffer *buf,
                          spd_gpu_closed_fn fn, void *arg);

/* A stream flags buffer's counts: what grew since the last look added to
 * ctx's counters (a count that shrank is the client's scribble: it only
 * resets the look). Nothing for other buffers. */
void spd_buffer_counts_harvest(spd_ctx *ctx, spd_buffer *buf);
/* At registration: the counts a client brings from before (it counts for
 * its whole life; a reconnect registers a new buffer) are not new. */
void spd_buffer_counts_seed(spd_buffer *buf);

/* Check that [offset, offset + bytes) lies inside the buffer. */
int spd_buffer_check_range(const spd_buffer *buf, uint64_t offset,
                           uint64_t bytes, const char *what, spk_err *err);

#endif
