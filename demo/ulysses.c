/* Ulysses sequence parallelism, as trainers run it: each rank holds a
 * slice of the sequence with every head; one all_to_all trades that for
 * the whole sequence of a slice of the heads, attention runs locally, and
 * the reverse all_to_all brings the sequence slice back. */
#include "ulysses.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"

enum { B = 2, S = 256, H = 8, D = 32 };

static size_t at(int b, int s, int h, int d, int ns, int nh) {
  return (((size_t)b * (size_t)ns + (size_t)s) * (size_t)nh + (size_t)h) *
             D + (size_t)d;
}

/* softmax(q k^T / sqrt(D)) v for heads [0, nh) of [B, ns, nh, D] tensors:
 * the same function serves the distributed step and the reference. */
static void attention(const float *q, const float *k, const float *v,
                      float *o, int ns, int nh) {
  float *w = malloc((size_t)ns * sizeof(float));
  for (int b = 0; b < B; b++)
    for (int h = 0; h < nh; h++)
      for (int i = 0; i < ns; i++) {
        float mx = -INFINITY, sum = 0;
        for (int j = 0; j < ns; j++) {
          float dot = 0;
          for (int d = 0; d < D; d++)
            dot += q[at(b, i, h, d, ns, nh)] * k[at(b, j, h, d, ns, nh)];
          w[j] = dot / sqrtf((float)D);
          mx = w[j] > mx ? w[j] : mx;
        }
        for (int j = 0; j < ns; j++)
          sum += w[j] = expf(w[j] - mx);
        for (int d = 0; d < D; d++) {
          float acc = 0;
          for (int j = 0; j < ns; j++)
            acc += w[j] * v[at(b, j, h, d, ns, nh)];
          o[at(b, i, h, d, ns, nh)] = acc / sum;
        }
      }
  free(w);
}

/* Rank r's [B, S/P, H, D] slice of tensor `which` (0 q, 1 k, 2 v). */
static void fill_slice(float *p, int which, int rank, int sp) {
  spt_fill(p, SPC_FLOAT32, (size_t)B * sp * H * D, 100 + which, rank);
  for (size_t i = 0; i < (size_t)B * sp * H * D; i++)
    p[i] /= 16.0f; /* keep the logits small */
}

/* The whole-sequence reference: gather every rank's slices, attend, and
 * return this rank's sequence slice of the output. */
static float *reference(int rank, int world) {
  int sp = S / world;
  size_t full = (size_t)B * S * H * D, part = (size_t)B * sp * H * D;
  float *t[3], *o = malloc(full * sizeof(float)), *tmp = malloc(part * 4);
  for (int x = 0; x < 3; x++) {
    t[x] = malloc(full * sizeof(float));
    for (int r = 0; r < world; r++) {
      fill_slice(tmp, x, r, sp);
      for (int b = 0; b < B; b++)
        memcpy(&t[x][at(b, r * sp, 0, 0, S, H)], &tmp[at(b, 0, 0, 0, sp, H)],
               (size_t)sp * H * D * sizeof(float));
    }
  }
  attention(t[0], t[1], t[2], o, S, H);
  float *mine = malloc(part * sizeof(float));
  for (int b = 0; b < B; b++)
    memcpy(&mine[at(b, 0, 0, 0, sp, H)], &o[at(b, rank * sp, 0, 0, S, H)],
           (size_t)sp * H * D * sizeof(float));
  for (int x = 0; x < 3; x++)
    free(t[x]);
  free(o);
  free(tmp);
  return mine;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int compare(const float *got, const float *want, size_t n, int rank) {
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - (double)want[i]);
    worst = e > worst ? e : worst;
  }
  if (worst > 1e-5) {
    fprintf(stderr, "rank %d: ulysses output differs from the reference by "
            "%g\n", rank, worst);
    return 1;
  }
  return 0;
}

int demo_ulysses_rank(const char *socket, int rank, int world) {
  int sp = S / world, hp = H / world;
  int64_t local[4] = {B, sp, H, D}, heads[4] = {B, S, hp, D};
  size_t n = (size_t)B * sp * H * D, bytes = n * sizeof(float);
  spc_client *c = spt_connect(socket);
  spc_group *g;
  spc_buffer *buf;
  spc_tensor x[3], y[3], o, back;
  if (c == NULL || spc_group_join(c, "ulysses", world, rank, &g) < 0 ||
      spc_buffer_alloc(c, 8 * bytes, &buf) < 0)
    return 1;
  for (int i = 0; i < 3; i++) {
    spc_tensor_init(&x[i], buf, i * bytes, SPC_FLOAT32, 4, local);
    spc_tensor_init(&y[i], buf, (3 + i) * bytes, SPC_FLOAT32, 4, heads);
    fill_slice(spc_tensor_data(&x[i]), i, rank, sp);
  }
  spc_tensor_init(&o, buf, 6 * bytes, SPC_FLOAT32, 4, heads);
  spc_tensor_init(&back, buf, 7 * bytes, SPC_FLOAT32, 4, local);
  double t0 = now_s(), t_comm = 0;
  int rc = 0;
  for (int i = 0; i < 3 && rc == 0; i++) /* sequence slice -> head slice */
    rc = spc_all_to_all(g, &x[i], &y[i], 2, 1, 0);
  t_comm += now_s() - t0;
  if (rc == 0)
    attention(spc_tensor_data(&y[0]), spc_tensor_data(&y[1]),
              spc_tensor_data(&y[2]), spc_tensor_data(&o), S, hp);
  double t1 = now_s();
  if (rc == 0) /* head slice -> sequence slice */
    rc = spc_all_to_all(g, &o, &back, 1, 2, 0);
  t_comm += now_s() - t1;
  if (rc < 0) {
    fprintf(stderr, "rank %d: all_to_all: %s\n", rank, spc_last_error(c));
    spc_disconnect(c);
    return 1;
  }
  float *want = reference(rank, world);
  rc = compare(spc_tensor_data(&back), want, n, rank);
  free(want);
  if (rc == 0 && rank == 0)
    printf("ulysses attention step [b=%d, s=%d, h=%d, d=%d] over %d ranks: "
           "4 all_to_all in %.0f us, matches the single-process attention\n",
           B, S, H, D, world, t_comm * 1e6);
  spc_disconnect(c);
  return rc;
}
