/* systemd: the units pass systemd-analyze verify without a word,
 * spcolld started by socket activation (systemd-socket-activate) serves a
 * client and tells NOTIFY_SOCKET READY=1, then STOPPING=1 on SIGTERM, both
 * sockets passed by name are served and kept in the fd store, and a
 * reload (SIGHUP) hands the sockets to a new daemon under a client. */
#include <check.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "harness.h"

static const char *daemon_bin(void) {
  const char *bin = getenv("SPCOLLD");
  return bin ? bin : "build/bin/spcolld";
}

/* Output of `cmd` (stderr included) into buf; returns its exit status. */
static int run_capture(const char *cmd, char *buf, size_t len) {
  FILE *p = popen(cmd, "r");
  size_t n = p ? fread(buf, 1, len - 1, p) : 0;
  buf[n] = '\0';
  return p ? pclose(p) : -1;
}

/* Copies of the units whose ExecStart names the binary under test. */
static void units_copy(const char *dir, const char *type_line) {
  char cmd[1024], bin[PATH_MAX];
  ck_assert_ptr_nonnull(realpath(daemon_bin(), bin));
  snprintf(cmd, sizeof(cmd),
           "mkdir -p %s && sed -e 's|/usr/local/sbin/spcolld|%s|' "
           "-e 's|^Type=notify$|%s|' systemd/spcolld.service > "
           "%s/spcolld.service && cp systemd/spcolld.socket %s/",
           dir, bin, type_line, dir, dir);
  ck_assert_int_eq(system(cmd), 0);
}

START_TEST(units_verify_clean) {
  char out[4096], cmd[512];
  units_copy("/tmp/spcoll-units", "Type=notify");
  snprintf(cmd, sizeof(cmd), "systemd-analyze verify "
           "/tmp/spcoll-units/spcolld.service "
           "/tmp/spcoll-units/spcolld.socket 2>&1");
  ck_assert_int_eq(run_capture(cmd, out, sizeof(out)), 0);
  ck_assert_msg(out[0] == '\0', "systemd-analyze verify said:\n%s", out);
  /* The check can fail: a broken unit is reported. */
  units_copy("/tmp/spcoll-units-bad", "Type=notifyy");
  snprintf(cmd, sizeof(cmd), "systemd-analyze verify "
           "/tmp/spcoll-units-bad/spcolld.service 2>&1");
  run_capture(cmd, out, sizeof(out));
  ck_assert_msg(strstr(out, "notifyy") != NULL, "not reported: %s", out);
  ck_assert_int_eq(system("rm -rf /tmp/spcoll-units /tmp/spcoll-units-bad"),
                   0);
}
END_TEST

static int notify_listen(const char *path) {
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
  struct timeval tv = {10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  return fd;
}

static int notified(int fd, const char *what) {
  char msg[512];
  for (int i = 0; i < 4; i++) {
    ssize_t n = recv(fd, msg, sizeof(msg) - 1, 0);
    if (n <= 0)
      return 0;
    msg[n] = '\0';
    if (strstr(msg, what))
      return 1;
  }
  return 0;
}

/* spcolld started by systemd-socket-activate with argv (its arguments,
 * NULL-ended; the activator passes on only the -E environment): its
 * pid, and a client connected to sock once it serves. */
static spc_client *activated(const char *const *argv, const char *sock,
                             pid_t *pid_p) {
  pid_t pid = fork();
  if (pid == 0) {
    execvp(argv[0], (char *const *)argv);
    _exit(127);
  }
  *pid_p = pid;
  spc_client *c = NULL;
  for (int i = 0; i < 500 && c == NULL; i++) { /* until it listens */
    if (access(sock, F_OK) == 0)
      spc_connect(sock, "test", &c);
    if (c == NULL)
      usleep(10000);
  }
  ck_assert_msg(c != NULL, "no daemon on %s", sock);
  return c;
}

START_TEST(socket_activation_serves_a_client) {
  char dir[] = "/tmp/spcoll-act-XXXXXX", sock[128], note[128];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(sock, sizeof(sock), "%s/spcolld.sock", dir);
  snprintf(note, sizeof(note), "%s/notify", dir);
  int nfd = notify_listen(note);
  char env[160];
  snprintf(env, sizeof(env), "NOTIFY_SOCKET=%s", note);
  const char *argv[] = {"systemd-socket-activate", "-l", sock, "-E", env,
                        daemon_bin(), "--socket", sock, "--workers", "1",
                        NULL};
  pid_t pid;
  spc_client *c = activated(argv, sock, &pid);
  spc_group *g;
  spc_buffer *b;
  spc_tensor in, out;
  int64_t s[1] = {4};
  ck_assert_int_eq(spc_group_join(c, "activated", 1, 0, &g), 0);
  ck_assert_int_eq(spc_buffer_alloc(c, 64, &b), 0);
  spc_tensor_init(&in, b, 0, SPC_INT32, 1, s);
  spc_tensor_init(&out, b, 16, SPC_INT32, 1, s);
  ((int32_t *)spc_buffer_data(b))[2] = 42;
  ck_assert_int_eq(spc_all_gather(g, &in, &out, 0, NULL), 0);
  ck_assert_int_eq(((int32_t *)spc_buffer_data(b))[4 + 2], 42);
  ck_assert(notified(nfd, "READY=1"));
  spc_disconnect(c);
  kill(pid, SIGTERM);
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  ck_assert(notified(nfd, "STOPPING=1"));
  close(nfd);
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* Every notification up to READY=1, joined into buf (fds that came with
 * one, FDSTORE's, closed): 1 when READY=1 came. */
static int notes_until_ready(int fd, char *buf, size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < 16; i++) {
    char msg[512];
    union {
      char b[CMSG_SPACE(sizeof(int) * 4)];
      struct cmsghdr align;
    } cb;
    struct iovec iov = {msg, sizeof(msg) - 1};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1,
                        .msg_control = cb.b, .msg_controllen = sizeof(cb.b)};
    ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    if (n <= 0)
      return 0;
    msg[n] = '\0';
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
      if (c->cmsg_type == SCM_RIGHTS)
        for (size_t k = 0; k < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++)
          close(((int *)CMSG_DATA(c))[k]);
    used += (size_t)snprintf(buf + used, len - used, "%s|%s\n", msg,
                             mh.msg_controllen ? "fd" : "");
    if (strstr(msg, "READY=1") || used >= len - 1)
      return strstr(msg, "READY=1") != NULL;
  }
  return 0;
}

/* Both sockets passed by systemd, named as the fd store names them
 * ("control", "stats"): the daemon serves clients and operators on them,
 * and puts both in the store (FDSTORE=1 with the socket) before READY=1,
 * so that a restart of the service gets them back. */
START_TEST(stored_sockets_served_and_stored) {
  char dir[] = "/tmp/spcoll-store-XXXXXX", sock[128], stats[128];
  char note[128], env[160], names[2048];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(sock, sizeof(sock), "%s/spcolld.sock", dir);
  snprintf(stats, sizeof(stats), "%s/stats.sock", dir);
  snprintf(note, sizeof(note), "%s/notify", dir);
  int nfd = notify_listen(note);
  snprintf(env, sizeof(env), "NOTIFY_SOCKET=%s", note);
  const char *argv[] = {"systemd-socket-activate", "-l", sock, "-l", stats,
                        "--fdname=control:stats", "-E", env, daemon_bin(),
                        "--socket", sock, "--stats-socket", stats,
                        "--workers", "1", NULL};
  pid_t pid;
  spc_client *c = activated(argv, sock, &pid);
  ck_assert(notes_until_ready(nfd, names, sizeof(names)));
  ck_assert_msg(strstr(names, "FDSTORE=1\nFDNAME=control|fd") &&
                    strstr(names, "FDSTORE=1\nFDNAME=stats|fd"),
                "notifications:\n%s", names);
  char cmd[512], bin[PATH_MAX];
  ck_assert_ptr_nonnull(realpath(daemon_bin(), bin));
  snprintf(cmd, sizeof(cmd), "%s/spcollctl --stats-socket %s status "
           ">/dev/null", dirname(bin), stats);
  ck_assert_int_eq(system(cmd), 0);
  spc_disconnect(c);
  kill(pid, SIGTERM);
  int st;
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  close(nfd);
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* The MAINPID of the next READY=1 that names a pid other than `not`;
 * 0 when none came. */
static pid_t ready_pid(int fd, pid_t not) {
  char msg[512];
  for (int i = 0; i < 8; i++) {
    ssize_t n = recv(fd, msg, sizeof(msg) - 1, 0);
    if (n <= 0)
      return 0;
    msg[n] = '\0';
    const char *m = strstr(msg, "MAINPID=");
    if (strstr(msg, "READY=1") && m && atoi(m + 8) != (int)not)
      return (pid_t)atoi(m + 8);
  }
  return 0;
}

/* systemctl reload (the unit's ExecReload: SIGHUP): the daemon starts its
 * binary again with --upgrade; the new one takes the sockets over and
 * tells NOTIFY_SOCKET READY=1 with its own MAINPID; the old one exits 0;
 * a client's next op runs on the new one. This process stands in for
 * systemd as the subreaper that adopts the new daemon. */
START_TEST(reload_hands_over) {
  char dir[] = "/tmp/spcoll-reload-XXXXXX", sock[128], stats[128];
  char note[128];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(sock, sizeof(sock), "%s/spcolld.sock", dir);
  snprintf(stats, sizeof(stats), "%s/spcolld.stats.sock", dir);
  snprintf(note, sizeof(note), "%s/notify", dir);
  int nfd = notify_listen(note);
  ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  pid_t old = fork();
  if (old == 0) {
    setenv("NOTIFY_SOCKET", note, 1);
    execl(daemon_bin(), daemon_bin(), "--socket", sock, "--stats-socket",
          stats, "--workers", "1", (char *)NULL);
    _exit(127);
  }
  ck_assert_int_eq(ready_pid(nfd, 0), old);
  spc_client *c = NULL;
  ck_assert_int_eq(spc_connect(sock, "test", &c), 0);
  spc_group *g;
  spc_buffer *b;
  spc_tensor in, out;
  int64_t s[1] = {4};
  ck_assert_int_eq(spc_group_join(c, "reloaded", 1, 0, &g), 0);
  ck_assert_int_eq(spc_buffer_alloc(c, 64, &b), 0);
  spc_tensor_init(&in, b, 0, SPC_INT32, 1, s);
  spc_tensor_init(&out, b, 16, SPC_INT32, 1, s);
  ck_assert_int_eq(spc_all_reduce(g, &in, &out, SPC_SUM), 0);
  ck_assert_int_eq(kill(old, SIGHUP), 0);
  pid_t young = ready_pid(nfd, old);
  ck_assert_msg(young > 0, "no READY=1 from a new daemon");
  int st;
  ck_assert_int_eq(waitpid(old, &st, 0), old);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "old: %#x", st);
  ((int32_t *)spc_buffer_data(b))[1] = 7;
  ck_assert_msg(spc_all_reduce(g, &in, &out, SPC_SUM) == 0, "%s",
                spc_last_error(c));
  ck_assert_int_eq(((int32_t *)spc_buffer_data(b))[4 + 1], 7);
  spc_disconnect(c);
  kill(young, SIGTERM);
  ck_assert_int_eq(waitpid(young, &st, 0), young);
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  close(nfd);
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void) {
  if (system("command -v systemd-analyze >/dev/null && "
             "command -v systemd-socket-activate >/dev/null") != 0) {
    printf("skipped: systemd-analyze or systemd-socket-activate missing\n");
    return 77;
  }
  Suite *s = suite_create("systemd");
  TCase *tc = tcase_create("systemd");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, units_verify_clean);
  tcase_add_test(tc, socket_activation_serves_a_client);
  tcase_add_test(tc, reload_hands_over);
  tcase_add_test(tc, stored_sockets_served_and_stored);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
