/* Clients' submission rings (kernels/submit_ring.h): op frames a client
 * puts into a host buffer of its own, registered with submit_ring, taken
 * here as frames of its connection, in the order the client sent them
 * with those on its socket (a record waits for the socket frames it
 * came after). They are taken before each socket frame, after each read,
 * and before the loop sleeps, when each ring is armed: a client that
 * finds its ring armed kicks the daemon on the socket. Only op frames may
 * come this way; any record that breaks the ring's rules drops the
 * client, as a bad socket frame does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"
#include "submit_ring.h"

static void on_idle(uv_idle_t *i);

/* A record that breaks the ring's rules: the client goes. */
static int ring_bad(spd_session *s, const char *what, uint64_t a,
                    uint64_t b) {
  char msg[160];
  snprintf(msg, sizeof(msg), "submission ring: %s (%llu, %llu)", what,
           (unsigned long long)a, (unsigned long long)b);
  spd_session_fail(s, 0, SPK_EPROTOCOL, msg);
  return -1;
}

/* The record at the ring's tail copied out: 1 and *f_p (to free) when it
 * may be taken now, 0 when it waits for socket frames, -1 when the ring
 * is empty or the client was dropped. */
static int ring_next(spd_session *s, uint64_t head, Spcoll__Frame **f_p) {
  uint64_t cap = spk_sring_cap(s->ring->size);
  uint8_t *data = s->ring->base + SPK_SRING_HDR;
  for (;;) {
    uint64_t tail = s->ring_tail, pos = tail % cap;
    if (tail == head)
      return -1;
    if (head - tail > cap)
      return ring_bad(s, "head past tail by more than the ring", head, tail);
    uint32_t rec[2];
    memcpy(rec, data + pos, sizeof(rec)); /* the client's: read once */
    if (rec[0] == SPK_SRING_SKIP) {
      if (head - tail < cap - pos)
        return ring_bad(s, "skip record past the head", head, tail);
      s->ring_tail = tail + (cap - pos);
      continue;
    }
    uint64_t need = SPK_SRING_REC + spk_sring_pad(rec[0]);
    if (rec[0] == 0 || rec[0] > cap / 4 || pos + need > cap ||
        need > head - tail)
      return ring_bad(s, "record length out of bounds", rec[0], pos);
    if ((int32_t)(rec[1] - s->frames_read) > 0)
      return 0; /* sent after socket frames not yet handled */
    uint8_t *copy = malloc(rec[0]);
    if (copy == NULL)
      return ring_bad(s, "malloc of a record failed", rec[0], pos);
    memcpy(copy, data + pos + SPK_SRING_REC, rec[0]);
    s->ring_tail = tail + need;
    spk_sring_hdr *h = (spk_sring_hdr *)s->ring->base;
    SPK_SRING_STORE(&h->tail, s->ring_tail, __ATOMIC_RELEASE);
    spk_err err;
    int rc = spf_decode(copy, rec[0], f_p, &err);
    free(copy);
    if (rc < 0)
      return ring_bad(s, err.msg, rec[0], pos);
    return 1;
  }
}

int spd_session_ring_take(spd_session *s) {
  int rc = -1;
  while (!s->closing && !s->doomed && s->ring != NULL) {
    spk_sring_hdr *h = (spk_sring_hdr *)s->ring->base;
    Spcoll__Frame *f;
    rc = ring_next(s, SPK_SRING_LOAD(&h->head, __ATOMIC_ACQUIRE), &f);
    if (rc <= 0)
      break;
    if (f->body_case != SPCOLL__FRAME__BODY_OP) {
      char what[64];
      snprintf(what, sizeof(what), "a %s frame (only ops come this way)",
               spf_body_name(f->body_case));
      spcoll__frame__free_unpacked(f, NULL);
      (void)ring_bad(s, what, 0, 0);
      break;
    }
    s->ctx->stats.ring_frames++;
    spd_session_take_frame(s, f); /* frees f */
  }
  return rc == 0;
}

/* Before the loop sleeps: every ring's records taken, then the ring
 * armed, then a last look (its client may have put one in before it saw
 * the arm). Records that look found and could not take at once keep the
 * loop awake through the idle handle. */
static void rings_take_all(spd_ctx *ctx) {
  int left = 0;
  spd_session *s, *next;
  for (s = TAILQ_FIRST(&ctx->rings); s != NULL; s = next) {
    next = TAILQ_NEXT(s, ring_link);
    (void)spd_session_ring_take(s);
    if (s->ring == NULL)
      continue;
    spk_sring_hdr *h = (spk_sring_hdr *)s->ring->base;
    SPK_SRING_STORE(&h->armed, 1, __ATOMIC_SEQ_CST);
    SPK_SRING_FENCE(__ATOMIC_SEQ_CST);
    if (SPK_SRING_LOAD(&h->head, __ATOMIC_ACQUIRE) != s->ring_tail &&
        !spd_session_ring_take(s) && s->ring != NULL &&
        SPK_SRING_LOAD(&h->head, __ATOMIC_ACQUIRE) != s->ring_tail)
      left = 1;
  }
  if (left)
    (void)uv_idle_start(&ctx->ring_idle, on_idle);
  else
    (void)uv_idle_stop(&ctx->ring_idle);
}

static void on_prepare(uv_prepare_t *p) {
  rings_take_all(p->data);
}

static void on_idle(uv_idle_t *i) {
  rings_take_all(i->data);
}

/* After the poll: the daemon is awake, rings are disarmed (their
 * records are taken by the next prepare without a kick). */
static void on_check(uv_check_t *c) {
  spd_ctx *ctx = c->data;
  spd_session *s;
  TAILQ_FOREACH(s, &ctx->rings, ring_link) {
    spk_sring_hdr *h = (spk_sring_hdr *)s->ring->base;
    SPK_SRING_STORE(&h->armed, 0, __ATOMIC_RELAXED);
  }
}

/* The handles, made at the first ring and kept to the daemon's stop
 * (unreferenced: they never keep the loop running). */
static int rings_start(spd_ctx *ctx, spk_err *err) {
  if (ctx->rings_running)
    return SPK_OK;
  TAILQ_INIT(&ctx->rings);
  int rc = uv_prepare_init(ctx->loop, &ctx->ring_prepare);
  if (rc == 0)
    rc = uv_check_init(ctx->loop, &ctx->ring_check);
  if (rc == 0)
    rc = uv_idle_init(ctx->loop, &ctx->ring_idle);
  if (rc < 0) /* init only fails for a bad loop: nothing to close */
    return spk_err_set(err, SPK_ESYSTEM, "libuv handles of the submission "
                       "rings: %s", uv_strerror(rc));
  ctx->ring_prepare.data = ctx->ring_check.data = ctx->ring_idle.data = ctx;
  uv_unref((uv_handle_t *)&ctx->ring_prepare);
  uv_unref((uv_handle_t *)&ctx->ring_check);
  uv_unref((uv_handle_t *)&ctx->ring_idle);
  ctx->rings_running = 1;
  rc = uv_prepare_start(&ctx->ring_prepare, on_prepare);
  if (rc == 0)
    rc = uv_check_start(&ctx->ring_check, on_check);
  if (rc < 0) {
    spd_session_rings_stop(ctx);
    return spk_err_set(err, SPK_ESYSTEM, "starting the submission rings' "
                       "prepare and check: %s", uv_strerror(rc));
  }
  return SPK_OK;
}

int spd_session_ring_open(spd_session *s, spd_buffer *buf, spk_err *err) {
  if (buf->kind != SPD_BUF_HOST || !spk_sring_size_ok(buf->size))
    return spk_err_set(err, SPK_EINVAL, "a submission ring is host memory "
                       "of a power of two from %u to %u bytes, not %zu "
                       "bytes of %s memory", SPK_SRING_MIN, SPK_SRING_MAX,
                       buf->size,
                       buf->kind == SPD_BUF_HOST ? "host" : "device");
  if (s->ring != NULL)
    return spk_err_set(err, SPK_EINVAL, "this connection has a submission "
                       "ring already (buffer %llu)",
                       (unsigned long long)s->ring->id);
  uint64_t head = SPK_SRING_LOAD(&((spk_sring_hdr *)buf->base)->head,
                                 __ATOMIC_ACQUIRE);
  if (head != 0) /* the tail starts at 0: every position 8-aligned */
    return spk_err_set(err, SPK_EINVAL, "a submission ring starts empty "
                       "(head 0), not at %llu", (unsigned long long)head);
  int rc = rings_start(s->ctx, err);
  if (rc < 0)
    return rc;
  s->ring = buf;
  s->ring_tail = 0;
  TAILQ_INSERT_TAIL(&s->ctx->rings, s, ring_link);
  return SPK_OK;
}

void spd_session_ring_close(spd_session *s) {
  if (s->ring == NULL)
    return;
  /* records put from now on are nobody's: the client sends again */
  SPK_SRING_STORE(&((spk_sring_hdr *)s->ring->base)->closed, 1,
                  __ATOMIC_RELEASE);
  s->ring = NULL;
  TAILQ_REMOVE(&s->ctx->rings, s, ring_link);
}

void spd_session_rings_stop(spd_ctx *ctx) {
  if (!ctx->rings_running)
    return;
  ctx->rings_running = 0;
  uv_close((uv_handle_t *)&ctx->ring_prepare, NULL);
  uv_close((uv_handle_t *)&ctx->ring_check, NULL);
  uv_close((uv_handle_t *)&ctx->ring_idle, NULL);
}
