/* The fast path's tunables: how a rank waits for the others, and which
 * ops it reads in place or runs replicated. They are daemon settings
 * (rows of the daemon's SPD_LIMITS, so each has a flag, a config-file key
 * and a line in the effective config), written into every segment's
 * header when the daemon creates it, and copied from there by each rank
 * at attach, clamped into the row's range (the header is writable by
 * every rank of the group). Ranks of one group thus run with the same
 * values. Why each default is where it is: docs/performance.md, in the
 * section named in its help.
 *
 * Not here, as they size arrays: SPC_FAST_MAPS and RUNS_MAX
 * (client/fast/client_fast_tune.h). */
#ifndef SPK_FAST_TUNE_H
#define SPK_FAST_TUNE_H

#include <stdint.h>

/* X(field, flag, default, lowest, highest, help), as SPD_LIMITS. */
#define SPK_FAST_TUNES(X)                                                    \
  X(fast_spin_min_ns, "fast-spin-min-ns", 1000, 0, 1000000000,               \
    "fast path: least a rank spins on the others before it yields; the "     \
    "spin adapts between this and fast_spin_max_ns (\"More ranks than "      \
    "CPUs: yield, then sleep\")")                                            \
  X(fast_spin_max_ns, "fast-spin-max-ns", 100000, 0, 1000000000,             \
    "fast path: most a rank spins before it yields")                         \
  X(fast_shared_ns, "fast-shared-ns", 3000, 1, 1000000000,                   \
    "fast path: a yield that takes longer gave the CPU away (the awaited "   \
    "rank may share it), and halves the spin")                               \
  X(fast_yield_polls, "fast-yield-polls", 16, 1, 1 << 20,                    \
    "fast path: yields between looks at the clock, before a rank sleeps")    \
  X(fast_over_spin_ns, "fast-over-spin-ns", 0, 0, 1000000000,                \
    "fast path, more ranks than CPUs: how long a rank spins")                \
  X(fast_over_yield_ns, "fast-over-yield-ns", 50000, 0, 1000000000,          \
    "fast path, more ranks than CPUs: how long a rank yields before it "     \
    "sleeps on the segment's futex (about a sleep and wake-up)")             \
  X(fast_sleep_ns, "fast-sleep-ns", 200000000, 1000, 999999999,              \
    "fast path: longest futex sleep between looks at the daemon")            \
  X(fast_relocate_waits, "fast-relocate-waits", 1024, 1, 1LL << 40,          \
    "fast path: at most one wait in this many sleeps at once, to be "        \
    "placed anew on an idle CPU after a yield gave its CPU away")            \
  X(fast_claim_bytes, "fast-claim-bytes", 1024, 0, 1 << 20,                  \
    "fast path: bytes of the next op's staging taken for writing while "    \
    "this op runs (\"Lines taken back early\")")                             \
  X(fast_map_min_bytes, "fast-map-min-bytes", 1024, 0, 1LL << 40,            \
    "fast path: least bytes in or out per rank of an op read in the "        \
    "callers' buffers; below, staging costs less than the barrier that "    \
    "ends an in-place op")                                                   \
  X(fast_map_min_over_bytes, "fast-map-min-over-bytes", 16384, 0,            \
    1LL << 40, "fast path, more ranks than CPUs: fast_map_min_bytes, "       \
    "where that barrier costs switches")                                     \
  X(fast_freed_every, "fast-freed-every", 64, 1, 1 << 20,                    \
    "fast path: ops between looks at whether other ranks freed buffers "    \
    "this rank keeps mapped")                                                \
  X(fast_piece_bytes, "fast-piece-bytes", 128 << 10, 4096, 1 << 30,          \
    "fast path: scratch per remote source and piece of a reduce over "      \
    "caller memory (a piece of every source and the output stay within a " \
    "core's L2)")                                                            \
  X(fast_replicate_bytes, "fast-replicate-bytes", 64 << 10, 0, 1LL << 40,    \
    "fast path: all_reduces of at most this many output bytes, over the "   \
    "world, run replicated: every rank reduces everything into its own "    \
    "output, in one phase")

/* The values, as a rank holds them; a segment's header carries one. */
typedef struct {
#define SPK_FAST_TUNE_FIELD(field, flag, def, lo, hi, help) uint64_t field;
  SPK_FAST_TUNES(SPK_FAST_TUNE_FIELD)
#undef SPK_FAST_TUNE_FIELD
} spk_fast_tune;

static inline uint64_t spk_fast_tune_in(uint64_t v, uint64_t lo,
                                        uint64_t hi) {
  return v < lo ? lo : v > hi ? hi : v;
}

/* Each value of t brought into its row's range. */
static inline void spk_fast_tune_clamp(spk_fast_tune *t) {
#define SPK_FAST_TUNE_CLAMP(field, flag, def, lo, hi, help)                  \
  t->field = spk_fast_tune_in(t->field, (uint64_t)(lo), (uint64_t)(hi));
  SPK_FAST_TUNES(SPK_FAST_TUNE_CLAMP)
#undef SPK_FAST_TUNE_CLAMP
}

#endif
