/* Stats after a scripted workload: exact op counts and bytes per group,
 * a pending op naming the rank that has not issued it, the stats socket
 * refusing anything but stats, and metrics that a Prometheus parser
 * accepts (promtool when installed, else tests/prom_check.py). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "check_run.h"
#include "client_internal.h"
#include "fast_ranks.h"
#include "harness.h"

static spt_daemon daemon_;
static char stats_sock[160];

static void setup(void) {
  ck_assert_int_eq(spt_daemon_start(&daemon_, NULL), 0);
  snprintf(stats_sock, sizeof(stats_sock), "%s/spcolld.stats.sock",
           daemon_.dir);
}

static void teardown(void) {
  ck_assert_int_eq(spt_daemon_stop(&daemon_), 0);
}

/* The stats in `format`, malloc'd, through the stats socket. */
static char *fetch(const char *format) {
  return spt_stats_fetch(stats_sock, format);
}

static int has(const char *text, const char *needle, int rank) {
  if (text && strstr(text, needle))
    return 1;
  fprintf(stderr, "rank %d: stats lack '%s':\n%s\n", rank, needle,
          text ? text : "(none)");
  return 0;
}

static int metrics_valid(const char *text) {
  char path[] = "/tmp/spcoll-metrics-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
    return 0;
  close(fd);
  char cmd[256];
  if (system("command -v promtool >/dev/null 2>&1") == 0)
    snprintf(cmd, sizeof(cmd), "promtool check metrics < %s", path);
  else
    snprintf(cmd, sizeof(cmd), "python3 tests/prom_check.py %s", path);
  int rc = system(cmd);
  unlink(path);
  return rc == 0;
}

/* Rank 0 checks the stats while rank 1 waits in a last op (which is then
 * the pending op, waiting for rank 0). */
static int check_stats(int rank) {
  char *text = fetch("text"), *prom = fetch("prometheus"),
       *json = fetch("json");
  int ok = has(text, "group_op stats all_gather count=3 errors=1 bytes=1536",
               rank) &&
           has(text, "group_op stats all_reduce count=2 errors=0 bytes=256",
               rank) &&
           has(text, "op all_gather count=3 errors=1 bytes=1536", rank) &&
           has(text, "waiting_for=0", rank) &&
           has(text, "framework=test", rank) &&
           has(text, "group stats world=2 joined=2 nodes=1 state=ready", rank) &&
           has(prom, "spcoll_ops_total{op=\"all_gather\",group=\"stats\"} 3",
               rank) &&
           has(prom, "spcoll_bytes_total{op=\"all_reduce\",group=\"stats\"} "
               "256", rank) &&
           has(json, "\"waiting_for\":[0]", rank) && metrics_valid(prom);
  free(text), free(prom), free(json);
  return ok;
}

static int workload_rank(int rank, int world, void *arg) {
  (void)arg;
  spc_client *c = spt_connect(daemon_.socket);
  spc_group *g;
  spc_buffer *b;
  spc_tensor in, out, bad, r_in, r_out;
  int64_t s_in[2] = {4, 8}, s_out[2] = {8, 8}, s_r[1] = {16};
  if (spc_group_join(c, "stats", world, rank, &g) < 0 ||
      spc_buffer_alloc(c, 4096, &b) < 0)
    return 1;
  spc_tensor_init(&in, b, 0, SPC_FLOAT32, 2, s_in);
  spc_tensor_init(&out, b, 512, SPC_FLOAT32, 2, s_out);
  spc_tensor_init(&r_in, b, 1024, SPC_FLOAT32, 1, s_r);
  spc_tensor_init(&r_out, b, 2048, SPC_FLOAT32, 1, s_r);
  int ok = 1;
  for (int i = 0; i < 3; i++) /* 2 ranks x 8x8 floats = 512 bytes each */
    ok &= spc_all_gather(g, &in, &out, 0, NULL) == 0;
  for (int i = 0; i < 2; i++) /* 2 ranks x 16 floats = 128 bytes each */
    ok &= spc_all_reduce(g, &r_in, &r_out, SPC_SUM) == 0;
  bad = in;
  bad.offset = rank == 1 ? 4090 : 0; /* one failed all_gather */
  ok &= spc_all_gather(g, &bad, &out, 0, NULL) == SPC_EINVAL;
  if (ok && rank == 0) {
    usleep(100000); /* rank 1's next op arrives first */
    ok = check_stats(rank);
  }
  ok &= spc_all_gather(g, &in, &out, 0, NULL) == 0;
  spc_disconnect(c);
  return !ok;
}

START_TEST(workload_counts_and_metrics) {
  ck_assert_int_eq(spt_run_ranks(2, workload_rank, NULL, 60), 0);
}
END_TEST

START_TEST(stats_socket_answers_only_stats) {
  spc_client *c = spt_connect(stats_sock);
  ck_assert_ptr_nonnull(c);
  spc_group *g;
  ck_assert_int_eq(spc_group_join(c, "nope", 1, 0, &g), SPC_EPROTOCOL);
  ck_assert_msg(strstr(spc_last_error(c), "answers stats requests"), "%s",
                spc_last_error(c));
  spc_disconnect(c);
  char *text = fetch("yaml");
  ck_assert_ptr_null(text);
}
END_TEST

static int log_has(const spt_daemon *d, const char *needle) {
  FILE *f = fopen(d->log, "r");
  char line[512];
  int found = 0;
  while (f && !found && fgets(line, sizeof(line), f))
    found = strstr(line, needle) != NULL;
  if (f)
    fclose(f);
  return found;
}

/* An op that rank 1 never issues is logged once as stuck, naming rank 1. */
START_TEST(stuck_op_reported) {
  spt_daemon d;
  const char *extra[] = {"--stuck-seconds", "1", NULL};
  ck_assert_int_eq(spt_daemon_start(&d, extra), 0);
  /* rank 1 joins without waiting (a raw client) and never issues the op */
  int fd1 = spt_raw_join_pending(d.socket, "stuck", 1);
  ck_assert_int_ge(fd1, 0);
  spc_client *c0 = spt_connect(d.socket);
  spc_group *g0;
  spc_request *req;
  ck_assert_int_eq(spc_group_join(c0, "stuck", 2, 0, &g0), 0);
  spc_buffer *b;
  spc_tensor in, out;
  int64_t s1[1] = {4}, s2[1] = {8};
  ck_assert_int_eq(spc_buffer_alloc(c0, 64, &b), 0);
  spc_tensor_init(&in, b, 0, SPC_FLOAT32, 1, s1);
  spc_tensor_init(&out, b, 16, SPC_FLOAT32, 1, s2);
  ck_assert_int_eq(spc_all_gather_async(g0, &in, &out, 0, NULL, &req), 0);
  int stuck = 0;
  for (int i = 0; i < 100 && !stuck; i++) { /* waits for the threshold */
    usleep(50000);
    stuck = log_has(&d, "stuck op: group 'stuck' op 0 (all_gather)");
  }
  ck_assert_msg(stuck, "no stuck-op report in %s", d.log);
  ck_assert(log_has(&d, "waiting for rank(s) 1"));
  close(fd1); /* rank 1 goes: the op fails naming it */
  ck_assert_int_eq(spc_wait(&req), SPC_EPEERLOST);
  spc_disconnect(c0);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  socklen_t len = sizeof(a);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  return ntohs(a.sin_port);
}

/* One HTTP request to 127.0.0.1:port; the whole response into buf. */
static void http_get(int port, const char *req, char *buf, size_t len) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ck_assert_int_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
  ck_assert_int_eq(write(fd, req, strlen(req)), (ssize_t)strlen(req));
  size_t got = 0;
  ssize_t n;
  while (got < len - 1 && (n = read(fd, buf + got, len - 1 - got)) > 0)
    got += (size_t)n;
  buf[got] = '\0';
  close(fd);
}

START_TEST(http_metrics_on_localhost) {
  spt_daemon d;
  char port[16], resp[65536];
  int p = free_port();
  snprintf(port, sizeof(port), "%d", p);
  const char *extra[] = {"--metrics-port", port, NULL};
  ck_assert_int_eq(spt_daemon_start(&d, extra), 0);
  http_get(p, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n", resp,
           sizeof(resp));
  ck_assert_msg(strncmp(resp, "HTTP/1.1 200 OK", 15) == 0, "%s", resp);
  char *body = strstr(resp, "\r\n\r\n");
  ck_assert_ptr_nonnull(body);
  ck_assert_ptr_nonnull(strstr(body, "spcoll_info{version="));
  ck_assert(metrics_valid(body + 4));
  http_get(p, "GET / HTTP/1.1\r\n\r\n", resp, sizeof(resp));
  ck_assert_msg(strncmp(resp, "HTTP/1.1 404", 12) == 0, "%s", resp);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

/* A group with a finished op; its name in /metrics or not. */
static int metrics_show_group(int groups_flag) {
  spt_daemon d;
  char port[16], resp[65536];
  int p = free_port();
  snprintf(port, sizeof(port), "%d", p);
  const char *extra[] = {"--metrics-port", port, "--hello-timeout", "1",
                         "--metrics-groups", groups_flag ? "1" : "0", NULL};
  ck_assert_int_eq(spt_daemon_start(&d, extra), 0);
  spc_client *c = spt_connect(d.socket);
  spc_group *g;
  spc_buffer *b;
  spc_tensor in, out;
  int64_t s1[1] = {4};
  ck_assert_int_eq(spc_group_join(c, "secret-job", 1, 0, &g), 0);
  ck_assert_int_eq(spc_buffer_alloc(c, 64, &b), 0);
  spc_tensor_init(&in, b, 0, SPC_INT32, 1, s1);
  spc_tensor_init(&out, b, 16, SPC_INT32, 1, s1);
  ck_assert_int_eq(spc_all_gather(g, &in, &out, 0, NULL), 0);
  http_get(p, "GET /metrics HTTP/1.1\r\n\r\n", resp, sizeof(resp));
  ck_assert_msg(strncmp(resp, "HTTP/1.1 200 OK", 15) == 0, "%s", resp);
  ck_assert_ptr_nonnull(strstr(resp, "spcoll_daemon_ops_total 1"));
  int shown = strstr(resp, "secret-job") != NULL;
  /* A connection that never sends its request is closed at the deadline;
   * connections past 16 at once are closed at once. */
  int fds[20];
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(p)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < 20; i++) {
    fds[i] = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_eq(connect(fds[i], (struct sockaddr *)&a, sizeof(a)), 0);
  }
  for (int i = 0; i < 20; i++) {
    ck_assert_msg(spt_raw_closed(fds[i], 10), "metrics connection %d open",
                  i);
    close(fds[i]);
  }
  spc_disconnect(c);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
  return shown;
}

/* Any local user can reach /metrics: by default it names no group. */
START_TEST(http_metrics_aggregate_unless_asked) {
  ck_assert_int_eq(metrics_show_group(0), 0);
  ck_assert_int_eq(metrics_show_group(1), 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("stats");
  TCase *tc = tcase_create("stats");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, workload_counts_and_metrics);
  tcase_add_test(tc, stats_socket_answers_only_stats);
  tcase_add_test(tc, stuck_op_reported);
  tcase_add_test(tc, http_metrics_on_localhost);
  tcase_add_test(tc, http_metrics_aggregate_unless_asked);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
