/* The submission ring (kernels/submit_ring.h): the client's op frames go
 * into a host buffer of its own that the daemon maps, not onto the
 * socket; the socket carries a kick only when the daemon's loop may be
 * asleep. So ops issued while the daemon is awake (back to back, or
 * while it queues earlier ones) cost no system call. Made by
 * client_buffer.c's spc__ring_make, at a join or an op's start, one per
 * connection; SPCOLL_SUBMIT_RING=0 keeps every frame on the socket. Ops
 * still answer on the socket. This file only puts records: the
 * connection (client_conn.c) sends the kicks. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client_internal.h"
#include "submit_ring.h"

int spc__ring_wanted(spc_client *c) {
  if (c->ring_mode == 0) {
    const char *e = getenv("SPCOLL_SUBMIT_RING");
    c->ring_mode = e != NULL && strcmp(e, "0") == 0 ? -1 : 1;
  }
  return c->ring_mode > 0 && c->ring == NULL;
}

/* Room for a record of `need` bytes at the head: its start (after a skip
 * record where it would pass the ring's end), or -1 when the daemon has
 * not taken enough yet. */
static int64_t ring_room(spc_client *c, uint64_t cap, uint32_t need) {
  spk_sring_hdr *h = c->ring->data;
  uint64_t head = c->ring_head, pos = head % cap;
  uint64_t skip = pos + need > cap ? cap - pos : 0;
  uint64_t tail = SPK_SRING_LOAD(&h->tail, __ATOMIC_ACQUIRE);
  if (head + skip + need - tail > cap)
    return -1;
  if (skip > 0) {
    uint32_t rec[2] = {SPK_SRING_SKIP, 0};
    memcpy((uint8_t *)c->ring->data + SPK_SRING_HDR + pos, rec, sizeof(rec));
    c->ring_head = head + skip;
    return 0;
  }
  return (int64_t)pos;
}

/* The record published: 2 when the daemon had armed the ring (the
 * caller kicks it on the socket), 1 else, -1 when the daemon had let the
 * ring go (nobody takes the record). */
static int ring_publish(spc_client *c, uint64_t head) {
  spk_sring_hdr *h = c->ring->data;
  SPK_SRING_STORE(&h->head, head, __ATOMIC_RELEASE);
  c->ring_head = head;
  SPK_SRING_FENCE(__ATOMIC_SEQ_CST);
  if (SPK_SRING_LOAD(&h->closed, __ATOMIC_ACQUIRE) != 0)
    return -1;
  if (SPK_SRING_LOAD(&h->armed, __ATOMIC_RELAXED) == 0)
    return 1;
  SPK_SRING_STORE(&h->armed, 0, __ATOMIC_RELAXED);
  return 2;
}

int spc__ring_ready(spc_client *c, const Spcoll__Frame *f) {
  return f->body_case == SPCOLL__FRAME__BODY_OP && c->ring != NULL;
}

int spc__ring_put(spc_client *c, Spcoll__Frame *f) {
  uint64_t cap = spk_sring_cap(c->ring->size);
  size_t n = spcoll__frame__get_packed_size(f);
  uint32_t need = SPK_SRING_REC + spk_sring_pad((uint32_t)n);
  if (n == 0 || n > cap / 4) /* a long size list: the socket */
    return 0;
  int64_t pos = ring_room(c, cap, need);
  if (pos < 0)
    return 0;
  uint8_t *at = (uint8_t *)c->ring->data + SPK_SRING_HDR + pos;
  uint32_t rec[2] = {(uint32_t)n, c->frames_sent};
  memcpy(at, rec, sizeof(rec));
  spcoll__frame__pack(f, at + SPK_SRING_REC);
  return ring_publish(c, c->ring_head + need);
}

/* A new connection: the old ring is dropped here (a new one is made for
 * it: the old daemon may still write this one's words while it drains),
 * unknown to the new daemon, which never had it. */
void spc__ring_reset(spc_client *c) {
  c->frames_sent = 0;
  c->ring_mode = 0; /* asked again, and made at the next join or op */
  spc_buffer *b = c->ring;
  if (b == NULL)
    return;
  c->ring = NULL;
  c->ring_head = 0;
  for (spc_buffer **p = &c->buffers; *p != NULL; p = &(*p)->next)
    if (*p == b) {
      *p = b->next;
      break;
    }
  munmap(b->data, b->size);
  close(b->memfd);
  free(b);
}
