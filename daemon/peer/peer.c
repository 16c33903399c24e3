/* The peer transport: a UCX endpoint to each other node, made from the
 * worker address its bootstrap handed over (peer_boot.c); control
 * messages as active messages under the session's MAC; endpoint errors;
 * the worker driven from the loop. What the messages and errors mean for
 * a node (Hello, up, lost) is node membership's (peer_member.c), reached
 * through P->member. Set-up and stop: peer_life.c; op data:
 * peer_xfer.c. */
#include <netdb.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "peer_internal.h"

void spd_peer_event_push(spd_peers *P, spd_peer_event *ev) {
  TAILQ_INSERT_TAIL(&P->events, ev, link);
}

static spd_peer_event *event_new(int kind, int node) {
  spd_peer_event *ev = calloc(1, sizeof(*ev));
  if (ev != NULL)
    ev->kind = kind, ev->node = node;
  return ev;
}

void spd_peer_ep_close(spd_peers *P, ucp_ep_h ep) {
  ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_EP_CLOSE_FLAG_FORCE};
  void *req = ucp_ep_close_nbx(ep, &prm);
  if (UCS_PTR_IS_ERR(req))
    SPD_DEBUG(&P->ctx->log, "ucp_ep_close_nbx: %s",
              ucs_status_string(UCS_PTR_STATUS(req)));
  else if (req != NULL)
    ucp_request_free(req);
}

/* ---- endpoint errors ---------------------------------------------------- */

static void on_out_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
  spd_peer *p = arg;
  spd_peer_event *ev = event_new(EV_EP_ERROR, p->node);
  if (ev == NULL)
    return; /* the silence check finds the node later */
  ev->ep = ep;
  snprintf(ev->why, sizeof(ev->why), "endpoint to node %d failed: %s",
           p->node, ucs_status_string(status));
  spd_peer_event_push(p->peers, ev);
}

/* ---- loss and connection ------------------------------------------------ */

int spd_peer_resolve(const spd_hostport *hp, struct sockaddr_storage *ss,
                     socklen_t *len, char *why, size_t wlen) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  struct addrinfo *res;
  char port[8];
  snprintf(port, sizeof(port), "%d", hp->port);
  int rc = getaddrinfo(hp->host, port, &hints, &res);
  if (rc != 0) {
    snprintf(why, wlen, "getaddrinfo(%s): %s", hp->host, gai_strerror(rc));
    return -1;
  }
  memcpy(ss, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return 0;
}

/* Our endpoint to node, from the worker address its bootstrap gave; the
 * session of that bootstrap keys what we send it. */
void spd_peer_ep_made(spd_peers *P, int node, const void *addr,
                      const spd_auth_exchange *x) {
  spd_peer *p = &P->peer[node];
  if (p->ep != NULL)
    return; /* one came meanwhile (a second dial): keep it */
  ucp_ep_params_t ep = {
      .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER,
      .address = addr,
      .err_mode = UCP_ERR_HANDLING_MODE_PEER,
      .err_handler = {.cb = on_out_ep_error, .arg = p}};
  ucs_status_t st = ucp_ep_create(P->worker, &ep, &p->ep);
  if (st != UCS_OK) {
    SPD_WARN(&P->ctx->log, "ucp_ep_create to node %d from its worker "
             "address: %s", node, ucs_status_string(st));
    p->ep = NULL;
    return;
  }
  if (spd_peer_session_key(&p->out, x->session) < 0) {
    SPD_ERROR(&P->ctx->log, "node %d: the session's MAC could not be made "
              "(out of memory): not connected", node);
    spd_peer_ep_close(P, p->ep);
    p->ep = NULL;
    return;
  }
  P->member.on_connected(P, node);
}

/* node proved itself and dialed us: what it sends from now on is checked
 * against this session. A node that was up and dials again lost us
 * (its endpoint failed, or it restarted): its streams and ops with us
 * are over, so it is lost here too before the new session counts. */
void spd_peer_session_in(spd_peers *P, int node, const spd_auth_exchange *x) {
  spd_peer *p = &P->peer[node];
  if (p->up)
    P->member.on_lost(P, node, "it connected again (a new session)");
  if (spd_peer_session_key(&p->in, x->session) < 0)
    SPD_ERROR(&P->ctx->log, "node %d: the session's MAC could not be made "
              "(out of memory): its messages are refused", node);
}

int spd_peer_session_key(spd_peer_session *s, const uint8_t key[32]) {
  spd_peer_session_clear(s);
  if (spd_auth_mac_open(key, &s->mac) < 0 ||
      spd_auth_tag_salt(key, &s->salt) < 0) {
    spd_peer_session_clear(s);
    return -1;
  }
  s->keyed = 1;
  return 0;
}

void spd_peer_session_clear(spd_peer_session *s) {
  spd_auth_mac_close(s->mac);
  *s = (spd_peer_session){0};
}

void spd_peer_unauthenticated(spd_peers *P, const char *fmt, ...) {
  spd_ctx *ctx = P->ctx;
  va_list ap;
  va_start(ap, fmt);
  spd_log_refusal(&ctx->log, &ctx->peer_auth_log, spd_now_ns(),
                  &ctx->stats.peer_unauthenticated,
                  "unauthenticated peer connections and messages",
                  "peer_unauthenticated", "peer refused", fmt, ap);
  va_end(ap);
}

/* ---- control messages --------------------------------------------------- */

static void on_am_sent(void *req, ucs_status_t status, void *user_data) {
  (void)status; /* a failed send shows as an endpoint error */
  free(user_data);
  ucp_request_free(req);
}

/* Header and packed message live in one allocation until UCX says they
 * went (UCX 1.13 may read the header after the call), so a slow peer
 * never blocks the loop. */
void spd_peer_am_send(spd_peers *P, int node, const Spcoll__Peer__Msg *m) {
  spd_peer *p = &P->peer[node];
  if (p->ep == NULL || !p->out.keyed)
    return;
  size_t len = spcoll__peer__msg__get_packed_size(m);
  uint8_t *buf = malloc(sizeof(spd_am_header) + len);
  if (buf == NULL) {
    SPD_ERROR(&P->ctx->log, "malloc of a %zu-byte peer message failed", len);
    return;
  }
  spd_am_header *hdr = (spd_am_header *)buf;
  memset(hdr, 0, sizeof(*hdr));
  hdr->node = (uint32_t)P->ctx->cfg.node_index;
  hdr->incarnation = P->incarnation;
  hdr->seq = ++p->out.seq;
  spcoll__peer__msg__pack(m, buf + sizeof(*hdr));
  if (spd_auth_mac_sign(p->out.mac, hdr, offsetof(spd_am_header, mac),
                        buf + sizeof(*hdr), len, hdr->mac) < 0) {
    SPD_ERROR(&P->ctx->log, "MAC of a %zu-byte message to node %d failed "
              "(out of memory): not sent", len, node);
    free(buf);
    return;
  }
  ucp_request_param_t prm = {
      .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
                      UCP_OP_ATTR_FIELD_USER_DATA,
      .flags = UCP_AM_SEND_FLAG_EAGER,
      .cb = {.send = on_am_sent}, .user_data = buf};
  void *req = ucp_am_send_nbx(p->ep, SPD_PEER_AM_ID, hdr, sizeof(*hdr),
                              buf + sizeof(*hdr), len, &prm);
  if (UCS_PTR_IS_ERR(req))
    SPD_WARN(&P->ctx->log, "ucp_am_send_nbx to node %d (%zu bytes): %s", node,
             len, ucs_status_string(UCS_PTR_STATUS(req)));
  if (req == NULL || UCS_PTR_IS_ERR(req))
    free(buf);
}

void spd_peer_send(spd_ctx *ctx, int node, const Spcoll__Peer__Msg *m) {
  spd_peers *P = ctx->peers;
  if (P == NULL || node == ctx->cfg.node_index || !P->peer[node].up ||
      P->peer[node].ep == NULL)
    return;
  spd_peer_am_send(P, node, m);
}

/* Whether a control message is its sender's: the header names a node
 * with an inbound session, the MAC under that session is right, and the
 * number is past the last one taken (no replay). Nothing else of the
 * message is read before. */
static int am_authentic(spd_peers *P, const spd_am_header *hdr,
                        const void *data, size_t len) {
  if (len > SPD_PEER_MSG_MAX) {
    spd_peer_unauthenticated(P, "a control message of %zu bytes (more "
                             "than %zu)", len, SPD_PEER_MSG_MAX);
    return 0;
  }
  /* The node indexes the peer table: compared unsigned, so that 2^31 and
   * more (a negative int) cannot pass as a small index. */
  if (hdr->node >= (uint32_t)P->ctx->cfg.npeers ||
      hdr->node == (uint32_t)P->ctx->cfg.node_index) {
    spd_peer_unauthenticated(P, "a control message naming node %u: not "
                             "another node of the %d in --peers", hdr->node,
                             P->ctx->cfg.npeers);
    return 0;
  }
  spd_peer_session *in = &P->peer[hdr->node].in;
  if (!in->keyed ||
      !spd_auth_mac_check(in->mac, hdr, offsetof(spd_am_header, mac), data,
                          len, hdr->mac)) {
    spd_peer_unauthenticated(P, "a %zu-byte control message naming node "
                             "%u %s", len, hdr->node,
                             in->keyed ? "with a wrong MAC"
                                       : "before that node's bootstrap");
    return 0;
  }
  if (hdr->seq <= in->seq) {
    spd_peer_unauthenticated(P, "control message %llu of node %u again "
                             "(a replay: %llu came already)",
                             (unsigned long long)hdr->seq, hdr->node,
                             (unsigned long long)in->seq);
    return 0;
  }
  in->seq = hdr->seq;
  return 1;
}

ucs_status_t spd_peer_on_am(void *arg, const void *header, size_t hlen,
                            void *data, size_t len,
                            const ucp_am_recv_param_t *param) {
  spd_peers *P = arg;
  spd_am_header hdr;
  if (hlen != sizeof(hdr) || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV)) {
    spd_peer_unauthenticated(P, "an active message with a %zu-byte header%s",
                             hlen, (param->recv_attr &
                                    UCP_AM_RECV_ATTR_FLAG_RNDV)
                                       ? " sent by rendezvous"
                                       : "");
    return UCS_OK; /* not ours: we send eager with this header only */
  }
  memcpy(&hdr, header, sizeof(hdr));
  if (!am_authentic(P, &hdr, data, len))
    return UCS_OK;
  spd_peer_event *ev = event_new(EV_MSG, (int)hdr.node);
  if (ev == NULL)
    return UCS_OK;
  ev->incarnation = hdr.incarnation;
  ev->msg = spcoll__peer__msg__unpack(NULL, len, data);
  if (ev->msg == NULL) {
    SPD_WARN(&P->ctx->log, "undecodable %zu-byte message from node %u", len,
             hdr.node);
    free(ev);
    return UCS_OK;
  }
  spd_peer_event_push(P, ev);
  return UCS_OK;
}

/* ---- events and progress ------------------------------------------------ */

/* Errors of endpoints already closed (a node lost, then reconnected) are
 * stale: only the current endpoints count. */
static void ep_error(spd_peers *P, spd_peer_event *ev) {
  if (P->peer[ev->node].ep == ev->ep)
    P->member.on_lost(P, ev->node, ev->why);
}

static void event_handle(spd_peers *P, spd_peer_event *ev) {
  switch (ev->kind) {
  case EV_MSG:
    if (P->member.on_msg(P, ev))
      return; /* membership keeps it (held for its node's Hello) */
    spcoll__peer__msg__free_unpacked(ev->msg, NULL);
    break;
  case EV_EP_ERROR:
    ep_error(P, ev); /* while stopping too: running ops must hear of it */
    break;
  case EV_XFER:
    spd_peer_xfer_finish(P, ev->xfer); /* ev lives in the stream */
    return;
  case EV_XFER_GIVEN_UP:
    spd_peer_xfer_given_up(P, ev->xfer); /* likewise */
    return;
  }
  free(ev);
}

void spd_peers_progress(spd_peers *P) {
  if (P->progressing)
    return; /* an upcall sent something: the outer loop carries on */
  P->progressing = 1;
  for (;;) {
    while (ucp_worker_progress(P->worker) != 0)
      ;
    spd_peer_event *ev = TAILQ_FIRST(&P->events);
    if (ev != NULL) {
      TAILQ_REMOVE(&P->events, ev, link);
      event_handle(P, ev);
      continue;
    }
    if (P->stopping || ucp_worker_arm(P->worker) != UCS_ERR_BUSY)
      break;
  }
  P->progressing = 0;
}

void spd_peer_on_poll(uv_poll_t *h, int status, int events) {
  (void)status, (void)events;
  spd_peers_progress(h->data);
}

