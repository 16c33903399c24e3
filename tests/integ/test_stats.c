/* Stats after a scripted workload: exact op counts and bytes per group,
 * a pending op naming the rank that has not issued it, stuck ops of the
 * daemon's path and of a group's shared segment logged once and shown
 * stuck with their age and the ranks behind, the stats socket
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

/* How many lines of d's log hold needle; the first one goes to first
 * (len bytes, "" when none) unless first is NULL. */
static int log_lines(const spt_daemon *d, const char *needle, char *first,
                     size_t len) {
  FILE *f = fopen(d->log, "r");
  char line[512];
  int n = 0;
  if (first != NULL)
    first[0] = '\0';
  while (f && fgets(line, sizeof(line), f))
    if (strstr(line, needle) != NULL && n++ == 0 && first != NULL)
      snprintf(first, len, "%s", line);
  if (f)
    fclose(f);
  return n;
}

static int log_has(const spt_daemon *d, const char *needle) {
  return log_lines(d, needle, NULL, 0) > 0;
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

/* The daemon of stuck_fast_op_reported, for its forked ranks. */
static spt_daemon *stuck_d;
#define STUCK_LOG "stuck op: group 'fstuck' op "

/* The first line of text holding both a and b, into line (len bytes);
 * 0 when none. */
static int line_with(const char *text, const char *a, const char *b,
                     char *line, size_t len) {
  for (const char *p = text; p != NULL && *p != '\0';) {
    const char *end = strchr(p, '\n');
    size_t n = end ? (size_t)(end - p) : strlen(p);
    snprintf(line, len, "%.*s", (int)n, p);
    if (strstr(line, a) && strstr(line, b))
      return 1;
    p = end ? end + 1 : NULL;
  }
  return 0;
}

/* The stats of stuck_d in format (NULL: text), malloc'd; NULL on failure. */
static char *stuck_stats(const char *format) {
  char sock[200];
  snprintf(sock, sizeof(sock), "%s/spcolld.stats.sock", stuck_d->dir);
  return spt_stats_fetch(sock, format);
}

/* Rank 2, while ranks 0 and 1 wait in the segment for it: the stats show
 * their op stuck, past the threshold (1 s), waiting for rank 2, as text
 * and as JSON, and the log has one line for it, which later ticks do not
 * repeat. 0 when so (what is not is said on stderr). */
static int stuck_seen(void) {
  char line[512], logged[512];
  char *text = NULL;
  int seen = 0;
  for (int i = 0; i < 400 && !seen; i++) { /* 20 s, for a 1 s threshold */
    usleep(50000);
    free(text);
    text = stuck_stats(NULL);
    seen = text && line_with(text, "pending fstuck ", " stuck=1 ", line,
                             sizeof(line));
  }
  if (!seen) {
    fprintf(stderr, "no stuck fast op in the stats:\n%s\n",
            text ? text : "(none)");
    free(text);
    return 1;
  }
  free(text);
  const char *a = strstr(line, "age_s=");
  double age = 0;
  int bad = !strstr(line, " op=all_reduce ") ||
            !strstr(line, " running=0 stuck=1 waiting_for=2 path=shm") ||
            a == NULL || sscanf(a, "age_s=%lf", &age) != 1 || age < 1.0;
  char *json = stuck_stats("json");
  bad |= !json || !strstr(json, "\"stuck\":true,\"waiting_for\":[2],"
                                "\"path\":\"shm\"}");
  usleep(600000); /* two more ticks of the watchdog: still one line */
  int n = log_lines(stuck_d, STUCK_LOG, logged, sizeof(logged));
  bad |= n != 1 ||
         !strstr(logged, "(all_reduce, shared-memory path) pending ") ||
         !strstr(logged, ", waiting for rank(s) 2\n");
  if (bad)
    fprintf(stderr, "stuck fast op: stats line '%s' (age %g), %d log "
            "line(s), the first '%s', json %s\n", line, age, n, logged,
            json ? json : "(none)");
  free(json);
  return bad;
}

/* Rank 2 after the op: no op of the group is stuck now (the stall ended
 * when rank 2 published), and the log still has the one line. */
static int stuck_gone(void) {
  char line[512];
  char *text = stuck_stats(NULL);
  int bad = !text || line_with(text, "pending fstuck ", " stuck=1 ", line,
                               sizeof(line)) ||
            log_lines(stuck_d, STUCK_LOG, NULL, 0) != 1;
  if (bad)
    fprintf(stderr, "after the stuck fast op: stats\n%s\n",
            text ? text : "(none)");
  free(text);
  return bad;
}

/* Every rank runs a small all_reduce (the segment's); then ranks 0 and 1
 * issue the next, and rank 2 issues it only once it saw it reported as
 * stuck (or gave up): the op then ends right on every rank. */
static int stuck_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (spt_rk_open(&k, stuck_d->socket, "fstuck", rank, w, 0) < 0)
    return 1;
  int bad = spt_rk_reduce_once(&k, rank, w, 8, 0, 0);
  if (rank == w - 1)
    bad |= stuck_seen();
  bad |= spt_rk_reduce_once(&k, rank, w, 8, 1, 0);
  if (rank == w - 1)
    bad |= stuck_gone();
  return spt_rk_close(&k, bad);
}

/* A fast-path op that rank 2 has not issued, while ranks 0 and 1 wait in
 * the group's segment: the watchdog logs it once as stuck naming rank 2,
 * and the stats show it stuck with its age, as ops of the daemon's path
 * (stuck_op_reported). */
START_TEST(stuck_fast_op_reported) {
  spt_daemon d;
  const char *extra[] = {"--stuck-seconds", "1", NULL};
  ck_assert_int_eq(spt_daemon_start(&d, extra), 0);
  stuck_d = &d;
  ck_assert_int_eq(spt_run_ranks(3, stuck_rank, NULL, 60), 0);
  stuck_d = NULL;
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
  tcase_add_test(tc, stuck_fast_op_reported);
  tcase_add_test(tc, http_metrics_on_localhost);
  tcase_add_test(tc, http_metrics_aggregate_unless_asked);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
