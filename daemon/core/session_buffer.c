/* BufRegister: a client's host memory (a memfd sent with the frame), its
 * device allocation named by a legacy CUDA IPC handle, or its cuMem
 * allocations sent as file descriptors. Each registration counts against
 * the client's limits and its uid's quotas before anything is mapped. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "gpu_ipc.h"
#include "session.h"
#include "types.h"

/* cuMem registrations a session may have mapping at once (each holds a
 * thread of libuv's pool while it maps). */
#define SESSION_MAX_VMM_PENDING 4

/* A host buffer registered for stream flags: an engine makes its words
 * reachable by its streams. On failure the buffer is dropped. */
static int flags_open(spd_session *s, spd_buffer *buf, spk_err *err) {
  if (buf->kind != SPD_BUF_HOST || buf->size % 16 != 0)
    return spk_err_set(err, SPK_EINVAL, "a stream flags buffer must be host "
                       "memory of a multiple of 16 bytes, not %zu bytes of "
                       "%s memory", buf->size,
                       buf->kind == SPD_BUF_HOST ? "host" : "device");
  int rc = spd_engines_flags_open(s->ctx, buf->base, buf->size,
                                  buf->engine_state, err);
  if (rc < 0) {
    spd_buffer_unref(s->ctx, buf);
    return rc;
  }
  buf->stream_flags = 1;
  spd_buffer_counts_seed(buf);
  return SPK_OK;
}

/* The client's limits and its uid's quotas, taken for one more buffer of
 * `charge` bytes of daemon memory (device memory costs the daemon none:
 * only the buffer count limits it). < 0 after answering request id. */
static int admit(spd_session *s, uint64_t id, uint64_t size,
                 uint64_t charge) {
  const spd_config *cfg = &s->ctx->cfg;
  if (s->nbuffers + s->vmm_pending >= cfg->client_max_buffers ||
      charge > (uint64_t)cfg->client_max_bytes - s->registered_bytes) {
    char msg[192];
    snprintf(msg, sizeof(msg), "client limit: %d buffers and %llu bytes "
             "registered, %llu more asked; limits %d buffers "
             "(client_max_buffers), %lld bytes (client_max_bytes)",
             s->nbuffers, (unsigned long long)s->registered_bytes,
             (unsigned long long)size, cfg->client_max_buffers,
             cfg->client_max_bytes);
    spd_session_send_error(s, id, SPK_ENO_MEMORY, msg);
    return SPK_ENO_MEMORY;
  }
  char msg[200];
  int rc = spd_quota_take(&s->ctx->quotas, cfg, s->uid, SPD_Q_BUFFERS, 1, msg,
                          sizeof(msg));
  if (rc == SPK_OK &&
      (rc = spd_quota_take(&s->ctx->quotas, cfg, s->uid, SPD_Q_BYTES,
                           (long long)charge, msg, sizeof(msg))) < 0)
    spd_quota_give(&s->ctx->quotas, s->uid, SPD_Q_BUFFERS, 1);
  if (rc < 0)
    spd_session_send_error(s, id, rc, msg);
  return rc;
}

static void unadmit(spd_ctx *ctx, uid_t uid, uint64_t charge) {
  spd_quota_give(&ctx->quotas, uid, SPD_Q_BUFFERS, 1);
  spd_quota_give(&ctx->quotas, uid, SPD_Q_BYTES, (long long)charge);
}

/* buf joins s's buffers and its id goes back to request id. */
static void added(spd_session *s, uint64_t id, spd_buffer *buf) {
  TAILQ_INSERT_TAIL(&s->buffers, buf, link);
  s->nbuffers++;
  if (buf->kind == SPD_BUF_HOST)
    s->registered_bytes += buf->size;
  Spcoll__BufRegistered out = SPCOLL__BUF_REGISTERED__INIT;
  Spcoll__Frame r = SPCOLL__FRAME__INIT;
  out.buffer_id = buf->id;
  out.submit_ring = buf == s->ring;
  r.id = id;
  r.body_case = SPCOLL__FRAME__BODY_BUF_REGISTERED;
  r.buf_registered = &out;
  spd_session_send(s, &r);
}

/* ---- cuMem allocations ---------------------------------------------------- */

/* A cuMem registration while its mapping is made: it outlives the session
 * if the client goes meanwhile. */
typedef struct {
  spd_ctx *ctx;
  uint64_t session, req;
  uid_t uid;
  uint64_t size;
  int nfds;                   /* SPD_Q_FDS its descriptors hold */
} vmm_pending;

static void vmm_mapped(void *arg, int rc, void *mem, uint8_t *base, int dev,
                       const spk_err *err) {
  vmm_pending *p = arg;
  spd_session *s = spd_session_find(p->ctx, p->session);
  spd_session_fds_give(p->ctx, p->uid, p->nfds); /* all closed by now */
  if (s != NULL)
    s->vmm_pending--;
  spd_buffer *buf = NULL;
  spk_err e;
  if (rc == SPK_OK && s != NULL && !s->doomed &&
      (rc = spd_buffer_of_device(p->ctx, mem, base, dev, p->size, &buf,
                                 &e)) < 0)
    err = &e;
  if (buf != NULL) {
    p->ctx->stats.buffers_vmm++;
    added(s, p->req, buf);
  } else {
    if (rc == SPK_OK) /* mapped, but the client went */
      spd_gpu_ipc_close(p->ctx, mem);
    unadmit(p->ctx, p->uid, 0);
    if (s != NULL && !s->doomed)
      spd_session_send_error(s, p->req, rc, err->msg);
  }
  free(p);
}

/* Descriptors a frame came with, taken from the pipe's queue; `charged`
 * of them hold their uid's SPD_Q_FDS. */
typedef struct {
  int fd[SPK_VMM_MAX_CHUNKS];
  int n, charged;
} taken;

/* Close t's descriptors: their quota goes back. */
static void close_fds(spd_session *s, taken *t) {
  for (int i = 0; i < t->n; i++)
    close(t->fd[i]);
  spd_session_fds_give(s->ctx, s->uid, t->charged);
  t->n = t->charged = 0;
}

/* The n descriptors that came with a frame. */
static int take_fds(spd_session *s, taken *t, size_t n, spk_err *err) {
  for (t->n = t->charged = 0; (size_t)t->n < n; t->n++) {
    int charged = 0;
    int rc = spd_session_take_fd(s, &t->fd[t->n], &charged, err);
    if (rc < 0) {
      spk_err_set(err, rc, "buf_register lists %zu file descriptors but "
                  "came with %d", n, t->n);
      close_fds(s, t);
      return rc;
    }
    t->charged += charged;
  }
  return SPK_OK;
}

/* Some of t came past the uid's or the daemon's SPD_Q_FDS: the request is
 * refused, naming the limit (the client may try again), and t closed.
 * 1 then, else 0. */
static int over_quota(spd_session *s, uint64_t req, taken *t) {
  if (t->charged == t->n)
    return 0;
  close_fds(s, t);
  spd_session_send_error(s, req, SPK_ENO_MEMORY, s->fds_why);
  return 1;
}

static void register_vmm(spd_session *s, const Spcoll__Frame *f) {
  const Spcoll__BufRegister *reg = f->buf_register;
  taken t;
  spk_err err;
  size_t n = reg->n_vmm_sizes;
  if (n > SPK_VMM_MAX_CHUNKS) {
    spk_err_set(&err, SPK_EPROTOCOL, "vmm_sizes lists %zu cuMem "
                "allocations: at most %d per buffer", n, SPK_VMM_MAX_CHUNKS);
    spd_session_fail(s, f->id, SPK_EPROTOCOL, err.msg);
    return;
  }
  int rc = take_fds(s, &t, n, &err);
  if (rc < 0) {
    spd_session_fail(s, f->id, SPK_EPROTOCOL, err.msg);
    return;
  }
  if (over_quota(s, f->id, &t))
    return;
  if (reg->ipc_handle.len != 0 || reg->stream_flags || reg->submit_ring) {
    close_fds(s, &t);
    spk_err_set(&err, SPK_EINVAL, "buf_register with vmm_sizes carries %s",
                reg->stream_flags  ? "stream_flags (host memory only)"
                : reg->submit_ring ? "submit_ring (host memory only)"
                                   : "an ipc_handle too");
    spd_session_send_error(s, f->id, SPK_EINVAL, err.msg);
    return;
  }
  vmm_pending *p = NULL;
  if (s->vmm_pending >= SESSION_MAX_VMM_PENDING) {
    rc = spk_err_set(&err, SPK_ENO_MEMORY, "client limit: %d cuMem "
                     "registrations of this client are still mapping: wait "
                     "for their answers",
                     s->vmm_pending);
  } else if ((p = calloc(1, sizeof(*p))) == NULL) {
    rc = spk_err_set(&err, SPK_ENO_MEMORY, "calloc of a registration failed");
  } else if ((rc = admit(s, f->id, reg->size, 0)) < 0) {
    free(p);
    close_fds(s, &t);
    return;
  }
  if (rc == SPK_OK) {
    *p = (vmm_pending){s->ctx, s->id, f->id, s->uid, reg->size, t.charged};
    spd_gpu_vmm_req q = {t.fd, reg->vmm_sizes, n, reg->device_uuid.data,
                         reg->device_uuid.len, reg->alloc_offset, reg->size};
    if ((rc = spd_gpu_vmm_open(s->ctx, &q, vmm_mapped, p, &err)) == SPK_OK) {
      s->vmm_pending++;
      return;
    }
    unadmit(s->ctx, s->uid, 0);
    spd_session_fds_give(s->ctx, s->uid, t.charged); /* closed by the open */
    free(p);
  } else {
    free(p);
    close_fds(s, &t);
  }
  spd_session_send_error(s, f->id, rc, err.msg);
}

/* ---- host memory and legacy IPC ---------------------------------------- */

void spd_session_buf_register(spd_session *s, const Spcoll__Frame *f) {
  const Spcoll__BufRegister *reg = f->buf_register;
  if (reg->n_vmm_sizes > 0) {
    register_vmm(s, f);
    return;
  }
  int device = reg->ipc_handle.len != 0;
  spk_err err;
  int fd = -1, rc;
  taken t = {.n = 0};
  if (!device) {
    if ((rc = spd_session_take_fd(s, &t.fd[0], &t.charged, &err)) < 0) {
      spd_session_fail(s, f->id, rc, err.msg);
      return;
    }
    t.n = 1;
    if (over_quota(s, f->id, &t))
      return;
    fd = t.fd[0]; /* closed below, whatever happens */
    spd_session_fds_give(s->ctx, s->uid, t.charged);
  }
  uint64_t charge = device ? 0 : reg->size;
  if (admit(s, f->id, reg->size, charge) < 0) {
    if (fd >= 0)
      close(fd);
    return;
  }
  spd_buffer *buf;
  if (device)
    rc = spd_buffer_open_device(s->ctx, reg->ipc_handle.data,
                                reg->ipc_handle.len, reg->device_uuid.data,
                                reg->device_uuid.len, reg->alloc_offset,
                                reg->size, &buf, &err);
  else
    rc = spd_buffer_map(s->ctx, fd, reg->size, &buf, &err);
  if (rc == SPK_OK && reg->stream_flags && reg->submit_ring) {
    rc = spk_err_set(&err, SPK_EINVAL, "a buffer holds stream flags or a "
                     "submission ring, not both");
    spd_buffer_unref(s->ctx, buf);
  } else if (rc == SPK_OK && reg->stream_flags) {
    rc = flags_open(s, buf, &err);
  } else if (rc == SPK_OK && reg->submit_ring &&
             (rc = spd_session_ring_open(s, buf, &err)) < 0) {
    spd_buffer_unref(s->ctx, buf);
  }
  if (rc < 0) {
    unadmit(s->ctx, s->uid, charge);
    spd_session_send_error(s, f->id, rc, err.msg);
    return;
  }
  added(s, f->id, buf);
}
