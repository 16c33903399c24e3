/* The submission ring (kernels/submit_ring.h): the client's op frames go
 * into a host buffer of its own that the daemon maps, not onto the
 * socket; the socket carries a kick only when the daemon's loop may be
 * asleep. So ops issued while the daemon is awake (back to back, or
 * while it queues earlier ones) cost no system call. Made at the
 * client's first group join; SPCOLL_SUBMIT_RING=0 keeps every frame on
 * the socket. Ops still answer on the socket. */
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "submit_ring.h"

#define RING_BYTES (64u << 10)

static int ring_mode(spc_client *c) {
  if (c->ring_mode == 0) {
    const char *e = getenv("SPCOLL_SUBMIT_RING");
    c->ring_mode = e != NULL && strcmp(e, "0") == 0 ? -1 : 1;
  }
  return c->ring_mode;
}

/* Made at a group join, not at an op: its registration is a request of
 * its own, which may find the daemon gone and revive the client, and an
 * op's frame already names the old daemon's handles. A ring the daemon
 * will not take leaves this connection on the socket; its failure is not
 * the join's. */
void spc__ring_make(spc_client *c) {
  if (c->ring != NULL || ring_mode(c) < 0)
    return;
  char saved[sizeof(c->last_error)];
  memcpy(saved, c->last_error, sizeof(saved));
  spc_buffer *b;
  if (spc__buffer_alloc(c, RING_BYTES, SPC__BUF_RING, &b) < 0) {
    memcpy(c->last_error, saved, sizeof(saved));
    c->ring_mode = -1;
    return;
  }
  c->ring = b;
  c->ring_head = 0;
}

/* Room for a record of `need` bytes at the head: its start (after a skip
 * record where it would pass the ring's end), or -1 when the daemon has
 * not taken enough yet. */
static int64_t ring_room(spc_client *c, uint64_t cap, uint32_t need) {
  spk_sring_hdr *h = c->ring->data;
  uint64_t head = c->ring_head, pos = head % cap;
  uint64_t skip = pos + need > cap ? cap - pos : 0;
  uint64_t tail = SPK_LOAD(&h->tail, __ATOMIC_ACQUIRE);
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

/* The record published; a kick on the socket if the daemon had armed. */
static int ring_publish(spc_client *c, uint64_t head) {
  spk_sring_hdr *h = c->ring->data;
  SPK_STORE(&h->head, head, __ATOMIC_RELEASE);
  c->ring_head = head;
  SPK_FENCE(__ATOMIC_SEQ_CST);
  if (SPK_LOAD(&h->armed, __ATOMIC_RELAXED) == 0)
    return SPC_OK;
  SPK_STORE(&h->armed, 0, __ATOMIC_RELAXED);
  Spcoll__Kick k = SPCOLL__KICK__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  f.body_case = SPCOLL__FRAME__BODY_KICK;
  f.kick = &k;
  return spc__send_noreply(c, &f);
}

int spc__ring_ready(spc_client *c, const Spcoll__Frame *f) {
  return f->body_case == SPCOLL__FRAME__BODY_OP && c->ring != NULL &&
         c->ring_mode > 0;
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
  int rc = ring_publish(c, c->ring_head + need);
  return rc < 0 ? rc : 1;
}

uint64_t spc__ring_taken(const spc_client *c) {
  if (c->ring == NULL)
    return 0;
  const spk_sring_hdr *h = c->ring->data;
  return SPK_LOAD(&h->tail, __ATOMIC_ACQUIRE);
}

void spc__ring_reset(spc_client *c) {
  c->frames_sent = 0;
  if (c->ring == NULL) {
    c->ring_mode = 0; /* asked again at the next join */
    return;
  }
  memset(c->ring->data, 0, sizeof(spk_sring_hdr));
  c->ring_head = 0;
}
