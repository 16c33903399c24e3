/* The fast path's tunables, in one place: what each bounds and why it is
 * where it is. The measurements behind them are in docs/performance.md
 * (the section named with each). Not protocol: the ranks of a group may
 * differ in any of these without harm (the protocol is
 * kernels/fast_protocol.h). */
#ifndef SPC_CLIENT_FAST_TUNE_H
#define SPC_CLIENT_FAST_TUNE_H

/* ---- waiting (client_fast_wait.c) ----------------------------------
 * A wait spins, then yields, then sleeps on the segment's futex. The spin
 * adapts between SPIN_MIN_NS and SPIN_MAX_NS: it doubles when a wait ends
 * while spinning, or when yields came straight back (nobody else wanted
 * the CPU), and halves when a yield gave the CPU away (took over
 * SHARED_NS: the awaited rank may share this CPU). With more ranks than
 * CPUs a waiter does not spin (OVER_SPIN_NS) and sleeps once it has
 * yielded for OVER_YIELD_NS, about a futex sleep and wake-up. YIELD_POLLS:
 * yields between looks at the clock. SLEEP_NS bounds one futex sleep
 * between looks at the daemon. ("More ranks than CPUs: yield, then
 * sleep".) */
#define SHARED_NS 3000
#define SPIN_MIN_NS 1000
#define SPIN_MAX_NS 100000
#define YIELD_POLLS 16
#define OVER_SPIN_NS 0
#define OVER_YIELD_NS 50000
#define SLEEP_NS 200000000L
/* At most one wait in RELOCATE_WAITS sleeps at once to be placed anew on
 * an idle CPU after a yield gave its CPU away (client_fast_wait.c,
 * relocate_next). */
#define RELOCATE_WAITS 1024

/* ---- staging and lines (client_fast.c) ------------------------------
 * Lines of the next op's staging half taken for writing while this op
 * runs, at most ("Lines taken back early"). */
#define CLAIM_MAX 1024u

/* ---- reading in place (client_fast_map.c, client_fast_cma.c) --------
 * Ops of at least MAP_MIN_BYTES in or out per rank are read in the
 * callers' buffers: below, staging costs less than the barrier that ends
 * an in-place op; MAP_MIN_OVER_BYTES with more ranks than CPUs, where that
 * barrier costs switches. */
#define MAP_MIN_BYTES 1024u
#define MAP_MIN_OVER_BYTES (16u << 10)
/* Other ranks' buffers kept mapped; ops between looks at their `freed`. */
#define SPC_FAST_MAPS 16
#define FREED_EVERY 64
/* Scratch per remote source and piece of a reduce over caller memory: a
 * reduce's pieces of every source and its output stay within a core's
 * L2. */
#define PIECE_BYTES (128u << 10)
/* iovecs of one process_vm_readv. */
#define RUNS_MAX (IOV_MAX < 256 ? IOV_MAX : 256)

/* ---- planning (client_fast_plan.c) ----------------------------------
 * all_reduces of at most this many output bytes are run replicated: every
 * rank runs every reduce step into its own output, one phase and no
 * staged output. */
#define REPLICATE_BYTES (64u << 10)

#endif
