#include "plan_overlap.h"

#include <stdlib.h>

#include "split_rule.h"

/* One tensor's bytes in one memory. */
typedef struct {
  uint64_t mem[2], off, end, buf;
  int rank, t;
} span;

static int span_cmp(const void *pa, const void *pb) {
  const span *a = pa, *b = pb;
  for (int i = 0; i < 2; i++)
    if (a->mem[i] != b->mem[i])
      return a->mem[i] < b->mem[i] ? -1 : 1;
  if (a->off != b->off)
    return a->off < b->off ? -1 : 1;
  return a->rank - b->rank; /* ties in rank order: messages are stable */
}

static uint64_t tensor_bytes(const spk_op_args *a, int t) {
  size_t esize = spk_dtype_size(a->dtype);
  int64_t n;
  if (spk_shape_numel(t == SPK_T_IN ? &a->in : &a->out, esize, &n, NULL) < 0)
    return 0;
  return (uint64_t)n * esize;
}

/* Byte offset of the slot that starts `before` elements along dim d of a
 * tensor of shape s; 0 when the slot is not one contiguous range (a dim
 * before d is not 1), so it cannot be the same bytes as another tensor. */
static int slot_start(const spk_shape *s, int d, int64_t before, size_t esize,
                      uint64_t *off_p) {
  for (int i = 0; i < d; i++)
    if (s->dim[i] != 1)
      return 0;
  uint64_t inner = esize;
  for (int i = d + 1; i < s->ndim; i++)
    inner *= (uint64_t)s->dim[i];
  *off_p = (uint64_t)before * inner;
  return 1;
}

/* 1 when in and out (one rank's) overlap in a layout the op runs in place.
 * Why these are safe with the plans the planners make (a plan runs every
 * reduce step, then every move, each phase in parallel):
 * - all_reduce in place: reduce step c writes out_c's chunk c, which is
 *   in_c's chunk c, read only by that step, and a reduce step reads all
 *   its sources of an element before it writes that element (plan_exec.c
 *   by blocks, daemon/gpu/plan_cuda.cu by thread); the moves then copy the reduced
 *   chunks, when no input is read any more.
 * - reduce_scatter in place: step r writes in_r's slot r, read only by
 *   step r itself.
 * - all_gather in place: in_r -> out_r's slot r is the same bytes (the
 *   move is dropped); every other move reads in_r and writes another
 *   tensor or another slot. A scaled gather would rewrite in_r while
 *   other moves read it: not in place. */
static int in_place_ok(const spk_op_args *const *args, int world, int scale,
                       const span *in, const span *out) {
  const spk_op_args *a = args[in->rank];
  size_t esize = spk_dtype_size(a->dtype);
  int r = in->rank, d;
  int64_t before = 0;
  uint64_t at;
  if (a->op == SPK_OP_ALL_REDUCE)
    return in->off == out->off;
  if (a->ndims < 1 ||
      spk_dim_normalize(a->dims[0], a->in.ndim, "dim", &d, NULL) < 0)
    return 0;
  if (a->op == SPK_OP_ALL_GATHER && scale == SPK_SCALE_NONE) {
    for (int k = 0; k < r; k++)
      before += args[k]->in.dim[d];
    return slot_start(&a->out, d, before, esize, &at) &&
           in->off == out->off + at;
  }
  if (a->op == SPK_OP_REDUCE_SCATTER) {
    if (a->nsizes)
      for (int k = 0; k < r; k++)
        before += a->sizes[k];
    else
      before = spk_split_offset(a->in.dim[d], world, r);
    return slot_start(&a->in, d, before, esize, &at) &&
           out->off == in->off + at;
  }
  return 0;
}

static const char *t_name(int t) {
  return t == SPK_T_IN ? "input" : "output";
}

static int overlap_error(const spk_op_args *a, const span *x, const span *y,
                         spk_err *err) {
  const char *rule;
  switch (a->op) {
  case SPK_OP_ALL_REDUCE:
    rule = "all_reduce runs in place only when a rank's output is its input";
    break;
  case SPK_OP_ALL_GATHER:
    rule = "all_gather runs in place only when a rank's input is its own "
           "contiguous slot of its output, unscaled";
    break;
  case SPK_OP_REDUCE_SCATTER:
    rule = "reduce_scatter runs in place only when a rank's output is its "
           "own contiguous slot of its input";
    break;
  default:
    rule = "this op does not run in place";
    break;
  }
  return spk_err_set(err, SPK_EINVAL,
                     "%s: rank %d %s (buffer %llu, bytes [%llu, %llu)) and "
                     "rank %d %s (buffer %llu, bytes [%llu, %llu)) share "
                     "memory; %s", spk_op_name(a->op), x->rank,
                     t_name(x->t), (unsigned long long)x->buf,
                     (unsigned long long)x->off, (unsigned long long)x->end,
                     y->rank, t_name(y->t), (unsigned long long)y->buf,
                     (unsigned long long)y->off, (unsigned long long)y->end,
                     rule);
}

/* 1 when m copies bytes onto themselves. */
static int move_is_identity(const spk_move *m, const spk_tensor_loc *locs) {
  const spk_tensor_loc *s = &locs[m->src_rank * SPK_T_COUNT + m->src_t];
  const spk_tensor_loc *d = &locs[m->dst_rank * SPK_T_COUNT + m->dst_t];
  if ((s->mem[0] | s->mem[1]) == 0 || s->mem[0] != d->mem[0] ||
      s->mem[1] != d->mem[1] || s->off + m->src_off != d->off + m->dst_off)
    return 0;
  for (int i = 0; i + 1 < m->nd; i++)
    if (m->src_stride[i] != m->dst_stride[i])
      return 0;
  return 1;
}

static void drop_identity_moves(spk_plan *plan, const spk_tensor_loc *locs) {
  size_t n = 0;
  for (size_t i = 0; i < plan->nmoves; i++) {
    const spk_move *m = &plan->moves[i];
    if (!move_is_identity(m, locs)) {
      plan->moves[n++] = *m;
      continue;
    }
    uint64_t bytes = 1;
    for (int k = 0; k < m->nd; k++)
      bytes *= m->len[k];
    plan->bytes -= bytes;
  }
  plan->nmoves = n;
}

/* The tensors t (input or output) that lie here and hold bytes, sorted
 * by memory and start. */
static int spans_collect(const spk_op_args *const *args, int world, int t,
                         const spk_tensor_loc *locs, span **spans_p,
                         size_t *n_p, spk_err *err) {
  span *s = malloc((size_t)world * sizeof(*s));
  if (s == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY,
                       "malloc of %d tensor spans failed", world);
  size_t n = 0;
  for (int r = 0; r < world; r++) {
    const spk_tensor_loc *l = &locs[r * SPK_T_COUNT + t];
    uint64_t bytes = tensor_bytes(args[r], t);
    if ((l->mem[0] | l->mem[1]) == 0 || bytes == 0)
      continue;
    s[n++] = (span){{l->mem[0], l->mem[1]}, l->off, l->off + bytes, l->buf,
                    r, t};
  }
  qsort(s, n, sizeof(*s), span_cmp);
  *spans_p = s;
  *n_p = n;
  return SPK_OK;
}

static int same_mem(const span *a, const span *b) {
  return a->mem[0] == b->mem[0] && a->mem[1] == b->mem[1];
}

/* Index of the first of the n sorted, disjoint outputs that ends after
 * the start of x (in x's memory), or n. */
static size_t first_after(const span *outs, size_t n, const span *x) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    const span *o = &outs[mid];
    int before = span_cmp(o, x) < 0 && (!same_mem(o, x) || o->end <= x->off);
    if (before)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Outputs must not share bytes with one another (two ranks writing one
 * place); inputs may share with inputs (both only read) and with an
 * output only in an in-place layout. Sorting makes this O(n log n): a
 * bad group of 64k ranks costs the loop no quadratic pass. */
static int overlap_walk(const spk_op_args *const *args, int world, int scale,
                        const span *ins, size_t nin, const span *outs,
                        size_t nout, int *in_place_p, spk_err *err) {
  for (size_t i = 1; i < nout; i++)
    if (same_mem(&outs[i - 1], &outs[i]) && outs[i].off < outs[i - 1].end)
      return overlap_error(args[0], &outs[i - 1], &outs[i], err);
  for (size_t i = 0; i < nin; i++) {
    const span *x = &ins[i];
    for (size_t j = first_after(outs, nout, x);
         j < nout && same_mem(&outs[j], x) && outs[j].off < x->end; j++) {
      if (outs[j].rank != x->rank ||
          !in_place_ok(args, world, scale, x, &outs[j]))
        return overlap_error(args[0], x, &outs[j], err);
      *in_place_p = 1;
    }
  }
  return SPK_OK;
}

int spk_plan_overlap(const spk_op_args *const *args, int world,
                     const spk_tensor_loc *locs, spk_plan *plan,
                     spk_err *err) {
  span *ins = NULL, *outs = NULL;
  size_t nin = 0, nout = 0;
  int in_place = 0;
  int rc = spans_collect(args, world, SPK_T_IN, locs, &ins, &nin, err);
  if (rc == SPK_OK)
    rc = spans_collect(args, world, SPK_T_OUT, locs, &outs, &nout, err);
  if (rc == SPK_OK)
    rc = overlap_walk(args, world, plan->scale, ins, nin, outs, nout,
                      &in_place, err);
  free(ins);
  free(outs);
  if (rc == SPK_OK && in_place)
    drop_identity_moves(plan, locs);
  return rc;
}
