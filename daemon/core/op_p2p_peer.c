/* Point-to-point pairs across nodes (see op_p2p.h). The receiver's node
 * matches: the sender's node posts each send there (POST) in the order
 * its rank posted them, and control messages keep their order per
 * endpoint, so a receive, naming its source or any, meets the sends of
 * every node in the order they reached its node, and a send matches one
 * receive only. The receiver's node checks the pair as on one node, posts
 * its receive stream and answers (MATCH: go, with the pair's stream
 * number, or the error both ranks get, in the same words); the sender's
 * node then posts the send stream; the receive's end, once over, tells
 * the sender's node (DONE), whose send completes on that word (so a send
 * returns once the receiver holds the data, as on one node). A side that
 * gives up tells the other (DROP: a send not yet matched; ABORT: a pair
 * that will not run or end there). Loop thread only. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "op_p2p_internal.h"
#include "peer.h"

/* A pair's stream number has the top bit of the UCX tag's 32-bit op field
 * set: collectives' sequence numbers (counted from 0) stay below it, so a
 * pair's stream never meets a collective's. */
#define P2P_SEQ_BIT (1ull << 31)

static void msg_send(spd_group *g, int node, Spcoll__Peer__P2p *p) {
  Spcoll__Peer__Msg m = SPCOLL__PEER__MSG__INIT;
  p->rec = g->rec;
  m.body_case = SPCOLL__PEER__MSG__BODY_P2P;
  m.p2p = p;
  spd_peer_send(g->ctx, node, &m);
}

/* A message about the send h (of either node). */
static void msg_about(const spd_p2p_half *h, Spcoll__Peer__P2p__Kind kind,
                      int status, const char *why, Spcoll__Peer__P2p *p) {
  *p = (Spcoll__Peer__P2p)SPCOLL__PEER__P2P__INIT;
  p->kind = kind;
  p->id = h->id;
  p->src = h->rank, p->dst = h->peer, p->tag = h->tag;
  p->status = status;
  p->error = (char *)(status < 0 && why != NULL ? why : "");
}

void spd_p2p_peer_post(spd_group *g, spd_p2p_half *h) {
  Spcoll__Peer__P2p p;
  h->id = ++g->p2p_next_id;
  h->posted = 1;
  /* The send's own error goes with it: both ranks hear it at the match. */
  msg_about(h, SPCOLL__PEER__P2P__KIND__POST, h->status, h->err.msg, &p);
  p.dtype = (uint32_t)h->args.dtype;
  p.numel = h->numel;
  p.draining = g->ctx->draining;
  TAILQ_INSERT_TAIL(&g->p2p_sends, h, link);
  msg_send(g, g->ranks[h->peer].node, &p);
}

void spd_p2p_peer_answer(spd_p2p_half *h, int status, const char *msg) {
  Spcoll__Peer__P2p p;
  /* A proxy is answered only with an error: a match goes through
   * spd_p2p_peer_start. */
  msg_about(h, SPCOLL__PEER__P2P__KIND__MATCH,
            status < 0 ? status : SPK_EPROTOCOL, msg, &p);
  msg_send(h->g, h->node, &p);
}

void spd_p2p_peer_drop(spd_p2p_half *h, int status, const char *msg) {
  Spcoll__Peer__P2p p;
  msg_about(h, SPCOLL__PEER__P2P__KIND__DROP, status, msg, &p);
  msg_send(h->g, h->g->ranks[h->peer].node, &p);
}

/* ABORT or DONE of the pair with stream number seq. */
static void send_end(spd_group *g, int node, Spcoll__Peer__P2p__Kind kind,
                     uint64_t seq, int from_sender, int status,
                     const char *msg) {
  Spcoll__Peer__P2p p = SPCOLL__PEER__P2P__INIT;
  p.kind = kind;
  p.seq = seq;
  p.from_sender = from_sender;
  p.status = status;
  p.error = (char *)(status < 0 && msg != NULL ? msg : "");
  msg_send(g, node, &p);
}

static void send_abort(spd_group *g, int node, uint64_t seq, int from_sender,
                       int status, const char *msg) {
  send_end(g, node, SPCOLL__PEER__P2P__KIND__ABORT, seq, from_sender, status,
           msg);
}

int spd_p2p_peer_ended(spd_p2p_run *run, int status, const char *msg) {
  if (run->h[0] == NULL) {
    /* The receive's end: the sender's node hears how it went. */
    if (run->told)
      send_end(run->h[1]->g, run->remote, SPCOLL__PEER__P2P__KIND__DONE,
               run->seq, 0, status, msg ? msg : "the engine failed");
    return 0;
  }
  /* The send's end: success waits for DONE; a failure ends it now, and
   * the receive must not wait for a stream that may never come (unknown
   * there once that end is over: ignored). */
  if (status < 0 && run->told)
    send_abort(run->h[0]->g, run->remote, run->seq, 1, status,
               msg ? msg : "the engine failed");
  return status == SPK_OK && !run->acked;
}

void spd_p2p_peer_broken(void *arg, int status, const char *msg, int tell) {
  spd_p2p_run *run = arg;
  int self = run->h[0] == NULL; /* this node's half */
  /* Before the other node knows of the pair it hears the match's error
   * instead. */
  if (tell && run->told)
    send_abort(run->h[self]->g, run->remote, run->seq, !self, status, msg);
}

void spd_p2p_peer_start(spd_group *g, spd_p2p_half *snd, spd_p2p_half *rcv) {
  spk_err err;
  int rc = SPK_OK;
  spd_p2p_run *run = calloc(1, sizeof(*run));
  Spcoll__Peer__P2p p;
  if (run == NULL) {
    rc = spk_err_set(&err, SPK_ENO_MEMORY, "calloc of a point-to-point run "
                     "failed");
  } else {
    run->h[1] = rcv;
    run->remote = snd->node;
    run->src = snd->rank, run->dst = rcv->rank;
    run->dtype = snd->args.dtype, run->numel = snd->numel;
    run->rargs = (spk_op_args){.dtype = snd->args.dtype,
                               .in = {.ndim = 1, .dim = {snd->numel}},
                               .out = {.ndim = 1}};
    run->seq = P2P_SEQ_BIT | (g->p2p_next_seq++ & (P2P_SEQ_BIT - 1));
    rc = spd_p2p_run_start(g, run, &err);
  }
  msg_about(snd, SPCOLL__PEER__P2P__KIND__MATCH, rc, err.msg, &p);
  if (rc == SPK_OK) {
    /* Our receive is posted: the sender's node may send. */
    p.seq = run->seq;
    run->told = 1;
  } else {
    g->ctx->stats.ops_failed++;
    spd_p2p_half_answer(rcv, rc, err.msg, snd->rank);
    spd_p2p_half_free(rcv);
  }
  msg_send(g, snd->node, &p);
  spd_p2p_half_free(snd);
}

/* ---- messages ---- */

/* A send of node's rank to a rank here: a proxy, matched as a local
 * send. */
static void on_post(spd_group *g, int node, const Spcoll__Peer__P2p *m) {
  spd_p2p_half tmp = {.g = g, .send = 1, .rank = m->src, .peer = m->dst,
                      .tag = m->tag, .node = node, .id = m->id};
  if (m->src < 0 || m->src >= g->world || !g->ranks[m->src].remote ||
      g->ranks[m->src].node != node || m->dst < 0 || m->dst >= g->world ||
      g->ranks[m->dst].remote || m->tag < 0) {
    SPD_WARN(&g->ctx->log, "node %d posted a send of rank %d to rank %d of "
             "group '%s' that is not its own to this node: refused", node,
             m->src, m->dst, g->name);
    spd_p2p_peer_answer(&tmp, SPK_EPROTOCOL, "a send posted to the wrong "
                        "node");
    return;
  }
  char why_buf[300];
  const char *why = spd_p2p_closed(g, m->src, m->dst, why_buf,
                                   sizeof(why_buf));
  if (why != NULL) {
    spd_p2p_peer_answer(&tmp, g->broken_status, why);
    return;
  }
  spd_p2p_half *h = calloc(1, sizeof(*h));
  if (h == NULL) {
    spd_p2p_peer_answer(&tmp, SPK_ENO_MEMORY, "out of memory for a "
                        "point-to-point op");
    return;
  }
  /* Not charged to a uid here: the sender's node bounds its rank's
   * pending sends, and this proxy stands for one of them. */
  *h = tmp;
  h->arrived_ns = spd_now_ns();
  h->args.dtype = (spk_dtype)m->dtype;
  h->numel = m->numel;
  h->status = m->status >= 0 ? SPK_OK
                             : spk_error_or(m->status, SPK_EPROTOCOL);
  if (h->status < 0)
    snprintf(h->err.msg, sizeof(h->err.msg), "%s", m->error ? m->error : "");
  else if (spk_dtype_size(h->args.dtype) == 0 || m->numel < 0)
    h->status = spk_err_set(&h->err, SPK_EPROTOCOL, "node %d posted dtype "
                            "%u, %lld elements", node, m->dtype,
                            (long long)m->numel);
  spd_p2p_half *o = spd_p2p_match(g, h);
  /* Draining (either node): only a receive already posted may take it. */
  if (o == NULL && (m->draining || g->ctx->draining)) {
    spd_p2p_half_answer(h, SPK_ESHUTDOWN, "daemon draining: no new ops", -1);
    spd_p2p_half_free(h);
    return;
  }
  if (o == NULL) {
    TAILQ_INSERT_TAIL(&g->p2p_sends, h, link);
    return;
  }
  TAILQ_REMOVE(&g->p2p_recvs, o, link);
  spd_p2p_pair_start(g, h, o);
}

/* A pair's stream number, as the receiver's node gives it: the top bit of
 * the tag's op field set, nothing above the field (a stream number
 * outside it would share the tag of a collective's stream, or be cut to
 * another pair's). */
static int p2p_seq_valid(uint64_t seq) {
  return (seq & ~(uint64_t)0xffffffffu) == 0 && (seq & P2P_SEQ_BIT) != 0;
}

/* A status a peer names: SPK_OK or one of kernels/status.h's. */
static int status_known(int status) {
  switch (status) {
  case SPK_OK:
#define SPD_STATUS_CASE(name, pub, wire, val, msg) case SPK_E##name:
    SPK_STATUS_MAP(SPD_STATUS_CASE)
#undef SPD_STATUS_CASE
    return 1;
  default:
    return 0;
  }
}

/* Is stream number seq taken by a pair whose send is this node's and
 * whose receive is node's (running or ending)? Its tag would be that
 * pair's too, and that node's DONE or ABORT for one would end the other. */
static int send_seq_taken(spd_group *g, int node, uint64_t seq) {
  spd_p2p_half *x;
  TAILQ_FOREACH(x, &g->p2p_run, link)
    if (x->run->remote == node && x == x->run->h[0] && x->run->seq == seq)
      return 1;
  return 0;
}

/* Our send h posted to node, if MATCH m may answer it: SPK_OK, or
 * SPK_EPROTOCOL with why. A go names the pair as h does and a stream
 * number of a pair (p2p_seq_valid) that no other pair of this node's send
 * with node holds; an error is a status of ours. */
static int match_check(spd_group *g, int node, const spd_p2p_half *h,
                       const Spcoll__Peer__P2p *m, char *why, size_t len) {
  if (m->src != h->rank || m->dst != h->peer || m->tag != h->tag) {
    snprintf(why, len, "it names ranks %d to %d tag %d, not %d to %d tag %d",
             m->src, m->dst, m->tag, h->rank, h->peer, h->tag);
    return SPK_EPROTOCOL;
  }
  if (!status_known(m->status)) {
    snprintf(why, len, "status %d is none of this daemon's", m->status);
    return SPK_EPROTOCOL;
  }
  if (m->status < 0)
    return SPK_OK;
  if (!p2p_seq_valid(m->seq)) {
    snprintf(why, len, "stream number %#llx is not a point-to-point one",
             (unsigned long long)m->seq);
    return SPK_EPROTOCOL;
  }
  if (send_seq_taken(g, node, m->seq)) {
    snprintf(why, len, "stream number %#llx is another pair's",
             (unsigned long long)m->seq);
    return SPK_EPROTOCOL;
  }
  return SPK_OK;
}

/* Our send posted to node with id (h->posted): still waiting there. */
static spd_p2p_half *posted_find(spd_group *g, int node, uint64_t id) {
  spd_p2p_half *h;
  TAILQ_FOREACH(h, &g->p2p_sends, link)
    if (h->posted && h->id == id && g->ranks[h->peer].remote &&
        g->ranks[h->peer].node == node)
      return h;
  return NULL;
}

/* The receiver's node answered our send: run our end, or fail it. */
static void on_match(spd_group *g, int node, const Spcoll__Peer__P2p *m) {
  spd_p2p_half *h = posted_find(g, node, m->id);
  if (h == NULL) {
    /* It failed here meanwhile (its DROP crossed this MATCH): the
     * receive posted there must not wait for our stream. */
    if (m->status >= 0 && p2p_seq_valid(m->seq) &&
        !send_seq_taken(g, node, m->seq))
      send_abort(g, node, m->seq, 1,
                 g->broken ? g->broken_status : SPK_EPEER_LOST,
                 g->broken ? g->broken_reason
                           : "the send was dropped before it matched");
    return;
  }
  TAILQ_REMOVE(&g->p2p_sends, h, link);
  spk_err err;
  char why[200];
  int rc = match_check(g, node, h, m, why, sizeof(why));
  if (rc < 0) {
    /* Our send fails; node hears of it only under a stream number that
     * names no other pair, or its receive would end in that pair's
     * place (a receive left waiting there ends by its timeout). */
    spd_group_peer_refused(g->ctx, node, "match of send %llu of group '%s' "
                           "(rank %d to %d tag %d): %s",
                           (unsigned long long)h->id, g->name, h->rank,
                           h->peer, h->tag, why);
    spk_err_set(&err, rc, "node %d answered the send with a bad match: %s",
                node, why);
    if (m->status >= 0 && p2p_seq_valid(m->seq) &&
        !send_seq_taken(g, node, m->seq))
      send_abort(g, node, m->seq, 1, rc, err.msg);
  } else if (m->status < 0) {
    rc = spk_err_set(&err, m->status, "%s", m->error ? m->error : "");
  }
  spd_p2p_run *run = NULL;
  if (rc == SPK_OK && (run = calloc(1, sizeof(*run))) == NULL)
    rc = spk_err_set(&err, SPK_ENO_MEMORY, "calloc of a point-to-point run "
                     "failed");
  if (rc == SPK_OK) {
    run->h[0] = h;
    run->remote = node;
    run->src = h->rank, run->dst = h->peer;
    run->dtype = h->args.dtype, run->numel = h->numel;
    run->rargs = (spk_op_args){.dtype = h->args.dtype, .in = {.ndim = 1},
                               .out = {.ndim = 1, .dim = {h->numel}}};
    run->seq = m->seq;
    rc = spd_p2p_run_start(g, run, &err);
    if (rc == SPK_OK) {
      run->told = 1;
      return; /* the engine answers */
    }
    send_abort(g, node, m->seq, 1, rc, err.msg);
  }
  g->ctx->stats.ops_failed++;
  spd_p2p_half_answer(h, rc, err.msg, h->rank);
  spd_p2p_half_free(h);
}

/* The sender's node failed a send it posted here: its proxy goes (its
 * rank heard why there). Already matched: an ABORT follows. */
static void on_drop(spd_group *g, int node, const Spcoll__Peer__P2p *m) {
  spd_p2p_half *h;
  TAILQ_FOREACH(h, &g->p2p_sends, link)
    if (h->node == node && h->id == m->id) {
      TAILQ_REMOVE(&g->p2p_sends, h, link);
      spd_p2p_half_free(h);
      return;
    }
}

/* The running pair of g with node whose half here is the send (send 1) or
 * the receive, with stream number seq, not yet aborted; NULL if none. */
static spd_p2p_run *run_find(spd_group *g, int node, int send, uint64_t seq,
                             int any_seq) {
  spd_p2p_half *h;
  TAILQ_FOREACH(h, &g->p2p_run, link) {
    spd_p2p_run *run = h->run;
    if (run->remote == node && !run->aborted && h == run->h[!send] &&
        (any_seq || run->seq == seq))
      return run;
  }
  return NULL;
}

/* End run with status: through its engine while that runs it (node: a
 * node that will not take part), else (a send waiting for its receiver's
 * word) now. */
static void run_stop(spd_p2p_run *run, int status, const char *msg,
                     int node) {
  const spd_engine *e = spd_engines[run->engine];
  run->aborted = 1;
  if (run->engine_done)
    spd_p2p_run_end(run, status, msg);
  else if (e->abort != NULL)
    e->abort(&run->work, status, msg, node);
}

/* The other node will not run (or end) its side of the pair. */
static void on_abort(spd_group *g, int node, const Spcoll__Peer__P2p *m) {
  spd_p2p_run *run = run_find(g, node, !m->from_sender, m->seq, 0);
  if (run == NULL)
    return;
  char msg[320];
  snprintf(msg, sizeof(msg), "node %d: %s", node, m->error ? m->error : "");
  run_stop(run, spk_error_or(m->status, SPK_ENODE_LOST), msg, node);
}

/* The receiver's node says how its end of our send went. */
static void on_done(spd_group *g, int node, const Spcoll__Peer__P2p *m) {
  spd_p2p_run *run = run_find(g, node, 1, m->seq, 0);
  if (run == NULL)
    return;
  if (m->status < 0) {
    char msg[320];
    snprintf(msg, sizeof(msg), "node %d: %s", node, m->error ? m->error : "");
    run_stop(run, m->status, msg, node);
    return;
  }
  run->acked = 1;
  if (run->engine_done)
    spd_p2p_run_end(run, SPK_OK, NULL);
}

void spd_p2p_peer_msg(spd_group *g, int node, const Spcoll__Peer__P2p *m) {
  spd_ctx *ctx = g->ctx;
  switch (m->kind) {
  case SPCOLL__PEER__P2P__KIND__POST:
    on_post(g, node, m);
    break;
  case SPCOLL__PEER__P2P__KIND__MATCH:
    on_match(g, node, m);
    break;
  case SPCOLL__PEER__P2P__KIND__DROP:
    on_drop(g, node, m);
    break;
  case SPCOLL__PEER__P2P__KIND__ABORT:
    on_abort(g, node, m);
    break;
  case SPCOLL__PEER__P2P__KIND__DONE:
    on_done(g, node, m);
    break;
  default:
    SPD_DEBUG(&ctx->log, "node %d sent point-to-point message kind %d: "
              "ignored", node, (int)m->kind);
  }
  spd_group_maybe_free(g);
  spd_up_drain_check(ctx);
}

void spd_p2p_node_lost(spd_group *g, int node, const char *msg) {
  /* An engine may finish a pair inside abort: look again each time. */
  for (int send = 0; send < 2; send++) {
    spd_p2p_run *run;
    while ((run = run_find(g, node, send, 0, 1)) != NULL)
      run_stop(run, SPK_ENODE_LOST, msg, node);
  }
}
