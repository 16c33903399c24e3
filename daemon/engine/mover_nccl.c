/* The NCCL mover's plans: an op that is exactly an NCCL collective runs
 * as one, any other as grouped send/recv with the kernel packing and
 * unpacking (daemon/gpu/gpu_route.c), on the streams of its communicator set
 * (mover_nccl_set.c). */
#include "mover_nccl.h"

#ifdef SPC_HAVE_NCCL

#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_route.h"
#include "mover_nccl_internal.h"

static void nccl_finish(spd_gpu_job *j) {
  nccl_job *nj = (nccl_job *)j;
  if (nj->published)
    nj->w->priv = NULL;
  if (nj->ungated && nj->set != NULL)
    nj->set->ungated--;
  spd_nccl_inflight_remove(nj);
  if (nj->host != NULL)
    for (int i = 0; i < nj->ndev; i++)
      spd_gpu_pinned_put(j->gpu, nj->host[i]);
  free(nj->host);
  free(nj->rank_dev);
}

/* ---- running a plan ----------------------------------------------------- */

static ncclDataType_t nccl_type(spk_dtype dt) {
  switch (dt) {
  case SPK_F32: return ncclFloat32;
  case SPK_F64: return ncclFloat64;
  case SPK_F16: return ncclFloat16;
  case SPK_BF16: return ncclBfloat16;
  case SPK_I8: return ncclInt8;
  case SPK_U8: return ncclUint8;
  case SPK_I32: return ncclInt32;
  default: return ncclInt64;
  }
}

static ncclRedOp_t nccl_op(int red) {
  return red == SPK_RED_MAX ? ncclMax : red == SPK_RED_MIN ? ncclMin : ncclSum;
}

/* The collective the plan is exactly, when every rank is alone on its GPU
 * and in NCCL rank order; else SPK_COLL_NONE. */
static spk_coll plan_collective(nccl_job *nj, uint64_t *count_p) {
  const spd_work *w = nj->w;
  int world = w->world;
  if (world != nj->set->n)
    return SPK_COLL_NONE;
  for (int r = 0; r < world; r++)
    if (nj->rank_dev[r] != r)
      return SPK_COLL_NONE;
  uint64_t *in = malloc(2 * (size_t)world * sizeof(uint64_t));
  if (in == NULL)
    return SPK_COLL_NONE;
  uint64_t *out = in + world;
  size_t esize = spk_dtype_size(w->plan->dtype);
  for (int r = 0; r < world; r++) {
    int64_t n;
    spk_shape_numel(&w->ranks[r].args->in, esize, &n, NULL);
    in[r] = (uint64_t)n * esize;
    spk_shape_numel(&w->ranks[r].args->out, esize, &n, NULL);
    out[r] = (uint64_t)n * esize;
  }
  spk_coll c = spk_route_collective(w->plan, w->ranks[0].args->op, in, out,
                                    count_p);
  free(in);
  /* ncclAlltoAll came with NCCL 2.28; the libnccl loaded at run time (a
   * Python wheel's, say) may be older: send/recv then. */
  static int version;
  if (version == 0 && ncclGetVersion(&version) != ncclSuccess)
    version = -1;
  if (c == SPK_COLL_ALL_TO_ALL && version < 22800)
    c = SPK_COLL_NONE;
  /* NCCL adds floats in its ring's order (not rank order) and its max/min
   * ignore NaN (spcoll's NaN wins): float reductions go through send/recv
   * and the kernel's rank-order reduce, so they are bitwise the host
   * mover's. Integer reductions do not depend on the order. */
  spk_dtype dt = w->plan->dtype;
  int fp = dt == SPK_F32 || dt == SPK_F64 || dt == SPK_F16 || dt == SPK_BF16;
  if (fp && (c == SPK_COLL_REDUCE_SCATTER || c == SPK_COLL_ALL_REDUCE))
    c = SPK_COLL_NONE;
  return c;
}

static int run_collective(nccl_job *nj, spk_coll c, uint64_t bytes,
                          spk_err *err) {
  const spd_work *w = nj->w;
  spd_nccl_set *set = nj->set;
  const spk_plan *p = w->plan;
  ncclDataType_t t = nccl_type(p->dtype);
  size_t count = bytes / spk_dtype_size(p->dtype);
  ncclResult_t r = ncclGroupStart();
  for (int i = 0; r == ncclSuccess && i < set->n; i++) {
    const void *in = w->bases[i * SPK_T_COUNT + SPK_T_IN];
    void *out = w->bases[i * SPK_T_COUNT + SPK_T_OUT];
    switch (c) {
    case SPK_COLL_ALL_GATHER:
      r = ncclAllGather(in, out, bytes, ncclUint8, set->comms[i],
                        set->streams[i]);
      break;
    case SPK_COLL_ALL_TO_ALL:
      r = ncclAlltoAll(in, out, bytes, ncclUint8, set->comms[i],
                       set->streams[i]);
      break;
    case SPK_COLL_REDUCE_SCATTER:
      r = ncclReduceScatter(in, out, count, t, nccl_op(p->red_op),
                            set->comms[i], set->streams[i]);
      break;
    default:
      r = ncclAllReduce(in, out, count, t, nccl_op(p->red_op), set->comms[i],
                        set->streams[i]);
      break;
    }
  }
  ncclResult_t end = ncclGroupEnd();
  if (r != ncclSuccess)
    return spd_nccl_err(r, spk_coll_name(c), set, err);
  if (end != ncclSuccess)
    return spd_nccl_err(end, "ncclGroupEnd", set, err);
  return SPK_OK;
}

/* One ncclSend/ncclRecv per device pair with bytes in phase ph. */
static int exchange(nccl_job *nj, const spk_route *rt, int ph,
                    uint8_t *const *stage, spk_err *err) {
  spd_nccl_set *set = nj->set;
  int n = set->n, any = 0;
  for (size_t i = 0; i < (size_t)n * n; i++)
    any |= rt->bytes[SPK_ROUTE_AT(rt, ph, 0, 0) + i] != 0;
  if (!any)
    return SPK_OK;
  ncclResult_t r = ncclGroupStart();
  for (int s = 0; r == ncclSuccess && s < n; s++)
    for (int d = 0; r == ncclSuccess && d < n; d++) {
      uint64_t bytes = rt->bytes[SPK_ROUTE_AT(rt, ph, s, d)];
      if (bytes == 0)
        continue;
      r = ncclSend(stage[s] + rt->send_off[SPK_ROUTE_AT(rt, ph, s, d)], bytes,
                   ncclUint8, d, set->comms[s], set->streams[s]);
      if (r == ncclSuccess)
        r = ncclRecv(stage[d] + rt->recv_base[d] +
                         rt->recv_off[SPK_ROUTE_AT(rt, ph, d, s)],
                     bytes, ncclUint8, s, set->comms[d], set->streams[d]);
    }
  ncclResult_t end = ncclGroupEnd();
  if (r != ncclSuccess)
    return spd_nccl_err(r, "ncclSend/ncclRecv", set, err);
  if (end != ncclSuccess)
    return spd_nccl_err(end, "ncclGroupEnd", set, err);
  return SPK_OK;
}

/* Device i's four lists (pack and post of both phases) in one upload. */
static int upload_lists(nccl_job *nj, spk_route *rt, int i, void **d_p,
                        spk_claunch *L, spk_err *err) {
  int n = nj->set->n;
  spk_cdesc_list *lists[4] = {&rt->pack[i], &rt->post[i], &rt->pack[n + i],
                              &rt->post[n + i]};
  size_t at[4], total = 0;
  for (int k = 0; k < 4; k++) {
    at[k] = total;
    total += (spk_cdesc_packed_size(lists[k]) + 255) & ~(size_t)255;
  }
  int rc = spd_gpu_pinned_get(nj->job.gpu, total, &nj->host[i], err);
  if (rc < 0)
    return rc;
  rc = spd_gpu_alloc(nj->set->streams[i], total, d_p, err);
  if (rc < 0)
    return rc;
  for (int k = 0; k < 4; k++)
    spk_cdesc_pack(lists[k], (uint8_t *)nj->host[i] + at[k],
                   (uint64_t)(uintptr_t)*d_p + at[k], &L[k]);
  return spd_gpu_copy_up(nj->set->streams[i], *d_p, nj->host[i], total, err);
}

static int run_route(nccl_job *nj, spk_err *err) {
  const spd_work *w = nj->w;
  spd_nccl_set *set = nj->set;
  spd_gpu *gpu = nj->job.gpu;
  int n = set->n, rc;
  spk_route rt;
  uint8_t **stage = calloc((size_t)n, sizeof(*stage));
  void **desc = calloc((size_t)n, sizeof(*desc));
  spk_claunch *L = calloc(4 * (size_t)n, sizeof(*L));
  uint64_t chunk = spk_cdesc_chunk_for(w->plan->bytes / (uint64_t)n,
                                       gpu->dev[set->devs[0]].sms);
  /* Asked for by name (mover = nccl), NCCL moves even a GPU's blocks to
   * itself, so one GPU exercises the exchange. */
  int self_p2p = spd_engine_find(gpu->ctx->cfg.mover) == SPD_ENGINE_NCCL;
  rc = spk_route_init(&rt, w->plan, nj->rank_dev, n, self_p2p, chunk,
                      err);
  if (rc == SPK_OK && (!stage || !desc || !L))
    rc = spk_err_set(err, SPK_ENO_MEMORY, "calloc for %d GPUs failed", n);
  for (int i = 0; rc == SPK_OK && i < n; i++) {
    rc = spd_gpu_set_device(set->devs[i], err);
    if (rc == SPK_OK && rt.stage_bytes[i])
      rc = spd_gpu_alloc(set->streams[i], rt.stage_bytes[i],
                         (void **)&stage[i], err);
  }
  if (rc == SPK_OK)
    rc = spk_route_build(&rt, w->plan, w->bases, nj->rank_dev, stage, err);
  for (int i = 0; rc == SPK_OK && i < n; i++) {
    rc = spd_gpu_set_device(set->devs[i], err);
    if (rc == SPK_OK)
      rc = upload_lists(nj, &rt, i, &desc[i], &L[4 * i], err);
  }
  for (int ph = 0; rc == SPK_OK && ph < 2; ph++) {
    for (int i = 0; rc == SPK_OK && i < n; i++) {
      rc = spd_gpu_set_device(set->devs[i], err);
      if (rc == SPK_OK)
        rc = spd_gpu_launch(w->plan, &L[4 * i + 2 * ph],
                            gpu->dev[set->devs[i]].sms, set->streams[i], err);
    }
    if (rc == SPK_OK)
      rc = exchange(nj, &rt, ph, stage, err);
    for (int i = 0; rc == SPK_OK && i < n; i++) {
      rc = spd_gpu_set_device(set->devs[i], err);
      if (rc == SPK_OK)
        rc = spd_gpu_launch(w->plan, &L[4 * i + 2 * ph + 1],
                            gpu->dev[set->devs[i]].sms, set->streams[i], err);
    }
  }
  /* Freed in stream order, after the work that uses them. */
  for (int i = 0; i < n && stage != NULL && desc != NULL; i++) {
    if (stage[i] != NULL)
      cudaFreeAsync(stage[i], set->streams[i]);
    if (desc[i] != NULL)
      cudaFreeAsync(desc[i], set->streams[i]);
  }
  SPD_DEBUG(&gpu->ctx->log, "group '%s' op %llu: nccl mover, send/recv over "
            "%d GPU(s)%s, %llu-byte chunks", w->name,
            (unsigned long long)w->seq, n, rt.self_p2p ? " (forced)" : "",
            (unsigned long long)chunk);
  spk_route_free(&rt);
  free(stage);
  free(desc);
  free(L);
  return rc;
}

/* Queue nj's work on its set's streams; turns: a gated job, whose GPUs'
 * parts take their turns (mover_nccl_gate.c). */
static int run_now(nccl_job *nj, int turns, spk_err *err) {
  const spd_work *w = nj->w;
  spd_nccl_set *set = nj->set;
  int n = set->n, rc = SPK_OK;
  nj->host = calloc((size_t)n, sizeof(void *));
  if (nj->host == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc for %d GPUs failed", n);
  if (!turns) { /* from here its work is on the set's streams */
    nj->ungated = 1;
    set->ungated++;
  }
  for (int i = 0; rc == SPK_OK && i < n; i++) {
    rc = spd_gpu_set_device(set->devs[i], err);
    if (rc == SPK_OK && turns)
      rc = spd_nccl_turn_wait(set, i, err);
    if (rc == SPK_OK)
      rc = spd_gpu_wait_ready(w->rank_state, w->world, set->streams[i],
                              err);
  }
  uint64_t count = 0;
  spk_coll c = rc == SPK_OK ? plan_collective(nj, &count) : SPK_COLL_NONE;
  if (rc == SPK_OK && c != SPK_COLL_NONE) {
    SPD_DEBUG(&nj->job.gpu->ctx->log, "group '%s' op %llu: nccl mover, %s of "
              "%llu bytes per rank", w->name,
              (unsigned long long)w->seq, spk_coll_name(c),
              (unsigned long long)count);
    rc = run_collective(nj, c, count, err);
  } else if (rc == SPK_OK) {
    rc = run_route(nj, err);
  }
  for (int i = 0; rc == SPK_OK && i < n; i++) {
    rc = spd_gpu_set_device(set->devs[i], err);
    if (rc == SPK_OK)
      rc = spd_gpu_record_done(w->rank_state, w->world, set->devs[i],
                               w->partial, set->streams[i], err);
    if (rc == SPK_OK && turns)
      rc = spd_nccl_turn_end(set, i, err);
    if (rc == SPK_OK)
      rc = spd_gpu_job_watch(&nj->job, set->streams[i], err);
  }
  if (rc < 0) {
    /* What was queued reads the op's buffers: the op fails once it is
     * done (or the NCCL watchdog aborts the set), never by waiting here.
     * A turn not recorded on every GPU leaves older ones to wait for:
     * later sets may then run beside this one's failing work. */
    spd_gpu_job_fail_after(&nj->job, set->streams, n, rc, err->msg);
    spd_nccl_inflight_add(nj);
    return SPK_OK;
  }
  spd_nccl_inflight_add(nj);
  spd_gpu_job_arm(&nj->job);
  return SPK_OK;
}

int spd_nccl_run_turn(nccl_job *nj, spk_err *err) {
  return run_now(nj, 1, err);
}

/* A set sharing a GPU gates its jobs until their ranks are ready (the
 * turns' order); where the gate cannot be set up the job runs at once, as
 * on a GPU of its own. */
int spd_nccl_run(nccl_job *nj, spk_err *err) {
  if (spd_nccl_shared(nj->set)) {
    spk_err gerr = {{0}};
    if (spd_nccl_gate(nj, &gerr) == SPK_OK)
      return SPK_OK;
    SPD_WARN(&nj->job.gpu->ctx->log, "group '%s' op %llu: not gated, so "
             "not ordered with the other NCCL sets on its GPUs: %s",
             nj->w->name, (unsigned long long)nj->w->seq, gerr.msg);
  }
  return run_now(nj, 0, err);
}

int spd_mover_nccl_submit(spd_gpu *gpu, spd_work *w, spk_err *err) {
  int world = w->world;
  const int *dev = w->dev;
  spd_nccl_set *set;
  int rc = spd_nccl_set_get(gpu, dev, world, &set, err);
  if (rc < 0)
    return rc;
  nccl_job *nj = calloc(1, sizeof(*nj));
  if (nj == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of an NCCL job failed");
  rc = spd_gpu_job_init(gpu, &nj->job, w->done, w->arg, w->name, w->seq,
                        nccl_finish, err);
  if (rc < 0) {
    free(nj);
    return rc;
  }
  nj->w = w;
  nj->set = set;
  nj->ndev = set->n;
  nj->rank_dev = malloc((size_t)world * sizeof(int));
  if (nj->rank_dev == NULL) {
    spd_gpu_job_drop(&nj->job);
    return spk_err_set(err, SPK_ENO_MEMORY, "malloc of %d ranks failed",
                       world);
  }
  for (int r = 0; r < world; r++)
    for (int i = 0; i < set->n; i++)
      if (set->devs[i] == dev[r])
        nj->rank_dev[r] = i;
  if (set->state == SET_INIT) {
    /* Runs when the communicators are made (set_init_after). */
    *set->wait_tail = nj;
    set->wait_tail = &nj->next_wait;
  } else if ((rc = spd_nccl_run(nj, err)) < 0) {
    spd_gpu_job_drop(&nj->job);
    return rc;
  }
  w->priv = nj;
  nj->published = 1;
  return SPK_OK;
}

int spd_mover_nccl_on_streams(const spd_work *w) {
  const nccl_job *nj = w->priv;
  return nj != NULL && nj->ungated && !nj->set->broken;
}

#endif /* SPC_HAVE_NCCL */
