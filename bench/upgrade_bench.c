/* spcoll-upgrade-bench: how long ops are unavailable across an upgrade of
 * the daemon (spcolld --upgrade) under running ranks. Ranks loop over an
 * all_reduce; the benchmark upgrades the daemon K times, each time once
 * the ranks have run a while. An upgrade's unavailability: the longest
 * time any rank went without finishing an op well, from the new daemon's
 * start until every rank has finished an op it started after the old
 * daemon exited. Prints each upgrade, then p50 and max; asserts
 * nothing.
 * Usage: spcoll-upgrade-bench [--spcolld PATH] [--ranks N] [--upgrades K]
 *        [--bytes B] [--csv FILE] */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "spcoll.h"

#define MAX_RANKS 16
#define MAX_UPGRADES 100

typedef struct {
  volatile int open;           /* the upgrade under way, -1: none */
  volatile int64_t ended_ns[MAX_UPGRADES];   /* the old daemon exited */
  volatile int64_t back_ns[MAX_UPGRADES][MAX_RANKS];
  volatile int64_t gap_ns[MAX_UPGRADES][MAX_RANKS];
  volatile int failed[MAX_UPGRADES][MAX_RANKS];
  volatile int64_t iters[MAX_RANKS];
  volatile int64_t stop_at;    /* every rank runs this many ops (0: on) */
  volatile int bad[MAX_RANKS];
} shared_t;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* An op from t0 to t1 ended with rc; the last one that ended well, at
 * *last_ok. */
static void note(shared_t *sh, int rank, int64_t t0, int64_t t1, int rc,
                 int64_t *last_ok) {
  int e = sh->open;
  if (e >= 0 && rc < 0)
    sh->failed[e][rank]++;
  if (e >= 0 && rc == 0) {
    if (t1 - *last_ok > sh->gap_ns[e][rank])
      sh->gap_ns[e][rank] = t1 - *last_ok;
    if (sh->ended_ns[e] != 0 && t0 >= sh->ended_ns[e] &&
        sh->back_ns[e][rank] == 0)
      sh->back_ns[e][rank] = t1;
  }
  if (rc == 0)
    *last_ok = t1;
}

static int rank_main(shared_t *sh, const char *sock, int rank, int world,
                     size_t bytes) {
  spc_client *c;
  spc_group *g;
  spc_buffer *b;
  if (spc_connect(sock, "upgrade-bench", &c) < 0 ||
      spc_group_join(c, "upgrade-bench", world, rank, &g) < 0 ||
      spc_buffer_alloc(c, 2 * bytes, &b) < 0) {
    fprintf(stderr, "rank %d: setup: %s\n", rank, spc_last_error(NULL));
    return 1;
  }
  int64_t n[1] = {(int64_t)(bytes / 4)};
  spc_tensor in, out;
  spc_tensor_init(&in, b, 0, SPC_FLOAT32, 1, n);
  spc_tensor_init(&out, b, bytes, SPC_FLOAT32, 1, n);
  int64_t last_ok = now_ns();
  for (int64_t it = 0; sh->stop_at == 0 || it < sh->stop_at; it++) {
    int64_t t0 = now_ns();
    int rc = spc_all_reduce(g, &in, &out, SPC_SUM);
    note(sh, rank, t0, now_ns(), rc, &last_ok);
    if (rc < 0 && rc != SPC_ERESTARTED) {
      fprintf(stderr, "rank %d: %s\n", rank, spc_last_error(c));
      sh->bad[rank] = 1;
    }
    sh->iters[rank] = it + 1;
  }
  spc_disconnect(c);
  return 0;
}

static int all_back(const shared_t *sh, int e, int world) {
  for (int r = 0; r < world; r++)
    if (sh->back_ns[e][r] == 0)
      return 0;
  return 1;
}

static int cmp_i64(const void *a, const void *b) {
  int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
  return x < y ? -1 : x > y;
}

/* One upgrade: a new daemon takes the sockets over; the old one exits. */
static int upgrade(spt_daemon *d, int e, shared_t *sh, const char *stats) {
  spt_daemon next;
  const char *argv[] = {"--socket", d->socket, "--stats-socket", stats,
                        "--upgrade", NULL};
  sh->open = e;
  pid_t old = d->pid;
  if (spt_daemon_start(&next, argv) < 0)
    return -1;
  int st;
  if (waitpid(old, &st, 0) != old || !WIFEXITED(st) || WEXITSTATUS(st)) {
    fprintf(stderr, "upgrade %d: the old daemon ended with %#x\n", e, st);
    return -1;
  }
  sh->ended_ns[e] = now_ns();
  unlink(d->log);
  rmdir(d->dir);
  *d = next;
  return 0;
}

int main(int argc, char **argv) {
  int world = 4, upgrades = 10;
  size_t bytes = 64 << 10;
  const char *csv = NULL;
  static const struct option opts[] = {
      {"spcolld", required_argument, NULL, 's'},
      {"ranks", required_argument, NULL, 'r'},
      {"upgrades", required_argument, NULL, 'u'},
      {"bytes", required_argument, NULL, 'b'},
      {"csv", required_argument, NULL, 'c'},
      {NULL, 0, NULL, 0}};
  for (int o; (o = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
    if (o == 's')
      setenv("SPCOLLD", optarg, 1);
    else if (o == 'r')
      world = atoi(optarg);
    else if (o == 'u')
      upgrades = atoi(optarg);
    else if (o == 'b')
      bytes = (size_t)strtoull(optarg, NULL, 10);
    else if (o == 'c')
      csv = optarg;
    else
      return 2;
  }
  if (world < 2 || world > MAX_RANKS || upgrades < 1 ||
      upgrades > MAX_UPGRADES || bytes < 4) {
    fprintf(stderr, "spcoll-upgrade-bench: --ranks 2..%d, --upgrades "
            "1..%d, --bytes at least 4\n", MAX_RANKS, MAX_UPGRADES);
    return 2;
  }
  shared_t *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  spt_daemon d;
  if (sh != MAP_FAILED)
    sh->open = -1;
  if (sh == MAP_FAILED || spt_daemon_start(&d, NULL) < 0) {
    fprintf(stderr, "spcoll-upgrade-bench: no daemon\n");
    return 1;
  }
  char stats[200];
  snprintf(stats, sizeof(stats), "%s/spcolld.stats.sock", d.dir);
  char first_dir[sizeof(d.dir)];
  snprintf(first_dir, sizeof(first_dir), "%s", d.dir);
  pid_t pids[MAX_RANKS];
  for (int r = 0; r < world; r++)
    if ((pids[r] = fork()) == 0)
      _exit(rank_main(sh, d.socket, r, world, bytes));
  int rc = 0;
  for (int e = 0; e < upgrades && rc == 0; e++) {
    usleep(200000); /* the ranks run */
    rc = upgrade(&d, e, sh, stats);
    while (rc == 0 && !all_back(sh, e, world))
      usleep(1000);
    sh->open = -1;
  }
  int64_t most = 0;
  for (int r = 0; r < world; r++)
    most = sh->iters[r] > most ? sh->iters[r] : most;
  sh->stop_at = most + 1000;
  int codes[MAX_RANKS];
  if (spt_reap(pids, codes, world, 120) != 0)
    rc = 1;
  FILE *out = csv ? fopen(csv, "w") : NULL;
  if (out)
    fprintf(out, "upgrade,ranks,bytes,unavailable_ms,failed_ops\n");
  printf("# spcoll-upgrade-bench: %d ranks, all_reduce of %zu bytes, %d "
         "upgrades (spcolld --upgrade)\n", world, bytes, upgrades);
  int64_t gaps[MAX_UPGRADES];
  for (int e = 0; e < upgrades && rc == 0; e++) {
    int failed = 0;
    gaps[e] = 0;
    for (int r = 0; r < world; r++) {
      gaps[e] = sh->gap_ns[e][r] > gaps[e] ? sh->gap_ns[e][r] : gaps[e];
      failed += sh->failed[e][r];
    }
    printf("upgrade %2d: unavailable %8.3f ms, %d ops failed (all ranks)\n",
           e, gaps[e] * 1e-6, failed);
    if (out)
      fprintf(out, "%d,%d,%zu,%.3f,%d\n", e, world, bytes, gaps[e] * 1e-6,
              failed);
  }
  if (rc == 0) {
    qsort(gaps, (size_t)upgrades, sizeof(gaps[0]), cmp_i64);
    printf("unavailable across an upgrade: p50 %.3f ms, max %.3f ms\n",
           gaps[(upgrades - 1) / 2] * 1e-6, gaps[upgrades - 1] * 1e-6);
  }
  if (out)
    fclose(out);
  for (int r = 0; r < world; r++)
    rc |= sh->bad[r];
  spt_daemon_stop(&d);
  char log[128];
  snprintf(log, sizeof(log), "%s/spcolld.log", first_dir);
  unlink(log);
  rmdir(first_dir);
  return rc ? 1 : 0;
}
