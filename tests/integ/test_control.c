/* Operator commands through spcollctl: abort fails a group's pending and
 * later ops on every rank; drain refuses new groups and ops, lets the op in
 * flight finish, then the daemon exits 0. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "client_internal.h"
#include "harness.h"

typedef struct {
  spc_client *c[2];
  spc_group *g[2];
  spc_buffer *b[2];
  spc_tensor in[2], out[2];
} pair;

/* Two clients in one group of two: one joins through the raw transport so
 * the other's blocking join can complete it. */
static void pair_open(pair *p, const char *socket, const char *name) {
  p->c[0] = spt_connect(socket);
  p->c[1] = spt_connect(socket);
  ck_assert(p->c[0] && p->c[1]);
  spc_request *req = spt_join_send(p->c[0], name, 2, 0);
  ck_assert_int_eq(spc_group_join(p->c[1], name, 2, 1, &p->g[1]), 0);
  ck_assert_ptr_nonnull(p->g[0] = spt_join_finish(p->c[0], req, 2, 0));
  int64_t s1[1] = {4}, s2[1] = {8};
  for (int r = 0; r < 2; r++) {
    ck_assert_int_eq(spc_buffer_alloc(p->c[r], 64, &p->b[r]), 0);
    spc_tensor_init(&p->in[r], p->b[r], 0, SPC_FLOAT32, 1, s1);
    spc_tensor_init(&p->out[r], p->b[r], 16, SPC_FLOAT32, 1, s2);
  }
}

START_TEST(abort_fails_pending_and_later_ops) {
  spt_daemon d;
  pair p;
  ck_assert_int_eq(spt_daemon_start(&d, NULL), 0);
  pair_open(&p, d.socket, "ab");
  spc_request *req;
  ck_assert_int_eq(spc_all_gather_async(p.g[0], &p.in[0], &p.out[0], 0, NULL,
                                        &req), 0);
  ck_assert_int_eq(spt_ctl(&d, "abort ab"), 0);
  ck_assert_int_eq(spc_wait(&req), SPC_EABORTED);
  ck_assert_msg(strstr(spc_last_error(p.c[0]), "aborted by operator"), "%s",
                spc_last_error(p.c[0]));
  ck_assert_int_eq(spc_all_gather(p.g[1], &p.in[1], &p.out[1], 0, NULL),
                   SPC_EABORTED);
  ck_assert_int_ne(spt_ctl(&d, "abort no-such-group 2>/dev/null"), 0);
  spc_disconnect(p.c[0]);
  spc_disconnect(p.c[1]);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

START_TEST(drain_finishes_in_flight_then_exits) {
  spt_daemon d;
  pair p;
  ck_assert_int_eq(spt_daemon_start(&d, NULL), 0);
  pair_open(&p, d.socket, "dr");
  spc_request *req;
  ck_assert_int_eq(spc_all_gather_async(p.g[0], &p.in[0], &p.out[0], 0, NULL,
                                        &req), 0);
  ck_assert_int_eq(spt_ctl(&d, "drain"), 0);
  spc_client *late = spt_connect(d.socket);
  spc_group *lg;
  ck_assert_int_eq(spc_group_join(late, "new", 1, 0, &lg), SPC_ESHUTDOWN);
  ck_assert_msg(strstr(spc_last_error(late), "no new groups"), "%s",
                spc_last_error(late));
  spc_disconnect(late);
  /* Rank 1 completes the op already in flight: allowed, and it is done. */
  ck_assert_int_eq(spc_all_gather(p.g[1], &p.in[1], &p.out[1], 0, NULL), 0);
  ck_assert_int_eq(spc_wait(&req), 0);
  int st = 0;
  pid_t w = 0;
  for (int i = 0; i < 500 && w != d.pid; i++) {
    w = waitpid(d.pid, &st, WNOHANG); /* it exits by itself once idle */
    if (w != d.pid)
      usleep(10000);
  }
  ck_assert_msg(w == d.pid, "the daemon did not exit after draining");
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  d.pid = 0;
  ck_assert_int_eq(access(d.socket, F_OK), -1);
  spc_disconnect(p.c[0]);
  spc_disconnect(p.c[1]);
  unlink(d.log);
  rmdir(d.dir);
}
END_TEST

int main(void) {
  Suite *s = suite_create("control");
  TCase *tc = tcase_create("control");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, abort_fails_pending_and_later_ops);
  tcase_add_test(tc, drain_finishes_in_flight_then_exits);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
