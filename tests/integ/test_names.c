/* Group names (issue 13): only [A-Za-z0-9._:/@-], 1..127 bytes, refused
 * otherwise by the client before it sends and by the daemon for a client
 * that does not check (raw frames). A NUL inside the name, which protobuf-c
 * used to cut silently ("job\0evil" joined "job"), is refused as a frame
 * that does not re-encode to its own bytes. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "harness.h"

static spt_daemon daemon_;

static void setup(void) {
  ck_assert_int_eq(spt_daemon_start(&daemon_, NULL), 0);
}

static void teardown(void) {
  ck_assert_int_eq(spt_daemon_stop(&daemon_), 0);
}

/* Send a raw join of `len` bytes of name; return the reply (NULL: none). */
static Spcoll__Frame *raw_join(int fd, const char *name, size_t len) {
  Spcoll__GroupJoin j = SPCOLL__GROUP_JOIN__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  /* packed with a placeholder of the same length, then the real bytes
   * written over it: protobuf-c cannot pack a string holding a NUL */
  char *fill = malloc(len + 1);
  ck_assert_ptr_nonnull(fill);
  memset(fill, 'x', len);
  fill[len] = '\0';
  j.name = fill;
  j.world_size = 1;
  f.id = 7;
  f.body_case = SPCOLL__FRAME__BODY_GROUP_JOIN;
  f.group_join = &j;
  uint8_t *buf;
  size_t n;
  spk_err err;
  ck_assert_int_eq(spf_encode(&f, &buf, &n, &err), 0);
  uint8_t *at = memmem(buf, n, fill, len);
  ck_assert_ptr_nonnull(at);
  memcpy(at, name, len);
  ck_assert_int_eq(spt_raw_send_bytes(fd, buf, n), 0);
  free(buf);
  free(fill);
  return spt_raw_recv(fd, 10);
}

static void expect_raw(const char *name, size_t len, int status,
                       const char *needle) {
  int fd = spt_raw_connect(daemon_.socket);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(spt_raw_hello(fd), 0);
  Spcoll__Frame *r = raw_join(fd, name, len);
  ck_assert_ptr_nonnull(r);
  if (status == 0) {
    ck_assert_int_eq(r->body_case, SPCOLL__FRAME__BODY_GROUP_JOINED);
  } else {
    ck_assert_msg(r->body_case == SPCOLL__FRAME__BODY_ERROR,
                  "join of %zu bytes answered with %s", len,
                  spf_body_name(r->body_case));
    ck_assert_int_eq(-(int)r->error->status, status);
    ck_assert_msg(strstr(r->error->message, needle), "'%s' lacks '%s'",
                  r->error->message, needle);
  }
  spcoll__frame__free_unpacked(r, NULL);
  close(fd);
}

START_TEST(daemon_refuses_bad_bytes) {
  expect_raw("Job.4-2_x", 9, 0, NULL);
  expect_raw("job#1", 5, SPC_EINVAL, "group name has byte 0x23 at offset 3");
  expect_raw("a b", 3, SPC_EINVAL, "byte 0x20 at offset 1");
  expect_raw("caf\xc3\xa9", 5, SPC_EINVAL, "byte 0xc3 at offset 3");
  expect_raw("x\ny", 3, SPC_EINVAL, "byte 0x0a");
  expect_raw("\"q\"", 3, SPC_EINVAL, "names use only A-Za-z0-9");
  char big[200];
  memset(big, 'n', sizeof(big));
  expect_raw(big, 128, SPC_EINVAL, "1..127 bytes, got 128");
  expect_raw(big, 127, 0, NULL);
}
END_TEST

/* The victim's group is "job"; "job\0evil" must not join it. */
START_TEST(daemon_refuses_nul) {
  expect_raw("job\0evil", 8, SPC_EPROTOCOL, "holds a NUL byte");
}
END_TEST

START_TEST(client_refuses_bad_bytes) {
  spc_client *c = spt_connect(daemon_.socket);
  spc_group *g;
  ck_assert_int_eq(spc_group_join(c, "job 1", 1, 0, &g), SPC_EINVAL);
  ck_assert_msg(strstr(spc_last_error(c), "byte 0x20 at offset 3"), "%s",
                spc_last_error(c));
  ck_assert_int_eq(spc_group_join(c, "", 1, 0, &g), SPC_EINVAL);
  ck_assert_msg(strstr(spc_last_error(c), "1..127 bytes, got 0"), "%s",
                spc_last_error(c));
  ck_assert_int_eq(spc_group_join(c, "ok.name-1", 1, 0, &g), 0);
  ck_assert_int_eq(spc_group_leave(g), 0);
  spc_disconnect(c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("names");
  TCase *tc = tcase_create("names");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, daemon_refuses_bad_bytes);
  tcase_add_test(tc, daemon_refuses_nul);
  tcase_add_test(tc, client_refuses_bad_bytes);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
