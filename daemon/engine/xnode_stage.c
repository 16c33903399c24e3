/* Staging device tensors across nodes through pinned host memory (see
 * xnode_stage.h). A stream's chunks go one per buffer, SPD_XSTAGE_DEPTH
 * buffers a stream: a send copies chunk k down on the stage's `down`
 * stream and puts it on the wire once copied, in chunk order (the
 * receiver matches a stream's messages in the order they were sent); a
 * receive posts chunk k into a buffer, in chunk order, and copies it up on
 * the `up` stream once it arrived. */
#include "xnode_stage.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon.h"

#ifdef SPC_HAVE_CUDA

#include "gpu.h"

typedef struct {
  spd_xstage_stream *st;
  uint8_t *buf;               /* pinned, SPD_PEER_CHUNK bytes */
  uint64_t chunk, len;
  int busy;                   /* carrying chunk */
  int copied;                 /* a send's chunk is down, waiting its turn */
} sbuf;

/* Where a chunk starts in the stream's iov list. */
typedef struct {
  size_t i;
  uint64_t off;
} spos;

struct spd_xstage_stream {
  spd_xstage_stream *next;    /* the stage's, freed at close */
  spd_xstage *xs;
  int node, recv;
  uint64_t tag, bytes, nchunks;
  uint64_t next_chunk;        /* the next to start */
  uint64_t next_send;         /* the next to go on the wire */
  spd_iov *iov;
  size_t niov;
  spos *start;                /* [nchunks] */
  int active;                 /* copies and messages in flight */
  int stopped;                /* cancelled (failed too) */
  int failed, finished, status;
  char msg[256];
  spd_xfer_cb cb;
  void *arg;
  int nbuf;                   /* min(nchunks, SPD_XSTAGE_DEPTH) */
  sbuf buf[SPD_XSTAGE_DEPTH];
};

struct spd_xstage {
  spd_ctx *ctx;
  spd_gpu *gpu;
  int dev;
  const char *name;
  uint64_t seq;
  cudaStream_t down, up;
  void **bufs;                /* reserved: [nbufs]; the first nfree free */
  int nbufs, nfree;
  void **proxies;
  size_t nproxies, cap;
  spd_xstage_stream *streams;
  spd_xfer_cb start_cb;
  void *start_arg;
};

static void pump(spd_xstage_stream *st);

static void stream_fail(spd_xstage_stream *st, int status, const char *msg) {
  if (st->failed)
    return;
  st->failed = 1;
  st->status = status;
  snprintf(st->msg, sizeof(st->msg), "%s", msg);
}

/* The stream is over: its buffers go back to the stage. */
static void stream_end(spd_xstage_stream *st) {
  st->finished = 1;
  for (int i = 0; i < st->nbuf; i++)
    st->xs->bufs[st->xs->nfree++] = st->buf[i].buf;
}

/* Every chunk done (a send's also on the wire), or the stream failed, and
 * nothing of it in flight: it ends and its owner hears. */
static void finish_if_done(spd_xstage_stream *st) {
  if (st->finished || st->active > 0)
    return;
  int all = st->next_chunk == st->nchunks &&
            (st->recv || st->next_send == st->nchunks);
  if (!all && !st->failed)
    return;
  stream_end(st);
  st->cb(st->arg, st->failed ? st->status : SPK_OK,
         st->failed ? st->msg : "");
}

/* Copy chunk b->chunk between its pinned buffer and the stream's device
 * memory, in the runs the iov list names, on s. */
static int copy_runs(sbuf *b, int up, cudaStream_t s, spk_err *err) {
  spd_xstage_stream *st = b->st;
  spos p = st->start[b->chunk];
  uint64_t at = 0;
  while (at < b->len) {
    const spd_iov *v = &st->iov[p.i];
    uint64_t take = v->len - p.off;
    if (take > b->len - at)
      take = b->len - at;
    uint8_t *dev = (uint8_t *)v->base + p.off;
    cudaError_t e =
        up ? cudaMemcpyAsync(dev, b->buf + at, take, cudaMemcpyHostToDevice, s)
           : cudaMemcpyAsync(b->buf + at, dev, take, cudaMemcpyDeviceToHost,
                             s);
    if (e != cudaSuccess)
      return spk_err_set(err, SPK_EDEVICE, "cudaMemcpyAsync of %llu bytes %s "
                         "node %d's chunk %llu: %s", (unsigned long long)take,
                         up ? "up from" : "down for", st->node,
                         (unsigned long long)b->chunk, cudaGetErrorString(e));
    at += take;
    p.off += take;
    if (p.off == v->len)
      p.i++, p.off = 0;
  }
  return SPK_OK;
}

static void on_copied_down(void *arg, int status, const char *msg);
static void on_copied_up(void *arg, int status, const char *msg);

/* The chunk's copy on its staging stream; its end comes to the loop as a
 * GPU job. A copy that fails after some of it was queued still ends
 * through the job, once the queued part is done (the buffer stays until
 * then). */
static int copy_start(sbuf *b, int up, spk_err *err) {
  spd_xstage *xs = b->st->xs;
  cudaStream_t s = up ? xs->up : xs->down;
  spd_gpu_job *job = calloc(1, sizeof(*job));
  if (job == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of a staging copy "
                       "failed");
  int rc = spd_gpu_job_init(xs->gpu, job, up ? on_copied_up : on_copied_down,
                            b, xs->name, xs->seq, NULL, err);
  if (rc < 0) {
    free(job);
    return rc;
  }
  b->st->active++;
  rc = spd_gpu_set_device(xs->dev, err);
  if (rc == SPK_OK)
    rc = copy_runs(b, up, s, err);
  if (rc == SPK_OK)
    rc = spd_gpu_job_watch(job, s, err);
  if (rc < 0)
    spd_gpu_job_fail_after(job, &s, 1, rc, err->msg);
  else
    spd_gpu_job_arm(job);
  return SPK_OK;
}

static void on_sent(void *arg, int status, const char *msg) {
  sbuf *b = arg;
  spd_xstage_stream *st = b->st;
  st->active--;
  b->busy = 0;
  if (status < 0)
    stream_fail(st, status, msg);
  pump(st);
}

/* One message of the stream (its end may come inside spd_peer_stream,
 * which runs the worker: it counts in active first). */
static int post_message(sbuf *b, spd_xfer_cb cb, spk_err *err) {
  spd_xstage_stream *st = b->st;
  spd_iov v = {b->buf, b->len};
  st->active++;
  int rc = spd_peer_stream(st->xs->ctx, st->node, st->recv, st->tag, &v, 1,
                           b->len, cb, b, err);
  if (rc < 0)
    st->active--;
  return rc;
}

/* Chunks copied down go on the wire in chunk order; called under pump's
 * hold. */
static void post_sends(spd_xstage_stream *st) {
  for (int again = 1; again;) {
    again = 0;
    for (int i = 0; i < st->nbuf; i++) {
      sbuf *b = &st->buf[i];
      if (!b->busy || !b->copied || b->chunk != st->next_send)
        continue;
      b->copied = 0;
      st->next_send++;
      spk_err err;
      if (st->failed) {
        b->busy = 0;
        continue;
      }
      if (post_message(b, on_sent, &err) < 0) {
        stream_fail(st, SPK_ENODE_LOST, err.msg);
        b->busy = 0;
        continue;
      }
      again = 1;
    }
  }
}

static void on_copied_down(void *arg, int status, const char *msg) {
  sbuf *b = arg;
  spd_xstage_stream *st = b->st;
  st->active--;
  if (status < 0) {
    stream_fail(st, status, msg);
    b->busy = 0;
  } else {
    b->copied = 1;
  }
  pump(st);
}

static void on_received(void *arg, int status, const char *msg) {
  sbuf *b = arg;
  spd_xstage_stream *st = b->st;
  st->active--;
  spk_err err;
  int rc = status;
  if (rc == SPK_OK && (rc = copy_start(b, 1, &err)) < 0)
    msg = err.msg;
  if (rc < 0) {
    stream_fail(st, rc, msg);
    b->busy = 0;
  }
  pump(st);
}

static void on_copied_up(void *arg, int status, const char *msg) {
  sbuf *b = arg;
  b->st->active--;
  b->busy = 0;
  if (status < 0)
    stream_fail(b->st, status, msg);
  pump(b->st);
}

/* Start chunks while a buffer is free: receives are posted in chunk order
 * (the order the sender's messages match them); copied sends go out. The
 * stream can finish (and its owner free the stage) only at the end, so
 * callers touch nothing of it after. */
static void pump(spd_xstage_stream *st) {
  st->active++; /* hold: nothing inside finishes the stream */
  post_sends(st);
  while (!st->failed && st->next_chunk < st->nchunks) {
    sbuf *b = NULL;
    for (int i = 0; i < st->nbuf && b == NULL; i++)
      if (!st->buf[i].busy)
        b = &st->buf[i];
    if (b == NULL)
      break;
    b->busy = 1;
    b->copied = 0;
    b->chunk = st->next_chunk++;
    uint64_t at = b->chunk * SPD_PEER_CHUNK;
    b->len = st->bytes - at < SPD_PEER_CHUNK ? st->bytes - at
                                             : SPD_PEER_CHUNK;
    spk_err err;
    int rc;
    if (st->recv)
      rc = post_message(b, on_received, &err);
    else
      rc = copy_start(b, 0, &err);
    if (rc < 0) {
      b->busy = 0;
      stream_fail(st, rc, err.msg);
    }
  }
  if (st->failed && !st->recv)
    for (int i = 0; i < st->nbuf; i++)
      if (st->buf[i].busy && st->buf[i].copied)
        st->buf[i].busy = st->buf[i].copied = 0; /* never to be sent */
  st->active--;
  finish_if_done(st);
}

/* Where each chunk starts in the iov list. */
static int chunk_starts(spd_xstage_stream *st, spk_err *err) {
  st->start = malloc((size_t)st->nchunks * sizeof(*st->start));
  if (st->start == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "malloc of %llu chunk starts "
                       "failed", (unsigned long long)st->nchunks);
  spos p = {0, 0};
  for (uint64_t k = 0; k < st->nchunks; k++) {
    st->start[k] = p;
    for (uint64_t left = SPD_PEER_CHUNK; left > 0 && p.i < st->niov;) {
      uint64_t take = st->iov[p.i].len - p.off;
      take = take < left ? take : left;
      left -= take;
      p.off += take;
      if (p.off == st->iov[p.i].len)
        p.i++, p.off = 0;
    }
  }
  return SPK_OK;
}

int spd_xstage_post(spd_xstage *xs, int node, int recv, uint64_t tag,
                      const spd_iov *iov, size_t niov, uint64_t bytes,
                      spd_xfer_cb cb, void *arg, spd_xstage_stream **st_p,
                      spk_err *err) {
  int nbuf = spd_xstage_buffers(bytes);
  if (xs->nfree < nbuf)
    return spk_err_set(err, SPK_EINVAL, "staging of group '%s' op %llu has "
                       "%d free buffers, a stream of %llu bytes takes %d",
                       xs->name, (unsigned long long)xs->seq, xs->nfree,
                       (unsigned long long)bytes, nbuf);
  spd_xstage_stream *st = calloc(1, sizeof(*st));
  if (st == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of a staged stream "
                       "failed");
  *st = (spd_xstage_stream){.xs = xs, .node = node, .recv = recv,
                            .tag = tag, .bytes = bytes, .niov = niov,
                            .nchunks = (bytes + SPD_PEER_CHUNK - 1) /
                                       SPD_PEER_CHUNK,
                            .cb = cb, .arg = arg, .nbuf = nbuf};
  st->iov = malloc((niov ? niov : 1) * sizeof(*iov));
  int rc = st->iov == NULL
               ? spk_err_set(err, SPK_ENO_MEMORY, "malloc of a staged "
                             "stream's %zu iov entries failed", niov)
               : SPK_OK;
  if (rc == SPK_OK) {
    memcpy(st->iov, iov, niov * sizeof(*iov));
    rc = chunk_starts(st, err);
  }
  if (rc < 0) {
    free(st->iov);
    free(st);
    return rc;
  }
  for (int i = 0; i < st->nbuf; i++)
    st->buf[i] = (sbuf){.st = st, .buf = xs->bufs[--xs->nfree]};
  st->next = xs->streams;
  xs->streams = st;
  *st_p = st;
  st->active++; /* a failure with nothing in flight is returned */
  pump(st);
  st->active--;
  if (st->active == 0 && st->failed) {
    stream_end(st);
    return spk_err_set(err, st->status, "%s", st->msg);
  }
  finish_if_done(st); /* all of it may have ended already */
  return SPK_OK;
}

void spd_xstage_stream_cancel(spd_xstage_stream *st) {
  if (st->finished || st->stopped)
    return;
  st->stopped = 1;
  if (!st->failed)
    stream_fail(st, SPK_ENODE_LOST, "the other node dropped the op");
  for (int i = 0; i < st->nbuf; i++)
    if (st->buf[i].busy)
      spd_peer_stream_cancel(st->xs->ctx, &st->buf[i]);
  pump(st);
}

static void xstage_free(spd_xstage *xs) {
  while (xs->streams != NULL) {
    spd_xstage_stream *st = xs->streams;
    xs->streams = st->next;
    free(st->start);
    free(st->iov);
    free(st);
  }
  free(xs->proxies);
  free(xs->bufs);
  free(xs);
}

int spd_xstage_buffers(uint64_t bytes) {
  uint64_t chunks = (bytes + SPD_PEER_CHUNK - 1) / SPD_PEER_CHUNK;
  return chunks < SPD_XSTAGE_DEPTH ? (int)chunks : SPD_XSTAGE_DEPTH;
}

int spd_xstage_open(const spd_work *w, int dev, int nbufs,
                    spd_xstage **xs_p, spk_err *err) {
  spd_gpu *gpu;
  int rc = spd_gpu_get(w->ctx, &gpu, err);
  if (rc < 0)
    return rc;
  spd_xstage *xs = calloc(1, sizeof(*xs));
  int n = nbufs;
  if (xs == NULL || (xs->bufs = calloc((size_t)(n ? n : 1),
                                       sizeof(void *))) == NULL) {
    free(xs);
    return spk_err_set(err, SPK_ENO_MEMORY, "allocation of a stage of %d "
                       "buffers failed", n);
  }
  *xs = (spd_xstage){.ctx = w->ctx, .gpu = gpu, .dev = dev, .name = w->name,
                     .seq = w->seq, .bufs = xs->bufs, .nbufs = n};
  rc = spd_gpu_set_device(dev, err);
  if (rc == SPK_OK)
    rc = spd_gpu_stage_get(gpu, dev, n, SPD_PEER_CHUNK,
                           w->ctx->cfg.xnode_staging_bytes, xs->bufs, err);
  if (rc < 0) {
    xstage_free(xs);
    return rc;
  }
  xs->nfree = n;
  rc = spd_gpu_stream_get(gpu, dev, &xs->down, err);
  if (rc == SPK_OK)
    rc = spd_gpu_stream_get(gpu, dev, &xs->up, err);
  /* Stream order: the ranks' inputs and outputs are theirs until their
   * ready events. */
  if (rc == SPK_OK)
    rc = spd_gpu_wait_ready(w->rank_state, w->world, xs->down, err);
  if (rc == SPK_OK)
    rc = spd_gpu_wait_ready(w->rank_state, w->world, xs->up, err);
  if (rc < 0) {
    spd_xstage_close(xs);
    return rc;
  }
  *xs_p = xs;
  return SPK_OK;
}

int spd_xstage_proxy(spd_xstage *xs, size_t bytes, uint8_t **p_out,
                     spk_err *err) {
  if (xs->nproxies == xs->cap) {
    size_t ncap = xs->cap ? xs->cap * 2 : 8;
    void **np = realloc(xs->proxies, ncap * sizeof(*np));
    if (np == NULL)
      return spk_err_set(err, SPK_ENO_MEMORY, "realloc of %zu proxies "
                         "failed", ncap);
    xs->proxies = np, xs->cap = ncap;
  }
  void *p;
  int rc = spd_gpu_set_device(xs->dev, err);
  if (rc == SPK_OK)
    rc = spd_gpu_alloc(xs->up, bytes, &p, err);
  if (rc < 0)
    return rc;
  xs->proxies[xs->nproxies++] = p;
  *p_out = p;
  return SPK_OK;
}

static void on_started(void *arg, int status, const char *msg) {
  spd_xstage *xs = arg;
  xs->start_cb(xs->start_arg, status, msg);
}

int spd_xstage_start(spd_xstage *xs, spd_xfer_cb cb, void *arg,
                     spk_err *err) {
  spd_gpu_job *job = calloc(1, sizeof(*job));
  if (job == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of a stage's start "
                       "failed");
  xs->start_cb = cb;
  xs->start_arg = arg;
  int rc = spd_gpu_job_init(xs->gpu, job, on_started, xs, xs->name, xs->seq,
                            NULL, err);
  if (rc < 0) {
    free(job);
    return rc;
  }
  cudaStream_t s[2] = {xs->down, xs->up};
  for (int i = 0; rc == SPK_OK && i < 2; i++)
    rc = spd_gpu_job_watch(job, s[i], err);
  if (rc < 0)
    spd_gpu_job_fail_after(job, s, 2, rc, err->msg);
  else
    spd_gpu_job_arm(job);
  return SPK_OK;
}

void spd_xstage_close(spd_xstage *xs) {
  if (xs == NULL)
    return;
  spk_err err;
  if (spd_gpu_set_device(xs->dev, &err) < 0)
    SPD_WARN(&xs->ctx->log, "closing a stage: %s", err.msg);
  for (size_t i = 0; i < xs->nproxies; i++) {
    cudaError_t e = cudaFreeAsync(xs->proxies[i], xs->up);
    if (e != cudaSuccess)
      SPD_WARN(&xs->ctx->log, "cudaFreeAsync of a proxy of group '%s': %s",
               xs->name, cudaGetErrorString(e));
  }
  if (xs->down != NULL)
    spd_gpu_stream_put(xs->gpu, xs->dev, xs->down);
  if (xs->up != NULL)
    spd_gpu_stream_put(xs->gpu, xs->dev, xs->up);
  if (xs->nfree != xs->nbufs)
    SPD_WARN(&xs->ctx->log, "a stage of group '%s' closed with %d of %d "
             "buffers out", xs->name, xs->nbufs - xs->nfree, xs->nbufs);
  spd_gpu_stage_put(xs->gpu, xs->dev, xs->bufs, xs->nfree);
  xstage_free(xs);
}

#else /* !SPC_HAVE_CUDA */

static int no_cuda(spk_err *err) {
  return spk_err_set(err, SPK_EUNSUPPORTED, "device tensors across nodes, "
                     "but spcolld was built without CUDA");
}

int spd_xstage_buffers(uint64_t bytes) {
  (void)bytes;
  return 0;
}

int spd_xstage_open(const spd_work *w, int dev, int nbufs,
                    spd_xstage **xs_p, spk_err *err) {
  (void)w, (void)dev, (void)nbufs, (void)xs_p;
  return no_cuda(err);
}

int spd_xstage_proxy(spd_xstage *xs, size_t bytes, uint8_t **p_out,
                     spk_err *err) {
  (void)xs, (void)bytes, (void)p_out;
  return no_cuda(err);
}

int spd_xstage_start(spd_xstage *xs, spd_xfer_cb cb, void *arg,
                     spk_err *err) {
  (void)xs, (void)cb, (void)arg;
  return no_cuda(err);
}

int spd_xstage_post(spd_xstage *xs, int node, int recv, uint64_t tag,
                      const spd_iov *iov, size_t niov, uint64_t bytes,
                      spd_xfer_cb cb, void *arg, spd_xstage_stream **st_p,
                      spk_err *err) {
  (void)xs, (void)node, (void)recv, (void)tag, (void)iov, (void)niov;
  (void)bytes, (void)cb, (void)arg, (void)st_p;
  return no_cuda(err);
}

void spd_xstage_stream_cancel(spd_xstage_stream *st) {
  (void)st;
}

void spd_xstage_close(spd_xstage *xs) {
  (void)xs;
}

#endif /* SPC_HAVE_CUDA */
