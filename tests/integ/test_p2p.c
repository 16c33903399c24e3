/* Point-to-point sends and receives (issue 14): matched per (group,
 * source, destination, tag) in posting order, checked against each other,
 * and ended by the collectives' errors (a lost rank, the op timeout,
 * abort). Data is checked element by element; stats count the pairs.
 * SPT_NODES=n (tests/run.sh: multinode_p2p, n = 3) runs the same checks
 * across n daemons peering over UCX on loopback, rank r on node r % n, in
 * bigger worlds where a check needs ranks on several nodes, plus the loss
 * of a whole node. */
#include <check.h>
#include <poll.h>
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
#include "harness.h"

static spt_daemon daemon_;
static spt_nodes nodes_;
static int nnodes; /* 0: one daemon (daemon_) */

/* What the ranks of one test share (fork keeps a MAP_SHARED mapping). */
typedef struct {
  char msg[8][400];
  int rc[8];
  int flag;
  char group[64];
} shared_t;
static shared_t *sh;

static void setup(void) {
  if (nnodes == 0) {
    sh = spt_fixture_up(&daemon_, NULL, sizeof(*sh));
    ck_assert_ptr_nonnull(sh);
    return;
  }
  /* A killed node is noticed by its endpoints' errors, or after 3 s of
   * silence at the latest. */
  const char *extra[] = {"--peer-timeout", "3", NULL};
  ck_assert_int_eq(spt_nodes_start(&nodes_, nnodes, extra), 0);
  sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE,
            MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(sh, MAP_FAILED);
}

static void teardown(void) {
  if (nnodes == 0) {
    ck_assert_int_eq(spt_fixture_down(&daemon_, sh, sizeof(*sh)), 0);
    return;
  }
  munmap(sh, sizeof(*sh));
  ck_assert_int_eq(spt_nodes_stop(&nodes_), 0);
}

/* The daemon rank runs on. */
static const spt_daemon *node_of(int rank) {
  return nnodes ? &nodes_.d[rank % nnodes] : &daemon_;
}

/* A counter summed over every daemon. */
static long long stat_sum(const char *name) {
  long long sum = 0;
  for (int i = 0; i < (nnodes ? nnodes : 1); i++)
    sum += spt_daemon_stat(nnodes ? &nodes_.d[i] : &daemon_, name);
  return sum;
}

static int open_rank(spt_rk *k, int rank, int w, int64_t timeout_ms) {
  return spt_rk_open(k, node_of(rank)->socket, sh->group, rank, w,
                     timeout_ms);
}

/* Across nodes each node counts its side of a pair (two for a pair across
 * nodes, one for a pair of one node) and its part of a collective. */
static long long pair_ops(int src, int dst) {
  return nnodes && src % nnodes != dst % nnodes ? 2 : 1;
}

static int settle_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (open_rank(&k, rank, w, 0) < 0)
    return 1;
  return spt_rk_close(&k, spt_rk_reduce_once(&k, rank, w, 8, 0, 0));
}

/* Node 1 died (killed, or drained and gone): start it again and run an
 * all_reduce over every node, so the survivors have met it again (it
 * takes part in new groups) before anything stops. */
static void node1_restart(const char *name) {
  ck_assert_int_eq(spt_node_start(&nodes_, 1), 0);
  snprintf(sh->group, sizeof(sh->group), "%s", name);
  ck_assert_int_eq(spt_run_ranks(nnodes, settle_rank, NULL, 120), 0);
}

/* n floats of message `msg` from rank `from`. */
static float val(int from, int msg, size_t i) {
  return (float)((int)((i * 3 + (size_t)from * 17 + (size_t)msg * 29) % 64) -
                 32) / 4.0f;
}

static float *tensor(spt_rk *k, spc_tensor *t, size_t n) {
  int64_t s[1] = {(int64_t)n};
  return spt_rk_tensor(k, t, 1, s);
}

static int check(const float *y, size_t n, int from, int msg, int rank) {
  for (size_t i = 0; i < n; i++)
    if (y[i] != val(from, msg, i)) {
      fprintf(stderr, "rank %d: message %d from %d: [%zu] = %g, want %g\n",
              rank, msg, from, i, y[i], val(from, msg, i));
      return 1;
    }
  return 0;
}

/* Each rank sends to the next and receives from the previous (async,
 * as ring attention does), with a small all_reduce (the shared-memory
 * path on one node) between steps: P2P and collectives keep their own
 * orders. */
static int ring_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (open_rank(&k, rank, w, 0) < 0)
    return 1;
  int bad = 0;
  for (int step = 0; step < 3 && !bad; step++) {
    spc_tensor out, in;
    float *x = tensor(&k, &out, 1000), *y = tensor(&k, &in, 1000);
    for (size_t i = 0; i < 1000; i++)
      x[i] = val(rank, step, i);
    spc_request *rs, *rr;
    int src = -7;
    bad |= spc_start_recv(k.g, &in, (rank + w - 1) % w, 0, &src, &rr) < 0;
    bad |= spc_start_send(k.g, &out, (rank + 1) % w, 0, &rs) < 0;
    bad |= spc_wait(&rs) < 0 || spc_wait(&rr) < 0;
    bad |= src != (rank + w - 1) % w;
    bad |= !bad && check(y, 1000, (rank + w - 1) % w, step, rank);
    k.used = 0;
    bad |= spt_rk_reduce_once(&k, rank, w, 8, step, 0);
    k.used = 0;
  }
  if (bad)
    fprintf(stderr, "rank %d: ring: %s\n", rank, spc_last_error(k.c));
  return spt_rk_close(&k, bad);
}

/* One node: worlds 2 to 4. Across n nodes: worlds n + 1 and 2n, so the
 * ring has pairs across nodes and pairs within one node. */
START_TEST(ring_exchange) {
  int lo = nnodes ? nnodes + 1 : 2, hi = nnodes ? 2 * nnodes : 4;
  for (int w = lo; w <= hi; w += nnodes ? nnodes - 1 : 1) {
    snprintf(sh->group, sizeof(sh->group), "ring%d", w);
    long long before = stat_sum("ops_completed");
    long long ucx_before = stat_sum("mover_ucx_ops");
    ck_assert_int_eq(spt_run_ranks(w, ring_rank, NULL, 120), 0);
    /* 3 steps of w pairs and of one all_reduce */
    long long pairs = 0, cross = 0;
    for (int r = 0; r < w; r++) {
      pairs += pair_ops(r, (r + 1) % w);
      cross += pair_ops(r, (r + 1) % w) - 1;
    }
    int reduce_nodes = nnodes ? (w < nnodes ? w : nnodes) : 1;
    ck_assert_int_eq(stat_sum("ops_completed") - before,
                     3 * pairs + 3 * reduce_nodes);
    /* The pairs across nodes went over UCX, on both of their nodes. */
    ck_assert_int_eq(stat_sum("mover_ucx_ops") - ucx_before,
                     3 * 2 * cross + (nnodes ? 3 * reduce_nodes : 0));
  }
}
END_TEST

/* Tags are independent channels: rank 0 posts tag 1 then tag 2, rank 1
 * receives tag 2 first (blocking). Within a tag, order holds: three
 * messages of tag 3 arrive in the order sent. */
static int tags_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (open_rank(&k, rank, w, 0) < 0)
    return 1;
  spc_tensor t[5];
  float *p[5];
  for (int i = 0; i < 5; i++)
    if ((p[i] = tensor(&k, &t[i], 64)) == NULL)
      return spt_rk_close(&k, 1);
  int bad = 0;
  if (rank == 0) {
    spc_request *r[5];
    for (int i = 0; i < 5; i++) {
      for (size_t j = 0; j < 64; j++)
        p[i][j] = val(0, i, j);
      bad |= spc_start_send(k.g, &t[i], 1, i < 2 ? i + 1 : 3, &r[i]) < 0;
    }
    for (int i = 0; i < 5 && !bad; i++)
      bad |= spc_wait(&r[i]) < 0;
  } else {
    bad |= spc_recv(k.g, &t[1], 0, 2, NULL) < 0 ||
           spc_recv(k.g, &t[0], 0, 1, NULL) < 0;
    for (int i = 2; i < 5 && !bad; i++)
      bad |= spc_recv(k.g, &t[i], 0, 3, NULL) < 0;
    for (int i = 0; i < 5 && !bad; i++)
      bad |= check(p[i], 64, 0, i, rank);
  }
  if (bad)
    fprintf(stderr, "rank %d: tags: %s\n", rank, spc_last_error(k.c));
  return spt_rk_close(&k, bad);
}

START_TEST(tags_and_order) {
  snprintf(sh->group, sizeof(sh->group), "tags");
  ck_assert_int_eq(spt_run_ranks(2, tags_rank, NULL, 120), 0);
}
END_TEST

/* Every other rank sends two messages to rank 0, which receives from any
 * source twice per sender and learns who sent each: each sender's two
 * exactly once and in the order sent, with its own data. Across nodes
 * (world n + 1) the senders are on rank 0's node and on the others. */
static int any_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (open_rank(&k, rank, w, 0) < 0)
    return 1;
  spc_tensor t[16];
  float *p[16];
  int bad = 0, n = 2 * (w - 1);
  for (int i = 0; i < n; i++)
    bad |= (p[i] = tensor(&k, &t[i], 100)) == NULL;
  if (!bad && rank > 0) {
    spc_request *r[2];
    for (int m = 0; m < 2 && !bad; m++) {
      for (size_t j = 0; j < 100; j++)
        p[m][j] = val(rank, 5 + m, j);
      bad = spc_start_send(k.g, &t[m], 0, 5, &r[m]) < 0;
    }
    for (int m = 0; m < 2 && !bad; m++)
      bad = spc_wait(&r[m]) < 0;
  } else if (!bad) {
    int got[8] = {0};
    for (int i = 0; i < n && !bad; i++) {
      int src = -9;
      bad = spc_recv(k.g, &t[i], SPC_ANY_SOURCE, 5, &src) < 0 || src < 1 ||
            src >= w || got[src] > 1 ||
            check(p[i], 100, src, 5 + got[src], rank);
      if (!bad)
        got[src]++;
    }
  }
  if (bad)
    fprintf(stderr, "rank %d: any source: %s\n", rank, spc_last_error(k.c));
  k.used = 0; /* nobody leaves (breaking the group) before all are done */
  bad |= spt_rk_reduce_once(&k, rank, w, 8, 1, 0);
  return spt_rk_close(&k, bad);
}

START_TEST(any_source) {
  snprintf(sh->group, sizeof(sh->group), "any");
  ck_assert_int_eq(spt_run_ranks(nnodes ? nnodes + 1 : 3, any_rank, NULL,
                                 120), 0);
}
END_TEST

/* A P2p request naming buffer 987654, which this client never
 * registered: sent raw, as the library refuses it. */
static int raw_send_unknown_buffer(spt_rk *k, int dst, int tag) {
  Spcoll__Tensor tm = SPCOLL__TENSOR__INIT;
  int64_t shape[1] = {8};
  tm.buffer_id = 987654, tm.dtype = SPC_FLOAT32, tm.n_shape = 1;
  tm.shape = shape;
  Spcoll__P2p rq = SPCOLL__P2P__INIT;
  rq.group_id = k->g->id, rq.send = 1, rq.peer = dst, rq.tag = tag;
  rq.tensor = &tm;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  f.body_case = SPCOLL__FRAME__BODY_P2P;
  f.p2p = &rq;
  Spcoll__Frame *reply = NULL;
  int rc = spc__call(k->c, &f, -1, &reply);
  if (reply != NULL)
    spcoll__frame__free_unpacked(reply, NULL);
  return rc;
}

/* A count, a dtype disagreement and the sender's own error fail both
 * ranks in the same words; the group goes on. */
static int mismatch_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (open_rank(&k, rank, w, 0) < 0)
    return 1;
  spc_tensor t, ti;
  int bad = tensor(&k, &t, rank == 0 ? 8 : 6) == NULL;
  int64_t s[1] = {8};
  bad |= spc_tensor_init(&ti, k.b, 1 << 20, SPC_INT32, 1, s) < 0;
  int rc = rank == 0 ? spc_send(k.g, &t, 1, 0) : spc_recv(k.g, &t, 0, 0, NULL);
  const char *e = spc_last_error(k.c);
  if (rc != SPC_EMISMATCH || !strstr(e, "from rank 0 to rank 1 (tag 0): 8 "
                                        "elements sent, 6 expected")) {
    fprintf(stderr, "rank %d: count mismatch gave %d '%s'\n", rank, rc, e);
    bad = 1;
  }
  spc_tensor *mine = rank == 0 ? &t : &ti;
  if (rank == 0) {
    k.used = 0;
    bad |= tensor(&k, &t, 8) == NULL;
  }
  rc = rank == 0 ? spc_send(k.g, mine, 1, 1) : spc_recv(k.g, mine, 0, 1, NULL);
  e = spc_last_error(k.c);
  if (rc != SPC_EMISMATCH ||
      !strstr(e, "dtype float32 sent, int32 expected by the receive")) {
    fprintf(stderr, "rank %d: dtype mismatch gave %d '%s'\n", rank, rc, e);
    bad = 1;
  }
  /* The sender's own error (a buffer it never registered, past the
   * library's checks in a raw request) reaches the receiver too. */
  rc = rank == 0 ? raw_send_unknown_buffer(&k, 1, 2)
                 : spc_recv(k.g, mine, 0, 2, NULL);
  e = spc_last_error(k.c);
  if (rc != SPC_ENOTFOUND ||
      !strstr(e, "from rank 0 to rank 1 (tag 2): rank 0's send: send "
                 "tensor names buffer 987654")) {
    fprintf(stderr, "rank %d: the sender's error gave %d '%s'\n", rank, rc,
            e);
    bad = 1;
  }
  k.used = 0;
  bad |= spt_rk_reduce_once(&k, rank, w, 100, 1, 0); /* still usable */
  return spt_rk_close(&k, bad);
}

START_TEST(disagreement_fails_both) {
  snprintf(sh->group, sizeof(sh->group), "mismatch");
  ck_assert_int_eq(spt_run_ranks(2, mismatch_rank, NULL, 120), 0);
}
END_TEST

/* Peers and tags matching cannot use are refused at once, by the library
 * and (a raw request) by the daemon, naming the value. */
static int bad_args_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (open_rank(&k, rank, w, 0) < 0)
    return 1;
  spc_tensor t;
  int bad = tensor(&k, &t, 4) == NULL;
  bad |= spc_send(k.g, &t, rank, 0) != SPC_EINVAL ||
         !strstr(spc_last_error(k.c), "peer");
  bad |= spc_send(k.g, &t, w, 0) != SPC_EINVAL;
  bad |= spc_send(k.g, &t, SPC_ANY_SOURCE, 0) != SPC_EINVAL;
  bad |= spc_recv(k.g, &t, 1 - rank, -1, NULL) != SPC_EINVAL ||
         !strstr(spc_last_error(k.c), "tag -1 is negative");
  /* the daemon's own check, past the library's */
  Spcoll__Tensor tm = SPCOLL__TENSOR__INIT;
  int64_t shape[1] = {4};
  tm.buffer_id = t.buf->id, tm.dtype = SPC_FLOAT32, tm.n_shape = 1;
  tm.shape = shape;
  Spcoll__P2p rq = SPCOLL__P2P__INIT;
  rq.group_id = k.g->id, rq.send = 1, rq.peer = 7, rq.tensor = &tm;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  f.body_case = SPCOLL__FRAME__BODY_P2P;
  f.p2p = &rq;
  Spcoll__Frame *reply = NULL;
  int rc = spc__call(k.c, &f, -1, &reply);
  if (reply != NULL)
    spcoll__frame__free_unpacked(reply, NULL);
  bad |= rc != SPC_EINVAL ||
         !strstr(spc_last_error(k.c), "peer 7 is not another rank");
  if (bad)
    fprintf(stderr, "rank %d: bad args: %s\n", rank, spc_last_error(k.c));
  k.used = 0;
  bad |= spt_rk_reduce_once(&k, rank, w, 8, 1, 0);
  return spt_rk_close(&k, bad);
}

START_TEST(bad_arguments_refused) {
  snprintf(sh->group, sizeof(sh->group), "badargs");
  ck_assert_int_eq(spt_run_ranks(2, bad_args_rank, NULL, 120), 0);
}
END_TEST

/* One way the tensor t of rank 0 can reach outside its 64 KiB buffer,
 * and the words its refusal must hold. */
typedef struct {
  int ndim;
  int64_t shape[2];
  uint64_t offset;
  const char *needle;
} extent_case;

static const extent_case extent_cases[] = {
    /* 2^62 x 4 floats: the byte count overflows 64 bits */
    {2, {(int64_t)1 << 62, 4}, 0, "shape [4611686018427387904, 4]"},
    {2, {1 << 20, 4}, 0, "shape [1048576, 4]"},     /* 16 MiB */
    {1, {4}, 65536 - 8, "at offset 65528 (16 bytes)"}, /* past the end */
    {1, {4}, (uint64_t)1 << 63, "at offset 9223372036854775808"},
};
#define NEXTENT (sizeof(extent_cases) / sizeof(extent_cases[0]))

/* A P2p request of t's fields as they are, sent raw: the daemon's own
 * check, past the library's. */
static int raw_p2p(spt_rk *k, const spc_tensor *t, int send, int peer) {
  Spcoll__Tensor tm = SPCOLL__TENSOR__INIT;
  tm.buffer_id = t->buf->id, tm.offset = t->offset;
  tm.dtype = (uint32_t)t->dtype, tm.n_shape = (size_t)t->ndim;
  tm.shape = (int64_t *)t->shape;
  Spcoll__P2p rq = SPCOLL__P2P__INIT;
  rq.group_id = k->g->id, rq.send = send, rq.peer = peer, rq.tensor = &tm;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  f.body_case = SPCOLL__FRAME__BODY_P2P;
  f.p2p = &rq;
  Spcoll__Frame *reply = NULL;
  int rc = spc__call(k->c, &f, -1, &reply);
  if (reply != NULL)
    spcoll__frame__free_unpacked(reply, NULL);
  return rc;
}

/* Whether rc and the client's last error are the refusal of case x. */
static int extent_refused(spt_rk *k, const extent_case *x, int rc,
                          const char *how) {
  const char *e = spc_last_error(k->c);
  if (rc == SPC_EINVAL && strstr(e, x->needle) &&
      strstr(e, "buffer of 65536 bytes"))
    return 1;
  fprintf(stderr, "%s of %s: got %d '%s'\n", how, x->needle, rc, e);
  return 0;
}

/* Rank 0's sends and receives of tensors reaching outside their buffer
 * are refused at once, by the library and (raw) by the daemon, naming
 * the shape and the buffer's size; rank 1 posts nothing for them, so a
 * refusal that waited for a match would run into the op timeout (5 s
 * here) and break the group. */
static int extent_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (open_rank(&k, rank, w, 5000) < 0)
    return 1;
  int bad = 0;
  for (size_t i = 0; rank == 0 && i < NEXTENT; i++) {
    const extent_case *x = &extent_cases[i];
    spc_buffer *b;
    spc_tensor t;
    int64_t one[1] = {4};
    if (spc_buffer_alloc(k.c, 65536, &b) < 0 ||
        spc_tensor_init(&t, b, 0, SPC_FLOAT32, 1, one) < 0)
      return spt_rk_close(&k, 1);
    t.ndim = x->ndim, t.offset = x->offset;
    memcpy(t.shape, x->shape, sizeof(x->shape));
    bad |= !extent_refused(&k, x, spc_send(k.g, &t, 1, 0), "spc_send");
    bad |= !extent_refused(&k, x, spc_recv(k.g, &t, 1, 0, NULL), "spc_recv");
    bad |= !extent_refused(&k, x, raw_p2p(&k, &t, 1, 1), "raw send");
    bad |= !extent_refused(&k, x, raw_p2p(&k, &t, 0, 1), "raw receive");
    spc_buffer_free(b);
  }
  bad |= spt_rk_reduce_once(&k, rank, w, 8, 1, 0); /* still usable */
  return spt_rk_close(&k, bad);
}

START_TEST(extent_refused_at_once) {
  snprintf(sh->group, sizeof(sh->group), "extent");
  ck_assert_int_eq(spt_run_ranks(2, extent_rank, NULL, 120), 0);
  ck_assert_int_eq(stat_sum("ops_timed_out"), 0);
}
END_TEST

/* Rank 0 waits on rank 1 (on another node when there are several), and:
 * mode 0: rank 1 is killed while rank 0 waits to receive from it;
 * 1: rank 1 never sends (op timeout of 300 ms);
 * 2: an operator aborts the group on rank 0's node while it receives;
 * 3: rank 0 sends and rank 1 never receives (op timeout);
 * 4: rank 0 sends and an operator aborts the group on rank 1's node
 *    (where, across nodes, the send waits to be matched);
 * 5 (across nodes): rank 1's whole node is killed while rank 0 both
 *    receives from and sends to rank 1: both fail naming the node, with
 *    SPC_ERESTARTED (the group forms again if the node comes back).
 * Rank 0 fails with the collectives' error in each case, in bounded time
 * (the daemon's, not a limit here). */
#define MODES 6
static const int want_rc[MODES] = {SPC_EPEERLOST, SPC_ETIMEDOUT, SPC_EABORTED,
                                   SPC_ETIMEDOUT, SPC_EABORTED, SPC_ERESTARTED};
static const char *const want_msg[MODES] = {
    "was lost", "rank 1 never posted the matching send",
    "aborted by operator", "rank 1 never posted the matching receive",
    "aborted by operator", "node 1 ("};

static int ctl_abort(int on_rank) {
  char args[128];
  snprintf(args, sizeof(args), "abort %s", sh->group);
  return spt_ctl(node_of(on_rank), args);
}

/* What rank 1 does: die, abort, kill its node, or nothing; then it waits
 * for rank 0 to be done. */
static int fault_other(spt_rk *k, int mode) {
  usleep(100000); /* let rank 0 post first */
  if (mode == 0)
    raise(SIGKILL);
  if ((mode == 2 || mode == 4) && ctl_abort(mode == 2 ? 0 : 1) != 0)
    return spt_rk_close(k, 1);
  if (mode == 5 && kill(node_of(1)->pid, SIGKILL) != 0) {
    perror("kill of rank 1's node");
    return spt_rk_close(k, 1);
  }
  while (!__atomic_load_n(&sh->flag, __ATOMIC_ACQUIRE))
    usleep(1000);
  return spt_rk_close(k, 0);
}

static int fault_rank(int rank, int w, void *arg) {
  int mode = *(const int *)arg;
  spt_rk k;
  if (open_rank(&k, rank, w, mode == 1 || mode == 3 ? 300 : 0) < 0)
    return 1;
  if (spt_rk_reduce_once(&k, rank, w, 8, 0, 0))
    return spt_rk_close(&k, 1);
  k.used = 0;
  spc_tensor t, u;
  if (tensor(&k, &t, 16) == NULL || tensor(&k, &u, 16) == NULL)
    return spt_rk_close(&k, 1);
  if (rank == 1)
    return fault_other(&k, mode);
  spc_request *rq[2] = {NULL, NULL};
  int rc[2] = {0, 0}, n = 0, bad = 0;
  if (mode != 3 && mode != 4)
    rc[n++] = spc_start_recv(k.g, &t, 1, 9, NULL, &rq[0]);
  if (mode >= 3)
    rc[n++] = spc_start_send(k.g, &u, 1, 9, &rq[1]);
  for (int i = 0; i < 2; i++) {
    if (rq[i] == NULL)
      continue;
    int r = spc_wait(&rq[i]);
    const char *e = spc_last_error(k.c);
    if (r != want_rc[mode] || !strstr(e, want_msg[mode])) {
      fprintf(stderr, "mode %d: rank 0's %s got %d '%s'\n", mode,
              i ? "send" : "receive", r, e);
      bad = 1;
    }
  }
  for (int i = 0; i < n; i++)
    bad |= rc[i] < 0;
  __atomic_store_n(&sh->flag, 1, __ATOMIC_RELEASE);
  return spt_rk_close(&k, bad);
}

START_TEST(lost_timeout_abort) {
  for (int mode = 0; mode < (nnodes ? MODES : MODES - 1); mode++) {
    snprintf(sh->group, sizeof(sh->group), "fault%d", mode);
    sh->flag = 0;
    int failed = spt_run_ranks(2, fault_rank, &mode, 120);
    ck_assert_msg(failed == (mode == 0 ? 1 : 0), /* the killed rank */
                  "mode %d: %d ranks failed", mode, failed);
  }
  if (nnodes) {
    /* Node 1 was killed (mode 5): it died from the signal. */
    ck_assert_int_eq(spt_daemon_stop(&nodes_.d[1]), -1);
    node1_restart("after-fault");
  }
}
END_TEST

/* Across nodes: rank 1's node stops (SIGSTOP) after posting rank 1's
 * send to rank 0's node; rank 0's receive then matches it there and its
 * pair runs (its receive stream posted, the sender's never coming); the
 * stopped node is killed. The running pair fails with the node named as
 * lost (not a bare stream error), never hangs. */
static int mid_pair_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (open_rank(&k, rank, w, 0) < 0)
    return 1;
  if (spt_rk_reduce_once(&k, rank, w, 8, 0, 0))
    return spt_rk_close(&k, 1);
  k.used = 0;
  spc_tensor t;
  if (tensor(&k, &t, 1 << 16) == NULL)
    return spt_rk_close(&k, 1);
  spc_request *rq;
  pid_t node = node_of(1)->pid;
  if (rank == 1) {
    if (spc_start_send(k.g, &t, 0, 4, &rq) < 0)
      return spt_rk_close(&k, 1);
    usleep(200000); /* the send reached rank 0's node */
    int bad = kill(node, SIGSTOP) != 0;
    __atomic_store_n(&sh->flag, 1, __ATOMIC_RELEASE);
    while (!bad && __atomic_load_n(&sh->flag, __ATOMIC_ACQUIRE) != 2)
      usleep(1000);
    bad |= kill(node, SIGKILL) != 0;
    while (!bad && __atomic_load_n(&sh->flag, __ATOMIC_ACQUIRE) != 3)
      usleep(1000);
    return spt_rk_close(&k, bad);
  }
  while (__atomic_load_n(&sh->flag, __ATOMIC_ACQUIRE) != 1)
    usleep(1000);
  int bad = spc_start_recv(k.g, &t, 1, 4, NULL, &rq) < 0;
  usleep(200000); /* matched here: the pair runs */
  __atomic_store_n(&sh->flag, 2, __ATOMIC_RELEASE);
  int rc = bad ? -1 : spc_wait(&rq);
  if (rc != SPC_ENODELOST || !strstr(spc_last_error(k.c), "node 1 (")) {
    fprintf(stderr, "rank 0: receive of a pair whose node died got %d "
            "'%s'\n", rc, spc_last_error(k.c));
    bad = 1;
  }
  __atomic_store_n(&sh->flag, 3, __ATOMIC_RELEASE);
  return spt_rk_close(&k, bad);
}

START_TEST(node_lost_mid_pair) {
  snprintf(sh->group, sizeof(sh->group), "midpair");
  ck_assert_int_eq(spt_run_ranks(2, mid_pair_rank, NULL, 120), 0);
  ck_assert_int_eq(spt_daemon_stop(&nodes_.d[1]), -1); /* killed */
  node1_restart("after-midpair");
}
END_TEST

/* A drain of rank 1's daemon (across nodes: the receiver's, where sends
 * are matched) lets a send meet a receive posted before it, refuses a
 * send that finds none, and the daemon exits once its last half is gone
 * (rank 1's unmatched receive, failed when a rank leaves). */
static int drain_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (open_rank(&k, rank, w, 0) < 0)
    return 1;
  int bad = spt_rk_reduce_once(&k, rank, w, 8, 0, 0);
  k.used = 0;
  spc_tensor t[2];
  float *p[2] = {tensor(&k, &t[0], 32), tensor(&k, &t[1], 32)};
  if (bad || p[0] == NULL || p[1] == NULL)
    return spt_rk_close(&k, 1);
  if (rank == 1) {
    spc_request *r1, *r3;
    bad = spc_start_recv(k.g, &t[0], 0, 1, NULL, &r1) < 0 ||
          spc_start_recv(k.g, &t[1], 0, 3, NULL, &r3) < 0;
    usleep(200000); /* the daemon has both before the drain */
    __atomic_store_n(&sh->flag, 1, __ATOMIC_RELEASE);
    bad = bad || spc_wait(&r1) < 0 || check(p[0], 32, 0, 1, rank);
    while (!bad && __atomic_load_n(&sh->flag, __ATOMIC_ACQUIRE) != 2)
      usleep(1000);
    if (bad)
      fprintf(stderr, "rank 1: drain: %s\n", spc_last_error(k.c));
    return spt_rk_close(&k, bad); /* r3 never matched: it goes with us */
  }
  while (__atomic_load_n(&sh->flag, __ATOMIC_ACQUIRE) != 1)
    usleep(1000);
  bad = spt_ctl(node_of(1), "drain") != 0;
  for (size_t i = 0; i < 32; i++)
    p[0][i] = val(0, 1, i);
  int rc = bad ? -1 : spc_send(k.g, &t[0], 1, 1);
  if (rc < 0) {
    fprintf(stderr, "rank 0: send to a waiting receive: %s\n",
            spc_last_error(k.c));
    bad = 1;
  }
  rc = spc_send(k.g, &t[1], 1, 2);
  if (rc != SPC_ESHUTDOWN || !strstr(spc_last_error(k.c), "draining")) {
    fprintf(stderr, "rank 0: send with no receive got %d '%s'\n", rc,
            spc_last_error(k.c));
    bad = 1;
  }
  __atomic_store_n(&sh->flag, 2, __ATOMIC_RELEASE);
  return spt_rk_close(&k, bad);
}

START_TEST(drain_lets_matched_finish) {
  snprintf(sh->group, sizeof(sh->group), "drain");
  ck_assert_int_eq(spt_run_ranks(2, drain_rank, NULL, 120), 0);
  /* The drained daemon exits by itself (status 0: teardown reaps it). */
  const spt_daemon *d = node_of(1);
  int st = 0;
  pid_t got = 0;
  for (int i = 0; i < 3000 && got != d->pid; i++) {
    got = waitpid(d->pid, &st, WNOHANG);
    if (got != d->pid)
      usleep(10000);
  }
  ck_assert_msg(got == d->pid, "the drained daemon did not exit");
  ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  spt_daemon *dm = nnodes ? &nodes_.d[1] : &daemon_;
  dm->pid = 0;
  unlink(dm->log);
  rmdir(dm->dir);
  /* Started again for the teardown's clean stop. */
  if (nnodes) /* and met again by the others */
    node1_restart("after-drain");
  else
    ck_assert_int_eq(spt_daemon_start(&daemon_, NULL), 0);
}
END_TEST

/* Rank 0 leaves (torch: its destroy_process_group) while ranks 1 and 2
 * still exchange: their pair goes on, as on torch's backends; a send to
 * rank 0 fails naming it, and collectives fail (rank 0 is gone). */
static int wait_flag(int want) {
  for (int i = 0; i < 6000 && __atomic_load_n(&sh->flag, __ATOMIC_SEQ_CST) <
                                  want; i++)
    usleep(10000);
  return __atomic_load_n(&sh->flag, __ATOMIC_SEQ_CST) >= want ? 0 : 1;
}

static int leave_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (open_rank(&k, rank, w, 0) < 0)
    return 1;
  int bad = spt_rk_reduce_once(&k, rank, w, 8, 0, 0);
  __atomic_add_fetch(&sh->flag, 1, __ATOMIC_SEQ_CST); /* 3: all met */
  if (rank == 0) {
    bad |= wait_flag(3);
    bad |= spc_group_leave(k.g) < 0;
    k.g = NULL;
    __atomic_add_fetch(&sh->flag, 1, __ATOMIC_SEQ_CST); /* 4: gone */
    return spt_rk_close(&k, bad);
  }
  spc_tensor t;
  float *x = tensor(&k, &t, 1000);
  spc_request *rq = NULL;
  if (rank == 1) /* posted before or after the leave: either way kept */
    bad |= spc_start_recv(k.g, &t, 2, 5, NULL, &rq) < 0;
  bad |= wait_flag(4);
  usleep(200000); /* the Leave reaches every daemon first */
  if (rank == 2) {
    for (size_t i = 0; i < 1000; i++)
      x[i] = val(2, 5, i);
    bad |= spc_send(k.g, &t, 1, 5) < 0;
  } else {
    bad |= spc_wait(&rq) < 0 || check(x, 1000, 2, 5, 1);
    int rc = spc_send(k.g, &t, 0, 6);
    if (rc != SPC_EPEERLOST || strstr(spc_last_error(k.c), "rank 0") == NULL) {
      fprintf(stderr, "rank 1: send to the departed rank 0: %d %s\n", rc,
              spc_last_error(k.c));
      bad = 1;
    }
  }
  if (bad)
    fprintf(stderr, "rank %d: pair after a leave: %s\n", rank,
            spc_last_error(k.c));
  k.used = 0;
  if (spt_rk_reduce_once(&k, rank, w, 8, 1, 0) == 0) { /* must fail */
    fprintf(stderr, "rank %d: all_reduce without rank 0 succeeded\n", rank);
    bad = 1;
  }
  return spt_rk_close(&k, bad);
}

/* A receive completed the way a waiter that must not hold the client
 * does (spc_client_fd): poll the socket, then spc_test. Rank 0 sends
 * only after rank 1 polled once and found nothing, so the answer comes
 * while rank 1 waits in poll, which must wake for it. */
static int fd_wait_rank(int rank, int w, void *arg) {
  (void)arg;
  spt_rk k;
  if (open_rank(&k, rank, w, 0) < 0)
    return 1;
  spc_tensor t;
  float *p = tensor(&k, &t, 64);
  int bad = p == NULL || spc_client_fd(NULL) != -1 || spc_client_fd(k.c) < 0;
  if (!bad && rank == 0) {
    while (!__atomic_load_n(&sh->flag, __ATOMIC_ACQUIRE))
      usleep(1000);
    for (size_t j = 0; j < 64; j++)
      p[j] = val(0, 7, j);
    bad = spc_send(k.g, &t, 1, 7) < 0;
  } else if (!bad) {
    spc_request *r;
    int done = 0, polls = 0;
    bad = spc_start_recv(k.g, &t, 0, 7, NULL, &r) < 0 ||
          spc_test(&r, &done) < 0 || done;
    __atomic_store_n(&sh->flag, 1, __ATOMIC_RELEASE);
    while (!bad && !done) {
      struct pollfd pf = {spc_client_fd(k.c), POLLIN, 0};
      bad = poll(&pf, 1, 60000) != 1 || spc_test(&r, &done) < 0 ||
            ++polls > 1000;
    }
    bad |= check(p, 64, 0, 7, rank);
  }
  if (bad)
    fprintf(stderr, "rank %d: fd wait: %s\n", rank, spc_last_error(k.c));
  return spt_rk_close(&k, bad);
}

START_TEST(receive_waited_on_the_socket) {
  snprintf(sh->group, sizeof(sh->group), "fdwait");
  sh->flag = 0;
  ck_assert_int_eq(spt_run_ranks(2, fd_wait_rank, NULL, 120), 0);
}
END_TEST

START_TEST(leave_keeps_other_pairs) {
  snprintf(sh->group, sizeof(sh->group), "leave");
  sh->flag = 0;
  ck_assert_int_eq(spt_run_ranks(3, leave_rank, NULL, 120), 0);
}
END_TEST

int main(void) {
  const char *n = getenv("SPT_NODES");
  nnodes = n != NULL ? atoi(n) : 0;
  if (nnodes < 2 || nnodes > SPT_MAX_NODES)
    nnodes = 0;
  Suite *s = suite_create(nnodes ? "multinode_p2p" : "p2p");
  TCase *tc = tcase_create("p2p");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, ring_exchange);
  tcase_add_test(tc, tags_and_order);
  tcase_add_test(tc, any_source);
  tcase_add_test(tc, disagreement_fails_both);
  tcase_add_test(tc, bad_arguments_refused);
  tcase_add_test(tc, extent_refused_at_once);
  tcase_add_test(tc, lost_timeout_abort);
  tcase_add_test(tc, drain_lets_matched_finish);
  tcase_add_test(tc, leave_keeps_other_pairs);
  tcase_add_test(tc, receive_waited_on_the_socket);
  if (nnodes)
    tcase_add_test(tc, node_lost_mid_pair);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
