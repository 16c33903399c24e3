/* What the daemon does with each frame a client sends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lifecycle.h"
#include "group.h"
#include "op.h"
#include "op_p2p.h"
#include "session.h"
#include "tensor_check.h"

static void on_hello(spd_session *s, const Spcoll__Frame *f) {
  const Spcoll__Hello *h = f->hello;
  char msg[160];
  if (s->hello_done) {
    spd_session_fail(s, f->id, SPK_EPROTOCOL, "second hello on a connection");
    return;
  }
  if (h->protocol_version != SPF_PROTOCOL_VERSION) {
    snprintf(msg, sizeof(msg), "protocol version mismatch: client speaks %u, "
             "daemon speaks %u", h->protocol_version, SPF_PROTOCOL_VERSION);
    spd_session_fail(s, f->id, SPK_EVERSION, msg);
    return;
  }
  s->hello_done = 1;
  snprintf(s->framework, sizeof(s->framework), "%s",
           h->framework ? h->framework : "");
  /* A free-form tag from the client: keep it safe for every stats format. */
  for (char *c = s->framework; *c; c++)
    if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
          (*c >= '0' && *c <= '9') || *c == '.' || *c == '-' || *c == '_'))
      *c = '_';
  Spcoll__Welcome w = SPCOLL__WELCOME__INIT;
  Spcoll__Frame r = SPCOLL__FRAME__INIT;
  w.protocol_version = SPF_PROTOCOL_VERSION;
  w.daemon_version = SPD_VERSION;
  w.client_id = s->id;
  w.op_timeout_ms = (uint64_t)s->ctx->cfg.op_timeout * 1000u;
  r.id = f->id;
  r.body_case = SPCOLL__FRAME__BODY_WELCOME;
  r.welcome = &w;
  spd_session_send(s, &r);
}

/* A handle this client does not own: answer the request, keep the
 * connection (the client may hold a stale handle after a failure). */
static void reply_not_found(spd_session *s, uint64_t id, const char *what,
                            uint64_t handle) {
  char msg[112];
  snprintf(msg, sizeof(msg), "%s %llu is not %s by this client", what,
           (unsigned long long)handle,
           what[0] == 'g' ? "joined" : "registered");
  spd_session_send_error(s, id, SPK_ENOT_FOUND, msg);
}

static void on_leave(spd_session *s, const Spcoll__Frame *f) {
  spd_member *m = spd_session_member(s, f->group_leave->group_id);
  if (m == NULL) {
    reply_not_found(s, f->id, "group handle", f->group_leave->group_id);
    return;
  }
  TAILQ_REMOVE(&s->members, m, link);
  spd_group_depart(m->group, m, 0);
  free(m);
  spd_session_send_done(s, f->id, NULL);
}

/* The name rule is kernels/tensor_check.c's, the one the client applies
 * before it sends: checked here, before any group code sees the name. */
static void on_join(spd_session *s, const Spcoll__Frame *f) {
  const char *name = f->group_join->name;
  spk_err err;
  if (spk_name_check(name, name ? strlen(name) : 0, &err) < 0) {
    spd_session_send_error(s, f->id, SPK_EINVAL, err.msg);
    return;
  }
  spd_group_join(s->ctx, s, f->id, f->group_join);
}

/* A release answered once the daemon's mapping is gone. */
typedef struct {
  spd_ctx *ctx;
  uint64_t session, req;
} release_wait;

static void released(void *arg) {
  release_wait *w = arg;
  spd_session *s = spd_session_find(w->ctx, w->session);
  if (s != NULL)
    spd_session_send_done(s, w->req, NULL);
  free(w);
}

/* The answer waits for a cuMem mapping's unmap: a client may free or
 * reuse the memory once answered (torch's retry after an out-of-memory
 * needs the physical memory back). */
static void on_buf_release(spd_session *s, const Spcoll__Frame *f) {
  spd_buffer *buf = spd_session_buffer(s, f->buf_release->buffer_id);
  if (buf == NULL) {
    reply_not_found(s, f->id, "buffer", f->buf_release->buffer_id);
    return;
  }
  release_wait *w = malloc(sizeof(*w));
  if (w != NULL)
    *w = (release_wait){s->ctx, s->id, f->id};
  if (spd_session_buffer_drop_then(s, buf, w ? released : NULL, w) == 1)
    return;
  free(w);
  spd_session_send_done(s, f->id, NULL);
}

/* The member of group handle id of s, when that group is ready; NULL
 * after answering req with why not. */
static spd_member *ready_member(spd_session *s, uint64_t req, uint64_t id) {
  spd_member *m = spd_session_member(s, id);
  if (m == NULL) {
    reply_not_found(s, req, "group handle", id);
    return NULL;
  }
  if (!m->group->ready) {
    spd_session_send_error(s, req, SPK_EINVAL,
                           "group is not ready: not every rank has joined");
    return NULL;
  }
  return m;
}

static void on_op(spd_session *s, const Spcoll__Frame *f) {
  spd_member *m = ready_member(s, f->id, f->op->group_id);
  if (m != NULL)
    spd_op_arrive(m->group, m->rank, s, f->id, f->op);
}

/* A group split is matched with the group's ops (op.c), so it is refused
 * where an op would be. */
static void on_group_split(spd_session *s, const Spcoll__Frame *f) {
  spd_member *m = ready_member(s, f->id, f->group_split->group_id);
  if (m != NULL)
    spd_group_split_arrive(m->group, m->rank, s, f->id, f->group_split);
}

static void on_p2p(spd_session *s, const Spcoll__Frame *f) {
  spd_member *m = ready_member(s, f->id, f->p2p->group_id);
  if (m != NULL)
    spd_p2p_arrive(m->group, m->rank, s, f->id, f->p2p);
}

static void on_stats(spd_session *s, const Spcoll__Frame *f) {
  spd_ctx *ctx = s->ctx;
  char *text = ctx->hooks.stats_render == NULL
                   ? NULL
                   : ctx->hooks.stats_render(ctx, f->stats_request->format,
                                             s->uid);
  if (text == NULL) {
    char msg[96];
    snprintf(msg, sizeof(msg), "stats format '%.40s' is not text, json or "
             "prometheus", f->stats_request->format);
    spd_session_send_error(s, f->id, SPK_EINVAL, msg);
    return;
  }
  Spcoll__StatsReply rep = SPCOLL__STATS_REPLY__INIT;
  Spcoll__Frame r = SPCOLL__FRAME__INIT;
  rep.text = text ? text : "";
  r.id = f->id;
  r.body_case = SPCOLL__FRAME__BODY_STATS_REPLY;
  r.stats_reply = &rep;
  spd_session_send(s, &r);
  free(text);
}

/* The command's words are the client's: checked for who sent them
 * before anything else, and logged escaped (spd_log_str). */
static void on_control(spd_session *s, const Spcoll__Frame *f) {
  const Spcoll__Control *c = f->control;
  spk_err err;
  if (!spd_session_is_operator(s)) {
    spd_control_refused(s->ctx, (int)s->pid, s->uid, s->gid, c->command,
                        c->group);
    char msg[200];
    snprintf(msg, sizeof(msg), "operator commands are for root, the "
             "daemon's uid %d, operator_uid and operator_gid; uid %d (gid %d) "
             "is none of them", (int)s->ctx->self_uid, (int)s->uid,
             (int)s->gid);
    spd_session_send_error(s, f->id, SPK_EPERM, msg);
    return;
  }
  char cmd[SPD_LOG_STR_SIZE], grp[SPD_LOG_STR_SIZE];
  SPD_INFO(&s->ctx->log, "operator (pid %d uid %d): %s %s", (int)s->pid,
           (int)s->uid, spd_log_str(cmd, sizeof(cmd), c->command),
           spd_log_str(grp, sizeof(grp), c->group));
  if (strcmp(c->command, "abort") == 0) {
    int rc = spd_abort_group(s->ctx, c->group, s->uid, &err);
    if (rc < 0)
      spd_session_send_error(s, f->id, rc, err.msg);
    else
      spd_session_send_done(s, f->id, NULL);
    spd_drain_check(s->ctx);
  } else if (strcmp(c->command, "upgrade") == 0) {
    spd_upgrade_give(s, f->id, f->control->peers);
  } else if (strcmp(c->command, "drain") == 0) {
    spd_session_send_done(s, f->id, NULL); /* queued before the drain closes it */
    spd_drain(s->ctx);
  } else {
    char msg[96];
    snprintf(msg, sizeof(msg), "unknown command '%.40s': abort, drain or "
             "upgrade", c->command);
    spd_session_send_error(s, f->id, SPK_EINVAL, msg);
  }
}

void spd_session_dispatch(spd_session *s, const Spcoll__Frame *f) {
  char msg[128];
  if (!s->hello_done && f->body_case != SPCOLL__FRAME__BODY_HELLO) {
    snprintf(msg, sizeof(msg), "first frame must be hello, got %s",
             spf_body_name(f->body_case));
    spd_session_fail(s, f->id, SPK_EPROTOCOL, msg);
    return;
  }
  int for_stats = f->body_case == SPCOLL__FRAME__BODY_HELLO ||
                  f->body_case == SPCOLL__FRAME__BODY_STATS_REQUEST ||
                  f->body_case == SPCOLL__FRAME__BODY_CONTROL;
  if (s->stats_only != for_stats &&
      f->body_case != SPCOLL__FRAME__BODY_HELLO &&
      f->body_case != SPCOLL__FRAME__BODY_STATS_REQUEST) {
    snprintf(msg, sizeof(msg), "%s",
             s->stats_only ? "the stats socket answers stats requests and "
                             "operator commands only"
                           : "operator commands are taken on the stats "
                             "socket only");
    spd_session_fail(s, f->id, SPK_EPROTOCOL, msg);
    return;
  }
  /* While stopping, nothing new starts: it could hold the exit up. */
  if (s->ctx->stopping && (f->body_case == SPCOLL__FRAME__BODY_GROUP_JOIN ||
                           f->body_case == SPCOLL__FRAME__BODY_OP ||
                           f->body_case == SPCOLL__FRAME__BODY_GROUP_SPLIT ||
                           f->body_case == SPCOLL__FRAME__BODY_P2P ||
                           f->body_case == SPCOLL__FRAME__BODY_BUF_REGISTER)) {
    if (s->ctx->upgrading)
      spd_session_refuse(s, f->id, "requests");
    else
      spd_session_send_error(s, f->id, SPK_ESHUTDOWN, "daemon shutting down");
    return;
  }
  switch (f->body_case) {
  case SPCOLL__FRAME__BODY_HELLO: on_hello(s, f); return;
  case SPCOLL__FRAME__BODY_GROUP_JOIN: on_join(s, f); return;
  case SPCOLL__FRAME__BODY_GROUP_LEAVE: on_leave(s, f); return;
  case SPCOLL__FRAME__BODY_BUF_REGISTER: spd_session_buf_register(s, f); return;
  case SPCOLL__FRAME__BODY_BUF_RELEASE: on_buf_release(s, f); return;
  case SPCOLL__FRAME__BODY_OP: on_op(s, f); return;
  case SPCOLL__FRAME__BODY_GROUP_SPLIT: on_group_split(s, f); return;
  case SPCOLL__FRAME__BODY_P2P: on_p2p(s, f); return;
  case SPCOLL__FRAME__BODY_STATS_REQUEST: on_stats(s, f); return;
  case SPCOLL__FRAME__BODY_CONTROL: on_control(s, f); return;
  case SPCOLL__FRAME__BODY_KICK: /* its ring was taken before it */
    s->ctx->stats.ring_kicks++;
    return;
  default: break;
  }
  snprintf(msg, sizeof(msg), "unknown or unexpected message type %d (%s)",
           (int)f->body_case, spf_body_name(f->body_case));
  spd_session_fail(s, f->id, SPK_EPROTOCOL, msg);
}
