/* The fast row's state of a group: its shared segment (kernels/fast_seg.h,
 * the protocol kernels/fast_protocol.h), made when a group of this node's
 * ranks only becomes ready, handed to its ranks with GroupJoined, broken
 * (waking every waiter) when the group breaks, watched for stalled ops by
 * the watchdog, and read for stats. Private to daemon/fast/: the rest of
 * the daemon reaches it through the engine table's group hooks. Loop
 * thread only. */
#ifndef SPD_FAST_INTERNAL_H
#define SPD_FAST_INTERNAL_H

#include <stdint.h>
#include <stdio.h>

#include "engine.h"
#include "fast_seg.h"

typedef struct spd_fgroup {
  const spd_group_view *g;    /* the group, as the table's hooks see it */
  spd_engine_counters *counters; /* the fast row's (ctx->engine_stats) */
  int fd;                     /* the sealed memfd; dup'd for each rank */
  spk_fseg_hdr *hdr;          /* the daemon's own mapping */
  uint64_t size, stage;       /* its layout, as made: the header is the
                               * clients' to write, so the daemon never
                               * sizes or indexes anything by it */
  uint64_t progress_seen;     /* sum of the ranks' progress words */
  uint64_t since_ns;          /* since when it has not changed while some
                               * rank waits */
  uint64_t stuck_since;       /* since_ns of the stall the watchdog logged
                               * as stuck (0: none yet): one line a stall */
  spk_fseg_counters seen[SPK_OP_COUNT]; /* rank 0's, as last added to the
                                         * stats */
  int dups[SPK_FSEG_MAXWORLD]; /* per rank, made before any rank hears of
                                * the segment; -1 once sent */
} spd_fgroup;

/* Rank r's area, from the layout the daemon made (not the header's). */
static inline const spk_fseg_rank *spd_fgroup_rank(const spd_fgroup *fg,
                                                   int r) {
  return spk_fseg_rank_of(fg->hdr, fg->stage, r);
}

/* The watch and the stats (fast_watch.c), as the row's group hooks. */
int spd_fgroup_waiting(void *state, uint64_t now, spd_group_wait *w);
void spd_fgroup_tick(void *state, uint64_t now);
void spd_fgroup_harvest(void *state);
void spd_fgroup_line(void *state, const char *label, FILE *out);

#endif
