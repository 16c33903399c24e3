/* The fast path's plans (see client_fast.c): each rank builds the plan
 * of an op from every rank's descriptor with the daemon's planners, and
 * runs the steps that write its own output. A plan is kept while every
 * rank repeats its op, with what it says once of how to run it: reduced
 * by every rank into its own output (replicated, maybe as one flat
 * reduce), written straight into the callers' outputs (direct), its
 * moves as single copies (copies). */
#include <string.h>

#include "client_fast_internal.h"

/* A plan of moves alone that read only inputs: no rank reads another's
 * output, so each rank's moves can write straight into its caller's
 * output, without staging it. */
static int plan_direct(const spk_plan *p) {
  if (p->nreduces > 0)
    return 0;
  for (size_t i = 0; i < p->nmoves; i++)
    if (p->moves[i].src_t != SPK_T_IN)
      return 0;
  return 1;
}

/* A plan whose moves are single runs, unscaled, copied through the cache:
 * each move is one memcpy, without the executor's walk of its geometry
 * (a small op's own work, as the flat reduce below). */
static int plan_copies(const spk_plan *p) {
  if (p->scale != SPK_SCALE_NONE || spk_plan_streams(p))
    return 0;
  for (size_t i = 0; i < p->nmoves; i++)
    if (p->moves[i].nd != 1)
      return 0;
  return 1;
}

static void run_move(const spc_fast *f, const spk_move *m,
                     uint8_t *const *bases) {
  if (f->copies)
    memcpy(bases[m->dst_rank * SPK_T_COUNT + m->dst_t] + m->dst_off,
           bases[m->src_rank * SPK_T_COUNT + m->src_t] + m->src_off,
           m->len[0]);
  else
    spk_move_exec(&f->plan, m, bases, 0, spk_move_units(m));
}

/* A small all_reduce: each rank runs every reduce step of the plan into
 * its own output (the steps' blocks of rank d's output are the same
 * bytes of every rank's), instead of its own pieces, a barrier, then
 * copies of the others' pieces. w times the adds, but one phase and no
 * staged output; the sums are the same steps in the same rank order, so
 * bitwise the mover's. When the steps together are one flat reduce of
 * the whole inputs (spk_plan_flat; a plan on one node), one call runs
 * them: most of a small op's own work was the steps' bookkeeping.
 * Up to fast_replicate_bytes over the world (kernels/fast_tune.h). */
int spc__fast_replicates(const spc_fast *f, int world, uint64_t out_bytes) {
  return out_bytes <= f->tune.fast_replicate_bytes / (uint64_t)world;
}

static int plan_replicated(const spc_group *g, const spk_plan *p) {
  const spk_fseg_desc *d = &g->fast->planned[g->rank];
  uint64_t n = spc__fast_desc_bytes(d, d->out_ndim, d->out_shape);
  return d->op == SPK_OP_ALL_REDUCE && p->scale == SPK_SCALE_NONE &&
         spc__fast_replicates(g->fast, g->world, n);
}

static void run_replicated(spc_group *g, uint8_t **in_bases,
                           const spc_tensor *out) {
  spk_plan *p = &g->fast->plan;
  if (g->fast->flat) {
    const uint8_t *srcs[SPK_FSEG_MAXWORLD];
    for (int r = 0; r < g->world; r++)
      srcs[r] = in_bases[r * SPK_T_COUNT + SPK_T_IN];
    spk_reduce_flat(p, srcs, (uint32_t)g->world, spc_tensor_data(out),
                    g->fast->flat);
    return;
  }
  uint8_t *bases[2 * SPK_FSEG_MAXWORLD];
  for (int r = 0; r < g->world; r++) {
    bases[r * SPK_T_COUNT + SPK_T_IN] = in_bases[r * SPK_T_COUNT + SPK_T_IN];
    bases[r * SPK_T_COUNT + SPK_T_OUT] = spc_tensor_data(out);
  }
  for (size_t i = 0; i < p->nreduces; i++)
    spk_reduce_exec(p, &p->reduces[i], bases, 0,
                    spk_move_units(&p->reduces[i].geo));
}

/* Bytes of the output that no step writes keep what the caller's output
 * held (a packed gather leaves the tail past its sequences): when the
 * output is staged, those are staged too. Nobody reads this rank's staged
 * output before its reduce steps are done (spc__fast_plan_run's barrier), so it is
 * free to fill now. */
static void stage_out_fill(spc_group *g, uint64_t s, const spc_tensor *out) {
  spk_plan *p = &g->fast->plan;
  uint32_t me = (uint32_t)g->rank;
  uint64_t covered = 0;
  for (size_t i = 0; i < p->nreduces; i++)
    if (p->reduces[i].geo.dst_rank == me)
      covered += spk_move_bytes(&p->reduces[i].geo);
  for (size_t i = 0; i < p->nmoves; i++)
    if (p->moves[i].dst_rank == me)
      covered += spk_move_bytes(&p->moves[i]);
  if (covered < spc__tensor_bytes(out))
    memcpy(spc__fast_stage(g->fast, g->rank, SPK_T_OUT, s),
           spc_tensor_data(out), spc__tensor_bytes(out));
}

static int run_reduce(spc_group *g, const spk_reduce *r, uint8_t **bases) {
  if (spc__fast_cma_reads(g->fast, r))
    return spc__fast_cma_reduce(g, r, bases);
  spk_reduce_exec(&g->fast->plan, r, bases, 0, spk_move_units(&r->geo));
  return SPC_OK;
}

static int run_step(spc_group *g, const spk_move *m, uint8_t **bases) {
  if (g->fast->map.remote[m->src_rank * SPK_T_COUNT + m->src_t])
    return spc__fast_cma_move(g, m, bases);
  run_move(g->fast, m, bases);
  return SPC_OK;
}

/* The plan's steps that write this rank's output: reduce steps, then
 * (once every rank's reduce steps are done, as moves may read them)
 * moves, from and to `bases` (spc__fast_bases); into the caller's output
 * when it is read in place (mine) or the plan is direct (*direct_p),
 * else into the staging. A rank that could not map the others' buffers
 * or read their memory (*skip_p) runs no step, but keeps the barrier. */
int spc__fast_plan_run(spc_group *g, uint64_t s, const spc_tensor *out,
                       uint8_t **bases, int mine, int *skip_p,
                       int *direct_p) {
  spc_fast *f = g->fast;
  spk_plan *p = &f->plan;
  uint32_t me = (uint32_t)g->rank;
  int rc = SPC_OK;
  if (f->replicated) {
    if (!*skip_p && (rc = spc__fast_cma_inputs(g, bases)) == SPC_OK)
      run_replicated(g, bases, out);
    *skip_p |= rc < 0;
    *direct_p = 1;
    return rc;
  }
  *direct_p = mine || f->direct;
  if (*direct_p)
    bases[me * SPK_T_COUNT + SPK_T_OUT] = spc_tensor_data(out);
  else if (!*skip_p)
    stage_out_fill(g, s, out);
  for (size_t i = 0; i < p->nreduces && !*skip_p; i++)
    if (p->reduces[i].geo.dst_rank == me &&
        (rc = run_reduce(g, &p->reduces[i], bases)) < 0)
      *skip_p = 1;
  if (p->nreduces > 0 && p->nmoves > 0) {
    spk_fseg_rank *a = spc__fast_rank(f, g->rank);
    spc__fast_publish(f->hdr, a, &a->reduced, s);
    int wrc = spc__fast_wait_all(g, FIELD(reduced), s);
    if (wrc < 0)
      return rc < 0 ? rc : wrc;
  }
  for (size_t i = 0; i < p->nmoves && !*skip_p; i++)
    if (p->moves[i].dst_rank == me &&
        (rc = run_step(g, &p->moves[i], bases)) < 0)
      *skip_p = 1;
  return rc;
}

void spc__fast_fit(spc_fast *f, int r, const spk_fseg_desc *d) {
  uint64_t in = spc__fast_desc_bytes(d, d->in_ndim, d->in_shape);
  uint64_t out = spc__fast_desc_bytes(d, d->out_ndim, d->out_shape);
  f->staging.small[r] =
      (uint8_t)(in <= f->staging.half && out <= f->staging.half);
  f->staging.tiny[r] = (uint8_t)(in <= SPK_FSEG_INLINE);
  f->staging.lines[r] = spc__fast_lines_of(d->op, in);
}

/* The plan of the descriptors in f->descs: the last one when every rank
 * asked for the same op as then (a plan depends on nothing else), else a
 * new one. Descriptors are zeroed before they are filled, so equal ops
 * compare equal bytewise. */
int spc__fast_plan_get(spc_group *g, int repeat) {
  spc_fast *f = g->fast;
  if (repeat)
    return SPC_OK;
  int same = f->plan_ok;
  for (int r = 0; r < g->world; r++) {
    if (f->descs[r].repeat) {
      f->descs[r] = f->planned[r];
      continue;
    }
    spk_fseg_desc d = f->descs[r];
    d.seq = 0;
    memset(&d.where, 0, sizeof(d.where));
    same = same && memcmp(&d, &f->planned[r], sizeof(d)) == 0;
    f->planned[r] = d;
    f->in_stage[r] = (uint8_t)spc__fast_desc_in_stage(f, &d);
  }
  if (same)
    return SPC_OK;
  spk_op_args args[SPK_FSEG_MAXWORLD];
  const spk_op_args *ap[SPK_FSEG_MAXWORLD];
  for (int r = 0; r < g->world; r++) {
    spc__fast_args_of(&f->descs[r], &args[r]);
    ap[r] = &args[r];
  }
  for (int r = 0; r < g->world; r++)
    spc__fast_fit(f, r, &f->planned[r]);
  f->staging.lines_polled = f->staging.lines[g->rank];
  spk_plan_free(&f->plan);
  spk_plan_init(&f->plan, g->world);
  /* Any value only changes how bytes are copied, never which. */
  f->plan.stream_bytes = SPK_LOAD(&f->hdr->stream_bytes,
                                         __ATOMIC_RELAXED);
  spk_err err;
  int rc = spk_plan_build(ap, g->world, &f->plan, &err);
  f->plan_ok = rc == SPK_OK;
  f->replicated = f->plan_ok && plan_replicated(g, &f->plan);
  uint64_t out_bytes = spc__fast_desc_bytes(&f->planned[g->rank],
                                            f->planned[g->rank].out_ndim,
                                            f->planned[g->rank].out_shape);
  f->flat = f->replicated && spk_plan_flat(&f->plan, out_bytes)
                ? out_bytes
                : 0;
  f->direct = f->plan_ok && plan_direct(&f->plan);
  f->copies = f->plan_ok && plan_copies(&f->plan);
  return rc < 0 ? spc__fail(g->client, rc, "%s", err.msg) : SPC_OK;
}
