/* What every part of the client uses and which uses nothing of it: a
 * client's last error (and spc_connect's, which has no client yet), and a
 * tensor's bytes and data. The fast path reaches the rest of the client
 * only through these (tests/layers.py, rule 10). */
#include <stdarg.h>
#include <stdio.h>

#include "client_internal.h"

/* spc_connect has no client to hold its message yet. */
static __thread char connect_error[512];

int64_t spc__op_limit_ms(const spc_client *c) {
  if (c->op_timeout_ms > 0)
    return c->op_timeout_ms;
  return c->daemon_op_timeout_ms > 0 ? c->daemon_op_timeout_ms : 1800000;
}

int spc__fail(spc_client *c, int status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->last_error, sizeof(c->last_error), fmt, ap);
  va_end(ap);
  return status;
}

int spc_client_set_wait_lock(spc_client *c, void (*release)(void *),
                             void (*take)(void *), void *arg) {
  if (c == NULL)
    return SPC_EINVAL;
  if ((release == NULL) != (take == NULL))
    return spc__fail(c, SPC_EINVAL, "spc_client_set_wait_lock: release %s "
                     "but take %s: give both or neither",
                     release ? "given" : "NULL", take ? "given" : "NULL");
  c->wait_release = release, c->wait_take = take, c->wait_arg = arg;
  return SPC_OK;
}

int spc__wait_release(spc_group *g) {
  spc_client *c = g->client;
  if (c->wait_release == NULL)
    return 0;
  g->in_wait = 1;
  c->wait_release(c->wait_arg);
  return 1;
}

void spc__wait_take(spc_group *g) {
  spc_client *c = g->client;
  c->wait_take(c->wait_arg);
  g->in_wait = 0;
}

const char *spc_last_error(const spc_client *c) {
  return c ? c->last_error : connect_error;
}

char *spc__connect_error(void) {
  return connect_error;
}

size_t spc_dtype_size(spc_dtype dtype) {
  return spk_dtype_size((spk_dtype)dtype);
}

uint64_t spc__tensor_bytes(const spc_tensor *t) {
  uint64_t n = spc_dtype_size(t->dtype);
  for (int i = 0; i < t->ndim && i < SPC_MAX_DIMS; i++)
    if (t->shape[i] < 0 ||
        __builtin_mul_overflow(n, (uint64_t)t->shape[i], &n))
      return UINT64_MAX;
  return n;
}

void *spc_tensor_data(const spc_tensor *t) {
  return t && t->buf ? (uint8_t *)t->buf->data + t->offset : NULL;
}
