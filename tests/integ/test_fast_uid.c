/* A group's shared segment (issue 18) is out of another uid's reach: as
 * nobody, a forked attacker can open neither the daemon's descriptor of it
 * nor a rank's (its fds, its map_files), nor take a rank's fds (its
 * buffers' memfds, which the group's ranks take from each other). Run as root (exit 77 otherwise),
 * with the other uid made by setuid in a child, as test_access.c does. */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "client_internal.h"
#include "fast_ranks.h"
#include "harness.h"

#define NOBODY 65534
#define BIG 300000 /* floats: 1.2 MB, over fast_bytes, so the daemon's */

static spt_daemon daemon_;

/* What the ranks of one test share (fork keeps a MAP_SHARED mapping). */
typedef struct {
  char msg[8][400];
  int rc[8];
  pid_t pid[8];
  char group[64];
} shared_t;
static shared_t *sh;

static void setup(void) {
  sh = spt_fixture_up(&daemon_, NULL, sizeof(*sh));
  ck_assert_ptr_nonnull(sh);
}

static void teardown(void) {
  ck_assert_int_eq(spt_fixture_down(&daemon_, sh, sizeof(*sh)), 0);
}

typedef spt_rk rk;

static int rk_open(rk *k, int rank, int world, int64_t timeout_ms) {
  return spt_rk_open(k, daemon_.socket, sh->group, rank, world, timeout_ms);
}

/* As nobody, a rank's fds cannot be taken as its group's ranks take each
 * other's buffers (pidfd_getfd, client_fast_map.c). */
static int take_fds(pid_t pid) {
  int pfd = (int)syscall(SYS_pidfd_open, pid, 0);
  if (pfd < 0)
    return 0; /* not even a pidfd */
  int got = 0;
  for (int fd = 0; fd < 256 && !got; fd++) {
    int x = (int)syscall(SYS_pidfd_getfd, pfd, fd, 0);
    got = x >= 0;
    if (got)
      close(x);
  }
  close(pfd);
  return got;
}

/* As nobody: neither the daemon's descriptor of the segment nor a rank's
 * mapping of it (nor of its buffers) can be opened. */
static int attack(const pid_t *pids) {
  char path[300];
  for (int i = 0; i < 2; i++) {
    if (take_fds(pids[i]))
      return 5; /* took a descriptor of a root process */
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pids[i]);
    DIR *d = opendir(path);
    if (d != NULL) {
      closedir(d);
      return 2; /* could list a root process's descriptors */
    }
    for (int fd = 0; fd < 256; fd++) {
      snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pids[i], fd);
      int x = open(path, O_RDWR);
      if (x >= 0) {
        close(x);
        return 4; /* opened a descriptor of a root process */
      }
    }
    snprintf(path, sizeof(path), "/proc/%d/map_files", (int)pids[i]);
    if ((d = opendir(path)) != NULL) {
      closedir(d);
      return 3;
    }
  }
  return 0;
}

static int holder_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w, 0) < 0 || spt_rk_reduce_once(&k, rank, w, 8, 0, 0))
    return 1;
  int bad = 0;
  if (rank == 0) {
    /* The segment is mapped here, and the daemon holds it. */
    FILE *m = fopen("/proc/self/maps", "r");
    char line[512];
    int seen = 0;
    while (m && fgets(line, sizeof(line), m))
      seen |= strstr(line, "memfd:spcoll-group") != NULL;
    if (m)
      fclose(m);
    bad |= !seen;
    pid_t pids[2] = {daemon_.pid, getpid()};
    pid_t pid = fork();
    if (pid == 0) {
      if (setgid(NOBODY) < 0 || setuid(NOBODY) < 0)
        _exit(10);
      _exit(attack(pids));
    }
    int st;
    waitpid(pid, &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "the attacker got in (status %d)\n", st);
      bad = 1;
    }
  }
  bad |= spt_rk_reduce_once(&k, rank, w, 8, 1, 0); /* hold until rank 0 is done */
  return spt_rk_close(&k, bad);
}

START_TEST(other_uid_cannot_map) {
  snprintf(sh->group, sizeof(sh->group), "held");
  ck_assert_int_eq(spt_run_ranks(2, holder_rank, NULL, 120), 0);
}
END_TEST

int main(void) {
  if (geteuid() != 0) {
    fprintf(stderr, "not root: cannot be a second uid\n");
    return 77;
  }
  Suite *s = suite_create("fast_uid");
  TCase *tc = tcase_create("fast_uid");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, other_uid_cannot_map);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
