/* spc_client_set_wait_lock: one client per rank, two groups, a thread per
 * group, the threads sharing the client under a mutex of the test's. The
 * ranks issue the groups' ops in crossed orders (rank 0 starts group A,
 * rank 1 group B), which holds only because an op waiting for the other
 * rank releases the mutex; without the lock handed over, each rank's
 * first op holds the client while it waits for an op the other rank
 * cannot issue, until the op timeout. Through the shared segment and
 * through the daemon (fast path off). Bad arguments are refused. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check_run.h"
#include "fast_ranks.h"
#include "harness.h"

enum { OPS = 40, N = 16384 };

static spt_daemon daemon_;
static void *sh;

static void up(const char *const *extra) {
  sh = spt_fixture_up(&daemon_, extra, 64);
  ck_assert_ptr_nonnull(sh);
}

static void teardown(void) {
  ck_assert_int_eq(spt_fixture_down(&daemon_, sh, 64), 0);
}

static void release(void *m) {
  pthread_mutex_unlock(m);
}

static void take(void *m) {
  pthread_mutex_lock(m);
}

typedef struct {
  spc_client *c;
  spc_group *g;
  pthread_mutex_t *mu;
  int rank, which, delay_ms, bad;
  spc_buffer *b;
} thr;

/* OPS all_reduces of N floats on t->g, each under the mutex, checked. */
static void *run_group(void *arg) {
  thr *t = arg;
  struct timespec d = {0, (long)t->delay_ms * 1000000L};
  nanosleep(&d, NULL);
  float *x = spc_buffer_data(t->b);
  spc_tensor tx;
  int64_t n = N;
  for (int s = 0; s < OPS && !t->bad; s++) {
    for (int i = 0; i < N; i++)
      x[i] = (float)(t->rank + 1) * (float)(s + 1 + t->which);
    pthread_mutex_lock(t->mu);
    int rc = spc_tensor_init(&tx, t->b, 0, SPC_FLOAT32, 1, &n);
    spc_op op = spc_op_all_reduce(SPC_SUM);
    if (rc == SPC_OK)
      rc = spc_run(t->g, &op, &tx, &tx);
    if (rc < 0)
      fprintf(stderr, "rank %d group %c op %d: %s\n", t->rank, 'A' + t->which,
              s, spc_last_error(t->c));
    pthread_mutex_unlock(t->mu);
    float want = 3.0f * (float)(s + 1 + t->which);
    t->bad = rc < 0 || x[0] != want || x[N - 1] != want;
  }
  return NULL;
}

static int join(spc_client *c, const char *name, int rank, spc_group **g,
                spc_buffer **b) {
  if (spc_group_join(c, name, 2, rank, g) < 0 ||
      spc_buffer_alloc(c, N * sizeof(float), b) < 0) {
    fprintf(stderr, "rank %d: %s: %s\n", rank, name, spc_last_error(c));
    return -1;
  }
  return 0;
}

static int crossed(int rank, int world, void *arg) {
  (void)world;
  (void)arg;
  spc_client *c = spt_connect(daemon_.socket);
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  if (c == NULL || spc_set_op_timeout(c, 20000) < 0 ||
      spc_client_set_wait_lock(c, release, take, &mu) < 0)
    return 1;
  thr t[2] = {{.c = c, .mu = &mu, .rank = rank, .which = 0},
              {.c = c, .mu = &mu, .rank = rank, .which = 1}};
  if (join(c, "wl.a", rank, &t[0].g, &t[0].b) < 0 ||
      join(c, "wl.b", rank, &t[1].g, &t[1].b) < 0)
    return 1;
  t[rank].delay_ms = 0;      /* rank 0 starts A, rank 1 starts B */
  t[1 - rank].delay_ms = 50; /* the other group a moment later */
  pthread_t id[2];
  for (int i = 0; i < 2; i++)
    if (pthread_create(&id[i], NULL, run_group, &t[i]) != 0)
      return 1;
  for (int i = 0; i < 2; i++)
    pthread_join(id[i], NULL);
  spc_buffer_free(t[0].b);
  spc_buffer_free(t[1].b);
  spc_group_leave(t[0].g);
  spc_group_leave(t[1].g);
  spc_disconnect(c);
  return t[0].bad || t[1].bad;
}

START_TEST(crossed_groups_through_the_segment) {
  up(NULL);
  ck_assert_int_eq(spt_run_ranks(2, crossed, NULL, 120), 0);
}
END_TEST

START_TEST(crossed_groups_through_the_daemon) {
  static const char *const no_fast[] = {"--fast-bytes", "0", NULL};
  up(no_fast);
  ck_assert_int_eq(spt_run_ranks(2, crossed, NULL, 120), 0);
}
END_TEST

START_TEST(lock_functions_go_in_pairs) {
  up(NULL);
  spc_client *c = spt_connect(daemon_.socket);
  ck_assert_ptr_nonnull(c);
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  ck_assert_int_eq(spc_client_set_wait_lock(c, release, NULL, &mu),
                   SPC_EINVAL);
  ck_assert_ptr_nonnull(strstr(spc_last_error(c), "take NULL"));
  ck_assert_int_eq(spc_client_set_wait_lock(NULL, release, take, &mu),
                   SPC_EINVAL);
  ck_assert_int_eq(spc_client_set_wait_lock(c, release, take, &mu), SPC_OK);
  ck_assert_int_eq(spc_client_set_wait_lock(c, NULL, NULL, NULL), SPC_OK);
  spc_disconnect(c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("wait_lock");
  TCase *tc = tcase_create("wait_lock");
  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, crossed_groups_through_the_segment);
  tcase_add_test(tc, crossed_groups_through_the_daemon);
  tcase_add_test(tc, lock_functions_go_in_pairs);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
