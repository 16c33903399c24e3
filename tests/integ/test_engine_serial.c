/* The serial engine (daemon/engine/engine_serial.c), chosen by config
 * (--mover serial): the ops of a daemon so configured run on it and not
 * on the host mover, and give the same results. The op suites also run
 * whole against such a daemon (tests/run.sh: SPT_MOVER=serial). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "client_internal.h"
#include "harness.h"

static spt_daemon daemon_;

enum { WORLD = 4, ROWS = 3, ITERS = 5 };


/* All-gather along dim 0, checked against the reference, ITERS times. */
static int gather_rank(int rank, int world, void *arg) {
  (void)arg;
  spc_client *c = spt_connect(daemon_.socket);
  spc_group *g;
  if (c == NULL || spc_group_join(c, "serial", world, rank, &g) < 0)
    return 1;
  int64_t ishape[2] = {ROWS, 5}, oshape[2] = {ROWS * WORLD, 5};
  int64_t sizes[WORLD] = {ROWS, ROWS, ROWS, ROWS};
  size_t ib = ROWS * 5 * 4, ob = ROWS * WORLD * 5 * 4;
  spc_buffer *buf;
  spc_tensor in, out;
  int rc = spc_buffer_alloc(c, ib + ob + 64, &buf);
  if (rc == 0)
    rc = spc_tensor_init(&in, buf, 0, SPC_FLOAT32, 2, ishape);
  if (rc == 0)
    rc = spc_tensor_init(&out, buf, 64, SPC_FLOAT32, 2, oshape);
  if (rc == 0)
    spt_fill(spc_tensor_data(&in), SPC_FLOAT32, ROWS * 5, 7, rank);
  for (int it = 0; it < ITERS && rc == 0; it++) {
    memset(spc_tensor_data(&out), 0xEE, ob);
    rc = spc_all_gather(g, &in, &out, 0, NULL);
    if (rc == 0)
      rc = spt_check_gather(spc_tensor_data(&out), SPC_FLOAT32, 2, oshape, 0,
                            sizes, world, 7, rank);
  }
  if (rc != 0)
    fprintf(stderr, "rank %d: %s\n", rank, spc_last_error(c));
  spc_buffer_free(buf);
  spc_group_leave(g);
  spc_disconnect(c);
  return rc != 0;
}

START_TEST(ops_run_on_the_configured_engine) {
  /* The fast path would run these small ops past every engine. */
  const char *const extra[] = {"--mover", "serial", "--fast-bytes", "0",
                               NULL};
  ck_assert_int_eq(spt_daemon_start(&daemon_, extra), 0);
  int failed = spt_run_ranks(WORLD, gather_rank, NULL, 60);
  long long serial = spt_daemon_stat(&daemon_, "mover_serial_ops");
  long long host = spt_daemon_stat(&daemon_, "mover_host_ops");
  if (failed)
    spt_daemon_dump_log(&daemon_);
  ck_assert_int_eq(spt_daemon_stop(&daemon_), 0);
  ck_assert_int_eq(failed, 0);
  ck_assert_int_eq(serial, ITERS);
  ck_assert_int_eq(host, 0);
}
END_TEST

START_TEST(unknown_engine_is_refused_at_start) {
  const char *const extra[] = {"--mover", "warp-drive", NULL};
  ck_assert_int_ne(spt_daemon_start(&daemon_, extra), 0);
}
END_TEST

/* The fast row runs no daemon work (its ranks run their ops): not a
 * mover. */
START_TEST(fast_row_is_no_mover) {
  const char *const extra[] = {"--mover", "fast", NULL};
  ck_assert_int_ne(spt_daemon_start(&daemon_, extra), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("engine_serial");
  TCase *tc = tcase_create("serial");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, ops_run_on_the_configured_engine);
  tcase_add_test(tc, unknown_engine_is_refused_at_start);
  tcase_add_test(tc, fast_row_is_no_mover);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
