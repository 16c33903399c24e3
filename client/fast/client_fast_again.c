/* The same call again (see client_fast.c). Trainers repeat their ops, and
 * a repeated op publishes the very descriptor it published the last time.
 * Checking the tensors, building the descriptor and comparing it with the
 * plan's cost about a third of a small op's own work (docs/performance.md),
 * so each published repeat is kept with the call it came from, and a call
 * equal to it, field for field and list entry for list entry, publishes
 * the kept one while nothing else the descriptor depends on changed: the
 * caller's buffers (a free forgets: a new buffer may take a freed one's
 * address), whether the group reads in place (cap), and whether the plan
 * built (plan_ok). This rank's op in the plan cannot change meanwhile: a
 * publish that is no repeat forgets. */
#include <string.h>

#include "client_fast_internal.h"

/* Entries of the list op names (as spc__fast_desc_fill counts them). */
static int list_len(const spc_group *g, const int64_t *list, int n) {
  return list == NULL ? 0 : n ? n : g->world;
}

static int op_same(const spc_group *g, const spc_op *a, const spc_op *b,
                   const int64_t *sizes, const int64_t *sizes2) {
  if (a->kind != b->kind || a->ndims != b->ndims || a->dims[0] != b->dims[0] ||
      a->dims[1] != b->dims[1] || a->sizes != b->sizes ||
      a->nsizes != b->nsizes || a->sizes2 != b->sizes2 ||
      a->nsizes2 != b->nsizes2 || a->scalar != b->scalar ||
      a->flags != b->flags)
    return 0;
  /* The same lists, which the caller may have rewritten since. */
  size_t n = (size_t)list_len(g, a->sizes, a->nsizes) * sizeof(int64_t);
  size_t n2 = (size_t)list_len(g, a->sizes2, a->nsizes2) * sizeof(int64_t);
  return (n == 0 || memcmp(a->sizes, sizes, n) == 0) &&
         (n2 == 0 || memcmp(a->sizes2, sizes2, n2) == 0);
}

int spc__fast_again(const spc_group *g, const spc_op *op,
                    const spc_tensor *in, const spc_tensor *out) {
  const spc_fast *f = g->fast;
  const spc_fast_again *k = &f->again;
  return k->ok && k->cap == f->map.cap && f->plan_ok &&
         memcmp(in, &k->in, sizeof(*in)) == 0 &&
         memcmp(out, &k->out, sizeof(*out)) == 0 &&
         op_same(g, op, &k->op, k->sizes, k->sizes2);
}

/* Only a repeat that stages is kept: an op read in place names the
 * buffers' fds afresh each time, and a descriptor that is no repeat is
 * compared with the plan anyway. Lists longer than a descriptor holds
 * are not eligible, so the kept copies always fit. */
void spc__fast_again_keep(spc_group *g, const spc_op *op, const spc_tensor *in,
                          const spc_tensor *out, const spk_fseg_desc *d) {
  spc_fast *f = g->fast;
  spc_fast_again *k = &f->again;
  k->ok = d->eligible && d->repeat && !d->where.mapped;
  if (!k->ok)
    return;
  k->op = *op;
  k->in = *in;
  k->out = *out;
  k->d = *d;
  k->cap = f->map.cap;
  k->small = f->staging.small[g->rank];
  k->tiny = f->staging.tiny[g->rank];
  k->lines = f->staging.lines[g->rank];
  int n = list_len(g, op->sizes, op->nsizes);
  int n2 = list_len(g, op->sizes2, op->nsizes2);
  if (n > 0)
    memcpy(k->sizes, op->sizes, (size_t)n * sizeof(int64_t));
  if (n2 > 0)
    memcpy(k->sizes2, op->sizes2, (size_t)n2 * sizeof(int64_t));
}

void spc__fast_again_forget(spc_fast *f) {
  f->again.ok = 0;
}
