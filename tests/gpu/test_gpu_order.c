/* Queue and return: a device op ordered through stream flags returns to
 * its caller while the GPU has not even reached it, runs once the
 * caller's earlier work is done, and its result is there for the work the
 * caller queues after it. Each rank's stream is held at a gate (a wait on
 * a host word the rank opens itself) before the input is written; the op
 * is started and waited on behind it, and its output copied out behind
 * that. With interprocess events (SPCOLL_GPU_ORDER=events, or a GPU
 * without stream memory operations) the same wait blocks the host until
 * the gate opens: the negative control. Also: a failed op releases the
 * stream and reports its status later, the daemon counts the way each
 * rank was ordered, a collective on one stream completes while the
 * rank's compute stream is still busy, the order holds where the
 * simulator's GPUs lack
 * stream memory operations, and the checks see a wait missing on either
 * side (the negative controls). Without a GPU: "skipped: no GPU", exit 77. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "gpu_testlib.h"

#ifdef SPC_HAVE_CUDA

#define N 4096 /* floats per rank */

static spt_daemon daemon_;

/* What the ranks share with the test: per rank, whether its wait returned
 * before its gate opened. */
typedef struct {
  int events;                /* the ranks ask for events */
} order_arg;

typedef struct {
  spc_request *req;
  cudaStream_t s;
  int rc;
  volatile int returned;
} waiter;

static void *wait_thread(void *p) {
  waiter *w = p;
  w->rc = spc_wait_on_stream(&w->req, w->s);
  __atomic_store_n(&w->returned, 1, __ATOMIC_RELEASE);
  return NULL;
}

/* One rank's all-gather of N floats: rank r's input is r * N + i, so the
 * output on every rank is 0 .. world * N - 1. Its client, group, device
 * buffer (input, then output), pinned host copies and tensors. */
typedef struct {
  spc_client *c;
  spc_group *g;
  spc_buffer *d;
  uint8_t *base;
  float *in, *out;
  size_t out_bytes;
  spc_tensor dx, dy;
  spc_op op;
} gather_rank;

/* ... on GPU dev, the group's op timeout op_timeout_ms (0: the
 * daemon's). */
static int gather_setup_on(gather_rank *a, const char *group, int rank,
                           int world, int dev, int64_t op_timeout_ms) {
  GPT_CUDA(cudaSetDevice(dev));
  a->c = spt_connect(daemon_.socket);
  if (a->c == NULL || spc_set_op_timeout(a->c, op_timeout_ms) < 0 ||
      spc_group_join(a->c, group, world, rank, &a->g) < 0 ||
      spc_buffer_alloc_device(a->c, dev, (size_t)(world + 1) * N * 4,
                              &a->d) < 0) {
    fprintf(stderr, "rank %d setup: %s\n", rank,
            a->c ? spc_last_error(a->c) : "");
    return 1;
  }
  a->out_bytes = (size_t)world * N * 4;
  GPT_CUDA(cudaMallocHost((void **)&a->in, N * 4));
  GPT_CUDA(cudaMallocHost((void **)&a->out, a->out_bytes));
  for (int i = 0; i < N; i++)
    a->in[i] = (float)(rank * N + i);
  memset(a->out, 0, a->out_bytes);
  a->base = spc_buffer_data(a->d);
  GPT_CUDA(cudaMemset(a->base, 0, (size_t)(world + 1) * N * 4));
  int64_t in_s[1] = {N}, out_s[1] = {(int64_t)world * N};
  spc_tensor_init(&a->dx, a->d, 0, SPC_FLOAT32, 1, in_s);
  spc_tensor_init(&a->dy, a->d, N * 4, SPC_FLOAT32, 1, out_s);
  a->op = spc_op_all_gather(0, NULL);
  return 0;
}

static int gather_setup(gather_rank *a, const char *group, int rank,
                        int world) {
  return gather_setup_on(a, group, rank, world, 0, 0);
}

/* The host copy of the output on stream s. */
static int gather_read(gather_rank *a, cudaStream_t s) {
  GPT_CUDA(cudaMemcpyAsync(a->out, a->base + N * 4, a->out_bytes,
                           cudaMemcpyDeviceToHost, s));
  return 0;
}

/* Whether the host copy is the right output. */
static int gather_right(const gather_rank *a, int world) {
  for (int i = 0; i < world * N; i++)
    if (a->out[i] != (float)i)
      return 0;
  return 1;
}

static int gather_teardown(gather_rank *a) {
  int bad = spc_buffer_free(a->d) != SPC_OK;
  spc_disconnect(a->c);
  GPT_CUDA(cudaFreeHost(a->in));
  GPT_CUDA(cudaFreeHost(a->out));
  return bad;
}

/* Behind a held stream: the input written, the op started and waited
 * on, the output read. */
static int gated_main(int rank, int world, void *argp) {
  const order_arg *arg = argp;
  gather_rank a;
  gpt_held h;
  /* The gate last: allocating device memory synchronizes the device. */
  if (gather_setup(&a, "gpu-order", rank, world) || gpt_hold(&h))
    return 1;
  GPT_CUDA(cudaMemcpyAsync(a.base, a.in, N * 4, cudaMemcpyHostToDevice,
                           h.s));
  waiter w = {.s = h.s};
  if (spc_start_on_stream(a.g, &a.op, &a.dx, &a.dy, h.s, &w.req) < 0) {
    fprintf(stderr, "rank %d start: %s\n", rank, spc_last_error(a.c));
    return 1;
  }
  pthread_t t;
  if (pthread_create(&t, NULL, wait_thread, &w) != 0)
    return 1;
  /* Queue and return comes back at once; with events the wait needs the
   * daemon's answer, which needs the op to run, which needs the gate.
   * 300 ms is no performance bound: it is how long the negative control
   * gives a wait that must not return at all before the gate opens. */
  for (int i = 0; i < 300 && !__atomic_load_n(&w.returned, __ATOMIC_ACQUIRE);
       i++)
    usleep(1000);
  int returned = __atomic_load_n(&w.returned, __ATOMIC_ACQUIRE);
  int bad = 0;
  if (returned != !arg->events) {
    fprintf(stderr, "rank %d: spc_wait_on_stream %s before the stream ran "
            "(%s)\n", rank, returned ? "returned" : "did not return",
            arg->events ? "events" : "stream flags");
    bad = 1;
  }
  if (returned) /* nothing behind the gate has run */
    bad |= gather_read(&a, h.s);
  if (returned && cudaStreamQuery(h.s) != cudaErrorNotReady) {
    fprintf(stderr, "rank %d: the stream ran past its gate\n", rank);
    bad = 1;
  }
  gpt_open_gate(&h);
  pthread_join(t, NULL);
  if (!returned)
    bad |= gather_read(&a, h.s);
  GPT_CUDA(cudaStreamSynchronize(h.s));
  int rc = w.rc == SPC_OK ? spc_async_error(a.c, 1) : w.rc;
  if (rc != SPC_OK || !gather_right(&a, world)) {
    fprintf(stderr, "rank %d: op %d (%s), output %s\n", rank, rc,
            spc_last_error(a.c), gather_right(&a, world) ? "right" : "wrong");
    bad = 1;
  }
  GPT_CUDA(cudaStreamDestroy(h.s));
  return bad | gather_teardown(&a);
}

/* A daemon with var=value in its environment and the ranks' (none when
 * var is NULL); 2 ranks of fn; the stats counters after. */
static void run_ranks(const char *var, const char *value, spt_rank_fn fn,
                      void *arg, long long *flags, long long *events) {
  const char *const extra[] = {"--log-level", "debug", NULL};
  if (var != NULL)
    setenv(var, value, 1);
  ck_assert_int_eq(spt_daemon_start(&daemon_, extra), 0);
  int failed = spt_run_ranks(2, fn, arg, 120);
  if (var != NULL)
    unsetenv(var);
  *flags = gpt_stat(&daemon_, "gpu_order_flags");
  *events = gpt_stat(&daemon_, "gpu_order_events");
  gpt_keep_log(&daemon_);
  if (failed)
    spt_daemon_dump_log(&daemon_);
  ck_assert_int_eq(spt_daemon_stop(&daemon_), 0);
  ck_assert_int_eq(failed, 0);
}

/* gated_main's ranks (events: they expect to be ordered by events), the
 * daemon's count of each way after. */
static void gated_case(const char *var, const char *value, int events,
                       long long want_flags, long long want_events) {
  order_arg a = {events};
  long long flags, events_n;
  run_ranks(var, value, gated_main, &a, &flags, &events_n);
  ck_assert_int_eq(flags, want_flags);
  ck_assert_int_eq(events_n, want_events);
}

START_TEST(stream_flags_queue_and_return) {
  gated_case(NULL, NULL, 0, 2, 0);
}
END_TEST

/* The negative control: the same test fails its queue-and-return check
 * with events, whose wait blocks. */
START_TEST(events_block_until_the_stream_runs) {
  gated_case("SPCOLL_GPU_ORDER", "events", 1, 0, 2);
}
END_TEST

/* GPUs without stream memory operations: the client finds out and falls
 * back to events (and the daemon would refuse flags), same results. The
 * simulator reads SPCSIM_NO_STREAM_MEM_OPS when a process starts, so this
 * runs in a fresh one (no_stream_memory_ops_falls_back_to_events). */
START_TEST(no_memops_events) {
  gated_case(NULL, NULL, 1, 0, 2);
}
END_TEST

START_TEST(no_stream_memory_ops_falls_back_to_events) {
  fflush(stdout);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    setenv("SPCSIM_NO_STREAM_MEM_OPS", "1", 1);
    setenv("CK_RUN_CASE", "no_memops", 1);
    execl("/proc/self/exe", "test_gpu_order", (char *)NULL);
    _exit(127);
  }
  int st = 0;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                "the suite without stream memory operations failed (%d)", st);
}
END_TEST

/* Ranks disagree (rank 1 gathers into a wrong size): the op fails on
 * both; with flags each stream is released all the same, the status comes
 * through spc_async_error, and the next op runs. */
static int failing_main(int rank, int world, void *arg) {
  (void)arg;
  GPT_CUDA(cudaSetDevice(0));
  cudaStream_t s;
  GPT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  spc_client *c = spt_connect(daemon_.socket);
  spc_group *g;
  spc_buffer *d;
  if (c == NULL || spc_group_join(c, "gpu-order-fail", world, rank, &g) < 0 ||
      spc_buffer_alloc_device(c, 0, 1 << 16, &d) < 0)
    return 1;
  int64_t in_s[1] = {64}, out_s[1] = {64 * 2}, bad_s[1] = {64 * 2 + 1};
  spc_tensor dx, dy, dz;
  spc_tensor_init(&dx, d, 0, SPC_FLOAT32, 1, in_s);
  spc_tensor_init(&dy, d, 4096, SPC_FLOAT32, 1, out_s);
  spc_tensor_init(&dz, d, 4096, SPC_FLOAT32, 1, bad_s);
  spc_op op = spc_op_all_gather(0, NULL);
  int bad = 0;
  int rc = spc_run_on_stream(g, &op, &dx, rank == 1 ? &dz : &dy, s);
  GPT_CUDA(cudaStreamSynchronize(s)); /* released: no hang */
  if (rc == SPC_OK)
    rc = spc_async_error(c, 1);
  if (rc != SPC_EINVAL) {
    fprintf(stderr, "rank %d: failed op: %d (%s), want SPC_EINVAL\n", rank,
            rc, spc_last_error(c));
    bad = 1;
  }
  if (spc_async_error(c, 1) != SPC_OK) { /* once */
    fprintf(stderr, "rank %d: the failure came twice\n", rank);
    bad = 1;
  }
  rc = spc_run_on_stream(g, &op, &dx, &dy, s);
  GPT_CUDA(cudaStreamSynchronize(s));
  if (rc == SPC_OK)
    rc = spc_async_error(c, 1);
  if (rc != SPC_OK) {
    fprintf(stderr, "rank %d: next op: %d (%s)\n", rank, rc,
            spc_last_error(c));
    bad = 1;
  }
  if (spc_buffer_free(d) != SPC_OK)
    bad = 1;
  spc_disconnect(c);
  GPT_CUDA(cudaStreamDestroy(s));
  return bad;
}

/* The negative controls of the ordering itself: with a wait missing on
 * either side the same checks see a wrong output. ready: the op goes on an
 * idle stream, not the held one that writes the input, so the daemon
 * reads the old input at once. done: the output is copied out on a stream
 * that did not wait for the op, so it is copied before the op ran. */
static int control_main(int rank, int world, void *argp) {
  int missing_done = *(const int *)argp;
  gather_rank a;
  cudaStream_t other;
  gpt_held h;
  if (gather_setup(&a, "gpu-order-ctl", rank, world))
    return 1;
  GPT_CUDA(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  if (gpt_hold(&h))
    return 1;
  GPT_CUDA(cudaMemcpyAsync(a.base, a.in, N * 4, cudaMemcpyHostToDevice,
                           h.s));
  cudaStream_t on = missing_done ? h.s : other;
  int rc = spc_run_on_stream(a.g, &a.op, &a.dx, &a.dy, on);
  /* ready missing: read after the op, on its stream; done missing: read
   * on the other stream, which never waited for the op. */
  int bad = gather_read(&a, other);
  GPT_CUDA(cudaStreamSynchronize(other));
  int wrong = !gather_right(&a, world);
  gpt_open_gate(&h);
  GPT_CUDA(cudaStreamSynchronize(h.s));
  if (rc == SPC_OK)
    rc = spc_async_error(a.c, 1);
  if (rc != SPC_OK || !wrong) {
    fprintf(stderr, "rank %d: %s missing: op %d (%s), output %s\n", rank,
            missing_done ? "done wait" : "ready wait", rc,
            spc_last_error(a.c),
            wrong ? "wrong" : "right: the check cannot see a missing wait");
    bad = 1;
  }
  GPT_CUDA(cudaStreamDestroy(h.s));
  GPT_CUDA(cudaStreamDestroy(other));
  return bad | gather_teardown(&a);
}

/* The legacy default stream (NULL) waits for work already queued on
 * blocking streams, which a query of it does not see: the input is
 * written on a held blocking stream and the op goes on the legacy stream,
 * whose ready flag must wait for it. A client that took the legacy stream
 * for idle (and set the flag from the host) lets the daemon read the old
 * input: the negative control the checks must see. 100 ms is no
 * performance bound: it is how long the daemon has to read too early. */
static int legacy_main(int rank, int world, void *argp) {
  (void)argp;
  gather_rank a;
  gpt_held h;
  if (gather_setup(&a, "gpu-order-legacy", rank, world) ||
      gpt_hold_flags(&h, cudaStreamDefault))
    return 1;
  GPT_CUDA(cudaMemcpyAsync(a.base, a.in, N * 4, cudaMemcpyHostToDevice,
                           h.s));
  spc_request *req = NULL;
  int rc = spc_start_on_stream(a.g, &a.op, &a.dx, &a.dy, NULL, &req);
  if (rc == SPC_OK)
    rc = spc_wait_on_stream(&req, NULL);
  usleep(100000);
  gpt_open_gate(&h);
  int bad = gather_read(&a, NULL);
  GPT_CUDA(cudaStreamSynchronize(NULL));
  if (rc == SPC_OK)
    rc = spc_async_error(a.c, 1);
  if (rc != SPC_OK || !gather_right(&a, world)) {
    fprintf(stderr, "rank %d: op on the legacy stream: %d (%s), output "
            "%s\n", rank, rc, spc_last_error(a.c),
            gather_right(&a, world) ? "right" : "wrong: read before the "
            "blocking stream wrote the input");
    bad = 1;
  }
  GPT_CUDA(cudaStreamDestroy(h.s));
  return bad | gather_teardown(&a);
}

START_TEST(the_legacy_stream_waits_for_blocking_streams) {
  long long flags, events;
  run_ranks(NULL, NULL, legacy_main, NULL, &flags, &events);
  ck_assert_int_eq(flags, 2);
}
END_TEST

/* The control with the ready wait (missing_done 0) or the done wait (1)
 * left out, on both ranks, ordered with stream flags. */
static void control_case(int missing_done) {
  long long flags, events;
  run_ranks(NULL, NULL, control_main, &missing_done, &flags, &events);
  ck_assert_int_eq(flags, 2);
}

START_TEST(a_missing_ready_wait_is_seen) { control_case(0); }
END_TEST

START_TEST(a_missing_done_wait_is_seen) { control_case(1); }
END_TEST

/* Compute and communication overlap: a rank's "compute" stream is held
 * (its work does not finish) while a collective queued on a second stream
 * runs to its end, result checked, before the compute is let go. */
static int overlap_main(int rank, int world, void *arg) {
  (void)arg;
  gather_rank a;
  cudaStream_t comm;
  gpt_held compute;
  if (gather_setup(&a, "gpu-order-ovl", rank, world))
    return 1;
  GPT_CUDA(cudaMemcpy(a.base, a.in, N * 4, cudaMemcpyHostToDevice));
  GPT_CUDA(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking));
  if (gpt_hold(&compute))
    return 1;
  int rc = spc_run_on_stream(a.g, &a.op, &a.dx, &a.dy, comm);
  int bad = gather_read(&a, comm);
  GPT_CUDA(cudaStreamSynchronize(comm)); /* the compute is still held */
  if (rc == SPC_OK)
    rc = spc_async_error(a.c, 1);
  if (cudaStreamQuery(compute.s) != cudaErrorNotReady) {
    fprintf(stderr, "rank %d: the compute stream was not busy\n", rank);
    bad = 1;
  }
  if (rc != SPC_OK || !gather_right(&a, world)) {
    fprintf(stderr, "rank %d: op %d (%s), output %s\n", rank, rc,
            spc_last_error(a.c), gather_right(&a, world) ? "right" : "wrong");
    bad = 1;
  }
  gpt_open_gate(&compute);
  GPT_CUDA(cudaStreamSynchronize(compute.s));
  GPT_CUDA(cudaStreamDestroy(compute.s));
  GPT_CUDA(cudaStreamDestroy(comm));
  return bad | gather_teardown(&a);
}

START_TEST(a_collective_overlaps_compute) {
  long long flags, events;
  run_ranks(NULL, NULL, overlap_main, NULL, &flags, &events);
  ck_assert_int_eq(flags, 2);
}
END_TEST

START_TEST(failed_op_releases_the_stream) {
  long long flags, events;
  run_ranks(NULL, NULL, failing_main, NULL, &flags, &events);
  ck_assert_int_eq(events, 0);
}
END_TEST

/* A group's ops queued behind each other: each rank starts CHAIN ops on
 * its held stream, each reading what the one before wrote (all_gather
 * A -> B, then reduce_scatter B -> A, which doubles A), and waits on all
 * of them behind; the daemon takes every op while the first has not run
 * (the gate is shut) and hands each to the CUDA mover behind the one
 * before (ops_queued_behind), whose stream waits for its end. Once the
 * gate opens the chain runs in order: A is 2^(CHAIN/2) times the input,
 * bitwise. With that wait cut out of the mover the ops run at once and
 * the check sees it (mutation run by hand). */
#define CHAIN 8

typedef struct {
  int spread;   /* 1: rank r on GPU r (the NCCL mover), else all on GPU 0 */
  int fail;     /* the chain's op whose launch fails (SPCSIM_FAIL_LAUNCH);
                 * -1: none */
} chain_arg;

static int chain_main(int rank, int world, void *argp) {
  const chain_arg *arg = argp;
  int spread = arg->spread;
  /* Behind a failed op nothing is queued: it has no end to wait for. */
  long long want = arg->fail < 0 ? CHAIN - 1 : arg->fail;
  gather_rank a;
  gpt_held h;
  if (gather_setup_on(&a, "gpu-chain", rank, world, spread ? rank : 0, 0))
    return 1;
  /* One op first: the NCCL mover makes its communicators on a set's first
   * op, and an op waiting for them is not on the set's streams yet. */
  if (spc_run_on_stream(a.g, &a.op, &a.dx, &a.dy, NULL) < 0 ||
      cudaDeviceSynchronize() != cudaSuccess ||
      spc_async_error(a.c, 1) != SPC_OK || gpt_hold(&h)) {
    fprintf(stderr, "rank %d: %s\n", rank, spc_last_error(a.c));
    return 1;
  }
  GPT_CUDA(cudaMemcpyAsync(a.base, a.in, N * 4, cudaMemcpyHostToDevice,
                           h.s));
  spc_op gather = spc_op_all_gather(0, NULL);
  spc_op rs = spc_op_reduce_scatter(0, NULL);
  spc_request *req[CHAIN];
  int bad = 0;
  for (int k = 0; k < CHAIN && !bad; k++)
    bad = spc_start_on_stream(a.g, k % 2 ? &rs : &gather,
                              k % 2 ? &a.dy : &a.dx, k % 2 ? &a.dx : &a.dy,
                              h.s, &req[k]) < 0;
  for (int k = 0; k < CHAIN && !bad; k++)
    bad = spc_wait_on_stream(&req[k], h.s) < 0;
  if (bad) {
    fprintf(stderr, "rank %d: %s\n", rank, spc_last_error(a.c));
    return 1;
  }
  GPT_CUDA(cudaMemcpyAsync(a.out, a.base, N * 4, cudaMemcpyDeviceToHost,
                           h.s));
  /* Every op reached the daemon and went to the mover behind the one
   * before, while the first still waits behind the gate: a guard of 30 s,
   * not a timing check. */
  long long behind = 0;
  for (int i = 0; i < 3000 && behind < want; i++) {
    behind = gpt_stat(&daemon_, "ops_queued_behind");
    if (behind < want)
      usleep(10000);
  }
  if (arg->fail >= 0) { /* none more while the gate is shut */
    usleep(300000);
    behind = gpt_stat(&daemon_, "ops_queued_behind");
  }
  gpt_open_gate(&h);
  GPT_CUDA(cudaStreamSynchronize(h.s));
  int rc = spc_async_error(a.c, 1);
  float scale = (float)(1 << (CHAIN / 2));
  int wrong = 0;
  for (int i = 0; i < N && !wrong && arg->fail < 0; i++)
    wrong = a.out[i] != scale * a.in[i];
  if (behind != want || rc != (arg->fail < 0 ? SPC_OK : SPC_EDEVICE) ||
      wrong) {
    fprintf(stderr, "rank %d: %lld ops queued behind (want %lld), ops %d "
            "(%s), output %s\n", rank, behind, want, rc, spc_last_error(a.c),
            wrong ? "wrong" : "right");
    bad = 1;
  }
  GPT_CUDA(cudaStreamDestroy(h.s));
  return bad | gather_teardown(&a);
}

/* A stuck op takes the ops queued behind it along at the op timeout:
 * rank 0's stream is gpt_held for good, so the group's first op never runs;
 * both ranks started three ops (the last two queued behind the first)
 * and wait for their answers: the first times out, the other two fail
 * with it, saying they were queued behind it, in their order. */
static int stuck_chain_main(int rank, int world, void *arg) {
  (void)arg;
  gather_rank a;
  gpt_held h;
  if (gather_setup_on(&a, "gpu-stuck-chain", rank, world, 0, 1000) ||
      gpt_hold(&h))
    return 1;
  if (rank == 1)
    gpt_open_gate(&h);
  spc_request *req[3];
  int bad = 0;
  for (int k = 0; k < 3 && !bad; k++)
    bad = spc_start_on_stream(a.g, &a.op, &a.dx, &a.dy, h.s, &req[k]) < 0;
  for (int k = 0; k < 3 && !bad; k++) {
    int rc = spc_wait(&req[k]);
    const char *msg = spc_last_error(a.c);
    const char *want = k == 0 ? "timed out after" : "was queued behind op";
    if (rc != SPC_ETIMEDOUT || strstr(msg, want) == NULL) {
      fprintf(stderr, "rank %d op %d: %d (%s), want SPC_ETIMEDOUT saying "
              "'%s'\n", rank, k, rc, msg, want);
      bad = 1;
    }
  }
  gpt_open_gate(&h);
  GPT_CUDA(cudaStreamSynchronize(h.s));
  GPT_CUDA(cudaStreamDestroy(h.s));
  return bad | gather_teardown(&a);
}

START_TEST(queued_ops_time_out_with_the_stuck_one) {
  long long flags, events;
  run_ranks(NULL, NULL, stuck_chain_main, NULL, &flags, &events);
  ck_assert_int_eq(flags, 6);
}
END_TEST

/* An op that fails before its engine has it waits for the answer of the
 * op ahead of it: both ranks' streams are gpt_held shut under op 0; op 1,
 * whose output on rank 0 is on GPU 1 (a rank's tensors must share a
 * GPU), is queued behind op 0 and refused at submission; its answer
 * comes only after op 0's, once the gates open (300 ms of polling is how
 * long this gives an answer that must not come at all before). */
static int late_fail_main(int rank, int world, void *arg) {
  (void)arg;
  gather_rank a;
  gpt_held h;
  spc_buffer *other = NULL;
  spc_tensor dy1 = {0};
  if (gather_setup(&a, "gpu-late-fail", rank, world))
    return 1;
  dy1 = a.dy;
  if (rank == 0) {
    int64_t s[1] = {(int64_t)world * N};
    if (spc_buffer_alloc_device(a.c, 1, (size_t)world * N * 4, &other) < 0)
      return 1;
    GPT_CUDA(cudaSetDevice(0));
    spc_tensor_init(&dy1, other, 0, SPC_FLOAT32, 1, s);
  }
  if (gpt_hold(&h))
    return 1;
  spc_request *req[2];
  if (spc_start_on_stream(a.g, &a.op, &a.dx, &a.dy, h.s, &req[0]) < 0 ||
      spc_start_on_stream(a.g, &a.op, &a.dx, &dy1, h.s, &req[1]) < 0) {
    fprintf(stderr, "rank %d: %s\n", rank, spc_last_error(a.c));
    return 1;
  }
  int done = 0, bad = 0;
  for (int i = 0; i < 300 && !done; i++)
    if (spc_test(&req[1], &done) == SPC_OK && !done)
      usleep(1000);
  if (done) {
    fprintf(stderr, "rank %d: op 1 answered before op 0\n", rank);
    bad = 1;
  }
  gpt_open_gate(&h);
  int rc0 = spc_wait(&req[0]);
  int rc1 = done ? SPC_EINVAL : spc_wait(&req[1]);
  if (rc0 != SPC_OK || rc1 != SPC_EINVAL) {
    fprintf(stderr, "rank %d: op 0 %d, op 1 %d (%s)\n", rank, rc0, rc1,
            spc_last_error(a.c));
    bad = 1;
  }
  GPT_CUDA(cudaStreamSynchronize(h.s));
  GPT_CUDA(cudaStreamDestroy(h.s));
  if (other != NULL && spc_buffer_free(other) != SPC_OK)
    bad = 1;
  return bad | gather_teardown(&a);
}

START_TEST(an_op_failing_at_start_answers_after_the_op_ahead) {
  long long flags, events;
  run_ranks(NULL, NULL, late_fail_main, NULL, &flags, &events);
}
END_TEST

static void chain_case(int spread) {
  chain_arg a = {spread, -1};
  long long flags, events;
  run_ranks(NULL, NULL, chain_main, &a, &flags, &events);
  ck_assert_int_eq(flags, 2 * (CHAIN + 1));
}

START_TEST(ops_queue_behind_each_other) { chain_case(0); }
END_TEST

START_TEST(nccl_ops_queue_behind_each_other) { chain_case(1); }
END_TEST

/* The daemon's third launch (the chain's op 1, after the first op and
 * op 0) fails as it is queued: op 1 fails on both ranks, and no op is
 * queued behind it (its job has no end event), so the count stays at 1
 * while the gate is shut; the rest run once it is done. */
START_TEST(no_op_queues_behind_a_failed_one) {
  chain_arg a = {0, 1};
  long long flags, events;
  run_ranks("SPCSIM_FAIL_LAUNCH", "spcolld:3", chain_main, &a, &flags,
            &events);
}
END_TEST

int main(void) {
  int ngpu = gpt_require_gpu();
  Suite *s = suite_create("gpu_order");
  if (getenv("SPCSIM_NO_STREAM_MEM_OPS") != NULL) {
    /* The fresh process of no_stream_memory_ops_falls_back_to_events. */
    TCase *tn = tcase_create("no_memops");
    tcase_set_timeout(tn, 180);
    tcase_add_test(tn, no_memops_events);
    suite_add_tcase(s, tn);
    return spt_run_suite(s);
  }
  TCase *tc = tcase_create("gpu_order");
  tcase_set_timeout(tc, 180);
  tcase_add_test(tc, stream_flags_queue_and_return);
  tcase_add_test(tc, events_block_until_the_stream_runs);
  tcase_add_test(tc, failed_op_releases_the_stream);
  tcase_add_test(tc, a_missing_ready_wait_is_seen);
  tcase_add_test(tc, a_missing_done_wait_is_seen);
  tcase_add_test(tc, the_legacy_stream_waits_for_blocking_streams);
  tcase_add_test(tc, a_collective_overlaps_compute);
  tcase_add_test(tc, ops_queue_behind_each_other);
  tcase_add_test(tc, queued_ops_time_out_with_the_stuck_one);
  if (ngpu >= 2)
    tcase_add_test(tc, an_op_failing_at_start_answers_after_the_op_ahead);
  if (getenv("SPCSIM_STATE") != NULL)
    tcase_add_test(tc, no_op_queues_behind_a_failed_one);
  else
    printf("not run: no_op_queues_behind_a_failed_one needs the "
           "simulator's fault injection\n");
  if (ngpu >= 2)
    tcase_add_test(tc, nccl_ops_queue_behind_each_other);
  else
    printf("not run: nccl_ops_queue_behind_each_other needs 2 GPUs\n");
  if (getenv("SPCSIM_STATE") != NULL)
    tcase_add_test(tc, no_stream_memory_ops_falls_back_to_events);
  else
    printf("not run: no_stream_memory_ops_falls_back_to_events needs the "
           "simulator's GPUs without stream memory operations\n");
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}

#else

int main(void) {
  printf("skipped: no GPU (built without CUDA)\n");
  return 77;
}

#endif
