/* The first crash of the network probe, end to end: an active message
 * whose header names node 2^31 (or 2^32 - 1) indexed the peer table as a
 * negative int and killed the daemon. Now a sender must first pass the
 * bootstrap (daemon/peer/peer_boot.c): this test holds the node key, so
 * it does, as node 1, makes its own UCX endpoint to node 0 from the
 * worker address it is given, and sends control messages whose header
 * names nodes outside the list, one with a wrong MAC, one replayed. Node
 * 0 refuses each (peer_unauthenticated), keeps serving, and the real
 * node 1, whose session the test displaced, comes back and runs a
 * verified group with it. Two daemons on loopback tcp. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <ucp/api/ucp.h>

#include "check_run.h"
#include "harness.h"
#include "peer_auth.h"
#include "peer_internal.h"

static spt_nodes nodes;

static void read_all(int fd, uint8_t *b, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = recv(fd, b + got, n - got, 0);
    ck_assert_int_gt(r, 0);
    got += (size_t)r;
  }
}

/* The bootstrap as node 1 to node 0: its worker address (malloc'd) and
 * the session in x. */
static uint8_t *bootstrap(spd_auth_exchange *x, size_t *len_p) {
  spd_auth_key k;
  spk_err err;
  ck_assert_msg(spd_auth_key_load(nodes.key, &k, &err) == SPK_OK, "%s",
                err.msg);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)spt_node_port(&nodes, 0)),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  memset(x, 0, sizeof(*x));
  x->initiator = 1, x->responder = 0;
  uint8_t hello[SPD_AUTH_HELLO_LEN], reply[SPD_AUTH_REPLY_LEN],
      finish[SPD_AUTH_FINISH_LEN], head[4];
  ck_assert_int_eq(spd_auth_nonce(x->nonce_i, &err), SPK_OK);
  spd_auth_hello_write(hello, x);
  ck_assert_int_eq(spt_raw_send_bytes(fd, hello, sizeof(hello)), 0);
  read_all(fd, reply, sizeof(reply));
  ck_assert_int_eq(spd_auth_reply_read(reply, &k, x, &err), SPK_OK);
  ck_assert_int_eq(spd_auth_finish_write(finish, &k, x, &err), SPK_OK);
  ck_assert_int_eq(spt_raw_send_bytes(fd, finish, sizeof(finish)), 0);
  read_all(fd, head, 4);
  size_t len = spd_auth_get32(head);
  uint8_t *addr = malloc(len + SPD_AUTH_MSG_MAC);
  ck_assert_ptr_nonnull(addr);
  read_all(fd, addr, len + SPD_AUTH_MSG_MAC);
  ck_assert(spd_auth_msg_ok(x->session, head, 4, addr, len, addr + len));
  close(fd);
  *len_p = len;
  return addr;
}

static ucp_context_h ucp;
static ucp_worker_h worker;

static void wait_req(void *req) {
  ck_assert_msg(!UCS_PTR_IS_ERR(req), "%s",
                ucs_status_string(UCS_PTR_STATUS(req)));
  if (req == NULL)
    return;
  while (ucp_request_check_status(req) == UCS_INPROGRESS)
    ucp_worker_progress(worker);
  ucp_request_free(req);
}

/* A heartbeat under the header hdr (its MAC set with the session unless
 * mac_bad). */
static void send_am(ucp_ep_h ep, spd_am_header hdr, const uint8_t *session,
                    int mac_bad) {
  Spcoll__Peer__Msg m = SPCOLL__PEER__MSG__INIT;
  Spcoll__Peer__Heartbeat hb = SPCOLL__PEER__HEARTBEAT__INIT;
  m.body_case = SPCOLL__PEER__MSG__BODY_HEARTBEAT;
  m.heartbeat = &hb;
  uint8_t body[32];
  size_t len = spcoll__peer__msg__pack(&m, body);
  ck_assert_int_eq(spd_auth_msg_mac(session, &hdr,
                                    offsetof(spd_am_header, mac), body, len,
                                    hdr.mac),
                   SPK_OK);
  hdr.mac[0] ^= (uint8_t)mac_bad;
  ucp_request_param_t prm = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_AM_SEND_FLAG_EAGER};
  wait_req(ucp_am_send_nbx(ep, SPD_PEER_AM_ID, &hdr, sizeof(hdr), body, len,
                           &prm));
}

static void ucx_start(void) {
  ucp_config_t *cfg;
  ck_assert_int_eq(ucp_config_read(NULL, NULL, &cfg), UCS_OK);
  ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                    .features = UCP_FEATURE_TAG | UCP_FEATURE_AM};
  ck_assert_int_eq(ucp_init(&p, cfg, &ucp), UCS_OK);
  ucp_config_release(cfg);
  ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                            .thread_mode = UCS_THREAD_MODE_SINGLE};
  ck_assert_int_eq(ucp_worker_create(ucp, &wp, &worker), UCS_OK);
}

static void wait_stat(int i, const char *name, long long at_least) {
  for (int t = 0; t < 3000 && spt_daemon_stat(&nodes.d[i], name) < at_least;
       t++) {
    if (worker != NULL)
      ucp_worker_progress(worker);
    usleep(10000);
  }
  ck_assert_int_ge(spt_daemon_stat(&nodes.d[i], name), at_least);
}

START_TEST(crafted_headers_refused) {
  ck_assert_int_eq(spt_nodes_start(&nodes, 2, NULL), 0);
  wait_stat(0, "peer_nodes_up", 1);
  ucx_start();
  spd_auth_exchange x;
  size_t len;
  uint8_t *addr = bootstrap(&x, &len);
  ucp_ep_h ep;
  ucp_ep_params_t ep_p = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
                          .address = (ucp_address_t *)addr};
  ck_assert_int_eq(ucp_ep_create(worker, &ep_p, &ep), UCS_OK);
  long long before = spt_daemon_stat(&nodes.d[0], "peer_unauthenticated");
  static const uint32_t bad[] = {0x80000000u, 0xffffffffu, 2, 64, 0};
  uint64_t seq = 1;
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    send_am(ep, (spd_am_header){.node = bad[i], .seq = seq++}, x.session, 0);
  send_am(ep, (spd_am_header){.node = 1, .seq = seq++}, x.session, 1);
  send_am(ep, (spd_am_header){.node = 1, .seq = seq}, x.session, 0);
  send_am(ep, (spd_am_header){.node = 1, .seq = seq}, x.session, 0);
  /* Five foreign nodes, a wrong MAC, a replay: seven refused (the good
   * one may be refused too, if node 1's own bootstrap came back first). */
  wait_stat(0, "peer_unauthenticated", before + 7);
  ucp_request_param_t cp = {.op_attr_mask = 0};
  wait_req(ucp_ep_close_nbx(ep, &cp));
  ucp_worker_destroy(worker);
  worker = NULL;
  ucp_cleanup(ucp);
  free(addr);
  /* Node 1 comes back (the test displaced its session) and they serve. */
  wait_stat(0, "peer_nodes_up", 1);
  wait_stat(1, "peer_nodes_up", 1);
  ck_assert_int_eq(spt_nodes_stop(&nodes), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("peer_ucx");
  TCase *tc = tcase_create("peer_ucx");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, crafted_headers_refused);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
