/* Ops under way in a group's shared segment (issue 18).
 * - Async ops take the daemon's path and spc_start returns at once,
 *   however many ops the group has under way, as a nonblocking
 *   collective does in MPI: a rank may start more of them than the
 *   segment's descriptor ring holds before it sends the message that the
 *   other ranks wait for before they start theirs. They come right after
 *   small ops that ran in tagged lines (client_fast_lines.c), and small
 *   ops follow them; every result is checked. The op timeout is short,
 *   so that a rank that blocks in spc_start fails the test instead of
 *   hanging it.
 * - A rank that waits in another group, or outside spcoll, after a fast
 *   op holds nobody's spc_start: the op said, as it ended, that the rank
 *   is done with its descriptors.
 * - A drain lets a fast op that some rank has published finish on every
 *   rank, as it lets the daemon's own ops finish, and refuses the next. */
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "client_fast.h"
#include "fast_ranks.h"
#include "fast_seg.h"
#include "harness.h"

/* Past the ring, twice. */
#define AHEAD (2 * (int)SPK_FSEG_RING + 8)
#define N 8        /* floats per async op */
#define LINED 24   /* floats per small op: 96 bytes, two tagged lines */
#define TAG 7
#define TIMEOUT_MS 5000

static spt_daemon daemon_;

typedef struct {
  char group[64];
  int answered; /* ranks refused after the drain */
  int started;  /* rank 1 started its async ops */
} shared_t;
static shared_t *sh;

static void setup(void) {
  sh = spt_fixture_up(&daemon_, NULL, sizeof(*sh));
  ck_assert_ptr_nonnull(sh);
}

static void teardown(void) {
  ck_assert_int_eq(spt_fixture_down(&daemon_, sh, sizeof(*sh)), 0);
}

typedef struct {
  spc_tensor in[AHEAD], out[AHEAD];
  spc_request *req[AHEAD];
} async_ops;

static int start_all(spt_rk *k, int rank, async_ops *a) {
  int64_t s[1] = {N};
  spc_op op = spc_op_all_reduce(SPC_SUM);
  for (int i = 0; i < AHEAD; i++) {
    float *x = spt_rk_tensor(k, &a->in[i], 1, s);
    if (x == NULL || spt_rk_tensor(k, &a->out[i], 1, s) == NULL)
      return 1;
    for (size_t j = 0; j < N; j++)
      x[j] = spt_rk_val(rank, j, 100 + i);
    if (spc_start(k->g, &op, &a->in[i], &a->out[i], &a->req[i]) < 0) {
      fprintf(stderr, "rank %d: spc_start %d: %s\n", rank, i,
              spc_last_error(k->c));
      return 1;
    }
  }
  return 0;
}

static int wait_all(spt_rk *k, int rank, int w, async_ops *a) {
  int bad = 0;
  for (int i = 0; i < AHEAD; i++) {
    if (spc_wait(&a->req[i]) < 0) {
      fprintf(stderr, "rank %d: spc_wait %d: %s\n", rank, i,
              spc_last_error(k->c));
      bad = 1;
      continue;
    }
    const float *y = spc_tensor_data(&a->out[i]);
    for (size_t j = 0; j < N && !bad; j++) {
      float ref = 0;
      for (int r = 0; r < w; r++)
        ref += spt_rk_val(r, j, 100 + i);
      if (y[j] != ref) {
        fprintf(stderr, "rank %d op %d: [%zu] = %g, want %g\n", rank, i, j,
                y[j], ref);
        bad = 1;
      }
    }
  }
  return bad;
}

/* The last rank starts every op, then tells rank 0, which waits for that
 * before it starts its own; the ranks between start theirs at once. */
static int ahead_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (spt_rk_open(&k, daemon_.socket, sh->group, rank, w, TIMEOUT_MS) < 0)
    return 1;
  int bad = 0;
  for (int step = 0; step < 4 && !bad; step++)
    bad = spt_rk_reduce_once(&k, rank, w, LINED, step, 0);
  static async_ops a;
  int64_t one = 1;
  spc_tensor token;
  if (bad || spt_rk_tensor(&k, &token, 1, &one) == NULL)
    return spt_rk_close(&k, 1);
  if (rank == 0 && spc_recv(k.g, &token, w - 1, TAG, NULL) < 0) {
    fprintf(stderr, "rank 0: recv: %s\n", spc_last_error(k.c));
    return spt_rk_close(&k, 1);
  }
  if (start_all(&k, rank, &a))
    return spt_rk_close(&k, 1);
  if (rank == w - 1 && spc_send(k.g, &token, 0, TAG) < 0) {
    fprintf(stderr, "rank %d: send: %s\n", rank, spc_last_error(k.c));
    return spt_rk_close(&k, 1);
  }
  bad = wait_all(&k, rank, w, &a);
  k.used = 0;
  for (int step = 4; step < 8 && !bad; step++)
    bad = spt_rk_reduce_once(&k, rank, w, LINED, step, 0);
  return spt_rk_close(&k, bad);
}

/* A rank that waits in one group's segment holds no rank of another
 * group that needs it done with its last op there. Here rank 0 runs a
 * fast op in group A, then waits in group B for rank 1, which first starts its
 * async ops in A: the 16th lands on the ring slot of A's fast op, so it
 * needs rank 0 to be done with that op. */
static int two_groups_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  spc_group *b = NULL;
  if (spt_rk_open(&k, daemon_.socket, "twoA", rank, w, TIMEOUT_MS) < 0)
    return 1;
  if (spc_group_join(k.c, "twoB", w, rank, &b) < 0) {
    fprintf(stderr, "rank %d: join: %s\n", rank, spc_last_error(k.c));
    return spt_rk_close(&k, 1);
  }
  static async_ops a;
  spc_group *ga = k.g;
  int bad = spt_rk_reduce_once(&k, rank, w, N, 0, 0);
  if (!bad && rank == 1)
    bad = start_all(&k, rank, &a);
  k.g = b;
  bad = bad || spt_rk_reduce_once(&k, rank, w, N, 1, 0);
  k.g = ga;
  if (!bad && rank == 0)
    bad = start_all(&k, rank, &a);
  bad = bad || wait_all(&k, rank, w, &a);
  return spt_rk_close(&k, bad);
}

/* The same, with rank 0 waiting outside spcoll (on a word the ranks
 * share, as on another library's barrier) after its fast op. */
static int elsewhere_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (spt_rk_open(&k, daemon_.socket, sh->group, rank, w, TIMEOUT_MS) < 0)
    return 1;
  static async_ops a;
  int bad = spt_rk_reduce_once(&k, rank, w, N, 0, 0);
  if (!bad && rank == 1)
    bad = start_all(&k, rank, &a);
  if (rank == 1)
    __atomic_store_n(&sh->started, 1, __ATOMIC_RELEASE);
  while (rank == 0 && !__atomic_load_n(&sh->started, __ATOMIC_ACQUIRE))
    usleep(1000);
  if (!bad && rank == 0)
    bad = start_all(&k, rank, &a);
  bad = bad || wait_all(&k, rank, w, &a);
  return spt_rk_close(&k, bad);
}

START_TEST(a_rank_busy_elsewhere_holds_no_start) {
  snprintf(sh->group, sizeof(sh->group), "elsewhere");
  ck_assert_int_eq(spt_run_ranks(2, elsewhere_rank, NULL, 120), 0);
}
END_TEST

START_TEST(a_wait_in_one_group_frees_another) {
  ck_assert_int_eq(spt_run_ranks(2, two_groups_rank, NULL, 120), 0);
}
END_TEST

START_TEST(async_ops_ahead_of_the_others) {
  for (int w = 2; w <= 3; w++) {
    snprintf(sh->group, sizeof(sh->group), "ahead%d", w);
    ck_assert_int_eq(spt_run_ranks(w, ahead_rank, NULL, 120), 0);
  }
}
END_TEST

/* Whether rank r of g's segment waits in it. */
static int waits(spc_group *g, int r) {
  spk_fseg_hdr *h = (spk_fseg_hdr *)spc__fast_hdr(g);
  const spk_fseg_rank *a = spk_fseg_rank_of(h, h->stage_bytes, r);
  return __atomic_load_n(&a->waiting, __ATOMIC_ACQUIRE) != 0;
}

/* Rank 0 issues an all_reduce and waits in the segment; then rank 1 has
 * the daemon drain and issues its own: the op was under way, so it ends
 * well on both. The next op is refused in the daemon's words ("no new
 * ops"), or finds it gone once it drained. */
static int drain_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (spt_rk_open(&k, daemon_.socket, sh->group, rank, w, 0) < 0 ||
      spt_rk_reduce_once(&k, rank, w, N, 0, 0))
    return 1;
  if (rank == 1) {
    while (!waits(k.g, 0))
      usleep(1000);
    if (spt_ctl(&daemon_, "drain") != 0)
      return spt_rk_close(&k, 1);
  }
  int bad = spt_rk_reduce_once(&k, rank, w, N, 1, 0);
  return spt_rk_close(&k, bad || spt_rk_refused_after_drain(&k, rank, N, w,
                                                             &sh->answered));
}

START_TEST(drain_lets_an_op_under_way_finish) {
  snprintf(sh->group, sizeof(sh->group), "drainway");
  ck_assert_int_eq(spt_run_ranks(2, drain_rank, NULL, 120), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("fast_under_way");
  TCase *tc = tcase_create("fast_under_way");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, async_ops_ahead_of_the_others);
  tcase_add_test(tc, a_wait_in_one_group_frees_another);
  tcase_add_test(tc, a_rank_busy_elsewhere_holds_no_start);
  tcase_add_test(tc, drain_lets_an_op_under_way_finish);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
