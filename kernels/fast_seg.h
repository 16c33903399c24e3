/* The shared segment of a group whose ranks are all on this node: the
 * layout the daemon creates (daemon/fast/engine_fast.c) and the clients
 * map (client/fast/client_fast.c). Small ops run through it with no
 * message to the daemon: each rank publishes its op descriptor and its
 * input in its own rank area, every rank checks and plans the op from all
 * descriptors with the same planners the daemon runs, and copies into its
 * output from the other ranks' staging areas.
 *
 * Who writes each shared word, with which memory order, and the
 * invariants that make reuse safe: kernels/fast_protocol.h. A process that
 * writes garbage here can only hurt its own group: every member of it
 * already trusts the others with its data, and the daemon reads only
 * counters from it. */
#ifndef SPK_FAST_SEG_H
#define SPK_FAST_SEG_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "fast_atomic.h"
#include "fast_tune.h"
#include "types.h"

#define SPK_FSEG_MAGIC 0x53504653u /* "SPFS" */
#define SPK_FSEG_VERSION 11u
/* Descriptors a rank may publish ahead of the slowest reader (the
 * protocol checker builds with a smaller ring). */
#ifndef SPK_FSEG_RING
#define SPK_FSEG_RING 16u
#endif
/* Size list entries a descriptor holds; longer lists take the daemon. */
#define SPK_FSEG_MAXLIST 32
/* Groups above this many ranks get no segment: the ring and the staging
 * grow with the world, and large groups are rarely one node's. */
#define SPK_FSEG_MAXWORLD 16
#define SPK_FSEG_MSG 400
/* Inputs of at most this many bytes travel in the polled line. */
#define SPK_FSEG_INLINE 16
/* Inputs above SPK_FSEG_INLINE and up to SPK_FSEG_LINES lines of
 * SPK_FSEG_LINE_DATA bytes travel in tagged lines (spk_fseg_line). Two is
 * the most that never measured behind staging: three and four were
 * uneven, five behind (docs/performance.md). */
#define SPK_FSEG_LINES 2
#define SPK_FSEG_LINE_DATA 56
#define SPK_FSEG_LINED (SPK_FSEG_LINES * SPK_FSEG_LINE_DATA)
/* Latency histogram buckets: bucket i counts ops of < 2^i microseconds
 * (the last one takes the rest), as the daemon's op stats do. */
#define SPK_FSEG_HIST 31

/* Where a rank's input (0) and output (1) are, for an op the others read
 * in the caller's own buffers rather than in its staging (client_fast_map.c):
 * the fd number of each buffer's memfd in the owner, which the readers take
 * with pidfd_getfd, and its inode, which they check; or, for caller memory
 * (spc_buffer_wrap: fd -1), the tensor's address in the owner, which the
 * readers read with process_vm_readv (client_fast_cma.c). */
typedef struct {
  uint32_t mapped;         /* 1: read these, not the staging */
  int32_t fd[2];           /* -1: off is an address in the owner */
  uint32_t pad;
  uint64_t dev[2], ino[2];
  uint64_t off[2];         /* of the tensor in its buffer, or its address */
} spk_fseg_where;

/* One rank's op, as it asked for it. The first cache line (seq to
 * scalar) is what a reader of a repeated op touches. */
typedef struct {
  uint64_t seq;
  uint16_t eligible;       /* 1: this rank can run it here */
  /* 1: the same op as this rank's in the last plan every rank built (the
   * readers have it; the rest of the slot need not be read). */
  uint16_t repeat;
  int32_t op;
  uint32_t dtype;
  uint32_t flags;
  int32_t ndims;
  int32_t dims[2];
  int32_t in_ndim, out_ndim;
  int32_t nsizes, nsizes2;
  int64_t scalar;
  int64_t in_shape[SPK_MAX_DIMS];
  int64_t out_shape[SPK_MAX_DIMS];
  int64_t sizes[SPK_FSEG_MAXLIST];
  int64_t sizes2[SPK_FSEG_MAXLIST];
  /* Not part of the op: the same op may read other buffers each time. */
  spk_fseg_where where;
} __attribute__((aligned(128))) spk_fseg_desc;

/* Who a rank is, published once at attach, so that the others can tell
 * whether they may take its fds and read its memory (client_fast_map.c):
 * its pid; the fd number of this segment's memfd in it (which only
 * members hold: a prober checks it against its own), and the address of
 * a word of its memory with the word's value; `attached` is set last. `canmap`: 0 until
 * it has probed every other rank, then 1 (it may not take some rank's
 * fds or read its memory) or 2 (it may, everyone's). With 1, why: the
 * rank it failed on, the call (SPK_FSEG_PROBE_*) and its errno, for the
 * daemon's stats. */
enum {
  SPK_FSEG_PROBE_OK,
  SPK_FSEG_PROBE_NOPID,        /* the rank named no pid */
  SPK_FSEG_PROBE_PIDFD_OPEN,
  SPK_FSEG_PROBE_PIDFD_GETFD,
  SPK_FSEG_PROBE_NOT_SAME,     /* its fd was not this segment */
  SPK_FSEG_PROBE_UID,          /* it runs as another uid */
  SPK_FSEG_PROBE_VM_READV,
  SPK_FSEG_PROBE_COUNT
};
typedef struct {
  int32_t pid;
  int32_t probe_fd;
  uint64_t probe_addr, probe_word;
  uint64_t attached;
  uint64_t canmap;
  int32_t nomap_rank, nomap_call, nomap_errno;
  uint32_t pad;
} spk_fseg_ident;

/* Counters of one rank, per op kind: written by that rank only; the
 * daemon adds rank 0's to its stats (every rank runs every op, so one
 * rank counts it, as the daemon counts an op once). bytes: what the whole
 * plan writes, as the daemon counts. ns: publish to done on rank 0.
 * in_place: ops that some rank's buffers were read in (client_fast_map.c). */
typedef struct {
  uint64_t count;
  uint64_t errors;
  uint64_t bytes;
  uint64_t ns;
  uint64_t lat[SPK_FSEG_HIST];
  uint64_t in_place;       /* of count: some rank's op was read in place */
} spk_fseg_counters;

/* A cache line of a small input with the op it belongs to, so that a
 * reader polling it gets both in one hand-off, as NCCL's LL128 protocol
 * does: the owner writes the data, then `tag`, (s << 1) | repeat, with a
 * release store; on a coherent cache a line that shows the tag holds the
 * data stored before it. A reader of a repeated op polls these lines of
 * each other rank instead of its polled line and then its staging, which
 * are two hand-offs one after the other (client_fast_lines.c). */
typedef struct {
  uint8_t data[SPK_FSEG_LINE_DATA];
  uint64_t tag;
} __attribute__((aligned(64))) spk_fseg_line;

typedef struct {
  /* The line the other ranks poll: the seq of the last descriptor this
   * rank published; = published when that descriptor is a repeat (its
   * `repeat` set: a reader of a repeated op needs nothing but this line)
   * / an op read in this rank's own buffers (its descriptor's `where`);
   * bumped by every publish (the daemon's watchdog sees the group move);
   * and the input of an op of at most SPK_FSEG_INLINE bytes, in the half
   * of its seq's parity: a reader finds it in the line it polled. A
   * reader of a repeat whose input is in `lines` polls those instead. */
  uint64_t published;
  uint64_t repeated;
  uint64_t mapped;
  uint64_t progress;
  uint8_t inl[2][SPK_FSEG_INLINE];
  /* seq of the last op this rank read every rank's descriptor of /
   * finished as a fast op (its staging may be reused) / finished the
   * reduce phase of. consumed and fdone may lag: a rank publishes s + 1
   * only once it is done with s, so "published > s" says "done with s"
   * too (see client_fast.c, `pending`). */
  uint64_t consumed;
  uint64_t fdone;
  uint64_t reduced;
  /* Bumped when this rank frees a buffer: the others drop their
   * mappings of its buffers. */
  uint64_t freed;
  /* s, when this rank failed op s on its own (it could not read another
   * rank's buffers): said before its fdone of s; status, its error. */
  uint64_t failed;
  int32_t fail_status;
  uint8_t pad0[20];
  /* Words nobody polls, on their own lines (128 bytes apart: CPUs fetch
   * lines in pairs): writing them must not take the polled line away from
   * its readers. `waiting`: 1 while this rank
   * waits for the others (for the watchdog); `in_op`: 1 from the start
   * of a fast op to its end (a drain waits for it). */
  uint32_t waiting;
  uint32_t in_op;
  /* Written by the daemon only: the id of the last daemon-path request of
   * this rank it has answered (set just before the reply is queued). A rank
   * waiting on a mid-size op polls it briefly before blocking in recv, so
   * the answer does not cost it a sleep and a wake-up. A hint: the reply
   * on the socket stays the answer. */
  uint64_t answered;
  /* The seq of the last fast op this rank finished, stored as it ends
   * (consumed says so later, with a publish): a rank that ran a fast op
   * and went on to other work, outside spcoll, is done with the op's ring
   * slot, which a rank ahead of it may need for its 16th op after it
   * (client_fast_desc.c, slot_wait). On this line, which nobody polls,
   * the store costs nothing the others wait for. */
  uint64_t read_descs;
  uint8_t pad2[104];
  /* A small input (see spk_fseg_line), in the lines of its seq's parity:
   * a rank may write op s + 1's while the others still read op s's. */
  spk_fseg_line lines[2][SPK_FSEG_LINES];
  spk_fseg_ident id;
  spk_fseg_counters counters[SPK_OP_COUNT];
  spk_fseg_desc ring[SPK_FSEG_RING];
} spk_fseg_rank;

_Static_assert(offsetof(spk_fseg_rank, consumed) == 64,
               "the polled words and inline inputs fill one cache line");
_Static_assert(offsetof(spk_fseg_rank, waiting) == 128,
               "the words the ranks wait on fill one pair of cache lines");
_Static_assert(sizeof(spk_fseg_line) == 64 &&
                   offsetof(spk_fseg_rank, lines) % 128 == 0 &&
                   sizeof(((spk_fseg_rank *)0)->lines[0]) % 128 == 0,
               "each parity's lines fill their own pairs of cache lines");

typedef struct spk_fseg_hdr {
  uint32_t magic, version;
  uint32_t world, ring;
  uint64_t stage_bytes;    /* per rank, for the input and for the output */
  uint64_t rank_bytes;     /* stride of rank areas */
  uint64_t size;           /* of the whole segment */
  uint64_t rank_off;       /* offset of rank 0's area */
  /* 0, or the negative SPK_E* status every op of the group now fails with
   * (the daemon's broken_status), and its message. */
  int32_t broken;
  uint32_t wake;           /* futex word: bumped by every publish */
  uint32_t sleepers;       /* processes in futex_wait on `wake` */
  /* 1: new ops take the daemon path: the daemon drains, and refuses them
   * in its words, while ops already under way (published by some rank)
   * finish here; or some rank could not take the segment at its join. */
  uint32_t closed;
  /* How long a rank polls `answered` before blocking (the daemon's
   * mid_spin_us; 0: never). */
  uint32_t mid_spin_ns;
  /* Per op kind: ops whose input and output are at most this many bytes
   * per rank may run here (<= stage_bytes; the daemon's fast_bytes and
   * fast_op_bytes). Every rank reads the same table, so they decide
   * alike. */
  uint64_t op_bytes[SPK_OP_COUNT];
  /* Ops read in the callers' buffers (client_fast_map.c) may be this many
   * bytes per rank, above op_bytes (the daemon's fast_map_bytes; not for
   * an op whose op_bytes is 0). */
  uint64_t map_bytes;
  /* The daemon's stream_bytes: plans of fast ops that touch at least this
   * much copy past the cache, as the daemon's would (kernels/plan.h). */
  uint64_t stream_bytes;
  /* The daemon's fast-path tunables; each rank copies them at attach,
   * clamped (kernels/fast_tune.h). */
  spk_fast_tune tune;
  char broken_msg[SPK_FSEG_MSG];
} spk_fseg_hdr;

/* Rank areas are aligned to pairs of cache lines (CPUs fetch lines in
 * pairs): one rank's words never share a pair with another's. Staging
 * (input, then output) follows the area. */
static inline uint64_t spk_fseg_round(uint64_t n) {
  return (n + 127) & ~(uint64_t)127;
}

static inline uint64_t spk_fseg_rank_bytes(uint64_t stage_bytes) {
  return spk_fseg_round(sizeof(spk_fseg_rank)) +
         2 * spk_fseg_round(stage_bytes);
}

/* Offset of rank 0's area: the header rounded up to a page. */
static inline uint64_t spk_fseg_rank_off(void) {
  return (sizeof(spk_fseg_hdr) + 4095) & ~(uint64_t)4095;
}

static inline uint64_t spk_fseg_size(int world, uint64_t stage_bytes) {
  return spk_fseg_rank_off() +
         (uint64_t)world * spk_fseg_rank_bytes(stage_bytes);
}

/* Rank r's area and staging (t = 0 input, 1 output) in a segment at
 * base made for stage_bytes. Both sides locate everything from the layout
 * they agreed on at attach (kept in their own memory), never from the
 * header's fields: the header is writable by every rank of the group, and
 * a scribbled size or offset must not make anyone read out of bounds. */
static inline spk_fseg_rank *spk_fseg_rank_of(void *base, uint64_t stage_bytes,
                                              int r) {
  return (spk_fseg_rank *)((uint8_t *)base + spk_fseg_rank_off() +
                           (uint64_t)r * spk_fseg_rank_bytes(stage_bytes));
}

static inline uint8_t *spk_fseg_stage_of(void *base, uint64_t stage_bytes,
                                         int r, int t) {
  return (uint8_t *)spk_fseg_rank_of(base, stage_bytes, r) +
         spk_fseg_round(sizeof(spk_fseg_rank)) +
         (uint64_t)t * spk_fseg_round(stage_bytes);
}

/* The counter at byte `field` of rank area a, as the rank means it:
 * consumed and fdone may lag, since a rank publishes s + 1 only once it
 * is done with s (client_fast.c, `pending`). Read by the ranks' waits and
 * the daemon's watchdog alike. */
static inline uint64_t spk_fseg_said(const spk_fseg_rank *a, size_t field) {
  uint64_t v = SPK_LOAD((const uint64_t *)((const uint8_t *)a + field),
                        __ATOMIC_ACQUIRE);
  if (field != offsetof(spk_fseg_rank, consumed) &&
      field != offsetof(spk_fseg_rank, fdone))
    return v;
  if (field == offsetof(spk_fseg_rank, consumed)) {
    uint64_t d = SPK_LOAD(&a->read_descs, __ATOMIC_ACQUIRE);
    v = d > v ? d : v;
  }
  uint64_t p = SPK_LOAD(&a->published, __ATOMIC_ACQUIRE);
  return p > 0 && p - 1 > v ? p - 1 : v;
}

/* The head of a ring slot that is read without the publish's order (the
 * daemon's drain and watchdog, a rank checking whether a slot still holds
 * op s): seq, eligible, repeat and op, each written and read atomically
 * (kernels/fast_protocol.h, "ring"). The rest of the slot is read only
 * after an acquire of the owner's `published`, before the slot may be
 * reused, so plainly. */
#define SPK_FSEG_DESC_ATOMIC offsetof(spk_fseg_desc, dtype)

/* Write d's first n bytes (at least the atomic head) into slot: the rest
 * plainly, then the head, seq last. */
static inline void spk_fseg_desc_put(spk_fseg_desc *slot,
                                     const spk_fseg_desc *d, size_t n) {
  SPK_COPY_IN((uint8_t *)slot + SPK_FSEG_DESC_ATOMIC,
              (const uint8_t *)d + SPK_FSEG_DESC_ATOMIC,
              n - SPK_FSEG_DESC_ATOMIC);
  SPK_STORE(&slot->op, d->op, __ATOMIC_RELAXED);
  SPK_STORE(&slot->repeat, d->repeat, __ATOMIC_RELAXED);
  SPK_STORE(&slot->eligible, d->eligible, __ATOMIC_RELAXED);
  SPK_STORE(&slot->seq, d->seq, __ATOMIC_RELAXED);
}

/* A copy of slot: the head atomically, the rest plainly. */
static inline void spk_fseg_desc_get(spk_fseg_desc *out,
                                     const spk_fseg_desc *slot) {
  out->seq = SPK_LOAD(&slot->seq, __ATOMIC_RELAXED);
  out->eligible = SPK_LOAD(&slot->eligible, __ATOMIC_RELAXED);
  out->repeat = SPK_LOAD(&slot->repeat, __ATOMIC_RELAXED);
  out->op = SPK_LOAD(&slot->op, __ATOMIC_RELAXED);
  SPK_COPY_OUT((uint8_t *)out + SPK_FSEG_DESC_ATOMIC,
               (const uint8_t *)slot + SPK_FSEG_DESC_ATOMIC,
               sizeof(*out) - SPK_FSEG_DESC_ATOMIC);
}

/* Whether rank area a's ring slot says it published op s to run in the
 * segment (not on the daemon's path). Read by the ranks and the daemon's
 * drain alike, while the owner may be rewriting the slot. */
static inline int spk_fseg_fast_op(const spk_fseg_rank *a, uint64_t s) {
  const spk_fseg_desc *x = &a->ring[s % SPK_FSEG_RING];
  return SPK_LOAD(&x->seq, __ATOMIC_RELAXED) == s &&
         SPK_LOAD(&x->eligible, __ATOMIC_RELAXED) == 1;
}

/* Fill a fresh (zeroed) segment's header. */
static inline void spk_fseg_init(spk_fseg_hdr *h, int world,
                                 uint64_t stage_bytes, uint32_t mid_spin_ns) {
  h->magic = SPK_FSEG_MAGIC;
  h->version = SPK_FSEG_VERSION;
  h->world = (uint32_t)world;
  h->ring = SPK_FSEG_RING;
  h->stage_bytes = stage_bytes;
  h->rank_bytes = spk_fseg_rank_bytes(stage_bytes);
  h->rank_off = spk_fseg_rank_off();
  h->size = spk_fseg_size(world, stage_bytes);
  h->mid_spin_ns = mid_spin_ns;
}

#endif
