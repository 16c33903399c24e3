/* The fast path's publish, its sleep/wake handshake, the drain's and the
 * break's (kernels/fast_protocol.h: pub, invariants 5, 6 and 7), as the
 * ranks and the daemon run them
 * (client/fast/client_fast_wait.c, with FUTEX_WAIT and FUTEX_WAKE on `wake`)
 * and as the protocol checker runs them (tests/unit/unit_fast_model.c,
 * with its model of both). */
#ifndef SPK_FAST_SYNC_H
#define SPK_FAST_SYNC_H

#include "fast_atomic.h"
#include "fast_seg.h"

/* A publisher's look for sleepers after its stores: the sc fence orders
 * them before the load of `sleepers` and pairs with the sleeper's
 * (spk_fsync_sleep): either the sleeper's last look sees the stores, or
 * this look sees the sleeper. 1: `wake` was bumped (sc); the caller then
 * wakes the futex waiters on it. `wake` and `sleepers` share one line
 * that every rank would write on every publish: touching them only when
 * someone sleeps keeps a publish to the rank's own line. */
static inline int spk_fsync_wake(spk_fseg_hdr *h) {
  SPK_FENCE(__ATOMIC_SEQ_CST);
  if (SPK_LOAD(&h->sleepers, __ATOMIC_RELAXED) == 0)
    return 0;
  SPK_ADD(&h->wake, 1, __ATOMIC_SEQ_CST);
  return 1;
}

/* pub(word, v): this rank's progress (one writer: it), then the word,
 * both rel; then spk_fsync_wake. progress goes first: a reader that sees
 * the word takes the line, and a store after that would fetch it back. */
static inline int spk_fsync_publish(spk_fseg_hdr *h, spk_fseg_rank *me,
                                    uint64_t *word, uint64_t v) {
  SPK_STORE(&me->progress, SPK_LOAD(&me->progress, __ATOMIC_RELAXED) + 1,
            __ATOMIC_RELEASE);
  SPK_STORE(word, v, __ATOMIC_RELEASE);
  return spk_fsync_wake(h);
}

/* One sleep: counted in `sleepers` (sc), a fence (sc), the futex word
 * read (sc), then the last look at the counters (look(arg): 1 done).
 * Unless done or the segment is broken, wait(arg, &h->wake, w) sleeps
 * while the word is still w (a break whose wake came before w was read
 * would not end that sleep: the caller's loop sees the break instead).
 * Then out of `sleepers`. Returns the last look's answer. */
static inline int spk_fsync_sleep(spk_fseg_hdr *h, int (*look)(void *),
                                  void (*wait)(void *, uint32_t *, uint32_t),
                                  void *arg) {
  SPK_ADD(&h->sleepers, 1, __ATOMIC_SEQ_CST);
  SPK_FENCE(__ATOMIC_SEQ_CST);
  uint32_t w = SPK_LOAD(&h->wake, __ATOMIC_SEQ_CST);
  int done = look(arg);
  if (!done && SPK_LOAD(&h->broken, __ATOMIC_ACQUIRE) == 0)
    wait(arg, &h->wake, w);
  SPK_SUB(&h->sleepers, 1, __ATOMIC_SEQ_CST);
  return done;
}

/* Drain (invariant 6), the rank's side: in_op 1 (sc) before the look at
 * `closed` (sc), 0 (rel) once the op is over. Either the daemon's look
 * (spk_fsync_rank_busy) sees in_op, or the rank sees closed and takes
 * the daemon's path. */
static inline void spk_fsync_op_enter(spk_fseg_rank *me) {
  SPK_STORE(&me->in_op, 1, __ATOMIC_SEQ_CST);
}

static inline int spk_fsync_closed(spk_fseg_hdr *h) {
  return SPK_LOAD(&h->closed, __ATOMIC_SEQ_CST) != 0;
}

static inline void spk_fsync_op_leave(spk_fseg_rank *me) {
  SPK_STORE(&me->in_op, 0, __ATOMIC_RELEASE);
}

/* The daemon's side: closed (sc), and later its look at a rank: inside a
 * fast op (in_op, sc) or waiting in one (acq). */
static inline void spk_fsync_close(spk_fseg_hdr *h) {
  SPK_STORE(&h->closed, 1, __ATOMIC_SEQ_CST);
}

static inline int spk_fsync_rank_busy(const spk_fseg_rank *a) {
  return SPK_LOAD(&a->waiting, __ATOMIC_ACQUIRE) != 0 ||
         SPK_LOAD(&a->in_op, __ATOMIC_SEQ_CST) != 0;
}

/* Break (invariant 7), the daemon's side, once (or a rank leaving a dead
 * daemon's segment): the message (plain, at most its size, ended), then
 * broken = status (rel), then `wake` bumped (sc) for everyone; the caller
 * wakes the futex waiters. */
static inline void spk_fsync_break(spk_fseg_hdr *h, int32_t status,
                                   const char *msg) {
  char m[SPK_FSEG_MSG];
  size_t n = strnlen(msg, sizeof(m) - 1);
  memcpy(m, msg, n);
  memset(m + n, 0, sizeof(m) - n);
  SPK_COPY_IN(h->broken_msg, m, sizeof(m));
  SPK_STORE(&h->broken, status, __ATOMIC_RELEASE);
  SPK_ADD(&h->wake, 1, __ATOMIC_SEQ_CST);
}

/* The ranks' side: the status (acq; 0 unbroken), and once it is not 0,
 * the message into m (SPK_FSEG_MSG bytes, not necessarily ended). */
static inline int32_t spk_fsync_broken(const spk_fseg_hdr *h) {
  return SPK_LOAD(&h->broken, __ATOMIC_ACQUIRE);
}

static inline void spk_fsync_broken_msg(const spk_fseg_hdr *h, char *m) {
  SPK_COPY_OUT(m, h->broken_msg, SPK_FSEG_MSG);
}

/* Ring-slot reuse (invariant 1): before O writes op s into its slot,
 * the op that held it, s - RING, must have been read by every rank.
 * Returns 0 when no look is needed (the slot's first use; every rank
 * seen publishing past it, seen_pub; a daemon-path op over a daemon-path
 * op's slot, eligible neither), else the value every rank's
 * said(consumed) must reach. */
static inline uint64_t spk_fsync_slot_needs(uint64_t s, uint64_t seen_pub,
                                            int eligible, int slot_eligible) {
  if (s <= SPK_FSEG_RING || seen_pub > s - SPK_FSEG_RING ||
      (!eligible && !slot_eligible))
    return 0;
  return s - SPK_FSEG_RING;
}

/* A rank has read every descriptor of op s: read_descs (rel), on a line
 * of its own. 1: a sleeper was seen and `wake` bumped (spk_fsync_wake);
 * the caller wakes the futex. The look at `sleepers` comes before any
 * fence (an op's path pays no fence here), so a sleeper that counted
 * itself meanwhile is woken by this rank's next publish instead. */
static inline int spk_fsync_read_descs(spk_fseg_hdr *h, spk_fseg_rank *me,
                                       uint64_t s) {
  SPK_STORE(&me->read_descs, s, __ATOMIC_RELEASE);
  return SPK_LOAD(&h->sleepers, __ATOMIC_RELAXED) != 0 && spk_fsync_wake(h);
}

#endif
