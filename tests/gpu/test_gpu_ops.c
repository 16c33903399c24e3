/* Every op on device buffers, several client processes on one GPU,
 * against the CPU reference: each rank runs each case twice through a real
 * daemon, on host buffers (the host mover, itself checked element by
 * element against naive references by tests/integ) and on device buffers
 * (the GPU movers), and the outputs must be bitwise equal. Device inputs
 * are written and outputs read on the rank's own non-blocking stream
 * around spc_run_on_stream with no synchronization in between, so stream
 * order in both directions is part of what passes; every other case uses
 * spc_run on the legacy default stream instead. Runs with the CUDA mover
 * (4 ranks), NCCL forced (4 ranks through send/recv to itself; 1 rank
 * through NCCL's collectives), 3 ranks, and across GPUs when there are
 * several. Without a GPU: "skipped: no GPU", exit 77. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "gpu_testlib.h"
#include "half.h"
#include "spcoll.h"

#ifdef SPC_HAVE_CUDA

enum { K_SPLIT, K_GATHER, K_GATHER_UNEQ, K_A2A, K_A2AV, K_AR, K_RS, K_ZZS,
       K_ZZG, K_PKS, K_PKG };

typedef struct {
  const char *name;
  int kind;
  spc_dtype dt;
  int nd;
  int64_t shape[SPC_MAX_DIMS];
  int d, g;
  int flags;          /* reduce op (K_AR), else a grad scale; and H_* */
} gcase;

/* Values that expose the summation order, or NaNs for max/min. */
#define H_ORDER 0x100
#define H_NAN 0x200
#define FLAGS(c) ((c)->flags & 0xff)

#define MB (1 << 20)
static const int64_t seq_lens[4] = {5, 7, 3, 9};

static const gcase cases[] = {
    {"split-d1", K_SPLIT, SPC_FLOAT32, 3, {3, 10, 4}, 1, 0, 0},
    {"split-scaled-bf16", K_SPLIT, SPC_BFLOAT16, 2, {9, 6}, 0, 0, SPC_SCALE_UP},
    {"gather-d0", K_GATHER, SPC_FLOAT32, 3, {5, 3, 4}, 0, 0, 0},
    {"gather-last-f16", K_GATHER, SPC_FLOAT16, 3, {2, 3, 5}, -1, 0, 0},
    {"gather-uneq-bf16", K_GATHER_UNEQ, SPC_BFLOAT16, 3, {2, 0, 3}, 1, 0, 0},
    {"gather-i64", K_GATHER, SPC_INT64, 2, {7, 3}, 0, 0, 0},
    {"gather-scaled-down", K_GATHER, SPC_FLOAT32, 2, {4, 6}, 1, 0,
     SPC_SCALE_DOWN},
    {"gather-big-16MiB", K_GATHER, SPC_FLOAT32, 2, {1024, 4096}, 0, 0, 0},
    {"a2a-ulysses", K_A2A, SPC_FLOAT32, 4, {2, 6, 12, 8}, 2, 1, 0},
    {"a2a-s0g1-f16", K_A2A, SPC_FLOAT16, 3, {12, 5, 2}, 0, 1, 0},
    {"a2a-s1g0-u8", K_A2A, SPC_UINT8, 3, {3, 12, 7}, 1, 0, 0},
    {"a2a-5d-i8", K_A2A, SPC_INT8, 5, {2, 3, 12, 2, 3}, 2, 4, 0},
    {"a2a-scaled-f64", K_A2A, SPC_FLOAT64, 2, {12, 3}, 0, 1, SPC_SCALE_DOWN},
    {"a2a-big-ulysses", K_A2A, SPC_BFLOAT16, 4, {1, 512, 48, 128}, 2, 1, 0},
    {"a2av-rows", K_A2AV, SPC_FLOAT32, 2, {0, 6}, 0, 0, 0},
    {"allreduce-sum-f32", K_AR, SPC_FLOAT32, 2, {33, 17}, 0, 0, SPC_SUM},
    {"allreduce-sum-f16", K_AR, SPC_FLOAT16, 1, {1001}, 0, 0, SPC_SUM},
    {"allreduce-max-bf16", K_AR, SPC_BFLOAT16, 2, {8, 9}, 0, 0, SPC_MAX},
    {"allreduce-min-i32", K_AR, SPC_INT32, 1, {257}, 0, 0, SPC_MIN},
    {"allreduce-sum-i64", K_AR, SPC_INT64, 1, {100}, 0, 0, SPC_SUM},
    {"allreduce-sum-f64-big", K_AR, SPC_FLOAT64, 1, {1 << 20}, 0, 0, SPC_SUM},
    {"reducescatter-d0", K_RS, SPC_FLOAT32, 2, {13, 5}, 0, 0, 0},
    {"reducescatter-last-bf16", K_RS, SPC_BFLOAT16, 3, {2, 3, 10}, -1, 0, 0},
    {"zigzag-split", K_ZZS, SPC_FLOAT32, 3, {2, 3, 4}, 1, 0, 0},
    {"zigzag-gather-scaled", K_ZZG, SPC_BFLOAT16, 3, {2, 3, 4}, 1, 0,
     SPC_SCALE_UP},
    {"packed-split", K_PKS, SPC_FLOAT32, 2, {0, 6}, 0, 0, 0},
    {"packed-gather-down", K_PKG, SPC_FLOAT32, 2, {0, 6}, 0, 0,
     SPC_SCALE_DOWN},
    /* Sums whose value depends on the order of the additions (NCCL's ring
     * order is not rank order), and NaNs, which win in spcoll's max/min
     * but not in NCCL's (fmaxf): the device result must still be the host
     * mover's, bit for bit. */
    {"allreduce-sum-f32-order", K_AR, SPC_FLOAT32, 1, {4099}, 0, 0,
     SPC_SUM | H_ORDER},
    {"allreduce-sum-bf16-order", K_AR, SPC_BFLOAT16, 1, {777}, 0, 0,
     SPC_SUM | H_ORDER},
    {"allreduce-max-f32-nan", K_AR, SPC_FLOAT32, 1, {1000}, 0, 0,
     SPC_MAX | H_NAN},
    {"allreduce-min-f64-nan", K_AR, SPC_FLOAT64, 1, {999}, 0, 0,
     SPC_MIN | H_NAN},
    {"reducescatter-f32-order", K_RS, SPC_FLOAT32, 2, {64, 33}, 0, 0, H_ORDER},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))
#define HOST_BYTES ((size_t)96 * MB)
#define DEV_BYTES ((size_t)80 * MB)

/* What a run of the suite asks of each rank. */
typedef struct {
  const char *group;
  int ngpu;           /* rank r on GPU r % ngpu; 0: all on GPU 0 */
  const char *mover;  /* counter that must have moved: mover_cuda_ops... */
  const char *other;  /* counter that must not have */
} mode_t_;

static spt_daemon daemon_;

static int norm(int d, int nd) {
  return d < 0 ? d + nd : d;
}

static int64_t rule(int64_t n, int w, int r) {
  return n / w + (r < n % w ? 1 : 0);
}

/* This rank's op and input shape for case c. */
static spc_op case_op(const gcase *c, int r, int w, int64_t *shape,
                      int64_t *lists) {
  int d = norm(c->d, c->nd);
  memcpy(shape, c->shape, sizeof(c->shape));
  spc_op op;
  int64_t *in_splits = lists, *out_splits = lists + 8;
  switch (c->kind) {
  case K_SPLIT: op = spc_op_split(c->d, NULL); break;
  case K_GATHER: op = spc_op_all_gather(c->d, NULL); break;
  case K_GATHER_UNEQ:
    for (int j = 0; j < w; j++)
      lists[j] = j + 1;
    shape[d] = r + 1;
    op = spc_op_all_gather(c->d, lists);
    break;
  case K_A2A: op = spc_op_all_to_all(c->d, c->g, 0); break;
  case K_A2AV:
    shape[0] = 0;
    for (int j = 0; j < w; j++) {
      in_splits[j] = (r + 2 * j) % 3 + 1;  /* rows r sends j */
      out_splits[j] = (j + 2 * r) % 3 + 1; /* rows j sends r */
      shape[0] += in_splits[j];
    }
    op = spc_op_all_to_all_v(in_splits, out_splits);
    break;
  case K_AR: return spc_op_all_reduce((spc_reduce_op)FLAGS(c));
  case K_RS: op = spc_op_reduce_scatter(c->d, NULL); break;
  case K_ZZS:
    shape[d] *= 2 * w;
    op = spc_op_zigzag_split(c->d);
    break;
  case K_ZZG:
    shape[d] *= 2;
    op = spc_op_zigzag_gather(c->d);
    break;
  case K_PKS:
    shape[d] = 0;
    for (int i = 0; i < 4; i++)
      shape[d] += seq_lens[i];
    op = spc_op_packed_split(c->d, seq_lens, 4);
    break;
  default: /* K_PKG */
    shape[d] = 0;
    for (int i = 0; i < 4; i++)
      shape[d] += rule(seq_lens[i], w, r);
    op = spc_op_packed_gather(c->d, seq_lens, 4);
    break;
  }
  return FLAGS(c) ? spc_op_scaled(op, (spc_grad_scale)FLAGS(c)) : op;
}

/* Floats of magnitudes 2^-k .. 2^k, so a sum's rounding depends on the
 * order of the additions; with nan, some elements of some ranks are NaN. */
static void fill_hard(void *p, spc_dtype dt, size_t n, int rank,
                      uint64_t seed, int nan) {
  int k = dt == SPC_FLOAT16 ? 10 : 24;
  for (size_t i = 0; i < n; i++) {
    uint64_t v = (seed + 1) * 0x9e3779b97f4a7c15ull ^
                 ((uint64_t)rank * 0xbf58476d1ce4e5b9ull +
                  i * 0x94d049bb133111ebull);
    v ^= v >> 29;
    double x = ldexp(1.0 + (double)(v % 1024) / 1024.0,
                     (int)((v >> 10) % (uint64_t)(2 * k + 1)) - k);
    x = (v >> 40) & 1 ? -x : x;
    if (nan && i % 5 == (size_t)rank % 5)
      x = NAN;
    switch (dt) {
    case SPC_FLOAT32: ((float *)p)[i] = (float)x; break;
    case SPC_FLOAT64: ((double *)p)[i] = x; break;
    case SPC_FLOAT16: ((uint16_t *)p)[i] = spk_f32_to_f16((float)x); break;
    default: ((uint16_t *)p)[i] = spk_f32_to_bf16((float)x); break;
    }
  }
}

/* spt_fill's values, but 16-bit floats get finite values (NaN payloads
 * are not part of what host and device must agree on). */
static void fill(void *p, spc_dtype dt, size_t n, int rank, uint64_t seed) {
  if (dt != SPC_FLOAT16 && dt != SPC_BFLOAT16) {
    spt_fill(p, dt, n, seed, rank);
    return;
  }
  float *f = malloc(n * sizeof(float) + 1);
  spt_fill(f, SPC_FLOAT32, n, seed, rank);
  for (size_t i = 0; i < n; i++)
    ((uint16_t *)p)[i] = dt == SPC_FLOAT16 ? spk_f32_to_f16(f[i])
                                           : spk_f32_to_bf16(f[i]);
  free(f);
}

static size_t bytes_of(const int64_t *s, int nd, spc_dtype dt) {
  size_t n = spc_dtype_size(dt);
  for (int i = 0; i < nd; i++)
    n *= (size_t)s[i];
  return n;
}

typedef struct {
  spc_client *c;
  spc_group *g;
  spc_buffer *host, *dev_all;
  uint8_t *dev;            /* cudaMalloc'd, registered whole as dev_all */
  cudaStream_t stream;
  uint8_t *got;
  int rank, world;
} rank_t;

static int rank_fail(rank_t *k, const char *cs, const char *what, int rc) {
  fprintf(stderr, "[%s] rank %d: %s: %s (%s)\n", cs, k->rank, what,
          spc_strerror(rc), spc_last_error(k->c));
  return 1;
}

/* The case on device memory: inputs copied and the output poisoned on the
 * rank's stream, the op ordered after them, the result read back after
 * it, all without synchronizing in between (use_stream), or with
 * synchronous copies and spc_run. Big cases put the output in memory
 * spc_buffer_alloc_device made. */
static int device_run(rank_t *k, const gcase *c, const spc_op *op,
                      const spc_tensor *hin, const int64_t *oshape,
                      size_t in_b, size_t out_b, int use_stream) {
  int big = out_b >= 8 * MB, bad = 0;
  size_t out_at = (in_b + 4095) & ~(size_t)4095;
  spc_buffer *bin, *bout;
  int rc = spc_buffer_register_device(k->c, k->dev, in_b, &bin);
  if (rc < 0)
    return rank_fail(k, c->name, "register input", rc);
  if (big)
    rc = spc_buffer_alloc_device(k->c, spc_buffer_device(bin), out_b, &bout);
  else
    rc = spc_buffer_register_device(k->c, k->dev + out_at, out_b, &bout);
  if (rc < 0)
    return rank_fail(k, c->name, "register output", rc);
  uint8_t *dout = spc_buffer_data(bout);
  spc_tensor tin, tout;
  if (spc_tensor_init(&tin, bin, 0, c->dt, c->nd, hin->shape) < 0 ||
      spc_tensor_init(&tout, bout, 0, c->dt, c->nd, oshape) < 0)
    return rank_fail(k, c->name, "tensor_init", -1);
  if (use_stream) {
    GPT_CUDA(cudaMemcpyAsync(k->dev, spc_tensor_data(hin), in_b,
                             cudaMemcpyHostToDevice, k->stream));
    GPT_CUDA(cudaMemsetAsync(dout, 0xee, out_b, k->stream));
    rc = spc_run_on_stream(k->g, op, &tin, &tout, k->stream);
    if (rc < 0)
      return rank_fail(k, c->name, "device op on stream", rc);
    GPT_CUDA(cudaMemcpyAsync(k->got, dout, out_b, cudaMemcpyDeviceToHost,
                             k->stream));
    GPT_CUDA(cudaStreamSynchronize(k->stream));
  } else {
    GPT_CUDA(cudaMemcpy(k->dev, spc_tensor_data(hin), in_b,
                        cudaMemcpyHostToDevice));
    GPT_CUDA(cudaMemset(dout, 0xee, out_b));
    rc = spc_run(k->g, op, &tin, &tout);
    if (rc < 0)
      return rank_fail(k, c->name, "device op", rc);
    GPT_CUDA(cudaMemcpy(k->got, dout, out_b, cudaMemcpyDeviceToHost));
  }
  if ((rc = spc_buffer_free(bout)) < 0 || (rc = spc_buffer_free(bin)) < 0)
    bad |= rank_fail(k, c->name, "spc_buffer_free", rc);
  return bad;
}

static int run_case(rank_t *k, const gcase *c, int use_stream) {
  int64_t ishape[SPC_MAX_DIMS], oshape[SPC_MAX_DIMS], lists[16];
  int ond;
  spc_op op = case_op(c, k->rank, k->world, ishape, lists);
  size_t in_b = bytes_of(ishape, c->nd, c->dt);
  spc_tensor hin, hout;
  int rc = spc_tensor_init(&hin, k->host, 0, c->dt, c->nd, ishape);
  if (rc == 0)
    rc = spc_out_shape(k->g, &op, &hin, oshape, &ond);
  size_t out_b = bytes_of(oshape, ond, c->dt);
  size_t out_at = (in_b + 4095) & ~(size_t)4095;
  if (rc == 0)
    rc = spc_tensor_init(&hout, k->host, out_at, c->dt, ond, oshape);
  if (rc < 0)
    return rank_fail(k, c->name, "host tensors", rc);
  if (c->flags & (H_ORDER | H_NAN))
    fill_hard(spc_tensor_data(&hin), c->dt, in_b / spc_dtype_size(c->dt),
              k->rank, 77 + (uint64_t)(c - cases), (c->flags & H_NAN) != 0);
  else
    fill(spc_tensor_data(&hin), c->dt, in_b / spc_dtype_size(c->dt), k->rank,
         77 + (uint64_t)(c - cases));
  memset(spc_tensor_data(&hout), 0x11, out_b);
  rc = spc_run(k->g, &op, &hin, &hout);
  if (rc < 0)
    return rank_fail(k, c->name, "host op", rc);
  if (device_run(k, c, &op, &hin, oshape, in_b, out_b, use_stream))
    return 1;
  const uint8_t *want = spc_tensor_data(&hout);
  for (size_t i = 0; i < out_b; i++)
    if (k->got[i] != want[i]) {
      fprintf(stderr, "[%s] rank %d of %d: device output differs from the "
              "host's at byte %zu of %zu: 0x%02x, want 0x%02x\n", c->name,
              k->rank, k->world, i, out_b, k->got[i], want[i]);
      return 1;
    }
  return 0;
}

static int rank_main(int rank, int world, void *arg) {
  const mode_t_ *m = arg;
  rank_t k = {.rank = rank, .world = world};
  int dev = m->ngpu ? rank % m->ngpu : 0, bad = 0;
  GPT_CUDA(cudaSetDevice(dev));
  GPT_CUDA(cudaStreamCreateWithFlags(&k.stream, cudaStreamNonBlocking));
  GPT_CUDA(cudaMalloc((void **)&k.dev, DEV_BYTES));
  GPT_CUDA(cudaMallocHost((void **)&k.got, DEV_BYTES));
  k.c = spt_connect(daemon_.socket);
  int rc = k.c ? spc_group_join(k.c, m->group, world, rank, &k.g) : -1;
  if (rc == 0)
    rc = spc_buffer_alloc(k.c, HOST_BYTES, &k.host);
  /* The whole allocation stays registered: each case's buffers inside it
   * reuse that registration (no daemon round trip). */
  if (rc == 0)
    rc = spc_buffer_register_device(k.c, k.dev, DEV_BYTES, &k.dev_all);
  if (rc < 0)
    return rank_fail(&k, m->group, "setup", rc);
  if (spc_buffer_device(k.dev_all) != dev || spc_buffer_device(k.host) != -1)
    return rank_fail(&k, m->group, "spc_buffer_device", -1);
  for (size_t i = 0; i < NCASES; i++) {
    int b = run_case(&k, &cases[i], i % 2 == 0);
    if (b)
      fprintf(stderr, "[%s] rank %d: case %s FAILED\n", m->group, rank,
              cases[i].name);
    else if (rank == 0)
      fprintf(stderr, "[%s] case %s ok\n", m->group, cases[i].name);
    bad += b;
  }
  if (rank == 0 && bad == 0) {
    long long moved = gpt_stat(&daemon_, m->mover);
    long long other = gpt_stat(&daemon_, m->other);
    fprintf(stderr, "[%s] %s %lld, %s %lld\n", m->group, m->mover, moved,
            m->other, other);
    if (moved < (long long)NCASES || other != 0)
      bad++;
  }
  spc_buffer_free(k.dev_all);
  spc_buffer_free(k.host);
  spc_group_leave(k.g);
  spc_disconnect(k.c);
  cudaFree(k.dev);
  cudaFreeHost(k.got);
  cudaStreamDestroy(k.stream);
  return bad ? 1 : 0;
}

static int ngpu;

/* The GPUs on which process pid made a context, as a bit mask, from the
 * simulator's SPCSIM_CONTEXT_LOG; -1 when there is no such log (a real
 * GPU: nvidia-smi shows it there, docs/gpu.md). */
static long contexts_of(pid_t pid) {
  const char *path = getenv("SPCSIM_CONTEXT_LOG");
  FILE *f = path && *path ? fopen(path, "r") : NULL;
  if (f == NULL)
    return -1;
  long mask = 0;
  int p, d;
  while (fscanf(f, "%d %d", &p, &d) == 2)
    if (p == (int)pid && d >= 0 && d < 63)
      mask |= 1L << d;
  fclose(f);
  return mask;
}

static void run_mode(const char *mover, int world, mode_t_ *m) {
  const char *const extra[] = {"--log-level", "debug", "--mover",
                               mover ? mover : "auto", NULL};
  ck_assert_int_eq(spt_daemon_start(&daemon_, extra), 0);
  int failed = spt_run_ranks(world, rank_main, m, 240);
  gpt_keep_log(&daemon_);
  if (failed)
    spt_daemon_dump_log(&daemon_);
  pid_t pid = daemon_.pid;
  ck_assert_int_eq(spt_daemon_stop(&daemon_), 0);
  ck_assert_msg(failed == 0, "%s: %d rank(s) failed", m->group, failed);
  /* The daemon makes a context (which costs GPU memory, and fails on a GPU
   * in EXCLUSIVE_PROCESS mode used by someone else) only on the GPUs its
   * groups use. */
  long used = m->ngpu ? (1L << m->ngpu) - 1 : 1, made = contexts_of(pid);
  if (made >= 0)
    ck_assert_msg((made & ~used) == 0, "%s: spcolld made contexts on GPUs "
                  "0x%lx, its groups use 0x%lx", m->group, made, used);
}

START_TEST(cuda_mover_4_ranks_one_gpu) {
  mode_t_ m = {"gpu-cuda-4", 0, "mover_cuda_ops", "mover_nccl_ops"};
  run_mode(NULL, 4, &m);
}
END_TEST

START_TEST(cuda_mover_3_ranks_one_gpu) {
  mode_t_ m = {"gpu-cuda-3", 0, "mover_cuda_ops", "mover_nccl_ops"};
  run_mode(NULL, 3, &m);
}
END_TEST

START_TEST(nccl_forced_4_ranks_one_gpu) {
  mode_t_ m = {"gpu-nccl-4", 0, "mover_nccl_ops", "mover_cuda_ops"};
  run_mode("nccl", 4, &m);
}
END_TEST

START_TEST(nccl_forced_1_rank_collectives) {
  mode_t_ m = {"gpu-nccl-1", 0, "mover_nccl_ops", "mover_cuda_ops"};
  run_mode("nccl", 1, &m);
}
END_TEST

/* One rank per GPU: NCCL's collectives where a plan is one, else grouped
 * send/recv between the GPUs. */
START_TEST(nccl_4_ranks_4_gpus) {
  mode_t_ m = {"gpu-nccl-4x4", 4, "mover_nccl_ops", "mover_cuda_ops"};
  run_mode(NULL, 4, &m);
}
END_TEST

/* Two ranks on each of two GPUs (rank r on GPU r % 2): NCCL between the
 * GPUs, the kernel for what stays on one. */
START_TEST(mixed_2x2) {
  mode_t_ m = {"gpu-mixed-2x2", 2, "mover_nccl_ops", "mover_cuda_ops"};
  run_mode(NULL, 4, &m);
}
END_TEST

int main(void) {
  ngpu = gpt_require_gpu();
  Suite *s = suite_create("gpu_ops");
  TCase *tc = tcase_create("gpu_ops");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, cuda_mover_4_ranks_one_gpu);
  tcase_add_test(tc, cuda_mover_3_ranks_one_gpu);
  tcase_add_test(tc, nccl_forced_4_ranks_one_gpu);
  tcase_add_test(tc, nccl_forced_1_rank_collectives);
  /* Placements that need more GPUs are not run (and not counted) here. */
  if (ngpu >= 4)
    tcase_add_test(tc, nccl_4_ranks_4_gpus);
  else
    printf("not run: nccl_4_ranks_4_gpus needs 4 GPUs, %d found\n", ngpu);
  if (ngpu >= 2)
    tcase_add_test(tc, mixed_2x2);
  else
    printf("not run: mixed_2x2 needs 2 GPUs, %d found\n", ngpu);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}

#else /* !SPC_HAVE_CUDA */

int main(void) {
  gpt_require_gpu();
  return 77;
}

#endif
