#include "bench_common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const op_names[BENCH_NOPS] = {
    "all_gather", "all_reduce", "reduce_scatter", "all_to_all", "ulysses"};

const char *bench_op_name(bench_op op) {
  return op < BENCH_NOPS ? op_names[op] : "?";
}

int bench_op_parse(const char *name) {
  for (int i = 0; i < BENCH_NOPS; i++)
    if (strcmp(name, op_names[i]) == 0)
      return i;
  return -1;
}

unsigned bench_ops_parse(const char *list, const char *prog) {
  unsigned mask = 0;
  char buf[256];
  snprintf(buf, sizeof(buf), "%s", list);
  for (char *save, *tok = strtok_r(buf, ",", &save); tok != NULL;
       tok = strtok_r(NULL, ",", &save)) {
    int op = bench_op_parse(tok);
    if (op < 0) {
      fprintf(stderr, "%s: unknown op '%s'\n", prog, tok);
      return 0;
    }
    mask |= 1u << op;
  }
  return mask;
}

double bench_bus_factor(bench_op op, int world) {
  return op == BENCH_ALL_REDUCE ? 2.0 * (world - 1) / world
                                : (double)(world - 1) / world;
}

double bench_written(bench_op op, size_t bytes, int world) {
  return op == BENCH_REDUCE_SCATTER ? (double)bytes : (double)bytes * world;
}

size_t bench_next_size(size_t bytes, size_t max_bytes) {
  if (bytes >= max_bytes)
    return 0;
  return bytes * 4 > max_bytes ? max_bytes : bytes * 4;
}

/* Below 64 KiB, more than `base`, up to 50 times it at 1 KiB and less:
 * 200 ops of 0.2 us are 40 us of timing, in which one interruption of a
 * few microseconds on either rank would move the mean by 5-10%
 * (docs/performance.md).
 * Every C benchmark and Open MPI's baseline count alike. */
#define ITERS_SMALL ((size_t)64 << 10)
#define ITERS_SMALL_MAX 50
int bench_iters(size_t bytes, int base) {
  const size_t mib = (size_t)1 << 20;
  if (bytes < ITERS_SMALL) {
    size_t k = ITERS_SMALL / (bytes ? bytes : 1);
    return base * (int)(k < ITERS_SMALL_MAX ? k : ITERS_SMALL_MAX);
  }
  if (bytes <= mib)
    return base;
  size_t n = (size_t)base * mib / bytes;
  return n < 3 ? 3 : (int)n;
}

/* Untimed ops before a point is timed, so it is timed in the steady
 * state a trainer's repeated ops see (plans reused, spin budgets adapted,
 * pages touched, the ranks placed on the CPUs): about 64 MiB of ops a
 * point, 50000 small ones, 4 of 16 MiB, 1 from 64 MiB (3 ops were a few
 * microseconds of a 8 B point). 50000, not 5000: with more ranks than
 * CPUs, the scheduler took up to 200 ms to spread ranks that had just
 * slept in the daemon's path (a big op) or in their join, and ops ran
 * 10-20 us instead of 4 meanwhile (docs/performance.md); 5000 small ops
 * are 20 ms there. Every rank, and the Open MPI baseline, warms up
 * alike. */
int bench_warmup(size_t bytes) {
  size_t n = ((size_t)64 << 20) / (bytes ? bytes : 1);
  return n > 50000 ? 50000 : n < 1 ? 1 : (int)n;
}

static size_t mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  size_t kib = 0;
  if (f == NULL)
    return (size_t)4 << 30; /* no /proc: assume a small machine */
  while (fgets(line, sizeof(line), f) != NULL)
    if (sscanf(line, "MemAvailable: %zu kB", &kib) == 1)
      break;
  fclose(f);
  return kib * 1024;
}

size_t bench_mem_bound(void) {
  const char *bytes = getenv("BENCH_MEM_BYTES");
  if (bytes != NULL && bytes[0] != '\0')
    return (size_t)strtoull(bytes, NULL, 0);
  const char *frac = getenv("BENCH_MEM_FRACTION");
  double f = frac != NULL && frac[0] != '\0' ? atof(frac) : 0.5;
  if (f <= 0 || f > 1)
    f = 0.5;
  return (size_t)((double)mem_available() * f);
}

size_t bench_ulysses_shape(size_t bytes, int world, size_t esize,
                           int64_t shape[4]) {
  int64_t h = 32 % world == 0 ? 32 : 4 * world;
  int64_t elems = (int64_t)(bytes / esize);
  if (elems < h)
    return 0;
  int64_t d = elems >= h * 128 ? 128 : elems / h;
  shape[0] = 1, shape[1] = elems / (h * d), shape[2] = h, shape[3] = d;
  return (size_t)(shape[1] * h * d) * esize;
}

static size_t numel(const int64_t *s, int nd) {
  size_t n = 1;
  for (int i = 0; i < nd; i++)
    n *= (size_t)s[i];
  return n;
}

int bench_shape_of(bench_op op, size_t bytes, int w, bench_shape *p) {
  int64_t n = (int64_t)(bytes / 4), per = n / w;
  memset(p, 0, sizeof(*p));
  p->nd_in = p->nd_out = 1;
  switch (op) {
  case BENCH_ALL_GATHER:
    p->in[0] = per, p->out[0] = per * w;
    break;
  case BENCH_ALL_REDUCE:
    p->in[0] = p->out[0] = n;
    break;
  case BENCH_REDUCE_SCATTER:
    p->in[0] = per * w, p->out[0] = per;
    break;
  case BENCH_ALL_TO_ALL: /* [w, n/w] -> [1, n]: row r of every rank */
    p->nd_in = p->nd_out = 2;
    p->in[0] = w, p->in[1] = per, p->out[0] = 1, p->out[1] = per * w;
    break;
  case BENCH_ULYSSES: /* [b, s/P, h, d] -> [b, s, h/P, d] */
    if (bench_ulysses_shape(bytes, w, 4, p->in) == 0)
      return 0;
    p->nd_in = p->nd_out = 4;
    p->out[0] = p->in[0], p->out[1] = p->in[1] * w;
    p->out[2] = p->in[2] / w, p->out[3] = p->in[3];
    break;
  default:
    return 0;
  }
  if (per < 1 || n < 1)
    return 0;
  p->in_bytes = numel(p->in, p->nd_in) * 4;
  p->out_bytes = numel(p->out, p->nd_out) * 4;
  p->bytes = op == BENCH_ALL_GATHER ? p->out_bytes : p->in_bytes;
  return 1;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

void bench_stats(double *t, int n, double *mean_us, double *p50_us,
                 double *p99_us) {
  double sum = 0;
  for (int i = 0; i < n; i++)
    sum += t[i];
  qsort(t, (size_t)n, sizeof(double), cmp_d);
  *mean_us = sum / n * 1e6;
  *p50_us = t[n / 2] * 1e6;
  *p99_us = t[(int)((n - 1) * 0.99)] * 1e6;
}

double bench_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double *bench_times(int n, const char *prog) {
  double *t = malloc((size_t)n * sizeof(double));
  if (t == NULL) {
    fprintf(stderr, "%s: malloc of %d times failed\n", prog, n);
    return NULL;
  }
  for (int i = 0; i < n; i++)
    t[i] = -1;
  return t;
}

double bench_algbw(const bench_result *r) {
  return (double)r->bytes / (r->us * 1e-6) / 1e9;
}

double bench_busbw(const bench_result *r) {
  return bench_algbw(r) * bench_bus_factor(r->op, r->ranks);
}

void bench_csv_header(FILE *f) {
  fprintf(f, "source,op,ranks,size_bytes,count,type,time_us,algbw_gbs,"
          "busbw_gbs,p50_us,p99_us,iters");
}

void bench_csv_row(FILE *f, const bench_result *r) {
  fprintf(f, "%s,%s,%d,%zu,%zu,float,%.3f,%.4f,%.4f,%.3f,%.3f,%d",
          r->source, bench_op_name(r->op), r->ranks, r->bytes, r->bytes / 4,
          r->us, bench_algbw(r), bench_busbw(r), r->p50_us, r->p99_us,
          r->iters);
}

void bench_json_row(FILE *f, const bench_result *r) {
  fprintf(f, "{\"source\":\"%s\",\"op\":\"%s\",\"ranks\":%d,"
          "\"size_bytes\":%zu,\"count\":%zu,\"type\":\"float\","
          "\"time_us\":%.3f,\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,"
          "\"p50_us\":%.3f,\"p99_us\":%.3f,\"iters\":%d", r->source,
          bench_op_name(r->op), r->ranks, r->bytes, r->bytes / 4, r->us,
          bench_algbw(r), bench_busbw(r), r->p50_us, r->p99_us, r->iters);
}

void bench_table_header(FILE *f) {
  fprintf(f, "%-10s %-15s %11s %10s %6s %10s %9s %9s %9s %9s", "# source",
          "op", "size(B)", "count", "type", "time(us)", "algbw", "busbw",
          "p50(us)", "p99(us)");
}

void bench_table_row(FILE *f, const bench_result *r) {
  fprintf(f, "%-10s %-15s %11zu %10zu %6s %10.1f %9.3f %9.3f %9.1f %9.1f",
          r->source, bench_op_name(r->op), r->bytes, r->bytes / 4, "float",
          r->us, bench_algbw(r), bench_busbw(r), r->p50_us, r->p99_us);
}
