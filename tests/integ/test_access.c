/* Groups belong to the uid that made them: a client of another uid cannot
 * join or abort them unless the daemon allows that uid. Run as root; a
 * forked child drops to nobody (setuid) to be the other user. */
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
static void start(spt_daemon *d, const char *allow) {
  const char *extra[] = {"--socket-mode", "0666", allow ? "--allow-uid" : NULL,
                         allow, NULL};
  ck_assert_int_eq(spt_daemon_start(d, extra), 0);
  ck_assert_int_eq(chmod(d->dir, 0755), 0);
}

/* In a child running as nobody: join rank 1 of `name`, expecting `want`;
 * then ask the stats socket to abort it, expecting `want_abort`. */
static int as_nobody(const spt_daemon *d, const char *name, int want,
                     int want_abort) {
  pid_t pid = fork();
  if (pid == 0) {
    if (setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
      _exit(10);
    spc_client *c = spt_connect(d->socket);
    spc_group *g;
    int rc = c ? spc_group_join(c, name, 2, 1, &g) : -100;
    if (rc != want) {
      fprintf(stderr, "join as nobody: %d (%s), want %d\n", rc,
              c ? spc_last_error(c) : "", want);
      _exit(11);
    }
    if (want == SPC_EPERM && !strstr(spc_last_error(c), "uid 65534 may not"))
      _exit(12);
    spc_disconnect(c);
    char stats[160];
    snprintf(stats, sizeof(stats), "%s/spcolld.stats.sock", d->dir);
    spc_client *s = spt_connect(stats);
    Spcoll__Control ctl = SPCOLL__CONTROL__INIT;
    Spcoll__Frame f = SPCOLL__FRAME__INIT;
    ctl.command = "abort", ctl.group = (char *)name;
    f.body_case = SPCOLL__FRAME__BODY_CONTROL, f.control = &ctl;
    rc = s ? spc__call(s, &f, -1, NULL) : -100;
    if (rc != want_abort)
      _exit(13);
    /* The stats show the group to its users only. */
    Spcoll__StatsRequest sr = SPCOLL__STATS_REQUEST__INIT;
    Spcoll__Frame q = SPCOLL__FRAME__INIT, *reply = NULL;
    q.body_case = SPCOLL__FRAME__BODY_STATS_REQUEST, q.stats_request = &sr;
    if (spc__call(s, &q, -1, &reply) < 0)
      _exit(14);
    char line[96];
    snprintf(line, sizeof(line), "group %s ", name);
    int seen = strstr(reply->stats_reply->text, line) != NULL;
    spcoll__frame__free_unpacked(reply, NULL);
    spc_disconnect(s);
    _exit(seen == (want == SPC_OK) ? 0 : 15);
  }
  int st;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(other_uid_refused) {
  spt_daemon d;
  start(&d, NULL);
  /* root makes the group (rank 0 of 2) and waits in its join */
  int fd = spt_raw_join_pending(d.socket, "roots", 0);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(as_nobody(&d, "roots", SPC_EPERM, SPC_EPERM), 0);
  close(fd);
  ck_assert_int_eq(spt_daemon_stop(&d), 0);
}
END_TEST

START_TEST(allowed_uid_may_join) {
  spt_daemon d;
  start(&d, "65534");
  /* root makes the group (rank 0 of 2) and waits in its join */
  int fd = spt_raw_join_pending(d.socket, "shared", 0);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(as_nobody(&d, "shared", SPC_OK, SPC_OK), 0);
  close(fd);
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
  tcase_add_test(tc, other_uid_refused);
  tcase_add_test(tc, allowed_uid_may_join);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
