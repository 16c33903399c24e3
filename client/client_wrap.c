/* Caller memory (spc_buffer_wrap) on the daemon's path. The daemon knows
 * only buffers registered with it, so spc_run copies a wrapped input into
 * a buffer of the client's own before it sends the op, and the output
 * back once the op succeeded: what the caller would do by hand. One such
 * buffer per client, grown to the largest op staged, kept until the
 * client disconnects (spc_run is a blocking call: one op at a time).
 *
 * By then the group's segment has told the other ranks that the op takes
 * the daemon's path, so they have sent it: a staging that fails (a
 * tensor outside its record, the daemon refusing the buffer) must not
 * leave them waiting. spc_run then sends the op as it is, which the
 * daemon fails on every rank (it knows no such buffer), and reports this
 * rank's own reason (w->failed). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "client_internal.h"

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

/* t's bytes inside its record (a plain struct its caller may have made
 * or changed by hand), as spc_tensor_init checks them. */
static int record_fits(spc_client *c, const spc_tensor *t, const char *what) {
  return spc__tensor_check(c, what, t->buf, t->offset, t->dtype, t->ndim,
                           t->shape);
}

static int wrap_fail(spc__wrap *w, spc_client *c, int rc) {
  w->failed = rc;
  snprintf(w->why, sizeof(w->why), "%s", spc_last_error(c));
  return rc;
}

int spc__wrap_begin(spc_client *c, spc__wrap *w, const spc_tensor **in_p,
                    const spc_tensor **out_p) {
  const spc_tensor *in = *in_p, *out = *out_p;
  memset(w, 0, sizeof(*w));
  int rc = in->buf->wrapped ? record_fits(c, in, "input") : SPC_OK;
  if (rc == SPC_OK && out->buf->wrapped)
    rc = record_fits(c, out, "output");
  if (rc < 0)
    return wrap_fail(w, c, rc);
  uint64_t n[2] = {spc__tensor_bytes(in), spc__tensor_bytes(out)};
  /* The very same bytes (an all_reduce in place) are staged once; any
   * other pair apart, so the op reads its input as it was (the layouts
   * the daemon takes in place, an all_gather's input in its slot of the
   * output, come out the same). Inputs first, each at a 64-byte boundary
   * (aligned for any dtype). */
  int same = spc_tensor_data(in) == spc_tensor_data(out) && n[0] == n[1];
  uint64_t in_at = 0, out_at = same ? 0 : (n[0] + 63) & ~(uint64_t)63;
  rc = stage_fit(c, out_at + n[1] > 0 ? out_at + n[1] : 1);
  if (rc < 0)
    return wrap_fail(w, c, rc);
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

int spc__wrap_end(spc_client *c, spc__wrap *w, int rc) {
  if (w->failed < 0)
    return spc__fail(c, w->failed, "%s (the op was failed on every rank)",
                     w->why);
  if (w->active && rc == SPC_OK && w->user_out != NULL)
    memcpy(spc_tensor_data(w->user_out), spc_tensor_data(&w->out),
           spc__tensor_bytes(w->user_out));
  w->active = 0;
  return rc;
}
