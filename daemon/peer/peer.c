/* The peer transport: UCX endpoints to and from the other nodes, control
 * messages as active messages, endpoint errors, the worker driven from
 * the loop. What the messages and errors mean for a node (Hello, up,
 * lost) is node membership's (peer_member.c), reached through
 * P->member. Set-up and stop: peer_life.c; op data: peer_xfer.c. */
#include <netdb.h>
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

/* The argument is the peer state, not the spd_in_ep, which may be gone
 * by the time UCX reports: the event finds it by ep. */
static void on_in_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status) {
  spd_peers *P = arg;
  spd_peer_event *ev = event_new(EV_EP_ERROR, -1);
  if (ev == NULL)
    return;
  ev->ep = ep;
  snprintf(ev->why, sizeof(ev->why), "endpoint from it failed: %s",
           ucs_status_string(status));
  spd_peer_event_push(P, ev);
}

/* ---- loss and connection ------------------------------------------------ */

void spd_peer_in_eps_close(spd_peers *P, int node) {
  spd_in_ep *in = TAILQ_FIRST(&P->in_eps), *next;
  for (; in != NULL; in = next) {
    next = TAILQ_NEXT(in, link);
    if (node >= 0 && in->node != node)
      continue;
    TAILQ_REMOVE(&P->in_eps, in, link);
    spd_peer_ep_close(P, in->ep);
    free(in);
  }
}

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

int spd_peer_ep_open(spd_peers *P, int node) {
  spd_peer *p = &P->peer[node];
  const spd_hostport *hp = &P->ctx->cfg.peers[node];
  struct sockaddr_storage ss;
  socklen_t slen;
  char why[160];
  if (spd_peer_resolve(hp, &ss, &slen, why, sizeof(why)) < 0) {
    SPD_WARN(&P->ctx->log, "node %d: %s", node, why);
    return -1;
  }
  ucp_ep_params_t ep = {
      .field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER,
      .flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER,
      .sockaddr = {.addr = (struct sockaddr *)&ss, .addrlen = slen},
      .err_mode = UCP_ERR_HANDLING_MODE_PEER,
      .err_handler = {.cb = on_out_ep_error, .arg = p}};
  ucs_status_t st = ucp_ep_create(P->worker, &ep, &p->ep);
  if (st != UCS_OK) {
    SPD_DEBUG(&P->ctx->log, "ucp_ep_create to node %d (%s:%d): %s", node,
              hp->host, hp->port, ucs_status_string(st));
    p->ep = NULL;
    return -1;
  }
  return 0;
}

/* The endpoint node's Hello came on is the node's; older ones of it are
 * leftovers of earlier attempts, whose errors must not count. */
void spd_peer_in_ep_claim(spd_peers *P, int node, ucp_ep_h reply_ep) {
  spd_in_ep *in = TAILQ_FIRST(&P->in_eps), *next;
  for (; in != NULL; in = next) {
    next = TAILQ_NEXT(in, link);
    if (in->ep == reply_ep) {
      in->node = node;
    } else if (in->node == node) {
      TAILQ_REMOVE(&P->in_eps, in, link);
      spd_peer_ep_close(P, in->ep);
      free(in);
    }
  }
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
void spd_peer_am_send(spd_peers *P, int node, const Spcoll__Peer__Msg *m,
                      int reply) {
  spd_peer *p = &P->peer[node];
  size_t len = spcoll__peer__msg__get_packed_size(m);
  uint8_t *buf = malloc(sizeof(spd_am_header) + len);
  if (buf == NULL) {
    SPD_ERROR(&P->ctx->log, "malloc of a %zu-byte peer message failed", len);
    return;
  }
  spd_am_header *hdr = (spd_am_header *)buf;
  hdr->node = (uint32_t)P->ctx->cfg.node_index;
  hdr->incarnation = P->incarnation;
  spcoll__peer__msg__pack(m, buf + sizeof(*hdr));
  ucp_request_param_t prm = {
      .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
                      UCP_OP_ATTR_FIELD_USER_DATA,
      .flags = UCP_AM_SEND_FLAG_EAGER | (reply ? UCP_AM_SEND_FLAG_REPLY : 0),
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
  spd_peer_am_send(P, node, m, 0);
}

ucs_status_t spd_peer_on_am(void *arg, const void *header, size_t hlen,
                            void *data, size_t len,
                            const ucp_am_recv_param_t *param) {
  spd_peers *P = arg;
  spd_am_header hdr;
  if (hlen != sizeof(hdr) || (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV))
    return UCS_OK; /* not ours: we send eager with this header only */
  memcpy(&hdr, header, sizeof(hdr));
  /* The node indexes the peer table from here on: compared unsigned, so
   * that 2^31 and more (a negative int) cannot pass as a small index. */
  if (hdr.node >= (uint32_t)P->ctx->cfg.npeers ||
      hdr.node == (uint32_t)P->ctx->cfg.node_index) {
    SPD_DEBUG(&P->ctx->log, "message naming node %u dropped: not another "
              "node of the %d in the peer list", hdr.node,
              P->ctx->cfg.npeers);
    return UCS_OK;
  }
  spd_peer_event *ev = event_new(EV_MSG, (int)hdr.node);
  if (ev == NULL)
    return UCS_OK;
  ev->incarnation = hdr.incarnation;
  ev->msg = spcoll__peer__msg__unpack(NULL, len, data);
  if (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP)
    ev->reply_ep = param->reply_ep;
  if (ev->msg == NULL) {
    SPD_WARN(&P->ctx->log, "undecodable %zu-byte message from node %u", len,
             hdr.node);
    free(ev);
    return UCS_OK;
  }
  spd_peer_event_push(P, ev);
  return UCS_OK;
}

void spd_peer_on_conn_request(ucp_conn_request_h conn, void *arg) {
  spd_peers *P = arg;
  spd_in_ep *in = P->stopping ? NULL : calloc(1, sizeof(*in));
  if (in == NULL) {
    ucp_listener_reject(P->listener, conn);
    return;
  }
  in->node = -1;
  ucp_ep_params_t ep = {
      .field_mask = UCP_EP_PARAM_FIELD_CONN_REQUEST |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER,
      .conn_request = conn,
      .err_mode = UCP_ERR_HANDLING_MODE_PEER,
      .err_handler = {.cb = on_in_ep_error, .arg = P}};
  ucs_status_t st = ucp_ep_create(P->worker, &ep, &in->ep);
  if (st != UCS_OK) {
    SPD_WARN(&P->ctx->log, "accepting a peer connection: ucp_ep_create: %s",
             ucs_status_string(st));
    free(in);
    return;
  }
  TAILQ_INSERT_TAIL(&P->in_eps, in, link);
}

/* ---- events and progress ------------------------------------------------ */

/* Errors of endpoints already closed (a node lost, then reconnected) are
 * stale: only the current endpoints count. */
static void ep_error(spd_peers *P, spd_peer_event *ev) {
  if (ev->node >= 0) {
    if (P->peer[ev->node].ep == ev->ep)
      P->member.on_lost(P, ev->node, ev->why);
    return;
  }
  spd_in_ep *in;
  TAILQ_FOREACH(in, &P->in_eps, link)
    if (in->ep == ev->ep)
      break;
  if (in == NULL)
    return;
  if (in->node >= 0) {
    char why[200];
    snprintf(why, sizeof(why), "node %d: %s", in->node, ev->why);
    P->member.on_lost(P, in->node, why);
    return;
  }
  TAILQ_REMOVE(&P->in_eps, in, link);
  spd_peer_ep_close(P, in->ep);
  free(in);
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

