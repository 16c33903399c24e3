/* The peer transport's entry point for control messages (spd_peer_on_am,
 * daemon/peer/peer.c), fed as UCX would feed it. Dropped there, before
 * any event indexes the peer table or the message is decoded, and
 * counted in peer_unauthenticated: a header naming a node that is not
 * another node of the peer list (itself, one past the list, or an index
 * of 2^31 and more, which reads as a negative int); a node whose
 * bootstrap has not opened a session; a wrong MAC (another key, a changed
 * byte of header or body); a message number already taken (a replay).
 * The handler goes on taking good messages. No UCX worker is needed: the
 * handler only queues events. */
#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "peer_internal.h"

static spd_ctx ctx;
static spd_peers P;
static uint8_t keys[3][32]; /* node n's session key with us */

static void setup(void) {
  memset(&ctx, 0, sizeof(ctx));
  memset(&P, 0, sizeof(P));
  ctx.log.level = SPD_LOG_ERROR;
  ctx.cfg.npeers = 3;
  ctx.cfg.node_index = 0;
  P.ctx = &ctx;
  for (int n = 1; n < 3; n++) {
    memset(keys[n], 0x40 + n, sizeof(keys[n]));
    ck_assert_int_eq(spd_peer_session_key(&P.peer[n].in, keys[n]), 0);
  }
  TAILQ_INIT(&P.xfers);
  TAILQ_INIT(&P.events);
  TAILQ_INIT(&P.held);
}

static void teardown(void) {
  for (int n = 0; n < 3; n++)
    spd_peer_session_clear(&P.peer[n].in);
}

/* Events queued so far, freed. */
static int events_drain(int *node_p) {
  int n = 0;
  spd_peer_event *ev;
  while ((ev = TAILQ_FIRST(&P.events)) != NULL) {
    TAILQ_REMOVE(&P.events, ev, link);
    if (node_p != NULL)
      *node_p = ev->node;
    if (ev->msg != NULL)
      spcoll__peer__msg__free_unpacked(ev->msg, NULL);
    free(ev);
    n++;
  }
  return n;
}

/* A heartbeat as node `node` of incarnation 7 would send it: message
 * number seq, MACed with key (NULL: that node's session key), flip: a
 * byte of the body changed after the MAC. */
static void deliver_as(uint32_t node, uint64_t seq, const uint8_t *key,
                       int flip) {
  Spcoll__Peer__Msg m = SPCOLL__PEER__MSG__INIT;
  Spcoll__Peer__Heartbeat hb = SPCOLL__PEER__HEARTBEAT__INIT;
  m.body_case = SPCOLL__PEER__MSG__BODY_HEARTBEAT;
  m.heartbeat = &hb;
  uint8_t data[64];
  size_t len = spcoll__peer__msg__get_packed_size(&m);
  ck_assert_uint_le(len, sizeof(data));
  spcoll__peer__msg__pack(&m, data);
  spd_am_header hdr = {.node = node, .incarnation = 7, .seq = seq};
  uint8_t zero[32] = {0};
  if (key == NULL)
    key = node < 3 ? keys[node] : zero;
  ck_assert_int_eq(spd_auth_msg_mac(key, &hdr, offsetof(spd_am_header, mac),
                                    data, len, hdr.mac),
                   SPK_OK);
  data[0] ^= (uint8_t)flip;
  ucp_am_recv_param_t param;
  memset(&param, 0, sizeof(param));
  ck_assert_int_eq(spd_peer_on_am(&P, &hdr, sizeof(hdr), data, len, &param),
                   UCS_OK);
}

static uint64_t next_seq = 1;

static void deliver(uint32_t node) {
  deliver_as(node, next_seq++, NULL, 0);
}

START_TEST(node_outside_the_list_dropped) {
  static const uint32_t bad[] = {0,           /* this node itself */
                                 3,           /* one past the list */
                                 64,          /* past SPD_MAX_NODES too */
                                 0x80000000u, /* INT_MIN as an int */
                                 0xffffffffu /* -1 as an int */};
  int node = -100;
  deliver(1);
  ck_assert_int_eq(events_drain(&node), 1);
  ck_assert_int_eq(node, 1);
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    deliver(bad[i]);
    ck_assert_msg(events_drain(NULL) == 0, "a message of node %u was taken",
                  bad[i]);
  }
  /* Still taking the other nodes' messages. */
  deliver(2);
  ck_assert_int_eq(events_drain(&node), 1);
  ck_assert_int_eq(node, 2);
  ck_assert_uint_eq(ctx.stats.peer_unauthenticated, 5);
}
END_TEST

START_TEST(unauthenticated_dropped) {
  uint8_t other[32];
  memset(other, 0x41, sizeof(other)); /* node 1's key, for node 2 */
  deliver_as(2, 1, other, 0);
  ck_assert_int_eq(events_drain(NULL), 0);
  deliver_as(2, 2, NULL, 0x01); /* a body byte changed */
  ck_assert_int_eq(events_drain(NULL), 0);
  spd_peer_session_clear(&P.peer[1].in); /* no bootstrap from node 1 */
  deliver_as(1, 3, NULL, 0);
  ck_assert_int_eq(events_drain(NULL), 0);
  ck_assert_uint_eq(ctx.stats.peer_unauthenticated, 3);
  deliver_as(2, 4, NULL, 0);
  ck_assert_int_eq(events_drain(NULL), 1);
}
END_TEST

START_TEST(replay_dropped) {
  deliver_as(1, 5, NULL, 0);
  ck_assert_int_eq(events_drain(NULL), 1);
  deliver_as(1, 5, NULL, 0); /* the same message again */
  deliver_as(1, 4, NULL, 0); /* an older one */
  ck_assert_int_eq(events_drain(NULL), 0);
  ck_assert_uint_eq(ctx.stats.peer_unauthenticated, 2);
  deliver_as(1, 9, NULL, 0); /* numbers may skip (a message not sent) */
  ck_assert_int_eq(events_drain(NULL), 1);
}
END_TEST

/* A header of another length, or a rendezvous message, is not ours. */
START_TEST(foreign_headers_dropped) {
  uint8_t hdr[4] = {1, 0, 0, 0};
  uint8_t data[1] = {0};
  ucp_am_recv_param_t param;
  memset(&param, 0, sizeof(param));
  ck_assert_int_eq(spd_peer_on_am(&P, hdr, sizeof(hdr), data, 0, &param),
                   UCS_OK);
  ck_assert_int_eq(events_drain(NULL), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("daemon_peer");
  TCase *tc = tcase_create("peer");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, node_outside_the_list_dropped);
  tcase_add_test(tc, foreign_headers_dropped);
  tcase_add_test(tc, unauthenticated_dropped);
  tcase_add_test(tc, replay_dropped);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
