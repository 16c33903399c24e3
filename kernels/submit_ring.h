/* A client's submission ring (proto: BufRegister.submit_ring): frames
 * the client would otherwise write to its socket, put instead into a host
 * buffer of its own that the daemon maps, so that an op is submitted with
 * no system call while the daemon's loop is awake. The socket carries
 * everything else, and a kick (Frame.kick, no answer) when the daemon may
 * be asleep.
 *
 * Layout: a header of SPK_SRING_HDR bytes, then a byte ring of
 * size - SPK_SRING_HDR bytes (a power of two). A record is an 8-byte head
 * (len, after) and len bytes of a protobuf spcoll.Frame, padded to 8; a
 * record never wraps: where it would not fit before the ring's end, a
 * record of len SPK_SRING_SKIP says "go on at the ring's start".
 *
 * Words, writer and order (C the client, D the daemon):
 *   head   C: rel store after the record's bytes; D: acq load. Bytes put
 *          since registration (never wraps back).
 *   tail   D: rel store after it copied a record out; C: acq load before
 *          reusing the bytes. Bytes taken.
 *   armed  D: sc store 1, sc fence, then a look at head, before its loop
 *          sleeps; rlx store 0 when it wakes. C: after head, sc fence, rlx
 *          load; if 1, rlx store 0 and a kick on the socket. One of the
 *          two sees the other (the fast path's sleep and wake, kernels/
 *          fast_protocol.h invariant 5). A stale 0 from C after D armed
 *          again is followed by C's kick, whose handling arms D again.
 *   closed D: rel store 1 when it lets the ring go (the client's
 *          connection closes, or the buffer is released), before the
 *          socket closes; C: acq load after the fence above. A record
 *          put after it is taken by nobody: C treats it as a frame whose
 *          send failed (the op was not sent; it goes again after the
 *          reconnect). A record put before it and not taken fails with
 *          the connection, as a frame the daemon never read does.
 * Order with the socket: a record's `after` is how many frames the client
 * had sent on the socket before it (mod 2^32); D takes a record only once
 * it has handled that many, and takes every record it can before each
 * socket frame. So the daemon sees the client's frames in the order sent.
 * The daemon copies each record out before it decodes it and drops the
 * client on any record that breaks these rules: the bytes are the
 * client's to scribble on. A ring starts empty (head 0) and serves one
 * connection: a client that reconnects registers a new one, since the old
 * daemon may still write the old one's words while it drains. */
#ifndef SPK_SUBMIT_RING_H
#define SPK_SUBMIT_RING_H

#include <stdint.h>

/* The shared words' accesses (orders: __ATOMIC_*). */
#define SPK_SRING_LOAD(p, mo) __atomic_load_n((p), (mo))
#define SPK_SRING_STORE(p, v, mo) __atomic_store_n((p), (v), (mo))
#define SPK_SRING_FENCE(mo) __atomic_thread_fence(mo)

#define SPK_SRING_HDR 256u
#define SPK_SRING_MIN (4096u)     /* whole buffer, bytes */
#define SPK_SRING_MAX (1u << 20)
#define SPK_SRING_SKIP 0xffffffffu
#define SPK_SRING_REC 8u          /* a record's head */

typedef struct {
  uint64_t head;
  uint8_t pad0[56];
  uint64_t tail;
  uint8_t pad1[56];
  uint32_t armed;
  uint32_t closed;
  uint8_t pad2[SPK_SRING_HDR - 136];
} spk_sring_hdr;

_Static_assert(sizeof(spk_sring_hdr) == SPK_SRING_HDR,
               "the ring's header is SPK_SRING_HDR bytes");

/* Whether a buffer of `size` bytes can hold a ring: a power of two in
 * [SPK_SRING_MIN, SPK_SRING_MAX]. */
static inline int spk_sring_size_ok(uint64_t size) {
  return size >= SPK_SRING_MIN && size <= SPK_SRING_MAX &&
         (size & (size - 1)) == 0;
}

/* The ring's capacity: its bytes after the header (size - HDR is not a
 * power of two; positions are taken modulo it). */
static inline uint64_t spk_sring_cap(uint64_t size) {
  return size - SPK_SRING_HDR;
}

static inline uint32_t spk_sring_pad(uint32_t len) {
  return (len + 7u) & ~7u;
}

#endif
