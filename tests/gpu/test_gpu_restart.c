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

int main(void) {
  ndev = gpt_require_gpu(); /* before any rank forks: exit 77 without */
  Suite *s = suite_create("gpu_restart");
  TCase *tc = tcase_create("gpu_restart");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, device_ranks_survive_sigkill);
  tcase_add_test(tc, device_ranks_survive_upgrade);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}

#else

int main(void) {
  gpt_require_gpu();
  return 77;
}

#endif
