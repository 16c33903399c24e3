/* The rules suite's part on NCCL: communicators, cliques and their
 * streams (sim_rules.c runs it). */
#include <check.h>
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim_rules.h"

/* ---- NCCL ---- */

static void two_ranks_one_device(void) {
  ncclComm_t comms[2];
  int devs[2] = {0, 0};
  ncclCommInitAll(comms, 2, devs);
}

START_TEST(nccl_two_ranks_on_one_device) {
  ck_assert(rejected(two_ranks_one_device, "nccl-two-ranks-one-device"));
}
END_TEST

static ncclComm_t shared[2];
static volatile int held;

static void *hold_comm(void *arg) {
  void *buf = arg;
  S(ncclGroupStart());
  S(ncclSend(buf, 16, ncclUint8, 1, shared[0], 0));
  held = 1;
  for (;;)
    pause();
  return NULL;
}

static void concurrent_comm(void) {
  S(ncclCommInitAll(shared, 2, NULL));
  void *buf;
  S(cudaMalloc(&buf, 4096));
  pthread_t t;
  if (pthread_create(&t, NULL, hold_comm, buf) != 0)
    die("pthread_create");
  while (!held)
    usleep(1000);
  S(ncclGroupStart());
  ncclSend(buf, 16, ncclUint8, 1, shared[0], 0);
}

START_TEST(nccl_comm_from_two_threads) {
  ck_assert(rejected(concurrent_comm, "nccl-concurrent-comm"));
}
END_TEST

static void collective_outside_group(void) {
  ncclComm_t comms[2];
  void *buf;
  S(ncclCommInitAll(comms, 2, NULL));
  S(cudaMalloc(&buf, 4096));
  ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comms[0], 0);
}

START_TEST(nccl_collective_of_one_rank_outside_group) {
  ck_assert(rejected(collective_outside_group, "nccl-group-required"));
}
END_TEST

/* A collective runs once, whatever the number of ranks: in place, an
 * all-reduce of two ranks' ones is 2 everywhere (run once per rank, 4). */
START_TEST(nccl_in_place_collective_runs_once) {
  ncclComm_t c[2];
  cudaStream_t s[2];
  float *buf[2], ones[16], got[16];
  for (int i = 0; i < 16; i++)
    ones[i] = 1;
  OK(ncclCommInitAll(c, 2, NULL));
  for (int r = 0; r < 2; r++) {
    OK(cudaSetDevice(r));
    OK(cudaStreamCreateWithFlags(&s[r], cudaStreamNonBlocking));
    OK(cudaMalloc((void **)&buf[r], sizeof(ones)));
    OK(cudaMemcpy(buf[r], ones, sizeof(ones), cudaMemcpyHostToDevice));
  }
  OK(ncclGroupStart());
  for (int r = 0; r < 2; r++)
    OK(ncclAllReduce(buf[r], buf[r], 16, ncclFloat32, ncclSum, c[r], s[r]));
  OK(ncclGroupEnd());
  for (int r = 0; r < 2; r++) {
    OK(cudaStreamSynchronize(s[r]));
    OK(cudaMemcpy(got, buf[r], sizeof(got), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 16; i++)
      ck_assert_msg(got[i] == 2.0f, "rank %d element %d: %g", r, i,
                    (double)got[i]);
    OK(cudaFree(buf[r]));
    OK(cudaStreamDestroy(s[r]));
    OK(ncclCommDestroy(c[r]));
  }
}
END_TEST

/* Two cliques over GPUs 0 and 1 (two ncclCommInitAll calls), an
 * all-reduce each; GPU 1's streams are held (hold_a), so each clique's
 * GPU 0 part waits there for its peer. shared_streams: both cliques on
 * the same two streams (ordered: B's part starts when A's is done);
 * otherwise each on its own (B's GPU 0 part in flight with A's). */
static void two_cliques(int shared_streams, order_t *o, float *sum) {
  ncclComm_t a[2], b[2];
  cudaStream_t s[4];
  float *buf[4], ones[16];
  for (int i = 0; i < 16; i++)
    ones[i] = 1;
  S(ncclCommInitAll(a, 2, NULL));
  S(ncclCommInitAll(b, 2, NULL));
  for (int i = 0; i < 4; i++) { /* s[0], s[2] on GPU 0; s[1], s[3] on 1 */
    S(cudaSetDevice(i % 2));
    S(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
    S(cudaMalloc((void **)&buf[i], sizeof(ones)));
    S(cudaMemcpy(buf[i], ones, sizeof(ones), cudaMemcpyHostToDevice));
  }
  S(cudaLaunchHostFunc(s[1], hold_a, o));
  S(cudaLaunchHostFunc(s[3], hold_a, o));
  for (int c = 0; c < 2; c++) {
    ncclComm_t *comm = c == 0 ? a : b;
    S(ncclGroupStart());
    for (int r = 0; r < 2; r++)
      S(ncclAllReduce(buf[2 * c + r], buf[2 * c + r], 16, ncclFloat32, ncclSum,
                      comm[r], s[shared_streams ? r : 2 * c + r]));
    S(ncclGroupEnd());
  }
  usleep(100 * 1000); /* both GPU 0 parts have reached their streams */
  __atomic_store_n(&o->go, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < 4; i++)
    S(cudaStreamSynchronize(s[i]));
  S(cudaMemcpy(sum, buf[2], sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < 4; i++) {
    S(cudaFree(buf[i]));
    S(cudaStreamDestroy(s[i]));
  }
  for (int r = 0; r < 2; r++) {
    S(ncclCommDestroy(a[r]));
    S(ncclCommDestroy(b[r]));
  }
}

static void concurrent_cliques(void) {
  static order_t o;
  float sum;
  setenv("SPCSIM_FORBID_CONCURRENT_COMMS", "1", 1);
  two_cliques(0, &o, &sum);
}

START_TEST(nccl_communicators_in_flight_on_one_device) {
  ck_assert(rejected(concurrent_cliques, "nccl-concurrent-comms"));
}
END_TEST

/* Ordered on one stream per GPU, two cliques are safe: no violation. */
START_TEST(nccl_communicators_ordered_on_one_stream) {
  static order_t o;
  float sum = 0;
  setenv("SPCSIM_FORBID_CONCURRENT_COMMS", "1", 1);
  two_cliques(1, &o, &sum);
  ck_assert_msg(sum == 2.0f, "sum %g", (double)sum);
}
END_TEST

void sim_rules_nccl(TCase *tc) {
  tcase_add_test(tc, nccl_two_ranks_on_one_device);
  tcase_add_test(tc, nccl_comm_from_two_threads);
  tcase_add_test(tc, nccl_collective_of_one_rank_outside_group);
  tcase_add_test(tc, nccl_in_place_collective_runs_once);
  tcase_add_test(tc, nccl_communicators_in_flight_on_one_device);
  tcase_add_test(tc, nccl_communicators_ordered_on_one_stream);
}
