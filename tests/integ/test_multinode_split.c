/* Group split of a group across nodes, when something goes wrong: a rank
 * over client_max_groups fails the split on every rank of every node (and
 * a later split works); a node lost while a sub-group across nodes waits
 * for its ranks fails the split on every rank, naming the node; a node
 * lost after the split fails the sub-group across nodes on every rank,
 * naming it, while a sub-group of one surviving node goes on. 3 daemons
 * on loopback UCX, rank r on node r % 3. */
#include <check.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "harness.h"

#define NODES 3
#define N_ELEMS 1024
#define MAXW 9
#define FLAG_OFF ((size_t)N_ELEMS * 4 * (MAXW + 1))

static spt_nodes nodes;

typedef struct {
  int rank;
  spc_client *c;
  spc_group *g;
  spc_buffer *b;
} rk;

static int rk_open(rk *k, int rank, int world, const char *name) {
  k->rank = rank;
  k->c = spt_connect(nodes.d[rank % NODES].socket);
  if (k->c == NULL || spc_group_join(k->c, name, world, rank, &k->g) < 0 ||
      spc_buffer_alloc(k->c, FLAG_OFF + 64, &k->b) < 0) {
    fprintf(stderr, "rank %d setup: %s\n", rank,
            k->c ? spc_last_error(k->c) : "no connection");
    return -1;
  }
  return 0;
}

/* One all-gather over sub of verified data: 0, 1 for wrong data, or the
 * op's (negative) status. */
static int gather_once(rk *k, spc_group *sub) {
  int w = spc_group_size(sub), me = spc_group_rank(sub);
  float *x = spc_buffer_data(k->b);
  int64_t s1[1] = {N_ELEMS}, s2[1] = {(int64_t)N_ELEMS * w};
  spc_tensor in, out;
  spc_tensor_init(&in, k->b, 0, SPC_FLOAT32, 1, s1);
  spc_tensor_init(&out, k->b, N_ELEMS * 4, SPC_FLOAT32, 1, s2);
  for (int i = 0; i < N_ELEMS; i++)
    x[i] = (float)(me * N_ELEMS + i);
  int rc = spc_all_gather(sub, &in, &out, 0, NULL);
  if (rc < 0)
    return rc;
  for (int i = 0; i < N_ELEMS * w; i++)
    if (x[N_ELEMS + i] != (float)i) {
      fprintf(stderr, "rank %d: element %d is %g\n", k->rank, i,
              (double)x[N_ELEMS + i]);
      return 1;
    }
  return 0;
}

/* The largest of the ranks' `mine` over sub (an all_reduce), so every
 * rank takes the same decision; negative: the op's status. */
static int64_t agree(rk *k, spc_group *sub, int64_t mine) {
  int64_t *v = (int64_t *)((char *)spc_buffer_data(k->b) + FLAG_OFF);
  int64_t one[1] = {1};
  spc_tensor in, out;
  spc_tensor_init(&in, k->b, FLAG_OFF, SPC_INT64, 1, one);
  spc_tensor_init(&out, k->b, FLAG_OFF + 8, SPC_INT64, 1, one);
  v[0] = mine;
  int rc = spc_all_reduce(sub, &in, &out, SPC_MAX);
  return rc < 0 ? rc : v[1];
}

/* Exit code of a rank that saw status rc: 10 - rc when the message names
 * node 2 (or rc says the rank's own daemon went), else 1. */
static int named_failure(rk *k, const char *what, int rc) {
  fprintf(stderr, "rank %d %s: %s: %s\n", k->rank, what, spc_strerror(rc),
          spc_last_error(k->c));
  if (rc != SPC_ERESTARTED && strstr(spc_last_error(k->c), "node 2") == NULL)
    return 1;
  return 10 - rc;
}


typedef int (*rank_fn)(int rank, const int *fds);

/* Fork world ranks of fn; each closes the pipe ends it does not use. */
static void fork_ranks(pid_t *pids, int world, rank_fn fn, const int *fds) {
  for (int r = 0; r < world; r++) {
    pids[r] = fork();
    ck_assert_int_ge(pids[r], 0);
    if (pids[r] == 0) {
      if (fds != NULL)
        close(fds[0]), close(fds[3]); /* the test's ends */
      _exit(fn(r, fds));
    }
  }
  if (fds != NULL)
    close(fds[1]), close(fds[2]); /* the ranks' ends */
}

/* Read n bytes from fd (one per rank that got somewhere). */
static void await_bytes(int fd, int n) {
  char buf[16];
  for (int got = 0; got < n;) {
    ssize_t k = read(fd, buf, (size_t)(n - got) < sizeof(buf)
                                  ? (size_t)(n - got) : sizeof(buf));
    ck_assert_int_gt(k, 0);
    got += (int)k;
  }
}

/* Poll node i's `spcollctl groups` until the shell test `grep` holds;
 * 0 when it did within guard_s. */
static int await_groups(int i, const char *grep, int guard_s) {
  char args[256];
  snprintf(args, sizeof(args), "groups | %s >/dev/null", grep);
  for (int t = 0; t < guard_s * 20; t++) {
    if (spt_ctl(&nodes.d[i], args) == 0)
      return 0;
    usleep(50000);
  }
  fprintf(stderr, "node %d: never `%s`:\n", i, grep);
  spt_ctl(&nodes.d[i], "groups >&2");
  return -1;
}

static void kill_node(int i, int sig) {
  ck_assert_int_eq(kill(nodes.d[i].pid, sig), 0);
  if (sig == SIGKILL) {
    waitpid(nodes.d[i].pid, NULL, 0);
    nodes.d[i].pid = 0;
  }
}

/* ---- client_max_groups ---------------------------------------------- */

/* Rank 4 (node 1) is in a second group, so with client_max_groups 2 it has
 * no room for a sub-group: the split fails on every rank of every node
 * naming it, nobody gets a sub-group; once it left that group the same
 * split works everywhere. */
static int limit_rank(int rank, const int *fds) {
  (void)fds;
  rk k;
  spc_group *pad = NULL, *sub = NULL;
  if (rk_open(&k, rank, 6, "lim") < 0 ||
      (rank == 4 && spc_group_join(k.c, "lim-pad", 1, 0, &pad) < 0))
    return 1;
  int rc = spc_group_split(k.g, rank % 2, rank, &sub);
  if (rc != SPC_ENOMEM || sub != NULL ||
      !strstr(spc_last_error(k.c), "client_max_groups") ||
      !strstr(spc_last_error(k.c), "rank 4")) {
    fprintf(stderr, "rank %d: split over the limit gave %d (%s), sub %p\n",
            rank, rc, spc_last_error(k.c), (void *)sub);
    return 1;
  }
  if (pad != NULL)
    spc_group_leave(pad);
  rc = spc_group_split(k.g, rank % 2, rank, &sub);
  if (rc < 0 || sub == NULL || spc_group_size(sub) != 3 ||
      spc_group_rank(sub) != rank / 2) {
    fprintf(stderr, "rank %d: split gave %d (%s)\n", rank, rc,
            spc_last_error(k.c));
    return 1;
  }
  if ((rc = gather_once(&k, sub)) != 0) {
    fprintf(stderr, "rank %d: all_gather gave %d (%s)\n", rank, rc,
            spc_last_error(k.c));
    return 1;
  }
  spc_group_leave(sub);
  spc_group_leave(k.g);
  spc_disconnect(k.c);
  return 0;
}

START_TEST(split_over_group_limit_fails_on_every_node) {
  const char *extra[] = {"--client-max-groups", "2", NULL};
  ck_assert_int_eq(spt_nodes_start(&nodes, NODES, extra), 0);
  pid_t pids[6];
  int codes[6];
  fork_ranks(pids, 6, limit_rank, NULL);
  spt_reap(pids, codes, 6, 60);
  for (int r = 0; r < 6; r++)
    ck_assert_msg(codes[r] == 0, "rank %d exit %d", r, codes[r]);
  ck_assert_int_eq(spt_nodes_stop(&nodes), 0);
}
END_TEST

/* ---- a node lost during the split ------------------------------------ */

/* fds: [0] the test reads "joined", [1] ranks write it; [2] ranks of node 0
 * read "go", [3] the test writes it. Ranks of nodes 1 and 2 split at once;
 * node 0's when told. */
static int during_rank(int rank, const int *fds) {
  rk k;
  if (rk_open(&k, rank, 6, "gsd") < 0 || write(fds[1], "j", 1) != 1)
    return 1;
  char b;
  if (rank % NODES == 0 && read(fds[2], &b, 1) != 1)
    return 1;
  spc_group *sub = NULL;
  int rc = spc_group_split(k.g, rank % 2, rank, &sub);
  if (rc == 0) {
    fprintf(stderr, "rank %d: split succeeded without node 2\n", rank);
    return 1;
  }
  return named_failure(&k, "group_split", rc);
}

/* Nodes 0 and 1 run the split (every rank's color has arrived) and make
 * the two sub-groups across nodes, which wait for node 2's ranks; node 2
 * was stopped before it could, and is then killed: every rank's split
 * fails, naming node 2. */
START_TEST(node_lost_during_split_fails_it_everywhere) {
  const char *extra[] = {"--peer-timeout", "3", NULL};
  ck_assert_int_eq(spt_nodes_start(&nodes, NODES, extra), 0);
  int fds[4];
  ck_assert_int_eq(pipe(fds), 0);
  ck_assert_int_eq(pipe(fds + 2), 0);
  pid_t pids[6];
  int codes[6];
  fork_ranks(pids, 6, during_rank, fds);
  await_bytes(fds[0], 6);
  /* Node 2's ranks' colors reached nodes 0 and 1: they wait for node 0's. */
  for (int i = 0; i < 2; i++)
    ck_assert_int_eq(await_groups(i, "grep -q '^pending gsd seq=0 .*"
                                     "waiting_for=0,3$'", 60), 0);
  kill_node(2, SIGSTOP);
  ck_assert_int_eq(write(fds[3], "gg", 2), 2);
  /* Both sub-groups, made on nodes 0 and 1, wait for node 2's joins. */
  for (int i = 0; i < 2; i++)
    ck_assert_int_eq(await_groups(i, "grep -c '^group gsd/split0/' | "
                                     "grep -qx 2", 60), 0);
  kill_node(2, SIGKILL);
  spt_reap(pids, codes, 6, 60);
  for (int r = 0; r < 6; r++) {
    int want = r % NODES == 2 ? 10 - SPC_ERESTARTED : 10 - SPC_ENODELOST;
    ck_assert_msg(codes[r] == want ||
                      (r % NODES != 2 && codes[r] == 10 - SPC_EPEERLOST),
                  "rank %d exit %d, wanted %d", r, codes[r], want);
  }
  close(fds[0]);
  close(fds[3]);
  ck_assert_int_eq(spt_nodes_stop(&nodes), 0);
}
END_TEST

/* ---- a node lost after the split ------------------------------------- */

/* World 9: ranks 0 and 3 (node 0) form a sub-group of node 0; the others
 * one across all three nodes. Every rank all-gathers over its sub-group
 * (a byte to fds[1] after the first); the sub-group across nodes runs
 * until it fails; node 0's goes on until one of its ranks was told node 2
 * is gone (fds[2] closes; the two agree on when), then 20 more. */
static int after_rank(int rank, const int *fds) {
  rk k;
  if (rk_open(&k, rank, 9, "gsa") < 0)
    return 1;
  int local = rank == 0 || rank == 3;
  spc_group *sub = NULL;
  int rc = spc_group_split(k.g, local ? 0 : 1, rank, &sub);
  if (rc < 0 || sub == NULL) {
    fprintf(stderr, "rank %d: split gave %d (%s)\n", rank, rc,
            spc_last_error(k.c));
    return 1;
  }
  if (spc_group_spans_nodes(sub) == local) {
    fprintf(stderr, "rank %d: sub-group spans nodes: %d\n", rank,
            spc_group_spans_nodes(sub));
    return 1;
  }
  for (int it = 0, more = -1; more != 0; it++) {
    rc = gather_once(&k, sub);
    if (rc < 0 && local) {
      fprintf(stderr, "rank %d: node 0's sub-group failed: %s: %s\n", rank,
              spc_strerror(rc), spc_last_error(k.c));
      return 1;
    }
    if (rc < 0)
      return named_failure(&k, "all_gather", rc);
    if (rc > 0)
      return 1;
    if (it == 0 && write(fds[1], "r", 1) != 1)
      return 1;
    struct pollfd p = {.fd = fds[2], .events = POLLIN};
    if (local && more < 0) {
      int64_t gone = agree(&k, sub, poll(&p, 1, 0) == 1);
      if (gone < 0) {
        fprintf(stderr, "rank %d: all_reduce failed: %s\n", rank,
                spc_last_error(k.c));
        return 1;
      }
      if (gone)
        more = 20; /* node 2 is gone */
    }
    if (more > 0)
      more--;
    if (!local && it > 100000)
      return 1; /* the test never killed node 2 */
  }
  spc_group_leave(sub);
  spc_group_leave(k.g);
  spc_disconnect(k.c);
  return 0;
}

START_TEST(node_lost_after_split_spares_local_sub_group) {
  const char *extra[] = {"--peer-timeout", "3", NULL};
  ck_assert_int_eq(spt_nodes_start(&nodes, NODES, extra), 0);
  int fds[4];
  ck_assert_int_eq(pipe(fds), 0);
  ck_assert_int_eq(pipe(fds + 2), 0);
  pid_t pids[9];
  int codes[9];
  fork_ranks(pids, 9, after_rank, fds);
  await_bytes(fds[0], 9); /* every rank finished one verified op */
  kill_node(2, SIGKILL);
  close(fds[3]); /* node 0's sub-group hears it and does 20 more */
  spt_reap(pids, codes, 9, 120);
  for (int r = 0; r < 9; r++) {
    int want = r == 0 || r == 3   ? 0
               : r % NODES == 2 ? 10 - SPC_ERESTARTED
                                : 10 - SPC_ENODELOST;
    ck_assert_msg(codes[r] == want || (want == 10 - SPC_ENODELOST &&
                                       codes[r] == 10 - SPC_EPEERLOST),
                  "rank %d exit %d, wanted %d", r, codes[r], want);
  }
  close(fds[0]);
  ck_assert_int_eq(spt_nodes_stop(&nodes), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("multinode_split");
  TCase *tc = tcase_create("split");
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, split_over_group_limit_fails_on_every_node);
  tcase_add_test(tc, node_lost_during_split_fails_it_everywhere);
  tcase_add_test(tc, node_lost_after_split_spares_local_sub_group);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
