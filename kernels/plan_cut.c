#include "plan_cut.h"

#include <stdlib.h>
#include <string.h>

static int stream_add(spk_stream *s, spk_piece p, uint64_t bytes,
                      spk_err *err) {
  int rc = spk_grow((void **)&s->pieces, s->npieces, &s->cap,
                    sizeof(*s->pieces), "cut pieces", err);
  if (rc < 0)
    return rc;
  s->pieces[s->npieces++] = p;
  s->bytes += bytes;
  return SPK_OK;
}

/* Append item i of `from` to `to`'s array of the same kind. */
static int local_add(void **items, size_t *n, size_t *cap, const void *item,
                     size_t size, spk_err *err) {
  if (*n == *cap) {
    size_t ncap = *cap ? *cap * 2 : 16;
    void *p = realloc(*items, ncap * size);
    if (p == NULL)
      return spk_err_set(err, SPK_ENO_MEMORY, "cut: realloc of %zu steps "
                         "failed", ncap);
    *items = p, *cap = ncap;
  }
  memcpy((uint8_t *)*items + *n * size, item, size);
  (*n)++;
  return SPK_OK;
}

static int cut_alloc(spk_cut *cut, const spk_plan *plan, int nnodes,
                     int self, spk_err *err) {
  memset(cut, 0, sizeof(*cut));
  cut->nnodes = nnodes, cut->self = self;
  cut->direct = plan->scale == SPK_SCALE_NONE;
  for (int ph = 0; ph < 2; ph++) {
    cut->send[ph] = calloc((size_t)nnodes, sizeof(spk_stream));
    cut->recv[ph] = calloc((size_t)nnodes, sizeof(spk_stream));
    spk_plan_init(&cut->local[ph], plan->world);
    cut->local[ph].dtype = plan->dtype;
    cut->local[ph].scale = plan->scale;
    cut->local[ph].red_op = plan->red_op;
    /* The node's plan decides once: a phase's own bytes are a part of
     * what the node touches. 1: every copy streams; 0: none. */
    cut->local[ph].stream_bytes = (uint64_t)spk_plan_streams(plan);
  }
  cut->proxy = calloc((size_t)plan->world * SPK_T_COUNT, 1);
  if (cut->send[0] && cut->send[1] && cut->recv[0] && cut->recv[1] &&
      cut->proxy)
    return SPK_OK;
  spk_cut_free(cut);
  return spk_err_set(err, SPK_ENO_MEMORY, "cut: calloc for %d nodes failed",
                     nnodes);
}

/* Reduce steps with a destination here run here; their remote sources
 * come in phase 0, into proxies. */
static int cut_reduces(const spk_plan *plan, const int *node_of,
                       spk_cut *cut, spk_err *err) {
  int rc = SPK_OK;
  for (size_t i = 0; i < plan->nreduces && rc == SPK_OK; i++) {
    const spk_reduce *r = &plan->reduces[i];
    int dn = node_of[r->geo.dst_rank];
    uint64_t bytes = spk_move_bytes(&r->geo);
    for (uint32_t k = r->src0; k < r->src0 + r->nsrc && rc == SPK_OK; k++) {
      const spk_rsrc *s = &plan->rsrcs[k];
      int sn = node_of[s->rank];
      if (sn == dn)
        continue;
      spk_piece p = {SPK_PIECE_RSRC, (uint32_t)i, k};
      if (sn == cut->self)
        rc = stream_add(&cut->send[0][dn], p, bytes, err);
      else if (dn == cut->self) {
        rc = stream_add(&cut->recv[0][sn], p, bytes, err);
        cut->proxy[s->rank * SPK_T_COUNT + s->t] = 1;
      }
    }
    if (rc == SPK_OK && dn == cut->self) {
      spk_plan *l = &cut->local[0];
      rc = local_add((void **)&l->reduces, &l->nreduces, &l->rcap, r,
                     sizeof(*r), err);
      l->bytes += bytes;
    }
  }
  return rc;
}

/* ---- moves whose source already went to the same node ---------------- */

/* Moves of the plan that carry one source span to one node: the first is
 * sent; the others are copied on that node from where the first landed
 * (an all_gather sends each input once per node, not once per rank). */
typedef struct {
  uint32_t *slot;             /* move index + 1; 0: empty */
  size_t mask;
} span_set;

static int same_source(const spk_move *a, const spk_move *b) {
  if (a->src_rank != b->src_rank || a->src_t != b->src_t ||
      a->src_off != b->src_off || a->nd != b->nd)
    return 0;
  for (int d = 0; d < a->nd; d++)
    if (a->len[d] != b->len[d] || a->src_stride[d] != b->src_stride[d])
      return 0;
  return 1;
}

static uint64_t source_hash(const spk_move *m, int dn) {
  uint64_t h = 1469598103934665603ull;
  uint64_t v[4] = {m->src_rank, m->src_t, m->src_off, (uint64_t)dn};
  for (int i = 0; i < 4; i++)
    h = (h ^ v[i]) * 1099511628211ull;
  for (int d = 0; d < m->nd; d++)
    h = ((h ^ m->len[d]) * 1099511628211ull ^ m->src_stride[d]) *
        1099511628211ull;
  return h;
}

/* The earlier move carrying m's source span to node dn, or m itself
 * (recorded) when it is the first. */
static const spk_move *span_first(span_set *s, const spk_plan *plan,
                                  const int *node_of, size_t i) {
  const spk_move *m = &plan->moves[i];
  int dn = node_of[m->dst_rank];
  for (size_t k = source_hash(m, dn) & s->mask;; k = (k + 1) & s->mask) {
    if (s->slot[k] == 0) {
      s->slot[k] = (uint32_t)i + 1;
      return m;
    }
    const spk_move *f = &plan->moves[s->slot[k] - 1];
    if (node_of[f->dst_rank] == dn && same_source(f, m))
      return f;
  }
}

static int span_set_init(span_set *s, size_t n, spk_err *err) {
  size_t cap = 16;
  while (cap < 2 * n)
    cap *= 2;
  s->slot = calloc(cap, sizeof(*s->slot));
  s->mask = cap - 1;
  return s->slot ? SPK_OK
                 : spk_err_set(err, SPK_ENO_MEMORY, "cut: calloc of a %zu-slot "
                               "span set failed", cap);
}

/* The local copy standing for a duplicate m on its node: from where the
 * first move f landed (f's destination) to m's destination. */
static spk_move dup_copy(const spk_move *f, const spk_move *m) {
  spk_move c = *m;
  c.src_rank = f->dst_rank, c.src_t = f->dst_t, c.src_off = f->dst_off;
  for (int d = 0; d < m->nd; d++)
    c.src_stride[d] = f->dst_stride[d];
  return c;
}

static int cut_moves(const spk_plan *plan, const int *node_of, spk_cut *cut,
                     spk_err *err) {
  span_set seen;
  int rc = span_set_init(&seen, plan->nmoves, err);
  spk_plan *l = &cut->local[1];
  for (size_t i = 0; i < plan->nmoves && rc == SPK_OK; i++) {
    const spk_move *m = &plan->moves[i], *f = m;
    int sn = node_of[m->src_rank], dn = node_of[m->dst_rank];
    uint64_t bytes = spk_move_bytes(m);
    spk_piece p = {SPK_PIECE_MOVE, (uint32_t)i, 0};
    if (sn != dn && (sn == cut->self || dn == cut->self))
      f = span_first(&seen, plan, node_of, i);
    if (sn == cut->self && dn != cut->self && f == m)
      rc = stream_add(&cut->send[1][dn], p, bytes, err);
    if (dn != cut->self || rc < 0)
      continue;
    spk_move local = *m;
    if (sn != cut->self) {
      if (f == m)
        rc = stream_add(&cut->recv[1][sn], p, bytes, err);
      if (cut->direct && f == m)
        continue;
      if (cut->direct)
        local = dup_copy(f, m);
      else
        cut->proxy[m->src_rank * SPK_T_COUNT + m->src_t] = 1;
    }
    if (rc == SPK_OK)
      rc = local_add((void **)&l->moves, &l->nmoves, &l->cap, &local,
                     sizeof(local), err);
    l->bytes += bytes;
  }
  free(seen.slot);
  return rc;
}

int spk_plan_cut(const spk_plan *plan, const int *node_of, int nnodes,
                 int self, spk_cut *cut, spk_err *err) {
  int rc = cut_alloc(cut, plan, nnodes, self, err);
  if (rc < 0)
    return rc;
  if (plan->nrsrcs > 0) {
    spk_plan *l = &cut->local[0];
    l->rsrcs = malloc(plan->nrsrcs * sizeof(*l->rsrcs));
    if (l->rsrcs == NULL)
      rc = spk_err_set(err, SPK_ENO_MEMORY, "cut: malloc of %zu reduce "
                       "sources failed", plan->nrsrcs);
    else
      memcpy(l->rsrcs, plan->rsrcs, plan->nrsrcs * sizeof(*l->rsrcs));
    l->nrsrcs = l->scap = plan->nrsrcs;
  }
  if (rc == SPK_OK)
    rc = cut_reduces(plan, node_of, cut, err);
  if (rc == SPK_OK)
    rc = cut_moves(plan, node_of, cut, err);
  if (rc < 0)
    spk_cut_free(cut);
  return rc;
}

void spk_cut_free(spk_cut *cut) {
  for (int ph = 0; ph < 2; ph++) {
    for (int n = 0; n < cut->nnodes; n++) {
      if (cut->send[ph] != NULL)
        free(cut->send[ph][n].pieces);
      if (cut->recv[ph] != NULL)
        free(cut->recv[ph][n].pieces);
    }
    free(cut->send[ph]);
    free(cut->recv[ph]);
    spk_plan_free(&cut->local[ph]);
  }
  free(cut->proxy);
  memset(cut, 0, sizeof(*cut));
}

void spk_piece_span(const spk_plan *plan, const spk_cut *cut,
                    const spk_piece *p, int recv_side, spk_span *span) {
  if (p->kind == SPK_PIECE_RSRC) {
    const spk_reduce *r = &plan->reduces[p->index];
    const spk_rsrc *s = &plan->rsrcs[p->src];
    *span = (spk_span){s->rank, s->t, r->geo.nd, s->off, r->geo.len,
                       r->geo.src_stride};
    return;
  }
  const spk_move *m = &plan->moves[p->index];
  if (recv_side && cut->direct)
    *span = (spk_span){m->dst_rank, m->dst_t, m->nd, m->dst_off, m->len,
                       m->dst_stride};
  else
    *span = (spk_span){m->src_rank, m->src_t, m->nd, m->src_off, m->len,
                       m->src_stride};
}

typedef struct {
  spk_run_fn fn;
  void *arg;
  uint8_t *pend;             /* the run not yet reported */
  uint64_t plen;
  uint64_t calls;
} walk_ctx;

static void walk_emit(walk_ctx *w, uint8_t *p, uint64_t len) {
  if (w->plen > 0 && w->pend + w->plen == p) {
    w->plen += len;
    return;
  }
  if (w->plen > 0)
    w->fn(w->arg, w->pend, w->plen), w->calls++;
  w->pend = p, w->plen = len;
}

static void walk_dims(walk_ctx *w, const spk_span *s, int d, uint8_t *p) {
  if (d == s->nd - 1) {
    walk_emit(w, p, s->len[d]);
    return;
  }
  for (uint64_t i = 0; i < s->len[d]; i++)
    walk_dims(w, s, d + 1, p + i * s->stride[d]);
}

uint64_t spk_span_walk(const spk_span *span, uint8_t *base, spk_run_fn fn,
                       void *arg) {
  walk_ctx w = {fn, arg, NULL, 0, 0};
  walk_dims(&w, span, 0, base + span->off);
  if (w.plen > 0)
    fn(arg, w.pend, w.plen), w.calls++;
  return w.calls;
}
