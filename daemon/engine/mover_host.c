#include "mover_host.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

/* Big moves are cut so several threads share them; small ones are batched
 * so a plan of many tiny blocks does not pay a lock round per block. */
#define TASK_BYTES (1u << 20)
/* A plan that touches at most this many bytes runs on the loop thread at
 * submit: handing it to a worker and back costs two cross-thread wake-ups
 * (futex, then the async eventfd), about 15 us on a 2-vCPU VM, while the
 * copy itself takes a few us at most. The loop stalls no longer than one
 * such wake-up would take, so other clients do not notice. */
#define INLINE_BYTES (64u << 10)

/* Moves that read the same source rows (an all-to-all of [b, s/P, h, d]
 * reads 2 KiB of every 16 KiB row of a source for each of 8 destinations)
 * run row by row together: each source row is read once, in order,
 * instead of once per destination with the rest of it skipped. 1.4x on
 * the development VM for 2 KiB runs (15.5 -> 22 GB/s with 2 threads).
 * Slices of about this many bytes per move alternate between them. */
#define SLICE_BYTES 4096u
/* Past this many moves the plan's order is kept: sorting them would cost
 * the loop thread more than the grouping saves. */
#define GROUP_MAX_MOVES 65536u

typedef struct {
  uint32_t m0, m1;   /* steps [m0, m1) whole, or units [u0, u1) of each */
  uint64_t u0, u1;
  int reduce;        /* steps are the plan's reduces, else its moves */
} mover_task;

typedef struct mover_job {
  TAILQ_ENTRY(mover_job) link;
  const spk_plan *plan;
  uint8_t *const *bases;
  uint32_t *order;   /* move steps are plan->moves[order[i]]; NULL: i */
  mover_task *tasks;
  size_t ntasks, next, done;
  size_t nphase0;    /* reduce tasks: all done before any move starts */
  spd_mover_done_cb cb;
  void *arg;
} mover_job;

TAILQ_HEAD(job_list, mover_job);

struct spd_mover {
  uv_async_t async;
  uv_idle_t idle;    /* runs the callbacks of plans done inline */
  pthread_mutex_t lock;
  pthread_cond_t wake;
  struct job_list todo, finished;
  struct job_list inline_done; /* loop thread only: no lock */
  pthread_t *threads;
  int nthreads;
  int stop;
  int handles;       /* loop handles still open; freed at 0 */
};

static uint64_t move_bytes(const spk_move *m) {
  uint64_t bytes = 1;
  for (int d = 0; d < m->nd; d++)
    bytes *= m->len[d];
  return bytes;
}

typedef struct {
  mover_task *tasks;
  size_t n;
  uint64_t batch;    /* weight in the open batch task */
} task_list;

/* Cut steps [i0, i1) of one geometry m (a move or a group of moves with
 * the same rows, or a reduce step weighted by how many inputs it reads)
 * into tasks. A task with u1 == 0 covers whole steps [m0, m1); otherwise
 * units [u0, u1) of each of the steps [m0, m1). */
static void tasks_add(task_list *tl, uint32_t i0, uint32_t i1,
                      const spk_move *m, uint64_t weight, int reduce) {
  uint64_t bytes = move_bytes(m) * weight * (i1 - i0);
  uint64_t units = spk_move_units(m);
  if (bytes < TASK_BYTES) {
    mover_task *last = tl->n ? &tl->tasks[tl->n - 1] : NULL;
    if (last && last->reduce == reduce && last->u1 == 0 &&
        last->m1 == i0 && tl->batch + bytes <= TASK_BYTES) {
      last->m1 = i1;
      tl->batch += bytes;
    } else {
      tl->tasks[tl->n++] = (mover_task){i0, i1, 0, 0, reduce};
      tl->batch = bytes;
    }
    return;
  }
  /* Unit counts of one-dim steps are bytes: cut at multiples of 64 so no
   * element is split between tasks. */
  uint64_t per = bytes / units, step = TASK_BYTES / (per ? per : 1);
  if (m->nd == 1)
    step = (step + 63) / 64 * 64;
  step = step ? step : 1;
  for (uint64_t u = 0; u < units; u += step)
    tl->tasks[tl->n++] = (mover_task){i0, i1, u,
                                      u + step < units ? u + step : units,
                                      reduce};
  tl->batch = TASK_BYTES;
}

/* Same rows: source tensor, shape and strides, so rows u of each can be
 * copied together. */
static int move_geo_cmp(const spk_move *x, const spk_move *y) {
  if (x->src_rank != y->src_rank)
    return x->src_rank < y->src_rank ? -1 : 1;
  if (x->src_t != y->src_t)
    return x->src_t < y->src_t ? -1 : 1;
  if (x->nd != y->nd)
    return x->nd < y->nd ? -1 : 1;
  for (int d = 0; d < x->nd; d++) {
    if (x->len[d] != y->len[d])
      return x->len[d] < y->len[d] ? -1 : 1;
    if (x->src_stride[d] != y->src_stride[d])
      return x->src_stride[d] < y->src_stride[d] ? -1 : 1;
  }
  return 0;
}

static int move_order_cmp(const void *a, const void *b, void *arg) {
  const spk_move *moves = arg;
  uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
  int c = move_geo_cmp(&moves[i], &moves[j]);
  if (c == 0 && moves[i].src_off != moves[j].src_off)
    c = moves[i].src_off < moves[j].src_off ? -1 : 1;
  return c ? c : (i > j) - (i < j);
}

/* Length of the group starting at order[i]: the following moves with its
 * geometry whose source starts within its first row. 1 for contiguous
 * (one-dim) moves, which gain nothing from it. */
static uint32_t group_len(const spk_plan *p, const uint32_t *order,
                          uint32_t i, uint32_t n) {
  if (order == NULL)
    return 1;
  const spk_move *first = &p->moves[order[i]];
  uint32_t k = 1;
  if (first->nd < 2)
    return 1;
  while (i + k < n) {
    const spk_move *m = &p->moves[order[i + k]];
    if (move_geo_cmp(first, m) != 0 ||
        m->src_off - first->src_off >= first->src_stride[0])
      break;
    k++;
  }
  return k;
}

/* Bytes the reduce steps read: they cost as many as they read. */
static uint64_t reduce_weight(const spk_plan *p) {
  uint64_t weight = 0;
  for (size_t i = 0; i < p->nreduces; i++)
    weight += move_bytes(&p->reduces[i].geo) * p->reduces[i].nsrc;
  return weight;
}

static int tasks_build(mover_job *job, spk_err *err) {
  const spk_plan *p = job->plan;
  uint64_t weight = reduce_weight(p);
  /* Cutting by whole units can at most double the count of full tasks. */
  size_t cap = p->nmoves + p->nreduces + 2 * ((p->bytes + weight) / TASK_BYTES)
               + 2;
  task_list tl = {malloc(cap * sizeof(mover_task)), 0, TASK_BYTES};
  if (tl.tasks == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "malloc of %zu mover tasks failed",
                       cap);
  /* Without memory for the order the plan's own order still works. */
  if (p->nmoves > 1 && p->nmoves <= GROUP_MAX_MOVES &&
      (job->order = malloc(p->nmoves * sizeof(uint32_t))) != NULL) {
    for (uint32_t i = 0; i < p->nmoves; i++)
      job->order[i] = i;
    qsort_r(job->order, p->nmoves, sizeof(uint32_t), move_order_cmp,
            (void *)p->moves);
  }
  for (size_t i = 0; i < p->nreduces; i++)
    tasks_add(&tl, (uint32_t)i, (uint32_t)i + 1, &p->reduces[i].geo,
              p->reduces[i].nsrc, 1);
  job->nphase0 = tl.n;
  tl.batch = TASK_BYTES;
  uint32_t n = (uint32_t)p->nmoves;
  for (uint32_t i = 0, k; i < n; i += k) {
    k = group_len(p, job->order, i, n);
    const spk_move *m = &p->moves[job->order ? job->order[i] : i];
    tasks_add(&tl, i, i + k, m, 1, 0);
  }
  job->tasks = tl.tasks;
  job->ntasks = tl.n;
  return SPK_OK;
}

static const spk_move *job_move(const mover_job *job, uint32_t i) {
  return &job->plan->moves[job->order ? job->order[i] : i];
}

static void task_run(const mover_job *job, const mover_task *t) {
  const spk_plan *p = job->plan;
  if (t->reduce) {
    for (uint32_t i = t->m0; i < t->m1; i++) {
      const spk_reduce *r = &p->reduces[i];
      uint64_t u1 = t->u1 ? t->u1 : spk_move_units(&r->geo);
      spk_reduce_exec(p, r, job->bases, t->u1 ? t->u0 : 0, u1);
    }
    return;
  }
  if (t->u1 == 0 || t->m1 - t->m0 == 1) {
    for (uint32_t i = t->m0; i < t->m1; i++) {
      const spk_move *m = job_move(job, i);
      uint64_t u1 = t->u1 ? t->u1 : spk_move_units(m);
      spk_move_exec(p, m, job->bases, t->u1 ? t->u0 : 0, u1);
    }
    return;
  }
  /* A group: a slice of rows of each move in turn, so the source rows
   * they share are read once while they are in cache. */
  const spk_move *first = job_move(job, t->m0);
  uint64_t unit = move_bytes(first) / spk_move_units(first);
  uint64_t slice = unit < SLICE_BYTES ? SLICE_BYTES / unit : 1;
  for (uint64_t u = t->u0; u < t->u1; u += slice) {
    uint64_t end = u + slice < t->u1 ? u + slice : t->u1;
    for (uint32_t i = t->m0; i < t->m1; i++)
      spk_move_exec(p, job_move(job, i), job->bases, u, end);
  }
}

/* A job's moves may read what its reduce steps write: no move task is
 * handed out before every reduce task is done. */
static mover_job *job_claimable(spd_mover *mv) {
  mover_job *job;
  TAILQ_FOREACH(job, &mv->todo, link)
    if (job->next < job->ntasks &&
        (job->next < job->nphase0 || job->done >= job->nphase0))
      return job;
  return NULL;
}

/* Called with the lock held: the job leaves the queue for the loop. */
static void job_finish(spd_mover *mv, mover_job *job) {
  TAILQ_REMOVE(&mv->todo, job, link);
  TAILQ_INSERT_TAIL(&mv->finished, job, link);
  uv_async_send(&mv->async);
}

static void *worker_main(void *arg) {
  spd_mover *mv = arg;
  pthread_mutex_lock(&mv->lock);
  while (!mv->stop) {
    mover_job *job = job_claimable(mv);
    if (job == NULL) {
      pthread_cond_wait(&mv->wake, &mv->lock);
      continue;
    }
    mover_task *t = &job->tasks[job->next++];
    /* Round-robin over jobs, so a small op of one group is not stuck
     * behind every task of another group's large one. */
    TAILQ_REMOVE(&mv->todo, job, link);
    TAILQ_INSERT_TAIL(&mv->todo, job, link);
    pthread_mutex_unlock(&mv->lock);
    task_run(job, t);
    pthread_mutex_lock(&mv->lock);
    if (++job->done == job->ntasks)
      job_finish(mv, job);
    else if (job->done == job->nphase0)
      pthread_cond_broadcast(&mv->wake); /* the move phase can start */
  }
  pthread_mutex_unlock(&mv->lock);
  return NULL;
}

static void on_async(uv_async_t *async) {
  spd_mover *mv = async->data;
  struct job_list done = TAILQ_HEAD_INITIALIZER(done);
  pthread_mutex_lock(&mv->lock);
  TAILQ_CONCAT(&done, &mv->finished, link);
  pthread_mutex_unlock(&mv->lock);
  mover_job *next;
  for (mover_job *job = TAILQ_FIRST(&done); job != NULL; job = next) {
    next = TAILQ_NEXT(job, link);
    spd_mover_done_cb cb = job->cb;
    void *cb_arg = job->arg;
    free(job->order);
    free(job->tasks);
    free(job);
    cb(cb_arg);
  }
}

/* Callbacks of plans run inline, one loop iteration after submit: the
 * caller may still be setting up after spd_mover_submit returns, so cb
 * must not run inside it. An active idle handle makes that iteration
 * poll without blocking, so no wake-up is paid. */
static void on_idle(uv_idle_t *idle) {
  spd_mover *mv = idle->data;
  struct job_list done = TAILQ_HEAD_INITIALIZER(done);
  TAILQ_CONCAT(&done, &mv->inline_done, link);
  uv_idle_stop(idle);
  mover_job *next;
  for (mover_job *job = TAILQ_FIRST(&done); job != NULL; job = next) {
    next = TAILQ_NEXT(job, link);
    spd_mover_done_cb cb = job->cb;
    void *cb_arg = job->arg;
    free(job);
    cb(cb_arg);
  }
}

int spd_mover_submit(spd_mover *mv, const spk_plan *plan,
                     uint8_t *const *bases, spd_mover_done_cb cb, void *arg,
                     spk_err *err) {
  mover_job *job = calloc(1, sizeof(*job));
  if (job == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of a mover job failed");
  job->plan = plan, job->bases = bases, job->cb = cb, job->arg = arg;
  if (plan->bytes + reduce_weight(plan) <= INLINE_BYTES) {
    spk_plan_exec(plan, bases);
    TAILQ_INSERT_TAIL(&mv->inline_done, job, link);
    int rc = uv_idle_start(&mv->idle, on_idle);
    if (rc < 0) { /* cannot fail for a live handle; said if it ever does */
      TAILQ_REMOVE(&mv->inline_done, job, link);
      free(job);
      return spk_err_set(err, SPK_ESYSTEM, "uv_idle_start failed: %s",
                         uv_strerror(rc));
    }
    return SPK_OK;
  }
  int rc = tasks_build(job, err);
  if (rc < 0) {
    free(job->order);
    free(job);
    return rc;
  }
  pthread_mutex_lock(&mv->lock);
  TAILQ_INSERT_TAIL(&mv->todo, job, link);
  if (job->ntasks == 0)
    job_finish(mv, job);
  else
    pthread_cond_broadcast(&mv->wake);
  pthread_mutex_unlock(&mv->lock);
  return SPK_OK;
}

/* Jobs whose callbacks never ran (the daemon stops only once every op
 * completed, so this is the exit path of a failed start). */
static void jobs_free(struct job_list *list) {
  mover_job *job;
  while ((job = TAILQ_FIRST(list)) != NULL) {
    TAILQ_REMOVE(list, job, link);
    free(job->order);
    free(job->tasks);
    free(job);
  }
}

static void mover_free(spd_mover *mv) {
  jobs_free(&mv->finished);
  jobs_free(&mv->inline_done);
  pthread_cond_destroy(&mv->wake);
  pthread_mutex_destroy(&mv->lock);
  free(mv->threads);
  free(mv);
}

int spd_mover_start(uv_loop_t *loop, int threads, spd_mover **mover_p,
                    spk_err *err) {
  spd_mover *mv = calloc(1, sizeof(*mv));
  if (mv == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "calloc of the mover failed");
  TAILQ_INIT(&mv->todo);
  TAILQ_INIT(&mv->finished);
  TAILQ_INIT(&mv->inline_done);
  pthread_mutex_init(&mv->lock, NULL);
  pthread_cond_init(&mv->wake, NULL);
  mv->threads = calloc((size_t)threads, sizeof(pthread_t));
  int rc = mv->threads ? uv_idle_init(loop, &mv->idle) : UV_ENOMEM;
  if (rc == 0) {
    mv->handles = 1;
    mv->idle.data = mv;
    rc = uv_async_init(loop, &mv->async, on_async);
  }
  if (rc < 0) {
    spk_err_set(err, SPK_ESYSTEM, "mover setup failed: %s", uv_strerror(rc));
    if (mv->handles == 0)
      mover_free(mv);
    else /* the idle handle is open: its close callback frees */
      spd_mover_stop(mv);
    return SPK_ESYSTEM;
  }
  mv->handles = 2;
  mv->async.data = mv;
  for (; mv->nthreads < threads; mv->nthreads++) {
    rc = pthread_create(&mv->threads[mv->nthreads], NULL, worker_main, mv);
    if (rc != 0) {
      spk_err_set(err, SPK_ESYSTEM, "pthread_create of mover thread %d: %s",
                  mv->nthreads, strerror(rc));
      spd_mover_stop(mv);
      return SPK_ESYSTEM;
    }
  }
  *mover_p = mv;
  return SPK_OK;
}

static void on_handle_closed(uv_handle_t *h) {
  spd_mover *mv = h->data;
  if (--mv->handles == 0)
    mover_free(mv);
}

void spd_mover_stop(spd_mover *mv) {
  pthread_mutex_lock(&mv->lock);
  mv->stop = 1;
  pthread_cond_broadcast(&mv->wake);
  pthread_mutex_unlock(&mv->lock);
  for (int i = 0; i < mv->nthreads; i++)
    pthread_join(mv->threads[i], NULL);
  if (mv->handles == 2) /* both were opened; closes complete later */
    uv_close((uv_handle_t *)&mv->async, on_handle_closed);
  uv_close((uv_handle_t *)&mv->idle, on_handle_closed);
}
