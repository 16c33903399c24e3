#include "fast_ranks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client_internal.h"
#include "harness.h"

void *spt_fixture_up(spt_daemon *d, const char *const *extra, size_t n) {
  if (spt_daemon_start(d, extra) != 0)
    return NULL;
  void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                 -1, 0);
  if (p == MAP_FAILED) {
    perror("mmap of the ranks' shared memory");
    spt_daemon_stop(d);
    return NULL;
  }
  return p; /* anonymous memory comes zeroed */
}

int spt_fixture_down(spt_daemon *d, void *shared, size_t n) {
  if (shared != NULL)
    munmap(shared, n);
  return spt_daemon_stop(d);
}

int spt_rk_open(spt_rk *k, const char *socket, const char *group, int rank,
                int world, int64_t timeout_ms) {
  memset(k, 0, sizeof(*k));
  k->c = spt_connect(socket);
  if (k->c == NULL || (timeout_ms && spc_set_op_timeout(k->c, timeout_ms)))
    return -1;
  if (spc_group_join(k->c, group, world, rank, &k->g) < 0 ||
      spc_buffer_alloc(k->c, 4 << 20, &k->b) < 0) {
    fprintf(stderr, "rank %d: open: %s\n", rank, spc_last_error(k->c));
    return -1;
  }
  return 0;
}

float *spt_rk_tensor(spt_rk *k, spc_tensor *t, int nd, const int64_t *s) {
  size_t n = 1;
  for (int i = 0; i < nd; i++)
    n *= (size_t)s[i];
  if (spc_tensor_init(t, k->b, k->used, SPC_FLOAT32, nd, s) < 0)
    return NULL;
  k->used += (n * 4 + 63) & ~(size_t)63;
  return spc_tensor_data(t);
}

int spt_rk_close(spt_rk *k, int bad) {
  spc_disconnect(k->c);
  return bad;
}

/* Value i of rank r's input (exact in float sums). */
float spt_rk_val(int r, size_t i, int step) {
  return (float)((int)((i * 7 + (size_t)r * 13 + (size_t)step * 5) % 64) - 32) /
         8.0f;
}

int spt_rk_reduce_check(spt_rk *k, int rank, int w, const spc_tensor *in,
                        const spc_tensor *out, int step, int async) {
  size_t n = (size_t)in->shape[0];
  float *x = spc_tensor_data(in), *y = spc_tensor_data(out);
  for (size_t i = 0; i < n; i++)
    x[i] = spt_rk_val(rank, i, step);
  int rc;
  if (async) {
    spc_request *req;
    spc_op op = spc_op_all_reduce(SPC_SUM);
    rc = spc_start(k->g, &op, in, out, &req);
    if (rc == 0)
      rc = spc_wait(&req);
  } else {
    rc = spc_all_reduce(k->g, in, out, SPC_SUM);
  }
  if (rc < 0) {
    fprintf(stderr, "rank %d step %d: all_reduce: %s\n", rank, step,
            spc_last_error(k->c));
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    float ref = spt_rk_val(0, i, step);
    for (int r = 1; r < w; r++)
      ref += spt_rk_val(r, i, step);
    if (y[i] != ref) {
      fprintf(stderr, "rank %d step %d: [%zu] = %g, want %g\n", rank, step,
              i, y[i], ref);
      return 1;
    }
  }
  return 0;
}

int spt_rk_refused_after_drain(spt_rk *k, int rank, int64_t n, int w,
                               int *answered) {
  spc_tensor in, out;
  if (!spt_rk_tensor(k, &in, 1, &n) || !spt_rk_tensor(k, &out, 1, &n))
    return 1;
  int rc = spc_all_reduce(k->g, &in, &out, SPC_SUM);
  __atomic_add_fetch(answered, 1, __ATOMIC_ACQ_REL);
  while (__atomic_load_n(answered, __ATOMIC_ACQUIRE) < w)
    usleep(1000);
  int bad = rc == SPC_ESHUTDOWN ? !strstr(spc_last_error(k->c), "no new ops")
                                : rc != SPC_ERESTARTED;
  if (bad)
    fprintf(stderr, "rank %d after the drain: %d '%s'\n", rank, rc,
            spc_last_error(k->c));
  return bad;
}

/* all_reduce of n floats, then check against the rank-order sum. */
int spt_rk_reduce_once(spt_rk *k, int rank, int w, size_t n, int step,
                       int async) {
  int64_t s[1] = {(int64_t)n};
  spc_tensor in, out;
  if (spt_rk_tensor(k, &in, 1, s) == NULL ||
      spt_rk_tensor(k, &out, 1, s) == NULL ||
      spt_rk_reduce_check(k, rank, w, &in, &out, step, async))
    return 1;
  k->used = 0;
  return 0;
}

char *spt_stats_fetch(const char *sock, const char *format) {
  spc_client *c = spt_connect(sock);
  if (c == NULL)
    return NULL;
  Spcoll__StatsRequest rq = SPCOLL__STATS_REQUEST__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT, *reply = NULL;
  if (format != NULL)
    rq.format = (char *)format;
  f.body_case = SPCOLL__FRAME__BODY_STATS_REQUEST;
  f.stats_request = &rq;
  char *text = NULL;
  if (spc__call(c, &f, -1, &reply) == 0)
    text = strdup(reply->stats_reply->text);
  if (reply)
    spcoll__frame__free_unpacked(reply, NULL);
  spc_disconnect(c);
  return text;
}

char *spt_stats_text(const char *sock) {
  return spt_stats_fetch(sock, NULL);
}

int spt_stats_has(const char *sock, const char *needle) {
  char *t = spt_stats_text(sock);
  int ok = t && strstr(t, needle);
  if (!ok)
    fprintf(stderr, "stats lack '%s':\n%s\n", needle, t ? t : "(none)");
  free(t);
  return ok;
}

int spt_rk_gather_once(spt_rk *k, int rank, int w, int64_t n, int64_t d,
                       int64_t cols, int step) {
  int64_t s[2] = {n + d * rank, cols}, o[2] = {0, cols}, sizes[SPT_RK_MAXW];
  for (int r = 0; r < w; r++)
    sizes[r] = n + d * r, o[0] += sizes[r];
  spc_tensor in, out;
  float *x = spt_rk_tensor(k, &in, 2, s), *y = spt_rk_tensor(k, &out, 2, o);
  if (x == NULL || y == NULL)
    return 1;
  for (size_t i = 0; i < (size_t)(s[0] * cols); i++)
    x[i] = spt_rk_val(rank, i, step);
  if (spc_all_gather(k->g, &in, &out, 0, sizes) < 0) {
    fprintf(stderr, "rank %d: all_gather: %s\n", rank, spc_last_error(k->c));
    return 1;
  }
  size_t at = 0;
  for (int r = 0; r < w; r++)
    for (size_t i = 0; i < (size_t)(sizes[r] * cols); i++, at++)
      if (y[at] != spt_rk_val(r, i, step)) {
        fprintf(stderr, "rank %d: gather from %d [%zu] wrong\n", rank, r, i);
        return 1;
      }
  k->used = 0;
  return 0;
}

/* Element i of what rank r sends rank j at step (exact in floats). */
static float a2av_val(int r, int j, int64_t i, int step) {
  return (float)((r * 7 + j * 3 + (int)(i % 241) + step) % 251);
}

int spt_rk_a2av_once(spt_rk *k, int rank, int w, int from, int to,
                     int64_t big, int step) {
  int64_t is[SPT_RK_MAXW], os[SPT_RK_MAXW], ni = 0, no = 0;
  for (int j = 0; j < w; j++) {
    int send = (from < 0 || rank == from) && j == to;
    int recv = (from < 0 || j == from) && rank == to;
    is[j] = send ? big : 1 + rank + j, ni += is[j];
    os[j] = recv ? big : 1 + j + rank, no += os[j];
  }
  spc_tensor in, out;
  float *x = spt_rk_tensor(k, &in, 1, &ni), *y = spt_rk_tensor(k, &out, 1, &no);
  if (x == NULL || y == NULL)
    return 1;
  for (int j = 0, at = 0; j < w; j++)
    for (int64_t i = 0; i < is[j]; i++)
      x[at++] = a2av_val(rank, j, i, step);
  if (spc_all_to_all_v(k->g, &in, &out, is, os) < 0) {
    fprintf(stderr, "rank %d step %d: all_to_all_v: %s\n", rank, step,
            spc_last_error(k->c));
    return 1;
  }
  for (int r = 0, at = 0; r < w; r++)
    for (int64_t i = 0; i < os[r]; i++, at++)
      if (y[at] != a2av_val(r, rank, i, step)) {
        fprintf(stderr, "rank %d step %d: from %d [%lld] = %g, want %g\n",
                rank, step, r, (long long)i, y[at], a2av_val(r, rank, i, step));
        return 1;
      }
  k->used = 0;
  return 0;
}
