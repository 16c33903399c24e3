/* Host buffers shared by a client: a sealed memfd mapped once. A buffer is
 * referenced by its owning session and by every op that uses it, so the
 * mapping outlives a client that goes away mid-op. Loop thread only. */
#ifndef SPD_BUFFER_H
#define SPD_BUFFER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "daemon.h"
#include "status.h"

typedef struct spd_buffer {
  TAILQ_ENTRY(spd_buffer) link;   /* in the owner's list */
  uint64_t id;
  uint8_t *base;
  size_t size;
  int refs;
  void *peer_memh;                /* UCX registration, made on first send */
} spd_buffer;

/* Check that fd is a memfd sealed against shrinking whose size is exactly
 * `size`, and map it. Always consumes fd. */
int spd_buffer_map(spd_ctx *ctx, int fd, uint64_t size, spd_buffer **buf_p,
                   spk_err *err);

void spd_buffer_ref(spd_buffer *buf);
/* Drop a reference; the last one unmaps and frees. */
void spd_buffer_unref(spd_ctx *ctx, spd_buffer *buf);

/* Drop the buffer's UCX registration (peer.c), before it is unmapped. */
void spd_peer_buffer_release(spd_ctx *ctx, spd_buffer *buf);

/* Check that [offset, offset + bytes) lies inside the buffer. */
int spd_buffer_check_range(const spd_buffer *buf, uint64_t offset,
                           uint64_t bytes, const char *what, spk_err *err);

#endif
