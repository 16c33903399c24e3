/* spcoll-gpu-bench: same-GPU collectives through spcolld next to the
 * device-to-device copy bandwidth of the same GPU in the same run.
 *
 * N rank processes (default 4) share GPU 0; for each size per rank (1 MiB
 * to 1 GiB) they run all-to-all (contiguous pieces), all-to-all Ulysses
 * ([1, s, h, 128] bf16, scatter h, gather s: 2 KiB runs) and all-gather on
 * device buffers. Rank 0 reports, per op and size:
 *   op_us      time per op, ops queued back to back on one stream, to
 *              the stream's end (with stream flags the calls return
 *              before the ops run, so ops pipeline)
 *   lat_us     one op at a time: the call, then the stream synchronized
 *              (the op's answer is taken after, untimed)
 *   queue_us   the host's time in spc_run_on_stream, back to back
 *   mover_us   the daemon's time in the mover (Done.move_ns), one at a
 *              time
 *   copy_GBps  bytes the op writes over all ranks / op time: one GPU
 *              copies them all, so this is comparable to
 *   d2d_GBps   cudaMemcpy device-to-device (the op's bytes, at most
 *              1 GiB), timed with events, same process and run
 *   ratio      copy_GBps / d2d_GBps
 *   overlap    how much of the shorter of two things each rank queues at
 *              once, on two streams, is hidden: the back-to-back ops and
 *              a compute kernel of about as long (gpu_busy.cu, half the
 *              SMs over all ranks): (t_ops + t_compute - t_both) /
 *              min(t_ops, t_compute), 1 fully hidden, 0 one after the
 *              other. On spcsim, which runs no kernel of the bench, the
 *              compute is a host function sleeping on the stream.
 * --symmetric puts each point's tensors in a symmetric buffer
 * (spc_buffer_alloc_symmetric): the ops run on the ranks' own streams,
 * no daemon (mover_us 0).
 * It prints numbers; it asserts nothing. Exit 77 without a GPU. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "spcoll.h"

#ifdef SPC_HAVE_CUDA
#include <cuda_runtime.h>

#include "gpu_busy.h"

#define MiB ((size_t)1 << 20)

typedef struct {
  int ranks, iters;
  size_t min_b, max_b;
  const char *csv, *mover;
  int sym;                     /* --symmetric */
} opts;

static opts o = {4, 0, MiB, 1024 * MiB, NULL, NULL, 0};
static spt_daemon daemon_;

#define CK(call)                                                             \
  do {                                                                       \
    cudaError_t e_ = (call);                                                 \
    if (e_ != cudaSuccess) {                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,          \
              cudaGetErrorString(e_));                                       \
      return 1;                                                              \
    }                                                                        \
  } while (0)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int iters_for(size_t bytes) {
  if (o.iters > 0)
    return o.iters;
  return bytes <= 16 * MiB ? 50 : bytes <= 256 * MiB ? 20 : 8;
}

/* cudaMemcpy device to device of `bytes`, GB/s, timed with events. */
static int d2d(size_t bytes, cudaStream_t s, double *gbps) {
  void *a, *b;
  cudaEvent_t e0, e1;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  int n = iters_for(bytes);
  CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s)); /* warm */
  CK(cudaEventRecord(e0, s));
  for (int i = 0; i < n; i++)
    CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
  CK(cudaEventRecord(e1, s));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  *gbps = (double)bytes * n / (ms * 1e-3) / 1e9;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return 0;
}

typedef struct {
  spc_client *c;
  spc_group *g;
  spc_buffer *hb;
  spc_tensor bx, by;   /* a tiny host op as a barrier */
  cudaStream_t s;
  cudaStream_t cs;             /* the overlap column's compute */
  int sms;                     /* multiprocessors of GPU 0 */
  double cycles_per_us;        /* the busy kernel's, measured once */
  int rank, world;
  FILE *csv;
  int simulated;               /* spcsim, not a GPU */
} rk;

static int barrier(rk *k) {
  spc_op op = spc_op_all_reduce(SPC_SUM);
  int rc = spc_run(k->g, &op, &k->bx, &k->by);
  if (rc < 0)
    fprintf(stderr, "rank %d: barrier: %s\n", k->rank, spc_last_error(k->c));
  return rc;
}

static void CUDART_CB sleep_fn(void *us) {
  usleep((useconds_t)(uintptr_t)us);
}

static int busy_blocks(const rk *k) {
  int b = k->sms / (2 * k->world);
  return b > 0 ? b : 1;
}

/* The busy kernel's clock rate, from one launch timed with events. */
static int busy_calibrate(rk *k) {
  cudaEvent_t e0, e1;
  const long long cycles = 10000000;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(spc_bench_busy(k->cs, 1000, 1)); /* warm: module load */
  CK(cudaEventRecord(e0, k->cs));
  CK(spc_bench_busy(k->cs, cycles, 1));
  CK(cudaEventRecord(e1, k->cs));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  k->cycles_per_us = ms > 0 ? (double)cycles / (ms * 1e3) : 1e3;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return 0;
}

/* About `us` of compute queued on k->cs. */
static int compute(rk *k, double us) {
  if (k->simulated) {
    CK(cudaLaunchHostFunc(k->cs, sleep_fn, (void *)(uintptr_t)us));
    return 0;
  }
  CK(spc_bench_busy(k->cs, (long long)(us * k->cycles_per_us),
                    busy_blocks(k)));
  return 0;
}

/* The overlap column: n ops (t_ops seconds back to back, measured) next to
 * as long a compute, each alone and both at once. */
static int overlap_of(rk *k, const spc_op *sop, const spc_tensor *tin,
                      const spc_tensor *tout, int n, double t_ops,
                      double *ov) {
  double t0 = now_s();
  if (compute(k, t_ops * 1e6))
    return 1;
  CK(cudaStreamSynchronize(k->cs));
  double t_comp = now_s() - t0;
  int rc = barrier(k);
  t0 = now_s();
  if (rc == 0 && compute(k, t_ops * 1e6))
    return 1;
  for (int i = 0; rc == 0 && i < n; i++)
    rc = spc_run_on_stream(k->g, sop, tin, tout, k->s);
  if (rc == 0) {
    CK(cudaStreamSynchronize(k->s));
    CK(cudaStreamSynchronize(k->cs));
  }
  double t_both = now_s() - t0;
  if (rc == 0)
    rc = spc_async_error(k->c, 1);
  if (rc < 0) {
    fprintf(stderr, "rank %d: overlap: %s\n", k->rank, spc_last_error(k->c));
    return 1;
  }
  double lo = t_ops < t_comp ? t_ops : t_comp;
  double v = lo > 0 ? (t_ops + t_comp - t_both) / lo : 0;
  *ov = v < 0 ? 0 : v > 1 ? 1 : v;
  return 0;
}

enum { OP_A2A, OP_A2A_ULYSSES, OP_GATHER, OP_COUNT };
static const char *const op_names[OP_COUNT] = {"all_to_all", "a2a_ulysses",
                                               "all_gather"};

/* Shapes of op at `bytes` of input per rank; out_bytes of output. */
static void shapes(int op, size_t bytes, int w, spc_dtype *dt, int *nd,
                   int64_t *in, int64_t *out, spc_op *sop) {
  if (op == OP_A2A) {
    int64_t n = (int64_t)(bytes / 4 / (size_t)w);
    *dt = SPC_FLOAT32, *nd = 2;
    in[0] = w, in[1] = n;        /* piece j = row j, contiguous */
    out[0] = 1, out[1] = w * n;
    *sop = spc_op_all_to_all(0, 1, 0);
  } else if (op == OP_A2A_ULYSSES) {
    int64_t h = 8 * w, d = 128, s = (int64_t)(bytes / 2 / (size_t)(h * d));
    *dt = SPC_BFLOAT16, *nd = 4;
    in[0] = 1, in[1] = s, in[2] = h, in[3] = d;
    out[0] = 1, out[1] = s * w, out[2] = h / w, out[3] = d;
    *sop = spc_op_all_to_all(2, 1, 0);
  } else {
    int64_t n = (int64_t)(bytes / 4);
    *dt = SPC_FLOAT32, *nd = 1;
    in[0] = n, out[0] = n * w;
    *sop = spc_op_all_gather(0, NULL);
  }
}

static size_t numel(const int64_t *s, int nd) {
  size_t n = 1;
  for (int i = 0; i < nd; i++)
    n *= (size_t)s[i];
  return n;
}

/* Where a symmetric buffer holds a point's output: after its input. */
static size_t out_at(size_t in_b) { return (in_b + 4095) & ~(size_t)4095; }

/* A point's device buffers: one symmetric buffer for both tensors
 * (--symmetric), or one of each; input filled. */
static int point_buffers(rk *k, size_t in_b, size_t out_b, spc_buffer **bin,
                         spc_buffer **bout) {
  if (o.sym) {
    if (spc_buffer_alloc_symmetric(k->g, 0, out_at(in_b) + out_b, bin) < 0)
      return 1;
    *bout = *bin;
  } else if (spc_buffer_alloc_device(k->c, 0, in_b, bin) < 0 ||
             spc_buffer_alloc_device(k->c, 0, out_b, bout) < 0) {
    return 1;
  }
  CK(cudaMemset(spc_buffer_data(*bin), 1, in_b));
  char why[256];
  if (o.sym && !spc_buffer_symmetric(*bin, why, sizeof(why))) {
    fprintf(stderr, "rank %d: not symmetric: %s\n", k->rank, why);
    return 1;
  }
  return 0;
}

static int bench_point(rk *k, int op, size_t bytes) {
  spc_dtype dt;
  int nd, w = k->world;
  int64_t ish[4], osh[4];
  spc_op sop;
  shapes(op, bytes, w, &dt, &nd, ish, osh, &sop);
  size_t in_b = numel(ish, nd) * spc_dtype_size(dt);
  if (in_b == 0) /* below one row of the op's shape (Ulysses' heads) */
    return 0;
  size_t out_b = numel(osh, nd) * spc_dtype_size(dt);
  spc_buffer *bin, *bout;
  spc_tensor tin, tout;
  if (point_buffers(k, in_b, out_b, &bin, &bout) ||
      spc_tensor_init(&tin, bin, 0, dt, nd, ish) < 0 ||
      spc_tensor_init(&tout, bout, bin == bout ? out_at(in_b) : 0, dt, nd,
                      osh) < 0) {
    fprintf(stderr, "rank %d: %s\n", k->rank, spc_last_error(k->c));
    return 1;
  }
  double d2d_gbps = 0;
  size_t total = out_b * (size_t)w;
  if (barrier(k) < 0)
    return 1;
  if (k->rank == 0 && d2d(total < 1024 * MiB ? total : 1024 * MiB, k->s,
                          &d2d_gbps))
    return 1;
  int n = iters_for(in_b), rc = barrier(k);
  for (int i = 0; rc == 0 && i < 2; i++) /* warm: registrations, pools */
    rc = spc_run_on_stream(k->g, &sop, &tin, &tout, k->s);
  /* Back to back: what the ops cost in a loop that queues them (with
   * stream flags the host returns before each op ran); the host's own
   * time in the calls; then one op at a time, to the stream's end. */
  double t0 = now_s(), mover = 0, queue = 0;
  for (int i = 0; rc == 0 && i < n; i++) {
    double q0 = now_s();
    rc = spc_run_on_stream(k->g, &sop, &tin, &tout, k->s);
    queue += now_s() - q0;
  }
  if (rc == 0)
    CK(cudaStreamSynchronize(k->s));
  double dt_s = (now_s() - t0) / n;
  queue /= n;
  /* The answers (and any failure) outside the timing: a trainer does
   * not wait for them either. */
  if (rc == 0)
    rc = spc_async_error(k->c, 1);
  int nl = n < 20 ? n : 20;
  double lat = 0;
  for (int i = 0; rc == 0 && i < nl; i++) {
    double l0 = now_s();
    rc = spc_run_on_stream(k->g, &sop, &tin, &tout, k->s);
    if (rc == 0)
      CK(cudaStreamSynchronize(k->s));
    lat += now_s() - l0;
    if (rc == 0)
      rc = spc_async_error(k->c, 1);
    spc_timing t;
    spc_last_timing(k->c, &t);
    mover += (double)t.move_ns * 1e-9;
  }
  double lat_s = lat / nl;
  mover /= nl;
  if (rc < 0) {
    fprintf(stderr, "rank %d: %s: %s\n", k->rank, op_names[op],
            spc_last_error(k->c));
    return 1;
  }
  double ov = 0;
  if (overlap_of(k, &sop, &tin, &tout, n, dt_s * n, &ov))
    return 1;
  if (k->rank == 0) {
    double gbps = (double)total / dt_s / 1e9;
    printf("%-12s %6d %12zu %10.1f %10.1f %9.1f %10.1f %10.1f %10.1f "
           "%6.2f %7.2f%s\n", op_names[op], w, in_b, dt_s * 1e6, lat_s * 1e6,
           queue * 1e6, mover * 1e6, gbps, d2d_gbps, gbps / d2d_gbps, ov,
           k->simulated ? "  simulated" : "");
    fflush(stdout);
    if (k->csv)
      fprintf(k->csv, "%s,%d,%zu,%zu,%.3f,%.3f,%.3f,%.3f,%.3f,%.3f,%.4f,"
              "%.3f,%d\n", op_names[op], w, in_b, total, dt_s * 1e6,
              lat_s * 1e6, queue * 1e6, mover * 1e6, gbps, d2d_gbps,
              gbps / d2d_gbps, ov, k->simulated);
  }
  if (bin != bout)
    spc_buffer_free(bout);
  spc_buffer_free(bin);
  return 0;
}

static int rank_main(int rank, int world, void *arg) {
  (void)arg;
  rk k = {.rank = rank, .world = world};
  CK(cudaSetDevice(0));
  CK(cudaStreamCreateWithFlags(&k.s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&k.cs, cudaStreamNonBlocking));
  struct cudaDeviceProp p;
  CK(cudaGetDeviceProperties(&p, 0));
  /* On spcsim (tests/gpusim) the numbers time the host simulator: every
   * row says so, and they are never a GPU result. */
  k.simulated = strncmp(p.name, "spcsim", 6) == 0;
  k.sms = p.multiProcessorCount;
  if (!k.simulated && busy_calibrate(&k))
    return 1;
  k.c = spt_connect(daemon_.socket);
  int64_t one[1] = {1};
  if (k.c == NULL || spc_group_join(k.c, "gpu-bench", world, rank, &k.g) < 0 ||
      spc_buffer_alloc(k.c, 4096, &k.hb) < 0 ||
      spc_tensor_init(&k.bx, k.hb, 0, SPC_FLOAT32, 1, one) < 0 ||
      spc_tensor_init(&k.by, k.hb, 64, SPC_FLOAT32, 1, one) < 0) {
    fprintf(stderr, "rank %d setup: %s\n", rank,
            k.c ? spc_last_error(k.c) : "no connection");
    return 1;
  }
  if (rank == 0) {
    if (k.simulated)
      printf("# SIMULATED: no GPU, spcsim stands in for CUDA and NCCL; "
             "these numbers are not GPU measurements\n");
    printf("# device: %s, %d SMs, %.1f GiB; %d ranks on GPU 0; %s %s\n",
           p.name, p.multiProcessorCount,
           (double)p.totalGlobalMem / (1 << 30), world,
           o.sym ? "symmetric buffers, no daemon" : "mover",
           o.sym ? "" : o.mover ? o.mover : "auto");
    printf("%-12s %6s %12s %10s %10s %9s %10s %10s %10s %6s %7s\n", "op",
           "ranks", "bytes/rank", "op_us", "lat_us", "queue_us", "mover_us",
           "copy_GBps", "d2d_GBps", "ratio", "overlap");
    if (o.csv && (k.csv = fopen(o.csv, "w")) != NULL)
      fprintf(k.csv, "op,ranks,bytes_per_rank,bytes_total,op_us,lat_us,"
              "queue_us,mover_us,"
              "copy_GBps,d2d_GBps,ratio,overlap,simulated\n");
  }
  int bad = 0;
  for (int op = 0; op < OP_COUNT && !bad; op++)
    for (size_t b = o.min_b; b <= o.max_b && !bad; b *= 2)
      bad = bench_point(&k, op, b);
  if (k.csv)
    fclose(k.csv);
  spc_disconnect(k.c);
  cudaStreamDestroy(k.s);
  cudaStreamDestroy(k.cs);
  return bad;
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k')
    v *= 1024;
  else if (*end == 'M' || *end == 'm')
    v *= 1024 * 1024;
  else if (*end == 'G' || *end == 'g')
    v *= 1024.0 * 1024 * 1024;
  return (size_t)v;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--spcolld") == 0 && v)
      setenv("SPCOLLD", v, 1), i++;
    else if (strcmp(a, "--ranks") == 0 && v)
      o.ranks = atoi(v), i++;
    else if (strcmp(a, "--min-bytes") == 0 && v)
      o.min_b = parse_size(v), i++;
    else if (strcmp(a, "--max-bytes") == 0 && v)
      o.max_b = parse_size(v), i++;
    else if (strcmp(a, "--iters") == 0 && v)
      o.iters = atoi(v), i++;
    else if (strcmp(a, "--csv") == 0 && v)
      o.csv = v, i++;
    else if (strcmp(a, "--mover") == 0 && v)
      o.mover = v, i++;
    else if (strcmp(a, "--symmetric") == 0)
      o.sym = 1;
    else {
      fprintf(stderr, "usage: %s [--spcolld PATH] [--ranks N] [--min-bytes "
              "1M] [--max-bytes 1G] [--iters N] [--csv FILE] [--mover "
              "auto|cuda|nccl] [--symmetric]\n", argv[0]);
      return 2;
    }
  }
  if (o.ranks < 1 || o.min_b < 4096 || o.max_b < o.min_b) {
    fprintf(stderr, "bad --ranks or sizes\n");
    return 2;
  }
  /* Whether there is a GPU is asked in a child: CUDA must not be
   * initialized here before the ranks fork. */
  pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    _exit(cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 0 : 1);
  }
  int st = 1;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    printf("skipped: no GPU\n");
    return 77;
  }
  const char *const extra[] = {"--mover", o.mover ? o.mover : "auto", NULL};
  if (spt_daemon_start(&daemon_, extra) < 0) {
    fprintf(stderr, "spcolld did not start\n");
    return 1;
  }
  int failed = spt_run_ranks(o.ranks, rank_main, NULL, 3600);
  const char *logs = getenv("SPCOLL_GPU_LOGS"); /* the GPU run keeps them */
  if (logs != NULL && strcmp(logs, "1") == 0)
    spt_daemon_dump_log(&daemon_);
  if (spt_daemon_stop(&daemon_) != 0)
    failed++;
  return failed ? 1 : 0;
}

#else /* !SPC_HAVE_CUDA */

int main(void) {
  printf("skipped: no GPU (spcoll-gpu-bench built without CUDA)\n");
  return 77;
}

#endif
