/* Caller memory (spc_buffer_wrap) on the daemon's path. The daemon knows
 * only buffers registered with it, so spc_run copies a wrapped input into
 * a buffer of the client's own before it sends the op, and the output
 * back once the op succeeded: what the caller would do by hand. One such
 * buffer per client, grown to the largest op staged, kept until the
 * client disconnects (spc_run is a blocking call: one op at a time). */
#include <stdint.h>
#include <string.h>

#include "client_internal.h"

static uint64_t tensor_bytes(const spc_tensor *t) {
  uint64_t n = spc_dtype_size(t->dtype);
  for (int i = 0; i < t->ndim; i++)
    n *= (uint64_t)t->shape[i];
  return n;
}

int spc__wrapped(const spc_tensor *in, const spc_tensor *out) {
  return (in != NULL && in->buf != NULL && in->buf->wrapped) ||
         (out != NULL && out->buf != NULL && out->buf->wrapped);
}

/* The staging buffer, at least n bytes: rounded up to a power of two
 * from 1 MiB, so growing ops reallocate it a few times at most. */
static int stage_fit(spc_client *c, uint64_t n) {
  if (c->wrap_stage != NULL && spc_buffer_size(c->wrap_stage) >= n)
    return SPC_OK;
  uint64_t size = 1u << 20;
  while (size < n && size < (UINT64_MAX >> 1))
    size <<= 1;
  if (c->wrap_stage != NULL) {
    int rc = spc_buffer_free(c->wrap_stage);
    c->wrap_stage = NULL;
    if (rc < 0)
      return rc;
  }
  return spc_buffer_alloc(c, (size_t)size, &c->wrap_stage);
}

/* t's copy at byte `at` of the staging buffer. */
static void staged(spc_client *c, const spc_tensor *t, uint64_t at,
                   spc_tensor *s) {
  *s = *t;
  s->buf = c->wrap_stage;
  s->offset = at;
}

int spc__wrap_begin(spc_client *c, spc__wrap *w, const spc_tensor **in_p,
                    const spc_tensor **out_p) {
  const spc_tensor *in = *in_p, *out = *out_p;
  memset(w, 0, sizeof(*w));
  uint64_t n[2] = {tensor_bytes(in), tensor_bytes(out)};
  uintptr_t a = (uintptr_t)spc_tensor_data(in);
  uintptr_t b = (uintptr_t)spc_tensor_data(out);
  int same = a == b && n[0] == n[1];
  if (!same && n[0] > 0 && n[1] > 0 && a < b + n[1] && b < a + n[0])
    return spc__fail(c, SPC_EINVAL, "input (%llu bytes at %p) and output "
                     "(%llu bytes at %p) overlap but are not the same "
                     "bytes", (unsigned long long)n[0], (void *)a,
                     (unsigned long long)n[1], (void *)b);
  /* Inputs first, each at a 64-byte boundary (aligned for any dtype). */
  uint64_t in_at = 0, out_at = same ? 0 : (n[0] + 63) & ~(uint64_t)63;
  int rc = stage_fit(c, out_at + n[1] > 0 ? out_at + n[1] : 1);
  if (rc < 0)
    return rc;
  w->active = 1;
  if (in->buf->wrapped) {
    staged(c, in, in_at, &w->in);
    memcpy(spc_tensor_data(&w->in), spc_tensor_data(in), n[0]);
    *in_p = &w->in;
  }
  if (out->buf->wrapped) {
    staged(c, out, out_at, &w->out);
    /* Bytes an op does not write keep what the caller's output held. */
    if (!same)
      memcpy(spc_tensor_data(&w->out), spc_tensor_data(out), n[1]);
    w->user_out = out;
    *out_p = &w->out;
  }
  return SPC_OK;
}

int spc__wrap_end(spc__wrap *w, int rc) {
  if (w->active && rc == SPC_OK && w->user_out != NULL)
    memcpy(spc_tensor_data(w->user_out), spc_tensor_data(&w->out),
           tensor_bytes(w->user_out));
  w->active = 0;
  return rc;
}
