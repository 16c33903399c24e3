/* The GPU suites' shared op cases and the machinery that runs one on host
 * and device buffers (gpu_cases.h). Moved out of test_gpu_ops.c unchanged
 * so that test_gpu_multinode.c runs the very same cases, values and
 * bitwise comparison across daemons. */
#include "gpu_cases.h"

#ifdef SPC_HAVE_CUDA

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "ops_ref.h"

static const int64_t seq_lens[4] = {5, 7, 3, 9};

const gpc_case gpc_cases[] = {
    {"split-d1", GPC_SPLIT, SPC_FLOAT32, 3, {3, 10, 4}, 1, 0, 0},
    {"split-scaled-bf16", GPC_SPLIT, SPC_BFLOAT16, 2, {9, 6}, 0, 0,
     SPC_SCALE_UP},
    {"gather-d0", GPC_GATHER, SPC_FLOAT32, 3, {5, 3, 4}, 0, 0, 0},
    {"gather-last-f16", GPC_GATHER, SPC_FLOAT16, 3, {2, 3, 5}, -1, 0, 0},
    {"gather-uneq-bf16", GPC_GATHER_UNEQ, SPC_BFLOAT16, 3, {2, 0, 3}, 1, 0, 0},
    {"gather-i64", GPC_GATHER, SPC_INT64, 2, {7, 3}, 0, 0, 0},
    {"gather-scaled-down", GPC_GATHER, SPC_FLOAT32, 2, {4, 6}, 1, 0,
     SPC_SCALE_DOWN},
    {"gather-big-16MiB", GPC_GATHER, SPC_FLOAT32, 2, {1024, 4096}, 0, 0, 0},
    {"a2a-ulysses", GPC_A2A, SPC_FLOAT32, 4, {2, 6, 12, 8}, 2, 1, 0},
    {"a2a-s0g1-f16", GPC_A2A, SPC_FLOAT16, 3, {12, 5, 2}, 0, 1, 0},
    {"a2a-s1g0-u8", GPC_A2A, SPC_UINT8, 3, {3, 12, 7}, 1, 0, 0},
    {"a2a-5d-i8", GPC_A2A, SPC_INT8, 5, {2, 3, 12, 2, 3}, 2, 4, 0},
    {"a2a-scaled-f64", GPC_A2A, SPC_FLOAT64, 2, {12, 3}, 0, 1, SPC_SCALE_DOWN},
    {"a2a-big-ulysses", GPC_A2A, SPC_BFLOAT16, 4, {1, 512, 48, 128}, 2, 1, 0},
    {"a2av-rows", GPC_A2AV, SPC_FLOAT32, 2, {0, 6}, 0, 0, 0},
    {"allreduce-sum-f32", GPC_AR, SPC_FLOAT32, 2, {33, 17}, 0, 0, SPC_SUM},
    {"allreduce-sum-f16", GPC_AR, SPC_FLOAT16, 1, {1001}, 0, 0, SPC_SUM},
    {"allreduce-max-bf16", GPC_AR, SPC_BFLOAT16, 2, {8, 9}, 0, 0, SPC_MAX},
    {"allreduce-min-i32", GPC_AR, SPC_INT32, 1, {257}, 0, 0, SPC_MIN},
    {"allreduce-sum-i64", GPC_AR, SPC_INT64, 1, {100}, 0, 0, SPC_SUM},
    {"allreduce-sum-f64-big", GPC_AR, SPC_FLOAT64, 1, {1 << 20}, 0, 0,
     SPC_SUM},
    {"reducescatter-d0", GPC_RS, SPC_FLOAT32, 2, {13, 5}, 0, 0, 0},
    {"reducescatter-last-bf16", GPC_RS, SPC_BFLOAT16, 3, {2, 3, 10}, -1, 0, 0},
    {"zigzag-split", GPC_ZZS, SPC_FLOAT32, 3, {2, 3, 4}, 1, 0, 0},
    {"zigzag-gather-scaled", GPC_ZZG, SPC_BFLOAT16, 3, {2, 3, 4}, 1, 0,
     SPC_SCALE_UP},
    {"packed-split", GPC_PKS, SPC_FLOAT32, 2, {0, 6}, 0, 0, 0},
    {"packed-gather-down", GPC_PKG, SPC_FLOAT32, 2, {0, 6}, 0, 0,
     SPC_SCALE_DOWN},
    /* Sums whose value depends on the order of the additions (NCCL's ring
     * order is not rank order), and NaNs, which win in spcoll's max/min
     * but not in NCCL's (fmaxf): the device result must still be the host
     * mover's, bit for bit. */
    {"allreduce-sum-f32-order", GPC_AR, SPC_FLOAT32, 1, {4099}, 0, 0,
     SPC_SUM | GPC_HORDER},
    {"allreduce-sum-bf16-order", GPC_AR, SPC_BFLOAT16, 1, {777}, 0, 0,
     SPC_SUM | GPC_HORDER},
    {"allreduce-max-f32-nan", GPC_AR, SPC_FLOAT32, 1, {1000}, 0, 0,
     SPC_MAX | GPC_HNAN},
    {"allreduce-min-f64-nan", GPC_AR, SPC_FLOAT64, 1, {999}, 0, 0,
     SPC_MIN | GPC_HNAN},
    {"reducescatter-f32-order", GPC_RS, SPC_FLOAT32, 2, {64, 33}, 0, 0,
     GPC_HORDER},
};
const size_t gpc_ncases = sizeof(gpc_cases) / sizeof(gpc_cases[0]);

static int norm(int d, int nd) {
  return d < 0 ? d + nd : d;
}

int64_t gpc_rule(int64_t n, int w, int r) {
  return n / w + (r < n % w ? 1 : 0);
}

spc_op gpc_case_op(const gpc_case *c, int r, int w, int64_t *shape,
                   int64_t *lists) {
  int d = norm(c->d, c->nd);
  memcpy(shape, c->shape, sizeof(c->shape));
  spc_op op;
  int64_t *in_splits = lists, *out_splits = lists + 8;
  switch (c->kind) {
  case GPC_SPLIT: op = spc_op_split(c->d, NULL); break;
  case GPC_GATHER: op = spc_op_all_gather(c->d, NULL); break;
  case GPC_GATHER_UNEQ:
    for (int j = 0; j < w; j++)
      lists[j] = j + 1;
    shape[d] = r + 1;
    op = spc_op_all_gather(c->d, lists);
    break;
  case GPC_A2A: op = spc_op_all_to_all(c->d, c->g, 0); break;
  case GPC_A2AV:
    shape[0] = 0;
    for (int j = 0; j < w; j++) {
      in_splits[j] = (r + 2 * j) % 3 + 1;  /* rows r sends j */
      out_splits[j] = (j + 2 * r) % 3 + 1; /* rows j sends r */
      shape[0] += in_splits[j];
    }
    op = spc_op_all_to_all_v(in_splits, out_splits);
    break;
  case GPC_AR: return spc_op_all_reduce((spc_reduce_op)GPC_FLAGS(c));
  case GPC_RS: op = spc_op_reduce_scatter(c->d, NULL); break;
  case GPC_ZZS:
    shape[d] *= 2 * w;
    op = spc_op_zigzag_split(c->d);
    break;
  case GPC_ZZG:
    shape[d] *= 2;
    op = spc_op_zigzag_gather(c->d);
    break;
  case GPC_PKS:
    shape[d] = 0;
    for (int i = 0; i < 4; i++)
      shape[d] += seq_lens[i];
    op = spc_op_packed_split(c->d, seq_lens, 4);
    break;
  default: /* GPC_PKG */
    shape[d] = 0;
    for (int i = 0; i < 4; i++)
      shape[d] += gpc_rule(seq_lens[i], w, r);
    op = spc_op_packed_gather(c->d, seq_lens, 4);
    break;
  }
  return GPC_FLAGS(c) ? spc_op_scaled(op, (spc_grad_scale)GPC_FLAGS(c)) : op;
}

void gpc_fill_hard(void *p, spc_dtype dt, size_t n, int rank, uint64_t seed,
                   int nan) {
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

size_t gpc_bytes_of(const int64_t *s, int nd, spc_dtype dt) {
  size_t n = spc_dtype_size(dt);
  for (int i = 0; i < nd; i++)
    n *= (size_t)s[i];
  return n;
}

int gpc_rank_fail(gpc_rank *k, const char *cs, const char *what, int rc) {
  char line[sizeof(k->why)];
  snprintf(line, sizeof(line), "[%s] rank %d: %s: %s (%s)", cs, k->rank,
           what, spc_strerror(rc), spc_last_error(k->c));
  fprintf(stderr, "%s\n", line);
  if (k->why[0] == '\0')
    snprintf(k->why, sizeof(k->why), "%s", line);
  return 1;
}

/* The case's device buffers: in a symmetric buffer (both tensors in it,
 * the output after the input), or registered inside k->dev, a big output
 * in memory of its own. */
static int device_buffers(gpc_rank *k, const gpc_case *c, size_t in_b,
                          size_t out_b, spc_buffer **bin, spc_buffer **bout) {
  size_t out_at = (in_b + 4095) & ~(size_t)4095;
  if (k->symbuf != NULL) {
    if (out_at + out_b > k->dev_bytes)
      return gpc_rank_fail(k, c->name, "symmetric buffer too small", -1);
    *bin = *bout = k->symbuf;
    return 0;
  }
  int big = out_b >= 8 * GPC_MB && k->vmm_chunk == 0;
  int rc = spc_buffer_register_device(k->c, k->dev, in_b, bin);
  if (rc < 0)
    return gpc_rank_fail(k, c->name, "register input", rc);
  if (big)
    rc = spc_buffer_alloc_device(k->c, spc_buffer_device(*bin), out_b, bout);
  else
    rc = spc_buffer_register_device(k->c, k->dev + out_at, out_b, bout);
  if (rc < 0)
    return gpc_rank_fail(k, c->name, "register output", rc);
  return 0;
}

int gpc_device_run(gpc_rank *k, const gpc_case *c, const spc_op *op,
                   const spc_tensor *hin, const int64_t *oshape, size_t in_b,
                   size_t out_b, int use_stream) {
  int bad = 0, rc;
  size_t out_at = (in_b + 4095) & ~(size_t)4095;
  spc_buffer *bin, *bout;
  if (device_buffers(k, c, in_b, out_b, &bin, &bout))
    return 1;
  uint8_t *din = spc_buffer_data(bin);
  size_t oo = bin == bout ? out_at : 0;
  uint8_t *dout = (uint8_t *)spc_buffer_data(bout) + oo;
  spc_tensor tin, tout;
  if (spc_tensor_init(&tin, bin, 0, c->dt, c->nd, hin->shape) < 0 ||
      spc_tensor_init(&tout, bout, oo, c->dt, c->nd, oshape) < 0)
    return gpc_rank_fail(k, c->name, "tensor_init", -1);
  if (use_stream) {
    GPT_CUDA(cudaMemcpyAsync(din, spc_tensor_data(hin), in_b,
                             cudaMemcpyHostToDevice, k->stream));
    GPT_CUDA(cudaMemsetAsync(dout, 0xee, out_b, k->stream));
    rc = spc_run_on_stream(k->g, op, &tin, &tout, k->stream);
    if (rc < 0)
      return gpc_rank_fail(k, c->name, "device op on stream", rc);
    GPT_CUDA(cudaMemcpyAsync(k->got, dout, out_b, cudaMemcpyDeviceToHost,
                             k->stream));
    GPT_CUDA(cudaStreamSynchronize(k->stream));
  } else {
    GPT_CUDA(cudaMemcpy(din, spc_tensor_data(hin), in_b,
                        cudaMemcpyHostToDevice));
    GPT_CUDA(cudaMemset(dout, 0xee, out_b));
    rc = spc_run(k->g, op, &tin, &tout);
    if (rc < 0)
      return gpc_rank_fail(k, c->name, "device op", rc);
    GPT_CUDA(cudaMemcpy(k->got, dout, out_b, cudaMemcpyDeviceToHost));
  }
  if (bin != k->symbuf &&
      ((rc = spc_buffer_free(bout)) < 0 || (rc = spc_buffer_free(bin)) < 0))
    bad |= gpc_rank_fail(k, c->name, "spc_buffer_free", rc);
  return bad;
}

int gpc_run_case(gpc_rank *k, const gpc_case *c, int use_stream) {
  int64_t ishape[SPC_MAX_DIMS], oshape[SPC_MAX_DIMS], lists[16];
  int ond;
  spc_op op = gpc_case_op(c, k->rank, k->world, ishape, lists);
  size_t in_b = gpc_bytes_of(ishape, c->nd, c->dt);
  spc_tensor hin, hout;
  int rc = spc_tensor_init(&hin, k->host, 0, c->dt, c->nd, ishape);
  if (rc == 0)
    rc = spc_out_shape(k->g, &op, &hin, oshape, &ond);
  size_t out_b = gpc_bytes_of(oshape, ond, c->dt);
  size_t out_at = (in_b + 4095) & ~(size_t)4095;
  if (rc == 0)
    rc = spc_tensor_init(&hout, k->host, out_at, c->dt, ond, oshape);
  if (rc < 0)
    return gpc_rank_fail(k, c->name, "host tensors", rc);
  /* The device output is read back into got (dev_bytes). */
  if (out_b > k->dev_bytes)
    return gpc_rank_fail(k, c->name, "output bigger than dev_bytes", -1);
  if (c->flags & (GPC_HORDER | GPC_HNAN))
    gpc_fill_hard(spc_tensor_data(&hin), c->dt, in_b / spc_dtype_size(c->dt),
                  k->rank, 77 + (uint64_t)(c - gpc_cases),
                  (c->flags & GPC_HNAN) != 0);
  else
    /* 16-bit floats get finite values: NaN payloads are not part of what
     * host and device must agree on. */
    opr_fill(spc_tensor_data(&hin), c->dt, in_b / spc_dtype_size(c->dt),
             77 + (uint64_t)(c - gpc_cases), k->rank);
  memset(spc_tensor_data(&hout), 0x11, out_b);
  rc = spc_run(k->g, &op, &hin, &hout);
  if (rc < 0)
    return gpc_rank_fail(k, c->name, "host op", rc);
  if (gpc_device_run(k, c, &op, &hin, oshape, in_b, out_b, use_stream))
    return 1;
  const uint8_t *want = spc_tensor_data(&hout);
  for (size_t i = 0; i < out_b; i++)
    if (k->got[i] != want[i]) {
      char line[sizeof(k->why)];
      snprintf(line, sizeof(line), "[%s] rank %d of %d: device output "
               "differs from the host's at byte %zu of %zu: 0x%02x, want "
               "0x%02x", c->name, k->rank, k->world, i, out_b, k->got[i],
               want[i]);
      fprintf(stderr, "%s\n", line);
      if (k->why[0] == '\0')
        snprintf(k->why, sizeof(k->why), "%s", line);
      return 1;
    }
  return 0;
}

int gpc_rank_open(gpc_rank *k, const char *socket, const char *group,
                  int dev, size_t host_bytes, size_t dev_bytes) {
  k->host_bytes = host_bytes;
  k->dev_bytes = dev_bytes;
  GPT_CUDA(cudaSetDevice(dev));
  GPT_CUDA(cudaStreamCreateWithFlags(&k->stream, cudaStreamNonBlocking));
  if (k->vmm_chunk > 0) {
    if (gpt_vmm_alloc(dev, dev_bytes, k->vmm_chunk, (void **)&k->dev))
      return gpc_rank_fail(k, group, "cuMem allocation", -1);
  } else {
    GPT_CUDA(cudaMalloc((void **)&k->dev, dev_bytes));
  }
  GPT_CUDA(cudaMallocHost((void **)&k->got, dev_bytes));
  k->c = spt_connect(socket);
  int rc = k->c ? spc_group_join(k->c, group, k->world, k->rank, &k->g) : -1;
  if (rc == 0)
    rc = spc_buffer_alloc(k->c, host_bytes, &k->host);
  /* The whole allocation stays registered: each case's buffers inside it
   * reuse that registration (no daemon round trip). */
  if (rc == 0)
    rc = spc_buffer_register_device(k->c, k->dev, dev_bytes, &k->dev_all);
  if (rc == 0 && k->sym)
    rc = spc_buffer_alloc_symmetric(k->g, dev, dev_bytes, &k->symbuf);
  if (rc < 0)
    return gpc_rank_fail(k, group, "setup", rc);
  if (spc_buffer_device(k->dev_all) != dev || spc_buffer_device(k->host) != -1)
    return gpc_rank_fail(k, group, "spc_buffer_device", -1);
  /* Registered whole: the allocation, or every cuMem mapping of it. */
  void *base;
  size_t size;
  if (spc_buffer_device_range(k->dev_all, &base, &size) != SPC_OK ||
      base != k->dev || size < dev_bytes ||
      spc_buffer_device_range(k->host, &base, &size) != SPC_EINVAL)
    return gpc_rank_fail(k, group, "spc_buffer_device_range", -1);
  return 0;
}

void gpc_rank_close(gpc_rank *k) {
  if (k->symbuf != NULL)
    spc_buffer_free(k->symbuf);
  spc_buffer_free(k->dev_all);
  spc_buffer_free(k->host);
  spc_group_leave(k->g);
  spc_disconnect(k->c);
  if (k->vmm_chunk > 0)
    gpt_vmm_free(k->dev, k->dev_bytes, k->vmm_chunk);
  else
    cudaFree(k->dev);
  cudaFreeHost(k->got);
  cudaStreamDestroy(k->stream);
}

int gpc_run_cases(gpc_rank *k, const char *tag, const size_t *which,
                  size_t n) {
  int bad = 0;
  if (which == NULL)
    n = gpc_ncases;
  for (size_t j = 0; j < n; j++) {
    size_t i = which ? which[j] : j;
    int b = gpc_run_case(k, &gpc_cases[i], i % 2 == 0);
    if (b)
      fprintf(stderr, "[%s] rank %d: case %s FAILED\n", tag, k->rank,
              gpc_cases[i].name);
    else if (k->rank == 0)
      fprintf(stderr, "[%s] case %s ok\n", tag, gpc_cases[i].name);
    bad += b;
  }
  return bad;
}

#else /* !SPC_HAVE_CUDA */

/* Nothing to share without CUDA: the suites only print "skipped". */
typedef int gpc_no_cuda;

#endif
