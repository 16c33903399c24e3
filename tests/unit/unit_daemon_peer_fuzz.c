/* A fuzzer of the peer plane, fed where UCX feeds it (spd_peer_on_am,
 * daemon/peer/peer.c) and on through node membership (peer_member.c) to
 * the groups (group_peer.c, op_peer.c, op_p2p_peer.c), without UCX or a
 * network: replies and dials go nowhere (the peer addresses do not
 * resolve). This daemon is node 0 of 3 and holds a group of world 3 with
 * rank 0 here and ranks 1, 2 on nodes 1, 2.
 *
 * Messages are built from the .proto's descriptors: a random body of
 * Spcoll__Peer__Msg, every field of it and of its sub-messages present
 * or not, numbers drawn from edge values (0, 1, -1, 2^31, 2^63-1, ...)
 * and small ones, repeated fields of up to 40 entries, strings with
 * bytes a log must escape, then some bytes flipped. From an
 * authenticated sender (the session's MAC, the next message number)
 * they reach the groups; from an unauthenticated one (a wrong MAC, no
 * session, a replayed number, a node out of range, a random header) none
 * may become an event. Runs for SPT_FUZZ_SECONDS (default 5; `make
 * check` runs it for 20 under ASan/UBSan), seeded from SPT_FUZZ_SEED or
 * the clock, printed so that a failure replays. */
#include <check.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check_run.h"
#include "group.h"
#include "op.h"
#include "op_p2p_internal.h"
#include "peer_internal.h"

#define OWNER 1000
#define WORLD 3

static spd_ctx ctx;
static spd_peers P;
static uv_loop_t loop;
static uint64_t rng;
static uint64_t next_seq[WORLD];
static spd_auth_mac *sender[WORLD]; /* node n's MAC of its session */

static uint64_t rnd(void) { /* xorshift64* */
  rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
  return rng * 2685821657736338717ull;
}

static uint64_t edge(void) {
  static const uint64_t v[] = {0, 1, 2, 3, 7, 64, 65, 255, 4096,
                               0x7fffffffu, 0x80000000u, 0xffffffffu,
                               1ull << 32, INT64_MAX, (uint64_t)INT64_MIN,
                               UINT64_MAX, UINT64_MAX - 1};
  return rnd() % 3 ? rnd() % 8 : v[rnd() % (sizeof(v) / sizeof(v[0]))];
}

/* ---- random wire format from a descriptor ------------------------------- */

typedef struct {
  uint8_t b[1 << 16];
  size_t n;
} wbuf;

static void put(wbuf *w, const void *p, size_t n) {
  if (w->n + n > sizeof(w->b))
    return;
  memcpy(w->b + w->n, p, n);
  w->n += n;
}

static void varint(wbuf *w, uint64_t v) {
  uint8_t b[10];
  size_t n = 0;
  do
    b[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0)), v >>= 7;
  while (v);
  put(w, b, n);
}

static void message(wbuf *w, const ProtobufCMessageDescriptor *d, int depth);

static void field_value(wbuf *w, const ProtobufCFieldDescriptor *f,
                        int depth) {
  uint32_t tag = f->id << 3;
  switch (f->type) {
  case PROTOBUF_C_TYPE_FIXED32:
  case PROTOBUF_C_TYPE_SFIXED32:
  case PROTOBUF_C_TYPE_FLOAT: {
    uint32_t v = (uint32_t)edge();
    varint(w, tag | 5), put(w, &v, 4);
    return;
  }
  case PROTOBUF_C_TYPE_FIXED64:
  case PROTOBUF_C_TYPE_SFIXED64:
  case PROTOBUF_C_TYPE_DOUBLE: {
    uint64_t v = edge();
    varint(w, tag | 1), put(w, &v, 8);
    return;
  }
  case PROTOBUF_C_TYPE_STRING:
  case PROTOBUF_C_TYPE_BYTES: {
    static const char s[] = "g\n\x1b[31m%s\"\\\xff";
    size_t n = rnd() % 24;
    varint(w, tag | 2), varint(w, n);
    for (size_t i = 0; i < n; i++)
      put(w, &s[rnd() % (sizeof(s) - 1)], 1);
    return;
  }
  case PROTOBUF_C_TYPE_MESSAGE: {
    wbuf *sub = malloc(sizeof(*sub));
    ck_assert_ptr_nonnull(sub);
    sub->n = 0;
    message(sub, f->descriptor, depth + 1);
    varint(w, tag | 2), varint(w, sub->n), put(w, sub->b, sub->n);
    free(sub);
    return;
  }
  default: /* the varint types: ints, bools, enums */
    varint(w, tag), varint(w, edge());
    return;
  }
}

static void message(wbuf *w, const ProtobufCMessageDescriptor *d,
                    int depth) {
  for (unsigned i = 0; i < d->n_fields && depth < 4; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    if (rnd() % 3 == 0)
      continue;
    int n = f->label == PROTOBUF_C_LABEL_REPEATED ? (int)(rnd() % 41) : 1;
    for (int k = 0; k < n; k++)
      field_value(w, f, depth);
  }
}

/* A Msg with one random body (a Heartbeat or Hello sometimes, so that
 * membership lets the others through), some bytes flipped. */
static void random_msg(wbuf *w) {
  const ProtobufCMessageDescriptor *d = &spcoll__peer__msg__descriptor;
  const ProtobufCFieldDescriptor *f = &d->fields[rnd() % d->n_fields];
  w->n = 0;
  field_value(w, f, 0);
  for (int k = (int)(rnd() % 4) - 1; k > 0 && w->n > 0; k--)
    w->b[rnd() % w->n] ^= (uint8_t)(1u << (rnd() % 8));
}

/* ---- delivery -------------------------------------------------------------- */

static int deliver(uint32_t node, const wbuf *w, int authentic) {
  spd_am_header hdr = {.node = node,
                       .incarnation = P.peer[node % WORLD].incarnation};
  hdr.seq = node < WORLD ? ++next_seq[node] : 1;
  ck_assert_int_eq(spd_auth_mac_sign(sender[node < WORLD ? node : 1], &hdr,
                                     offsetof(spd_am_header, mac), w->b,
                                     w->n, hdr.mac),
                   SPK_OK);
  if (!authentic) {
    switch (rnd() % 3) {
    case 0: hdr.mac[rnd() % SPD_AUTH_MSG_MAC] ^= 1; break;
    case 1: hdr.seq = rnd() % 2 ? 0 : next_seq[node % WORLD] - 1; break;
    case 2: for (size_t i = 0; i < sizeof(hdr); i++)
              ((uint8_t *)&hdr)[i] = (uint8_t)rnd();
    }
  }
  ucp_am_recv_param_t param;
  memset(&param, 0, sizeof(param));
  spd_peer_on_am(&P, &hdr, sizeof(hdr), (void *)w->b, w->n, &param);
  int n = 0;
  spd_peer_event *ev;
  while ((ev = TAILQ_FIRST(&P.events)) != NULL) {
    TAILQ_REMOVE(&P.events, ev, link);
    n++;
    if (!P.member.on_msg(&P, ev)) {
      spcoll__peer__msg__free_unpacked(ev->msg, NULL);
      free(ev);
    }
  }
  return n;
}

static void setup(void) {
  memset(&ctx, 0, sizeof(ctx));
  memset(&P, 0, sizeof(P));
  memset(next_seq, 0, sizeof(next_seq));
  spd_config_defaults(&ctx.cfg);
  ctx.log.level = SPD_LOG_DEBUG;
  ctx.cfg.npeers = WORLD;
  ctx.cfg.node_index = 0;
  ctx.cfg.peer_timeout = 30;
  for (int n = 0; n < WORLD; n++) /* no dial reaches anything */
    snprintf(ctx.cfg.peers[n].host, sizeof(ctx.cfg.peers[n].host),
             "invalid.invalid"), ctx.cfg.peers[n].port = 1;
  ck_assert_int_eq(uv_loop_init(&loop), 0);
  ctx.loop = &loop;
  TAILQ_INIT(&ctx.sessions);
  TAILQ_INIT(&ctx.groups);
  P.ctx = &ctx;
  P.hooks = spd_group_peer_hooks;
  P.member = spd_peer_member;
  TAILQ_INIT(&P.boots);
  TAILQ_INIT(&P.xfers);
  TAILQ_INIT(&P.events);
  TAILQ_INIT(&P.held);
  for (int n = 0; n < SPD_MAX_NODES; n++)
    P.peer[n].peers = &P, P.peer[n].node = n;
  for (int n = 1; n < WORLD; n++) { /* up: their messages reach groups */
    P.peer[n].up = P.peer[n].heard = 1;
    P.peer[n].incarnation = 5;
    uint8_t key[32];
    memset(key, 0x10 + n, 32);
    ck_assert_int_eq(spd_peer_session_key(&P.peer[n].in, key), 0);
    ck_assert_int_eq(spd_auth_mac_open(key, &sender[n]), SPK_OK);
  }
  ctx.peers = &P;
  spd_group *g = spd_group_create(&ctx, "job", WORLD, OWNER);
  ck_assert_ptr_nonnull(g);
  for (int r = 1; r < WORLD; r++) {
    g->ranks[r].remote = 1;
    g->ranks[r].node = r;
    g->peer_rec[r] = 70 + (uint64_t)r;
  }
  g->joined = WORLD;
  g->multinode = 1;
  g->ready = 1;
}

static void teardown(void) {
  for (int n = 0; n < WORLD; n++) {
    spd_peer_session_clear(&P.peer[n].in);
    spd_auth_mac_close(sender[n]);
    sender[n] = NULL;
  }
  spd_peer_boot_sweep(&P, 1);
  uv_run(&loop, UV_RUN_NOWAIT);
  spd_peer_event *ev;
  while ((ev = TAILQ_FIRST(&P.held)) != NULL) {
    TAILQ_REMOVE(&P.held, ev, link);
    spcoll__peer__msg__free_unpacked(ev->msg, NULL);
    free(ev);
  }
  spd_group *g;
  while ((g = TAILQ_FIRST(&ctx.groups)) != NULL) {
    spd_op *op;
    while ((op = TAILQ_FIRST(&g->ops)) != NULL)
      spd_op_free(op);
    spd_p2p_half *h;
    while ((h = TAILQ_FIRST(&g->p2p_sends)) != NULL) {
      TAILQ_REMOVE(&g->p2p_sends, h, link);
      spd_p2p_half_free(h);
    }
    TAILQ_REMOVE(&ctx.groups, g, link);
    free(g->ranks);
    free(g);
  }
  spd_quotas_free(&ctx.quotas);
  ck_assert_int_eq(uv_loop_close(&loop), 0);
}

START_TEST(fuzz_peer_messages) {
  const char *s = getenv("SPT_FUZZ_SECONDS"), *seed = getenv("SPT_FUZZ_SEED");
  int seconds = s ? atoi(s) : 5;
  rng = seed ? strtoull(seed, NULL, 0) : (uint64_t)time(NULL) * 7919 + 1;
  /* The daemon's log lines (escaping fuzzed too) and any sanitizer
   * report go to a file, removed when the run passes. */
  char log[] = "/tmp/spt-peer-fuzz.XXXXXX";
  int fd = mkstemp(log);
  ck_assert_int_ge(fd, 0);
  printf("peer fuzz: %d s, SPT_FUZZ_SEED=%llu, stderr in %s\n", seconds,
         (unsigned long long)rng, log);
  fflush(stdout);
  fflush(stderr);
  int saved = dup(2);
  ck_assert_int_ge(saved, 0);
  ck_assert_int_eq(dup2(fd, 2), 2);
  close(fd);
  time_t end = time(NULL) + seconds;
  wbuf *w = malloc(sizeof(*w));
  ck_assert_ptr_nonnull(w);
  unsigned long long sent = 0, taken = 0;
  while (time(NULL) < end) {
    for (int k = 0; k < 256; k++, sent++) {
      random_msg(w);
      uint32_t node = 1 + (uint32_t)(rnd() % (WORLD - 1));
      if (rnd() % 4 == 0)
        ck_assert_msg(deliver(node, w, 0) == 0,
                      "an unauthenticated message was taken (seed above)");
      else
        taken += (unsigned long long)deliver(node, w, 1);
    }
    uv_run(&loop, UV_RUN_NOWAIT);
  }
  free(w);
  fflush(stderr);
  ck_assert_int_eq(dup2(saved, 2), 2);
  close(saved);
  ck_assert_int_eq(unlink(log), 0);
  printf("peer fuzz: %llu messages, %llu taken\n", sent, taken);
  ck_assert_uint_gt(taken, 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("daemon_peer_fuzz");
  TCase *tc = tcase_create("fuzz");
  tcase_set_timeout(tc, 600);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, fuzz_peer_messages);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
