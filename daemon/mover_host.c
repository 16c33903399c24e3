#include "mover_host.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

/* Big moves are cut so several threads share them; small ones are batched
 * so a plan of many tiny blocks does not pay a lock round per block. */
#define TASK_BYTES (1u << 20)

typedef struct {
  uint32_t m0, m1;   /* moves [m0, m1) whole, or units [u0, u1) of m0 */
  uint64_t u0, u1;
} mover_task;

typedef struct mover_job {
  TAILQ_ENTRY(mover_job) link;
  const spk_plan *plan;
  uint8_t *const *bases;
  mover_task *tasks;
  size_t ntasks, next, done;
  spd_mover_done_cb cb;
  void *arg;
} mover_job;

TAILQ_HEAD(job_list, mover_job);

struct spd_mover {
  uv_async_t async;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  struct job_list todo, finished;
  pthread_t *threads;
  int nthreads;
  int stop;
};

static uint64_t move_bytes(const spk_move *m) {
  uint64_t bytes = 1;
  for (int d = 0; d < m->nd; d++)
    bytes *= m->len[d];
  return bytes;
}

/* Cut a plan into tasks. A task with u1 == 0 covers whole moves [m0, m1);
 * otherwise it covers units [u0, u1) of move m0. */
static int tasks_build(mover_job *job, spk_err *err) {
  const spk_plan *p = job->plan;
  /* Cutting by whole units can at most double the count of full tasks. */
  size_t cap = p->nmoves + 2 * (p->bytes / TASK_BYTES) + 1, n = 0;
  job->tasks = malloc(cap * sizeof(*job->tasks));
  if (job->tasks == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "malloc of %zu mover tasks failed",
                       cap);
  uint64_t batch = TASK_BYTES;   /* bytes in the open batch task */
  for (size_t i = 0; i < p->nmoves; i++) {
    const spk_move *m = &p->moves[i];
    uint64_t bytes = move_bytes(m), units = spk_move_units(m);
    if (bytes < TASK_BYTES) {
      if (batch + bytes <= TASK_BYTES) {
        job->tasks[n - 1].m1 = (uint32_t)i + 1;
        batch += bytes;
      } else {
        job->tasks[n++] = (mover_task){(uint32_t)i, (uint32_t)i + 1, 0, 0};
        batch = bytes;
      }
      continue;
    }
    uint64_t step = TASK_BYTES / (bytes / units);
    step = step ? step : 1;
    for (uint64_t u = 0; u < units; u += step)
      job->tasks[n++] = (mover_task){(uint32_t)i, (uint32_t)i + 1, u,
                                     u + step < units ? u + step : units};
    batch = TASK_BYTES;
  }
  job->ntasks = n;
  return SPK_OK;
}

static void task_run(const mover_job *job, const mover_task *t) {
  for (uint32_t i = t->m0; i < t->m1; i++) {
    const spk_move *m = &job->plan->moves[i];
    const uint8_t *src = job->bases[m->src_rank * SPK_T_COUNT + m->src_t];
    uint8_t *dst = job->bases[m->dst_rank * SPK_T_COUNT + m->dst_t];
    if (t->u1 == 0)
      spk_move_run(m, src, dst, 0, spk_move_units(m));
    else
      spk_move_run(m, src, dst, t->u0, t->u1);
  }
}

static mover_job *job_claimable(spd_mover *mv) {
  mover_job *job;
  TAILQ_FOREACH(job, &mv->todo, link)
    if (job->next < job->ntasks)
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
    pthread_mutex_unlock(&mv->lock);
    task_run(job, t);
    pthread_mutex_lock(&mv->lock);
    if (++job->done == job->ntasks)
      job_finish(mv, job);
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
    free(job->tasks);
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
  int rc = tasks_build(job, err);
  if (rc < 0) {
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

static void mover_free(spd_mover *mv) {
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
  pthread_mutex_init(&mv->lock, NULL);
  pthread_cond_init(&mv->wake, NULL);
  mv->threads = calloc((size_t)threads, sizeof(pthread_t));
  int rc = mv->threads ? uv_async_init(loop, &mv->async, on_async) : UV_ENOMEM;
  if (rc < 0) {
    mover_free(mv);
    return spk_err_set(err, SPK_ESYSTEM, "mover setup failed: %s",
                       uv_strerror(rc));
  }
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

static void on_async_closed(uv_handle_t *h) {
  mover_free(h->data);
}

void spd_mover_stop(spd_mover *mv) {
  pthread_mutex_lock(&mv->lock);
  mv->stop = 1;
  pthread_cond_broadcast(&mv->wake);
  pthread_mutex_unlock(&mv->lock);
  for (int i = 0; i < mv->nthreads; i++)
    pthread_join(mv->threads[i], NULL);
  uv_close((uv_handle_t *)&mv->async, on_async_closed);
}
