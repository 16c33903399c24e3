/* Node membership, above the peer transport (peer.c): which nodes are
 * up. A node is up once its Hello came and our endpoint to it works; it
 * is lost on an endpoint error, its Bye, a restart (a new incarnation in
 * its Hello) or peer_timeout seconds of silence (heartbeats go every
 * second), and retried every second after. The transport reports through
 * spd_peer_member (its messages and endpoint errors); the groups hear
 * through the spd_peer_hooks given at start. */
#include <stdio.h>
#include <stdlib.h>

#include "peer_internal.h"

static void peer_lost(spd_peers *P, int node, const char *why) {
  spd_peer *p = &P->peer[node];
  int was_up = p->up;
  if (p->ep != NULL)
    spd_peer_ep_close(P, p->ep);
  p->ep = NULL;
  p->up = 0;
  p->heard = 0;
  spd_peer_session_clear(&p->out);
  spd_peer_xfers_cancel(P, node);
  if (!was_up) {
    SPD_DEBUG(&P->ctx->log, "node %d not reached yet: %s", node, why);
    return;
  }
  SPD_WARN(&P->ctx->log, "node %d lost: %s", node, why);
  P->hooks.on_lost(P->ctx, node, why);
}

/* Up once we heard its Hello and have an endpoint to it. */
static void peer_check_up(spd_peers *P, int node) {
  spd_peer *p = &P->peer[node];
  if (p->up || !p->heard || p->ep == NULL)
    return;
  p->up = 1;
  SPD_INFO(&P->ctx->log, "node %d up (%s:%d)", node,
           P->ctx->cfg.peers[node].host, P->ctx->cfg.peers[node].port);
  P->hooks.on_up(P->ctx, node);
}

static void send_hello(spd_peers *P, int node, int answer) {
  Spcoll__Peer__Msg m = SPCOLL__PEER__MSG__INIT;
  Spcoll__Peer__Hello h = SPCOLL__PEER__HELLO__INIT;
  h.protocol_version = SPD_PEER_PROTOCOL;
  h.node = (uint32_t)P->ctx->cfg.node_index;
  h.incarnation = P->incarnation;
  h.nnodes = (uint32_t)P->ctx->cfg.npeers;
  h.answer = answer;
  m.body_case = SPCOLL__PEER__MSG__BODY_HELLO;
  m.hello = &h;
  spd_peer_am_send(P, node, &m);
}

/* Our endpoint to node is made (our bootstrap to it succeeded). */
static void member_connected(spd_peers *P, int node) {
  P->peer[node].connect_ns = spd_now_ns();
  send_hello(P, node, 0);
  peer_check_up(P, node);
}

static void peer_hello(spd_peers *P, int node, const Spcoll__Peer__Hello *h) {
  spd_peer *p = &P->peer[node];
  if (h->protocol_version != SPD_PEER_PROTOCOL ||
      (int)h->nnodes != P->ctx->cfg.npeers) {
    SPD_ERROR(&P->ctx->log, "node %d speaks peer protocol %u with %u nodes; "
              "we speak %d with %d: ignored", node, h->protocol_version,
              h->nnodes, SPD_PEER_PROTOCOL, P->ctx->cfg.npeers);
    return;
  }
  if (p->up && p->incarnation != h->incarnation)
    peer_lost(P, node, "its daemon restarted");
  p->incarnation = h->incarnation;
  p->heard_ns = spd_now_ns();
  p->departed = 0;
  p->heard = 1;
  if (p->ep == NULL)
    spd_peer_boot_dial(P, node); /* says Hello once connected */
  else if (!h->answer)
    send_hello(P, node, 1); /* it may not have heard ours (a new try) */
  peer_check_up(P, node);
}

/* A message of a node whose Hello we heard, from that same daemon. */
static void msg_dispatch(spd_peers *P, spd_peer_event *ev) {
  spd_peer *p = &P->peer[ev->node];
  if (ev->incarnation != p->incarnation) {
    SPD_DEBUG(&P->ctx->log, "message %d from an earlier daemon of node %d "
              "dropped", (int)ev->msg->body_case, ev->node);
  } else if (ev->msg->body_case == SPCOLL__PEER__MSG__BODY_BYE) {
    p->departed = 1;
    peer_lost(P, ev->node, "its daemon stopped");
  } else {
    p->heard_ns = spd_now_ns();
    if (ev->msg->body_case != SPCOLL__PEER__MSG__BODY_HEARTBEAT)
      P->hooks.on_msg(P->ctx, ev->node, ev->msg);
  }
}

/* Messages may overtake the Hello that came first (UCX delivers a Hello,
 * sent with a reply endpoint, once that endpoint is wired up): they wait
 * for it, in order. */
static void held_replay(spd_peers *P, int node) {
  spd_peer_event *ev = TAILQ_FIRST(&P->held), *next;
  for (; ev != NULL; ev = next) {
    next = TAILQ_NEXT(ev, link);
    if (ev->node != node)
      continue;
    TAILQ_REMOVE(&P->held, ev, link);
    P->nheld--;
    if (P->peer[node].heard)
      msg_dispatch(P, ev);
    spcoll__peer__msg__free_unpacked(ev->msg, NULL);
    free(ev);
  }
}

/* A control message of node ev->node: 1 when it is kept (held until
 * that node's Hello), 0 when the transport may free it. */
static int member_msg(spd_peers *P, spd_peer_event *ev) {
  if (ev->msg->body_case == SPCOLL__PEER__MSG__BODY_HELLO) {
    peer_hello(P, ev->node, ev->msg->hello);
    held_replay(P, ev->node);
  } else if (!P->peer[ev->node].heard && P->nheld < 65536) {
    TAILQ_INSERT_TAIL(&P->held, ev, link);
    P->nheld++;
    return 1;
  } else if (P->peer[ev->node].heard) {
    msg_dispatch(P, ev);
  }
  return 0;
}

const spd_peer_member_hooks spd_peer_member = {
    .on_msg = member_msg,
    .on_lost = peer_lost,
    .on_connected = member_connected,
};

void spd_peer_on_tick(uv_timer_t *t) {
  spd_peers *P = t->data;
  uint64_t now = spd_now_ns();
  uint64_t limit = (uint64_t)P->ctx->cfg.peer_timeout * 1000000000u;
  Spcoll__Peer__Msg m = SPCOLL__PEER__MSG__INIT;
  Spcoll__Peer__Heartbeat hb = SPCOLL__PEER__HEARTBEAT__INIT;
  m.body_case = SPCOLL__PEER__MSG__BODY_HEARTBEAT;
  m.heartbeat = &hb;
  for (int n = 0; n < P->ctx->cfg.npeers; n++) {
    spd_peer *p = &P->peer[n];
    if (n == P->ctx->cfg.node_index)
      continue;
    if (p->up && now - p->heard_ns > limit) {
      char why[96];
      snprintf(why, sizeof(why), "no word from it for %d s (peer_timeout)",
               P->ctx->cfg.peer_timeout);
      peer_lost(P, n, why);
    } else if (p->up) {
      spd_peer_am_send(P, n, &m);
    } else if (p->ep != NULL && now - p->connect_ns > limit) {
      peer_lost(P, n, "no Hello in time");
    } else if (p->ep == NULL && !p->departed && !P->stopping) {
      spd_peer_boot_dial(P, n);
    }
  }
  spd_peer_boot_sweep(P, 0);
  spd_log_limit_told(&P->ctx->log,
                     spd_log_limit_end(&P->ctx->peer_auth_log, now,
                                       SPD_REFUSED_WINDOW_NS),
                     "unauthenticated peer connections and messages",
                     "peer_unauthenticated");
  spd_peers_progress(P);
}

