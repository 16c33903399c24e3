/* Ops on a symmetric buffer (client_gpu_sym.c), on the caller's stream:
 * each rank writes what lands in its own output, reading the other ranks'
 * memory, between barriers of stream memory operations on the ranks'
 * flags words (docs/gpu-symmetric.md):
 *
 *   wait my done >= s - 1                               (ops of the buffer
 *                                                        on other streams)
 *   write my ready = s; wait every rank's ready >= s   (their inputs are
 *                                                        written)
 *   my part: copies (cuMemcpyAsync / cuMemcpy2DAsync), or the movers'
 *   kernel (client_gpu_sym_kernel.c): reduce steps, then, where the
 *   plan's copies read what other ranks reduced (all_reduce),
 *   write my mid = s; wait every rank's mid >= s, then the copies
 *   write my done = s;  wait every rank's done >= s    (nobody reads my
 *                                                        memory any more)
 *
 * so work queued on the stream after the op may overwrite this rank's
 * input, and its output holds the op's result. s counts the ops on the
 * buffer, the same on every rank: the path is taken, or not, by every rank
 * alike, from arguments every rank shares on a symmetric buffer
 * (eligible()). Reduce steps read inputs only; a copy reads an input, or
 * (all_reduce) a piece of another rank's output its owner reduced before
 * the mid barrier and does not write again; no rank writes another's
 * memory, and an op whose input and output overlap is not taken. The
 * arguments are not checked against the other ranks' (the daemon's path
 * does that): ranks whose arguments differ may wait forever, as NCCL's
 * ranks do. */
#include <stdlib.h>
#include <string.h>

#include "client_gpu.h"
#include "planner.h"

#define READY_OFF 0
#define DONE_OFF 64
#define MID_OFF 128
/* A copy's pitch past this goes row by row (CU_DEVICE_ATTRIBUTE_MAX_PITCH
 * of current GPUs). */
#define PITCH_MAX ((uint64_t)INT32_MAX)

typedef spc__sym_key sym_key;

static void key_make(const spc_op *op, const spc_tensor *in,
                     const spc_tensor *out, sym_key *k) {
  memset(k, 0, sizeof(*k)); /* compared bytewise, padding included */
  k->a.op = (spk_op_kind)op->kind;
  k->a.dtype = (spk_dtype)in->dtype;
  k->a.in.ndim = in->ndim;
  memcpy(k->a.in.dim, in->shape, (size_t)in->ndim * sizeof(int64_t));
  k->a.out.ndim = out->ndim;
  memcpy(k->a.out.dim, out->shape, (size_t)out->ndim * sizeof(int64_t));
  k->a.ndims = op->ndims;
  k->a.dims[0] = op->dims[0], k->a.dims[1] = op->dims[1];
  k->a.scalar = op->scalar;
  k->a.flags = op->flags;
  k->in_off = in->offset, k->out_off = out->offset;
  k->lists = op->sizes != NULL || op->sizes2 != NULL;
}

/* Copies move m takes: one per 2-D piece (per row where a pitch does not
 * allow a 2-D copy). */
static uint64_t move_copies(const spk_move *m, int *rows_p) {
  int nd = m->nd;
  uint64_t outer = 1;
  for (int i = 0; i + 2 < nd; i++)
    outer *= m->len[i];
  *rows_p = 0;
  if (nd < 2)
    return 1;
  uint64_t w = m->len[nd - 1];
  uint64_t sp = m->src_stride[nd - 2], dp = m->dst_stride[nd - 2];
  if (m->len[nd - 2] > 1 && (sp < w || dp < w || sp > PITCH_MAX ||
                             dp > PITCH_MAX)) {
    *rows_p = 1;
    return outer * m->len[nd - 2];
  }
  return outer;
}

/* Whether every rank's copies stay within SPC__SYM_MAX_COPIES. */
static int copies_fit(const spk_plan *p, int world) {
  uint64_t n[SPC__SYM_MAX_WORLD] = {0};
  for (size_t i = 0; i < p->nmoves; i++) {
    int rows;
    n[p->moves[i].dst_rank] += move_copies(&p->moves[i], &rows);
    if (n[p->moves[i].dst_rank] > SPC__SYM_MAX_COPIES)
      return 0;
  }
  (void)world;
  return 1;
}

static spc__CUdeviceptr tensor_base(const spc__sym *s, uint32_t rank, int t,
                                    const sym_key *k) {
  return s->peer[rank] + SPC__SYM_HDR + (t == SPK_T_IN ? k->in_off
                                                        : k->out_off);
}

/* Append move m's copies (m lands in this rank's output). */
static void move_emit(spc__sym *s, const spk_move *m, const sym_key *k) {
  int rows, nd = m->nd;
  uint64_t n = move_copies(m, &rows);
  spc__CUdeviceptr src = tensor_base(s, m->src_rank, m->src_t, k) + m->src_off;
  spc__CUdeviceptr dst = tensor_base(s, m->dst_rank, m->dst_t, k) + m->dst_off;
  int inner = nd < 2 ? 0 : rows ? nd - 1 : nd - 2; /* dims enumerated */
  for (uint64_t i = 0; i < n; i++) {
    uint64_t rest = i, so = 0, dof = 0;
    for (int d = inner - 1; d >= 0; d--) {
      uint64_t idx = rest % m->len[d];
      rest /= m->len[d];
      so += idx * m->src_stride[d], dof += idx * m->dst_stride[d];
    }
    spc__sym_copy *c = &s->copies[s->ncopies++];
    c->src = src + so, c->dst = dst + dof;
    c->width = m->len[nd - 1];
    c->height = nd >= 2 && !rows ? m->len[nd - 2] : 1;
    c->spitch = nd >= 2 ? m->src_stride[nd - 2] : 0;
    c->dpitch = nd >= 2 ? m->dst_stride[nd - 2] : 0;
  }
}

/* Whether the op may take the path: decided from the arguments alone, so
 * every rank decides alike. Reductions and scaled copies only where every
 * rank has the kernel; no size lists, every rank's output shaped as this
 * one's (so every rank's arguments are this rank's), input and output
 * apart. */
static int eligible(const spc__sym *s, const sym_key *k) {
  const spk_op_row *row = spk_op_row_get(k->a.op);
  int kernel_only = row != NULL &&
                    (row->reduces || (k->a.flags & SPK_FLAG_SCALE_MASK) != 0);
  if (row == NULL || k->lists || (kernel_only && !s->kernel) ||
      s->world > SPC__SYM_MAX_WORLD)
    return 0;
  size_t es = spk_dtype_size(k->a.dtype);
  int64_t nin, nout;
  spk_err err;
  if (es == 0 || spk_shape_numel(&k->a.in, es, &nin, &err) < 0 ||
      spk_shape_numel(&k->a.out, es, &nout, &err) < 0 ||
      spk_args_check(&k->a, s->world, s->rank, &err) < 0)
    return 0;
  uint64_t in_end = k->in_off + (uint64_t)nin * es;
  uint64_t out_end = k->out_off + (uint64_t)nout * es;
  if (nin > 0 && nout > 0 && k->in_off < out_end && k->out_off < in_end)
    return 0;
  for (int r = 0; r < s->world; r++) {
    spk_shape o;
    if (spk_out_shape(&k->a, s->world, r, &o, &err) < 0 ||
        !spk_shape_equal(&o, &k->a.out))
      return 0;
  }
  return 1;
}

/* The op's copies for this rank into s->copies (s->cur -1), from plan
 * p: 0 when they do not fit. */
static int copies_make(spc__sym *s, const spk_plan *p, const sym_key *k) {
  if (!copies_fit(p, s->world))
    return 0;
  s->ncopies = 0;
  for (size_t i = 0; i < p->nmoves; i++)
    if (p->moves[i].dst_rank == (uint32_t)s->rank)
      move_emit(s, &p->moves[i], k);
  s->cur = -1;
  return 1;
}

/* A launch made for k (kernel ops), as s->cur: 1, 0 when there is no
 * room, < 0 on failure (a slot is taken either way, marked failed: every
 * rank uses the same slots). */
static int launch_for(spc_client *c, spc__sym *s, const spk_plan *p,
                      const sym_key *k) {
  uint8_t *bases[SPC__SYM_MAX_WORLD * SPK_T_COUNT];
  for (int r = 0; r < s->world; r++)
    for (int t = 0; t < SPK_T_COUNT; t++)
      bases[r * SPK_T_COUNT + t] =
          (uint8_t *)(uintptr_t)tensor_base(s, (uint32_t)r, t, k);
  int rc = spc__sym_kernel_plan(c, s, p, bases, k);
  if (rc > 0)
    s->cur = s->nlaunches - 1;
  return rc;
}

/* A kept launch this rank could not make: the op fails here again, and
 * the rank's words are set (spc__sym_try), so the others go on. */
static int launch_failed(spc_client *c, const spc__sym_launch *L) {
  return spc__fail(c, SPC_ENOMEM, "symmetric op: this rank could not make "
                   "its kernel's %zu bytes of pinned descriptors", L->bytes);
}

/* How this rank runs the op: 1 when it takes the path (s->cur and, for
 * copies, s->copies set), 0 when not, < 0 on failure. The last answer is
 * kept for the next op with the same key (a training step repeats its
 * ops). */
static int plan_op(spc_client *c, spc__sym *s, const sym_key *k) {
  if (s->has_key && memcmp(&s->key, k, sizeof(*k)) == 0)
    return s->key_ok;
  s->has_key = 0;
  if (!eligible(s, k))
    goto done;
  for (int i = 0; i < s->nlaunches; i++) /* a kept launch: no plan */
    if (memcmp(&s->launches[i].key, k, sizeof(*k)) == 0) {
      s->cur = i;
      if (s->launches[i].failed)
        return launch_failed(c, &s->launches[i]);
      s->key = *k, s->has_key = 1, s->key_ok = 1;
      return 1;
    }
  const spk_op_args *argv[SPC__SYM_MAX_WORLD];
  for (int r = 0; r < s->world; r++)
    argv[r] = &k->a;
  spk_plan p;
  spk_err err;
  spk_plan_init(&p, s->world);
  int rc = spk_plan_build(argv, s->world, &p, &err);
  int ok = rc == SPK_OK;
  /* A plan this rank could not make for want of memory: a failure here,
   * not an op for the daemon (the other ranks take the path). */
  rc = rc == SPK_ENO_MEMORY ? spc__fail(c, SPC_ENOMEM, "%s", err.msg)
                            : SPC_OK;
  if (ok && (p.nreduces > 0 || p.scale != SPK_SCALE_NONE)) {
    int made = launch_for(c, s, &p, k);
    ok = made > 0;
    rc = made < 0 ? made : SPC_OK;
  } else if (ok) {
    ok = copies_make(s, &p, k);
  }
  spk_plan_free(&p);
  if (rc < 0)
    return rc;
  if (ok) {
    s->key = *k, s->has_key = 1, s->key_ok = 1;
    return 1;
  }
done:
  s->key = *k, s->has_key = 1, s->key_ok = 0;
  return 0;
}

static spc__CUresult copy_one(const spc__cu_api *cu, const spc__sym_copy *x,
                              spc__CUstream st) {
  if (x->height <= 1)
    return cu->MemcpyAsync(x->dst, x->src, x->width, st);
  spc__CUDA_MEMCPY2D m = {0};
  m.srcMemoryType = m.dstMemoryType = SPC__CU_MEMORYTYPE_DEVICE;
  m.srcDevice = x->src, m.dstDevice = x->dst;
  m.srcPitch = x->spitch, m.dstPitch = x->dpitch;
  m.WidthInBytes = x->width, m.Height = x->height;
  return cu->Memcpy2DAsync(&m, st);
}

/* One barrier: this rank's word at off set to seq, then every rank's
 * waited for. */
static spc__CUresult barrier(const spc__cu_api *cu, const spc__sym *s,
                             spc__CUstream st, uint64_t off, uint64_t seq,
                             const char **what) {
  *what = "cuStreamWriteValue64";
  spc__CUresult e = cu->StreamWriteValue64(st, s->own + off, seq,
                                           SPC__CU_STREAM_WRITE_VALUE_DEFAULT);
  *what = "cuStreamWaitValue64";
  for (int r = 0; r < s->world && e == SPC__CUDA_SUCCESS; r++)
    if (r != s->rank)
      e = cu->StreamWaitValue64(st, s->peer[r] + off, seq,
                                SPC__CU_STREAM_WAIT_VALUE_GEQ);
  return e;
}

/* This rank's words for op seq set with nothing in between, and its
 * stream held until every rank is done with it: what a rank that cannot
 * run its part still queues, so that the others go on (its output is then
 * undefined, and the op fails here). */
static void release(const spc__cu_api *cu, const spc__sym *s,
                    spc__CUstream st, uint64_t seq) {
  const char *what;
  (void)cu->StreamWaitValue64(st, s->own + DONE_OFF, seq - 1,
                              SPC__CU_STREAM_WAIT_VALUE_GEQ);
  (void)cu->StreamWriteValue64(st, s->own + READY_OFF, seq, 0);
  (void)cu->StreamWriteValue64(st, s->own + MID_OFF, seq, 0);
  (void)barrier(cu, s, st, DONE_OFF, seq, &what);
}

/* Queue the op on st. A failure part way releases the other ranks. */
/* The kernel's launches of s->cur, with the middle barrier where its
 * copies read what every rank's reduce steps wrote. */
static spc__CUresult kernel_queue(const spc__cu_api *cu, const spc__sym *s,
                                  spc__CUstream st, uint64_t seq,
                                  const char **what) {
  const spc__sym_launch *L = &s->launches[s->cur];
  *what = "cuLaunchKernel";
  spc__CUresult e = spc__sym_kernel_run(cu, s, L, 0, st);
  if (e == SPC__CUDA_SUCCESS && L->mid)
    e = barrier(cu, s, st, MID_OFF, seq, what);
  *what = "cuLaunchKernel";
  return e == SPC__CUDA_SUCCESS ? spc__sym_kernel_run(cu, s, L, 1, st) : e;
}

static int enqueue(spc_client *c, const spc__cu_api *cu, spc__sym *s,
                   spc__CUstream st) {
  uint64_t seq = ++s->seq;
  /* Ops of the buffer on other streams: this one after the last (so every
   * word only grows, and each op's words say that op). */
  const char *what = "cuStreamWaitValue64";
  spc__CUresult e = cu->StreamWaitValue64(st, s->own + DONE_OFF, seq - 1,
                                          SPC__CU_STREAM_WAIT_VALUE_GEQ);
  if (e == SPC__CUDA_SUCCESS)
    e = barrier(cu, s, st, READY_OFF, seq, &what);
  if (e == SPC__CUDA_SUCCESS && s->cur >= 0)
    e = kernel_queue(cu, s, st, seq, &what);
  for (int i = 0; s->cur < 0 && i < s->ncopies && e == SPC__CUDA_SUCCESS;
       i++) {
    what = s->copies[i].height > 1 ? "cuMemcpy2DAsync" : "cuMemcpyAsync";
    e = copy_one(cu, &s->copies[i], st);
  }
  if (e == SPC__CUDA_SUCCESS)
    e = barrier(cu, s, st, DONE_OFF, seq, &what);
  if (e == SPC__CUDA_SUCCESS)
    return SPC_OK;
  release(cu, s, st, seq);
  return spc__fail(c, SPC_EDEVICE, "%s on stream %p (symmetric op %llu of "
                   "rank %d): %s", what, (void *)st, (unsigned long long)seq,
                   s->rank, spc__cu_str(cu, e));
}

static int request_make(spc_client *c, void *stream, spc__sym *s,
                        spc_request **req_p) {
  spc_request *req = calloc(1, sizeof(*req));
  if (req == NULL)
    return spc__fail(c, SPC_ENOMEM, "a request");
  req->client = c;
  req->done = 1;
  req->sym_stream = stream;
  req->sym_ctx = s->ctx;
  req->sym_buf = s;
  s->refs++;
  req->sym_seq = s->seq;
  req->sym = 1;
  *req_p = req;
  return SPC_OK;
}

int spc__sym_try(spc_group *g, const spc_op *op, const spc_tensor *in,
                 const spc_tensor *out, void *stream, spc_request **req_p,
                 int *rc_p) {
  const spc__gpu_buf *gb = in->buf->gpu;
  spc__sym *s = gb != NULL ? gb->sym : NULL;
  if (s == NULL || !s->usable || out->buf != in->buf || s->group != g ||
      g->lost)
    return 0;
  spc_client *c = g->client;
  spc__gpu_client *gc = c->gpu;
  /* Tensors as spc_tensor_init makes them: bounds, alignment, dims. */
  int rc = spc__tensor_check(c, "input", in->buf, in->offset, in->dtype,
                             in->ndim, in->shape);
  if (rc == SPC_OK)
    rc = spc__tensor_check(c, "output", out->buf, out->offset, out->dtype,
                           out->ndim, out->shape);
  if (rc == SPC_OK && in->dtype != out->dtype)
    rc = spc__fail(c, SPC_EINVAL, "input dtype %d, output dtype %d: an op "
                   "reads and writes one dtype", in->dtype, out->dtype);
  if (rc < 0) /* the daemon fails it, on every rank that sends it */
    return 0;
  sym_key k;
  key_make(op, in, out, &k);
  int ok = plan_op(c, s, &k);
  if (ok == 0) {
    gc->paths.sym_daemon_ops++;
    spc__gpu_counts_publish(c);
    return 0;
  }
  const spc__cu_api *cu = spc__cu(c);
  rc = spc__gpu_push(c, cu, s->ctx);
  if (rc == SPC_OK) {
    if (ok > 0)
      rc = enqueue(c, cu, s, (spc__CUstream)stream);
    else
      release(cu, s, (spc__CUstream)stream, ++s->seq);
    spc__gpu_pop(cu);
  } else {
    s->seq++; /* nothing queued; the next op keeps in step */
  }
  if (ok < 0)
    rc = ok;
  if (rc == SPC_OK)
    rc = request_make(c, stream, s, req_p);
  if (rc == SPC_OK) {
    gc->paths.sym_ops++;
    for (int i = 0; s->cur < 0 && i < s->ncopies; i++)
      gc->paths.sym_bytes += s->copies[i].width * s->copies[i].height;
    if (s->cur >= 0)
      gc->paths.sym_bytes += s->launches[s->cur].bytes_in;
    spc__gpu_counts_publish(c);
  }
  *rc_p = rc;
  return 1;
}

int spc__sym_wait_on_stream(spc_request *req, void *stream) {
  spc_client *c = req->client;
  const spc__sym *s = req->sym_buf;
  if (s->freed)
    return spc__fail(c, SPC_EINVAL, "spc_wait_on_stream of symmetric op "
                     "%llu on another stream after its buffer was freed",
                     (unsigned long long)req->sym_seq);
  const spc__cu_api *cu = spc__cu(c);
  int rc = spc__gpu_push(c, cu, req->sym_ctx);
  if (rc < 0)
    return rc;
  spc__CUresult e = SPC__CUDA_SUCCESS;
  for (int r = 0; r < s->world && e == SPC__CUDA_SUCCESS; r++)
    e = cu->StreamWaitValue64((spc__CUstream)stream, s->peer[r] + DONE_OFF,
                              req->sym_seq, SPC__CU_STREAM_WAIT_VALUE_GEQ);
  spc__gpu_pop(cu);
  if (e == SPC__CUDA_SUCCESS)
    return SPC_OK;
  return spc__fail(c, SPC_EDEVICE, "cuStreamWaitValue64 on stream %p for "
                   "symmetric op %llu: %s", stream,
                   (unsigned long long)req->sym_seq, spc__cu_str(cu, e));
}

int spc__sym_wait(spc_request *req, int block, int *done_p) {
  spc_client *c = req->client;
  const spc__cu_api *cu = spc__cu(c);
  int rc = spc__gpu_push(c, cu, req->sym_ctx);
  if (rc < 0)
    return rc;
  spc__CUstream st = (spc__CUstream)req->sym_stream;
  spc__CUresult e = block ? cu->StreamSynchronize(st) : cu->StreamQuery(st);
  spc__gpu_pop(cu);
  *done_p = e != SPC__CUDA_ERROR_NOT_READY;
  if (e == SPC__CUDA_SUCCESS || e == SPC__CUDA_ERROR_NOT_READY)
    return SPC_OK;
  return spc__fail(c, SPC_EDEVICE, "%s on stream %p: %s",
                   block ? "cuStreamSynchronize" : "cuStreamQuery",
                   req->sym_stream, spc__cu_str(cu, e));
}
