/* The daemon's own limits and lifecycle, each test with a daemon of its
 * own: shutdown with work pending or a client that does not read, the
 * per-client limits, the frame-rate limit, the join deadline. */
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_run.h"
#include "client_internal.h"
#include "harness.h"

START_TEST(shutdown_fails_pending) {
  spt_daemon d;
  ck_assert_int_eq(spt_daemon_start(&d, NULL), 0);
  int fd = spt_raw_join_pending(d.socket, "down", 1); /* never issues the op */
  ck_assert_int_ge(fd, 0);
  spc_client *c = spt_connect(d.socket);
  spc_group *g;
  ck_assert_int_eq(spc_group_join(c, "down", 2, 0, &g), 0);
  spc_buffer *b;
  spc_tensor in, out;
  int64_t s1[1] = {4}, s2[1] = {8};
  ck_assert_int_eq(spc_buffer_alloc(c, 64, &b), 0);
  spc_tensor_init(&in, b, 0, SPC_INT32, 1, s1);
  spc_tensor_init(&out, b, 16, SPC_INT32, 1, s2);
  spc_request *req;
  ck_assert_int_eq(spc_all_gather_async(g, &in, &out, 0, NULL, &req), 0);
  int done = 0;
  ck_assert_int_eq(spc_test(&req, &done), 0);
  ck_assert_int_eq(done, 0);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
  ck_assert_int_eq(spc_wait(&req), SPC_ESHUTDOWN);
  ck_assert_msg(strstr(spc_last_error(c), "daemon shutting down"), "%s",
                spc_last_error(c));
  ck_assert_int_eq(access(d.socket, F_OK), -1); /* socket removed */
  spc_disconnect(c);
  close(fd);
}
END_TEST

/* A client that asks and never reads cannot hold the daemon's exit up. */
START_TEST(shutdown_with_client_not_reading) {
  spt_daemon d;
  ck_assert_int_eq(spt_daemon_start(&d, NULL), 0);
  int fd = spt_raw_connect(d.socket);
  ck_assert_int_eq(spt_raw_hello(fd), 0);
  Spcoll__StatsRequest sr = SPCOLL__STATS_REQUEST__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  f.body_case = SPCOLL__FRAME__BODY_STATS_REQUEST;
  f.stats_request = &sr;
  for (int i = 0; i < 3000; i++) { /* ~3 MB of replies, never read */
    f.id = (uint64_t)i + 2;
    ck_assert_int_eq(spt_raw_send(fd, &f), 0);
  }
  usleep(200000);
  ck_assert_int_eq(spt_daemon_stop(&d), 0); /* exits 0, not killed */
  close(fd);
}
END_TEST

/* Per-client limits and the world cap give clear errors, and the client
 * goes on within them. */
START_TEST(client_limits) {
  spt_daemon d;
  const char *extra[] = {"--client-max-buffers", "2", "--client-max-bytes",
                         "4096", "--client-max-groups", "2",
                         "--client-max-pending", "2", "--max-world", "4",
                         NULL};
  ck_assert_int_eq(spt_daemon_start(&d, extra), 0);
  spc_client *c = spt_connect(d.socket);
  spc_buffer *b1, *b2, *b3;
  ck_assert_int_eq(spc_buffer_alloc(c, 8192, &b1), SPC_ENOMEM);
  ck_assert_msg(strstr(spc_last_error(c), "client_max_bytes"), "%s",
                spc_last_error(c));
  ck_assert_int_eq(spc_buffer_alloc(c, 1024, &b1), 0);
  ck_assert_int_eq(spc_buffer_alloc(c, 1024, &b2), 0);
  ck_assert_int_eq(spc_buffer_alloc(c, 1024, &b3), SPC_ENOMEM);
  ck_assert_msg(strstr(spc_last_error(c), "client_max_buffers"), "%s",
                spc_last_error(c));
  spc_group *g, *solo;
  ck_assert_int_eq(spc_group_join(c, "wide", 5, 0, &g), SPC_EINVAL);
  ck_assert_msg(strstr(spc_last_error(c), "max_world 4"), "%s",
                spc_last_error(c));
  int fd = spt_raw_join_pending(d.socket, "limits", 1); /* never issues ops */
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(spc_group_join(c, "limits", 2, 0, &g), 0);
  ck_assert_int_eq(spc_group_join(c, "solo", 1, 0, &solo), 0);
  ck_assert_int_eq(spc_group_join(c, "third", 1, 0, &solo), SPC_ENOMEM);
  ck_assert_msg(strstr(spc_last_error(c), "client_max_groups"), "%s",
                spc_last_error(c));
  spc_tensor in, out;
  int64_t s1[1] = {4}, s2[1] = {8};
  spc_tensor_init(&in, b1, 0, SPC_FLOAT32, 1, s1);
  spc_tensor_init(&out, b2, 0, SPC_FLOAT32, 1, s2);
  spc_request *r[3];
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(spc_all_gather_async(g, &in, &out, 0, NULL, &r[i]), 0);
  ck_assert_int_eq(spc_wait(&r[2]), SPC_ENOMEM); /* the third is refused */
  ck_assert_msg(strstr(spc_last_error(c), "client_max_pending"), "%s",
                spc_last_error(c));
  close(fd); /* rank 1 goes: the two pending ops fail, naming it */
  ck_assert_int_eq(spc_wait(&r[0]), SPC_EPEERLOST);
  ck_assert_int_eq(spc_wait(&r[1]), SPC_EPEERLOST);
  spc_disconnect(c);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

/* A client over the frame rate is disconnected with an error naming the
 * limit; others are not affected. */
START_TEST(frame_rate_limit) {
  spt_daemon d;
  const char *extra[] = {"--client-max-frame-rate", "50", "--socket-group",
                         "root", "--stats-socket-group", "nogroup", NULL};
  ck_assert_int_eq(spt_daemon_start(&d, extra), 0);
  int fd = spt_raw_connect(d.socket);
  ck_assert_int_eq(spt_raw_hello(fd), 0);
  Spcoll__StatsRequest sr = SPCOLL__STATS_REQUEST__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  f.body_case = SPCOLL__FRAME__BODY_STATS_REQUEST, f.stats_request = &sr;
  for (int i = 0; i < 200; i++) { /* far over 50/s */
    f.id = (uint64_t)i + 2;
    spt_raw_send(fd, &f);
  }
  int limited = 0;
  for (int i = 0; i < 300 && !limited; i++) {
    Spcoll__Frame *r = spt_raw_recv(fd, 5);
    if (r == NULL)
      break;
    limited = r->body_case == SPCOLL__FRAME__BODY_ERROR &&
              strstr(r->error->message, "client_max_frame_rate") != NULL;
    spcoll__frame__free_unpacked(r, NULL);
  }
  ck_assert(limited);
  ck_assert(spt_raw_closed(fd, 10));
  close(fd);
  spc_client *c = spt_connect(d.socket); /* a new client is fine */
  ck_assert_ptr_nonnull(c);
  spc_disconnect(c);
  char stats[160];
  struct stat st;
  snprintf(stats, sizeof(stats), "%s/spcolld.stats.sock", d.dir);
  ck_assert_int_eq(stat(stats, &st), 0);
  ck_assert_int_ne(st.st_gid, 0); /* nogroup, not the socket_group root */
  ck_assert_int_eq(stat(d.socket, &st), 0);
  ck_assert_int_eq(st.st_gid, 0);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

/* A group that never completes fails its joins at the deadline, naming
 * the missing rank, and the name can be used again. */
START_TEST(join_timeout) {
  spt_daemon d;
  const char *extra[] = {"--join-timeout", "1", NULL};
  ck_assert_int_eq(spt_daemon_start(&d, extra), 0);
  spc_client *c = spt_connect(d.socket);
  spc_group *g;
  ck_assert_int_eq(spc_group_join(c, "lonely", 2, 0, &g), SPC_ETIMEDOUT);
  ck_assert_msg(strstr(spc_last_error(c), "rank(s) 1 never joined"), "%s",
                spc_last_error(c));
  ck_assert_int_eq(spc_group_join(c, "lonely", 1, 0, &g), 0);
  spc_disconnect(c);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("limits");
  TCase *tc = tcase_create("limits");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, shutdown_fails_pending);
  tcase_add_test(tc, shutdown_with_client_not_reading);
  tcase_add_test(tc, client_limits);
  tcase_add_test(tc, frame_rate_limit);
  tcase_add_test(tc, join_timeout);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
