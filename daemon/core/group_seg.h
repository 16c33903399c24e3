/* A group's shared segment (kernels/fast_seg.h): made when a group of this
 * node's ranks only becomes ready, handed to its ranks with GroupJoined,
 * marked broken (waking every waiter) when the group breaks, watched for
 * stalled fast ops by the watchdog, and read for stats. Loop thread only. */
#ifndef SPD_GROUP_SEG_H
#define SPD_GROUP_SEG_H

#include <stdint.h>
#include <stdio.h>

#include "fast_seg.h"
#include "session.h"

struct spd_group;

typedef struct spd_gseg {
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
} spd_gseg;

/* Make g's segment when it qualifies (every rank here, fast_bytes > 0,
 * world <= SPK_FSEG_MAXWORLD); g->seg stays NULL otherwise or when a call
 * fails (logged: the group then keeps the daemon path only). */
void spd_gseg_create(struct spd_group *g);

/* Send GroupJoined f to s, with a dup of the segment's fd when g has one
 * (f's fast_seg_size is set here). */
void spd_gseg_send_joined(struct spd_group *g, spd_session *s,
                          Spcoll__Frame *f);

/* Mark the segment broken with status and msg (once) and wake every
 * waiter: fast ops in progress fail with the daemon path's error. */
void spd_gseg_break(struct spd_group *g, int status, const char *msg);

/* The daemon is about to answer rank's daemon-path request req: publish
 * it for a rank polling for it (fast_seg.h's `answered`). Before the
 * reply, so a rank that has the reply sees the word too. */
void spd_gseg_answered(struct spd_group *g, int rank, uint64_t req);

/* A fast op some rank has published and another not: its sequence
 * number, kind, age (how long no rank of the group has moved), the ranks
 * that have not issued it, and whether the watchdog logged it as stuck
 * (as an op of the daemon's path shows its stuck_reported). Every number
 * is read from the segment, which any rank may scribble: seq and kind
 * are only printed (kind through spd_op_slot), the ranks named are the
 * daemon's own indices below g->world. */
typedef struct {
  uint64_t seq;
  int kind;
  uint64_t age_ns;
  int stuck;
  char missing[200];
} spd_gseg_wait;
/* 1 and *w filled when g's segment has such an op (some rank waits in
 * it), else 0. Called by the watchdog and the stats alike: either may
 * start the stall's clock. */
int spd_gseg_pending(struct spd_group *g, uint64_t now, spd_gseg_wait *w);

/* The watchdog's look at g's segment, each tick: a fast op stalled past
 * the daemon's stuck_seconds is logged once ("stuck op: ..." naming the
 * ranks behind, as the daemon path's), and once past the group's op
 * timeout it breaks the group naming the ranks that never issued it, as
 * the daemon path does. */
void spd_gseg_tick(struct spd_group *g, uint64_t now);

/* Add fast ops completed since the last call to the group's and the
 * daemon's counters. */
void spd_gseg_harvest(struct spd_group *g);

/* "shm LABEL ops=N errors=N stage_bytes=N": the group's ops that ran
 * through its segment (none printed without a segment). */
void spd_gseg_line(struct spd_group *g, const char *label, FILE *out);

/* The daemon drains: every segment sends its new ops to the daemon. */
void spd_gseg_close_all(spd_ctx *ctx);

/* Whether a fast op is under way in g's segment (some rank is inside
 * one, or published one that another has not reached): a drain waits for
 * it, as for the daemon's own ops, until its deadline. */
int spd_gseg_busy(const struct spd_group *g);

void spd_gseg_destroy(struct spd_group *g);

#endif
