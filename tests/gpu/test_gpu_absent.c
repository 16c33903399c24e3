/* Device requests where the GPU path cannot serve them, which every
 * machine can check: a daemon that has no GPU (or not the buffer's GPU)
 * refuses a device registration with SPC_EUNSUPPORTED saying why, keeps
 * the connection, and host groups go on; stream events that come with host
 * tensors fail the op; a client without a loadable CUDA driver gets
 * SPC_EUNSUPPORTED from every device call. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "client_internal.h"
#include "gpu_testlib.h"

static spt_daemon daemon_;

static void setup(void) {
  ck_assert_int_eq(spt_daemon_start(&daemon_, NULL), 0);
}

static void teardown(void) {
  ck_assert_int_eq(spt_daemon_stop(&daemon_), 0);
}

/* A device registration naming an allocation no GPU of the daemon has. */
static int register_raw(spc_client *c, size_t hlen) {
  uint8_t handle[64], uuid[16];
  memset(handle, 0x5a, sizeof(handle));
  memset(uuid, 0xa5, sizeof(uuid));
  Spcoll__BufRegister reg = SPCOLL__BUF_REGISTER__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  reg.size = 4096;
  reg.ipc_handle.len = hlen;
  reg.ipc_handle.data = handle;
  reg.device_uuid.len = sizeof(uuid);
  reg.device_uuid.data = uuid;
  f.body_case = SPCOLL__FRAME__BODY_BUF_REGISTER;
  f.buf_register = &reg;
  return spc__call(c, &f, -1, NULL);
}

static int gather_rank(int rank, int world, void *arg) {
  (void)arg;
  spc_client *c = spt_connect(daemon_.socket);
  spc_group *g;
  spc_buffer *b;
  if (c == NULL)
    return 1;
  int rc = register_raw(c, 64);
  /* No CUDA in the daemon, no GPU at all, or not this (made-up) one:
   * unsupported every time. */
  const char *why = spc_last_error(c);
  if (rc != SPC_EUNSUPPORTED ||
      (!strstr(why, "no GPU") && !strstr(why, "is not one of the") &&
       !strstr(why, "built without CUDA"))) {
    fprintf(stderr, "rank %d: device registration gave %d: %s\n", rank, rc,
            spc_last_error(c));
    return 1;
  }
  rc = register_raw(c, 10);
  if (rc != SPC_EINVAL || !strstr(spc_last_error(c), "ipc_handle has 10")) {
    fprintf(stderr, "rank %d: short handle gave %d: %s\n", rank, rc,
            spc_last_error(c));
    return 1;
  }
  /* The same connection still serves host work. */
  int64_t in_shape[1] = {4}, out_shape[1] = {8};
  spc_tensor x, y;
  if (spc_group_join(c, "absent", world, rank, &g) < 0 ||
      spc_buffer_alloc(c, 4096, &b) < 0 ||
      spc_tensor_init(&x, b, 0, SPC_INT32, 1, in_shape) < 0 ||
      spc_tensor_init(&y, b, 1024, SPC_INT32, 1, out_shape) < 0)
    return 1;
  for (int i = 0; i < 4; i++)
    ((int32_t *)spc_tensor_data(&x))[i] = rank * 10 + i;
  rc = spc_all_gather(g, &x, &y, 0, NULL);
  int bad = rc != 0 || spc_buffer_device(b) != -1;
  for (int i = 0; !bad && i < 8; i++)
    bad = ((int32_t *)spc_tensor_data(&y))[i] != (i / 4) * 10 + i % 4;
  if (bad)
    fprintf(stderr, "rank %d: host all_gather after refused device work: "
            "%d %s\n", rank, rc, spc_last_error(c));
  spc_disconnect(c);
  return bad;
}

START_TEST(device_registration_refused_host_goes_on) {
  ck_assert_int_eq(spt_run_ranks(2, gather_rank, NULL, 30), 0);
}
END_TEST

/* An op request with stream events on host tensors: the op fails, with
 * the reason, and the group serves the next op. */
START_TEST(stream_events_on_host_tensors_fail_the_op) {
  spc_client *c = spt_connect(daemon_.socket);
  spc_group *g;
  spc_buffer *b;
  ck_assert_ptr_nonnull(c);
  ck_assert_int_eq(spc_group_join(c, "events", 1, 0, &g), 0);
  ck_assert_int_eq(spc_buffer_alloc(c, 4096, &b), 0);
  uint8_t ev[64] = {1};
  int64_t shape[1] = {16};
  Spcoll__Tensor t = SPCOLL__TENSOR__INIT;
  Spcoll__OpRequest rq = SPCOLL__OP_REQUEST__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  t.buffer_id = b->id;
  t.dtype = SPC_FLOAT32;
  t.n_shape = 1;
  t.shape = shape;
  rq.group_id = g->id;
  rq.op = 2; /* all_gather */
  rq.input = &t;
  rq.output = &t;
  int32_t dims[1] = {0};
  rq.n_dims = 1;
  rq.dims = dims;
  rq.ready_event.len = sizeof(ev);
  rq.ready_event.data = ev;
  f.body_case = SPCOLL__FRAME__BODY_OP;
  f.op = &rq;
  int rc = spc__call(c, &f, -1, NULL);
  ck_assert_msg(rc == SPC_EINVAL || rc == SPC_EUNSUPPORTED, "got %d: %s", rc,
                spc_last_error(c));
  ck_assert_ptr_nonnull(strstr(spc_last_error(c), "stream events"));
  spc_tensor x, y;
  int64_t half[1] = {8};
  ck_assert_int_eq(spc_tensor_init(&x, b, 0, SPC_FLOAT32, 1, half), 0);
  ck_assert_int_eq(spc_tensor_init(&y, b, 64, SPC_FLOAT32, 1, half), 0);
  ck_assert_int_eq(spc_all_gather(g, &x, &y, 0, NULL), 0);
  spc_disconnect(c);
}
END_TEST

/* No driver: every device call is SPC_EUNSUPPORTED, naming why. (Check
 * runs each test in its own process, so the driver is loaded afresh.) */
START_TEST(client_without_driver) {
  setenv("SPCOLL_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
  int n = 0;
  ck_assert_int_eq(spc_gpu_probe(&n), SPC_EUNSUPPORTED);
  ck_assert_ptr_nonnull(strstr(spc_last_error(NULL), "dlopen("));
  spc_client *c = spt_connect(daemon_.socket);
  spc_buffer *b;
  ck_assert_ptr_nonnull(c);
  static char mem[256];
  ck_assert_int_eq(spc_buffer_register_device(c, mem, sizeof(mem), &b),
                   SPC_EUNSUPPORTED);
  ck_assert_ptr_nonnull(strstr(spc_last_error(c), "no CUDA driver"));
  ck_assert_int_eq(spc_buffer_alloc_device(c, 0, 1024, &b), SPC_EUNSUPPORTED);
  ck_assert_int_eq(spc_buffer_register_device(NULL, mem, 1, &b), SPC_EINVAL);
  /* host ops on the stream forms ignore the stream */
  spc_group *g;
  spc_tensor x, y;
  int64_t shape[1] = {8};
  ck_assert_int_eq(spc_group_join(c, "nodriver", 1, 0, &g), 0);
  ck_assert_int_eq(spc_buffer_alloc(c, 4096, &b), 0);
  ck_assert_int_eq(spc_tensor_init(&x, b, 0, SPC_FLOAT32, 1, shape), 0);
  ck_assert_int_eq(spc_tensor_init(&y, b, 64, SPC_FLOAT32, 1, shape), 0);
  spc_op op = spc_op_all_gather(0, NULL);
  ck_assert_int_eq(spc_run_on_stream(g, &op, &x, &y, NULL), 0);
  spc_disconnect(c);
  unsetenv("SPCOLL_LIBCUDA");
}
END_TEST

int main(void) {
  Suite *s = suite_create("gpu_absent");
  TCase *tc = tcase_create("gpu_absent");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, device_registration_refused_host_goes_on);
  tcase_add_test(tc, stream_events_on_host_tensors_fail_the_op);
  tcase_add_test(tc, client_without_driver);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
