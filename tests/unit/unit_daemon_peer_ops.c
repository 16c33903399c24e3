/* What a peer's op messages may make a daemon do, fed to the groups'
 * handler (spd_group_peer_hooks.on_msg, daemon/core/group_peer.c) as the
 * peer layer hands them over, without UCX (ctx.peers NULL: replies are
 * dropped). A group of `world` ranks: rank 0 lives here, every other rank
 * r on node r.
 *
 * Args (op_peer.c): a rank's ops are taken in order and at most
 * client_max_pending ahead of this node's ranks, charged to the group's
 * owner like a local rank's; others are refused (counted in
 * peer_refused), whatever sequence numbers a peer sends, and the group
 * breaks with its pending ops failed.
 *
 * MATCH (op_p2p_peer.c): the answer to a send posted to node 1 is taken
 * from node 1 only, and only with the pair's ranks and tag, a status this
 * daemon knows and a point-to-point stream number no other pair with that
 * node holds; else the send fails and no stream is started. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "group.h"
#include "op.h"
#include "op_p2p_internal.h"
#include "peer.h"

#define OWNER 1000
#define REC_BASE 70 /* node n's record id of the group: REC_BASE + n */
#define P2P_SEQ_BIT (1ull << 31)

static spd_ctx ctx;
static spd_group *G;

static void setup_world(int world) {
  memset(&ctx, 0, sizeof(ctx));
  spd_config_defaults(&ctx.cfg);
  ctx.log.level = SPD_LOG_ERROR;
  ctx.cfg.npeers = world;
  ctx.cfg.node_index = 0;
  ctx.cfg.client_max_pending = 8;
  TAILQ_INIT(&ctx.sessions);
  TAILQ_INIT(&ctx.groups);
  G = spd_group_create(&ctx, "job", world, OWNER);
  ck_assert_ptr_nonnull(G);
  for (int r = 1; r < world; r++) {
    G->ranks[r].remote = 1;
    G->ranks[r].node = r;
    G->peer_rec[r] = REC_BASE + (uint64_t)r;
  }
  G->joined = world; /* rank 0's client is not needed: ops never start */
  G->multinode = 1;
  G->ready = 1;
}

static void setup(void) { setup_world(2); }

static void teardown(void) {
  spd_op *op;
  while ((op = TAILQ_FIRST(&G->ops)) != NULL)
    spd_op_free(op);
  spd_p2p_half *h;
  while ((h = TAILQ_FIRST(&G->p2p_sends)) != NULL) {
    TAILQ_REMOVE(&G->p2p_sends, h, link);
    spd_p2p_half_free(h);
  }
  TAILQ_REMOVE(&ctx.groups, G, link);
  free(G->ranks);
  free(G);
  spd_quotas_free(&ctx.quotas);
}

static int ops_held(void) {
  int n = 0;
  spd_op *op;
  TAILQ_FOREACH(op, &G->ops, link)
    n++;
  return n;
}

/* Node 1's Args for op seq of its rank 1: an all_gather-like op's
 * arguments (they are not planned: rank 0 never arrives). */
static void args_from(int node, int rank, uint64_t seq) {
  Spcoll__Peer__Msg m = SPCOLL__PEER__MSG__INIT;
  Spcoll__Peer__Args a = SPCOLL__PEER__ARGS__INIT;
  Spcoll__Peer__Tensor in = SPCOLL__PEER__TENSOR__INIT;
  Spcoll__Peer__Tensor out = SPCOLL__PEER__TENSOR__INIT;
  int64_t shape[1] = {4}, oshape[1] = {8};
  in.dtype = out.dtype = 1;
  in.n_shape = 1, in.shape = shape;
  out.n_shape = 1, out.shape = oshape;
  a.rec = REC_BASE + (uint64_t)node;
  a.seq = seq;
  a.rank = rank;
  a.op = 1;
  a.input = &in, a.output = &out;
  m.body_case = SPCOLL__PEER__MSG__BODY_ARGS;
  m.args = &a;
  spd_group_peer_hooks.on_msg(&ctx, node, &m);
}

static long long owner_pending(void) {
  return spd_quota_use(&ctx.quotas, OWNER, SPD_Q_PENDING);
}

/* An OpFail naming a status this daemon does not know breaks the group
 * with one it does (the one a lost node gives). */
START_TEST(op_fail_unknown_status_mapped) {
  Spcoll__Peer__Msg m = SPCOLL__PEER__MSG__INIT;
  Spcoll__Peer__OpFail f = SPCOLL__PEER__OP_FAIL__INIT;
  f.rec = REC_BASE + 1;
  f.seq = 0;
  f.status = -12345;
  f.reason = "made up";
  m.body_case = SPCOLL__PEER__MSG__BODY_OP_FAIL;
  m.op_fail = &f;
  spd_group_peer_hooks.on_msg(&ctx, 1, &m);
  ck_assert(G->broken);
  ck_assert_int_eq(G->broken_status, SPK_ENODE_LOST);
  ck_assert_str_ne(spk_strerror(G->broken_status), "unknown status");
}
END_TEST

/* A peer sending every sequence number in turn holds at most
 * client_max_pending ops here, not one per message. */
START_TEST(args_flood_bounded) {
  for (uint64_t seq = 0; seq < 1000; seq++)
    args_from(1, 1, seq);
  ck_assert_int_le(ops_held(), (int)ctx.cfg.client_max_pending);
  ck_assert_int_le(owner_pending(), ctx.cfg.client_max_pending);
  ck_assert_uint_ge(ctx.stats.peer_refused, 1);
}
END_TEST

/* Any sequence number: none far ahead, none out of the rank's order. */
START_TEST(args_far_or_out_of_order_refused) {
  static const uint64_t bad[] = {1ull << 40, UINT64_MAX, 8, 1};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    args_from(1, 1, bad[i]);
    ck_assert_msg(ops_held() == 0, "op %llu of rank 1 was taken",
                  (unsigned long long)bad[i]);
  }
  ck_assert_uint_eq(ctx.stats.peer_refused, 4);
  ck_assert_int_eq(owner_pending(), 0);
}
END_TEST

/* Within the window ops are taken and charged to the owner; the first one
 * past it is refused, breaks the group, and the ops the rank has issued
 * that can no longer complete fail, giving their charge back. */
START_TEST(args_window_then_refused) {
  int w = (int)ctx.cfg.client_max_pending;
  for (int seq = 0; seq < w; seq++)
    args_from(1, 1, (uint64_t)seq);
  ck_assert_int_eq(ops_held(), w);
  ck_assert_int_eq(owner_pending(), w);
  ck_assert_uint_eq(ctx.stats.peer_refused, 0);
  ck_assert_int_eq(G->broken, 0);
  args_from(1, 1, (uint64_t)w);
  ck_assert_uint_eq(ctx.stats.peer_refused, 1);
  ck_assert_int_eq(G->broken, 1);
  ck_assert_int_eq(G->broken_status, SPK_EPROTOCOL);
  ck_assert_int_eq(ops_held(), w); /* rank 1 issued them: kept */
  /* The local rank moving on moves the window with it. */
  G->ranks[0].next_seq = 3;
  args_from(1, 1, (uint64_t)w); /* its next in order, now in the window */
  ck_assert_int_eq(ops_held(), w + 1);
}
END_TEST

/* A rank that is not the sender's, or a group that is not its. */
START_TEST(args_of_another_node_refused) {
  teardown();
  setup_world(3);
  args_from(2, 1, 0); /* node 2 speaking for node 1's rank */
  args_from(1, 0, 0); /* node 1 speaking for this node's rank */
  ck_assert_int_eq(ops_held(), 0);
  ck_assert_uint_eq(ctx.stats.peer_refused, 2);
}
END_TEST

/* ---- MATCH ---- */

/* A send of rank 0 to rank 1 (node 1), posted there as a real one is. */
static spd_p2p_half *send_posted(int tag) {
  spd_p2p_half *h = calloc(1, sizeof(*h));
  ck_assert_ptr_nonnull(h);
  h->g = G;
  h->send = 1, h->rank = 0, h->peer = 1, h->tag = tag;
  h->node = -1;
  h->args.dtype = SPK_F32;
  h->numel = 4;
  spd_p2p_peer_post(G, h);
  return h;
}

static int sends_waiting(void) {
  int n = 0;
  spd_p2p_half *h;
  TAILQ_FOREACH(h, &G->p2p_sends, link)
    n++;
  return n;
}

static void match_from(int node, const spd_p2p_half *h, int src, int tag,
                       int status, uint64_t seq) {
  Spcoll__Peer__Msg m = SPCOLL__PEER__MSG__INIT;
  Spcoll__Peer__P2p p = SPCOLL__PEER__P2P__INIT;
  p.rec = REC_BASE + (uint64_t)node;
  p.kind = SPCOLL__PEER__P2P__KIND__MATCH;
  p.id = h->id;
  p.src = src, p.dst = h->peer, p.tag = tag;
  p.status = status;
  p.error = "";
  p.seq = seq;
  m.body_case = SPCOLL__PEER__MSG__BODY_P2P;
  m.p2p = &p;
  spd_group_peer_hooks.on_msg(&ctx, node, &m);
}

/* Each bad go fails its send here: nothing runs under it. */
START_TEST(match_bad_numbers_refused) {
  struct {
    int src, tag, status;
    uint64_t seq;
  } bad[] = {
      {0, 3, 0, 5},                         /* a collective's stream */
      {0, 3, 0, 0},                         /* top bit missing */
      {0, 3, 0, P2P_SEQ_BIT | (1ull << 32)}, /* above the tag's field */
      {0, 3, 0, UINT64_MAX},
      {1, 3, 0, P2P_SEQ_BIT | 1},           /* another pair's ranks */
      {0, 4, 0, P2P_SEQ_BIT | 1},           /* another tag */
      {0, 3, -9999, P2P_SEQ_BIT | 1},       /* no status of ours */
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    spd_p2p_half *h = send_posted(3);
    match_from(1, h, bad[i].src, bad[i].tag, bad[i].status, bad[i].seq);
    ck_assert_msg(sends_waiting() == 0, "case %zu: the send still waits", i);
    ck_assert_msg(TAILQ_EMPTY(&G->p2p_run), "case %zu: a pair runs", i);
    ck_assert_msg(ctx.stats.peer_refused == i + 1,
                  "case %zu: not refused (%llu refusals)", i,
                  (unsigned long long)ctx.stats.peer_refused);
  }
}
END_TEST

/* A stream number a pair of this node's send with node 1 holds. */
START_TEST(match_taken_stream_refused) {
  spd_p2p_half held = {.g = G, .send = 1, .rank = 0, .peer = 1, .node = -1};
  spd_p2p_run run = {.remote = 1, .seq = P2P_SEQ_BIT | 7};
  run.h[0] = &held;
  held.run = &run;
  TAILQ_INSERT_TAIL(&G->p2p_run, &held, link);
  spd_p2p_half *h = send_posted(3);
  match_from(1, h, 0, 3, 0, P2P_SEQ_BIT | 7);
  ck_assert_int_eq(sends_waiting(), 0);
  ck_assert_ptr_eq(TAILQ_FIRST(&G->p2p_run), &held);
  ck_assert_ptr_null(TAILQ_NEXT(&held, link));
  ck_assert_uint_eq(ctx.stats.peer_refused, 1);
  TAILQ_REMOVE(&G->p2p_run, &held, link);
}
END_TEST

/* The answer to a send posted to node 1, from node 2: not node 2's to
 * give. The send still waits for node 1. */
START_TEST(match_of_another_node_ignored) {
  teardown();
  setup_world(3);
  spd_p2p_half *h = send_posted(3);
  match_from(2, h, 0, 3, 0, P2P_SEQ_BIT | 1);
  ck_assert_int_eq(sends_waiting(), 1);
  ck_assert(TAILQ_EMPTY(&G->p2p_run));
}
END_TEST

int main(void) {
  Suite *s = suite_create("daemon_peer_ops");
  TCase *tc = tcase_create("peer_ops");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, args_flood_bounded);
  tcase_add_test(tc, op_fail_unknown_status_mapped);
  tcase_add_test(tc, args_far_or_out_of_order_refused);
  tcase_add_test(tc, args_window_then_refused);
  tcase_add_test(tc, args_of_another_node_refused);
  tcase_add_test(tc, match_bad_numbers_refused);
  tcase_add_test(tc, match_taken_stream_refused);
  tcase_add_test(tc, match_of_another_node_ignored);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
