/* Copies and fills. Device-side work runs on the stream's worker; an
 * async copy touching pageable host memory is synchronous, as CUDA makes
 * it (the stream drains first), which is how a loop thread ends up
 * waiting on clients' streams: SPCSIM_FORBID_PAGEABLE_ASYNC=1 makes it a
 * violation for processes that must never block. A copy touching cuMem
 * (VMM) memory no GPU was granted is a violation (sim_check_copy). A
 * faulted device (sim_poison) copies nothing. */
#include "sim.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  void *dst;
  const void *src;
  uint64_t n;
  int v, set;
  uint64_t rows, dpitch, spitch; /* a 2-D copy: rows of n bytes */
} copy_op;

static void run_copy(void *a, int *status) {
  copy_op *c = a;
  if (*status == SIM_EILLEGAL)
    return;
  if (c->set)
    memset(c->dst, c->v, c->n);
  else if (c->rows == 0)
    memmove(c->dst, c->src, c->n);
  for (uint64_t r = 0; r < c->rows; r++)
    memmove((uint8_t *)c->dst + r * c->dpitch,
            (const uint8_t *)c->src + r * c->spitch, c->n);
}

/* c queued on s, or freed when it cannot be (a faulted device). */
static int enqueue_copy(sim_stream *s, copy_op *c) {
  int rc = sim_enqueue(s, run_copy, c, 1);
  if (rc != SIM_OK)
    free(c);
  return rc;
}

/* 1: pageable host memory (in no simulated mapping). */
static int pageable(const void *p, uint64_t n) {
  sim_map m;
  return !sim_lookup(p, n, &m);
}

int sim_memcpy(void *dst, const void *src, uint64_t n, sim_stream *s, int async,
               const char *call) {
  if (sim_sticky(SIM_OK) != SIM_OK)
    return SIM_EILLEGAL;
  if (n == 0)
    return SIM_OK;
  int pg_dst = pageable(dst, n), pg_src = pageable(src, n);
  int pg = pg_dst || pg_src;
  if (!pg_dst)
    sim_check_copy(dst, n, call);
  if (!pg_src)
    sim_check_copy(src, n, call);
  s = sim_stream_resolve(s);
  if (s == NULL)
    return SIM_ENOMEM;
  if (async && pg) {
    /* "1", or the name of the programs it applies to (the daemon must
     * never block, a test rank may). */
    if (sim_applies_here("SPCSIM_FORBID_PAGEABLE_ASYNC"))
      sim_violation("pageable-async-copy", call,
                    "%llu bytes between %p and "
                    "%p, pageable host memory: the call waits for the "
                    "stream's earlier work (use pinned memory)",
                    (unsigned long long)n, src, dst);
  }
  if (!async || pg) {
    int rc = sim_stream_sync(s);
    memmove(dst, src, n);
    return rc;
  }
  copy_op *c = malloc(sizeof(*c));
  if (c == NULL)
    return SIM_ENOMEM;
  *c = (copy_op){.dst = dst, .src = src, .n = n};
  return enqueue_copy(s, c);
}

int sim_memset(void *dst, int v, uint64_t n, sim_stream *s, int async,
               const char *call) {
  sim_map m;
  if (n == 0)
    return SIM_OK;
  if (!sim_lookup(dst, n, &m) || sim_is_host(m.kind))
    return SIM_EINVAL;
  sim_check_copy(dst, n, call);
  copy_op *c = malloc(sizeof(*c));
  if (c == NULL)
    return SIM_ENOMEM;
  *c = (copy_op){.dst = dst, .n = n, .v = v, .set = 1};
  int rc = enqueue_copy(s, c);
  if (rc == SIM_OK && !async)
    rc = sim_stream_sync(s);
  return rc;
}

int sim_memcpy2d(void *dst, uint64_t dpitch, const void *src, uint64_t spitch,
                 uint64_t width, uint64_t height, sim_stream *s,
                 const char *call) {
  if (sim_sticky(SIM_OK) != SIM_OK)
    return SIM_EILLEGAL;
  if (width == 0 || height == 0)
    return SIM_OK;
  if (dpitch < width || spitch < width)
    return SIM_EINVAL; /* CUDA_ERROR_INVALID_VALUE, as the driver says */
  uint64_t dspan = (height - 1) * dpitch + width;
  uint64_t sspan = (height - 1) * spitch + width;
  if (pageable(dst, dspan) || pageable(src, sspan))
    return SIM_ENOTSUP; /* libspclient copies device memory only */
  sim_check_copy(dst, dspan, call);
  sim_check_copy(src, sspan, call);
  s = sim_stream_resolve(s);
  if (s == NULL)
    return SIM_ENOMEM;
  copy_op *c = malloc(sizeof(*c));
  if (c == NULL)
    return SIM_ENOMEM;
  *c = (copy_op){.dst = dst, .src = src, .n = width, .rows = height,
                 .dpitch = dpitch, .spitch = spitch};
  return enqueue_copy(s, c);
}
