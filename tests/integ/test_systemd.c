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

/* A test's folder: the sockets' paths, and a notify socket standing in
 * for systemd's, its environment line ready for the daemon. */
typedef struct {
  char dir[32], sock[128], stats[128], note[128], env[160];
  int nfd;
} scene;

static void scene_open(scene *sc) {
  snprintf(sc->dir, sizeof(sc->dir), "/tmp/spcoll-sd-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(sc->dir));
  snprintf(sc->sock, sizeof(sc->sock), "%s/spcolld.sock", sc->dir);
  snprintf(sc->stats, sizeof(sc->stats), "%s/spcolld.stats.sock", sc->dir);
  snprintf(sc->note, sizeof(sc->note), "%s/notify", sc->dir);
  snprintf(sc->env, sizeof(sc->env), "NOTIFY_SOCKET=%s", sc->note);
  sc->nfd = notify_listen(sc->note);
}

/* Stop daemon pid (SIGTERM: it exits 0) and remove the folder. */
static void scene_close(scene *sc, pid_t pid) {
  int st;
  kill(pid, SIGTERM);
  ck_assert_int_eq(waitpid(pid, &st, 0), pid);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "spcolld: %#x", st);
  close(sc->nfd);
  char cmd[256];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", sc->dir);
  ck_assert_int_eq(system(cmd), 0);
}

/* A group of one on a client, with a buffer: an op through it is
 * checked (lone_op: v in element 2 of the input comes out of an
 * all-reduce in element 2 of the output). */
typedef struct {
  spc_group *g;
  spc_buffer *b;
  spc_tensor in, out;
} lone;

static void lone_open(spc_client *c, const char *name, lone *l) {
  int64_t s[1] = {4};
  ck_assert_int_eq(spc_group_join(c, name, 1, 0, &l->g), 0);
  ck_assert_int_eq(spc_buffer_alloc(c, 64, &l->b), 0);
  spc_tensor_init(&l->in, l->b, 0, SPC_INT32, 1, s);
  spc_tensor_init(&l->out, l->b, 16, SPC_INT32, 1, s);
}

static void lone_op(spc_client *c, lone *l, int32_t v) {
  int32_t *x = spc_buffer_data(l->b);
  x[2] = v;
  ck_assert_msg(spc_all_reduce(l->g, &l->in, &l->out, SPC_SUM) == 0, "%s",
                spc_last_error(c));
  ck_assert_int_eq(x[4 + 2], v);
}

START_TEST(socket_activation_serves_a_client) {
  scene sc;
  scene_open(&sc);
  const char *argv[] = {"systemd-socket-activate", "-l", sc.sock, "-E",
                        sc.env, daemon_bin(), "--socket", sc.sock,
                        "--workers", "1", NULL};
  pid_t pid;
  spc_client *c = activated(argv, sc.sock, &pid);
  lone l;
  lone_open(c, "activated", &l);
  lone_op(c, &l, 42);
  ck_assert(notified(sc.nfd, "READY=1"));
  spc_disconnect(c);
  int nfd = dup(sc.nfd); /* STOPPING=1 comes as it stops */
  scene_close(&sc, pid);
  ck_assert(notified(nfd, "STOPPING=1"));
  close(nfd);
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
  scene sc;
  char names[2048];
  scene_open(&sc);
  const char *argv[] = {"systemd-socket-activate", "-l", sc.sock, "-l",
                        sc.stats, "--fdname=control:stats", "-E", sc.env,
                        daemon_bin(), "--socket", sc.sock, "--stats-socket",
                        sc.stats, "--workers", "1", NULL};
  pid_t pid;
  spc_client *c = activated(argv, sc.sock, &pid);
  ck_assert(notes_until_ready(sc.nfd, names, sizeof(names)));
  ck_assert_msg(strstr(names, "FDSTORE=1\nFDNAME=control|fd") &&
                    strstr(names, "FDSTORE=1\nFDNAME=stats|fd"),
                "notifications:\n%s", names);
  char cmd[512], bin[PATH_MAX];
  ck_assert_ptr_nonnull(realpath(daemon_bin(), bin));
  snprintf(cmd, sizeof(cmd), "%s/spcollctl --stats-socket %s status "
           ">/dev/null", dirname(bin), sc.stats);
  ck_assert_int_eq(system(cmd), 0);
  spc_disconnect(c);
  scene_close(&sc, pid);
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
  scene sc;
  scene_open(&sc);
  ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  pid_t old = fork();
  if (old == 0) {
    setenv("NOTIFY_SOCKET", sc.note, 1);
    execl(daemon_bin(), daemon_bin(), "--socket", sc.sock, "--stats-socket",
          sc.stats, "--workers", "1", (char *)NULL);
    _exit(127);
  }
  ck_assert_int_eq(ready_pid(sc.nfd, 0), old);
  spc_client *c = NULL;
  ck_assert_int_eq(spc_connect(sc.sock, "test", &c), 0);
  lone l;
  lone_open(c, "reloaded", &l);
  lone_op(c, &l, 3);
  ck_assert_int_eq(kill(old, SIGHUP), 0);
  pid_t young = ready_pid(sc.nfd, old);
  ck_assert_msg(young > 0, "no READY=1 from a new daemon");
  int st;
  ck_assert_int_eq(waitpid(old, &st, 0), old);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "old: %#x", st);
  lone_op(c, &l, 7); /* on the new daemon */
  spc_disconnect(c);
  scene_close(&sc, young);
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
