/* A daemon restart under running ranks (issue 36, client_restart.c): four
 * ranks loop over verified ops of every kind, small ones through the
 * group's shared segment and larger ones through the daemon, while the
 * daemon is SIGKILLed and a new one started on the same socket. The
 * ranks' code does nothing special: every op either is right or fails
 * with SPC_ERESTARTED, the new daemon runs ops of theirs, and every op of
 * the last rounds, after the restart, is right on every rank.
 * A client that asked never to reconnect fails with SPC_ECONNECTION, and
 * so does every later call. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "fast_ranks.h"
#include "harness.h"
#include "restart_ops.h"

#define W SPT_RO_W
#define ROUNDS 120
#define KILL_AT 30     /* the daemon dies once rank 0 reached this round */
#define LAST_OK 20     /* rounds at the end that must all be right */
#define SMALL 16       /* floats per row: the shared segment */
#define LARGE SPT_RO_LARGE /* floats per row: over fast_bytes */

/* fast_bytes below LARGE's ops, and no reading in place: LARGE ops take
 * the daemon's path. */
static const char *const flags[] = {"--fast-bytes", "65536",
                                    "--fast-map-bytes", "0", NULL};

typedef struct {
  spt_ro_tally t[W];
} shared_t;

static spt_daemon daemon_, again;
static char stats_sock[200];
static shared_t *sh;

static void setup(void) {
  sh = spt_fixture_up(&daemon_, flags, sizeof(*sh));
  ck_assert_ptr_nonnull(sh);
  snprintf(stats_sock, sizeof(stats_sock), "%s/spcolld.stats.sock",
           daemon_.dir);
  memset(&again, 0, sizeof(again));
}

/* The first daemon, killed, left its folder: the second one's stats
 * socket and the first one's log. */
static void teardown(void) {
  int killed = daemon_.pid == 0;
  if (again.pid > 0)
    ck_assert_int_eq(spt_daemon_stop(&again), 0);
  int rc = spt_fixture_down(&daemon_, sh, sizeof(*sh));
  if (!killed)
    ck_assert_int_eq(rc, 0);
  unlink(stats_sock);
  unlink(daemon_.log);
  rmdir(daemon_.dir);
}

static int loop_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_ro r = {.rank = rank};
  if (spt_rk_open(&r.k, daemon_.socket, "restart", rank, w, 0) < 0)
    return 1;
  spt_ro_loop(&r, ROUNDS, SMALL, LARGE, &sh->t[rank]);
  return spt_rk_close(&r.k, 0);
}

/* A daemon's arguments: the first one's sockets and settings. */
#define AGAIN_ARGS                                                           \
  {"--socket", daemon_.socket, "--stats-socket", stats_sock, "--fast-bytes", \
   "65536", "--fast-map-bytes", "0", NULL}

/* Start a daemon on the first one's sockets, as an operator restarting
 * the service would. */
static int restart_daemon(void) {
  const char *argv[] = AGAIN_ARGS;
  return spt_daemon_start(&again, argv);
}

/* The daemon replaced under the ranks: SIGKILLed and started again, or
 * upgraded (the old one then exits 0 by itself). */
static void ranks_survive(int upgrade) {
  pid_t pids[W];
  for (int r = 0; r < W; r++) {
    pids[r] = fork();
    ck_assert_int_ge(pids[r], 0);
    if (pids[r] == 0)
      _exit(loop_rank(r, W, NULL));
  }
  while (sh->t[0].round < KILL_AT)
    usleep(1000);
  const char *argv[] = AGAIN_ARGS;
  char why[200];
  ck_assert_msg(spt_ro_replace(&daemon_, &again, argv, upgrade, why,
                               sizeof(why)) == 0, "%s", why);
  int codes[W];
  ck_assert_int_eq(spt_reap(pids, codes, W, 240), 0);
  int seen;
  for (int r = 0; r < W; r++)
    ck_assert_msg(codes[r] == 0, "rank %d exited %d", r, codes[r]);
  ck_assert_msg(!spt_ro_tally_bad(sh->t, W, ROUNDS, LAST_OK, &seen, why,
                                  sizeof(why)), "%s", why);
  /* A crash fails what was in flight (an op whose send found the daemon
   * gone goes again, to the new one: a crash between ops fails none); an
   * upgrade lets it finish and sends what it refused again: no op fails.
   * Either way the new daemon ran the ranks' large ops. */
  if (upgrade)
    ck_assert_msg(seen == 0, "%d ops failed across an upgrade", seen);
  spt_daemon view = {0};
  snprintf(view.dir, sizeof(view.dir), "%s", daemon_.dir);
  ck_assert_msg(spt_daemon_stat(&view, "mover_host_ops") > 0, "the new "
                "daemon ran no op: the ranks never moved to it");
}

START_TEST(ranks_survive_sigkill) {
  ranks_survive(0);
}
END_TEST

START_TEST(ranks_survive_upgrade) {
  ranks_survive(1);
}
END_TEST

/* Ranks that had issued different numbers of ops when the daemon went:
 * rank 0 two, in flight; rank 1 none. On rejoin rank 1 fails those two
 * without issuing them (GroupJoined.skip), so the third op is the third
 * op on both ranks, and right. */
typedef struct {
  volatile int started;       /* rank 0's two ops are in flight */
  volatile int restarted;     /* the parent started a new daemon */
  volatile int rc[2][3];      /* each rank's ops */
  volatile int wrong[2];
} align_t;

static int align_rank(int rank, int w, void *arg) {
  align_t *a = arg;
  spt_ro r = {.rank = rank};
  if (spt_rk_open(&r.k, daemon_.socket, "align", rank, w, 0) < 0)
    return 1;
  spc_tensor in[3], out[3];
  int64_t s[1] = {LARGE};
  spc_op op = spc_op_all_reduce(SPC_SUM);
  spc_request *req[2];
  for (int i = 0; i < 3; i++) {
    float *x = spt_rk_tensor(&r.k, &in[i], 1, s);
    if (x == NULL || spt_rk_tensor(&r.k, &out[i], 1, s) == NULL)
      return 1;
    for (int64_t j = 0; j < LARGE; j++)
      x[j] = spt_rk_val(rank, (size_t)j, i);
  }
  if (rank == 0) {
    for (int i = 0; i < 2; i++)
      if (spc_start(r.k.g, &op, &in[i], &out[i], &req[i]) < 0)
        return 1;
    a->started = 1;
    for (int i = 0; i < 2; i++)
      a->rc[0][i] = spc_wait(&req[i]);
  } else {
    while (!a->restarted)
      usleep(1000);
    for (int i = 0; i < 2; i++)
      a->rc[1][i] = spc_all_reduce(r.k.g, &in[i], &out[i], SPC_SUM);
  }
  a->rc[rank][2] = spc_all_reduce(r.k.g, &in[2], &out[2], SPC_SUM);
  const float *y = spc_tensor_data(&out[2]);
  for (int64_t j = 0; j < LARGE && a->rc[rank][2] == SPC_OK; j++)
    a->wrong[rank] += y[j] != spt_rk_val(0, (size_t)j, 2) +
                                spt_rk_val(1, (size_t)j, 2);
  return spt_rk_close(&r.k, 0);
}

START_TEST(ranks_realign) {
  align_t *a = mmap(NULL, sizeof(*a), PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(a, MAP_FAILED);
  memset(a, 0, sizeof(*a));
  pid_t pids[2];
  for (int r = 0; r < 2; r++) {
    pids[r] = fork();
    ck_assert_int_ge(pids[r], 0);
    if (pids[r] == 0)
      _exit(align_rank(r, 2, a));
  }
  while (!a->started)
    usleep(1000);
  usleep(50000); /* rank 0's two ops reach the daemon */
  ck_assert_int_eq(kill(daemon_.pid, SIGKILL), 0);
  ck_assert_int_eq(waitpid(daemon_.pid, NULL, 0), daemon_.pid);
  daemon_.pid = 0;
  ck_assert_int_eq(restart_daemon(), 0);
  a->restarted = 1;
  int codes[2];
  ck_assert_int_eq(spt_reap(pids, codes, 2, 120), 0);
  for (int r = 0; r < 2; r++) {
    ck_assert_int_eq(codes[r], 0);
    for (int i = 0; i < 2; i++)
      ck_assert_msg(a->rc[r][i] == SPC_ERESTARTED, "rank %d op %d: %d", r,
                    i, a->rc[r][i]);
    ck_assert_msg(a->rc[r][2] == SPC_OK, "rank %d op 2: %d", r, a->rc[r][2]);
    ck_assert_int_eq(a->wrong[r], 0);
  }
  munmap(a, sizeof(*a));
}
END_TEST

/* Ops that need no daemon go on without it: after one op, the daemon
 * is killed, and the ranks run small all-reduces and all-gathers (the
 * group's shared segment) while it is away, every one right; then it is
 * started again, and the ranks' next large op (the daemon's path) and
 * small one run on the new daemon. */
typedef struct {
  volatile int ready[W], done[W];
  volatile int killed, back;
  volatile int bad[W];         /* phase 1: ops failed or wrong */
  volatile int rc[W][2];       /* phase 2: the large op, the small one */
} gone_t;

static int gone_rank(int rank, int w, void *arg) {
  gone_t *a = arg;
  spt_ro r = {.rank = rank};
  if (spt_rk_open(&r.k, daemon_.socket, "gone", rank, w, 0) < 0)
    return 1;
  int wrong = 0, step = 0;
  if (spt_ro_op(&r, 2, SMALL, step++, &wrong) != SPC_OK || wrong)
    return 1;
  a->ready[rank] = 1;
  while (!a->killed)
    usleep(1000);
  for (int i = 0; i < 200; i++) {
    /* Now and then rank 0 comes late: the others wait past a futex
     * sleep (fast_sleep_ns), where a wait looks for the daemon. */
    if (rank == 0 && i % 50 == 0)
      usleep(300000);
    int rc = spt_ro_op(&r, 1 + i % 2, SMALL, step++, &wrong);
    if (rc != SPC_OK || wrong) {
      fprintf(stderr, "rank %d: op %d without the daemon: %s\n", rank, i,
              rc < 0 ? spc_last_error(r.k.c) : "wrong data");
      a->bad[rank]++;
    }
  }
  a->done[rank] = 1;
  while (!a->back)
    usleep(1000);
  a->rc[rank][0] = spt_ro_op(&r, 4, LARGE, step++, &wrong);
  a->bad[rank] += wrong;
  a->rc[rank][1] = spt_ro_op(&r, 2, SMALL, step++, &wrong);
  a->bad[rank] += wrong;
  return spt_rk_close(&r.k, 0);
}

/* Memory the test and its ranks share, zeroed. */
static void *shared_new(size_t size) {
  void *a = mmap(NULL, size, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(a, MAP_FAILED);
  memset(a, 0, size);
  return a;
}

/* W ranks of fn(arg) forked; once each has set its ready[r], the daemon
 * SIGKILLed and reaped. */
static void fork_then_kill(pid_t *pids, spt_rank_fn fn, void *arg,
                           volatile int *ready) {
  for (int r = 0; r < W; r++) {
    pids[r] = fork();
    ck_assert_int_ge(pids[r], 0);
    if (pids[r] == 0)
      _exit(fn(r, W, arg));
  }
  for (int r = 0; r < W; r++)
    while (!ready[r])
      usleep(1000);
  ck_assert_int_eq(kill(daemon_.pid, SIGKILL), 0);
  ck_assert_int_eq(waitpid(daemon_.pid, NULL, 0), daemon_.pid);
  daemon_.pid = 0;
}

START_TEST(fast_ops_run_without_the_daemon) {
  gone_t *a = shared_new(sizeof(*a));
  pid_t pids[W];
  fork_then_kill(pids, gone_rank, a, a->ready);
  a->killed = 1;
  for (int r = 0; r < W; r++)
    while (!a->done[r])
      usleep(1000);
  ck_assert_int_eq(restart_daemon(), 0);
  a->back = 1;
  int codes[W];
  ck_assert_int_eq(spt_reap(pids, codes, W, 120), 0);
  for (int r = 0; r < W; r++) {
    ck_assert_int_eq(codes[r], 0);
    ck_assert_msg(a->bad[r] == 0, "rank %d: %d ops failed or wrong", r,
                  a->bad[r]);
    ck_assert_msg(a->rc[r][0] == SPC_OK && a->rc[r][1] == SPC_OK,
                  "rank %d after the restart: %d %d", r, a->rc[r][0],
                  a->rc[r][1]);
  }
  munmap(a, sizeof(*a));
}
END_TEST

/* A rank that finds the daemon gone rejoins the new one while the others,
 * which have not seen it go, wait in a shared-memory op for it: its
 * rejoin breaks the old segment, so their op fails with SPC_ERESTARTED
 * and they rejoin too, rather than every rank waiting for the others
 * until a timeout. The op fails on every rank (the realignment); the
 * next is right on every rank. */
typedef struct {
  volatile int ready[W], killed;
  volatile int rc[W][2], wrong[W];
} leave_t;

static int leave_rank(int rank, int w, void *arg) {
  leave_t *a = arg;
  spt_ro r = {.rank = rank};
  if (spt_rk_open(&r.k, daemon_.socket, "leave-seg", rank, w, 0) < 0)
    return 1;
  int wrong = 0, step = 0;
  if (spt_ro_op(&r, 1, SMALL, step++, &wrong) != SPC_OK || wrong)
    return 1;
  a->ready[rank] = 1;
  while (!a->killed)
    usleep(1000);
  if (rank == 0) { /* the others are in their op by now, waiting for it */
    usleep(300000);
    spc_buffer *b = NULL;
    if (spc_buffer_alloc(r.k.c, 4096, &b) == SPC_OK) /* sees it gone */
      spc_buffer_free(b);
  }
  a->rc[rank][0] = spt_ro_op(&r, 1, SMALL, step++, &wrong);
  a->rc[rank][1] = spt_ro_op(&r, 1, SMALL, step++, &wrong);
  a->wrong[rank] = wrong;
  return spt_rk_close(&r.k, 0);
}

START_TEST(a_rejoining_rank_ends_the_others_fast_wait) {
  leave_t *a = shared_new(sizeof(*a));
  pid_t pids[W];
  fork_then_kill(pids, leave_rank, a, a->ready);
  ck_assert_int_eq(restart_daemon(), 0);
  a->killed = 1;
  int codes[W];
  ck_assert_int_eq(spt_reap(pids, codes, W, 60), 0);
  for (int r = 0; r < W; r++) {
    ck_assert_int_eq(codes[r], 0);
    ck_assert_msg(a->rc[r][0] == SPC_ERESTARTED && a->rc[r][1] == SPC_OK &&
                      !a->wrong[r],
                  "rank %d: the op across the rejoin %d, the next %d%s", r,
                  a->rc[r][0], a->rc[r][1], a->wrong[r] ? ", wrong" : "");
  }
  munmap(a, sizeof(*a));
}
END_TEST

/* spc_set_reconnect_timeout(c, 0): the client ends with the daemon, and
 * says so on every later call. */
START_TEST(never_reconnect) {
  spc_client *c = spt_connect(daemon_.socket);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(spc_set_reconnect_timeout(c, 0), SPC_OK);
  ck_assert_int_eq(spc_set_reconnect_timeout(c, -2), SPC_EINVAL);
  ck_assert_ptr_nonnull(strstr(spc_last_error(c), "-2"));
  spc_buffer *b;
  ck_assert_int_eq(spc_buffer_alloc(c, 4096, &b), SPC_OK);
  ck_assert_int_eq(kill(daemon_.pid, SIGKILL), 0);
  ck_assert_int_eq(waitpid(daemon_.pid, NULL, 0), daemon_.pid);
  daemon_.pid = 0;
  ck_assert_int_eq(restart_daemon(), 0);
  spc_buffer *b2;
  ck_assert_int_eq(spc_buffer_alloc(c, 4096, &b2), SPC_ECONNECTION);
  ck_assert_int_eq(spc_buffer_alloc(c, 4096, &b2), SPC_ECONNECTION);
  spc_disconnect(c);
}
END_TEST

/* A daemon that does not come back: the call fails with SPC_ECONNECTION
 * after the reconnect timeout, and every later one at once, the client
 * being closed for good. */
START_TEST(gives_up_after_the_timeout) {
  spc_client *c = spt_connect(daemon_.socket);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(spc_set_reconnect_timeout(c, 200), SPC_OK);
  spc_buffer *b;
  ck_assert_int_eq(spc_buffer_alloc(c, 4096, &b), SPC_OK);
  ck_assert_int_eq(kill(daemon_.pid, SIGKILL), 0);
  ck_assert_int_eq(waitpid(daemon_.pid, NULL, 0), daemon_.pid);
  daemon_.pid = 0;
  spc_buffer *b2;
  ck_assert_int_eq(spc_buffer_alloc(c, 4096, &b2), SPC_ECONNECTION);
  ck_assert_msg(strstr(spc_last_error(c), "did not come back within 200 ms"),
                "%s", spc_last_error(c));
  ck_assert_int_eq(spc_buffer_alloc(c, 4096, &b2), SPC_ECONNECTION);
  ck_assert_msg(strstr(spc_last_error(c), "is closed"), "%s",
                spc_last_error(c));
  spc_disconnect(c);
}
END_TEST

/* A lone client's buffers come back with it: after the restart it
 * allocates, joins and runs as if nothing happened, and the new daemon
 * holds its old buffer again. */
START_TEST(buffers_registered_again) {
  spc_client *c = spt_connect(daemon_.socket);
  ck_assert_ptr_nonnull(c);
  spc_buffer *b;
  ck_assert_int_eq(spc_buffer_alloc(c, 1 << 16, &b), SPC_OK);
  ck_assert_int_eq(kill(daemon_.pid, SIGKILL), 0);
  ck_assert_int_eq(waitpid(daemon_.pid, NULL, 0), daemon_.pid);
  daemon_.pid = 0;
  ck_assert_int_eq(restart_daemon(), 0);
  spc_group *g;
  ck_assert_msg(spc_group_join(c, "alone", 1, 0, &g) == SPC_OK, "%s",
                spc_last_error(c));
  int64_t s[1] = {1024};
  spc_tensor in, out;
  ck_assert_int_eq(spc_tensor_init(&in, b, 0, SPC_FLOAT32, 1, s), SPC_OK);
  ck_assert_int_eq(spc_tensor_init(&out, b, 4096, SPC_FLOAT32, 1, s),
                   SPC_OK);
  ck_assert_msg(spc_all_reduce(g, &in, &out, SPC_SUM) == SPC_OK, "%s",
                spc_last_error(c));
  /* its buffer and its submission ring (64 KiB each) */
  ck_assert(spt_stats_has(stats_sock, "groups=1 buffers=2 "
                                      "registered_bytes=131072\n"));
  ck_assert_int_eq(spc_group_leave(g), SPC_OK);
  ck_assert_int_eq(spc_buffer_free(b), SPC_OK);
  spc_disconnect(c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("restart");
  TCase *tc = tcase_create("restart");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, ranks_survive_sigkill);
  tcase_add_test(tc, ranks_survive_upgrade);
  tcase_add_test(tc, ranks_realign);
  tcase_add_test(tc, fast_ops_run_without_the_daemon);
  tcase_add_test(tc, a_rejoining_rank_ends_the_others_fast_wait);
  tcase_add_test(tc, never_reconnect);
  tcase_add_test(tc, gives_up_after_the_timeout);
  tcase_add_test(tc, buffers_registered_again);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
