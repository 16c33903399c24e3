/* Caller memory as spcoll buffers (spc_buffer_wrap): ops on plain malloc'd
 * memory, read in place by the other ranks with process_vm_readv
 * (client/fast/client_fast_cma.c) or staged, checked against the same ops on
 * spcoll buffers. Every op kind the torch backend uses, at sizes that
 * stage through the segment, that are read in place, and past
 * fast_map_bytes (read in place too: caller memory would otherwise be
 * copied three times); steps that stride or reduce (through the scratch)
 * and plain copies (straight into the output); all_reduce in place; a
 * rank whose op goes to the daemon (the op is staged by spc_run for the
 * wrapping ranks); the calls that refuse caller memory, at once; the
 * stats' read_in_place, and a rank that may not read the others (a
 * seccomp filter) or names no segment of the group: the group stages,
 * saying why; 2 to 4 ranks, each rank's tensors at another offset from a
 * 64-byte boundary. */
#include <check.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "check_run.h"
#include "client_fast_internal.h"
#include "fast_ranks.h"
#include "harness.h"

static spt_daemon daemon_;
static char stats_sock[300];

typedef struct {
  char group[64];
  int ready;
} shared_t;
static shared_t *sh;

static void setup(void) {
  /* Past fast_map_bytes at 2 MiB: LARGE is then read in place only
   * because it is caller memory. */
  static const char *const extra[] = {"--fast-map-bytes", "2097152", NULL};
  sh = spt_fixture_up(&daemon_, extra, sizeof(*sh));
  ck_assert_ptr_nonnull(sh);
  snprintf(stats_sock, sizeof(stats_sock), "%s/spcolld.stats.sock",
           daemon_.dir);
}

static void teardown(void) {
  ck_assert_int_eq(spt_fixture_down(&daemon_, sh, sizeof(*sh)), 0);
}

/* One rank's view of an op: its input and output as malloc'd floats. */
typedef struct {
  spc_client *c;
  spc_group *g;
  int rank, world;
} rk;

static float val(int r, size_t i, int step) {
  return spt_rk_val(r, i, step);
}

/* A wrapped float tensor of shape s at *mem in fresh malloc'd memory
 * (*base, to free), filled with rank r's values of step, or with -1.
 * Each rank's tensors start 12 bytes further past a 64-byte boundary than
 * the rank before's, so reads through the scratch land where its
 * alignment must match theirs (client_fast_cma.c). */
static int wrapped(rk *k, spc_buffer **b, void **base, float **mem,
                   spc_tensor *t, int nd, const int64_t *s, int step,
                   int fill) {
  size_t n = 1;
  for (int i = 0; i < nd; i++)
    n *= (size_t)s[i];
  if (posix_memalign(base, 64, n * sizeof(float) + 64) != 0)
    return -1;
  *mem = (float *)((char *)*base + 12 * (k->rank % 5));
  for (size_t i = 0; i < n; i++)
    (*mem)[i] = fill ? val(k->rank, i, step) : -1.0f;
  if (spc_buffer_wrap(k->c, *mem, n * sizeof(float), b) < 0 ||
      spc_tensor_init(t, *b, 0, SPC_FLOAT32, nd, s) < 0) {
    fprintf(stderr, "rank %d: wrap: %s\n", k->rank, spc_last_error(k->c));
    return -1;
  }
  return 0;
}

static int report(rk *k, const char *what, int step, int rc) {
  if (rc < 0)
    fprintf(stderr, "rank %d step %d: %s: %s\n", k->rank, step, what,
            spc_last_error(k->c));
  return rc < 0;
}

/* An op's input (filled with this rank's values of step) and output
 * (filled with -1), each caller memory of its own. */
typedef struct {
  spc_buffer *b[2];
  void *base[2];
  float *x[2];
  spc_tensor t[2];
} io;

static int io_make(rk *k, io *p, int nd, const int64_t *si,
                   const int64_t *so, int step) {
  memset(p, 0, sizeof(*p));
  return wrapped(k, &p->b[0], &p->base[0], &p->x[0], &p->t[0], nd, si, step,
                 1) < 0 ||
                 wrapped(k, &p->b[1], &p->base[1], &p->x[1], &p->t[1], nd, so,
                         step, 0) < 0
             ? -1
             : 0;
}

static void io_free(io *p) {
  for (int i = 0; i < 2; i++) {
    spc_buffer_free(p->b[i]);
    free(p->base[i]);
  }
}

/* Where a 2-D op's expected values come from: the input's columns, the
 * pieces' rows and columns, the op's dim, the step. */
typedef struct {
  int64_t in_cols, rows, cols;
  int dim, step;
} geo;
typedef float (*want_fn)(const rk *k, const geo *g, int64_t i, int64_t j);

/* Every element of y ([out_rows, out_cols]) against want; 0 when right. */
static int check_2d(rk *k, const char *what, const float *y, int64_t out_rows,
                    int64_t out_cols, want_fn want, const geo *g) {
  for (int64_t i = 0; i < out_rows; i++)
    for (int64_t j = 0; j < out_cols; j++) {
      float w = want(k, g, i, j);
      if (y[i * out_cols + j] != w) {
        fprintf(stderr, "rank %d step %d: %s dim %d [%lld,%lld] = %g, want "
                "%g\n", k->rank, g->step, what, g->dim, (long long)i,
                (long long)j, y[i * out_cols + j], w);
        return 1;
      }
    }
  return 0;
}

/* The rank-order sum of element e of every rank's input (exact). */
static float sum_of(const rk *k, size_t e, int step) {
  float ref = 0;
  for (int r = 0; r < k->world; r++)
    ref += val(r, e, step);
  return ref;
}

static float want_sum(const rk *k, const geo *g, int64_t i, int64_t j) {
  (void)i;
  return sum_of(k, (size_t)j, g->step);
}

/* all_reduce of n floats, out of place or in place, checked exactly. */
static int reduce_once(rk *k, size_t n, int in_place, int step) {
  int64_t s[1] = {(int64_t)n};
  io p;
  int bad = io_make(k, &p, 1, s, s, step) < 0 ||
            report(k, "all_reduce", step,
                   spc_all_reduce(k->g, &p.t[0], &p.t[in_place ? 0 : 1],
                                  SPC_SUM));
  geo g = {0, 1, (int64_t)n, 0, step};
  bad = bad || check_2d(k, "all_reduce", p.x[in_place ? 0 : 1], 1,
                        (int64_t)n, want_sum, &g);
  io_free(&p);
  return bad;
}

/* Output [i, j] of an all_gather along dim: rank r's [li, lj]. */
static float want_gather(const rk *k, const geo *g, int64_t i, int64_t j) {
  (void)k;
  int r = (int)(g->dim == 0 ? i / g->rows : j / g->cols);
  int64_t li = g->dim == 0 ? i % g->rows : i;
  int64_t lj = g->dim == 1 ? j % g->cols : j;
  return val(r, (size_t)(li * g->cols + lj), g->step);
}

/* all_gather along dim of [rows, cols] per rank, checked. */
static int gather_once(rk *k, int64_t rows, int64_t cols, int dim, int step) {
  int64_t si[2] = {rows, cols};
  int64_t so[2] = {dim == 0 ? rows * k->world : rows,
                   dim == 1 ? cols * k->world : cols};
  geo g = {cols, rows, cols, dim, step};
  io p;
  int bad = io_make(k, &p, 2, si, so, step) < 0 ||
            report(k, "all_gather", step,
                   spc_all_gather(k->g, &p.t[0], &p.t[1], dim, NULL)) ||
            check_2d(k, "all_gather", p.x[1], so[0], so[1], want_gather, &g);
  io_free(&p);
  return bad;
}

/* Output [i, j] of a reduce_scatter along dim: the sum of this rank's
 * piece of every input. */
static float want_scatter(const rk *k, const geo *g, int64_t i, int64_t j) {
  int64_t gi = g->dim == 0 ? i + k->rank * g->rows : i;
  int64_t gj = g->dim == 1 ? j + k->rank * g->cols : j;
  return sum_of(k, (size_t)(gi * g->in_cols + gj), g->step);
}

/* reduce_scatter along dim of [rows * world, cols] (dim 0) or [rows,
 * cols * world] (dim 1), checked exactly. */
static int scatter_once(rk *k, int64_t rows, int64_t cols, int dim,
                        int step) {
  int w = k->world;
  int64_t si[2] = {dim == 0 ? rows * w : rows, dim == 1 ? cols * w : cols};
  int64_t so[2] = {rows, cols};
  geo g = {si[1], rows, cols, dim, step};
  io p;
  int bad = io_make(k, &p, 2, si, so, step) < 0 ||
            report(k, "reduce_scatter", step,
                   spc_reduce_scatter(k->g, &p.t[0], &p.t[1], dim, NULL)) ||
            check_2d(k, "reduce_scatter", p.x[1], rows, cols, want_scatter,
                     &g);
  io_free(&p);
  return bad;
}

/* Output row block r of an all_to_all comes from rank r: its piece
 * `rank` of the scattered dim. */
static float want_a2a(const rk *k, const geo *g, int64_t i, int64_t j) {
  int r = (int)(i / g->rows);
  int64_t li = i % g->rows;
  int64_t gi = g->dim == 0 ? li + k->rank * g->rows : li;
  int64_t gj = g->dim == 1 ? j + k->rank * g->cols : j;
  return val(r, (size_t)(gi * g->in_cols + gj), g->step);
}

/* all_to_all_v of [world * rows, cols] along dim 0 (plain copies), or
 * all_to_all of [rows, world * cols] scattering 1, gathering 0 (strided). */
static int a2a_once(rk *k, int64_t rows, int64_t cols, int sdim, int step) {
  int w = k->world;
  int64_t si[2] = {sdim == 0 ? rows * w : rows, sdim == 1 ? cols * w : cols};
  int64_t so[2] = {rows * w, cols};
  int64_t splits[SPT_RK_MAXW];
  for (int j = 0; j < w; j++)
    splits[j] = rows;
  spc_op op = sdim == 0 ? spc_op_all_to_all_v(splits, splits)
                        : spc_op_all_to_all(sdim, 0, so[0]);
  geo g = {si[1], rows, cols, sdim, step};
  io p;
  int bad = io_make(k, &p, 2, si, so, step) < 0 ||
            report(k, "all_to_all", step,
                   spc_run(k->g, &op, &p.t[0], &p.t[1])) ||
            check_2d(k, "all_to_all", p.x[1], so[0], cols, want_a2a, &g);
  io_free(&p);
  return bad;
}

static int open_rank(rk *k, int rank, int w) {
  k->rank = rank, k->world = w;
  k->c = spt_connect(daemon_.socket);
  if (k->c == NULL)
    return -1;
  if (spc_group_join(k->c, sh->group, w, rank, &k->g) < 0) {
    fprintf(stderr, "rank %d: join: %s\n", rank, spc_last_error(k->c));
    return -1;
  }
  return 0;
}

#define SMALL 64      /* floats: staged through the segment */
#define MID 100000    /* floats: 400 KB, read in place */
#define LARGE 1000000 /* floats: 4 MB, past fast_map_bytes */

static int ops_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (open_rank(&k, rank, w) < 0)
    return 1;
  int bad = 0;
  /* Twice: the first ops of a group stage while the ranks probe. */
  for (int it = 0; it < 2 && !bad; it++) {
    int st = 1 + it * 20;
    bad = reduce_once(&k, SMALL, 0, st) || reduce_once(&k, SMALL, 1, st + 1) ||
          reduce_once(&k, MID, 0, st + 2) || reduce_once(&k, MID, 1, st + 3) ||
          reduce_once(&k, LARGE, 0, st + 4) ||
          reduce_once(&k, LARGE, 1, st + 5) ||
          gather_once(&k, 16, 4, 0, st + 6) ||
          gather_once(&k, 500, 200, 0, st + 7) ||
          gather_once(&k, 500, 200, 1, st + 8) ||
          scatter_once(&k, 500, 200, 0, st + 9) ||
          scatter_once(&k, 300, 400, 1, st + 10) ||
          a2a_once(&k, 4, 4, 0, st + 11) ||
          a2a_once(&k, 500, 200, 0, st + 12) ||
          a2a_once(&k, 500, 200, 1, st + 13) ||
          a2a_once(&k, 2000, 500, 0, st + 14);
  }
  if (!bad && rank == 0) {
    char want[160];
    /* Of 15 ops an iteration, 11 read in place: all but the 4 small. */
    snprintf(want, sizeof(want), "shm %s ops=30 errors=0 in_place=22",
             sh->group);
    bad = !spt_stats_has(stats_sock, want) ||
          !spt_stats_has(stats_sock, "read_in_place=yes");
  }
  spc_disconnect(k.c);
  return bad;
}

START_TEST(ops_on_caller_memory) {
  for (int w = 2; w <= 4; w++) {
    snprintf(sh->group, sizeof(sh->group), "wrap%d", w);
    ck_assert_int_eq(spt_run_ranks(w, ops_rank, NULL, 180), 0);
  }
}
END_TEST

/* The last rank runs each all_reduce through spc_start on an spcoll
 * buffer: every rank takes the daemon's path, and spc_run stages the
 * others' caller memory for it (the group's segment never reads it). */
static int staged_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (open_rank(&k, rank, w) < 0)
    return 1;
  int bad = 0;
  for (int step = 1; step <= 4 && !bad; step++) {
    size_t n = step % 2 ? MID : LARGE;
    if (rank < w - 1) {
      bad = reduce_once(&k, n, step > 2, step);
      continue;
    }
    spc_buffer *b = NULL;
    int64_t s[1] = {(int64_t)n};
    spc_tensor t;
    spc_request *req = NULL;
    spc_op op = spc_op_all_reduce(SPC_SUM);
    bad = spc_buffer_alloc(k.c, n * sizeof(float), &b) < 0 ||
          spc_tensor_init(&t, b, 0, SPC_FLOAT32, 1, s) < 0;
    float *x = bad ? NULL : spc_tensor_data(&t);
    for (size_t i = 0; i < n && !bad; i++)
      x[i] = val(rank, i, step);
    bad = bad || report(&k, "spc_start", step,
                        spc_start(k.g, &op, &t, &t, &req)) ||
          report(&k, "spc_wait", step, spc_wait(&req));
    spc_buffer_free(b);
  }
  spc_disconnect(k.c);
  return bad;
}

START_TEST(staged_for_the_daemon) {
  for (int w = 2; w <= 3; w++) {
    snprintf(sh->group, sizeof(sh->group), "staged%d", w);
    ck_assert_int_eq(spt_run_ranks(w, staged_rank, NULL, 120), 0);
  }
}
END_TEST

/* The calls that do not take caller memory refuse it at once, naming it,
 * and nothing reaches the group: an op after them runs. */
static int refused_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (open_rank(&k, rank, w) < 0)
    return 1;
  float x[256];
  spc_buffer *b = NULL;
  int64_t s[1] = {256};
  spc_tensor t;
  spc_request *req = NULL;
  spc_op op = spc_op_all_reduce(SPC_SUM);
  int bad = spc_buffer_wrap(k.c, x, sizeof(x), &b) < 0 ||
            spc_tensor_init(&t, b, 0, SPC_FLOAT32, 1, s) < 0;
  int rcs[3] = {
      spc_start(k.g, &op, &t, &t, &req),
      spc_start_send(k.g, &t, (rank + 1) % w, 0, &req),
      spc_start_recv(k.g, &t, (rank + 1) % w, 0, NULL, &req)};
  for (int i = 0; i < 3 && !bad; i++)
    if (rcs[i] != SPC_EINVAL ||
        strstr(spc_last_error(k.c), "spc_buffer_wrap") == NULL) {
      fprintf(stderr, "rank %d: call %d gave %d (%s), want SPC_EINVAL "
              "naming spc_buffer_wrap\n", rank, i, rcs[i],
              spc_last_error(k.c));
      bad = 1;
    }
  spc_buffer *none = NULL;
  if (!bad && (spc_buffer_wrap(k.c, NULL, 8, &none) != SPC_EINVAL ||
               spc_buffer_wrap(k.c, x, 0, &none) != SPC_EINVAL)) {
    fprintf(stderr, "rank %d: spc_buffer_wrap took NULL or 0 bytes\n", rank);
    bad = 1;
  }
  spc_buffer_free(b);
  bad = bad || reduce_once(&k, MID, 0, 7);
  spc_disconnect(k.c);
  return bad;
}

START_TEST(refused_where_not_taken) {
  snprintf(sh->group, sizeof(sh->group), "refused");
  ck_assert_int_eq(spt_run_ranks(2, refused_rank, NULL, 60), 0);
}
END_TEST

/* A seccomp filter that fails process_vm_readv with EPERM in this
 * process, as a container's profile may: its probes of the other ranks
 * fail there, though it may take their fds. */
static int deny_vm_readv(void) {
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & 0xffff)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {sizeof(f) / sizeof(f[0]), f};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
      prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) < 0) {
    perror("seccomp filter");
    return -1;
  }
  return 0;
}

/* The last rank may not read the others' memory: every rank stages, the
 * stats say why, and ops on caller memory stay right, in the segment's
 * staging or (past fast_bytes) staged by spc_run for the daemon. */
static int denied_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if ((rank == w - 1 && deny_vm_readv() < 0) || open_rank(&k, rank, w) < 0)
    return 1;
  int bad = 0;
  for (int it = 0; it < 2 && !bad; it++)
    bad = reduce_once(&k, SMALL, 0, 1 + it) ||
          reduce_once(&k, MID, 0, 3 + it) ||
          reduce_once(&k, LARGE, 1, 5 + it) ||
          a2a_once(&k, 2000, 500, 0, 7 + it) ||
          scatter_once(&k, 300, 400, 1, 9 + it);
  if (!bad && rank == 0) {
    char want[200];
    snprintf(want, sizeof(want), "in_place=0 stage_bytes");
    bad = !spt_stats_has(stats_sock, want);
    snprintf(want, sizeof(want), "read_in_place=no rank=%d "
             "could_not_read_rank=0 why=\"process_vm_readv: %s\"", w - 1,
             strerror(EPERM));
    bad = bad || !spt_stats_has(stats_sock, want);
  }
  spc_disconnect(k.c);
  return bad;
}

START_TEST(not_readable_stages) {
  for (int w = 2; w <= 3; w++) {
    snprintf(sh->group, sizeof(sh->group), "denied%d", w);
    ck_assert_int_eq(spt_run_ranks(w, denied_rank, NULL, 120), 0);
  }
}
END_TEST

/* The last rank names another fd of its own (its daemon socket) where the
 * others look for the group's segment, as a member pointing the others
 * at a process outside the group would: nobody reads in place, the stats
 * say why, and the ops stay right. The ranks start their ops together,
 * once it has. */
static int impostor_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (open_rank(&k, rank, w) < 0)
    return 1;
  if (rank == w - 1)
    spc__fast_rank(k.g->fast, rank)->id.probe_fd = k.c->fd;
  __atomic_add_fetch(&sh->ready, 1, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&sh->ready, __ATOMIC_SEQ_CST) < w)
    ;
  int bad = 0;
  for (int it = 0; it < 2 && !bad; it++)
    bad = reduce_once(&k, MID, 0, 1 + it) ||
          a2a_once(&k, 2000, 500, 0, 3 + it);
  if (!bad && rank == 0) {
    char want[200];
    snprintf(want, sizeof(want), "read_in_place=no rank=0 "
             "could_not_read_rank=%d why=\"its fd was not the group's "
             "segment\"", w - 1);
    bad = !spt_stats_has(stats_sock, "in_place=0 stage_bytes") ||
          !spt_stats_has(stats_sock, want);
  }
  spc_disconnect(k.c);
  return bad;
}

START_TEST(not_the_segment_not_read) {
  snprintf(sh->group, sizeof(sh->group), "impostor");
  ck_assert_int_eq(spt_run_ranks(3, impostor_rank, NULL, 120), 0);
}
END_TEST

/* A daemon whose per-uid limit leaves no room for rank 0's staging. */
static void setup_tight(void) {
  static const char *const extra[] = {"--uid-max-bytes", "12582912", NULL};
  sh = spt_fixture_up(&daemon_, extra, sizeof(*sh));
  ck_assert_ptr_nonnull(sh);
}

/* Rank 1 runs the op through spc_start on a buffer of its own, so every
 * rank takes the daemon's path; rank 0's staging of its caller memory is
 * refused by the daemon's limit after the segment said so. Neither rank
 * waits for the op timeout: the op fails on both (rank 0 in its own
 * words), and the group goes on. */
static int tight_rank(int rank, int w, void *arg) {
  (void)arg;
  rk k;
  if (open_rank(&k, rank, w) < 0)
    return 1;
  int64_t s[1] = {LARGE};
  spc_buffer *b = NULL;
  spc_tensor t;
  int bad = 0, rc;
  if (rank == 1) {
    spc_request *req = NULL;
    spc_op op = spc_op_all_reduce(SPC_SUM);
    bad = spc_buffer_alloc(k.c, LARGE * sizeof(float), &b) < 0 ||
          spc_tensor_init(&t, b, 0, SPC_FLOAT32, 1, s) < 0;
    __atomic_add_fetch(&sh->ready, 1, __ATOMIC_SEQ_CST);
    rc = bad ? 0 : spc_start(k.g, &op, &t, &t, &req);
    if (rc == SPC_OK)
      rc = spc_wait(&req);
  } else {
    while (__atomic_load_n(&sh->ready, __ATOMIC_SEQ_CST) < 1)
      ;
    float *x = NULL, *y = NULL;
    void *xb = NULL, *yb = NULL;
    spc_buffer *bi = NULL, *bo = NULL;
    spc_tensor ti, to;
    bad = wrapped(&k, &bi, &xb, &x, &ti, 1, s, 1, 1) < 0 ||
          wrapped(&k, &bo, &yb, &y, &to, 1, s, 1, 0) < 0;
    rc = bad ? 0 : spc_all_reduce(k.g, &ti, &to, SPC_SUM);
    if (!bad && strstr(spc_last_error(k.c), "failed on every rank") == NULL) {
      fprintf(stderr, "rank 0: %d '%s', want its staging's refusal\n", rc,
              spc_last_error(k.c));
      bad = 1;
    }
    spc_buffer_free(bi);
    spc_buffer_free(bo);
    free(xb);
    free(yb);
  }
  if (!bad && rc >= 0) {
    fprintf(stderr, "rank %d: the op succeeded without rank 0's staging\n",
            rank);
    bad = 1;
  }
  spc_buffer_free(b);
  bad = bad || reduce_once(&k, SMALL, 0, 9);
  spc_disconnect(k.c);
  return bad;
}

START_TEST(staging_refused_fails_every_rank) {
  snprintf(sh->group, sizeof(sh->group), "tight");
  ck_assert_int_eq(spt_run_ranks(2, tight_rank, NULL, 60), 0);
}
END_TEST

static Suite *suite(void) {
  Suite *s = suite_create("fast_wrap");
  TCase *tc = tcase_create("wrap");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, ops_on_caller_memory);
  tcase_add_test(tc, staged_for_the_daemon);
  tcase_add_test(tc, refused_where_not_taken);
  tcase_add_test(tc, not_readable_stages);
  tcase_add_test(tc, not_the_segment_not_read);
  suite_add_tcase(s, tc);
  TCase *tight = tcase_create("tight");
  tcase_add_checked_fixture(tight, setup_tight, teardown);
  tcase_set_timeout(tight, 120);
  tcase_add_test(tight, staging_refused_fails_every_rank);
  suite_add_tcase(s, tight);
  return s;
}

int main(void) {
  return spt_run_suite(suite());
}
