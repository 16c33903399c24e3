/* What the fast path's files share (client_fast.c: attach and running;
 * client_fast_wait.c: waiting on the other ranks; client_fast_desc.c: the
 * op descriptors ranks publish). Internal to libspclient. */
#ifndef SPC_CLIENT_FAST_INTERNAL_H
#define SPC_CLIENT_FAST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "client_fast.h"
#include "fast_seg.h"
#include "planner.h"

typedef struct spc_fast {
  spk_fseg_hdr *hdr;
  uint64_t size;
  uint64_t stage;               /* the layout, as checked at attach */
  uint64_t seq;                 /* last sequence number this rank took */
  uint64_t last_fast;           /* last one that ran here */
  uint64_t spin_ns, spin_max;   /* wait_for's budget (see SPIN_MIN_NS) */
  uint64_t mid_ns;              /* spc__fast_await's budget, adapted like
                                 * spin_ns up to the daemon's mid_spin_ns */
  unsigned yield;
  spk_fseg_desc descs[SPK_FSEG_MAXWORLD]; /* every rank's, for planning */
  spk_plan plan;
  /* The descriptors plan was built from (seq zeroed); plan_ok: it built.
   * Trainers repeat the same ops, so most ops reuse the plan. */
  spk_fseg_desc planned[SPK_FSEG_MAXWORLD];
  int plan_ok;
} spc_fast;

/* Where a rank's counter lives in its area of the segment. */
#define FIELD(name) offsetof(spk_fseg_rank, name)

/* Rank r's area of the segment. */
static inline spk_fseg_rank *spc__fast_rank(const spc_fast *f, int r) {
  return spk_fseg_rank_of(f->hdr, f->stage, r);
}

/* ---- client_fast_wait.c ---- */

/* The wait budgets of a new segment, from the group's size and the CPUs
 * (see client_fast_wait.c). */
void spc__fast_wait_init(spc_fast *f, int world);
uint64_t spc__fast_now_ns(void);
/* Store a counter of this rank (me) and wake whoever waits on it. */
void spc__fast_publish(spk_fseg_hdr *h, spk_fseg_rank *me, uint64_t *word,
                       uint64_t v);
/* The segment's broken status, as the call's failure; SPC_OK if not. */
int spc__fast_broken(spc_group *g);
/* Until every rank's counter at `field` reaches v (the daemon's watchdog
 * sees that this rank waits). */
int spc__fast_wait_all(spc_group *g, size_t field, uint64_t v);

/* ---- client_fast_desc.c ---- */

uint64_t spc__fast_tensor_bytes(const spc_tensor *t);
/* Whether in and out may run op `kind` here (anything else is the
 * daemon's to judge). */
int spc__fast_fits(const spc_fast *f, const spc_client *c, int kind,
                   const spc_tensor *in, const spc_tensor *out);
/* This rank's descriptor of op (eligible cleared for what only the
 * daemon can take), and the planners' arguments of a descriptor. */
void spc__fast_desc_fill(spk_fseg_desc *d, const spc_group *g,
                         const spc_op *op, const spc_tensor *in,
                         const spc_tensor *out);
void spc__fast_args_of(const spk_fseg_desc *d, spk_op_args *a);
/* Take the next sequence number and publish d under it. */
int spc__fast_desc_publish(spc_group *g, spk_fseg_desc *d);
/* This rank reads nobody's descriptor of op s (it takes the daemon
 * path): its ring slots may be reused. */
void spc__fast_consumed(spc_group *g, uint64_t s);

#endif
