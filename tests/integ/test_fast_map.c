/* Fast-path ops read in place (issue 18, client/fast/client_fast_map.c): ranks
 * that may take each other's buffer fds read each other's inputs and
 * outputs where the callers keep them, for ops from 64 KiB up to
 * fast_map_bytes per rank (8 MiB by default: past fast_bytes). Here: such
 * ops of every shape of use, between staged and daemon-path ops and with
 * ranks of one op in different modes, checked and counted exactly; what a
 * rank maps of the others' buffers stays bounded and goes when they free
 * them; a rank whose buffer cannot be read fails the op on every rank,
 * and the group goes on; a killed rank fails the others. Every op kind
 * runs in place in the op suites too (test_ops_*.c, 16 MiB buffers). */
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "client_internal.h"
#include "fast_ranks.h"
#include "harness.h"

#define MID 200000  /* floats: 800 KB, under fast_bytes */
#define LARGE 400000 /* floats: 1.6 MB, over fast_bytes */

static spt_daemon daemon_;
static char stats_sock[300];

typedef struct {
  char msg[8][400];
  int rc[8];
  char group[64];
} shared_t;
static shared_t *sh;

static void setup(void) {
  sh = spt_fixture_up(&daemon_, NULL, sizeof(*sh));
  ck_assert_ptr_nonnull(sh);
  snprintf(stats_sock, sizeof(stats_sock), "%s/spcolld.stats.sock",
           daemon_.dir);
}

static void teardown(void) {
  ck_assert_int_eq(spt_fixture_down(&daemon_, sh, sizeof(*sh)), 0);
}

typedef spt_rk rk;

static int rk_open(rk *k, int rank, int world) {
  return spt_rk_open(k, daemon_.socket, sh->group, rank, world, 0);
}

/* An in-place all_reduce (in == out) of n floats, checked: read in place
 * too when it is not reduced replicated (client_fast_map.c, reads_safely:
 * each rank writes only what nobody else reads before the barrier). */
static int reduce_inplace_once(rk *k, int rank, int w, size_t n, int step) {
  int64_t s[1] = {(int64_t)n};
  spc_tensor t;
  if (spt_rk_tensor(k, &t, 1, s) == NULL ||
      spt_rk_reduce_check(k, rank, w, &t, &t, step, 0))
    return 1;
  k->used = 0;
  return 0;
}

#define ITERS 3
/* MID, LARGE, the gather, the all_to_all_v, LARGE in place */
#define IN_PLACE_PER_ITER 5
#define FAST_PER_ITER 6     /* and the small all_reduce */

/* Two small ops first: from a group's third op on, every rank knows
 * whether all may read each other's buffers (client_fast_map.c). */
static int warm_up(rk *k, int rank, int w) {
  return spt_rk_reduce_once(k, rank, w, 8, 0, 0) ||
         spt_rk_reduce_once(k, rank, w, 8, 1, 0);
}

static int every_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w) < 0)
    return 1;
  int bad = warm_up(&k, rank, w);
  for (int it = 0; it < ITERS && !bad; it++) {
    int step = 2 + it * 8;
    bad = spt_rk_reduce_once(&k, rank, w, MID, step, 0) ||
          spt_rk_reduce_once(&k, rank, w, 8, step + 1, 0) ||
          spt_rk_reduce_once(&k, rank, w, LARGE, step + 2, 0) ||
          spt_rk_gather_once(&k, rank, w, 100000, 1000, 1, step + 3) ||
          spt_rk_reduce_once(&k, rank, w, MID, step + 4, 1) || /* daemon */
          /* one rank sends 600 KB to one other: those two read in
           * place, the others stage, in one op */
          spt_rk_a2av_once(&k, rank, w, it % w, (it + 1) % w, 150000,
                           step + 5) ||
          reduce_inplace_once(&k, rank, w, LARGE, step + 6);
  }
  if (!bad && rank == 0) {
    char want[160];
    snprintf(want, sizeof(want), "shm %s ops=%d errors=0 in_place=%d",
             sh->group, 2 + ITERS * FAST_PER_ITER, ITERS * IN_PLACE_PER_ITER);
    bad = !spt_stats_has(stats_sock, want);
  }
  return spt_rk_close(&k, bad);
}

START_TEST(ops_read_in_place) {
  for (int w = 2; w <= 4; w++) {
    snprintf(sh->group, sizeof(sh->group), "inplace%d", w);
    ck_assert_int_eq(spt_run_ranks(w, every_rank, NULL, 120), 0);
  }
}
END_TEST

/* A daemon whose fast_map_min_bytes (and its value for more ranks than
 * CPUs) is above every op here: its ranks stage what they would have read
 * in place, the segment carrying the setting to them
 * (kernels/fast_tune.h); the effective config says it. */
static const char *const map_min_high[] = {
    "--fast-map-min-bytes", "4000000", "--fast-map-min-over-bytes", "4000000",
    NULL};

static void setup_map_min_high(void) {
  sh = spt_fixture_up(&daemon_, map_min_high, sizeof(*sh));
  ck_assert_ptr_nonnull(sh);
  snprintf(stats_sock, sizeof(stats_sock), "%s/spcolld.stats.sock",
           daemon_.dir);
}

static int staged_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w) < 0)
    return 1;
  int bad = warm_up(&k, rank, w) ||
            spt_rk_reduce_once(&k, rank, w, MID, 2, 0) ||
            spt_rk_reduce_once(&k, rank, w, LARGE, 3, 0) ||
            spt_rk_gather_once(&k, rank, w, 100000, 1000, 1, 4);
  if (!bad && rank == 0) {
    char want[160];
    /* The small two and MID through the segment; LARGE and the gather,
     * over fast_bytes, through the daemon. */
    snprintf(want, sizeof(want), "shm %s ops=3 errors=0 in_place=0",
             sh->group);
    bad = !spt_stats_has(stats_sock, want) ||
          !spt_stats_has(stats_sock, "\nfast_map_min_bytes 4000000\n");
  }
  return spt_rk_close(&k, bad);
}

START_TEST(map_min_from_the_daemon) {
  snprintf(sh->group, sizeof(sh->group), "mapmin");
  ck_assert_int_eq(spt_run_ranks(3, staged_rank, NULL, 120), 0);
}
END_TEST

/* Mappings of buffer memfds in this process (own and other ranks'). */
static int memfd_maps(void) {
  FILE *m = fopen("/proc/self/maps", "r");
  char line[512];
  int n = 0;
  while (m && fgets(line, sizeof(line), m))
    n += strstr(line, "/memfd:spcoll ") != NULL;
  if (m)
    fclose(m);
  return n;
}

/* An all_reduce of MID floats in a buffer of its own, checked. */
static int reduce_in(rk *k, spc_buffer *b, int rank, int w, int step) {
  spc_buffer *keep = k->b;
  k->b = b;
  k->used = 0;
  int bad = spt_rk_reduce_once(k, rank, w, MID, step, 0);
  k->b = keep;
  return bad;
}

/* An all_reduce of MID floats from a buffer into another, checked. */
static int reduce_across(rk *k, spc_buffer *from, spc_buffer *to, int rank,
                         int w, int step) {
  int64_t s[1] = {MID};
  spc_tensor in, out;
  return spc_tensor_init(&in, from, 0, SPC_FLOAT32, 1, s) < 0 ||
         spc_tensor_init(&out, to, 0, SPC_FLOAT32, 1, s) < 0 ||
         spt_rk_reduce_check(k, rank, w, &in, &out, step, 0);
}

/* Each rank runs ops in 20 buffers of its own in turn (more than a rank
 * keeps mapped of another), then from one input buffer into each of them
 * (the input's mapping must outlive the outputs' coming and going), then
 * frees all but one: a rank maps at most 16 buffers of each other rank,
 * and after one more op it holds those of the last buffer only, its own
 * besides. */
#define NBUF 20
static int freed_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w) < 0)
    return 1;
  int bad = warm_up(&k, rank, w);
  spc_buffer *b[NBUF] = {0};
  for (int i = 0; i < NBUF && !bad; i++)
    bad = spc_buffer_alloc(k.c, 2 << 20, &b[i]) < 0 ||
          reduce_in(&k, b[i], rank, w, i + 1);
  for (int i = 0; i < NBUF && !bad; i++)
    bad = reduce_across(&k, k.b, b[i], rank, w, 30 + i);
  /* k.b, b[], the others', and the client's submission ring */
  int most = 2 + NBUF + 16 * (w - 1);
  if (!bad && memfd_maps() > most) {
    fprintf(stderr, "rank %d: %d memfd mappings, at most %d\n", rank,
            memfd_maps(), most);
    bad = 1;
  }
  for (int i = 0; i < NBUF - 1 && !bad; i++)
    bad = spc_buffer_free(b[i]) < 0;
  bad = bad || reduce_in(&k, b[NBUF - 1], rank, w, 50);
  /* k.b, b[NBUF - 1], the other ranks' b[NBUF - 1], and the ring. */
  if (!bad && memfd_maps() != 3 + (w - 1)) {
    fprintf(stderr, "rank %d: %d memfd mappings after the frees, want %d\n",
            rank, memfd_maps(), 3 + (w - 1));
    bad = 1;
  }
  return spt_rk_close(&k, bad);
}

START_TEST(freed_buffers_let_go) {
  for (int w = 2; w <= 3; w++) {
    snprintf(sh->group, sizeof(sh->group), "freed%d", w);
    ck_assert_int_eq(spt_run_ranks(w, freed_rank, NULL, 120), 0);
  }
}
END_TEST

/* The last rank's buffer fd is made another file behind the library's
 * back: the others cannot map it, so the op fails on every rank (the
 * others name the mapping, the last rank names the rank that failed);
 * the group goes on, staging from then on. */
static int unmappable_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w) < 0)
    return 1;
  int bad = warm_up(&k, rank, w);
  int last = rank == w - 1, keep = -1;
  if (!bad && last) {
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    keep = dup(k.b->memfd);
    bad = null < 0 || keep < 0 || dup2(null, k.b->memfd) < 0;
    if (null >= 0)
      close(null);
  }
  int64_t s[1] = {MID};
  spc_tensor in, out;
  if (!bad && (!spt_rk_tensor(&k, &in, 1, s) || !spt_rk_tensor(&k, &out, 1, s)))
    bad = 1;
  int rc = bad ? 0 : spc_all_reduce(k.g, &in, &out, SPC_SUM);
  const char *msg = spc_last_error(k.c);
  const char *want = last ? "could not read the other ranks' buffers"
                          : "not the buffer the rank named";
  if (!bad && (rc != SPC_ESYSTEM || !strstr(msg, want))) {
    fprintf(stderr, "rank %d: got %d '%s', want '%s'\n", rank, rc, msg, want);
    bad = 1;
  }
  k.used = 0;
  bad = bad || spt_rk_reduce_once(&k, rank, w, 8, 3, 0);
  if (!bad && last)
    bad = dup2(keep, k.b->memfd) < 0;
  if (keep >= 0)
    close(keep);
  bad = bad || spt_rk_reduce_once(&k, rank, w, MID, 4, 0);
  if (!bad && rank == 0) {
    char line[160];
    snprintf(line, sizeof(line), "shm %s ops=4 errors=1 in_place=0",
             sh->group);
    bad = !spt_stats_has(stats_sock, line);
  }
  return spt_rk_close(&k, bad);
}

START_TEST(unmappable_fails_every_rank) {
  snprintf(sh->group, sizeof(sh->group), "unmappable");
  ck_assert_int_eq(spt_run_ranks(3, unmappable_rank, NULL, 120), 0);
}
END_TEST

/* The last rank dies before an op the others read in place: they fail
 * with the rank lost, as on the daemon's path. */
static int killed_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w) < 0)
    return 1;
  int bad = warm_up(&k, rank, w) ||
            spt_rk_reduce_once(&k, rank, w, MID, 2, 0);
  if (bad)
    return spt_rk_close(&k, 1);
  if (rank == w - 1)
    raise(SIGKILL);
  int64_t s[1] = {MID};
  spc_tensor in, out;
  if (!spt_rk_tensor(&k, &in, 1, s) || !spt_rk_tensor(&k, &out, 1, s))
    return spt_rk_close(&k, 1);
  int rc = spc_all_reduce(k.g, &in, &out, SPC_SUM);
  if (rc != SPC_EPEERLOST || !strstr(spc_last_error(k.c), "was lost")) {
    fprintf(stderr, "rank %d: got %d '%s'\n", rank, rc, spc_last_error(k.c));
    bad = 1;
  }
  return spt_rk_close(&k, bad);
}

START_TEST(killed_rank_fails_the_others) {
  snprintf(sh->group, sizeof(sh->group), "killed");
  ck_assert_int_eq(spt_run_ranks(3, killed_rank, NULL, 120), 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("fast_map");
  TCase *tc = tcase_create("fast_map");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, ops_read_in_place);
  tcase_add_test(tc, freed_buffers_let_go);
  tcase_add_test(tc, unmappable_fails_every_rank);
  tcase_add_test(tc, killed_rank_fails_the_others);
  suite_add_tcase(s, tc);
  TCase *tm = tcase_create("fast_map_min");
  tcase_add_checked_fixture(tm, setup_map_min_high, teardown);
  tcase_set_timeout(tm, 300);
  tcase_add_test(tm, map_min_from_the_daemon);
  suite_add_tcase(s, tm);
  return spt_run_suite(s);
}
