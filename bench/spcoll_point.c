#include "spcoll_point.h"

#include <stdio.h>
#include <string.h>

/* Element i of rank k's input: small exact values, so sums stay normal
 * floats (no denormal slow path), exact, and the fill is cheap at 1 GiB. */
static float fill_value(int k, size_t i) {
  return (float)((i + (size_t)k) & 63);
}

/* The numbers are for correct results (and the mover's large-plan paths,
 * streaming stores included, are checked at the sizes that use them). */
int spc_point_verify(bench_op op, const spc_point *p, int r, int w) {
  const bench_shape *ps = &p->ps;
  const float *y = spc_tensor_data(&p->out);
  size_t n = ps->out_bytes / 4;
  size_t per = op == BENCH_ALL_GATHER || op == BENCH_ALL_TO_ALL
                   ? n / (size_t)w : ps->in_bytes / 4 / (size_t)w;
  int64_t sl = ps->in[1], h = ps->in[2], d = ps->in[3], hp = h / w;
  for (size_t i = 0; i < n; i++) {
    float want = 0;
    switch (op) {
    case BENCH_ALL_GATHER: want = fill_value((int)(i / per), i % per); break;
    case BENCH_ALL_REDUCE:
      for (int k = 0; k < w; k++)
        want += fill_value(k, i);
      break;
    case BENCH_REDUCE_SCATTER:
      for (int k = 0; k < w; k++)
        want += fill_value(k, (size_t)r * per + i);
      break;
    case BENCH_ALL_TO_ALL: /* row r of rank i / per's [w, per] input */
      want = fill_value((int)(i / per), (size_t)r * per + i % per);
      break;
    default: { /* y[0, k*sl + s, hh, dd] = x_k[0, s, r*hp + hh, dd] */
      size_t dd = i % (size_t)d, hh = i / (size_t)d % (size_t)hp;
      size_t tok = i / (size_t)(d * hp), k = tok / (size_t)sl;
      size_t s = tok % (size_t)sl;
      want = fill_value((int)k, (s * (size_t)h + (size_t)r * (size_t)hp + hh) *
                                    (size_t)d + dd);
    }
    }
    if (y[i] != want) {
      fprintf(stderr, "bench rank %d: %s at %zu bytes: element %zu is %g, "
              "not %g\n", r, bench_op_name(op), ps->bytes, i, (double)y[i],
              (double)want);
      return 1;
    }
  }
  return 0;
}

int spc_point_run(spc_group *g, bench_op op, spc_point *p) {
  spc_tensor *in = &p->in, *out = &p->out;
  switch (op) {
  case BENCH_ALL_GATHER: return spc_all_gather(g, in, out, 0, NULL);
  case BENCH_ALL_REDUCE: return spc_all_reduce(g, in, out, SPC_SUM);
  case BENCH_REDUCE_SCATTER: return spc_reduce_scatter(g, in, out, 0, NULL);
  case BENCH_ALL_TO_ALL: return spc_all_to_all(g, in, out, 0, 1, 0);
  default: return spc_all_to_all(g, in, out, 2, 1, 0); /* Ulysses */
  }
}

static size_t page_up(size_t n) {
  return (n + 4095) / 4096 * 4096;
}

size_t spc_point_need(const bench_shape *p, int w) {
  return (size_t)w * (page_up(p->in_bytes) + page_up(p->out_bytes));
}

int spc_point_setup(spc_client *c, const bench_shape *ps, int rank,
                    spc_point *p) {
  size_t off = page_up(ps->in_bytes), len = off + page_up(ps->out_bytes);
  memset(p, 0, sizeof(*p));
  p->ps = *ps;
  if (spc_buffer_alloc(c, len, &p->buf) < 0) {
    fprintf(stderr, "bench rank %d: spc_buffer_alloc of %zu bytes: %s\n",
            rank, len, spc_last_error(c));
    return 1;
  }
  if (spc_tensor_init(&p->in, p->buf, 0, SPC_FLOAT32, ps->nd_in, ps->in) < 0 ||
      spc_tensor_init(&p->out, p->buf, off, SPC_FLOAT32, ps->nd_out,
                      ps->out) < 0) {
    fprintf(stderr, "bench rank %d: spc_tensor_init: %s\n", rank,
            spc_last_error(c));
    spc_point_free(p);
    return 1;
  }
  float *x = spc_tensor_data(&p->in);
  for (size_t i = 0; i < ps->in_bytes / 4; i++)
    x[i] = fill_value(rank, i);
  return 0;
}

int spc_point_free(spc_point *p) {
  int rc = p->buf != NULL ? spc_buffer_free(p->buf) : 0;
  if (rc < 0)
    fprintf(stderr, "bench: spc_buffer_free: %s\n", spc_strerror(rc));
  p->buf = NULL;
  return rc < 0;
}
