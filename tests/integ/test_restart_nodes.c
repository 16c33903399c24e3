/* A node's daemon restarted under a group spanning three nodes (issue 36,
 * client_sequence.c): four ranks, rank r on node r % 3, loop over
 * verified ops of every kind while node 1's daemon is SIGKILLed and
 * started again on the same socket and port. The ranks' code does nothing
 * special: every op is right or fails with SPC_ERESTARTED (on the
 * restarted node, whose clients lost their daemon, and on the others,
 * whose daemons lost the node), some op failed so, and every op of the
 * last rounds is right on every rank: the group formed again under its
 * name once the node's rank came back. A node that does not come back:
 * the other ranks' next op fails with SPC_ENODELOST, naming it, after
 * their reconnect timeout. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "harness.h"
#include "restart_ops.h"

#define W SPT_RO_W
#define NODES 3
#define VICTIM 1
#define ROUNDS 40
#define KILL_AT 10   /* node 1 dies once rank 0 reached this round */
#define LAST_OK 10   /* rounds at the end that must all be right */
#define SMALL 16
#define LARGE 4096

typedef struct {
  spt_ro_tally t[W];           /* loop_rank's */
  /* align_rank: [0] started, [1] restarted; gone_rank: ops done */
  volatile int round[W];
  volatile int bad[W];         /* align_rank: wrong data */
  volatile int restarted[W];   /* align_rank: its third op's status */
  volatile int code[W];        /* gone_rank: the status of the last op;
                                * align_rank: of the first two */
  char why[W][400];            /* and its message */
} shared_t;

static spt_nodes nodes;
static shared_t *sh;

static void setup(void) {
  sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(sh, MAP_FAILED);
  memset(sh, 0, sizeof(*sh));
}

static void teardown(void) {
  munmap(sh, sizeof(*sh));
}

static int loop_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_ro r = {.rank = rank};
  if (spt_rk_open(&r.k, nodes.d[rank % NODES].socket, "across", rank, w,
                  0) < 0)
    return 1;
  spt_ro_loop(&r, ROUNDS, SMALL, LARGE, &sh->t[rank]);
  return spt_rk_close(&r.k, 0);
}

static void kill_node(int i) {
  ck_assert_int_eq(kill(nodes.d[i].pid, SIGKILL), 0);
  ck_assert_int_eq(waitpid(nodes.d[i].pid, NULL, 0), nodes.d[i].pid);
  nodes.d[i].pid = 0;
}

static pid_t fork_rank(int (*fn)(int, int, void *), int rank, int w) {
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0)
    _exit(fn(rank, w, NULL));
  return pid;
}

/* Node 1 replaced under the loop: SIGKILLed and started again, or
 * upgraded in place (spcolld --upgrade: the peers hear the new daemon as
 * the node's restart). */
static void group_survives(int upgrade) {
  ck_assert_int_eq(spt_nodes_start(&nodes, NODES, NULL), 0);
  pid_t pids[W];
  for (int r = 0; r < W; r++)
    pids[r] = fork_rank(loop_rank, r, W);
  while (sh->t[0].round < KILL_AT)
    usleep(1000);
  if (upgrade) {
    ck_assert_int_eq(spt_node_upgrade(&nodes, VICTIM), 0);
  } else {
    kill_node(VICTIM);
    usleep(100000); /* its clients and its peers find no daemon a while */
    ck_assert_int_eq(spt_node_restart(&nodes, VICTIM), 0);
  }
  int codes[W];
  int hung = spt_reap(pids, codes, W, 240);
  for (int i = 0; hung && i < NODES; i++)
    spt_daemon_dump_log(&nodes.d[i]);
  ck_assert_int_eq(hung, 0);
  int seen, there = 0;
  char why[200];
  for (int r = 0; r < W; r++) {
    ck_assert_msg(codes[r] == 0, "rank %d exited %d", r, codes[r]);
    there += r % NODES != VICTIM && sh->t[r].restarted > 0;
  }
  ck_assert_msg(!spt_ro_tally_bad(sh->t, W, ROUNDS, LAST_OK, &seen, why,
                                  sizeof(why)), "%s", why);
  ck_assert_msg(seen > 0, "no op failed with SPC_ERESTARTED: the restart "
                "went unseen");
  ck_assert_msg(there > 0 || upgrade, "no rank of the other nodes saw the "
                "restart");
  ck_assert_int_eq(spt_nodes_stop(&nodes), 0);
}

START_TEST(group_survives_a_node_restart) {
  group_survives(0);
}
END_TEST

START_TEST(group_survives_a_node_upgrade) {
  group_survives(1);
}
END_TEST

/* Ranks that had issued different numbers of ops when node 1 went: rank
 * 0 (node 0) two, in flight; rank 1 (node 1) none. Each daemon counts
 * the ops every rank of the group said it issued, wherever it joined:
 * rank 1 fails those two without issuing them, so the third op is the
 * third op on both ranks, and right. */
static int align_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (spt_rk_open(&k, nodes.d[rank].socket, "align", rank, w, 0) < 0)
    return 1;
  spc_tensor in[3], out[3];
  int64_t s[1] = {LARGE};
  spc_op op = spc_op_all_reduce(SPC_SUM);
  spc_request *req[2];
  for (int i = 0; i < 3; i++) {
    float *x = spt_rk_tensor(&k, &in[i], 1, s);
    if (x == NULL || spt_rk_tensor(&k, &out[i], 1, s) == NULL)
      return 1;
    for (int64_t j = 0; j < LARGE; j++)
      x[j] = spt_rk_val(rank, (size_t)j, i);
  }
  if (rank == 0) {
    for (int i = 0; i < 2; i++)
      if (spc_start(k.g, &op, &in[i], &out[i], &req[i]) < 0)
        return 1;
    sh->round[0] = 1; /* started */
    for (int i = 0; i < 2; i++)
      sh->code[i] = spc_wait(&req[i]);
  } else {
    while (!sh->round[1]) /* the node restarted */
      usleep(1000);
    for (int i = 0; i < 2; i++)
      sh->code[2 + i] = spc_all_reduce(k.g, &in[i], &out[i], SPC_SUM);
  }
  int rc = spc_all_reduce(k.g, &in[2], &out[2], SPC_SUM);
  const float *y = spc_tensor_data(&out[2]);
  for (int64_t j = 0; j < LARGE && rc == SPC_OK; j++)
    sh->bad[rank] += y[j] != spt_rk_val(0, (size_t)j, 2) +
                             spt_rk_val(1, (size_t)j, 2);
  if (rc < 0)
    snprintf(sh->why[rank], sizeof(sh->why[rank]), "%s",
             spc_last_error(k.c));
  sh->restarted[rank] = rc;
  return spt_rk_close(&k, 0);
}

START_TEST(ranks_realign_across_nodes) {
  ck_assert_int_eq(spt_nodes_start(&nodes, 2, NULL), 0);
  pid_t pids[2];
  for (int r = 0; r < 2; r++)
    pids[r] = fork_rank(align_rank, r, 2);
  while (!sh->round[0])
    usleep(1000);
  usleep(50000); /* rank 0's two ops reach its daemon */
  kill_node(1);
  ck_assert_int_eq(spt_node_restart(&nodes, 1), 0);
  sh->round[1] = 1;
  int codes[2];
  ck_assert_int_eq(spt_reap(pids, codes, 2, 120), 0);
  for (int i = 0; i < 4; i++)
    ck_assert_msg(sh->code[i] == SPC_ERESTARTED, "rank %d op %d: %d", i / 2,
                  i % 2, sh->code[i]);
  for (int r = 0; r < 2; r++) {
    ck_assert_int_eq(codes[r], 0);
    ck_assert_msg(sh->restarted[r] == SPC_OK, "rank %d op 2: %d %s", r,
                  sh->restarted[r], sh->why[r]);
    ck_assert_msg(sh->bad[r] == 0, "rank %d op 2: %d wrong", r, sh->bad[r]);
  }
  ck_assert_int_eq(spt_nodes_stop(&nodes), 0);
}
END_TEST

/* World 2 on two nodes, reconnect timeout 1 s; node 1 dies for good
 * once both ranks ran an op. Rank 0 runs until an op fails otherwise than
 * with SPC_ERESTARTED: that must be SPC_ENODELOST, naming node 1. */
static int gone_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_ro r = {.rank = rank};
  if (spt_rk_open(&r.k, nodes.d[rank].socket, "gone", rank, w, 0) < 0 ||
      spc_set_reconnect_timeout(r.k.c, 1000) < 0)
    return 1;
  int64_t s[1] = {64};
  spc_tensor in, out;
  if (spt_rk_tensor(&r.k, &in, 1, s) == NULL ||
      spt_rk_tensor(&r.k, &out, 1, s) == NULL)
    return 1;
  int rc = SPC_OK;
  for (int i = 0; i < 100000 && (rc == SPC_OK || rc == SPC_ERESTARTED);
       i++) {
    rc = spc_all_reduce(r.k.g, &in, &out, SPC_SUM);
    sh->round[rank] = i + 1;
  }
  sh->code[rank] = rc;
  snprintf(sh->why[rank], sizeof(sh->why[rank]), "%s",
           spc_last_error(r.k.c));
  return spt_rk_close(&r.k, 0);
}

START_TEST(a_node_not_back_is_named) {
  ck_assert_int_eq(spt_nodes_start(&nodes, 2, NULL), 0);
  pid_t pids[2];
  for (int r = 0; r < 2; r++)
    pids[r] = fork_rank(gone_rank, r, 2);
  while (sh->round[0] < 10 || sh->round[1] < 10)
    usleep(1000);
  kill_node(1);
  int codes[2];
  ck_assert_int_eq(spt_reap(pids, codes, 2, 120), 0);
  ck_assert_int_eq(codes[0], 0);
  ck_assert_msg(sh->code[0] == SPC_ENODELOST, "rank 0 ended with %d: %s",
                sh->code[0], sh->why[0]);
  ck_assert_msg(strstr(sh->why[0], "node 1") != NULL, "%s", sh->why[0]);
  /* Its own daemon gone for good, rank 1 gives up after the timeout. */
  ck_assert_msg(sh->code[1] == SPC_ECONNECTION, "rank 1 ended with %d: %s",
                sh->code[1], sh->why[1]);
  ck_assert_int_eq(spt_nodes_stop(&nodes), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("restart_nodes");
  TCase *tc = tcase_create("restart_nodes");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, group_survives_a_node_restart);
  tcase_add_test(tc, group_survives_a_node_upgrade);
  tcase_add_test(tc, ranks_realign_across_nodes);
  tcase_add_test(tc, a_node_not_back_is_named);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
