/* A neighbour on a shared node, as an attacker or a buggy job: a stopped
 * rank, a drain behind it, idle connections, a stalled frame, a client
 * that never reads, a flood of buffers, op requests with huge size lists,
 * a split past the group limit. Each is bounded: the victim's ops fail
 * with a clear error instead of hanging, a healthy pair of clients keeps
 * completing 8-byte ops during the attack, and the daemon's fds and maps
 * return to their baseline afterwards. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "client_internal.h"
#include "harness.h"

#define HEALTHY_OPS 20

/* One rank of the healthy pair: HEALTHY_OPS verified 8-byte all-gathers
 * in a group named after the daemon's pid, on new connections. */
static int healthy_rank(int rank, int world, void *arg) {
  const spt_daemon *d = arg;
  spc_client *c = spt_connect(d->socket);
  spc_group *g;
  spc_buffer *b;
  char name[64];
  snprintf(name, sizeof(name), "healthy%d", (int)getppid());
  if (c == NULL || spc_group_join(c, name, world, rank, &g) != 0 ||
      spc_buffer_alloc(c, 64, &b) != 0)
    return 1;
  int64_t s1[1] = {1}, s2[1] = {2}, sizes[2] = {1, 1};
  spc_tensor in, out;
  spc_tensor_init(&in, b, 0, SPC_FLOAT32, 1, s1);
  spc_tensor_init(&out, b, 8, SPC_FLOAT32, 1, s2);
  for (int i = 0; i < HEALTHY_OPS; i++) {
    spt_fill(spc_buffer_data(b), SPC_FLOAT32, 1, (uint64_t)i, rank);
    if (spc_all_gather(g, &in, &out, 0, NULL) != 0 ||
        spt_check_gather((char *)spc_buffer_data(b) + 8, SPC_FLOAT32, 1, s2,
                         0, sizes, 2, (uint64_t)i, rank) != 0)
      return 2;
  }
  spc_disconnect(c);
  return 0;
}

static void healthy_pair(const spt_daemon *d) {
  ck_assert_int_eq(spt_run_ranks(2, healthy_rank, (void *)d, 60), 0);
}

/* The daemon's fds back at base (closes are asynchronous: poll a while;
 * a descriptor the daemon had open at start may be gone by then). */
static void expect_fds(const spt_daemon *d, int base) {
  int n = -1;
  for (int i = 0; i < 100 && (n = spt_daemon_fds(d)) > base; i++)
    usleep(50000);
  ck_assert_int_le(n, base);
}

static void start(spt_daemon *d, const char *flag, const char *value) {
  const char *extra[] = {flag, value, NULL};
  ck_assert_int_eq(spt_daemon_start(d, extra), 0);
}

/* A rank stopped with SIGSTOP never issues its op: the others fail with
 * SPC_ETIMEDOUT naming it, and so does the stopped rank once it goes on. */
START_TEST(stopped_rank_times_out) {
  spt_daemon d;
  start(&d, "--op-timeout", "2");
  pid_t pid = fork();
  if (pid == 0) {
    spc_client *c = spt_connect(d.socket);
    spc_group *g;
    spc_buffer *b;
    if (c == NULL || spc_group_join(c, "stop", 2, 1, &g) != 0 ||
        spc_buffer_alloc(c, 64, &b) != 0)
      _exit(1);
    raise(SIGSTOP);
    int64_t s1[1] = {4}, s2[1] = {8};
    spc_tensor in, out;
    spc_tensor_init(&in, b, 0, SPC_INT32, 1, s1);
    spc_tensor_init(&out, b, 16, SPC_INT32, 1, s2);
    int rc = spc_all_gather(g, &in, &out, 0, NULL);
    _exit(rc == SPC_ETIMEDOUT && strstr(spc_last_error(c), "timed out") ? 0
                                                                      : 2);
  }
  spc_client *c = spt_connect(d.socket);
  spc_group *g;
  spc_buffer *b;
  ck_assert_int_eq(spc_group_join(c, "stop", 2, 0, &g), 0);
  ck_assert_int_eq(spc_buffer_alloc(c, 64, &b), 0);
  int st;
  ck_assert_int_eq(waitpid(pid, &st, WUNTRACED), pid);
  ck_assert(WIFSTOPPED(st));
  int64_t s1[1] = {4}, s2[1] = {8};
  spc_tensor in, out;
  spc_tensor_init(&in, b, 0, SPC_INT32, 1, s1);
  spc_tensor_init(&out, b, 16, SPC_INT32, 1, s2);
  ck_assert_int_eq(spc_all_gather(g, &in, &out, 0, NULL), SPC_ETIMEDOUT);
  ck_assert_msg(strstr(spc_last_error(c), "rank(s) 1 never issued it"), "%s",
                spc_last_error(c));
  healthy_pair(&d); /* the daemon serves others meanwhile */
  ck_assert_int_eq(kill(pid, SIGCONT), 0);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st));
  ck_assert_int_eq(WEXITSTATUS(st), 0);
  spc_disconnect(c);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

/* The client's own timeout (as torch's init_process_group(timeout=)):
 * shorter than the daemon's 30 minutes. */
START_TEST(client_op_timeout) {
  spt_daemon d;
  ck_assert_int_eq(spt_daemon_start(&d, NULL), 0);
  int fd = spt_raw_join_pending(d.socket, "short", 1); /* never issues ops */
  ck_assert_int_ge(fd, 0);
  spc_client *c = spt_connect(d.socket);
  spc_group *g;
  spc_buffer *b;
  ck_assert_int_eq(spc_set_op_timeout(c, -1), SPC_EINVAL);
  ck_assert_int_eq(spc_set_op_timeout(c, 1500), 0);
  ck_assert_int_eq(spc_group_join(c, "short", 2, 0, &g), 0);
  ck_assert_int_eq(spc_buffer_alloc(c, 64, &b), 0);
  int64_t s1[1] = {4}, s2[1] = {8};
  spc_tensor in, out;
  spc_tensor_init(&in, b, 0, SPC_INT32, 1, s1);
  spc_tensor_init(&out, b, 16, SPC_INT32, 1, s2);
  ck_assert_int_eq(spc_all_gather(g, &in, &out, 0, NULL), SPC_ETIMEDOUT);
  ck_assert_msg(strstr(spc_last_error(c), "rank(s) 1 never issued it"), "%s",
                spc_last_error(c));
  /* The group is broken: the next op fails at once with the same reason. */
  ck_assert_int_eq(spc_all_gather(g, &in, &out, 0, NULL), SPC_ETIMEDOUT);
  spc_disconnect(c);
  close(fd);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

/* A drain behind an op one rank never issues ends at its deadline. */
START_TEST(drain_deadline) {
  spt_daemon d;
  start(&d, "--drain-timeout", "1");
  int fd = spt_raw_join_pending(d.socket, "drained", 1);
  ck_assert_int_ge(fd, 0);
  spc_client *c = spt_connect(d.socket);
  spc_group *g;
  spc_buffer *b;
  ck_assert_int_eq(spc_group_join(c, "drained", 2, 0, &g), 0);
  ck_assert_int_eq(spc_buffer_alloc(c, 64, &b), 0);
  int64_t s1[1] = {4}, s2[1] = {8};
  spc_tensor in, out;
  spc_tensor_init(&in, b, 0, SPC_INT32, 1, s1);
  spc_tensor_init(&out, b, 16, SPC_INT32, 1, s2);
  spc_request *req;
  ck_assert_int_eq(spc_all_gather_async(g, &in, &out, 0, NULL, &req), 0);
  char stats[160];
  snprintf(stats, sizeof(stats), "%s/spcolld.stats.sock", d.dir);
  spc_client *op = spt_connect(stats);
  Spcoll__Control ctl = SPCOLL__CONTROL__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  ctl.command = "drain", ctl.group = "";
  f.body_case = SPCOLL__FRAME__BODY_CONTROL, f.control = &ctl;
  ck_assert_int_eq(spc__call(op, &f, -1, NULL), 0);
  ck_assert_int_eq(spc_wait(&req), SPC_ESHUTDOWN);
  int st = 0;
  ck_assert_int_eq(waitpid(d.pid, &st, 0), d.pid); /* exits by itself */
  ck_assert(WIFEXITED(st));
  ck_assert_int_eq(WEXITSTATUS(st), 0);
  spc_disconnect(op);
  spc_disconnect(c);
  close(fd);
  d.pid = 0;
  spt_daemon_stop(&d); /* removes its files */
}
END_TEST

/* Connections that never say hello, and one that stalls inside a frame,
 * are closed at their deadlines; nobody else notices. */
START_TEST(idle_and_stalled_connections) {
  spt_daemon d;
  const char *extra[] = {"--hello-timeout", "1", "--frame-timeout", "1",
                         NULL};
  ck_assert_int_eq(spt_daemon_start(&d, extra), 0);
  healthy_pair(&d); /* descriptors the daemon makes on first use exist */
  int base = spt_daemon_fds(&d);
  int fds[101];
  for (int i = 0; i < 100; i++)
    ck_assert_int_ge(fds[i] = spt_raw_connect(d.socket), 0);
  fds[100] = spt_raw_connect(d.socket);
  ck_assert_int_eq(spt_raw_hello(fds[100]), 0);
  uint8_t header[4] = {0x20, 0xa1, 0x07, 0x00}; /* 500000 bytes promised */
  ck_assert_int_eq(spt_raw_send_bytes(fds[100], header, 4), 0);
  ck_assert_int_eq(spt_raw_send_bytes(fds[100], "partial", 7), 0);
  healthy_pair(&d);
  for (int i = 0; i <= 100; i++) {
    ck_assert_msg(spt_raw_closed(fds[i], 10), "connection %d still open", i);
    close(fds[i]);
  }
  expect_fds(&d, base);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

/* A client that floods stats requests and never reads is dropped once its
 * queued replies pass client_max_queued, not after the daemon grew. */
START_TEST(never_reading_client_dropped) {
  spt_daemon d;
  start(&d, "--client-max-queued", "1048576");
  healthy_pair(&d);
  int base = spt_daemon_fds(&d);
  long rss = spt_daemon_rss_kb(&d);
  int fd = spt_raw_connect(d.socket);
  ck_assert_int_eq(spt_raw_hello(fd), 0);
  Spcoll__StatsRequest sr = SPCOLL__STATS_REQUEST__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  f.body_case = SPCOLL__FRAME__BODY_STATS_REQUEST, f.stats_request = &sr;
  sr.format = "json";
  int sent = 0;
  for (; sent < 20000; sent++) { /* far past 1 MiB of replies */
    f.id = (uint64_t)sent + 2;
    if (spt_raw_send(fd, &f) < 0)
      break; /* the daemon closed it already */
  }
  healthy_pair(&d);
  ck_assert(spt_raw_closed(fd, 10));
  close(fd);
  expect_fds(&d, base);
  /* A few MiB of allocator slack at most: the replies never piled up.
   * ASan keeps freed memory in quarantine: RSS says nothing there. */
  if (getenv("SPC_SANITIZED") == NULL)
    ck_assert_int_lt(spt_daemon_rss_kb(&d), rss + 16 * 1024);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

/* Many one-page buffers: past uid_max_buffers the registration is refused
 * naming the limit, and the daemon's mappings come back afterwards. */
START_TEST(buffer_flood) {
  spt_daemon d;
  start(&d, "--uid-max-buffers", "64");
  healthy_pair(&d); /* the allocator's own mappings exist from here on */
  int maps = spt_daemon_maps(&d);
  /* ASan's allocator maps regions of its own as it goes: some slack, far
   * below the 64 buffers a leak would leave. */
  if (getenv("SPC_SANITIZED") != NULL)
    maps += 16;
  spc_client *c = spt_connect(d.socket);
  spc_buffer *b;
  int ok = 0, rc = 0;
  for (int i = 0; i < 100 && (rc = spc_buffer_alloc(c, 4096, &b)) == 0; i++)
    ok++;
  ck_assert_int_eq(ok, 64);
  ck_assert_int_eq(rc, SPC_ENOMEM);
  ck_assert_msg(strstr(spc_last_error(c), "uid_max_buffers"), "%s",
                spc_last_error(c));
  spc_disconnect(c); /* its 64 buffers go with it */
  healthy_pair(&d);  /* which needs buffers of its own */
  int n = -1;
  for (int i = 0; i < 100 && (n = spt_daemon_maps(&d)) > maps; i++)
    usleep(50000);
  ck_assert_int_le(n, maps);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

/* Pending ops with huge size lists: each holds daemon memory until its
 * op ends, so past uid_max_request_bytes they are refused. */
static int raw_joined(const spt_daemon *d, int rank, uint64_t *group_p) {
  int fd = spt_raw_connect(d->socket);
  if (fd < 0 || spt_raw_hello(fd) < 0)
    return -1;
  Spcoll__GroupJoin j = SPCOLL__GROUP_JOIN__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  j.name = "sizes", j.world_size = 2, j.rank = rank;
  f.id = 5, f.body_case = SPCOLL__FRAME__BODY_GROUP_JOIN, f.group_join = &j;
  if (spt_raw_send(fd, &f) < 0)
    return -1;
  *group_p = 0;
  return fd;
}

static uint64_t raw_group_id(int fd) {
  Spcoll__Frame *r = spt_raw_recv(fd, 10);
  uint64_t id = r && r->body_case == SPCOLL__FRAME__BODY_GROUP_JOINED
                    ? r->group_joined->group_id
                    : 0;
  if (r)
    spcoll__frame__free_unpacked(r, NULL);
  return id;
}

START_TEST(huge_size_lists_bounded) {
  spt_daemon d;
  start(&d, "--uid-max-request-bytes", "2097152");
  uint64_t g0, g1;
  int a = raw_joined(&d, 0, &g0), b = raw_joined(&d, 1, &g1);
  ck_assert_int_ge(a, 0);
  ck_assert_int_ge(b, 0);
  g0 = raw_group_id(a), g1 = raw_group_id(b);
  ck_assert(g0 && g1);
  static int64_t sizes[60000];
  Spcoll__OpRequest op = SPCOLL__OP_REQUEST__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  op.group_id = g0, op.op = 1, op.n_sizes = 60000, op.sizes = sizes;
  f.body_case = SPCOLL__FRAME__BODY_OP, f.op = &op;
  for (int i = 0; i < 8; i++) { /* 480 KB each: the fifth passes 2 MiB */
    f.id = 100 + (uint64_t)i;
    ck_assert_int_eq(spt_raw_send(a, &f), 0);
  }
  int refused = 0;
  for (int i = 0; i < 8; i++) {
    Spcoll__Frame *r = spt_raw_recv(a, 2);
    if (r == NULL)
      break;
    refused += r->body_case == SPCOLL__FRAME__BODY_ERROR &&
               strstr(r->error->message, "uid_max_request_bytes") != NULL;
    spcoll__frame__free_unpacked(r, NULL);
  }
  ck_assert_int_ge(refused, 4);
  healthy_pair(&d);
  close(a);
  close(b);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

/* A group split makes members of new groups: it counts against
 * client_max_groups like a join, on every rank together. */
START_TEST(split_counts_against_group_limit) {
  spt_daemon d;
  start(&d, "--client-max-groups", "2");
  spc_client *c = spt_connect(d.socket);
  spc_group *p, *q, *sub;
  ck_assert_int_eq(spc_group_join(c, "p", 1, 0, &p), 0);
  ck_assert_int_eq(spc_group_join(c, "q", 1, 0, &q), 0);
  ck_assert_int_eq(spc_group_split(p, 0, 0, &sub), SPC_ENOMEM);
  ck_assert_msg(strstr(spc_last_error(c), "client_max_groups"), "%s",
                spc_last_error(c));
  ck_assert_int_eq(spc_group_leave(q), 0);
  ck_assert_int_eq(spc_group_split(p, 0, 0, &sub), 0);
  spc_disconnect(c);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

/* One client holds every rank of a 128-rank group (joins sent without
 * waiting, as a hostile client can): its all-gather's plan is built off
 * the loop thread, the result is right, and others are served meanwhile. */
enum { BIG = 128 };


START_TEST(large_group_plans_off_loop) {
  spt_daemon d;
  ck_assert_int_eq(spt_daemon_start(&d, NULL), 0);
  spc_client *c = spt_connect(d.socket);
  spc_request *joins[BIG];
  for (int r = 0; r < BIG; r++)
    ck_assert_ptr_nonnull(joins[r] = spt_join_send(c, "big", BIG, r));
  spc_group *g[BIG];
  for (int r = 0; r < BIG; r++)
    ck_assert_ptr_nonnull(g[r] = spt_join_finish(c, joins[r], BIG, r));
  spc_buffer *b;
  size_t per = 4 + 4 * BIG;
  ck_assert_int_eq(spc_buffer_alloc(c, per * BIG, &b), 0);
  int64_t s1[1] = {1}, sn[1] = {BIG};
  spc_tensor in[BIG], out[BIG];
  spc_request *ops[BIG];
  int32_t *base = spc_buffer_data(b);
  for (int r = 0; r < BIG; r++) {
    spc_tensor_init(&in[r], b, per * r, SPC_INT32, 1, s1);
    spc_tensor_init(&out[r], b, per * r + 4, SPC_INT32, 1, sn);
    base[per * r / 4] = 1000 + r;
    ck_assert_int_eq(spc_all_gather_async(g[r], &in[r], &out[r], 0, NULL,
                                          &ops[r]), 0);
  }
  healthy_pair(&d);
  for (int r = 0; r < BIG; r++)
    ck_assert_int_eq(spc_wait(&ops[r]), 0);
  for (int r = 0; r < BIG; r++)
    for (int k = 0; k < BIG; k++)
      ck_assert_int_eq(base[(per * r + 4) / 4 + k], 1000 + k);
  ck_assert_int_eq(spt_daemon_stat(&d, "plans_off_loop"), 1);
  spc_disconnect(c);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

/* Connections up to the daemon's fd limit: it refuses them while it still
 * has descriptors for its own work, so a connected pair keeps working,
 * registers buffers (a descriptor each, in flight) and stats answer. */
START_TEST(fd_flood_leaves_room) {
  struct rlimit old, low = {320, 320};
  ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &old), 0);
  low.rlim_max = old.rlim_max;
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0); /* the daemon's */
  spt_daemon d;
  int started = spt_daemon_start(&d, NULL);
  ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
  ck_assert_int_eq(started, 0);
  spc_client *c[2] = {spt_connect(d.socket), spt_connect(d.socket)};
  spc_request *join = spt_join_send(c[0], "pair", 2, 0);
  spc_group *g[2];
  ck_assert_int_eq(spc_group_join(c[1], "pair", 2, 1, &g[1]), 0);
  ck_assert_ptr_nonnull(g[0] = spt_join_finish(c[0], join, 2, 0));
  static int fds[400];
  int refused = 0;
  for (int i = 0; i < 400; i++) {
    fds[i] = spt_raw_connect(d.socket);
    ck_assert_int_ge(fds[i], 0);
    refused += spt_raw_hello(fds[i]) < 0;
  }
  ck_assert_int_ge(refused, 400 - 64); /* 320 less 256 kept for itself */
  for (int i = 0; i < HEALTHY_OPS; i++) {
    spc_buffer *b[2];
    spc_request *req[2];
    spc_tensor in[2], out[2];
    int64_t s1[1] = {1}, s2[1] = {2};
    for (int r = 0; r < 2; r++) {
      ck_assert_int_eq(spc_buffer_alloc(c[r], 64, &b[r]), 0);
      spc_tensor_init(&in[r], b[r], 0, SPC_FLOAT32, 1, s1);
      spc_tensor_init(&out[r], b[r], 8, SPC_FLOAT32, 1, s2);
      ck_assert_int_eq(spc_all_gather_async(g[r], &in[r], &out[r], 0, NULL,
                                            &req[r]), 0);
    }
    for (int r = 0; r < 2; r++) {
      ck_assert_int_eq(spc_wait(&req[r]), 0);
      ck_assert_int_eq(spc_buffer_free(b[r]), 0);
    }
  }
  ck_assert_int_ge(spt_daemon_stat(&d, "clients_rejected"), 400 - 64);
  for (int i = 0; i < 400; i++)
    close(fds[i]);
  spc_disconnect(c[0]);
  spc_disconnect(c[1]);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("neighbours");
  TCase *tc = tcase_create("neighbours");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, stopped_rank_times_out);
  tcase_add_test(tc, client_op_timeout);
  tcase_add_test(tc, drain_deadline);
  tcase_add_test(tc, idle_and_stalled_connections);
  tcase_add_test(tc, never_reading_client_dropped);
  tcase_add_test(tc, buffer_flood);
  tcase_add_test(tc, huge_size_lists_bounded);
  tcase_add_test(tc, split_counts_against_group_limit);
  tcase_add_test(tc, large_group_plans_off_loop);
  tcase_add_test(tc, fd_flood_leaves_room);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
