/* Point-to-point sends and receives (issue 14): matched per (group,
 * source, destination, tag) in posting order, checked against each other,
 * and ended by the collectives' errors (a lost rank, the op timeout,
 * abort). Data is checked element by element; stats count the pairs. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check_run.h"
#include "client_internal.h"
#include "fast_ranks.h"
#include "harness.h"

static spt_daemon daemon_;

/* What the ranks of one test share (fork keeps a MAP_SHARED mapping). */
typedef struct {
  char msg[8][400];
  int rc[8];
  int flag;
  char group[64];
} shared_t;
static shared_t *sh;

static void setup(void) {
  sh = spt_fixture_up(&daemon_, NULL, sizeof(*sh));
  ck_assert_ptr_nonnull(sh);
}

static void teardown(void) {
  ck_assert_int_eq(spt_fixture_down(&daemon_, sh, sizeof(*sh)), 0);
}

static int open_rank(spt_rk *k, int rank, int w, int64_t timeout_ms) {
  return spt_rk_open(k, daemon_.socket, sh->group, rank, w, timeout_ms);
}

/* n floats of message `msg` from rank `from`. */
static float val(int from, int msg, size_t i) {
  return (float)((int)((i * 3 + (size_t)from * 17 + (size_t)msg * 29) % 64) -
                 32) / 4.0f;
}

static float *tensor(spt_rk *k, spc_tensor *t, size_t n) {
  int64_t s[1] = {(int64_t)n};
  return spt_rk_tensor(k, t, 1, s);
}

static int check(const float *y, size_t n, int from, int msg, int rank) {
  for (size_t i = 0; i < n; i++)
    if (y[i] != val(from, msg, i)) {
      fprintf(stderr, "rank %d: message %d from %d: [%zu] = %g, want %g\n",
              rank, msg, from, i, y[i], val(from, msg, i));
      return 1;
    }
  return 0;
}

/* Each rank sends to the next and receives from the previous (async,
 * as ring attention does), with a small all_reduce (the shared-memory
 * path) between steps: P2P and collectives keep their own orders. */
static int ring_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (open_rank(&k, rank, w, 0) < 0)
    return 1;
  int bad = 0;
  for (int step = 0; step < 3 && !bad; step++) {
    spc_tensor out, in;
    float *x = tensor(&k, &out, 1000), *y = tensor(&k, &in, 1000);
    for (size_t i = 0; i < 1000; i++)
      x[i] = val(rank, step, i);
    spc_request *rs, *rr;
    int src = -7;
    bad |= spc_start_recv(k.g, &in, (rank + w - 1) % w, 0, &src, &rr) < 0;
    bad |= spc_start_send(k.g, &out, (rank + 1) % w, 0, &rs) < 0;
    bad |= spc_wait(&rs) < 0 || spc_wait(&rr) < 0;
    bad |= src != (rank + w - 1) % w;
    bad |= !bad && check(y, 1000, (rank + w - 1) % w, step, rank);
    k.used = 0;
    bad |= spt_rk_reduce_once(&k, rank, w, 8, step, 0);
    k.used = 0;
  }
  if (bad)
    fprintf(stderr, "rank %d: ring: %s\n", rank, spc_last_error(k.c));
  return spt_rk_close(&k, bad);
}

START_TEST(ring_exchange) {
  for (int w = 2; w <= 4; w++) {
    snprintf(sh->group, sizeof(sh->group), "ring%d", w);
    long long before = spt_daemon_stat(&daemon_, "ops_completed");
    ck_assert_int_eq(spt_run_ranks(w, ring_rank, NULL, 120), 0);
    /* 3 steps of w pairs and of one all_reduce */
    ck_assert_int_eq(spt_daemon_stat(&daemon_, "ops_completed") - before,
                     3 * w + 3);
  }
}
END_TEST

/* Tags are independent channels: rank 0 posts tag 1 then tag 2, rank 1
 * receives tag 2 first (blocking). Within a tag, order holds: three
 * messages of tag 3 arrive in the order sent. */
static int tags_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (open_rank(&k, rank, w, 0) < 0)
    return 1;
  spc_tensor t[5];
  float *p[5];
  for (int i = 0; i < 5; i++)
    if ((p[i] = tensor(&k, &t[i], 64)) == NULL)
      return spt_rk_close(&k, 1);
  int bad = 0;
  if (rank == 0) {
    spc_request *r[5];
    for (int i = 0; i < 5; i++) {
      for (size_t j = 0; j < 64; j++)
        p[i][j] = val(0, i, j);
      bad |= spc_start_send(k.g, &t[i], 1, i < 2 ? i + 1 : 3, &r[i]) < 0;
    }
    for (int i = 0; i < 5 && !bad; i++)
      bad |= spc_wait(&r[i]) < 0;
  } else {
    bad |= spc_recv(k.g, &t[1], 0, 2, NULL) < 0 ||
           spc_recv(k.g, &t[0], 0, 1, NULL) < 0;
    for (int i = 2; i < 5 && !bad; i++)
      bad |= spc_recv(k.g, &t[i], 0, 3, NULL) < 0;
    for (int i = 0; i < 5 && !bad; i++)
      bad |= check(p[i], 64, 0, i, rank);
  }
  if (bad)
    fprintf(stderr, "rank %d: tags: %s\n", rank, spc_last_error(k.c));
  return spt_rk_close(&k, bad);
}

START_TEST(tags_and_order) {
  snprintf(sh->group, sizeof(sh->group), "tags");
  ck_assert_int_eq(spt_run_ranks(2, tags_rank, NULL, 120), 0);
}
END_TEST

/* Ranks 1 and 2 send to rank 0, which receives from any source twice and
 * learns who sent each. */
static int any_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (open_rank(&k, rank, w, 0) < 0)
    return 1;
  spc_tensor t[2];
  float *p[2] = {tensor(&k, &t[0], 100), tensor(&k, &t[1], 100)};
  int bad = p[0] == NULL || p[1] == NULL;
  if (!bad && rank > 0) {
    for (size_t j = 0; j < 100; j++)
      p[0][j] = val(rank, 5, j);
    bad = spc_send(k.g, &t[0], 0, 5) < 0;
  } else if (!bad) {
    int src[2] = {-9, -9};
    for (int i = 0; i < 2 && !bad; i++)
      bad = spc_recv(k.g, &t[i], SPC_ANY_SOURCE, 5, &src[i]) < 0 ||
            (src[i] != 1 && src[i] != 2) ||
            check(p[i], 100, src[i], 5, rank);
    bad |= src[0] == src[1];
  }
  if (bad)
    fprintf(stderr, "rank %d: any source: %s\n", rank, spc_last_error(k.c));
  k.used = 0; /* nobody leaves (breaking the group) before all are done */
  bad |= spt_rk_reduce_once(&k, rank, w, 8, 1, 0);
  return spt_rk_close(&k, bad);
}

START_TEST(any_source) {
  snprintf(sh->group, sizeof(sh->group), "any");
  ck_assert_int_eq(spt_run_ranks(3, any_rank, NULL, 120), 0);
}
END_TEST

/* A count and then a dtype disagreement fail both ranks in the same
 * words; the group goes on. */
static int mismatch_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (open_rank(&k, rank, w, 0) < 0)
    return 1;
  spc_tensor t, ti;
  int bad = tensor(&k, &t, rank == 0 ? 8 : 6) == NULL;
  int64_t s[1] = {8};
  bad |= spc_tensor_init(&ti, k.b, 1 << 20, SPC_INT32, 1, s) < 0;
  int rc = rank == 0 ? spc_send(k.g, &t, 1, 0) : spc_recv(k.g, &t, 0, 0, NULL);
  const char *e = spc_last_error(k.c);
  if (rc != SPC_EMISMATCH || !strstr(e, "from rank 0 to rank 1 (tag 0): 8 "
                                        "elements sent, 6 expected")) {
    fprintf(stderr, "rank %d: count mismatch gave %d '%s'\n", rank, rc, e);
    bad = 1;
  }
  spc_tensor *mine = rank == 0 ? &t : &ti;
  if (rank == 0) {
    k.used = 0;
    bad |= tensor(&k, &t, 8) == NULL;
  }
  rc = rank == 0 ? spc_send(k.g, mine, 1, 1) : spc_recv(k.g, mine, 0, 1, NULL);
  e = spc_last_error(k.c);
  if (rc != SPC_EMISMATCH ||
      !strstr(e, "dtype float32 sent, int32 expected by the receive")) {
    fprintf(stderr, "rank %d: dtype mismatch gave %d '%s'\n", rank, rc, e);
    bad = 1;
  }
  k.used = 0;
  bad |= spt_rk_reduce_once(&k, rank, w, 100, 1, 0); /* still usable */
  return spt_rk_close(&k, bad);
}

START_TEST(disagreement_fails_both) {
  snprintf(sh->group, sizeof(sh->group), "mismatch");
  ck_assert_int_eq(spt_run_ranks(2, mismatch_rank, NULL, 120), 0);
}
END_TEST

/* Peers and tags matching cannot use are refused at once, by the library
 * and (a raw request) by the daemon, naming the value. */
static int bad_args_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (open_rank(&k, rank, w, 0) < 0)
    return 1;
  spc_tensor t;
  int bad = tensor(&k, &t, 4) == NULL;
  bad |= spc_send(k.g, &t, rank, 0) != SPC_EINVAL ||
         !strstr(spc_last_error(k.c), "peer");
  bad |= spc_send(k.g, &t, w, 0) != SPC_EINVAL;
  bad |= spc_send(k.g, &t, SPC_ANY_SOURCE, 0) != SPC_EINVAL;
  bad |= spc_recv(k.g, &t, 1 - rank, -1, NULL) != SPC_EINVAL ||
         !strstr(spc_last_error(k.c), "tag -1 is negative");
  /* the daemon's own check, past the library's */
  Spcoll__Tensor tm = SPCOLL__TENSOR__INIT;
  int64_t shape[1] = {4};
  tm.buffer_id = t.buf->id, tm.dtype = SPC_FLOAT32, tm.n_shape = 1;
  tm.shape = shape;
  Spcoll__P2p rq = SPCOLL__P2P__INIT;
  rq.group_id = k.g->id, rq.send = 1, rq.peer = 7, rq.tensor = &tm;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  f.body_case = SPCOLL__FRAME__BODY_P2P;
  f.p2p = &rq;
  Spcoll__Frame *reply = NULL;
  int rc = spc__call(k.c, &f, -1, &reply);
  if (reply != NULL)
    spcoll__frame__free_unpacked(reply, NULL);
  bad |= rc != SPC_EINVAL ||
         !strstr(spc_last_error(k.c), "peer 7 is not another rank");
  if (bad)
    fprintf(stderr, "rank %d: bad args: %s\n", rank, spc_last_error(k.c));
  k.used = 0;
  bad |= spt_rk_reduce_once(&k, rank, w, 8, 1, 0);
  return spt_rk_close(&k, bad);
}

START_TEST(bad_arguments_refused) {
  snprintf(sh->group, sizeof(sh->group), "badargs");
  ck_assert_int_eq(spt_run_ranks(2, bad_args_rank, NULL, 120), 0);
}
END_TEST

/* mode 0: rank 1 is killed while rank 0 waits to receive from it;
 * 1: rank 1 never sends (op timeout of 300 ms); 2: an operator aborts
 * the group while rank 0 waits. Rank 0 fails with the collectives'
 * error in each case, in bounded time (the daemon's, not a limit here). */
static const int want_rc[3] = {SPC_EPEERLOST, SPC_ETIMEDOUT, SPC_EABORTED};
static const char *const want_msg[3] = {
    "was lost", "rank 1 never posted the matching send",
    "aborted by operator"};

static int ctl_abort(void) {
  char args[128];
  snprintf(args, sizeof(args), "abort %s", sh->group);
  return spt_ctl(&daemon_, args);
}

static int fault_rank(int rank, int w, void *arg) {
  int mode = *(const int *)arg;
  spt_rk k;
  if (open_rank(&k, rank, w, mode == 1 ? 300 : 0) < 0)
    return 1;
  if (spt_rk_reduce_once(&k, rank, w, 8, 0, 0))
    return spt_rk_close(&k, 1);
  k.used = 0;
  spc_tensor t;
  if (tensor(&k, &t, 16) == NULL)
    return spt_rk_close(&k, 1);
  if (rank == 1) {
    if (mode == 0) {
      usleep(100000); /* let rank 0 post its receive first */
      raise(SIGKILL);
    }
    if (mode == 2) {
      usleep(100000);
      if (ctl_abort() != 0)
        return spt_rk_close(&k, 1);
    }
    while (!__atomic_load_n(&sh->flag, __ATOMIC_ACQUIRE))
      usleep(1000);
    return spt_rk_close(&k, 0);
  }
  int rc = spc_recv(k.g, &t, 1, 9, NULL);
  const char *e = spc_last_error(k.c);
  int bad = rc != want_rc[mode] || !strstr(e, want_msg[mode]);
  if (bad)
    fprintf(stderr, "mode %d: rank 0 got %d '%s'\n", mode, rc, e);
  __atomic_store_n(&sh->flag, 1, __ATOMIC_RELEASE);
  return spt_rk_close(&k, bad);
}

START_TEST(lost_timeout_abort) {
  for (int mode = 0; mode < 3; mode++) {
    snprintf(sh->group, sizeof(sh->group), "fault%d", mode);
    sh->flag = 0;
    int failed = spt_run_ranks(2, fault_rank, &mode, 120);
    ck_assert_int_eq(failed, mode == 0 ? 1 : 0); /* the killed rank */
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("p2p");
  TCase *tc = tcase_create("p2p");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, ring_exchange);
  tcase_add_test(tc, tags_and_order);
  tcase_add_test(tc, any_source);
  tcase_add_test(tc, disagreement_fails_both);
  tcase_add_test(tc, bad_arguments_refused);
  tcase_add_test(tc, lost_timeout_abort);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
