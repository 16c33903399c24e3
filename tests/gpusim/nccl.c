/* libnccl.so.2 of the simulator, compiled against the real nccl.h.
 * Communicators of one ncclCommInitAll form a clique in this process.
 * A group (ncclGroupStart/End, or a lone call) becomes one batch: every
 * (communicator, stream) pair in it gets a part queued on its stream;
 * the parts meet when their streams reach them (as NCCL kernels do), and
 * the last to arrive moves the data for all. Reductions follow NCCL's
 * semantics by default: sums in ring order (not rank order), max/min that
 * ignore NaN (fmaxf); SPCSIM_NCCL_SUM_ORDER=rank and SPCSIM_NCCL_NAN=
 * propagate give the other semantics so tests can tell them apart.
 * Communicators of two cliques with operations in flight at once on one
 * GPU, which NCCL documents as unsafe (they can deadlock), are a
 * violation under SPCSIM_FORBID_CONCURRENT_COMMS (see in_flight_enter). */
#include <math.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "half.h"
#include "sim.h"

#define API __attribute__((visibility("default")))

typedef struct clique {
  int n;
  int refs;
  int aborted;
} clique;

struct ncclComm {
  clique *cl;
  int rank, dev;
  uintptr_t owner; /* thread using it now, 0 when none */
  ncclResult_t async_err;
};

enum { OP_SEND, OP_RECV, OP_AG, OP_A2A, OP_RS, OP_AR };

typedef struct {
  int type;
  ncclComm_t comm;
  const void *sbuf;
  void *rbuf;
  size_t count;
  ncclDataType_t dt;
  ncclRedOp_t red;
  int peer;
  sim_stream *s;
} nop;

static __thread int group_depth;
static __thread nop *pending;
static __thread int npending, cap_pending;
static __thread char last_err[256];
static int ncomms;

static const char *op_name(int t) {
  static const char *const n[] = {"ncclSend",          "ncclRecv",
                                  "ncclAllGather",     "ncclAlltoAll",
                                  "ncclReduceScatter", "ncclAllReduce"};
  return n[t];
}

API const char *ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess:
    return "no error";
  case ncclUnhandledCudaError:
    return "unhandled cuda error";
  case ncclSystemError:
    return "unhandled system error";
  case ncclInternalError:
    return "internal error";
  case ncclInvalidArgument:
    return "invalid argument";
  case ncclInvalidUsage:
    return "invalid usage";
  case ncclRemoteError:
    return "remote process exited or there was a "
           "network error";
  default:
    return "unknown result code";
  }
}

API const char *ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return last_err;
}

API ncclResult_t ncclGetVersion(int *v) {
  *v = NCCL_VERSION_CODE;
  return ncclSuccess;
}

static ncclResult_t fail(ncclResult_t r, const char *fmt, const char *a) {
  snprintf(last_err, sizeof(last_err), fmt, a);
  return r;
}

/* A clique of n communicators on devs (NULL: GPUs 0..n-1). */
static ncclResult_t clique_make(ncclComm_t *comms, int n, const int *devs) {
  if (n <= 0 || comms == NULL)
    return fail(ncclInvalidArgument, "%s", "ncclCommInitAll: bad count");
  for (int i = 0; i < n; i++) {
    int d = devs ? devs[i] : i;
    if (d < 0 || d >= sim_cfg()->ndev)
      return fail(ncclInvalidArgument, "%s", "ncclCommInitAll: bad device");
    for (int j = 0; j < i; j++)
      if ((devs ? devs[j] : j) == d) {
        sim_violation("nccl-two-ranks-one-device", "ncclCommInitAll",
                      "ranks %d and %d of one communicator are both on GPU "
                      "%d: NCCL needs one rank per device",
                      j, i, d);
        return fail(ncclInvalidUsage, "%s", "duplicate GPU");
      }
  }
  clique *cl = calloc(1, sizeof(*cl));
  if (cl == NULL)
    return ncclSystemError;
  cl->n = n;
  cl->refs = n;
  for (int i = 0; i < n; i++) {
    comms[i] = calloc(1, sizeof(struct ncclComm));
    if (comms[i] == NULL)
      return ncclSystemError; /* the simulator's own failure: loud enough */
    comms[i]->cl = cl;
    comms[i]->rank = i;
    comms[i]->dev = devs ? devs[i] : i;
  }
  /* NCCL enables peer access between the GPUs of a communicator for its
   * P2P transport; pool memory still needs its pool's grant. */
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++)
      if (i != j)
        sim_peer_enable(comms[i]->dev, comms[j]->dev);
  __atomic_add_fetch(&ncomms, n, __ATOMIC_RELAXED);
  return ncclSuccess;
}

/* Rule host-sync (sim_no_block): the calls nccl.h and NCCL's guide say
 * wait for other ranks or for the communicator's work. Making
 * communicators (ncclCommInitAll makes the clique "in a blocking way");
 * and taking them down: ncclCommDestroy finalizes first, flushing every
 * issued operation, an intra-node collective call; ncclCommAbort stops
 * the communicator's work and threads before it frees them. The ones
 * spcsim does not simulate (ncclCommInitRank, ncclCommSplit,
 * ncclCommFinalize...) are flagged in absent.c. */
API ncclResult_t ncclCommInitAll(ncclComm_t *comms, int n, const int *devs) {
  sim_no_block("ncclCommInitAll", "waits for every rank's communicator to "
               "be made");
  return clique_make(comms, n, devs);
}

/* A clique lives while a communicator or a batch still refers to it. */
static void clique_unref(clique *cl) {
  if (__atomic_sub_fetch(&cl->refs, 1, __ATOMIC_ACQ_REL) == 0)
    free(cl);
}

static ncclResult_t comm_destroy(ncclComm_t c) {
  if (c == NULL)
    return ncclInvalidArgument;
  clique *cl = c->cl;
  free(c);
  __atomic_sub_fetch(&ncomms, 1, __ATOMIC_RELAXED);
  clique_unref(cl);
  return ncclSuccess;
}

API ncclResult_t ncclCommDestroy(ncclComm_t c) {
  sim_no_block("ncclCommDestroy", "waits for the communicator's operations "
               "to complete (it finalizes first)");
  return comm_destroy(c);
}

API ncclResult_t ncclCommAbort(ncclComm_t c) {
  sim_no_block("ncclCommAbort", "waits for the communicator's work and "
               "threads to stop");
  if (c == NULL)
    return ncclInvalidArgument;
  /* Parts of this clique waiting for their peers give up. */
  __atomic_store_n(&c->cl->aborted, 1, __ATOMIC_RELEASE);
  return comm_destroy(c);
}

API ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *e) {
  *e = __atomic_load_n(&c->async_err, __ATOMIC_ACQUIRE);
  return ncclSuccess;
}

API ncclResult_t ncclCommCount(const ncclComm_t c, int *n) {
  *n = c->cl->n;
  return ncclSuccess;
}

API ncclResult_t ncclCommCuDevice(const ncclComm_t c, int *d) {
  *d = c->dev;
  return ncclSuccess;
}

API ncclResult_t ncclCommUserRank(const ncclComm_t c, int *r) {
  *r = c->rank;
  return ncclSuccess;
}

/* ---- ownership: one thread at a time per communicator ------------------- */

static uintptr_t self_id(void) { return (uintptr_t)pthread_self(); }

static void comm_take(ncclComm_t c, const char *call) {
  uintptr_t zero = 0, me = self_id();
  if (!__atomic_compare_exchange_n(&c->owner, &zero, me, 0, __ATOMIC_ACQ_REL,
                                   __ATOMIC_ACQUIRE) &&
      zero != me)
    sim_violation("nccl-concurrent-comm", call,
                  "rank %d's communicator is "
                  "in use by another thread: NCCL communicators are not "
                  "thread-safe",
                  c->rank);
}

static void comm_release(ncclComm_t c) {
  __atomic_store_n(&c->owner, 0, __ATOMIC_RELEASE);
}

/* ---- reductions ---- */

static size_t dt_size(ncclDataType_t t) {
  switch (t) {
  case ncclInt8:
  case ncclUint8:
    return 1;
  case ncclFloat16:
  case ncclBfloat16:
    return 2;
  case ncclInt32:
  case ncclUint32:
  case ncclFloat32:
    return 4;
  default:
    return 8;
  }
}

static int nan_propagates(void) {
  const char *v = getenv("SPCSIM_NCCL_NAN");
  return v != NULL && strcmp(v, "propagate") == 0;
}

static int rank_order(void) {
  const char *v = getenv("SPCSIM_NCCL_SUM_ORDER");
  return v != NULL && strcmp(v, "rank") == 0;
}

static double fcomb(ncclRedOp_t op, double a, double v, int prop) {
  if (op == ncclSum)
    return a + v;
  if (op == ncclProd)
    return a * v;
  if (prop && (a != a || v != v))
    return a != a ? a : v;
  return op == ncclMax ? fmax(a, v) : fmin(a, v);
}

/* One element: srcs[order[j]] combined left to right, in the type's own
 * precision after every step (NCCL accumulates in the element type). */
static void reduce_elem(ncclDataType_t t, ncclRedOp_t op, const void **src,
                        const int *order, int n, size_t k, void *dst) {
  int prop = nan_propagates();
  switch (t) {
  case ncclFloat32: {
    float a = ((const float *)src[order[0]])[k];
    for (int j = 1; j < n; j++) {
      float v = ((const float *)src[order[j]])[k];
      a = op == ncclSum ? a + v : (float)fcomb(op, a, v, prop);
    }
    ((float *)dst)[k] = a;
    return;
  }
  case ncclFloat64: {
    double a = ((const double *)src[order[0]])[k];
    for (int j = 1; j < n; j++)
      a = fcomb(op, a, ((const double *)src[order[j]])[k], prop);
    ((double *)dst)[k] = a;
    return;
  }
  case ncclFloat16:
  case ncclBfloat16: {
    int bf = t == ncclBfloat16;
    uint16_t a = ((const uint16_t *)src[order[0]])[k];
    for (int j = 1; j < n; j++) {
      uint16_t v = ((const uint16_t *)src[order[j]])[k];
      float x = bf ? spk_bf16_to_f32(a) : spk_f16_to_f32(a);
      float y = bf ? spk_bf16_to_f32(v) : spk_f16_to_f32(v);
      float r = op == ncclSum ? x + y : (float)fcomb(op, x, y, prop);
      a = bf ? spk_f32_to_bf16(r) : spk_f32_to_f16(r);
    }
    ((uint16_t *)dst)[k] = a;
    return;
  }
  default:
    break;
  }
#define IRED(T)                                                                \
  do {                                                                         \
    T a = ((const T *)src[order[0]])[k];                                       \
    for (int j = 1; j < n; j++) {                                              \
      T v = ((const T *)src[order[j]])[k];                                     \
      a = op == ncclSum    ? (T)(a + v)                                        \
          : op == ncclProd ? (T)(a * v)                                        \
          : op == ncclMax  ? (v > a ? v : a)                                   \
                           : (v < a ? v : a);                                   \
    }                                                                          \
    ((T *)dst)[k] = a;                                                         \
  } while (0)
  switch (t) {
  case ncclInt8:
    IRED(int8_t);
    break;
  case ncclUint8:
    IRED(uint8_t);
    break;
  case ncclInt32:
    IRED(int32_t);
    break;
  case ncclUint32:
    IRED(uint32_t);
    break;
  case ncclInt64:
    IRED(int64_t);
    break;
  default:
    IRED(uint64_t);
    break;
  }
#undef IRED
}

/* The order NCCL's ring adds the n contributions to an element of chunk
 * c (of n): it starts after the chunk's owner and ends with it. */
static void ring(int n, int c, int *order) {
  for (int j = 0; j < n; j++)
    order[j] = rank_order() ? j : (c + 1 + j) % n;
}

/* ---- batches ---- */

typedef struct {
  nop *ops;
  int nops, nparts, arrived, done, refs, failed;
  clique *cl;
  pthread_mutex_t mu;
  pthread_cond_t cv;
} batch;

typedef struct {
  batch *b;
  ncclComm_t comm;
  int dev; /* the communicator's, kept: an abort may free it */
} part;

/* ---- cliques in flight on a GPU -------------------------------------------
 * A part is in flight from when its stream reaches it until its batch is
 * done: what a real NCCL kernel does, holding the GPU while it waits for
 * its peers. NCCL documents that operations of different communicators
 * must not be in flight at once on one device (one may hold what the
 * other's peers need: a deadlock); they must be ordered, e.g. on one
 * stream or through events. Each waiting part is listed here, on its
 * worker's stack. */

typedef struct in_flight {
  struct in_flight *next;
  const clique *cl;
  int dev;
} in_flight;

static pthread_mutex_t in_flight_mu = PTHREAD_MUTEX_INITIALIZER;
static in_flight *in_flight_parts;

/* List f; with SPCSIM_FORBID_CONCURRENT_COMMS (1, or the program's name)
 * a part of another clique in flight on the same GPU is a violation. */
static void in_flight_enter(in_flight *f, const char *call) {
  pthread_mutex_lock(&in_flight_mu);
  int others = 0;
  for (const in_flight *x = in_flight_parts; x != NULL; x = x->next)
    others += x->dev == f->dev && x->cl != f->cl;
  f->next = in_flight_parts;
  in_flight_parts = f;
  pthread_mutex_unlock(&in_flight_mu);
  if (others > 0 && sim_applies_here("SPCSIM_FORBID_CONCURRENT_COMMS"))
    sim_violation("nccl-concurrent-comms", call,
                  "communicators of %d other ncclCommInitAll call(s) have "
                  "operations in flight on GPU %d at the same time as this "
                  "one: NCCL documents concurrent communicators on one "
                  "device as unsafe (they can deadlock); order them (one "
                  "stream, or events)",
                  others, f->dev);
}

static void in_flight_leave(in_flight *f) {
  pthread_mutex_lock(&in_flight_mu);
  for (in_flight **p = &in_flight_parts; *p != NULL; p = &(*p)->next)
    if (*p == f) {
      *p = f->next;
      break;
    }
  pthread_mutex_unlock(&in_flight_mu);
}

static void check_reach(const void *p, size_t bytes, int dev,
                        const char *call) {
  sim_check_access(p, bytes, dev, call);
}

/* Run every op of the batch: collectives over the whole clique, sends
 * matched with receives in issue order per pair. 0, or -1 on a mismatch
 * (already reported). */
static int execute(batch *b) {
  for (int i = 0; i < b->nops; i++) {
    nop *o = &b->ops[i];
    if (o->type == OP_SEND || o->type == OP_RECV)
      continue;
    int n = o->comm->cl->n;
    /* Every rank's matching call, found in this batch. */
    const nop **r = calloc((size_t)n, sizeof(*r));
    int *order = calloc((size_t)n, sizeof(int));
    const void **src = calloc((size_t)n, sizeof(void *));
    if (!r || !order || !src)
      return -1;
    for (int j = 0; j < b->nops; j++) {
      nop *q = &b->ops[j];
      if (q->type == o->type && q->comm->cl == o->comm->cl &&
          r[q->comm->rank] == NULL)
        r[q->comm->rank] = q;
    }
    for (int k = 0; k < n; k++)
      if (r[k] == NULL || r[k]->count != o->count || r[k]->dt != o->dt ||
          r[k]->red != o->red) {
        sim_violation("nccl-collective-mismatch", op_name(o->type),
                      "rank %d "
                      "of %d did not issue the same collective in this group "
                      "(the simulator runs a clique's ranks from one thread's "
                      "group, as ncclCommInitAll users must)",
                      k, n);
        free(r), free(order), free(src);
        return -1;
      }
    if (o != r[0]) /* run once, by rank 0's entry: in place, twice is wrong */
      goto next;
    size_t es = dt_size(o->dt), cnt = o->count;
    for (int k = 0; k < n; k++) {
      size_t in = o->type == OP_AG ? cnt : o->type == OP_AR ? cnt : cnt * n;
      size_t out = o->type == OP_RS ? cnt : o->type == OP_AR ? cnt : cnt * n;
      for (int j = 0; j < n; j++) /* peers read it directly */
        check_reach(r[k]->sbuf, in * es, r[j]->comm->dev, op_name(o->type));
      check_reach(r[k]->rbuf, out * es, r[k]->comm->dev, op_name(o->type));
      src[k] = r[k]->sbuf;
    }
    size_t outb = (o->type == OP_RS || o->type == OP_AR ? cnt : cnt * n) * es;
    uint8_t **tmp = calloc((size_t)n, sizeof(*tmp));
    for (int k = 0; tmp && k < n; k++)
      tmp[k] = malloc(outb ? outb : 1);
    for (int k = 0; k < n; k++) {
      uint8_t *t = tmp ? tmp[k] : NULL;
      if (t == NULL)
        break;
      switch (o->type) {
      case OP_AG:
        for (int j = 0; j < n; j++)
          memcpy(t + j * cnt * es, src[j], cnt * es);
        break;
      case OP_A2A:
        for (int j = 0; j < n; j++)
          memcpy(t + j * cnt * es, (const uint8_t *)src[j] + k * cnt * es,
                 cnt * es);
        break;
      case OP_RS: {
        const void **sh = calloc((size_t)n, sizeof(void *));
        for (int j = 0; sh && j < n; j++)
          sh[j] = (const uint8_t *)src[j] + k * cnt * es;
        ring(n, k, order);
        for (size_t e = 0; sh && e < cnt; e++)
          reduce_elem(o->dt, o->red, sh, order, n, e, t);
        free(sh);
        break;
      }
      default: /* OP_AR */
        for (size_t e = 0; e < cnt; e++) {
          ring(n, (int)(e * (size_t)n / (cnt ? cnt : 1)), order);
          reduce_elem(o->dt, o->red, src, order, n, e, t);
        }
        break;
      }
    }
    for (int k = 0; tmp && k < n; k++) {
      if (tmp[k])
        memcpy(r[k]->rbuf, tmp[k], outb);
      free(tmp[k]);
    }
    free(tmp);
  next:
    free(r), free(order), free(src);
  }
  /* Point to point: the k-th send s->d meets the k-th receive on d from s. */
  for (int i = 0; i < b->nops; i++) {
    nop *o = &b->ops[i];
    if (o->type != OP_SEND)
      continue;
    int nth = 0;
    for (int j = 0; j < i; j++)
      nth += b->ops[j].type == OP_SEND && b->ops[j].comm == o->comm &&
             b->ops[j].peer == o->peer;
    nop *rv = NULL;
    for (int j = 0; j < b->nops && rv == NULL; j++) {
      nop *q = &b->ops[j];
      if (q->type == OP_RECV && q->comm->cl == o->comm->cl &&
          q->comm->rank == o->peer && q->peer == o->comm->rank && nth-- == 0)
        rv = q;
    }
    size_t bytes = o->count * dt_size(o->dt);
    if (rv == NULL || rv->count * dt_size(rv->dt) != bytes) {
      sim_violation("nccl-p2p-mismatch", "ncclSend",
                    "rank %d's send of %zu "
                    "bytes to rank %d has no matching ncclRecv%s",
                    o->comm->rank, bytes, o->peer,
                    rv ? " of the same size" : " in the group");
      return -1;
    }
    /* In one process NCCL's peers use each other's buffers directly. */
    check_reach(o->sbuf, bytes, rv->comm->dev, "ncclSend");
    check_reach(rv->rbuf, bytes, o->comm->dev, "ncclRecv");
    memmove(rv->rbuf, o->sbuf, bytes);
  }
  return 0;
}

static void batch_unref(batch *b) {
  if (__atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) != 0)
    return;
  clique_unref(b->cl);
  pthread_mutex_destroy(&b->mu);
  pthread_cond_destroy(&b->cv);
  free(b->ops);
  free(b);
}

static void run_part(void *a, int *status) {
  part *p = a;
  batch *b = p->b;
  in_flight f = {.cl = b->cl, .dev = p->dev};
  in_flight_enter(&f, op_name(b->ops[0].type));
  pthread_mutex_lock(&b->mu);
  if (++b->arrived == b->nparts) {
    pthread_mutex_unlock(&b->mu);
    /* After ncclCommAbort the communicators are gone: nothing moves. */
    int rc =
        *status == SIM_OK && !__atomic_load_n(&b->cl->aborted, __ATOMIC_ACQUIRE)
            ? execute(b)
            : -1;
    pthread_mutex_lock(&b->mu);
    b->failed = rc < 0;
    b->done = 1;
    pthread_cond_broadcast(&b->cv);
  }
  while (!b->done && !__atomic_load_n(&b->cl->aborted, __ATOMIC_ACQUIRE)) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) {
      ts.tv_sec++;
      ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&b->cv, &b->mu, &ts);
  }
  int failed = b->failed || !b->done;
  int aborted = !b->done;
  pthread_mutex_unlock(&b->mu);
  in_flight_leave(&f);
  if (failed) {
    *status = SIM_ELAUNCH;
    /* Aborted: the communicator may be gone, only the clique is held. */
    if (!aborted)
      __atomic_store_n(&p->comm->async_err, ncclInternalError,
                       __ATOMIC_RELEASE);
  }
  batch_unref(b);
}

static ncclResult_t flush(void) {
  int n = npending;
  nop *ops = pending;
  pending = NULL;
  npending = cap_pending = 0;
  if (n == 0)
    return ncclSuccess;
  batch *b = calloc(1, sizeof(*b));
  if (b == NULL)
    return ncclSystemError;
  b->ops = ops;
  b->nops = n;
  b->cl = ops[0].comm->cl;
  __atomic_add_fetch(&b->cl->refs, 1, __ATOMIC_ACQ_REL);
  pthread_mutex_init(&b->mu, NULL);
  pthread_cond_init(&b->cv, NULL);
  /* One part per distinct (communicator, stream). */
  part *parts = calloc((size_t)n, sizeof(*parts));
  sim_stream **ps = calloc((size_t)n, sizeof(*ps));
  if (parts == NULL || ps == NULL) {
    clique_unref(b->cl);
    free(parts), free(ps), free(ops), free(b);
    return ncclSystemError;
  }
  for (int i = 0; i < n; i++) {
    if (ops[i].comm->cl != b->cl) {
      sim_violation("nccl-group-cliques", op_name(ops[i].type),
                    "one group "
                    "mixes communicators of different ncclCommInitAll calls "
                    "(not simulated)");
      clique_unref(b->cl);
      free(parts), free(ps), free(ops), free(b);
      return ncclInvalidUsage;
    }
    int seen = 0;
    for (int k = 0; k < b->nparts && !seen; k++)
      seen = parts[k].comm == ops[i].comm && ps[k] == ops[i].s;
    if (!seen) {
      parts[b->nparts].comm = ops[i].comm;
      parts[b->nparts].dev = ops[i].comm->dev;
      parts[b->nparts].b = b;
      ps[b->nparts++] = ops[i].s;
    }
  }
  /* One reference per part, and ours until the loop below is done: a
   * part may run, and the batch go, before the last is queued. */
  b->refs = b->nparts + 1;
  for (int i = 0; i < n; i++)
    comm_release(ops[i].comm);
  ncclResult_t r = ncclSuccess;
  int queued = 0;
  for (int k = 0; k < b->nparts; k++) {
    part *p = malloc(sizeof(*p));
    if (p != NULL)
      *p = parts[k];
    if (p == NULL || sim_enqueue(ps[k], run_part, p, 1) != SIM_OK) {
      free(p);
      r = ncclSystemError;
      break;
    }
    queued++;
  }
  if (queued < b->nparts) {
    /* Parts already queued can never meet the rest: let them go. */
    __atomic_store_n(&b->cl->aborted, 1, __ATOMIC_RELEASE);
    __atomic_sub_fetch(&b->refs, b->nparts - queued, __ATOMIC_ACQ_REL);
  }
  batch_unref(b);
  free(parts);
  free(ps);
  return r;
}

static ncclResult_t add(int type, const void *s, void *r, size_t count,
                        ncclDataType_t dt, ncclRedOp_t red, int peer,
                        ncclComm_t comm, cudaStream_t stream) {
  if (comm == NULL)
    return fail(ncclInvalidArgument, "%s: NULL communicator", op_name(type));
  if (sim_sticky(SIM_OK) != SIM_OK) /* the process's CUDA context is lost */
    return fail(ncclUnhandledCudaError, "%s: cudaErrorIllegalAddress",
                op_name(type));
  if (__atomic_load_n(&comm->cl->aborted, __ATOMIC_ACQUIRE))
    return fail(ncclInvalidUsage, "%s: communicator aborted", op_name(type));
  comm_take(comm, op_name(type));
  if (npending == cap_pending) {
    int nc = cap_pending ? 2 * cap_pending : 16;
    nop *p = realloc(pending, (size_t)nc * sizeof(*p));
    if (p == NULL)
      return ncclSystemError;
    pending = p;
    cap_pending = nc;
  }
  pending[npending++] =
      (nop){type, comm,  s,
            r,    count, dt,
            red,  peer,  sim_stream_resolve((sim_stream *)stream)};
  if (group_depth > 0)
    return ncclSuccess;
  if (comm->cl->n > 1 && type != OP_SEND && type != OP_RECV) {
    sim_violation("nccl-group-required", op_name(type),
                  "a collective on one "
                  "rank of %d communicators from ncclCommInitAll outside "
                  "ncclGroupStart/End would wait forever for the others",
                  comm->cl->n);
  }
  return flush();
}

API ncclResult_t ncclGroupStart(void) {
  group_depth++;
  return ncclSuccess;
}

API ncclResult_t ncclGroupEnd(void) {
  if (group_depth == 0)
    return fail(ncclInvalidUsage, "%s", "ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0)
    return ncclSuccess;
  return flush();
}

API ncclResult_t ncclSend(const void *s, size_t count, ncclDataType_t dt,
                          int peer, ncclComm_t comm, cudaStream_t stream) {
  return add(OP_SEND, s, NULL, count, dt, ncclSum, peer, comm, stream);
}

API ncclResult_t ncclRecv(void *r, size_t count, ncclDataType_t dt, int peer,
                          ncclComm_t comm, cudaStream_t stream) {
  return add(OP_RECV, NULL, r, count, dt, ncclSum, peer, comm, stream);
}

API ncclResult_t ncclAllGather(const void *s, void *r, size_t count,
                               ncclDataType_t dt, ncclComm_t comm,
                               cudaStream_t stream) {
  return add(OP_AG, s, r, count, dt, ncclSum, 0, comm, stream);
}

API ncclResult_t ncclAlltoAll(const void *s, void *r, size_t count,
                              ncclDataType_t dt, ncclComm_t comm,
                              cudaStream_t stream) {
  return add(OP_A2A, s, r, count, dt, ncclSum, 0, comm, stream);
}

API ncclResult_t ncclReduceScatter(const void *s, void *r, size_t count,
                                   ncclDataType_t dt, ncclRedOp_t op,
                                   ncclComm_t comm, cudaStream_t stream) {
  return add(OP_RS, s, r, count, dt, op, 0, comm, stream);
}

API ncclResult_t ncclAllReduce(const void *s, void *r, size_t count,
                               ncclDataType_t dt, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t stream) {
  return add(OP_AR, s, r, count, dt, op, 0, comm, stream);
}

static void nccl_leaks(void) {
  int n = __atomic_load_n(&ncomms, __ATOMIC_RELAXED);
  if (n > 0)
    sim_leak_note("%d NCCL communicator(s) never destroyed", n);
}

__attribute__((constructor)) static void nccl_init(void) { atexit(nccl_leaks); }
