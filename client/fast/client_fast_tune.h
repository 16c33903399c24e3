/* The fast path's policy, and the two bounds that size its arrays. The
 * values the policy runs with are daemon settings, each rank's copy in
 * spc_fast's `tune` (kernels/fast_tune.h: what each bounds, its range).
 * Every rank of a group copies the same values (the daemon writes them
 * before any rank attaches); all but fast_replicate_bytes, which every
 * rank's plan must agree on, could differ between ranks without harm.
 *
 * Waiting (client_fast_wait.c). A wait spins, then yields, then sleeps
 * on the segment's futex. The spin adapts between fast_spin_min_ns and
 * fast_spin_max_ns: it doubles when a wait ends while spinning, or when
 * yields came straight back (nobody else wanted the CPU), and halves when
 * a yield gave the CPU away (took over fast_shared_ns: the awaited rank
 * may share this CPU). With more ranks than CPUs a waiter spins
 * fast_over_spin_ns and sleeps once it has yielded for
 * fast_over_yield_ns. One futex sleep lasts at most fast_sleep_ns between
 * looks at the daemon. ("More ranks than CPUs: yield, then sleep",
 * docs/performance.md.) */
#ifndef SPC_CLIENT_FAST_TUNE_H
#define SPC_CLIENT_FAST_TUNE_H

#include <limits.h>

/* Other ranks' buffers kept mapped, per rank (client_fast_map.c). */
#define SPC_FAST_MAPS 16
/* iovecs of one process_vm_readv (client_fast_cma.c). */
#define RUNS_MAX (IOV_MAX < 256 ? IOV_MAX : 256)

#endif
