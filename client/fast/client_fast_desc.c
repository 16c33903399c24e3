/* The op descriptors of the fast path (see client_fast.c): what a rank
 * publishes of each op in its ring, what may run here, and the planners'
 * arguments every rank rebuilds from all ranks' descriptors. */
#include <stddef.h>
#include <string.h>

#include "client_fast_internal.h"
#include "fast_sync.h"

/* b is one of c's own buffers (spc_buffer_alloc), not a record made by
 * hand for memory the daemon may know under another client. */
static int buffer_own(const spc_client *c, const spc_buffer *b) {
  for (const spc_buffer *x = c->buffers; x != NULL; x = x->next)
    if (x == b)
      return 1;
  return 0;
}

/* Host memory of this client's own buffers, inside, aligned, within the
 * staging size (or the size of ops read in place, when this one is);
 * in and out apart, or the very same bytes for all_reduce. Anything else
 * is the daemon's to judge (and to refuse in its own words). */
int spc__fast_fits(const spc_fast *f, const spc_group *g, int kind,
                   const spc_tensor *in, const spc_tensor *out) {
  const spc_tensor *ts[2] = {in, out};
  uint64_t n[2];
  if (kind < 0 || kind >= SPK_OP_COUNT)
    return 0;
  uint64_t op_bytes = f->hdr->op_bytes[kind];
  uint64_t limit = op_bytes < f->stage ? op_bytes : f->stage;
  for (int i = 0; i < 2; i++) {
    const spc_tensor *t = ts[i];
    size_t es = spc_dtype_size(t->dtype);
    n[i] = spc__tensor_bytes(t);
    if (!buffer_own(g->client, t->buf) || t->buf->gpu != NULL || es == 0 ||
        t->offset % es != 0 || t->ndim < 1 || t->ndim > SPC_MAX_DIMS ||
        t->offset > t->buf->size || n[i] > t->buf->size - t->offset)
      return 0;
    for (int d = 0; d < t->ndim; d++)
      if (t->shape[d] < 0)
        return 0;
  }
  if ((n[0] > limit || n[1] > limit) &&
      (op_bytes == 0 || !spc__fast_map_want(g, kind, in, out)))
    return 0;
  /* By address: two records may wrap the same caller memory. */
  uintptr_t a = (uintptr_t)spc_tensor_data(in);
  uintptr_t b = (uintptr_t)spc_tensor_data(out);
  int same = a == b && n[0] == n[1];
  int apart = a + n[0] <= b || b + n[1] <= a;
  return (same && kind == SPK_OP_ALL_REDUCE) || apart || n[0] == 0 ||
         n[1] == 0;
}

void spc__fast_desc_fill(spk_fseg_desc *d, const spc_group *g,
                         const spc_op *op, const spc_tensor *in,
                         const spc_tensor *out) {
  int ns = op->sizes ? (op->nsizes ? op->nsizes : g->world) : 0;
  int ns2 = op->sizes2 ? (op->nsizes2 ? op->nsizes2 : g->world) : 0;
  d->op = op->kind;
  d->dtype = (uint32_t)in->dtype;
  d->flags = op->flags;
  d->ndims = op->ndims;
  d->dims[0] = op->dims[0], d->dims[1] = op->dims[1];
  d->scalar = op->scalar;
  d->in_ndim = in->ndim, d->out_ndim = out->ndim;
  memcpy(d->in_shape, in->shape, sizeof(d->in_shape));
  memcpy(d->out_shape, out->shape, sizeof(d->out_shape));
  d->nsizes = ns < 0 || ns > SPK_FSEG_MAXLIST ? -1 : ns;
  d->nsizes2 = ns2 < 0 || ns2 > SPK_FSEG_MAXLIST ? -1 : ns2;
  if (d->nsizes > 0)
    memcpy(d->sizes, op->sizes, (size_t)ns * sizeof(int64_t));
  if (d->nsizes2 > 0)
    memcpy(d->sizes2, op->sizes2, (size_t)ns2 * sizeof(int64_t));
  /* A dtype the client does not know, or lists too long for the ring,
   * are for the daemon. */
  if (d->nsizes < 0 || d->nsizes2 < 0 || in->dtype != out->dtype)
    d->eligible = 0;
}

/* A list length a descriptor can hold: 0..SPK_FSEG_MAXLIST. */
static int list_held(int32_t n) {
  return n >= 0 && n <= SPK_FSEG_MAXLIST;
}

/* Whether every count of d stays inside what d holds: its size lists,
 * its dims and its shapes. Another rank writes its descriptors and may
 * write anything: a count past them would make the planners read past
 * the descriptor (its values are theirs to check, within it). */
static int desc_bounded(const spk_fseg_desc *d) {
  return list_held(d->nsizes) && list_held(d->nsizes2) && d->ndims >= 0 &&
         d->ndims <= 2 && d->in_ndim >= 1 && d->in_ndim <= SPK_MAX_DIMS &&
         d->out_ndim >= 1 && d->out_ndim <= SPK_MAX_DIMS;
}

/* The entries of a list of length n that a descriptor holds. */
static int list_len(int32_t n) {
  return n < 0 ? 0 : n > SPK_FSEG_MAXLIST ? SPK_FSEG_MAXLIST : n;
}

/* d is one spc__fast_desc_read took (desc_bounded). Should one that is
 * not come here all the same, its list lengths count only the entries it
 * holds, so that no planner reads past it. */
void spc__fast_args_of(const spk_fseg_desc *d, spk_op_args *a) {
  memset(a, 0, sizeof(*a));
  a->op = (spk_op_kind)d->op;
  a->dtype = (spk_dtype)d->dtype;
  a->in.ndim = d->in_ndim;
  a->out.ndim = d->out_ndim;
  memcpy(a->in.dim, d->in_shape, sizeof(a->in.dim));
  memcpy(a->out.dim, d->out_shape, sizeof(a->out.dim));
  a->ndims = d->ndims;
  a->dims[0] = d->dims[0], a->dims[1] = d->dims[1];
  a->nsizes = list_len(d->nsizes);
  a->sizes = a->nsizes ? d->sizes : NULL;
  a->nsizes2 = list_len(d->nsizes2);
  a->sizes2 = a->nsizes2 ? d->sizes2 : NULL;
  a->scalar = d->scalar;
  a->flags = d->flags;
}

/* A descriptor's first cache line. */
#define HEAD offsetof(spk_fseg_desc, in_shape)

/* a == b, for descriptors zeroed before they were filled: the head
 * (which holds the list lengths), the shapes and the lists' entries. */
static int desc_same(const spk_fseg_desc *a, const spk_fseg_desc *b) {
  size_t lists = offsetof(spk_fseg_desc, sizes);
  if (memcmp(a, b, lists) != 0)
    return 0;
  size_t n = a->nsizes > 0 ? (size_t)a->nsizes : 0;
  size_t n2 = a->nsizes2 > 0 ? (size_t)a->nsizes2 : 0;
  return memcmp(a->sizes, b->sizes, n * sizeof(a->sizes[0])) == 0 &&
         memcmp(a->sizes2, b->sizes2, n2 * sizeof(a->sizes2[0])) == 0;
}

/* The bytes of a tensor of ndim dims `shape` of d's dtype, or
 * UINT64_MAX when they are not a size (a rank's garbage: it may write
 * anything in its slot). */
uint64_t spc__fast_desc_bytes(const spk_fseg_desc *d, int ndim,
                              const int64_t *shape) {
  uint64_t n = spk_dtype_size((spk_dtype)d->dtype);
  if (n == 0 || ndim < 1 || ndim > SPK_MAX_DIMS)
    return UINT64_MAX;
  for (int i = 0; i < ndim; i++)
    if (shape[i] < 0 || __builtin_mul_overflow(n, (uint64_t)shape[i], &n))
      return UINT64_MAX;
  return n;
}

/* Whether every byte d's op reads or writes lies in its rank's staging
 * (the planners bound every step by the shapes). */
int spc__fast_desc_in_stage(const spc_fast *f, const spk_fseg_desc *d) {
  return spc__fast_desc_bytes(d, d->in_ndim, d->in_shape) <= f->stage &&
         spc__fast_desc_bytes(d, d->out_ndim, d->out_shape) <= f->stage;
}

/* Every rank's descriptor of s into f->descs; whether all of them are
 * eligible for the fast path, and whether all repeat the last plan. A
 * rank's op read in place is bounded by its buffer (client_fast_map.c),
 * any other by its staging. */
void spc__fast_desc_read(spc_fast *f, int world, uint64_t s, int *all_p,
                         int *repeat_p) {
  int all = 1, repeat = f->plan_ok;
  for (int r = 0; r < world; r++) {
    const spk_fseg_rank *a = spc__fast_rank(f, r);
    const spk_fseg_desc *x = &a->ring[s % SPK_FSEG_RING];
    /* Its lines say that s is its op of the plan again, staged in them
     * (client_fast_lines.c): nothing else of r need be read. */
    if (spc__fast_lines_state(f, r, s) == SPC_LINES_READY) {
      f->inplace[r] = 0;
      f->descs[r].repeat = 1;
      all &= f->in_stage[r];
      continue;
    }
    f->inplace[r] = SPK_LOAD(&a->mapped, __ATOMIC_RELAXED) == s;
    /* A repeat's descriptor is f->planned[r] (plan_get copies it), and
     * only the first line of its slot was written. `repeated` says so
     * unless r already published its next op; then the slot does. */
    if (SPK_LOAD(&a->repeated, __ATOMIC_RELAXED) == s ||
        (SPK_LOAD(&x->seq, __ATOMIC_RELAXED) == s &&
         SPK_LOAD(&x->repeat, __ATOMIC_RELAXED))) {
      f->descs[r].repeat = 1;
      all &= f->inplace[r] || f->in_stage[r];
      continue;
    }
    /* Checked in this rank's copy: r may write its slot meanwhile. */
    spk_fseg_desc_get(&f->descs[r], x);
    f->descs[r].repeat = 0;
    repeat = 0;
    all &= f->descs[r].eligible == 1 && f->descs[r].seq == s &&
           desc_bounded(&f->descs[r]) &&
           (f->inplace[r] || spc__fast_desc_in_stage(f, &f->descs[r]));
  }
  *all_p = all;
  *repeat_p = repeat && all;
}

/* The ring slot is free once every rank has read the descriptor it
 * held: known without a look when every rank was seen to publish since
 * (seen_pub: a rank publishes once it is done with its last op). The
 * look reads the line each other rank polls, which a rank that is ahead
 * has just written: a hand-off before this rank publishes.
 * A daemon-path op over a daemon-path op's slot needs no look: a reader
 * of the old one that finds the new one (or a mix of both: neither is
 * eligible) follows this rank to the daemon all the same. So async ops,
 * which take the daemon's path, never wait here, however many a rank
 * starts before the others (it may start them before it sends the
 * message that the others wait for before they start theirs). */
static int slot_wait(spc_group *g, const spk_fseg_desc *slot,
                     const spk_fseg_desc *d, uint64_t s) {
  uint64_t need = spk_fsync_slot_needs(s, g->fast->seen_pub, d->eligible,
                                       slot->eligible);
  return need == 0 ? SPC_OK : spc__fast_wait_all(g, FIELD(consumed), need);
}

int spc__fast_desc_republish(spc_group *g, spk_fseg_desc *d) {
  spc_fast *f = g->fast;
  uint64_t s = f->seq + 1;
  spk_fseg_rank *me = spc__fast_rank(f, g->rank);
  spk_fseg_desc *slot = &me->ring[s % SPK_FSEG_RING];
  int rc = slot_wait(g, slot, d, s);
  if (rc < 0) {
    f->staging.lines_put = 0; /* s is not published: its input may go */
    return rc;
  }
  d->seq = s;
  /* Nobody reads a repeat's slot but the daemon's watchdog, which reads
   * its first line (the op's kind). */
  spk_fseg_desc_put(slot, d, d->repeat ? HEAD : sizeof(*d));
  if (d->repeat && d->where.mapped)
    slot->where = d->where;
  f->seq = s;
  spc__fast_lines_tag(f, g->rank, s, d->repeat);
  if (d->repeat)
    SPK_STORE(&me->repeated, s, __ATOMIC_RELAXED);
  if (d->where.mapped)
    SPK_STORE(&me->mapped, s, __ATOMIC_RELAXED);
  spc__fast_publish(f->hdr, me, &me->published, s);
  /* Publishing s says "done with s - 1" (spk_fseg_said): a later flush of
   * an older op would take consumed back. */
  f->pending = 0;
  return SPC_OK;
}

int spc__fast_desc_publish(spc_group *g, spk_fseg_desc *d) {
  spc_fast *f = g->fast;
  d->seq = 0;
  d->repeat = d->eligible && f->plan_ok && desc_same(d, &f->planned[g->rank]);
  return spc__fast_desc_republish(g, d);
}

int spc__fast_slow(spc_group *g, const spc_op *op, const spc_tensor *in,
                   const spc_tensor *out) {
  if (g->fast == NULL)
    return SPC_OK;
  spk_fseg_desc d;
  memset(&d, 0, sizeof(d));
  if (op != NULL && in != NULL && out != NULL)
    spc__fast_desc_fill(&d, g, op, in, out);
  d.eligible = 0;
  int rc = spc__fast_desc_publish(g, &d);
  if (rc == SPC_OK)
    spc__fast_consumed(g, g->fast->seq);
  return rc;
}

void spc__fast_consumed(spc_group *g, uint64_t s) {
  spk_fseg_rank *me = spc__fast_rank(g->fast, g->rank);
  spc__fast_publish(g->fast->hdr, me, &me->consumed, s);
}
