/* A daemon restart under ranks running device ops (issue 36): four ranks
 * (rank r on GPU r % the devices seen) loop over verified ops of every
 * kind on device tensors (a cudaMalloc buffer each; the inputs copied in
 * and the outputs out by the CUDA runtime) while the daemon is SIGKILLed
 * and a new one started on the same socket, and while it is upgraded
 * with --upgrade. The client registers its device memory with the new
 * daemon by itself (the driver exports it again); the ranks' code does
 * nothing special. Every op is right or fails with SPC_ERESTARTED, none
 * fails across the upgrade, and every op of the last rounds is right on
 * every rank. What the daemon held does not survive it: its imports of
 * the ranks' memory and its NCCL communicators are made anew. Without a
 * GPU: "skipped: no GPU", exit 77. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "gpu_testlib.h"
#include "restart_ops.h"

#ifdef SPC_HAVE_CUDA

#define W SPT_RO_W
#define ROUNDS 24
#define KILL_AT 6
#define LAST_OK 6
#define N 256 /* floats per row */

typedef struct {
  spt_ro_tally t[W];
  /* device_fault_hands_over: */
  volatile int failed[W];      /* ops that failed with SPC_EDEVICE */
  volatile int old_gone;       /* the faulted daemon has exited */
} shared_t;

static spt_daemon daemon_, again;
static char stats_sock[200];
static shared_t *sh;
static int ndev;

static void setup(void) {
  sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(sh, MAP_FAILED);
  memset(sh, 0, sizeof(*sh));
  ck_assert_int_eq(spt_daemon_start(&daemon_, NULL), 0);
  snprintf(stats_sock, sizeof(stats_sock), "%s/spcolld.stats.sock",
           daemon_.dir);
  memset(&again, 0, sizeof(again));
}

static void teardown(void) {
  if (again.pid > 0)
    ck_assert_int_eq(spt_daemon_stop(&again), 0);
  unlink(stats_sock);
  unlink(daemon_.log);
  unlink(daemon_.socket);
  rmdir(daemon_.dir);
  munmap(sh, sizeof(*sh));
}

static int copy(void *dst, const void *src, size_t n, int to_dev) {
  GPT_CUDA(cudaMemcpy(dst, src, n, to_dev ? cudaMemcpyHostToDevice
                                          : cudaMemcpyDeviceToHost));
  return 0;
}

static int loop_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_ro r = {.rank = rank, .copy = copy};
  GPT_CUDA(cudaSetDevice(rank % ndev));
  /* A rank that does not come back fails the others' rejoin in 30 s,
   * saying so, rather than holding them to the guard. */
  if (spt_rk_open(&r.k, daemon_.socket, "gpu-restart", rank, w, 0) < 0 ||
      spc_set_reconnect_timeout(r.k.c, 30000) < 0 ||
      spc_buffer_alloc_device(r.k.c, rank % ndev, 4 << 20, &r.dev) < 0) {
    fprintf(stderr, "rank %d: %s\n", rank, spc_last_error(r.k.c));
    return 1;
  }
  spt_ro_loop(&r, ROUNDS, N, 0, &sh->t[rank]);
  return spt_rk_close(&r.k, 0);
}

static void ranks_survive(int upgrade) {
  pid_t pids[W];
  for (int r = 0; r < W; r++) {
    pids[r] = fork();
    ck_assert_int_ge(pids[r], 0);
    if (pids[r] == 0)
      _exit(loop_rank(r, W, NULL));
  }
  while (sh->t[0].round < KILL_AT)
    usleep(1000);
  const char *argv[] = {"--socket", daemon_.socket, "--stats-socket",
                        stats_sock, NULL};
  char why[200];
  ck_assert_msg(spt_ro_replace(&daemon_, &again, argv, upgrade, why,
                               sizeof(why)) == 0, "%s", why);
  int codes[W];
  int hung = spt_reap(pids, codes, W, 240);
  if (hung || codes[0] || codes[1] || codes[2] || codes[3])
    spt_daemon_dump_log(&again);
  ck_assert_int_eq(hung, 0);
  int seen;
  for (int r = 0; r < W; r++)
    ck_assert_msg(codes[r] == 0, "rank %d exited %d", r, codes[r]);
  ck_assert_msg(!spt_ro_tally_bad(sh->t, W, ROUNDS, LAST_OK, &seen, why,
                                  sizeof(why)), "%s", why);
  if (upgrade)
    ck_assert_msg(seen == 0, "%d ops failed across an upgrade", seen);
  /* The new daemon imported the ranks' device memory. */
  spt_daemon view = {0};
  snprintf(view.dir, sizeof(view.dir), "%s", daemon_.dir);
  ck_assert_msg(gpt_stat(&view, "mover_cuda_ops") +
                        gpt_stat(&view, "mover_nccl_ops") > 0,
                "the new daemon ran no device op");
}

START_TEST(device_ranks_survive_sigkill) {
  ranks_survive(0);
}
END_TEST

START_TEST(device_ranks_survive_upgrade) {
  ranks_survive(1);
}
END_TEST

/* One op of `step` (kind step % SPT_RO_KINDS) until it runs, as a
 * training loop redoes a step that failed: a failure must be the lost
 * context's SPC_EDEVICE, saying so, or SPC_ERESTARTED (bounded: 2000
 * tries a millisecond apart). 0 once it ran with the right data. */
static int step_until_done(spt_ro *r, int step) {
  for (int tries = 0; tries < 2000; tries++) {
    int wrong = 0;
    int rc = spt_ro_op(r, step % SPT_RO_KINDS, N, step, &wrong);
    if (rc == SPC_OK)
      return wrong ? (fprintf(stderr, "rank %d step %d: wrong data\n",
                              r->rank, step), 1) : 0;
    const char *msg = spc_last_error(r->k.c);
    if (rc == SPC_EDEVICE && strstr(msg, "CUDA context is lost") != NULL)
      sh->failed[r->rank]++;
    else if (rc != SPC_ERESTARTED)
      return fprintf(stderr, "rank %d step %d: %s\n", r->rank, step, msg), 1;
    usleep(1000);
  }
  return fprintf(stderr, "rank %d step %d: never ran\n", r->rank, step), 1;
}

#define FAULT_STEPS 120

/* Every rank on GPU 0, so the CUDA mover runs the ops with kernels: the
 * daemon's 60th launch faults (spcsim's injection, once on the machine,
 * at about step 50). */
static int fault_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_ro r = {.rank = rank, .copy = copy};
  GPT_CUDA(cudaSetDevice(0));
  if (spt_rk_open(&r.k, daemon_.socket, "gpu-fault", rank, w, 0) < 0 ||
      spc_set_reconnect_timeout(r.k.c, 30000) < 0 ||
      spc_buffer_alloc_device(r.k.c, 0, 4 << 20, &r.dev) < 0) {
    fprintf(stderr, "rank %d: %s\n", rank, spc_last_error(r.k.c));
    return 1;
  }
  int bad = 0;
  for (int step = 0; step < FAULT_STEPS && !bad; step++)
    bad = step_until_done(&r, step);
  /* The faulted daemon's imports of this memory go with its process. */
  for (int i = 0; i < 30000 && !sh->old_gone; i++)
    usleep(1000);
  if (!bad && spc_buffer_free(r.dev) != SPC_OK) {
    fprintf(stderr, "rank %d: free: %s\n", rank, spc_last_error(r.k.c));
    bad = 1;
  }
  return spt_rk_close(&r.k, bad);
}

/* The pid of the daemon serving socket path now (its SO_PEERCRED). */
static pid_t serving_pid(const char *path) {
  int fd = spt_raw_connect(path);
  struct ucred cr;
  socklen_t len = sizeof(cr);
  pid_t pid = fd >= 0 && getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr,
                                    &len) == 0 ? cr.pid : -1;
  if (fd >= 0)
    close(fd);
  return pid;
}

/* A device fault in the daemon's kernel (an illegal address) ends its
 * CUDA context for good: the op it hit fails on every rank with
 * SPC_EDEVICE saying the context is lost, and so do device ops until a
 * new daemon, which the faulted one starts (as systemctl reload would),
 * has taken the sockets over; the ranks, redoing a failed step, go on
 * there with the right data, and can free their device memory (spcsim
 * refuses a free while a live process imports it). The faulted daemon
 * exits 0. This process stands in for systemd as the subreaper that
 * adopts the new daemon. */
START_TEST(device_fault_hands_over_to_a_new_daemon) {
  ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  ck_assert_int_eq(spt_daemon_stop(&daemon_), 0);
  setenv("SPCSIM_FAULT_LAUNCH", "spcolld:60:once", 1);
  ck_assert_int_eq(spt_daemon_start(&daemon_, NULL), 0);
  unsetenv("SPCSIM_FAULT_LAUNCH");
  snprintf(stats_sock, sizeof(stats_sock), "%s/spcolld.stats.sock",
           daemon_.dir);
  pid_t pids[W];
  for (int r = 0; r < W; r++) {
    pids[r] = fork();
    ck_assert_int_ge(pids[r], 0);
    if (pids[r] == 0)
      _exit(fault_rank(r, W, NULL));
  }
  int st = 0, gone = 0;
  for (int i = 0; i < 60000 && !gone; i++) /* a guard, not a timing check */
    if (!(gone = waitpid(daemon_.pid, &st, WNOHANG) == daemon_.pid))
      usleep(1000);
  if (!gone) {
    spt_daemon_dump_log(&daemon_);
    for (int r = 0; r < W; r++)
      kill(pids[r], SIGKILL);
  }
  ck_assert_msg(gone, "the faulted daemon did not hand over and exit");
  pid_t old = daemon_.pid;
  daemon_.pid = 0;
  sh->old_gone = 1;
  again = daemon_;
  again.pid = serving_pid(daemon_.socket);
  int codes[W];
  int hung = spt_reap(pids, codes, W, 240);
  if (hung || codes[0] || codes[1] || codes[2] || codes[3] ||
      !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    spt_daemon_dump_log(&daemon_);
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0,
                "the faulted daemon ended with status %#x", st);
  ck_assert_msg(again.pid > 0 && again.pid != old,
                "no new daemon serves the socket (pid %d)", (int)again.pid);
  ck_assert_int_eq(hung, 0);
  printf("device_fault_hands_over: ops failed on the lost context, per "
         "rank: %d %d %d %d\n", sh->failed[0], sh->failed[1], sh->failed[2],
         sh->failed[3]);
  for (int r = 0; r < W; r++) {
    ck_assert_msg(codes[r] == 0, "rank %d exited %d", r, codes[r]);
    ck_assert_msg(sh->failed[r] >= 1, "rank %d saw no op fail on the "
                  "lost context", r);
  }
  ck_assert_msg(gpt_stat(&again, "mover_cuda_ops") > 0,
                "the new daemon ran no device op");
}
END_TEST

int main(void) {
  ndev = gpt_require_gpu(); /* before any rank forks: exit 77 without */
  Suite *s = suite_create("gpu_restart");
  TCase *tc = tcase_create("gpu_restart");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, device_ranks_survive_sigkill);
  tcase_add_test(tc, device_ranks_survive_upgrade);
  if (getenv("SPCSIM_STATE") != NULL)
    tcase_add_test(tc, device_fault_hands_over_to_a_new_daemon);
  else
    printf("not run: device_fault_hands_over_to_a_new_daemon needs the "
           "simulator's fault injection\n");
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}

#else

int main(void) {
  gpt_require_gpu();
  return 77;
}

#endif
