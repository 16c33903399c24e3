/* The ceiling of a one-copy collective: memcpy bandwidth on this machine,
 * measured in the same run as the ops it is compared with. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "spcoll_bench.h"

enum { MAX_THREADS = 64 };

typedef struct {
  pthread_barrier_t start, end;
  uint8_t *dst;
  const uint8_t *src;
  size_t bytes;
  int threads;
  int quit;
} copy_pool;

typedef struct {
  copy_pool *pool;
  int index;
} copy_arg;

static void copy_part(const copy_pool *p, int i) {
  size_t per = p->bytes / (size_t)p->threads / 64 * 64;
  size_t off = per * (size_t)i;
  size_t n = i == p->threads - 1 ? p->bytes - off : per;
  memcpy(p->dst + off, p->src + off, n);
}

static void *copy_worker(void *arg) {
  copy_arg *a = arg;
  for (;;) {
    pthread_barrier_wait(&a->pool->start);
    if (a->pool->quit)
      return NULL;
    copy_part(a->pool, a->index);
    pthread_barrier_wait(&a->pool->end);
  }
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

#define MEMCPY_ROUNDS 200
double memcpy_gbs(size_t bytes, int threads) {
  if (threads < 1 || threads > MAX_THREADS)
    threads = threads < 1 ? 1 : MAX_THREADS;
  uint8_t *src = malloc(bytes), *dst = malloc(bytes);
  if (src == NULL || dst == NULL) {
    fprintf(stderr, "spcoll-bench: malloc of 2 x %zu bytes for memcpy "
            "failed\n", bytes);
    free(src);
    free(dst);
    return 0;
  }
  /* Touch every page first: the ops are timed on warm buffers too. */
  memset(src, 1, bytes);
  memset(dst, 2, bytes);
  copy_pool p = {.dst = dst, .src = src, .bytes = bytes, .threads = threads};
  pthread_t th[MAX_THREADS];
  copy_arg args[MAX_THREADS];
  if (threads > 1) {
    pthread_barrier_init(&p.start, NULL, (unsigned)threads);
    pthread_barrier_init(&p.end, NULL, (unsigned)threads);
    for (int i = 1; i < threads; i++) {
      args[i] = (copy_arg){&p, i};
      int rc = pthread_create(&th[i], NULL, copy_worker, &args[i]);
      if (rc != 0) {
        /* The started ones wait at a barrier that cannot fill: a
         * benchmark that cannot start its threads has nothing to say. */
        fprintf(stderr, "spcoll-bench: pthread_create of memcpy thread %d: "
                "%s\n", i, strerror(rc));
        exit(1);
      }
    }
  }
  /* A median: bench_iters' extra rounds for small ops are not needed. */
  int rounds = bench_iters(bytes, MEMCPY_ROUNDS);
  rounds = rounds < 5 ? 5 : rounds > MEMCPY_ROUNDS ? MEMCPY_ROUNDS : rounds;
  double t[MEMCPY_ROUNDS];
  for (int r = 0; r < rounds; r++) {
    double t0 = bench_now_s();
    if (threads > 1)
      pthread_barrier_wait(&p.start);
    copy_part(&p, 0);
    if (threads > 1)
      pthread_barrier_wait(&p.end);
    t[r] = bench_now_s() - t0;
  }
  if (threads > 1) {
    p.quit = 1;
    pthread_barrier_wait(&p.start); /* the workers see quit and return */
    for (int i = 1; i < threads; i++)
      pthread_join(th[i], NULL);
    pthread_barrier_destroy(&p.start);
    pthread_barrier_destroy(&p.end);
  }
  free(src);
  free(dst);
  qsort(t, (size_t)rounds, sizeof(double), cmp_d);
  return (double)bytes / t[rounds / 2] / 1e9;
}
