/* Symmetric buffers (spc_buffer_alloc_symmetric): an op runs on the
 * ranks' own streams, each copying from the others' memory, ordered by
 * the ranks' flags words alone.
 * - Queue and return: a rank's op returns while another rank's stream,
 *   held at a gate, has not written its input yet; the first rank's
 *   stream waits for it, and every output is right once the gate opens.
 * - Done wait: a rank that overwrites its input on its stream right after
 *   the op does not hurt a peer whose stream reads it later.
 * - The negative controls: with the input written on a stream the op was
 *   not ordered after, or overwritten on one that did not wait for it,
 *   the same checks see a wrong output.
 * - Agreement: sizes that differ fail on every rank; a rank that turns the
 *   path off (SPCOLL_GPU_SYMMETRIC=0) keeps every rank's buffer on the
 *   daemon's path, still right.
 * Each on one GPU and on two (one rank per GPU). Without a GPU: "skipped:
 * no GPU", exit 77. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "gpu_testlib.h"

#ifdef SPC_HAVE_CUDA

#define N 4096 /* floats per rank */

static spt_daemon daemon_;
static int ngpu;

/* One rank's all-gather of N floats in a symmetric buffer: input at 0
 * (rank r holds r * N + i), output after it, so every rank's output is
 * 0 .. 2N - 1. */
typedef struct {
  spc_client *c;
  spc_group *g;
  spc_buffer *sym, *host;
  uint8_t *base;
  float *in, *out;
  spc_tensor x, y;
  spc_op op;
  cudaStream_t s;
} sym_rank;

/* What a run asks of its ranks. */
typedef struct {
  int gpus;         /* 1: both ranks on GPU 0; 2: rank r on GPU r */
  int control;      /* the negative control: the order broken on purpose */
} sym_arg;

static int sym_setup(sym_rank *a, const char *group, int rank, int world,
                     const sym_arg *arg, size_t bytes) {
  int dev = arg->gpus > 1 ? rank : 0;
  GPT_CUDA(cudaSetDevice(dev));
  GPT_CUDA(cudaStreamCreateWithFlags(&a->s, cudaStreamNonBlocking));
  a->c = spt_connect(daemon_.socket);
  int rc = a->c == NULL ? -1 : spc_group_join(a->c, group, world, rank, &a->g);
  if (rc == SPC_OK)
    rc = spc_buffer_alloc(a->c, 64, &a->host);
  if (rc == SPC_OK)
    rc = spc_buffer_alloc_symmetric(a->g, dev, bytes, &a->sym);
  if (rc < 0) {
    fprintf(stderr, "rank %d setup: %s\n", rank,
            a->c ? spc_last_error(a->c) : "no connection");
    return 1;
  }
  GPT_CUDA(cudaMallocHost((void **)&a->in, N * 4));
  GPT_CUDA(cudaMallocHost((void **)&a->out, 2 * N * 4));
  for (int i = 0; i < N; i++)
    a->in[i] = (float)(rank * N + i);
  memset(a->out, 0, 2 * N * 4);
  a->base = spc_buffer_data(a->sym);
  int64_t in_s[1] = {N}, out_s[1] = {2 * N};
  spc_tensor_init(&a->x, a->sym, 0, SPC_FLOAT32, 1, in_s);
  spc_tensor_init(&a->y, a->sym, N * 4, SPC_FLOAT32, 1, out_s);
  a->op = spc_op_all_gather(0, NULL);
  return 0;
}

/* The ranks meet (a host op through the daemon). */
static int host_barrier(sym_rank *a) {
  spc_tensor t;
  int64_t one[1] = {1};
  spc_op op = spc_op_all_reduce(SPC_SUM);
  return spc_tensor_init(&t, a->host, 0, SPC_INT32, 1, one) < 0 ||
         spc_run(a->g, &op, &t, &t) < 0;
}

static int output_right(const sym_rank *a) {
  for (int i = 0; i < 2 * N; i++)
    if (a->out[i] != (float)i)
      return 0;
  return 1;
}

/* The symmetric path ran `want` ops on this rank, none went elsewhere. */
static int path_ran(const sym_rank *a, int rank, uint64_t want) {
  spc_gpu_paths st;
  char why[256];
  if (!spc_buffer_symmetric(a->sym, why, sizeof(why))) {
    fprintf(stderr, "rank %d: buffer not symmetric: %s\n", rank, why);
    return 0;
  }
  if (spc_gpu_path_stats(a->c, &st) != SPC_OK || st.sym_ops != want ||
      st.sym_daemon_ops != 0) {
    fprintf(stderr, "rank %d: %llu symmetric ops, %llu to the daemon; want "
            "%llu, 0\n", rank, (unsigned long long)st.sym_ops,
            (unsigned long long)st.sym_daemon_ops, (unsigned long long)want);
    return 0;
  }
  return 1;
}

static int sym_teardown(sym_rank *a) {
  int bad = spc_buffer_free(a->sym) != SPC_OK;
  bad |= spc_buffer_free(a->host) != SPC_OK;
  spc_group_leave(a->g);
  spc_disconnect(a->c);
  GPT_CUDA(cudaFreeHost(a->in));
  GPT_CUDA(cudaFreeHost(a->out));
  GPT_CUDA(cudaStreamDestroy(a->s));
  return bad;
}

/* The verdict: right output (wrong for the negative control, where the
 * check must see the broken order). */
static int verdict(const sym_rank *a, int rank, int control,
                   const char *what) {
  int right = output_right(a);
  if (right == !control)
    return 0;
  fprintf(stderr, "rank %d (%s%s): output %s\n", rank, what,
          control ? ", negative control" : "", right ? "right: the check "
          "cannot see a broken order" : "wrong");
  return 1;
}

/* Rank 1 writes its input on a held stream and queues the op behind it
 * (the control: on its idle stream instead); rank 0 queues the op and
 * its read on its own stream. Both calls return at once; rank 0's stream
 * cannot get past the op until rank 1's gate opens. */
static int ready_main(int rank, int world, void *argp) {
  const sym_arg *arg = argp;
  sym_rank a;
  gpt_held h;
  if (sym_setup(&a, "sym-ready", rank, world, arg, 3 * N * 4))
    return 1;
  cudaStream_t on = a.s;
  if (rank == 1) {
    if (gpt_hold(&h))
      return 1;
    GPT_CUDA(cudaMemcpyAsync(a.base, a.in, N * 4, cudaMemcpyHostToDevice,
                             h.s));
    on = arg->control ? a.s : h.s;
  } else {
    GPT_CUDA(cudaMemcpyAsync(a.base, a.in, N * 4, cudaMemcpyHostToDevice,
                             on));
  }
  int bad = 0;
  if (spc_run_on_stream(a.g, &a.op, &a.x, &a.y, on) != SPC_OK) {
    fprintf(stderr, "rank %d op: %s\n", rank, spc_last_error(a.c));
    bad = 1;
  }
  GPT_CUDA(cudaMemcpyAsync(a.out, a.base + N * 4, 2 * N * 4,
                           cudaMemcpyDeviceToHost, on));
  /* Not a bound on time: how long rank 0 looks for a stream that must
   * not have run. */
  if (rank == 0 && !arg->control) {
    usleep(100000);
    if (cudaStreamQuery(on) != cudaErrorNotReady) {
      fprintf(stderr, "rank 0: its stream ran past the op before rank 1 "
              "wrote its input\n");
      bad = 1;
    }
  } else if (rank == 0) { /* the control's read, done before the gate */
    GPT_CUDA(cudaStreamSynchronize(on));
  }
  bad |= host_barrier(&a);
  if (rank == 1)
    gpt_open_gate(&h);
  GPT_CUDA(cudaStreamSynchronize(on));
  if (rank == 1)
    GPT_CUDA(cudaStreamSynchronize(h.s));
  bad |= (rank == 0 || !arg->control) &&
         verdict(&a, rank, arg->control, "ready wait");
  bad |= !path_ran(&a, rank, 1);
  if (rank == 1)
    GPT_CUDA(cudaStreamDestroy(h.s));
  return bad | sym_teardown(&a);
}

/* Both inputs written first. Rank 1's stream is held before its op, and
 * on spcsim each of its stream ops starts 30 ms late (so it reads rank 0's
 * input well after its own ready word is written); rank 0 overwrites its
 * input right after the op on its own stream (the control: on another
 * stream, which did not wait for the op). Rank 1 must still read rank 0's
 * input as it was. */
static int done_main(int rank, int world, void *argp) {
  const sym_arg *arg = argp;
  sym_rank a;
  gpt_held h;
  cudaStream_t other;
  if (rank == 1)
    setenv("SPCSIM_SLOW_STREAMS", "test_gpu_sym:30000", 1);
  if (sym_setup(&a, "sym-done", rank, world, arg, 3 * N * 4))
    return 1;
  GPT_CUDA(cudaMemcpy(a.base, a.in, N * 4, cudaMemcpyHostToDevice));
  GPT_CUDA(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  cudaStream_t on = a.s;
  if (rank == 1) {
    if (gpt_hold(&h))
      return 1;
    on = h.s;
  }
  int bad = 0;
  if (spc_run_on_stream(a.g, &a.op, &a.x, &a.y, on) != SPC_OK) {
    fprintf(stderr, "rank %d op: %s\n", rank, spc_last_error(a.c));
    bad = 1;
  }
  if (rank == 0) {
    cudaStream_t w = arg->control ? other : on;
    GPT_CUDA(cudaMemsetAsync(a.base, 0xff, N * 4, w));
    GPT_CUDA(cudaStreamSynchronize(other));
  }
  GPT_CUDA(cudaMemcpyAsync(a.out, a.base + N * 4, 2 * N * 4,
                           cudaMemcpyDeviceToHost, on));
  bad |= host_barrier(&a);
  if (rank == 1)
    gpt_open_gate(&h);
  GPT_CUDA(cudaStreamSynchronize(on));
  bad |= (rank == 1 || !arg->control) &&
         verdict(&a, rank, arg->control, "done wait");
  bad |= !path_ran(&a, rank, 1);
  if (rank == 1)
    GPT_CUDA(cudaStreamDestroy(h.s));
  GPT_CUDA(cudaStreamDestroy(other));
  return bad | sym_teardown(&a);
}

/* An all_reduce (the movers' kernel on the ranks' streams: reduce steps,
 * then copies of the other ranks' reduced pieces) with rank 1's stream
 * ops starting 30 ms late on spcsim: rank 0 must wait for rank 1's piece
 * before it copies it. Sums of 0 .. N-1 and r * N + i, bitwise. */
static int reduce_main(int rank, int world, void *argp) {
  sym_rank a;
  if (rank == 1)
    setenv("SPCSIM_SLOW_STREAMS", "test_gpu_sym:30000", 1);
  if (sym_setup(&a, "sym-reduce", rank, world, argp, 3 * N * 4))
    return 1;
  int64_t shape[1] = {N};
  spc_tensor y;
  spc_op op = spc_op_all_reduce(SPC_SUM);
  spc_tensor_init(&y, a.sym, N * 4, SPC_FLOAT32, 1, shape);
  GPT_CUDA(cudaMemcpyAsync(a.base, a.in, N * 4, cudaMemcpyHostToDevice,
                           a.s));
  int bad = spc_run_on_stream(a.g, &op, &a.x, &y, a.s) != SPC_OK;
  GPT_CUDA(cudaMemcpyAsync(a.out, a.base + N * 4, N * 4,
                           cudaMemcpyDeviceToHost, a.s));
  GPT_CUDA(cudaStreamSynchronize(a.s));
  for (int i = 0; i < N && !bad; i++)
    if (a.out[i] != (float)i + (float)(N + i)) {
      fprintf(stderr, "rank %d: element %d is %g, want %g\n", rank, i,
              (double)a.out[i], (double)((float)i + (float)(N + i)));
      bad = 1;
    }
  bad |= !path_ran(&a, rank, 1);
  return bad | sym_teardown(&a);
}

/* Rank 0 issues op 1 on a held stream (its input written there first)
 * and op 2, in the same buffer, on its own idle stream; rank 1 issues
 * both on one stream. Op 2 must not stand in for op 1: rank 1's op 1
 * output has rank 0's input, and both ops' outputs are right. Op 2
 * gathers into a second output past the first. */
static int streams_main(int rank, int world, void *argp) {
  sym_rank a;
  gpt_held h;
  if (sym_setup(&a, "sym-streams", rank, world, argp, 5 * N * 4))
    return 1;
  spc_tensor y2;
  int64_t out_s[1] = {2 * N};
  spc_tensor_init(&y2, a.sym, 3 * N * 4, SPC_FLOAT32, 1, out_s);
  cudaStream_t first = a.s;
  if (rank == 0) {
    if (gpt_hold(&h))
      return 1;
    first = h.s;
  }
  GPT_CUDA(cudaMemcpyAsync(a.base, a.in, N * 4, cudaMemcpyHostToDevice,
                           first));
  int bad = spc_run_on_stream(a.g, &a.op, &a.x, &a.y, first) != SPC_OK;
  bad |= spc_run_on_stream(a.g, &a.op, &a.x, &y2, a.s) != SPC_OK;
  bad |= host_barrier(&a);
  if (rank == 0)
    gpt_open_gate(&h);
  GPT_CUDA(cudaStreamSynchronize(first));
  GPT_CUDA(cudaStreamSynchronize(a.s));
  for (int o = 0; o < 2 && !bad; o++) {
    GPT_CUDA(cudaMemcpy(a.out, a.base + (1 + 2 * o) * N * 4, 2 * N * 4,
                        cudaMemcpyDeviceToHost));
    bad |= verdict(&a, rank, 0, o ? "op 2, other stream" : "op 1");
  }
  bad |= !path_ran(&a, rank, 2);
  if (rank == 0)
    GPT_CUDA(cudaStreamDestroy(h.s));
  return bad | sym_teardown(&a);
}

/* Ops of no elements take the path too, a copy and one the kernel runs
 * (a scaled all_gather: no descriptors to make). */
static int empty_main(int rank, int world, void *argp) {
  sym_rank a;
  if (sym_setup(&a, "sym-empty", rank, world, argp, 3 * N * 4))
    return 1;
  int64_t none[1] = {0};
  spc_tensor x, y;
  spc_tensor_init(&x, a.sym, 0, SPC_FLOAT32, 1, none);
  spc_tensor_init(&y, a.sym, N * 4, SPC_FLOAT32, 1, none);
  spc_op scaled = spc_op_scaled(a.op, SPC_SCALE_DOWN);
  int bad = 0;
  for (int i = 0; i < 2; i++)
    if (spc_run_on_stream(a.g, i ? &scaled : &a.op, &x, &y, a.s) != SPC_OK) {
      fprintf(stderr, "rank %d: empty %s op: %s\n", rank, i ? "scaled" :
              "plain", spc_last_error(a.c));
      bad = 1;
    }
  GPT_CUDA(cudaStreamSynchronize(a.s));
  bad |= !path_ran(&a, rank, 2);
  return bad | sym_teardown(&a);
}

/* Sizes that differ: SPC_EMISMATCH on every rank, naming both. */
static int sizes_main(int rank, int world, void *argp) {
  (void)argp;
  spc_client *c = spt_connect(daemon_.socket);
  spc_group *g;
  spc_buffer *b = NULL;
  if (c == NULL || spc_group_join(c, "sym-sizes", world, rank, &g) < 0)
    return 1;
  int rc = spc_buffer_alloc_symmetric(g, 0, rank == 0 ? 4096 : 8192, &b);
  const char *e = spc_last_error(c);
  int bad = rc != SPC_EMISMATCH || b != NULL ||
            strstr(e, "4096 on rank 0") == NULL ||
            strstr(e, "8192 on rank 1") == NULL;
  if (bad)
    fprintf(stderr, "rank %d: %d (%s), want SPC_EMISMATCH naming the "
            "sizes\n", rank, rc, spc_last_error(c));
  spc_group_leave(g);
  spc_disconnect(c);
  return bad;
}

/* Rank 1 turns the path off: both buffers say so, and the op goes through
 * the daemon, right. */
static int off_main(int rank, int world, void *argp) {
  sym_rank a;
  if (rank == 1)
    setenv("SPCOLL_GPU_SYMMETRIC", "0", 1);
  if (sym_setup(&a, "sym-off", rank, world, argp, 3 * N * 4))
    return 1;
  char why[256];
  int bad = spc_buffer_symmetric(a.sym, why, sizeof(why)) ||
            strstr(why, "rank 1: SPCOLL_GPU_SYMMETRIC=0") == NULL;
  if (bad)
    fprintf(stderr, "rank %d: symmetric buffer with the path off on rank "
            "1: %s\n", rank, why);
  GPT_CUDA(cudaMemcpy(a.base, a.in, N * 4, cudaMemcpyHostToDevice));
  if (spc_run_on_stream(a.g, &a.op, &a.x, &a.y, a.s) != SPC_OK)
    bad = 1;
  GPT_CUDA(cudaMemcpyAsync(a.out, a.base + N * 4, 2 * N * 4,
                           cudaMemcpyDeviceToHost, a.s));
  GPT_CUDA(cudaStreamSynchronize(a.s));
  bad |= verdict(&a, rank, 0, "path off");
  spc_gpu_paths st;
  if (spc_gpu_path_stats(a.c, &st) != SPC_OK || st.sym_ops != 0 ||
      st.sym_daemon_ops != 0)
    bad = 1;
  return bad | sym_teardown(&a);
}

static void run(spt_rank_fn fn, int gpus, int control) {
  sym_arg a = {gpus, control};
  const char *const extra[] = {"--log-level", "debug", NULL};
  gpt_run_on_daemon(&daemon_, extra, 2, fn, &a, 120);
}

/* The daemon counts what the clients report of the path: one op per
 * rank, none sent to it. */
START_TEST(op_returns_before_a_held_peer_wrote_its_input) {
  sym_arg a = {1, 0};
  const char *const extra[] = {"--log-level", "debug", NULL};
  ck_assert_int_eq(spt_daemon_start(&daemon_, extra), 0);
  int failed = spt_run_ranks(2, ready_main, &a, 120);
  long long ops = gpt_stat(&daemon_, "gpu_sym_ops");
  long long bytes = gpt_stat(&daemon_, "gpu_sym_bytes");
  long long sent = gpt_stat(&daemon_, "gpu_sym_daemon_ops");
  gpt_keep_log(&daemon_);
  if (failed)
    spt_daemon_dump_log(&daemon_);
  ck_assert_int_eq(spt_daemon_stop(&daemon_), 0);
  ck_assert_int_eq(failed, 0);
  ck_assert_int_eq(ops, 2);
  ck_assert_int_eq(bytes, 2 * 2 * N * 4);
  ck_assert_int_eq(sent, 0);
}
END_TEST

START_TEST(op_returns_before_a_held_peer_two_gpus) { run(ready_main, 2, 0); }
END_TEST

START_TEST(a_missing_ready_wait_is_seen) { run(ready_main, 1, 1); }
END_TEST

START_TEST(input_kept_until_every_rank_read_it) { run(done_main, 1, 0); }
END_TEST

START_TEST(input_kept_until_every_rank_read_it_two_gpus) {
  run(done_main, 2, 0);
}
END_TEST

START_TEST(a_missing_done_wait_is_seen) { run(done_main, 1, 1); }
END_TEST

START_TEST(sizes_that_differ_fail_on_every_rank) { run(sizes_main, 1, 0); }
END_TEST

START_TEST(all_reduce_waits_for_every_ranks_reduce) { run(reduce_main, 1, 0); }
END_TEST

START_TEST(ops_on_two_streams_keep_their_order) { run(streams_main, 1, 0); }
END_TEST

START_TEST(ops_of_no_elements) { run(empty_main, 1, 0); }
END_TEST

START_TEST(all_reduce_waits_for_every_ranks_reduce_two_gpus) {
  run(reduce_main, 2, 0);
}
END_TEST

START_TEST(one_rank_off_keeps_every_rank_on_the_daemon) {
  run(off_main, 1, 0);
}
END_TEST

int main(void) {
  ngpu = gpt_require_gpu();
  Suite *s = suite_create("gpu_sym");
  TCase *tc = tcase_create("gpu_sym");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, op_returns_before_a_held_peer_wrote_its_input);
  tcase_add_test(tc, a_missing_ready_wait_is_seen);
  tcase_add_test(tc, input_kept_until_every_rank_read_it);
  tcase_add_test(tc, a_missing_done_wait_is_seen);
  tcase_add_test(tc, sizes_that_differ_fail_on_every_rank);
  tcase_add_test(tc, all_reduce_waits_for_every_ranks_reduce);
  tcase_add_test(tc, ops_on_two_streams_keep_their_order);
  tcase_add_test(tc, ops_of_no_elements);
  tcase_add_test(tc, one_rank_off_keeps_every_rank_on_the_daemon);
  if (ngpu >= 2) {
    tcase_add_test(tc, op_returns_before_a_held_peer_two_gpus);
    tcase_add_test(tc, input_kept_until_every_rank_read_it_two_gpus);
    tcase_add_test(tc, all_reduce_waits_for_every_ranks_reduce_two_gpus);
  } else {
    printf("not run: the two-GPU cases need 2 GPUs, %d found\n", ngpu);
  }
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}

#else /* !SPC_HAVE_CUDA */

int main(void) {
  printf("skipped: no GPU (built without CUDA)\n");
  return 77;
}

#endif
