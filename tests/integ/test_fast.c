/* The shared-memory fast path (issue 18): small host ops of a group whose
 * ranks are all on this node run through the group's segment. Mixed with
 * the daemon path they keep one order; disagreements fail on every rank in
 * the same words; a killed, a stopped and an aborted group fail every
 * waiter (through the daemon's op timeout, not a time limit here); stats
 * count the segment's ops exactly (another uid: test_fast_uid.c).
 * Every other integration suite runs its small ops through the segment too
 * (the default fast_bytes is 1 MiB), against the same references. */
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_run.h"
#include "client_internal.h"
#include "fast_ranks.h"
#include "client_fast.h"
#include "fast_seg.h"
#include "harness.h"

#define NOBODY 65534
/* floats: 1.2 MB, over fast_bytes, so the daemon's. The fixtures here
 * read no op in place (fast_map_bytes 0), so that every fast op stages:
 * test_fast_map.c tests ops read in place. */
#define BIG 300000
#define MAP_OFF "--fast-map-bytes", "0"

static spt_daemon daemon_;
static char stats_sock[300];

/* What the ranks of one test share (fork keeps a MAP_SHARED mapping). */
typedef struct {
  char msg[8][400];
  int rc[8];
  pid_t pid[8];
  int drained;
  int answered; /* ranks refused after the drain */
  char group[64];
} shared_t;
static shared_t *sh;

static const char *const *daemon_args;

static void setup(void) {
  static const char *const fast[] = {MAP_OFF, NULL};
  sh = spt_fixture_up(&daemon_, daemon_args ? daemon_args : fast,
                      sizeof(*sh));
  ck_assert_ptr_nonnull(sh);
  snprintf(stats_sock, sizeof(stats_sock), "%s/spcolld.stats.sock",
           daemon_.dir);
}

static void teardown(void) {
  ck_assert_int_eq(spt_fixture_down(&daemon_, sh, sizeof(*sh)), 0);
}

static char *stats_text(void) {
  return spt_stats_text(stats_sock);
}

static int stats_has(const char *needle) {
  return spt_stats_has(stats_sock, needle);
}

typedef spt_rk rk;

static int rk_open(rk *k, int rank, int world, int64_t timeout_ms) {
  return spt_rk_open(k, daemon_.socket, sh->group, rank, world, timeout_ms);
}

/* fast, daemon (too big), fast, daemon (spc_start), fast, gather... */
static int mixed_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w, 0) < 0)
    return 1;
  int bad = 0;
  for (int step = 0; step < 12 && !bad; step++) {
    switch (step % 4) {
    case 0: bad = spt_rk_reduce_once(&k, rank, w, 16 + (size_t)step, step, 0); break;
    case 1: bad = spt_rk_reduce_once(&k, rank, w, BIG, step, 0); break;
    case 2: bad = spt_rk_gather_once(&k, rank, w, 2, 1, 3, step); break;
    case 3: bad = spt_rk_reduce_once(&k, rank, w, 33, step, 1); break;
    }
  }
  return spt_rk_close(&k, bad);
}

START_TEST(mixed_sequences) {
  for (int w = 2; w <= 4; w++) {
    snprintf(sh->group, sizeof(sh->group), "mixed%d", w);
    ck_assert_int_eq(spt_run_ranks(w, mixed_rank, NULL, 120), 0);
  }
}
END_TEST

/* Ops that fit half the staging alternate halves, so a rank may fill one
 * while the others still read the other; an op that fits no half takes
 * the whole area, and each rank decides this for its own op. Here one
 * rank at a time receives 720 KB (its op fits no half of the 1 MiB
 * staging: the others' do), between small all_reduces, 600 KB ones
 * (whole area on every rank), async ones (the daemon's) and small
 * all_to_all_v: every result checked. */
static int halves_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w, 0) < 0)
    return 1;
  int bad = 0;
  for (int step = 0; step < 48 && !bad; step++) {
    switch (step % 6) {
    case 0:
      bad = spt_rk_a2av_once(&k, rank, w, -1, step / 6 % w, 60000, step);
      break;
    case 1: bad = spt_rk_reduce_once(&k, rank, w, 16 + (size_t)step, step, 0); break;
    case 2: bad = spt_rk_a2av_once(&k, rank, w, -1, step % w, 5, step);
      break;
    case 3: bad = spt_rk_reduce_once(&k, rank, w, 150000, step, 0); break;
    case 4: bad = spt_rk_reduce_once(&k, rank, w, 9, step, 1); break;
    case 5: bad = spt_rk_reduce_once(&k, rank, w, 40, step, 0); break;
    }
  }
  return spt_rk_close(&k, bad);
}

START_TEST(halves_and_whole) {
  for (int w = 2; w <= 4; w++) {
    snprintf(sh->group, sizeof(sh->group), "halves%d", w);
    ck_assert_int_eq(spt_run_ranks(w, halves_rank, NULL, 120), 0);
  }
}
END_TEST

/* The same op over and over, as trainers run them: every rank publishes
 * a repeat (the first line of its descriptor only) and may run one op
 * ahead of the others; 100 gathers then 100 all_reduces, each checked;
 * then all_reduces of 16, 8 and 160 bytes in turn (the first two travel
 * in the line the others poll, kernels/fast_seg.h). */
static int repeat_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w, 0) < 0)
    return 1;
  int bad = 0;
  static const size_t n[3] = {4, 2, 40}; /* inline, inline, staged */
  for (int step = 0; step < 300 && !bad; step++)
    bad = step < 100   ? spt_rk_gather_once(&k, rank, w, 2, 1, 3, step)
          : step < 200 ? spt_rk_reduce_once(&k, rank, w, 24, step, 0)
                       : spt_rk_reduce_once(&k, rank, w, n[step % 3], step, 0);
  return spt_rk_close(&k, bad);
}

START_TEST(repeated_ops) {
  for (int w = 2; w <= 4; w++) {
    snprintf(sh->group, sizeof(sh->group), "repeat%d", w);
    ck_assert_int_eq(spt_run_ranks(w, repeat_rank, NULL, 120), 0);
  }
}
END_TEST

/* Inputs of 17 to 112 bytes travel in tagged lines, which a reader of a
 * repeated op polls instead of the line every rank polls
 * (client_fast_lines.c). Here ops go in and out of lines: repeats of one
 * line and of two; ops of the same input bytes but another kind in turn
 * (the same lines, never a repeat); inline and staged inputs between
 * them; the daemon's path (too big, and async) between repeats; and a
 * gather whose ranks' inputs are inline, in one line, in two or staged,
 * by rank, repeated. Twice over, every result checked. */
typedef struct {
  char kind; /* r: all_reduce, a: async all_reduce, g: all_gather, u: the
              * gather of 4 + 6 rank floats */
  int64_t n;
  int times;
} lines_op;

static const lines_op lines_seq[] = {
    {'r', 10, 6},  {'r', 20, 6},  {'g', 10, 1}, {'r', 10, 1},
    {'g', 10, 1},  {'r', 10, 1},  {'r', 4, 3},  {'r', 10, 3},
    {'r', 40, 3},  {'r', 20, 3},  {'r', BIG, 1}, {'r', 20, 3},
    {'a', 20, 1},  {'r', 20, 3},  {'u', 0, 8},  {'r', 10, 5},
};

static int lines_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w, 0) < 0)
    return 1;
  int bad = 0, step = 0;
  size_t nops = sizeof(lines_seq) / sizeof(lines_seq[0]);
  for (size_t i = 0; i < 2 * nops && !bad; i++) {
    const lines_op *o = &lines_seq[i % nops];
    for (int t = 0; t < o->times && !bad; t++, step++)
      bad = o->kind == 'g'   ? spt_rk_gather_once(&k, rank, w, o->n, 0, 1, step)
            : o->kind == 'u' ? spt_rk_gather_once(&k, rank, w, 4, 6, 1, step)
                             : spt_rk_reduce_once(&k, rank, w, (size_t)o->n,
                                                  step, o->kind == 'a');
  }
  return spt_rk_close(&k, bad);
}

START_TEST(tagged_lines) {
  static const int ws[] = {2, 3, 8};
  for (int i = 0; i < 3; i++) {
    snprintf(sh->group, sizeof(sh->group), "lines%d", ws[i]);
    ck_assert_int_eq(spt_run_ranks(ws[i], lines_rank, NULL, 120), 0);
  }
}
END_TEST

/* The same call again publishes the descriptor it published last
 * (client_fast_again.c) only while it is still the op of the plan. Here
 * every call of all_to_all_v names the same tensors and the same list
 * arrays, but the lists' entries change every fourth call (row and column
 * sums stay 3 w: r sends 3 + c to j when r + j is even, 3 - c when odd,
 * c in -1, 0, 1), so only the entries tell those calls apart; and an
 * all_reduce after the second call of each four takes the plan away from
 * the third. Every result is checked. */
static float other_val(int r, int j, int64_t i, int step) {
  return (float)(r * 1000 + j * 100 + i + step * 7);
}

static int other_lists_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w, 0) < 0)
    return 1;
  int64_t n = 3 * w, is[SPT_RK_MAXW], os[SPT_RK_MAXW];
  spc_tensor in, out;
  float *x = spt_rk_tensor(&k, &in, 1, &n), *y = spt_rk_tensor(&k, &out, 1, &n);
  int bad = x == NULL || y == NULL;
  for (int step = 0; step < 60 && !bad; step++) {
    int c = step / 4 % 3 - 1;
    for (int j = 0, at = 0; j < w; j++) {
      is[j] = os[j] = 3 + ((rank + j) % 2 ? -c : c);
      for (int64_t i = 0; i < is[j]; i++)
        x[at++] = other_val(rank, j, i, step);
    }
    if (spc_all_to_all_v(k.g, &in, &out, is, os) < 0) {
      fprintf(stderr, "rank %d step %d: %s\n", rank, step,
              spc_last_error(k.c));
      bad = 1;
    }
    for (int r = 0, at = 0; r < w && !bad; r++)
      for (int64_t i = 0; i < os[r] && !bad; i++, at++)
        if (y[at] != other_val(r, rank, i, step)) {
          fprintf(stderr, "rank %d step %d: from %d [%lld] = %g, want %g\n",
                  rank, step, r, (long long)i, y[at],
                  other_val(r, rank, i, step));
          bad = 1;
        }
    if (step % 4 == 1 && !bad)
      bad = spt_rk_reduce_once(&k, rank, w, 5, step, 0);
  }
  return spt_rk_close(&k, bad);
}

START_TEST(same_call_other_lists) {
  for (int w = 2; w <= 4; w += 2) {
    snprintf(sh->group, sizeof(sh->group), "lists%d", w);
    ck_assert_int_eq(spt_run_ranks(w, other_lists_rank, NULL, 120), 0);
  }
}
END_TEST

/* Every rank of 3 counts: 6 fast ops of each (3 all_reduce, 3
 * all_gather) ran through the segment; the rest went to the daemon. The
 * fast row of the engine table counts the segment's ops too. */
static int count_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w, 0) < 0)
    return 1;
  int bad = 0;
  for (int step = 0; step < 12 && !bad; step++)
    bad = step % 4 == 1 ? spt_rk_reduce_once(&k, rank, w, BIG, step, 0)
          : step % 4 == 3 ? spt_rk_reduce_once(&k, rank, w, 8, step, 1)
          : step % 4 == 0 ? spt_rk_reduce_once(&k, rank, w, 8, step, 0)
                          : spt_rk_gather_once(&k, rank, w, 2, 1, 3, step);
  /* one disagreement through the segment: every rank fails alike */
  int64_t s[1] = {4 + (rank == w - 1)};
  spc_tensor in, out;
  if (!bad && (!spt_rk_tensor(&k, &in, 1, s) || !spt_rk_tensor(&k, &out, 1, s)))
    bad = 1;
  int rc = bad ? 0 : spc_all_reduce(k.g, &in, &out, SPC_SUM);
  sh->rc[rank] = rc;
  snprintf(sh->msg[rank], sizeof(sh->msg[rank]), "%s", spc_last_error(k.c));
  bad |= rc != SPC_EMISMATCH;
  k.used = 0;
  bad |= !bad && spt_rk_reduce_once(&k, rank, w, 8, 99, 0); /* still usable */
  if (!bad && rank == 0) {
    char want[128];
    snprintf(want, sizeof(want), "shm %s ops=7 errors=1", sh->group);
    bad = !stats_has(want) ||
          !stats_has("all_reduce count=10 errors=1") ||
          !stats_has("all_gather count=3 errors=0") ||
          !stats_has("\nmover_fast_ops 7\n");
  }
  return spt_rk_close(&k, bad);
}

/* A daemon-path op's answer is published in the segment for the rank
 * that polls for it (mid-size ops; the tcase's daemon polls 20 us): after
 * a big op the rank's answered word is that op's request id; a fast op
 * leaves it alone. */
static int answered_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w, 0) < 0)
    return 1;
  const spk_fseg_hdr *h = spc__fast_hdr(k.g);
  int bad = h == NULL || h->mid_spin_ns != 20000;
  for (int step = 0; step < 4 && !bad; step++) {
    bad = spt_rk_reduce_once(&k, rank, w, step % 2 ? 8 : BIG, step, 0);
    uint64_t got = __atomic_load_n(&spk_fseg_rank_of((spk_fseg_hdr *)h, h->stage_bytes, rank)
                                        ->answered, __ATOMIC_ACQUIRE);
    /* a fast op sends nothing: the last request is still the big op */
    if (!bad && got != k.c->next_id) {
      fprintf(stderr, "rank %d step %d: answered %llu, last request %llu\n",
              rank, step, (unsigned long long)got,
              (unsigned long long)k.c->next_id);
      bad = 1;
    }
  }
  return spt_rk_close(&k, bad);
}

START_TEST(daemon_answers_in_the_segment) {
  snprintf(sh->group, sizeof(sh->group), "answered");
  ck_assert_int_eq(spt_run_ranks(2, answered_rank, NULL, 120), 0);
}
END_TEST

/* The header is the group's to write; the daemon must size and index
 * nothing by it. A rank scribbles over the layout fields, asks for stats
 * (which read every rank's counters) and leaves (the daemon unmaps the
 * segment): the daemon lives on and serves a new group. */
static int vandal_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w, 0) < 0)
    return 1;
  int bad = spt_rk_reduce_once(&k, rank, w, 8, 0, 0);
  spk_fseg_hdr *h = (spk_fseg_hdr *)spc__fast_hdr(k.g);
  bad |= h == NULL;
  if (!bad && rank == 0) {
    h->size = UINT64_MAX / 2;
    h->rank_off = UINT64_MAX / 4;
    h->rank_bytes = UINT64_MAX / 8;
    h->stage_bytes = UINT64_MAX;
    h->world = 1u << 30;
    for (int kk = 0; kk < SPK_OP_COUNT; kk++)
      h->op_bytes[kk] = UINT64_MAX;
    char *t = stats_text();
    bad |= t == NULL;
    free(t);
  }
  /* Leave without another op: this group's own ranks are the ones a
   * scribbled header may hurt. */
  spc_disconnect(k.c);
  return bad;
}

static int healthy_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w, 0) < 0)
    return 1;
  int bad = spt_rk_reduce_once(&k, rank, w, 8, 1, 0) ||
            spt_rk_reduce_once(&k, rank, w, BIG, 2, 0);
  return spt_rk_close(&k, bad);
}

START_TEST(scribbled_header_hurts_no_daemon) {
  snprintf(sh->group, sizeof(sh->group), "vandal");
  ck_assert_int_eq(spt_run_ranks(2, vandal_rank, NULL, 120), 0);
  char *t = stats_text(); /* after the group is gone, too */
  ck_assert_ptr_nonnull(t);
  free(t);
  snprintf(sh->group, sizeof(sh->group), "after-vandal");
  ck_assert_int_eq(spt_run_ranks(2, healthy_rank, NULL, 120), 0);
}
END_TEST

START_TEST(stats_exact_and_disagreement) {
  snprintf(sh->group, sizeof(sh->group), "count");
  ck_assert_int_eq(spt_run_ranks(3, count_rank, NULL, 120), 0);
  for (int r = 1; r < 3; r++)
    ck_assert_str_eq(sh->msg[r], sh->msg[0]);
  ck_assert_msg(strstr(sh->msg[0], "disagree on input shape"), "%s", sh->msg[0]);
}
END_TEST

/* Rank 0 small, the last rank too big for the segment: both go to the
 * daemon, which names the disagreement to every rank. */
static int split_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w, 0) < 0)
    return 1;
  int64_t s[1] = {rank == w - 1 ? BIG : 4};
  spc_tensor in, out;
  if (!spt_rk_tensor(&k, &in, 1, s) || !spt_rk_tensor(&k, &out, 1, s))
    return spt_rk_close(&k, 1);
  sh->rc[rank] = spc_all_reduce(k.g, &in, &out, SPC_SUM);
  snprintf(sh->msg[rank], sizeof(sh->msg[rank]), "%s", spc_last_error(k.c));
  return spt_rk_close(&k, sh->rc[rank] != SPC_EMISMATCH);
}

START_TEST(disagreement_across_paths) {
  snprintf(sh->group, sizeof(sh->group), "split");
  ck_assert_int_eq(spt_run_ranks(2, split_rank, NULL, 120), 0);
  ck_assert_str_eq(sh->msg[1], sh->msg[0]);
}
END_TEST

/* mode 0: the last rank is SIGKILLed; 1: it is SIGSTOPped (the op timeout
 * fails the others, then rank 0 kills it); 2: the last rank aborts the
 * group through spcollctl while the others wait in the segment. */
static int ctl(const char *args) {
  return spt_ctl(&daemon_, args);
}

static int fault_rank(int rank, int w, void *arg) {
  int mode = *(const int *)arg;
  rk k;
  if (rk_open(&k, rank, w, mode == 1 ? 300 : 0) < 0)
    return 1;
  int bad = spt_rk_reduce_once(&k, rank, w, 8, 0, 0); /* all fine once */
  if (bad)
    return spt_rk_close(&k, 1);
  int last = rank == w - 1;
  sh->pid[rank] = getpid();
  if (last && mode == 0)
    raise(SIGKILL);
  if (last && mode == 1)
    raise(SIGSTOP);
  if (last && mode == 2) {
    /* wait until the others sleep in the segment, shown as pending */
    char want[96];
    snprintf(want, sizeof(want), "waiting_for=%d path=shm", rank);
    for (;;) {
      char *t = stats_text();
      int there = t && strstr(t, want);
      free(t);
      if (there)
        break;
      usleep(20000);
    }
    char args[128];
    snprintf(args, sizeof(args), "abort %s", sh->group);
    bad = ctl(args) != 0;
  }
  int64_t s[1] = {8};
  spc_tensor in, out;
  if (!spt_rk_tensor(&k, &in, 1, s) || !spt_rk_tensor(&k, &out, 1, s))
    return spt_rk_close(&k, 1);
  int rc = spc_all_reduce(k.g, &in, &out, SPC_SUM);
  const char *msg = spc_last_error(k.c);
  static const int want_rc[3] = {SPC_EPEERLOST, SPC_ETIMEDOUT, SPC_EABORTED};
  static const char *const want_msg[3] = {"was lost", "never issued it",
                                          "aborted by operator"};
  if (rc != want_rc[mode] || !strstr(msg, want_msg[mode])) {
    fprintf(stderr, "rank %d mode %d: got %d '%s'\n", rank, mode, rc, msg);
    bad = 1;
  }
  if (mode == 1 && rank == 0)
    kill(sh->pid[w - 1], SIGKILL);
  return spt_rk_close(&k, bad);
}

START_TEST(killed_stopped_aborted) {
  for (int mode = 0; mode < 3; mode++) {
    snprintf(sh->group, sizeof(sh->group), "fault%d", mode);
    /* The killed and the stopped rank die by a signal: one failed rank. */
    ck_assert_int_eq(spt_run_ranks(3, fault_rank, &mode, 120),
                     mode == 2 ? 0 : 1);
  }
}
END_TEST

/* Sub-groups of a split get their own segment: ranks of color rank % 2
 * run an all_reduce there, counted on the sub-group's shm line. */
static int split_sub_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  spc_group *sub;
  if (rk_open(&k, rank, w, 0) < 0 ||
      spc_group_split(k.g, rank % 2, rank, &sub) < 0 || sub == NULL)
    return 1;
  spc_group *parent = k.g;
  k.g = sub;
  int bad = spt_rk_reduce_once(&k, rank / 2, w / 2, 8, 3, 0);
  k.g = parent;
  bad |= spt_rk_reduce_once(&k, rank, w, 8, 4, 0); /* both done with the first */
  if (!bad && rank == 0)
    bad = !stats_has("/0 ops=1 errors=0") || !stats_has("/1 ops=1 errors=0");
  /* Nobody leaves (freeing a sub-group) before rank 0 has looked. */
  bad |= spt_rk_reduce_once(&k, rank, w, 8, 5, 0);
  return spt_rk_close(&k, bad);
}

START_TEST(split_groups_have_segments) {
  snprintf(sh->group, sizeof(sh->group), "splitme");
  ck_assert_int_eq(spt_run_ranks(4, split_sub_rank, NULL, 120), 0);
}
END_TEST

/* A drain reaches the segment: after it, small ops go to the daemon and
 * are refused there, on every rank, in its words ("no new ops"), or find
 * it gone (a drained daemon with nothing in flight exits at once). Never
 * do they still run through the segment. */
static int drain_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w, 0) < 0 || spt_rk_reduce_once(&k, rank, w, 8, 0, 0))
    return 1;
  if (rank == 0) {
    if (ctl("drain") != 0)
      return spt_rk_close(&k, 1);
    __atomic_store_n(&sh->drained, 1, __ATOMIC_RELEASE);
  }
  while (!__atomic_load_n(&sh->drained, __ATOMIC_ACQUIRE))
    usleep(1000);
  return spt_rk_close(&k, spt_rk_refused_after_drain(&k, rank, 8, w,
                                                      &sh->answered));
}

START_TEST(drain_reaches_the_segment) {
  snprintf(sh->group, sizeof(sh->group), "drain");
  ck_assert_int_eq(spt_run_ranks(2, drain_rank, NULL, 120), 0);
}
END_TEST

/* --fast-op-bytes all_reduce=0: all_reduce always takes the daemon path,
 * all_gather still the segment; every rank decides alike (the
 * thresholds are in the segment), so nothing hangs, and the stats count
 * each path exactly. */
static int per_op_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w, 0) < 0)
    return 1;
  int bad = 0;
  for (int step = 0; step < 6 && !bad; step++)
    bad = step % 2 ? spt_rk_gather_once(&k, rank, w, 2, 1, 3, step)
                   : spt_rk_reduce_once(&k, rank, w, 8, step, 0);
  if (!bad && rank == 0) {
    char want[128];
    snprintf(want, sizeof(want), "shm %s ops=3 errors=0", sh->group);
    bad = !stats_has(want) || !stats_has("all_reduce count=3 errors=0") ||
          !stats_has("all_gather count=3 errors=0");
  }
  bad |= spt_rk_reduce_once(&k, rank, w, 8, 9, 0); /* rank 0 has looked */
  return spt_rk_close(&k, bad);
}

START_TEST(per_op_thresholds) {
  snprintf(sh->group, sizeof(sh->group), "perop");
  ck_assert_int_eq(spt_run_ranks(3, per_op_rank, NULL, 120), 0);
}
END_TEST

static void setup_per_op(void) {
  static const char *const args[] = {"--fast-op-bytes", "all_reduce=0",
                                     MAP_OFF, NULL};
  daemon_args = args;
  setup();
  daemon_args = NULL;
}

/* A segment counts as its owner's registered bytes: with fast_bytes at
 * 4 MiB a 2-rank segment needs over 16 MiB, past uid_max_bytes (10 MiB),
 * so the group gets none and its ops take the daemon path, while the
 * ranks' own 4 MiB buffers still fit. */
static int no_room_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (rk_open(&k, rank, w, 0) < 0)
    return 1;
  int bad = spc__fast_hdr(k.g) != NULL;
  if (bad)
    fprintf(stderr, "rank %d: a segment past uid_max_bytes\n", rank);
  bad |= spt_rk_reduce_once(&k, rank, w, 8, 0, 0);
  return spt_rk_close(&k, bad);
}

START_TEST(segments_count_as_registered_bytes) {
  snprintf(sh->group, sizeof(sh->group), "noroom");
  ck_assert_int_eq(spt_run_ranks(2, no_room_rank, NULL, 120), 0);
  ck_assert(stats_has("errors=0")); /* the daemon is fine */
}
END_TEST

static void setup_mid_spin(void) {
  static const char *const args[] = {"--mid-spin-us", "20", MAP_OFF, NULL};
  daemon_args = args;
  setup();
  daemon_args = NULL;
}

static void setup_small_budget(void) {
  static const char *const args[] = {"--fast-bytes", "4194304",
                                     "--uid-max-bytes", "10485760", NULL};
  daemon_args = args;
  setup();
  daemon_args = NULL;
}

int main(void) {
  Suite *s = suite_create("fast");
  TCase *ms = tcase_create("mid_spin");
  tcase_add_checked_fixture(ms, setup_mid_spin, teardown);
  tcase_set_timeout(ms, 300);
  tcase_add_test(ms, daemon_answers_in_the_segment);
  suite_add_tcase(s, ms);
  TCase *nr = tcase_create("no_room");
  tcase_add_checked_fixture(nr, setup_small_budget, teardown);
  tcase_set_timeout(nr, 300);
  tcase_add_test(nr, segments_count_as_registered_bytes);
  suite_add_tcase(s, nr);
  TCase *po = tcase_create("per_op");
  tcase_add_checked_fixture(po, setup_per_op, teardown);
  tcase_set_timeout(po, 300);
  tcase_add_test(po, per_op_thresholds);
  suite_add_tcase(s, po);
  TCase *tc = tcase_create("fast");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, mixed_sequences);
  tcase_add_test(tc, halves_and_whole);
  tcase_add_test(tc, repeated_ops);
  tcase_add_test(tc, tagged_lines);
  tcase_add_test(tc, same_call_other_lists);
  tcase_add_test(tc, scribbled_header_hurts_no_daemon);
  tcase_add_test(tc, stats_exact_and_disagreement);
  tcase_add_test(tc, disagreement_across_paths);
  tcase_add_test(tc, killed_stopped_aborted);
  tcase_add_test(tc, drain_reaches_the_segment);
  tcase_add_test(tc, split_groups_have_segments);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
