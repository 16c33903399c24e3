/* The daemon's GPU state: devices (by UUID), stream pools, and the cache
 * of clients' IPC events. Made on the first device registration, so a
 * daemon without a GPU starts and serves host groups as before. */
#include "gpu.h"

#ifdef SPC_HAVE_CUDA

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Events opened for clients, kept after their ops for the next ones; the
 * least recently used beyond this many are destroyed. */
#define EVENT_CACHE 4096
/* Memory the stream-ordered allocator keeps for descriptors and staging
 * instead of returning it to the driver after every op. */
#define POOL_KEEP ((uint64_t)256 << 20)

static void uuid_str(const uint8_t *u, char *buf, size_t len) {
  snprintf(buf, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
           "%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3], u[4], u[5],
           u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
}

static int dev_init(spd_gpu *gpu, int d, spk_err *err) {
  struct cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, d);
  if (e != cudaSuccess)
    return spk_err_set(err, SPK_EDEVICE, "cudaGetDeviceProperties(%d): %s", d,
                       cudaGetErrorString(e));
  memcpy(gpu->dev[d].uuid, prop.uuid.bytes, 16);
  gpu->dev[d].sms = prop.multiProcessorCount;
  char u[64];
  uuid_str(gpu->dev[d].uuid, u, sizeof(u));
  SPD_INFO(&gpu->ctx->log, "GPU %d: %s, %s, %d multiprocessors", d,
           prop.name, u, prop.multiProcessorCount);
  return SPK_OK;
}

static struct spd_gpu_reaper *reaper_new(spd_ctx *ctx);

int spd_gpu_get(spd_ctx *ctx, spd_gpu **gpu_p, spk_err *err) {
  if (ctx->gpu != NULL && ctx->gpu->lost &&
      spd_gpu_lost_check(ctx->gpu)) /* asks again for a new daemon */
    return spk_err_set(err, SPK_EDEVICE, "spcolld's CUDA context is lost "
                       "(%s): a new spcolld takes over, and device work "
                       "runs there", ctx->gpu->lost_why);
  if (ctx->gpu != NULL) {
    *gpu_p = ctx->gpu;
    return SPK_OK;
  }
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess)
    return spk_err_set(err, SPK_EUNSUPPORTED, "spcolld has no GPU for "
                       "device buffers: cudaGetDeviceCount: %s",
                       cudaGetErrorString(e));
  if (n == 0)
    return spk_err_set(err, SPK_EUNSUPPORTED, "spcolld has no GPU for "
                       "device buffers: cudaGetDeviceCount found 0 devices");
  spd_gpu *gpu = calloc(1, sizeof(*gpu));
  if (gpu != NULL && (gpu->reaper = reaper_new(ctx)) == NULL) {
    free(gpu);
    gpu = NULL;
  }
  if (gpu == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of the GPU state failed");
  gpu->ctx = ctx;
  if (n > SPD_GPU_MAX_DEV) {
    SPD_WARN(&ctx->log, "%d GPUs visible; using the first %d", n,
             SPD_GPU_MAX_DEV);
    n = SPD_GPU_MAX_DEV;
  }
  gpu->ndev = n;
  for (int d = 0; d < n; d++) {
    int rc = dev_init(gpu, d, err);
    if (rc < 0) {
      free(gpu->reaper); /* nothing given to it yet */
      free(gpu);
      return rc;
    }
  }
  if (getenv("SPCOLL_GPU_MOVER") != NULL)
    SPD_WARN(&ctx->log, "SPCOLL_GPU_MOVER='%s' is no longer read: set "
             "`mover` in the config (or --mover)",
             getenv("SPCOLL_GPU_MOVER"));
  SPD_INFO(&ctx->log, "GPU movers ready: %d device(s), mover %s%s", n,
           ctx->cfg.mover,
#ifdef SPC_HAVE_NCCL
           ""
#else
           " (built without NCCL)"
#endif
  );
  ctx->gpu = gpu;
  *gpu_p = gpu;
  return SPK_OK;
}

/* ---- pinned memory given back ---------------------------------------------
 * cudaFreeHost synchronizes the device: on the loop thread it would wait
 * for every stream of the daemon, the clients' ops with them. Pinned
 * allocations given back go to the reaper, which frees them on libuv's
 * thread pool one round at a time, so at most one pool thread waits on
 * the GPU for it, however many there are. An allocation waiting for its
 * round is linked through its first word (the host no longer uses it;
 * a descriptor block's header starts with its `next`). The loop thread
 * owns the reaper but for `round`, the pool thread's while busy. At
 * spd_gpu_state_free the reaper takes what the GPU state still holds
 * and outlives it: once that is freed, it frees itself. */
typedef struct spd_gpu_reaper {
  uv_work_t work;
  spd_ctx *ctx;                /* the loop and the log: live for the process */
  void *waiting;               /* for the next round */
  void *round;                 /* being freed */
  int busy;                    /* a round is on the pool */
  int orphan;                  /* the GPU state is gone */
  int dev;                     /* current in the round: a GPU the daemon
                                * has a context on (none made elsewhere) */
  int nfreed, nfailed;         /* the round's, for the log */
  cudaError_t err;             /* its first failure */
} spd_gpu_reaper;

static spd_gpu_reaper *reaper_new(spd_ctx *ctx) {
  spd_gpu_reaper *r = calloc(1, sizeof(*r));
  if (r != NULL) {
    r->ctx = ctx;
    r->work.data = r;
  }
  return r;
}

/* Threadpool: the round's cudaFreeHost calls, which may wait for the
 * GPU. */
static void reap_work(uv_work_t *w) {
  spd_gpu_reaper *r = w->data;
  if (r->dev >= 0 && cudaSetDevice(r->dev) != cudaSuccess)
    cudaGetLastError(); /* the frees still go */
  r->nfreed = r->nfailed = 0;
  r->err = cudaSuccess;
  while (r->round != NULL) {
    void *p = r->round;
    r->round = *(void **)p;
    cudaError_t e = cudaFreeHost(p);
    if (e == cudaSuccess) {
      r->nfreed++;
      continue;
    }
    cudaGetLastError();
    if (r->nfailed++ == 0)
      r->err = e;
  }
}

static void reap_done(uv_work_t *w, int status);

/* Start a round with what waits, unless one is on the pool. */
static void reap_start(spd_gpu_reaper *r) {
  if (r->busy || r->waiting == NULL)
    return;
  if (cudaGetDevice(&r->dev) != cudaSuccess) {
    cudaGetLastError();
    r->dev = -1;
  }
  r->round = r->waiting;
  r->waiting = NULL;
  r->busy = 1;
  int rc = uv_queue_work(r->ctx->loop, &r->work, reap_work, reap_done);
  if (rc < 0) {
    /* Kept for the next put, or leaked at exit (said). */
    SPD_WARN(&r->ctx->log, "uv_queue_work to free pinned host memory: %s; "
             "it is kept", uv_strerror(rc));
    r->waiting = r->round;
    r->round = NULL;
    r->busy = 0;
  }
}

/* The GPU state is gone: the reaper goes once its round is done. */
static void reaper_end(spd_gpu_reaper *r) {
  r->orphan = 1;
  if (r->busy)
    return; /* reap_done comes back here */
  if (r->waiting != NULL)
    SPD_WARN(&r->ctx->log, "pinned host memory left to the process's exit");
  free(r);
}

static void reap_done(uv_work_t *w, int status) {
  spd_gpu_reaper *r = w->data;
  r->busy = 0;
  if (status < 0)
    SPD_WARN(&r->ctx->log, "freeing pinned host memory did not run: %s; "
             "it is left to the process's exit", uv_strerror(status));
  else if (r->nfailed > 0)
    SPD_WARN(&r->ctx->log, "cudaFreeHost of %d of %d pinned host "
             "allocations given back: %s", r->nfailed,
             r->nfailed + r->nfreed, cudaGetErrorString(r->err));
  reap_start(r);
  if (r->orphan)
    reaper_end(r);
}

/* Pinned allocation `base` goes back to CUDA, off the loop thread. */
static void reap(spd_gpu_reaper *r, void *base) {
  *(void **)base = r->waiting;
  r->waiting = base;
  reap_start(r);
}

/* ---- pinned blocks ------------------------------------------------------ */

/* Free blocks kept beyond this many are given back. */
#define PINNED_KEEP 32

typedef struct spd_gpu_pinned {
  struct spd_gpu_pinned *next;
  size_t cap;                  /* bytes after the header */
} spd_gpu_pinned;

#define PINNED_HDR 64 /* keeps the block's data 64-byte aligned */
_Static_assert(sizeof(spd_gpu_pinned) <= PINNED_HDR, "header fits");

int spd_gpu_pinned_get(spd_gpu *gpu, size_t bytes, void **p_out,
                       spk_err *err) {
  for (spd_gpu_pinned **p = &gpu->pinned; *p != NULL; p = &(*p)->next)
    if ((*p)->cap >= bytes) {
      spd_gpu_pinned *b = *p;
      *p = b->next;
      gpu->npinned--;
      *p_out = (uint8_t *)b + PINNED_HDR;
      return SPK_OK;
    }
  size_t cap = 4096;
  while (cap < bytes)
    cap *= 2;
  void *m = NULL;
  cudaError_t e = cudaMallocHost(&m, cap + PINNED_HDR);
  if (e != cudaSuccess)
    return spk_err_set(err, SPK_EDEVICE, "cudaMallocHost of %zu bytes for "
                       "descriptors: %s", cap + PINNED_HDR,
                       cudaGetErrorString(e));
  ((spd_gpu_pinned *)m)->cap = cap;
  *p_out = (uint8_t *)m + PINNED_HDR;
  return SPK_OK;
}

void spd_gpu_pinned_put(spd_gpu *gpu, void *p) {
  if (p == NULL)
    return;
  spd_gpu_pinned *b = (spd_gpu_pinned *)((uint8_t *)p - PINNED_HDR);
  if (gpu->npinned >= PINNED_KEEP) {
    reap(gpu->reaper, b);
    return;
  }
  b->next = gpu->pinned;
  gpu->pinned = b;
  gpu->npinned++;
}

void spd_gpu_state_free(spd_gpu *gpu) {
  /* The NCCL communicators went first: its engine's fini. */
  while (gpu->ev_head != NULL) {
    spd_gpu_event *ev = gpu->ev_head;
    gpu->ev_head = ev->next;
    cudaEventDestroy(ev->ev);
    free(ev);
  }
  spd_gpu_reaper *r = gpu->reaper;
  while (gpu->pinned != NULL) {
    spd_gpu_pinned *b = gpu->pinned;
    gpu->pinned = b->next;
    reap(r, b);
  }
  for (int d = 0; d < gpu->ndev; d++) {
    if (gpu->dev[d].nccl_tail != NULL &&
        cudaEventDestroy(gpu->dev[d].nccl_tail) != cudaSuccess)
      cudaGetLastError(); /* nothing to answer: the state goes */
    for (int i = 0; i < gpu->dev[d].nstreams; i++)
      cudaStreamDestroy(gpu->dev[d].streams[i]);
    free(gpu->dev[d].streams);
    for (int i = 0; i < gpu->dev[d].nstage_free; i++)
      reap(r, gpu->dev[d].stage_free[i]);
    free(gpu->dev[d].stage_free);
  }
  free(gpu);
  /* What it was given is freed on the pool while the loop runs on. */
  reaper_end(r);
}

int spd_gpu_stage_get(spd_gpu *gpu, int dev, int n, size_t size,
                      long long cap, void **bufs, spk_err *err) {
  spd_gpu_dev *d = &gpu->dev[dev];
  long long want = (long long)n * (long long)size;
  if (d->staged + want > cap)
    return spk_err_set(err, SPK_ENO_MEMORY, "staging device tensors across "
                       "nodes needs %lld bytes of pinned memory for GPU %d; "
                       "%lld of xnode_staging_bytes = %lld are in use",
                       want, dev, d->staged, cap);
  if (d->stage_size != 0 && d->stage_size != size)
    return spk_err_set(err, SPK_EINVAL, "staging chunks of %zu bytes asked "
                       "for GPU %d, whose are %zu", size, dev, d->stage_size);
  int got = 0;
  for (; got < n && d->nstage_free > 0; got++)
    bufs[got] = d->stage_free[--d->nstage_free];
  for (; got < n; got++) {
    cudaError_t e = cudaMallocHost(&bufs[got], size);
    if (e != cudaSuccess) {
      d->stage_size = size;
      d->staged += (long long)got * (long long)size; /* put takes it back */
      spd_gpu_stage_put(gpu, dev, bufs, got);
      return spk_err_set(err, SPK_EDEVICE, "cudaMallocHost of a %zu-byte "
                         "staging chunk for GPU %d: %s", size, dev,
                         cudaGetErrorString(e));
    }
  }
  d->stage_size = size;
  d->staged += want;
  return SPK_OK;
}

void spd_gpu_stage_put(spd_gpu *gpu, int dev, void **bufs, int n) {
  spd_gpu_dev *d = &gpu->dev[dev];
  d->staged -= (long long)n * (long long)d->stage_size;
  if (d->nstage_free + n > d->stage_cap) {
    int ncap = d->nstage_free + n;
    void **nf = realloc(d->stage_free, (size_t)ncap * sizeof(*nf));
    if (nf == NULL) {
      /* Not kept, then: given back. */
      for (int i = 0; i < n; i++)
        reap(gpu->reaper, bufs[i]);
      return;
    }
    d->stage_free = nf, d->stage_cap = ncap;
  }
  for (int i = 0; i < n; i++)
    d->stage_free[d->nstage_free++] = bufs[i];
}

int spd_gpu_dev_of_uuid(spd_gpu *gpu, const uint8_t *uuid, size_t len,
                        int *dev_p, spk_err *err) {
  if (len != 16)
    return spk_err_set(err, SPK_EINVAL, "device_uuid has %zu bytes, a CUDA "
                       "device UUID has 16", len);
  for (int d = 0; d < gpu->ndev; d++)
    if (memcmp(gpu->dev[d].uuid, uuid, 16) == 0) {
      *dev_p = d;
      return SPK_OK;
    }
  char u[64];
  uuid_str(uuid, u, sizeof(u));
  return spk_err_set(err, SPK_EUNSUPPORTED, "the buffer's %s is not one of "
                     "the %d GPU(s) spcolld sees (CUDA_VISIBLE_DEVICES of "
                     "the daemon?)", u, gpu->ndev);
}

/* A GPU's first use by a group: only then does the daemon make a context
 * there (cudaSetDevice does since CUDA 12). A context costs GPU memory and
 * fails on a GPU that another job holds in EXCLUSIVE_PROCESS mode, so the
 * daemon never opens one on a GPU none of its groups use; device
 * properties (UUIDs, SM counts) need none. */
int spd_gpu_dev_open(spd_gpu *gpu, int dev, spk_err *err) {
  int rc = spd_gpu_set_device(dev, err);
  if (rc < 0 || gpu->dev[dev].opened)
    return rc;
  gpu->dev[dev].opened = 1;
  cudaMemPool_t pool;
  uint64_t keep = POOL_KEEP;
  cudaError_t e = cudaDeviceGetDefaultMemPool(&pool, dev);
  if (e == cudaSuccess)
    e = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  if (e != cudaSuccess)
    SPD_WARN(&gpu->ctx->log, "GPU %d: keeping %llu bytes in the memory pool "
             "failed (cudaMemPoolSetAttribute: %s); going on", dev,
             (unsigned long long)keep, cudaGetErrorString(e));
  return SPK_OK;
}

int spd_gpu_set_device(int dev, spk_err *err) {
  cudaError_t e = cudaSetDevice(dev);
  if (e != cudaSuccess)
    return spk_err_set(err, SPK_EDEVICE, "cudaSetDevice(%d): %s", dev,
                       cudaGetErrorString(e));
  return SPK_OK;
}

int spd_gpu_stream_get(spd_gpu *gpu, int dev, cudaStream_t *s_p,
                       spk_err *err) {
  spd_gpu_dev *g = &gpu->dev[dev];
  if (g->nstreams > 0) {
    *s_p = g->streams[--g->nstreams];
    return SPK_OK;
  }
  int rc = spd_gpu_set_device(dev, err);
  if (rc < 0)
    return rc;
  /* Non-blocking: the daemon's work must not wait on, or hold up, the
   * legacy default stream. */
  cudaError_t e = cudaStreamCreateWithFlags(s_p, cudaStreamNonBlocking);
  if (e != cudaSuccess)
    return spk_err_set(err, SPK_EDEVICE, "cudaStreamCreateWithFlags on GPU "
                       "%d: %s", dev, cudaGetErrorString(e));
  return SPK_OK;
}

void spd_gpu_stream_put(spd_gpu *gpu, int dev, cudaStream_t s) {
  spd_gpu_dev *g = &gpu->dev[dev];
  if (g->nstreams == g->cap) {
    int ncap = g->cap ? 2 * g->cap : 8;
    cudaStream_t *p = realloc(g->streams, (size_t)ncap * sizeof(*p));
    if (p == NULL) {
      /* Cannot pool it: the stream is idle, so it can go. */
      cudaStreamDestroy(s);
      return;
    }
    g->streams = p;
    g->cap = ncap;
  }
  g->streams[g->nstreams++] = s;
}

/* ---- client events ---------------------------------------------------- */

static void ev_unlink(spd_gpu *gpu, spd_gpu_event *ev) {
  if (ev->prev)
    ev->prev->next = ev->next;
  else
    gpu->ev_head = ev->next;
  if (ev->next)
    ev->next->prev = ev->prev;
  else
    gpu->ev_tail = ev->prev;
  ev->prev = ev->next = NULL;
}

static void ev_push_front(spd_gpu *gpu, spd_gpu_event *ev) {
  ev->prev = NULL;
  ev->next = gpu->ev_head;
  if (gpu->ev_head)
    gpu->ev_head->prev = ev;
  gpu->ev_head = ev;
  if (gpu->ev_tail == NULL)
    gpu->ev_tail = ev;
}

static void ev_destroy(spd_gpu *gpu, spd_gpu_event *ev) {
  ev_unlink(gpu, ev);
  cudaError_t e = cudaEventDestroy(ev->ev);
  if (e != cudaSuccess)
    SPD_WARN(&gpu->ctx->log, "cudaEventDestroy of a client event: %s",
             cudaGetErrorString(e));
  free(ev);
  gpu->nevents--;
}

/* Events of clients that went away are never looked up again: the cache
 * bound retires them, oldest first, unless an op still holds them. */
static void ev_trim(spd_gpu *gpu) {
  spd_gpu_event *ev = gpu->ev_tail;
  while (gpu->nevents > EVENT_CACHE && ev != NULL) {
    spd_gpu_event *prev = ev->prev;
    if (ev->refs == 0) {
      ev_destroy(gpu, ev);
    }
    ev = prev;
  }
}

int spd_gpu_event_open(spd_gpu *gpu, uint64_t session, const uint8_t *handle,
                       int dev, void *mem, spd_gpu_event **ev_p,
                       spk_err *err) {
  for (spd_gpu_event *ev = gpu->ev_head; ev != NULL; ev = ev->next)
    if (ev->session == session && ev->dev == dev &&
        memcmp(ev->handle, handle, SPD_GPU_HANDLE) == 0) {
      ev_unlink(gpu, ev);
      ev_push_front(gpu, ev);
      ev->refs++;
      *ev_p = ev;
      return SPK_OK;
    }
  spd_gpu_event *ev = calloc(1, sizeof(*ev));
  if (ev == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of an event record "
                       "failed");
  int rc = spd_gpu_set_device(dev, err);
  if (rc < 0) {
    free(ev);
    return rc;
  }
  cudaIpcEventHandle_t h;
  memcpy(&h, handle, sizeof(h));
  cudaError_t e = cudaIpcOpenEventHandle(&ev->ev, h);
  if (e != cudaSuccess) {
    free(ev);
    return spk_err_set(err, SPK_EDEVICE, "cudaIpcOpenEventHandle on GPU %d: "
                       "%s (was the event made with cudaEventInterprocess | "
                       "cudaEventDisableTiming?)", dev, cudaGetErrorString(e));
  }
  ev->session = session;
  ev->dev = dev;
  ev->mem = mem;
  memcpy(ev->handle, handle, SPD_GPU_HANDLE);
  ev->refs = 1;
  ev_push_front(gpu, ev);
  gpu->nevents++;
  ev_trim(gpu);
  *ev_p = ev;
  return SPK_OK;
}

void spd_gpu_event_put(spd_gpu_event *ev) {
  ev->refs--;
}

void spd_gpu_events_drop_mem(spd_gpu *gpu, void *mem) {
  spd_gpu_event *ev = gpu->ev_head;
  while (ev != NULL) {
    spd_gpu_event *next = ev->next;
    if (ev->mem == mem && ev->refs > 0) {
      ev->mem = NULL;
    } else if (ev->mem == mem) {
      ev_destroy(gpu, ev);
    }
    ev = next;
  }
}

_Static_assert(sizeof(cudaIpcEventHandle_t) == SPD_GPU_HANDLE &&
                   sizeof(cudaIpcMemHandle_t) == SPD_GPU_HANDLE,
               "CUDA IPC handles are 64 bytes");

#endif /* SPC_HAVE_CUDA */
