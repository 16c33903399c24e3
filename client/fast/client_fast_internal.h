/* What the fast path's files share (client_fast.c: attach and running;
 * client_fast_wait.c: waiting on the other ranks; client_fast_desc.c: the
 * op descriptors ranks publish). Internal to libspclient. */
#ifndef SPC_CLIENT_FAST_INTERNAL_H
#define SPC_CLIENT_FAST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "client_fast.h"
#include "client_fast_tune.h"
#include "fast_seg.h"
#include "planner.h"

/* Op times for the stats (client_fast_clock.c). */
typedef struct {
  int tsc;                  /* the kernel keeps time with the TSC */
  uint64_t calib_ns, calib_ticks;
  double ns_per_tick;       /* 0 until calibrated */
  uint64_t stamp_ns;        /* the last stamp, while not calibrated */
} spc_fast_clock;

/* A buffer of another rank, mapped read-only (client_fast_map.c). */
typedef struct {
  uint64_t dev, ino, size;
  uint8_t *base;
} spc_fast_map;

/* The last repeat this rank published and the call it came from
 * (client_fast_again.c), with what its descriptor depended on: cap as it
 * was, and this rank's small, tiny and lines. */
typedef struct {
  int ok;
  spc_op op;
  spc_tensor in, out;
  int64_t sizes[SPK_FSEG_MAXLIST], sizes2[SPK_FSEG_MAXLIST];
  int cap;
  uint8_t small, tiny, lines;
  spk_fseg_desc d;
} spc_fast_again;

/* Whether every rank may take every other's fds (client_fast_map.c). */
enum { SPC_FAST_CAP_UNKNOWN, SPC_FAST_CAP_NO, SPC_FAST_CAP_YES };

/* Where this rank's and the others' inputs are staged (client_fast.c,
 * client_fast_lines.c). Ops whose input and output fit half the staging
 * (every small op) alternate halves by sequence number, so a rank may
 * fill one while the others still read the other: last_use[h], the last
 * fast op that used half h (an op that fits no half uses both). */
typedef struct {
  uint64_t half;
  uint64_t last_use[2];
  /* Per rank, whether its op of f->plan fits a half; whether its input
   * is inline (kernels/fast_seg.h: a small op's half of its own). */
  uint8_t small[SPK_FSEG_MAXWORLD];
  uint8_t tiny[SPK_FSEG_MAXWORLD];
  /* Per rank, the tagged lines its input takes (0: none; see
   * client_fast_lines.c), as small and tiny, and where this rank gathers
   * it to be read; the lines this rank's input of f->plan takes, which the
   * others poll. This rank's op being published: once its input is
   * staged (lines_put = s), where that input is (in lines or inline). */
  uint8_t lines[SPK_FSEG_MAXWORLD];
  uint8_t lines_polled;
  uint64_t lines_put;
  const void *lines_src;
  uint64_t lines_bytes;
  /* This rank's input of op claim_put was staged (in lines or the
   * staging), claim_bytes long (client_fast.c, claim_next). */
  uint64_t claim_put, claim_bytes;
} spc_fast_staging;

/* How this rank waits for the others (client_fast_wait.c; the policy
 * is client_fast_tune.h's). */
typedef struct {
  int over;                     /* more ranks than the node has CPUs */
  uint64_t spin_ns, spin_max;   /* wait_for's budget (fast_spin_*_ns) */
  uint64_t mid_ns;              /* spc__fast_await's budget, adapted like
                                 * spin_ns up to the daemon's mid_spin_ns */
  /* Waits so far; the next one sleeps at once (see relocate_next). */
  uint64_t waits, relocated_at;
  int relocate;
} spc_fast_waiting;

/* Ops read in the callers' buffers (client_fast_map.c, client_fast_cma.c):
 * whether they may be, the other ranks' processes and what is mapped of
 * their buffers. */
typedef struct {
  int cap;
  int pidfd[SPK_FSEG_MAXWORLD];
  pid_t pid[SPK_FSEG_MAXWORLD];  /* as probed: process_vm_readv's */
  int seg_fd;                    /* the segment's memfd, which it probes */
  /* This rank's own probe of the others, as its canmap word says it (the
   * word is the others' to read; a rank trusts its own memory): 0 not
   * yet, 1 some rank may not be read, 2 every rank may. */
  int probed;
  uint64_t probe_word;           /* what the others read to probe */
  /* Of the op running: which bases (rank * SPK_T_COUNT + t) are
   * addresses in another rank (caller memory, client_fast_cma.c), and
   * the scratch those are read into, when not straight into an output. */
  uint8_t remote[SPK_FSEG_MAXWORLD * SPK_T_COUNT];
  uint8_t *scratch;
  size_t scratch_cap;
  spc_fast_map maps[SPK_FSEG_MAXWORLD][SPC_FAST_MAPS];
  unsigned map_next[SPK_FSEG_MAXWORLD];
  uint64_t freed_seen[SPK_FSEG_MAXWORLD];
} spc_fast_mapping;

/* One op through the fast path's steps (client_fast.c: fits, publish,
 * run, done), as a work item is through an engine's: the call, then what
 * each step leaves the next. */
typedef struct {
  const spc_op *op;
  const spc_tensor *in, *out;
  int again;                    /* fits: the last published repeat */
  uint64_t seq;                 /* publish: its sequence number */
  uint64_t t0;                  /* publish: rank 0's clock stamp */
  int repeat;                   /* publish: every rank's a repeat */
  int any;                      /* run: some rank reads in place */
  int skip;                     /* run: a rank's in-place reads failed */
} spc_fast_op;

typedef struct spc_fast {
  spk_fseg_hdr *hdr;
  uint64_t size;
  uint64_t stage;               /* the layout, as checked at attach */
  spk_fast_tune tune;           /* the header's, as copied at attach */
  uint64_t seq;                 /* last sequence number this rank took */
  /* seen_pub: the last s every rank was seen to have published (so
   * every fast op before it is done everywhere: a rank publishes only
   * after its last op is done). */
  uint64_t seen_pub;
  /* A small fast op this rank is done with but has not said so (0:
   * none). Publishing it costs a store to the line the others poll and
   * a fence; the next op's publish says it too, as nobody waits on it
   * but a rank that must reuse the staging an op that fits no half
   * takes, and that rank says so before it waits (spc__fast_flush). */
  uint64_t pending;
  spc_fast_staging staging;     /* where inputs go: halves, lines */
  spc_fast_waiting wait;        /* client_fast_wait.c */
  spk_fseg_desc descs[SPK_FSEG_MAXWORLD]; /* every rank's, for planning */
  spk_plan plan;
  spc_fast_clock clock;
  /* The descriptors plan was built from (seq zeroed); plan_ok: it built.
   * Trainers repeat the same ops, so most ops reuse the plan. */
  spk_fseg_desc planned[SPK_FSEG_MAXWORLD];
  int plan_ok;
  /* Of the plan, as built (client_fast_plan.c): each rank reduces everything
   * into its own output; every step writes a caller's output directly;
   * flat: the bytes of the one flat reduce that replicated runs (0: it
   * runs the plan's steps); copies: each move is one memcpy. */
  int replicated, direct, copies;
  uint64_t flat;
  spc_fast_again again;
  spc_fast_mapping map;         /* client_fast_map.c, client_fast_cma.c */
  /* Per rank: its op of the descriptors read is read in place; its op of
   * f->plan lies within its staging. */
  uint8_t inplace[SPK_FSEG_MAXWORLD];
  uint8_t in_stage[SPK_FSEG_MAXWORLD];
  uint8_t gathered[SPK_FSEG_MAXWORLD][SPK_FSEG_LINED]
      __attribute__((aligned(64)));
} spc_fast;

/* Where a rank's counter lives in its area of the segment. */
#define FIELD(name) offsetof(spk_fseg_rank, name)

/* Rank r's area of the segment. */
static inline spk_fseg_rank *spc__fast_rank(const spc_fast *f, int r) {
  return spk_fseg_rank_of(f->hdr, f->stage, r);
}

/* Rank r's staging of kind t (SPK_T_IN/OUT) for op s of f->plan. */
static inline uint8_t *spc__fast_stage(const spc_fast *f, int r, int t,
                                       uint64_t s) {
  if (t == SPK_T_IN && f->staging.tiny[r])
    return spc__fast_rank(f, r)->inl[s & 1];
  if (t == SPK_T_IN && f->staging.lines[r])
    return (uint8_t *)f->gathered[r];
  return spk_fseg_stage_of(f->hdr, f->stage, r, t) +
         (f->staging.small[r] ? (s & 1) * f->staging.half : 0);
}

/* ---- client_fast_plan.c ---- */

/* Of rank r's op, from its descriptor d: whether it fits half the
 * staging (small), travels in the polled line (tiny), or in how many
 * tagged lines (lines). Every rank decides it alike from d; its owner
 * from the same bytes before it publishes d. */
void spc__fast_fit(spc_fast *f, int r, const spk_fseg_desc *d);
/* The plan of the descriptors in f->descs: the last one when every rank
 * repeats its op (repeat: this rank saw so already), else a new one. */
int spc__fast_plan_get(spc_group *g, int repeat);
/* Runs the plan's steps that write this rank's output of op s, from and
 * to bases (spc__fast_bases); *direct_p says whether they wrote the
 * caller's output itself rather than the staging. *skip_p in: run no step
 * (this rank could not map the others' buffers), only the barrier; out:
 * set when reading another rank's memory failed (the error returned). */
int spc__fast_plan_run(spc_group *g, uint64_t s, const spc_tensor *out,
                       uint8_t **bases, int mine, int *skip_p,
                       int *direct_p);
/* Whether an all_reduce of out_bytes per rank runs replicated (every rank
 * reduces everything into its own output). */
int spc__fast_replicates(const spc_fast *f, int world, uint64_t out_bytes);

/* ---- client_fast_clock.c ---- */

void spc__fast_clock_init(spc_fast_clock *k);
/* A stamp at the start of an op, and the ns since one. */
uint64_t spc__fast_clock_stamp(spc_fast_clock *k);
uint64_t spc__fast_clock_ns(spc_fast_clock *k, uint64_t stamp);

/* ---- client_fast_wait.c ---- */

/* The wait budgets of a new segment, from the group's size and the CPUs
 * (see client_fast_wait.c). */
void spc__fast_wait_init(spc_fast *f, int world);
uint64_t spc__fast_now_ns(void);
/* Store a counter of this rank (me) and wake whoever waits on it. */
void spc__fast_publish(spk_fseg_hdr *h, spk_fseg_rank *me, uint64_t *word,
                       uint64_t v);
/* Store read_descs = s (kernels/fast_seg.h) and wake the ranks seen
 * asleep on the segment, if any: without the fence of a publish, which
 * a rank that falls asleep at this very moment would need; it wakes at
 * its sleep's timeout instead. */
void spc__fast_read_descs(spk_fseg_hdr *h, spk_fseg_rank *me, uint64_t s);
/* Every rank's counter at byte `field` of its area is at least v (as
 * the rank means it: spk_fseg_said)? */
int spc__fast_all_at_least(const spc_fast *f, int world, size_t field,
                           uint64_t v);
/* Publish this rank's pending "done" (consumed and fdone). */
void spc__fast_flush(spc_group *g);
/* The segment's broken status, as the call's failure; SPC_OK if not. */
int spc__fast_broken(spc_group *g);
/* Until every rank's counter at `field` reaches v (the daemon's watchdog
 * sees that this rank waits). */
int spc__fast_wait_all(spc_group *g, size_t field, uint64_t v);

/* ---- client_fast_desc.c ---- */

/* Whether in and out may run op `kind` here (anything else is the
 * daemon's to judge). */
int spc__fast_fits(const spc_fast *f, const spc_group *g, int kind,
                   const spc_tensor *in, const spc_tensor *out);
/* This rank's descriptor of op (eligible cleared for what only the
 * daemon can take), and the planners' arguments of a descriptor. */
void spc__fast_desc_fill(spk_fseg_desc *d, const spc_group *g,
                         const spc_op *op, const spc_tensor *in,
                         const spc_tensor *out);
void spc__fast_args_of(const spk_fseg_desc *d, spk_op_args *a);
/* Bytes of a tensor of d's dtype and the given shape; UINT64_MAX when
 * that is no size. */
uint64_t spc__fast_desc_bytes(const spk_fseg_desc *d, int ndim,
                              const int64_t *shape);
/* Every rank's descriptor of s into f->descs: *all_p, whether every one
 * may run here; *repeat_p, whether every one is the op of f->plan. */
void spc__fast_desc_read(spc_fast *f, int world, uint64_t s, int *all_p,
                         int *repeat_p);
/* Whether every byte d's op reads or writes lies in its rank's staging. */
int spc__fast_desc_in_stage(const spc_fast *f, const spk_fseg_desc *d);
/* Take the next sequence number and publish d under it (marked a repeat
 * when it is this rank's op of f->plan). */
int spc__fast_desc_publish(spc_group *g, spk_fseg_desc *d);
/* This rank reads nobody's descriptor of op s (it takes the daemon
 * path): its ring slots may be reused. */
void spc__fast_consumed(spc_group *g, uint64_t s);

/* Take the next sequence number and publish d, whose `repeat` is
 * decided (a kept repeat: spc__fast_again), under it. */
int spc__fast_desc_republish(spc_group *g, spk_fseg_desc *d);

/* ---- client_fast_lines.c ---- */

/* The tagged lines an input of `bytes` takes; 0 when it takes none. */
uint8_t spc__fast_lines_of(int op, uint64_t bytes);
/* This rank's input of op s (staging.lines[me] lines, or inline:
 * staging.tiny[me]) is at src: it goes into the lines with their tags, or
 * into the polled line, when s is published (spc__fast_lines_tag), which
 * says whether s is a repeat. */
void spc__fast_lines_put(spc_fast *f, uint64_t s, const void *src,
                         uint64_t bytes);
void spc__fast_lines_tag(spc_fast *f, int me, uint64_t s, int repeat);
/* Rank r's input of op s, from its lines into f->gathered[r]. */
void spc__fast_lines_get(spc_fast *f, int r, uint64_t s);

/* Whether rank r's lines show its input of op s, a repeat of its op in
 * f->plan (READY); do not show it yet (NOT_YET); or say nothing of s that
 * its polled line would not say better (ASK: r takes no lines in the
 * plan, or op s is not a repeat in lines). The owner tags its lines in
 * order, each with a release store, so the last one's tag says that the
 * others are written too: a reader polls that one alone. */
enum { SPC_LINES_NOT_YET, SPC_LINES_READY, SPC_LINES_ASK };
static inline int spc__fast_lines_state(const spc_fast *f, int r,
                                        uint64_t s) {
  int n = f->plan_ok ? f->staging.lines[r] : 0;
  if (n == 0)
    return SPC_LINES_ASK;
  const spk_fseg_line *l = &spc__fast_rank(f, r)->lines[s & 1][n - 1];
  uint64_t tag = SPK_LOAD(&l->tag, __ATOMIC_ACQUIRE);
  return tag == (s << 1 | 1) ? SPC_LINES_READY
         : tag == s << 1     ? SPC_LINES_ASK
                             : SPC_LINES_NOT_YET;
}

/* ---- client_fast_again.c ---- */

/* Whether the descriptor this rank published last for the same call
 * (f->again.d) is what the call would publish now (a repeat that
 * stages). */
int spc__fast_again(const spc_group *g, const spc_op *op,
                    const spc_tensor *in, const spc_tensor *out);
/* Keep d, just published for this call, when it is such a repeat; forget
 * what was kept (a buffer was freed). */
void spc__fast_again_keep(spc_group *g, const spc_op *op, const spc_tensor *in,
                          const spc_tensor *out, const spk_fseg_desc *d);
void spc__fast_again_forget(spc_fast *f);

/* ---- client_fast_map.c ---- */

/* Publish who this rank is (at attach), and undo what the others' maps
 * hold (at detach). */
void spc__fast_map_init(spc_group *g);
void spc__fast_map_free(spc_fast *f, int world);
/* Probe the other ranks and learn whether all may take each other's fds,
 * as far as can be without waiting. */
void spc__fast_map_step(spc_group *g);
/* Whether this rank's op on in and out is to be read in place, and its
 * where (the descriptor's) for it. */
int spc__fast_map_want(const spc_group *g, int kind, const spc_tensor *in,
                       const spc_tensor *out);
void spc__fast_where_fill(spk_fseg_where *w, const spc_tensor *in,
                          const spc_tensor *out);
/* Every rank's input and output of op s of f->plan, as the plan's bases:
 * in its staging or, when read in place (f->inplace), in its buffers.
 * *any_p: some rank's op is read in place. Fails when a rank's buffer
 * cannot be mapped (*any_p is still right). */
int spc__fast_bases(spc_group *g, uint64_t s, const spc_tensor *in,
                    const spc_tensor *out, uint8_t **bases, int *any_p);

/* ---- client_fast_cma.c ---- */

/* Steps of f->plan that read another rank's caller memory (f->map.remote):
 * run with process_vm_readv, straight into this rank's output where a
 * step is one plain copy, else through f->map.scratch in pieces. */
int spc__fast_cma_move(spc_group *g, const spk_move *m, uint8_t *const *bases);
int spc__fast_cma_reduce(spc_group *g, const spk_reduce *r,
                         uint8_t *const *bases);
/* Whether reduce step r reads another rank's caller memory. */
int spc__fast_cma_reads(const spc_fast *f, const spk_reduce *r);
/* Every rank's input in caller memory read whole into f->map.scratch, its
 * base in bases replaced (a replicated all_reduce's inputs, small). */
int spc__fast_cma_inputs(spc_group *g, uint8_t **bases);
void spc__fast_cma_free(spc_fast *f);

#endif
