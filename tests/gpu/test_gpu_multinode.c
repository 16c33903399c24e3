/* Every op on device tensors in groups that span nodes: 3 daemons peering
 * over UCX on loopback (spt_nodes_start), and each rank runs every case of
 * gpu_cases.c's table on host buffers (the UCX engine, itself checked
 * against naive references by the multinode op suites) and again on device
 * buffers, through the daemon of its node; the outputs must be bitwise
 * equal. Placements, one Check test each, each with its own group name and
 * its own 3 fresh daemons, which must exit 0 when stopped:
 *   (a) 6 ranks, rank r on node r % 3, all on GPU 0 (each node's local
 *       part on its CUDA mover);
 *   (b) 6 ranks, rank r on node r % 3 and GPU (r / 3) % 2: each node's two
 *       ranks on two GPUs (not run, and said, with fewer than 2 GPUs);
 *   (c) 3 ranks, one per node, GPU 0;
 *   (d) 5 ranks placed unevenly: ranks 0-2 on node 0, rank 3 on node 1,
 *       rank 4 on node 2, GPU 0.
 * After the cases and a fence (one more host op, after which every node has
 * counted every case's ops), rank 0 reads every node's stats: mover_ucx_ops
 * must have grown on every node by at least two per case, the host run's
 * op and the device run's, so the cross-node engine ran the device ops
 * too (the host runs alone would make one per case).
 *
 * The device streams go through pinned staging (engine/xnode_stage.c):
 * the big cases (16 MiB gather, 8 MiB all-reduce) take many chunks.
 * (e) is (a) with xnode_direct 2 (device memory handed to UCX as a UCX
 * that moves CUDA memory would take it), run on spcsim only.
 * node_lost_mid_op: a daemon killed while its group runs 8 MiB device
 * all-gathers (8 chunks a stream): every other rank fails naming the
 * node, within the peer timeout, no staging buffer is left out, and the
 * survivors then run device ops across the two nodes left.
 * staging_is_bounded: with xnode_staging_bytes below what an op needs
 * every rank's device op fails naming the key, and the daemons serve on;
 * with just enough, ops in a row all run (each gives its staging back).
 *
 * Every case runs in every build, ASan's included (no subset): measured on
 * spcsim on 2 loaded cores for all 4 placements, the host half of the work
 * (each device run replaced by a second host run across the nodes) took
 * 5 s plain and 7 s under ASan, the device half (every rank on one node's
 * GPU movers) 9 s and 11 s; failing as it does today, 2 s. Without a GPU:
 * "skipped: no GPU", exit 77. */
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "gpu_cases.h"
#include "gpu_testlib.h"
#include "spcoll.h"

#ifdef SPC_HAVE_CUDA

#define NODES 3
#define MAX_WORLD 8

/* Where each rank of a placement is. */
typedef struct {
  const char *label;          /* (a)... */
  const char *group;
  int world;
  int node[MAX_WORLD];        /* rank r talks to nodes.d[node[r]] */
  int gpu[MAX_WORLD];         /* and its tensors are on GPU gpu[r] */
  const char *const *extra;   /* the daemons' options */
  int sym;                    /* device tensors in a symmetric buffer */
} placement;

static spt_nodes nodes;
/* Each failed rank writes its first failure here (one line, under
 * PIPE_BUF, so lines do not mix), for the test's failure message. */
static int why_pipe[2] = {-1, -1};

/* Rank r's host buffer holds its input and then its output at the next
 * 4 KiB; the biggest output is the 16 MiB gather's, world times 16 MiB,
 * also read back into the pinned buffer of dev_bytes. */
static size_t bytes_for(int world) {
  size_t need = (size_t)(world + 1) * 16 * GPC_MB;
  return need > GPC_HOST_BYTES ? need : GPC_HOST_BYTES;
}

static void tell_why(const gpc_rank *k, const char *fallback) {
  char line[600];
  int n = snprintf(line, sizeof(line), "%s\n",
                   k->why[0] ? k->why : fallback);
  if (why_pipe[1] >= 0 && n > 0 &&
      write(why_pipe[1], line, strlen(line)) < 0)
    perror("write why");
}

/* Every node's mover_ucx_ops, -1 where it cannot be read. */
static void ucx_ops(long long *v) {
  for (int i = 0; i < NODES; i++)
    v[i] = gpt_stat(&nodes.d[i], "mover_ucx_ops");
}

/* One host op of every rank: once it is done on rank 0, every node has
 * finished (and counted) each op before it, since a group runs its ops in
 * order and this one needs every node's part. */
static int fence(gpc_rank *k, const char *group) {
  int64_t one[1] = {1};
  spc_tensor in, out;
  int rc = spc_tensor_init(&in, k->host, 0, SPC_INT32, 1, one);
  if (rc == 0)
    rc = spc_tensor_init(&out, k->host, 4096, SPC_INT32, 1, one);
  if (rc == 0) {
    *(int32_t *)spc_tensor_data(&in) = 1;
    rc = spc_all_reduce(k->g, &in, &out, SPC_SUM);
  }
  if (rc == 0 && *(int32_t *)spc_tensor_data(&out) != k->world)
    rc = -1;
  return rc < 0 ? gpc_rank_fail(k, group, "fence (host all_reduce)", rc)
                : 0;
}

/* A symmetric buffer of a group across nodes takes no op: the group
 * spans nodes, every op went through the daemons. */
static int sym_refused(gpc_rank *k) {
  char why[256];
  spc_gpu_paths st;
  if (spc_buffer_symmetric(k->symbuf, why, sizeof(why)) ||
      strstr(why, "spans nodes") == NULL ||
      spc_gpu_path_stats(k->c, &st) != SPC_OK || st.sym_ops != 0) {
    fprintf(stderr, "rank %d: symmetric buffer across nodes: %s\n",
            k->rank, why);
    return 0;
  }
  return 1;
}

static int rank_main(int rank, int world, void *arg) {
  const placement *p = arg;
  gpc_rank k = {.rank = rank, .world = world, .sym = p->sym};
  long long before[NODES], after[NODES];
  /* No op of the group runs before rank 0 has joined. */
  if (rank == 0)
    ucx_ops(before);
  if (gpc_rank_open(&k, nodes.d[p->node[rank]].socket, p->group,
                    p->gpu[rank], bytes_for(world), bytes_for(world))) {
    tell_why(&k, "setup failed");
    return 1;
  }
  int bad = gpc_run_cases(&k, p->group, NULL, 0);
  bad += fence(&k, p->group);
  bad += p->sym && !sym_refused(&k);
  if (rank == 0) {
    ucx_ops(after);
    for (int i = 0; i < NODES; i++) {
      long long grew = after[i] - before[i];
      int ok = before[i] >= 0 && after[i] >= 0 &&
               grew >= 2 * (long long)gpc_ncases;
      fprintf(stderr, "[%s] node %d: mover_ucx_ops %lld -> %lld (%s)\n",
              p->group, i, before[i], after[i],
              ok ? "ok" : "grew too little");
      if (!ok) {
        char msg[200];
        snprintf(msg, sizeof(msg), "[%s] node %d: mover_ucx_ops grew by "
                 "%lld, want >= %zu (2 per case)", p->group, i, grew,
                 2 * gpc_ncases);
        if (k.why[0] == '\0')
          snprintf(k.why, sizeof(k.why), "%s", msg);
        bad++;
      }
    }
  }
  if (bad)
    tell_why(&k, "failed");
  gpc_rank_close(&k);
  return bad ? 1 : 0;
}

static void run_placement(const placement *p) {
  fprintf(stderr, "== %s %s: %d ranks, %zu cases\n", p->label, p->group,
          p->world, gpc_ncases);
  ck_assert_int_eq(spt_nodes_start(&nodes, NODES, p->extra), 0);
  ck_assert_int_eq(pipe2(why_pipe, O_CLOEXEC | O_NONBLOCK), 0);
  int failed = spt_run_ranks(p->world, rank_main, (void *)p, 240);
  close(why_pipe[1]);
  why_pipe[1] = -1;
  char why[4096] = "";
  ssize_t got = read(why_pipe[0], why, sizeof(why) - 1);
  close(why_pipe[0]);
  why[got > 0 ? got : 0] = '\0';
  why[strcspn(why, "\n")] = '\0'; /* the first line is enough */
  int status[NODES];
  for (int i = 0; i < NODES; i++) {
    gpt_keep_log(&nodes.d[i]);
    if (failed)
      spt_daemon_dump_log(&nodes.d[i]);
    status[i] = spt_daemon_stop(&nodes.d[i]);
  }
  for (int i = 0; i < NODES; i++)
    ck_assert_msg(status[i] == 0, "%s %s: node %d's spcolld exited with "
                  "%d, want 0", p->label, p->group, i, status[i]);
  ck_assert_msg(failed == 0, "%s %s: %d of %d rank(s) failed; first: %s",
                p->label, p->group, failed, p->world,
                why[0] ? why : "(no reason reported)");
}

/* One device all_gather of 4 KiB a rank in a new group; 0 or the error. */
static int device_gather(spc_client *c, const char *name, int rank,
                         int world, char *why, size_t len) {
  float *d = NULL;
  spc_group *g = NULL;
  spc_buffer *b = NULL;
  int64_t n[1] = {1024}, all[1] = {1024 * (int64_t)world};
  spc_tensor in, out;
  GPT_CUDA(cudaMalloc((void **)&d, (size_t)(world + 1) * 4096));
  GPT_CUDA(cudaMemset(d, rank, 4096));
  int rc = spc_group_join(c, name, world, rank, &g);
  if (rc == 0)
    rc = spc_buffer_register_device(c, d, (size_t)(world + 1) * 4096, &b);
  if (rc == 0)
    rc = spc_tensor_init(&in, b, 0, SPC_FLOAT32, 1, n);
  if (rc == 0)
    rc = spc_tensor_init(&out, b, 4096, SPC_FLOAT32, 1, all);
  if (rc == 0)
    rc = spc_all_gather(g, &in, &out, 0, NULL);
  snprintf(why, len, "%s", rc < 0 ? spc_last_error(c) : "");
  if (b != NULL)
    spc_buffer_free(b);
  if (g != NULL)
    spc_group_leave(g);
  cudaFree(d);
  return rc;
}

/* arg: the number of device ops each rank must see refused (0: run). */
static int bound_rank(int rank, int world, void *arg) {
  int refused = *(const int *)arg, bad = 0;
  char why[512], name[32];
  GPT_CUDA(cudaSetDevice(0));
  spc_client *c = spt_connect(nodes.d[rank].socket);
  for (int i = 0; c != NULL && i < 3; i++) {
    snprintf(name, sizeof(name), "gpu-mn-stage-%d-%d", refused, i);
    int rc = device_gather(c, name, rank, world, why, sizeof(why));
    int ok = refused ? rc < 0 && strstr(why, "xnode_staging_bytes") : rc == 0;
    if (!ok) {
      fprintf(stderr, "rank %d op %d: rc %d (%s), want %s\n", rank, i, rc,
              why, refused ? "refused naming xnode_staging_bytes" : "0");
      bad++;
    }
  }
  spc_disconnect(c);
  return c == NULL || bad;
}

/* 3 ranks, one per node, 4 KiB each: 4 streams a phase, one 1 MiB
 * staging chunk each (SPD_PEER_CHUNK): 4 MiB. */
static void bound_run(const char *bytes, int refused) {
  const char *const extra[] = {"--xnode-staging-bytes", bytes, NULL};
  ck_assert_int_eq(spt_nodes_start(&nodes, NODES, extra), 0);
  int failed = spt_run_ranks(NODES, bound_rank, &refused, 120);
  int status[NODES];
  for (int i = 0; i < NODES; i++) {
    if (failed)
      spt_daemon_dump_log(&nodes.d[i]);
    status[i] = spt_daemon_stop(&nodes.d[i]);
  }
  for (int i = 0; i < NODES; i++)
    ck_assert_msg(status[i] == 0, "node %d's spcolld exited %d", i,
                  status[i]);
  ck_assert_msg(failed == 0, "xnode_staging_bytes %s: %d rank(s) failed",
                bytes, failed);
}

/* (e): (a) with --xnode-direct 2, UCX given the device addresses as a
 * UCX that moves CUDA memory would be. On spcsim device memory is host
 * memory, so this UCX can; it checks the direct path's proxies, mappings
 * and order, not a CUDA-capable UCX (none here). With the staging pool
 * at its 1 MiB minimum every op would be refused if it staged. */
START_TEST(six_ranks_direct) {
  static const char *const extra[] = {"--xnode-direct", "2",
                                      "--xnode-staging-bytes", "1048576",
                                      NULL};
  static const placement p = {"(e)", "gpu-mn-6-direct", 6,
                              {0, 1, 2, 0, 1, 2}, {0, 0, 0, 0, 0, 0}, extra,
                              0};
  run_placement(&p);
}
END_TEST

#define LOST_ELEMS (2 << 20) /* 8 MiB of float a rank */

/* Device all-gathers of verified data in group `name` of the ranks on
 * `nodes_used` nodes (rank r on node r % nodes_used), until one fails or
 * iters are done; a byte to ready_fd after the first. Exit: 0 done,
 * 10 - status of the failure (which must name node 2 unless it is the
 * rank's own daemon that went), 1 setup or wrong data. */
static int lost_loop(int rank, int world, int nodes_used, const char *name,
                     int iters, int ready_fd) {
  size_t in_b = LOST_ELEMS * sizeof(float), all = in_b * (size_t)world;
  float *d, *h = malloc(all);
  spc_group *g;
  spc_buffer *b;
  GPT_CUDA(cudaSetDevice(0));
  GPT_CUDA(cudaMalloc((void **)&d, in_b + all));
  spc_client *c = spt_connect(nodes.d[rank % nodes_used].socket);
  /* Node 2's ranks wait for their daemon a second at most. */
  if (h == NULL || c == NULL || spc_set_reconnect_timeout(c, 1000) < 0 ||
      spc_group_join(c, name, world, rank, &g) < 0 ||
      spc_buffer_register_device(c, d, in_b + all, &b) < 0) {
    fprintf(stderr, "rank %d setup: %s\n", rank, c ? spc_last_error(c) : "");
    return 1;
  }
  int64_t s1[1] = {LOST_ELEMS}, s2[1] = {(int64_t)LOST_ELEMS * world};
  spc_tensor in, out;
  spc_tensor_init(&in, b, 0, SPC_FLOAT32, 1, s1);
  spc_tensor_init(&out, b, in_b, SPC_FLOAT32, 1, s2);
  for (int i = 0; i < LOST_ELEMS; i++)
    h[i] = (float)(rank * LOST_ELEMS + i);
  GPT_CUDA(cudaMemcpy(d, h, in_b, cudaMemcpyHostToDevice));
  for (int it = 0; it < iters; it++) {
    int rc = spc_all_gather(g, &in, &out, 0, NULL);
    if (rc < 0) {
      fprintf(stderr, "rank %d op %d: %s: %s\n", rank, it, spc_strerror(rc),
              spc_last_error(c));
      /* The survivors are told which node went (node 2's own ranks lost
       * their daemon). */
      if (rank % nodes_used != 2 && !strstr(spc_last_error(c), "node 2"))
        return 1;
      return 10 - rc;
    }
    GPT_CUDA(cudaMemcpy(h, (uint8_t *)d + in_b, all, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < all / sizeof(float); i++)
      if (h[i] != (float)i) {
        fprintf(stderr, "rank %d op %d: element %zu is %g\n", rank, it, i,
                (double)h[i]);
        return 1;
      }
    if (it == 0 && ready_fd >= 0 && write(ready_fd, "r", 1) != 1)
      return 1;
  }
  spc_buffer_free(b);
  spc_group_leave(g);
  spc_disconnect(c);
  cudaFree(d);
  free(h);
  return 0;
}

static void fork_lost(pid_t *pids, int world, int nodes_used, const char *name,
                      int iters, int ready_fd) {
  for (int r = 0; r < world; r++) {
    pids[r] = fork();
    ck_assert_int_ge(pids[r], 0);
    if (pids[r] == 0)
      _exit(lost_loop(r, world, nodes_used, name, iters, ready_fd));
  }
}

/* Whether node i's log says a stage closed with buffers out. */
static int buffers_left_out(int i) {
  FILE *f = fopen(nodes.d[i].log, "r");
  char line[512];
  int bad = 0;
  while (f != NULL && fgets(line, sizeof(line), f))
    bad |= strstr(line, "buffers out") != NULL;
  if (f != NULL)
    fclose(f);
  return bad;
}

START_TEST(node_lost_mid_op) {
  const char *const extra[] = {"--peer-timeout", "3", NULL};
  enum { W = 6 };
  ck_assert_int_eq(spt_nodes_start(&nodes, NODES, extra), 0);
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t pids[W];
  int codes[W];
  fork_lost(pids, W, NODES, "gpu-mn-lost", 1000000, fds[1]);
  close(fds[1]);
  char buf[W];
  for (int got = 0, n; got < W && (n = (int)read(fds[0], buf, W)) > 0;)
    got += n;
  close(fds[0]);
  ck_assert_int_eq(kill(nodes.d[2].pid, SIGKILL), 0);
  waitpid(nodes.d[2].pid, NULL, 0);
  nodes.d[2].pid = 0;
  int hung = spt_reap(pids, codes, W, 60);
  for (int i = 0; hung && i < 2; i++)
    spt_daemon_dump_log(&nodes.d[i]);
  ck_assert_msg(hung == 0, "%d rank(s) still running 60 s after the loss",
                hung);
  for (int r = 0; r < W; r++) {
    int on_victim = r % NODES == 2;
    /* The group would form again if node 2 came back
     * (test_restart_nodes); node 2's ranks may give up on their daemon. */
    int want = 10 - SPC_ERESTARTED;
    int also = on_victim ? 10 - SPC_ECONNECTION : 10 - SPC_EPEERLOST;
    ck_assert_msg(codes[r] == want || codes[r] == also,
                  "rank %d exit %d, wanted %d or %d", r, codes[r], want, also);
  }
  /* The survivors run device ops across the two nodes left. */
  pid_t again[4];
  int acodes[4];
  fork_lost(again, 4, 2, "gpu-mn-after-loss", 3, -1);
  ck_assert_int_eq(spt_reap(again, acodes, 4, 120), 0);
  for (int r = 0; r < 4; r++)
    ck_assert_msg(acodes[r] == 0, "after the loss, rank %d exit %d", r,
                  acodes[r]);
  for (int i = 0; i < 2; i++)
    ck_assert_msg(!buffers_left_out(i), "node %d's log: a stage closed with "
                  "buffers out", i);
  for (int i = 0; i < 2; i++)
    ck_assert_int_eq(spt_daemon_stop(&nodes.d[i]), 0);
}
END_TEST

START_TEST(staging_is_bounded) {
  bound_run("3145728", 1);
  bound_run("4194304", 0);
}
END_TEST

START_TEST(six_ranks_round_robin_one_gpu) {
  static const placement p = {"(a)", "gpu-mn-6-gpu0", 6,
                              {0, 1, 2, 0, 1, 2}, {0, 0, 0, 0, 0, 0}, NULL,
                              0};
  run_placement(&p);
}
END_TEST

START_TEST(six_ranks_two_gpus_per_node) {
  static const placement p = {"(b)", "gpu-mn-6-2gpus", 6,
                              {0, 1, 2, 0, 1, 2}, {0, 0, 0, 1, 1, 1}, NULL,
                              0};
  run_placement(&p);
}
END_TEST

/* (a) again with the device tensors in symmetric buffers: the group
 * spans nodes, so the buffers take no op (each rank says why) and every
 * op goes through the daemons as in (a). */
START_TEST(six_ranks_symmetric_buffers) {
  static const placement p = {"(f)", "gpu-mn-6-sym", 6,
                              {0, 1, 2, 0, 1, 2}, {0, 0, 0, 0, 0, 0}, NULL,
                              1};
  run_placement(&p);
}
END_TEST

START_TEST(three_ranks_one_per_node) {
  static const placement p = {"(c)", "gpu-mn-3-one-each", 3, {0, 1, 2},
                              {0, 0, 0}, NULL, 0};
  run_placement(&p);
}
END_TEST

START_TEST(five_ranks_uneven) {
  static const placement p = {"(d)", "gpu-mn-5-uneven", 5, {0, 0, 0, 1, 2},
                              {0, 0, 0, 0, 0}, NULL, 0};
  run_placement(&p);
}
END_TEST

int main(void) {
  int ngpu = gpt_require_gpu();
  Suite *s = suite_create("gpu_multinode");
  TCase *tc = tcase_create("gpu_multinode");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, six_ranks_round_robin_one_gpu);
  /* Placements that need more GPUs are not run (and not counted) here. */
  if (ngpu >= 2)
    tcase_add_test(tc, six_ranks_two_gpus_per_node);
  else
    printf("not run: six_ranks_two_gpus_per_node needs 2 GPUs, %d found\n",
           ngpu);
  tcase_add_test(tc, three_ranks_one_per_node);
  tcase_add_test(tc, five_ranks_uneven);
  tcase_add_test(tc, six_ranks_symmetric_buffers);
  tcase_add_test(tc, staging_is_bounded);
  tcase_add_test(tc, node_lost_mid_op);
  /* Only where device memory is host memory (spcsim): this UCX cannot
   * read a real GPU's. */
  if (getenv("SPCSIM_STATE") != NULL)
    tcase_add_test(tc, six_ranks_direct);
  else
    printf("not run: six_ranks_direct needs a UCX that moves CUDA memory, "
           "or spcsim\n");
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}

#else /* !SPC_HAVE_CUDA */

int main(void) {
  gpt_require_gpu();
  return 77;
}

#endif
