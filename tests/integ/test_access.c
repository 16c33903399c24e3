/* A second local user, as an attacker: group names live in each uid's
 * namespace (a squatter who joins a name first gets a group of its own and
 * never the victim's data), another uid's group is reached only by its
 * qualified name and only when the daemon allows it, operator commands
 * belong to root, the daemon's uid and the configured operators, and stats
 * show a user its own groups. Run as root; a forked child drops to nobody
 * (setuid) to be the other user. */
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "client_internal.h"
#include "harness.h"

#define NOBODY 65534

/* Start a daemon whose sockets anyone may open. */
static void start(spt_daemon *d, const char *flag, const char *value) {
  const char *extra[] = {"--socket-mode", "0666", flag, value, NULL};
  ck_assert_int_eq(spt_daemon_start(d, extra), 0);
  ck_assert_int_eq(chmod(d->dir, 0755), 0);
}

typedef int (*as_fn)(const spt_daemon *d, const void *arg);

/* Run fn as nobody in a child; its exit code (0: as expected). */
static int as_nobody(const spt_daemon *d, as_fn fn, const void *arg) {
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
      _exit(10);
    _exit(fn(d, arg));
  }
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* An attacker that holds its ground: fn runs as nobody in a child, says
 * 'y' on pipes[0] once set up (anything else: it failed) and waits on
 * pipes[1] until the test is done with it. */
typedef struct {
  pid_t pid;
  int done_w;
} holder;

static void holder_start(holder *h, const spt_daemon *d, as_fn fn) {
  int ready[2], done[2];
  ck_assert_int_eq(pipe(ready), 0);
  ck_assert_int_eq(pipe(done), 0);
  h->pid = fork();
  if (h->pid == 0) {
    int p[2] = {ready[1], done[0]};
    if (setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
      _exit(10);
    _exit(fn(d, p));
  }
  close(ready[1]), close(done[0]);
  h->done_w = done[1];
  char x = 0;
  ck_assert_int_eq(read(ready[0], &x, 1), 1);
  close(ready[0]);
  ck_assert_int_eq(x, 'y');
}

/* Let it go; its exit code must be 0. */
static void holder_finish(holder *h) {
  ck_assert_int_eq(write(h->done_w, "x", 1), 1);
  close(h->done_w);
  int st;
  ck_assert_int_eq(waitpid(h->pid, &st, 0), h->pid);
  ck_assert(WIFEXITED(st));
  ck_assert_int_eq(WEXITSTATUS(st), 0);
}

static int stats_call(const spt_daemon *d, Spcoll__Frame *f, char *text,
                      size_t len) {
  char path[160];
  snprintf(path, sizeof(path), "%s/spcolld.stats.sock", d->dir);
  spc_client *s = spt_connect(path);
  Spcoll__Frame *reply = NULL;
  int rc = s ? spc__call(s, f, -1, text ? &reply : NULL) : -100;
  if (rc < 0 && text != NULL && s != NULL)
    snprintf(text, len, "%s", spc_last_error(s));
  else if (text != NULL && reply->body_case == SPCOLL__FRAME__BODY_STATS_REPLY)
    snprintf(text, len, "%s", reply->stats_reply->text);
  if (reply != NULL)
    spcoll__frame__free_unpacked(reply, NULL);
  spc_disconnect(s);
  return rc;
}

/* An operator command; the error message lands in msg. */
static int control(const spt_daemon *d, const char *cmd, const char *group,
                   char *msg, size_t len) {
  Spcoll__Control ctl = SPCOLL__CONTROL__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  ctl.command = (char *)cmd, ctl.group = (char *)group;
  f.body_case = SPCOLL__FRAME__BODY_CONTROL, f.control = &ctl;
  return stats_call(d, &f, msg, len);
}

static int stats_text(const spt_daemon *d, char *text, size_t len) {
  Spcoll__StatsRequest sr = SPCOLL__STATS_REQUEST__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  f.body_case = SPCOLL__FRAME__BODY_STATS_REQUEST, f.stats_request = &sr;
  return stats_call(d, &f, text, len);
}

/* Join `name` as rank 1 of 2 expecting want (and a message holding
 * needle); with want SPC_OK the group is the waiting root rank's. */
typedef struct {
  const char *name;
  int want;
  const char *needle;
} join_case;

static int join_as(const spt_daemon *d, const void *arg) {
  const join_case *jc = arg;
  spc_client *c = spt_connect(d->socket);
  spc_group *g;
  int rc = c ? spc_group_join(c, jc->name, 2, 1, &g) : -100;
  if (rc != jc->want || (jc->needle && !strstr(spc_last_error(c),
                                               jc->needle))) {
    fprintf(stderr, "join '%s' as nobody: %d (%s), want %d '%s'\n",
            jc->name, rc, c ? spc_last_error(c) : "", jc->want,
            jc->needle ? jc->needle : "");
    return 11;
  }
  spc_disconnect(c);
  return 0;
}

/* The squatter joins rank 1 of "job42" first and stays; root's own two
 * ranks must still meet in root's "job42" and exchange their data. */
static int squat_rank(int rank, int world, void *arg) {
  (void)world;
  const spt_daemon *d = arg;
  spc_client *c = spt_connect(d->socket);
  spc_group *g;
  spc_buffer *b;
  if (c == NULL || spc_group_join(c, "job42", 2, rank, &g) != 0 ||
      spc_buffer_alloc(c, 64, &b) != 0)
    return 1;
  int64_t s1[1] = {4}, s2[1] = {8}, sizes[2] = {4, 4};
  spc_tensor in, out;
  spc_tensor_init(&in, b, 0, SPC_INT32, 1, s1);
  spc_tensor_init(&out, b, 16, SPC_INT32, 1, s2);
  spt_fill(spc_buffer_data(b), SPC_INT32, 4, 42, rank);
  if (spc_all_gather(g, &in, &out, 0, NULL) != 0)
    return 2;
  int bad = spt_check_gather((char *)spc_buffer_data(b) + 16, SPC_INT32, 1,
                             s2, 0, sizes, 2, 42, rank);
  spc_disconnect(c);
  return bad;
}

static int squatter(const spt_daemon *d, const void *arg) {
  const int *pipes = arg; /* [0]: tell ready, [1]: wait for done */
  int fd = spt_raw_join_pending(d->socket, "job42", 1);
  char x = fd >= 0 ? 'y' : 'n';
  if (write(pipes[0], &x, 1) != 1 || read(pipes[1], &x, 1) != 1)
    return 20;
  /* Its own join is still waiting for its own rank 0: never ready. */
  Spcoll__Frame *r = spt_raw_recv(fd, 1);
  int got = r != NULL;
  if (r)
    spcoll__frame__free_unpacked(r, NULL);
  return fd < 0 ? 21 : got ? 22 : 0;
}

START_TEST(squatter_gets_its_own_group) {
  spt_daemon d;
  start(&d, NULL, NULL);
  holder h;
  holder_start(&h, &d, squatter);
  ck_assert_int_eq(spt_run_ranks(2, squat_rank, &d, 30), 0);
  char text[16384];
  ck_assert_int_eq(stats_text(&d, text, sizeof(text)), 0);
  ck_assert_msg(strstr(text, "group @65534/job42 "), "%s", text);
  holder_finish(&h);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

/* Another uid's group by its qualified name: refused unless allowed. */
START_TEST(qualified_name_needs_allow_uid) {
  spt_daemon d;
  start(&d, NULL, NULL);
  int fd = spt_raw_join_pending(d.socket, "roots", 0);
  ck_assert_int_ge(fd, 0);
  join_case jc = {"@0/roots", SPC_EPERM, "uid 65534 may not join it"};
  ck_assert_int_eq(as_nobody(&d, join_as, &jc), 0);
  join_case bad = {"@root/roots", SPC_EINVAL, "@UID/NAME"};
  ck_assert_int_eq(as_nobody(&d, join_as, &bad), 0);
  close(fd);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
  start(&d, "--allow-uid", "65534");
  fd = spt_raw_join_pending(d.socket, "shared", 0);
  ck_assert_int_ge(fd, 0);
  join_case ok = {"@0/shared", SPC_OK, NULL};
  ck_assert_int_eq(as_nobody(&d, join_as, &ok), 0);
  close(fd);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

typedef struct {
  const char *cmd, *group;
  int want;
  const char *needle;
} control_case;

static int control_as(const spt_daemon *d, const void *arg) {
  const control_case *cc = arg;
  char msg[512] = "";
  int rc = control(d, cc->cmd, cc->group, msg, sizeof(msg));
  if (rc != cc->want || (cc->needle && !strstr(msg, cc->needle))) {
    fprintf(stderr, "%s as nobody: %d (%s), want %d '%s'\n", cc->cmd, rc,
            msg, cc->want, cc->needle ? cc->needle : "");
    return 11;
  }
  /* The stats show nobody none of root's groups. */
  char text[16384];
  if (stats_text(d, text, sizeof(text)) != 0 || strstr(text, "group roots "))
    return 12;
  return 0;
}

/* Drain and abort are refused to a plain member of the socket group; the
 * daemon's operators may; upgrade is refused to them too. */
START_TEST(operator_commands_need_an_operator) {
  spt_daemon d;
  start(&d, NULL, NULL);
  int fd = spt_raw_join_pending(d.socket, "roots", 0);
  ck_assert_int_ge(fd, 0);
  control_case drain = {"drain", "", SPC_EPERM, "uid 65534 (gid 65534) is "
                                                "none of them"};
  control_case abort_ = {"abort", "@0/roots", SPC_EPERM, "operator commands"};
  ck_assert_int_eq(as_nobody(&d, control_as, &drain), 0);
  ck_assert_int_eq(as_nobody(&d, control_as, &abort_), 0);
  /* The daemon still serves and is not draining. */
  spc_client *c = spt_connect(d.socket);
  spc_group *g;
  ck_assert_int_eq(spc_group_join(c, "solo", 1, 0, &g), 0);
  spc_disconnect(c);
  close(fd);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);

  const char *flags[][2] = {{"--operator-uid", "65534"},
                            {"--operator-gid", "65534"}};
  for (int i = 0; i < 2; i++) {
    start(&d, flags[i][0], flags[i][1]);
    fd = spt_raw_join_pending(d.socket, "roots", 0);
    ck_assert_int_ge(fd, 0);
    control_case ok = {"abort", "@0/roots", SPC_OK, NULL};
    ck_assert_int_eq(as_nobody(&d, control_as, &ok), 0);
    /* An operator may not take the sockets (and every client's memory
     * with them): root and the daemon's uid only. */
    control_case upgrade = {"upgrade", "", SPC_EPERM, "upgrade is for root "
                            "and the daemon's uid"};
    ck_assert_int_eq(as_nobody(&d, control_as, &upgrade), 0);
    /* The aborted group was still joining: its rank hears it at once. */
    Spcoll__Frame *r = spt_raw_recv(fd, 10);
    ck_assert_ptr_nonnull(r);
    ck_assert_int_eq(r->body_case, SPCOLL__FRAME__BODY_ERROR);
    ck_assert_ptr_nonnull(strstr(r->error->message, "aborted by operator"));
    spcoll__frame__free_unpacked(r, NULL);
    close(fd);
    ck_assert_int_eq(spt_daemon_stop(&d), 0);
  }
}
END_TEST

/* A command's words written as the daemon's own log line would be. */
#define FORGED "drain\nspcolld info control.c:1 drained"
#define FLOOD 2000

/* Nobody sends FLOOD refused commands over one connection, each with a
 * newline and a forged log line in its words. */
static int forger(const spt_daemon *d, const void *arg) {
  (void)arg;
  char path[160];
  snprintf(path, sizeof(path), "%s/spcolld.stats.sock", d->dir);
  spc_client *s = spt_connect(path);
  if (s == NULL)
    return 40;
  Spcoll__Control ctl = SPCOLL__CONTROL__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  ctl.command = FORGED, ctl.group = "x\nspcolld info group.c:1 forged";
  f.body_case = SPCOLL__FRAME__BODY_CONTROL, f.control = &ctl;
  int bad = 0;
  for (int i = 0; i < FLOOD && !bad; i++)
    bad = spc__call(s, &f, -1, NULL) != SPC_EPERM;
  if (bad)
    fprintf(stderr, "forger: %s\n", spc_last_error(s));
  spc_disconnect(s);
  return bad ? 41 : 0;
}

/* Of the daemon's log: its size, the lines that start with `start` and
 * the lines that hold `needle`. */
typedef struct {
  long bytes;
  int starting, holding;
} log_count;

static log_count log_scan(const spt_daemon *d, const char *start,
                          const char *needle) {
  log_count n = {0, 0, 0};
  FILE *f = fopen(d->log, "r");
  ck_assert_ptr_nonnull(f);
  char line[4096];
  while (fgets(line, sizeof(line), f) != NULL) {
    n.bytes += (long)strlen(line);
    n.starting += strncmp(line, start, strlen(start)) == 0;
    n.holding += strstr(line, needle) != NULL;
  }
  fclose(f);
  return n;
}

/* Refused operator commands cannot forge the daemon's log lines (their
 * words are logged escaped, on their own line) nor flood it (a bounded
 * number a minute are logged; every one is counted); the daemon serves
 * on. */
START_TEST(refused_commands_neither_forge_nor_flood_the_log) {
  spt_daemon d;
  start(&d, NULL, NULL);
  ck_assert_int_eq(as_nobody(&d, forger, NULL), 0);
  log_count n = log_scan(&d, "spcolld info control.c:1", "refused: not an "
                                                        "operator");
  if (n.starting != 0 || n.holding < 1 || n.holding > 10 ||
      n.bytes > 16384)
    spt_daemon_dump_log(&d);
  ck_assert_int_eq(n.starting, 0);
  ck_assert_int_eq(log_scan(&d, "spcolld info group.c:1", "x").starting, 0);
  /* The words are there, escaped: an operator reading the log sees them. */
  ck_assert_int_ge(log_scan(&d, "spcolld", "'drain\\x0aspcolld info "
                                           "control.c:1 drained'").holding,
                   1);
  ck_assert_int_ge(n.holding, 1);
  ck_assert_int_le(n.holding, 10);
  ck_assert_int_le(n.bytes, 16384);
  ck_assert_int_eq(spt_daemon_stat(&d, "control_refused"), FLOOD);
  spc_client *c = spt_connect(d.socket);
  spc_group *g;
  ck_assert_int_eq(spc_group_join(c, "solo", 1, 0, &g), 0);
  spc_disconnect(c);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

/* Nobody opens far more connections than its uid may hold: the extra ones
 * are told why and closed, and root's clients connect and work all along. */
static int flooder(const spt_daemon *d, const void *arg) {
  const int *pipes = arg;
  spc_client *c[100];
  int refused = 0;
  for (int i = 0; i < 100; i++)
    if (spc_connect(d->socket, "flood", &c[i]) != 0) {
      c[i] = NULL;
      refused += strstr(spc_last_error(NULL), "uid_max_connections") != NULL;
    }
  char x = refused == 100 - 32 ? 'y' : 'n';
  if (x != 'y')
    fprintf(stderr, "flood: %d refused, last: %s\n", refused,
            spc_last_error(NULL));
  if (write(pipes[0], &x, 1) != 1 || read(pipes[1], &x, 1) != 1)
    return 31;
  for (int i = 0; i < 100; i++)
    spc_disconnect(c[i]);
  return 0;
}

static int healthy_rank(int rank, int world, void *arg) {
  const spt_daemon *d = arg;
  spc_client *c = spt_connect(d->socket);
  spc_group *g;
  spc_buffer *b;
  if (c == NULL || spc_group_join(c, "healthy", world, rank, &g) != 0 ||
      spc_buffer_alloc(c, 64, &b) != 0)
    return 1;
  int64_t s1[1] = {1}, s2[1] = {2};
  spc_tensor in, out;
  spc_tensor_init(&in, b, 0, SPC_FLOAT32, 1, s1);
  spc_tensor_init(&out, b, 8, SPC_FLOAT32, 1, s2);
  for (int i = 0; i < 20; i++)
    if (spc_all_gather(g, &in, &out, 0, NULL) != 0)
      return 2;
  spc_disconnect(c);
  return 0;
}

START_TEST(connection_flood_bounded_per_uid) {
  spt_daemon d;
  start(&d, "--uid-max-connections", "32");
  int base = spt_daemon_fds(&d);
  holder h;
  holder_start(&h, &d, flooder);
  ck_assert_int_eq(spt_run_ranks(2, healthy_rank, &d, 60), 0);
  holder_finish(&h);
  int n = -1;
  for (int i = 0; i < 100 && (n = spt_daemon_fds(&d)) > base; i++)
    usleep(50000);
  ck_assert_int_le(n, base);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

int main(void) {
  if (geteuid() != 0) {
    printf("skipped: needs root (setuid to a second uid)\n");
    return 77;
  }
  Suite *s = suite_create("access");
  TCase *tc = tcase_create("access");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, squatter_gets_its_own_group);
  tcase_add_test(tc, qualified_name_needs_allow_uid);
  tcase_add_test(tc, operator_commands_need_an_operator);
  tcase_add_test(tc, connection_flood_bounded_per_uid);
  tcase_add_test(tc, refused_commands_neither_forge_nor_flood_the_log);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
