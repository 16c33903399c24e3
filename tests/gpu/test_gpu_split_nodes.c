/* A group across nodes split into sub-groups of one node each: those are
 * local groups, so the GPU engines take their ops on device tensors (a
 * group across nodes has no GPU engine). 3 daemons on loopback UCX, 6
 * ranks (rank r on node r % 3, on GPU 0), split by node into pairs whose
 * all-gather of device memory must be right and counted by a GPU mover of
 * their node, never by UCX. Without a GPU: "skipped: no GPU", exit 77. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "gpu_testlib.h"
#include "spcoll.h"

#ifdef SPC_HAVE_CUDA

#define NODES 3
#define WORLD 6
#define N 4096

static spt_nodes nodes;

static int rank_fail(spc_client *c, int rank, const char *what, int rc) {
  fprintf(stderr, "rank %d: %s: %s (%s)\n", rank, what, spc_strerror(rc),
          c ? spc_last_error(c) : "no connection");
  return 1;
}

static int rank_main(int rank, int world, void *arg) {
  (void)arg;
  float *dev, host[2 * N];
  spc_client *c = spt_connect(nodes.d[rank % NODES].socket);
  spc_group *g = NULL, *sub = NULL;
  spc_buffer *b = NULL;
  spc_buffer *yb = NULL;
  float *y;
  GPT_CUDA(cudaSetDevice(0));
  GPT_CUDA(cudaMalloc((void **)&dev, N * sizeof(float)));
  GPT_CUDA(cudaMalloc((void **)&y, 2 * N * sizeof(float)));
  int rc = c ? spc_group_join(c, "gpusplit", world, rank, &g) : -1;
  if (rc == 0)
    rc = spc_group_split(g, rank % NODES, rank, &sub);
  if (rc == 0)
    rc = spc_buffer_register_device(c, dev, N * sizeof(float), &b);
  if (rc == 0)
    rc = spc_buffer_register_device(c, y, 2 * N * sizeof(float), &yb);
  if (rc < 0)
    return rank_fail(c, rank, "setup", rc);
  if (sub == NULL || spc_group_spans_nodes(sub) || spc_group_size(sub) != 2 ||
      spc_group_rank(sub) != rank / NODES || !spc_group_spans_nodes(g)) {
    fprintf(stderr, "rank %d: sub-group %p spans %d, size %d, rank %d\n",
            rank, (void *)sub, sub ? spc_group_spans_nodes(sub) : -1,
            sub ? spc_group_size(sub) : -1, sub ? spc_group_rank(sub) : -1);
    return 1;
  }
  int me = spc_group_rank(sub);
  for (int i = 0; i < N; i++)
    host[i] = (float)(me * N + i);
  GPT_CUDA(cudaMemcpy(dev, host, N * sizeof(float), cudaMemcpyHostToDevice));
  int64_t s1[1] = {N}, s2[1] = {2 * N};
  spc_tensor in, out;
  spc_tensor_init(&in, b, 0, SPC_FLOAT32, 1, s1);
  spc_tensor_init(&out, yb, 0, SPC_FLOAT32, 1, s2);
  if ((rc = spc_all_gather(sub, &in, &out, 0, NULL)) < 0)
    return rank_fail(c, rank, "all_gather of device tensors", rc);
  GPT_CUDA(cudaMemcpy(host, y, 2 * N * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < 2 * N; i++)
    if (host[i] != (float)i) {
      fprintf(stderr, "rank %d: element %d is %g\n", rank, i,
              (double)host[i]);
      return 1;
    }
  spc_buffer_free(yb);
  spc_buffer_free(b);
  spc_group_leave(sub);
  spc_group_leave(g);
  spc_disconnect(c);
  cudaFree(y);
  cudaFree(dev);
  return 0;
}

/* The GPU movers' op counts of node i. */
static long long gpu_ops(int i) {
  long long cuda = gpt_stat(&nodes.d[i], "mover_cuda_ops");
  long long nccl = gpt_stat(&nodes.d[i], "mover_nccl_ops");
  return cuda < 0 || nccl < 0 ? -1 : cuda + nccl;
}

START_TEST(sub_groups_of_one_node_run_on_the_gpu) {
  ck_assert_int_eq(spt_nodes_start(&nodes, NODES, NULL), 0);
  int failed = spt_run_ranks(WORLD, rank_main, NULL, 240);
  for (int i = 0; i < NODES; i++) {
    long long gpu = gpu_ops(i), ucx = gpt_stat(&nodes.d[i], "mover_ucx_ops");
    gpt_keep_log(&nodes.d[i]);
    if (failed)
      spt_daemon_dump_log(&nodes.d[i]);
    ck_assert_msg(gpu >= 1 && ucx == 0, "node %d: %lld GPU mover ops, %lld "
                  "UCX ops", i, gpu, ucx);
  }
  ck_assert_int_eq(spt_nodes_stop(&nodes), 0);
  ck_assert_msg(failed == 0, "%d rank(s) failed", failed);
}
END_TEST

int main(void) {
  gpt_require_gpu();
  Suite *s = suite_create("gpu_split_nodes");
  TCase *tc = tcase_create("gpu_split_nodes");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, sub_groups_of_one_node_run_on_the_gpu);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}

#else /* !SPC_HAVE_CUDA */

int main(void) {
  gpt_require_gpu();
  return 77;
}

#endif
