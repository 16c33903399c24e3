/* The peers' handshake and node key (daemon/peer/peer_auth.c): two
 * holders of one key settle one session (the same key, the same tag
 * salt); a responder or initiator with another key fails the other's
 * check; a reply naming other nodes, a proof reflected back, a changed
 * nonce and a bad magic or version are refused; a key file that others
 * may read, that is too short or a symbolic link is refused by name. */
#include <check.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_run.h"
#include "peer_auth.h"

static spd_auth_key key_a, key_b;

static void setup(void) {
  key_a.len = key_b.len = 32;
  memset(key_a.key, 0xa5, 32);
  memset(key_b.key, 0xb6, 32);
}

/* Node 1 dials node 0 with keys ki (initiator) and kr (responder): the
 * status of the reply check at the initiator and, when it passed, of
 * the finish check at the responder. */
static int handshake(const spd_auth_key *ki, const spd_auth_key *kr,
                     spd_auth_exchange *xi, spd_auth_exchange *xr,
                     int *finish_rc) {
  spk_err err;
  uint8_t hello[SPD_AUTH_HELLO_LEN], reply[SPD_AUTH_REPLY_LEN],
      finish[SPD_AUTH_FINISH_LEN];
  memset(xi, 0, sizeof(*xi));
  memset(xr, 0, sizeof(*xr));
  xi->initiator = 1, xi->responder = 0;
  ck_assert_int_eq(spd_auth_nonce(xi->nonce_i, &err), SPK_OK);
  spd_auth_hello_write(hello, xi);
  ck_assert_int_eq(spd_auth_hello_read(hello, 0, 3, xr, &err), SPK_OK);
  ck_assert_int_eq(spd_auth_nonce(xr->nonce_r, &err), SPK_OK);
  ck_assert_int_eq(spd_auth_reply_write(reply, kr, xr, &err), SPK_OK);
  int rc = spd_auth_reply_read(reply, ki, xi, &err);
  *finish_rc = 1;
  if (rc < 0)
    return rc;
  ck_assert_int_eq(spd_auth_finish_write(finish, ki, xi, &err), SPK_OK);
  *finish_rc = spd_auth_finish_read(finish, kr, xr, &err);
  return rc;
}

START_TEST(one_key_one_session) {
  spd_auth_exchange xi, xr;
  int frc;
  ck_assert_int_eq(handshake(&key_a, &key_a, &xi, &xr, &frc), SPK_OK);
  ck_assert_int_eq(frc, SPK_OK);
  ck_assert_mem_eq(xi.session, xr.session, 32);
  uint64_t si, sr;
  ck_assert_int_eq(spd_auth_tag_salt(xi.session, &si), SPK_OK);
  ck_assert_int_eq(spd_auth_tag_salt(xr.session, &sr), SPK_OK);
  ck_assert_uint_eq(si, sr);
  /* Another exchange: another session. */
  spd_auth_exchange yi, yr;
  ck_assert_int_eq(handshake(&key_a, &key_a, &yi, &yr, &frc), SPK_OK);
  ck_assert_mem_ne(xi.session, yi.session, 32);
}
END_TEST

START_TEST(other_key_refused_both_ways) {
  spd_auth_exchange xi, xr;
  int frc;
  /* A responder with another key: the initiator refuses its reply. */
  ck_assert_int_eq(handshake(&key_a, &key_b, &xi, &xr, &frc), SPK_EPERM);
  /* An initiator with another key cannot check the reply either; were
   * it to answer anyway, its finish fails at the responder. */
  spk_err err;
  uint8_t finish[SPD_AUTH_FINISH_LEN];
  ck_assert_int_eq(spd_auth_finish_write(finish, &key_b, &xr, &err), SPK_OK);
  ck_assert_int_eq(spd_auth_finish_read(finish, &key_a, &xr, &err),
                   SPK_EPERM);
  ck_assert_msg(strstr(err.msg, "initiator's proof of the node key is "
                                "wrong"), "%s", err.msg);
}
END_TEST

START_TEST(tampered_frames_refused) {
  spk_err err;
  spd_auth_exchange xi = {.initiator = 1, .responder = 0}, xr = {0}, xr2;
  uint8_t hello[SPD_AUTH_HELLO_LEN], reply[SPD_AUTH_REPLY_LEN];
  spd_auth_hello_write(hello, &xi);
  /* Wrong target, a sender outside the list or itself. */
  ck_assert_int_eq(spd_auth_hello_read(hello, 2, 3, &xr, &err),
                   SPK_EPROTOCOL);
  ck_assert_int_eq(spd_auth_hello_read(hello, 0, 1, &xr, &err),
                   SPK_EPROTOCOL);
  hello[0] ^= 1;
  ck_assert_int_eq(spd_auth_hello_read(hello, 0, 3, &xr, &err),
                   SPK_EPROTOCOL);
  hello[0] ^= 1;
  hello[7] ^= 2; /* version */
  ck_assert_int_eq(spd_auth_hello_read(hello, 0, 3, &xr, &err),
                   SPK_EVERSION);
  hello[7] ^= 2;
  ck_assert_int_eq(spd_auth_hello_read(hello, 0, 3, &xr, &err), SPK_OK);
  ck_assert_int_eq(spd_auth_reply_write(reply, &key_a, &xr, &err), SPK_OK);
  /* A changed nonce_r breaks the proof. */
  xr2 = xi;
  reply[20] ^= 1;
  ck_assert_int_eq(spd_auth_reply_read(reply, &key_a, &xr2, &err),
                   SPK_EPERM);
  reply[20] ^= 1;
  /* The reply as seen by a dialer of another pair. */
  xr2 = xi;
  xr2.responder = 2;
  ck_assert_int_eq(spd_auth_reply_read(reply, &key_a, &xr2, &err),
                   SPK_EPROTOCOL);
  /* The responder's proof reflected back as a finish. */
  xr2 = xi;
  ck_assert_int_eq(spd_auth_reply_read(reply, &key_a, &xr2, &err), SPK_OK);
  ck_assert_int_eq(spd_auth_finish_read(reply + 16 + SPD_AUTH_NONCE, &key_a,
                                        &xr, &err),
                   SPK_EPERM);
}
END_TEST

START_TEST(message_mac) {
  uint8_t s[32], mac[SPD_AUTH_MSG_MAC];
  memset(s, 7, sizeof(s));
  uint8_t head[8] = {1, 2, 3, 4, 5, 6, 7, 8}, body[100] = {0};
  ck_assert_int_eq(spd_auth_msg_mac(s, head, 8, body, 100, mac), SPK_OK);
  ck_assert(spd_auth_msg_ok(s, head, 8, body, 100, mac));
  body[99] = 1;
  ck_assert(!spd_auth_msg_ok(s, head, 8, body, 100, mac));
  body[99] = 0;
  head[0] = 0;
  ck_assert(!spd_auth_msg_ok(s, head, 8, body, 100, mac));
  head[0] = 1;
  /* It is HMAC-SHA256 of header and body, truncated. */
  uint8_t both[108], ref[32];
  unsigned rlen = sizeof(ref);
  memcpy(both, head, 8);
  memcpy(both + 8, body, 100);
  ck_assert_ptr_nonnull(HMAC(EVP_sha256(), s, 32, both, sizeof(both), ref,
                             &rlen));
  ck_assert_mem_eq(mac, ref, SPD_AUTH_MSG_MAC);
  /* The keyed MAC a session keeps gives the same, message after
   * message. */
  spd_auth_mac *m = NULL;
  uint8_t mac2[SPD_AUTH_MSG_MAC];
  ck_assert_int_eq(spd_auth_mac_open(s, &m), SPK_OK);
  for (int k = 0; k < 3; k++) {
    ck_assert_int_eq(spd_auth_mac_sign(m, head, 8, body, 100, mac2), SPK_OK);
    ck_assert_mem_eq(mac, mac2, SPD_AUTH_MSG_MAC);
    ck_assert(spd_auth_mac_check(m, head, 8, body, 100, mac));
  }
  body[0] = 1;
  ck_assert(!spd_auth_mac_check(m, head, 8, body, 100, mac));
  body[0] = 0;
  spd_auth_mac_close(m);
  /* A long body. */
  uint8_t *big = calloc(1, 1 << 20);
  ck_assert_ptr_nonnull(big);
  ck_assert_int_eq(spd_auth_msg_mac(s, head, 8, big, 1 << 20, mac), SPK_OK);
  ck_assert(spd_auth_msg_ok(s, head, 8, big, 1 << 20, mac));
  big[12345] = 9;
  ck_assert(!spd_auth_msg_ok(s, head, 8, big, 1 << 20, mac));
  free(big);
}
END_TEST

static void key_file(const char *path, size_t len, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ck_assert_int_ge(fd, 0);
  uint8_t b[64];
  memset(b, 0x33, sizeof(b));
  ck_assert_int_eq(write(fd, b, len), (ssize_t)len);
  ck_assert_int_eq(fchmod(fd, mode), 0);
  close(fd);
}

static void key_bad(const char *path, const char *why) {
  spd_auth_key k;
  spk_err err;
  ck_assert_int_lt(spd_auth_key_load(path, &k, &err), 0);
  ck_assert_msg(strstr(err.msg, why) != NULL, "%s", err.msg);
}

START_TEST(key_file_rules) {
  char dir[] = "/tmp/spt-keys.XXXXXX", path[64], link[64];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/key", dir);
  snprintf(link, sizeof(link), "%s/link", dir);
  spd_auth_key k;
  spk_err err;
  key_file(path, 32, 0600);
  ck_assert_int_eq(spd_auth_key_load(path, &k, &err), SPK_OK);
  ck_assert_uint_eq(k.len, 32);
  ck_assert_int_eq(k.key[31], 0x33);
  key_file(path, 32, 0640);
  key_bad(path, "has mode 0640: others may read it");
  key_file(path, 31, 0400);
  key_bad(path, "has 31 bytes, not 32..4096");
  key_file(path, 32, 0600);
  ck_assert_int_eq(symlink(path, link), 0);
  key_bad(link, "open of peer key");
  key_bad("/nonexistent/key", "No such file");
  unlink(link);
  unlink(path);
  rmdir(dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("daemon_peer_auth");
  TCase *tc = tcase_create("peer_auth");
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_test(tc, one_key_one_session);
  tcase_add_test(tc, other_key_refused_both_ways);
  tcase_add_test(tc, tampered_frames_refused);
  tcase_add_test(tc, message_mac);
  tcase_add_test(tc, key_file_rules);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
