/* The reducing ops, the backward ops of split and all_gather, group split
 * (ring and Ulysses sub-groups, a hybrid 2x2 run, sub-groups of one node)
 * and bad input, through a real daemon (or 3 peering ones: SPT_NODES).
 * Cases run with 2, 3 and 4 ranks on random data; every
 * output element is compared with a naive reference that each rank
 * computes on its own by regenerating every rank's input (plain index
 * loops, nothing from kernels/); the helpers they are built from, shared
 * with test_ops_copy.c, are in ops_ref.c. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_ref.h"

/* ---- reductions ----------------------------------------------------- */

static float load_f(spc_dtype dt, const void *p, size_t i) {
  if (dt == SPC_FLOAT32)
    return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return dt == SPC_FLOAT16 ? opr_f16_to_f(h) : opr_bf16_to_f(h);
}

static void store_f(spc_dtype dt, void *p, size_t i, float v) {
  if (dt == SPC_FLOAT32)
    ((float *)p)[i] = v;
  else
    ((uint16_t *)p)[i] = dt == SPC_FLOAT16 ? opr_f_to_f16(v) : opr_f_to_bf16(v);
}

/* ref = op over ranks 0..w-1 of opr_fill(seed, k), elementwise, in rank
 * order: floats in fp32 (16-bit rounded once at the end), int64 sums
 * wrapping. */
static void reduce_ref(spc_dtype dt, int op, size_t n, uint64_t seed, int w,
                       void *ref) {
  void *xs[OPR_MAXW];
  for (int k = 0; k < w; k++)
    xs[k] = opr_fresh(dt, n, seed, k);
  for (size_t i = 0; i < n; i++) {
    if (dt == SPC_INT64) {
      int64_t a = ((int64_t *)xs[0])[i];
      for (int k = 1; k < w; k++) {
        int64_t v = ((int64_t *)xs[k])[i];
        a = op == SPC_SUM ? (int64_t)((uint64_t)a + (uint64_t)v)
            : op == SPC_MAX ? (v > a ? v : a)
                            : (v < a ? v : a);
      }
      ((int64_t *)ref)[i] = a;
      continue;
    }
    float a = load_f(dt, xs[0], i);
    for (int k = 1; k < w; k++) {
      float v = load_f(dt, xs[k], i);
      a = op == SPC_SUM ? a + v : op == SPC_MAX ? (v > a ? v : a)
                                                : (v < a ? v : a);
    }
    store_f(dt, ref, i, a);
  }
  for (int k = 0; k < w; k++)
    free(xs[k]);
}

typedef struct {
  const char *name;
  spc_dtype dt;
  int ndim;
  int64_t shape[SPC_MAX_DIMS];
  int op;
  int async;
} ar_case;

/* In place (issue 13), out is in: the same bytes. */
static int ar_run(int rank, int w, const ar_case *c, int in_place) {
  opr_rk k;
  if (opr_rk_open(&k, rank, w) < 0)
    return 1;
  size_t n = opr_numel(c->shape, c->ndim), es = spc_dtype_size(c->dt);
  spc_tensor in, out;
  void *x = opr_rk_tensor(&k, &in, c->dt, c->ndim, c->shape);
  void *y = in_place ? x : opr_rk_tensor(&k, &out, c->dt, c->ndim, c->shape);
  if (x == NULL || y == NULL)
    return opr_rk_close(&k, 1);
  if (in_place)
    out = in;
  opr_fill(x, c->dt, n, OPR_SEED, rank);
  spc_op op = spc_op_all_reduce((spc_reduce_op)c->op);
  spc_request *req;
  int rc = c->async ? spc_start(k.g, &op, &in, &out, &req)
                    : spc_all_reduce(k.g, &in, &out, (spc_reduce_op)c->op);
  if (rc == 0 && c->async)
    rc = spc_wait(&req);
  if (rc < 0)
    return opr_rk_close(&k, opr_op_failed(&k, "all_reduce", rc));
  void *ref = malloc(n * es + 1);
  reduce_ref(c->dt, c->op, n, OPR_SEED, w, ref);
  int bad = opr_expect_same(rank, "all_reduce", c->dt, y, ref, n);
  free(ref);
  return opr_rk_close(&k, bad);
}

static ar_case ar_cases[] = {
    {"ar-sum-f32", SPC_FLOAT32, 3, {3, 5, 7}, SPC_SUM, 0},
    {"ar-max-f32", SPC_FLOAT32, 2, {4, 33}, SPC_MAX, 0},
    {"ar-min-f32-async", SPC_FLOAT32, 1, {1001}, SPC_MIN, 1},
    {"ar-sum-f32-large", SPC_FLOAT32, 2, {512, 1100}, SPC_SUM, 1},
    {"ar-sum-i64", SPC_INT64, 2, {6, 7}, SPC_SUM, 0},
    {"ar-max-i64", SPC_INT64, 1, {50}, SPC_MAX, 0},
    {"ar-min-i64", SPC_INT64, 3, {2, 3, 5}, SPC_MIN, 0},
    {"ar-sum-bf16", SPC_BFLOAT16, 2, {5, 301}, SPC_SUM, 0},
    {"ar-max-bf16", SPC_BFLOAT16, 1, {77}, SPC_MAX, 0},
    {"ar-min-bf16", SPC_BFLOAT16, 2, {3, 9}, SPC_MIN, 0},
    {"ar-sum-f16", SPC_FLOAT16, 2, {9, 31}, SPC_SUM, 0},
};

static ar_case ar_in_place_cases[] = {
    {"ar-sum-f32-in-place", SPC_FLOAT32, 2, {4, 33}, SPC_SUM, 0},
    {"ar-max-bf16-large-in-place", SPC_BFLOAT16, 2, {1024, 1100}, SPC_MAX, 1},
    {"ar-sum-i64-in-place", SPC_INT64, 1, {50}, SPC_SUM, 0},
};

static int ar_rank(int rank, int w, void *arg) {
  return ar_run(rank, w, arg, 0);
}

static int ar_in_place_rank(int rank, int w, void *arg) {
  return ar_run(rank, w, arg, 1);
}

START_TEST(all_reduce_cases) {
  OPR_RUN_TABLE(ar_cases, ar_rank);
  OPR_RUN_TABLE(ar_in_place_cases, ar_in_place_rank);
}
END_TEST

/* ---- reduce_scatter and the backward ops of split / all_gather ------ */

enum { K_RS, K_SPLIT_BWD, K_AG_OWN, K_AG_SUM };

typedef struct {
  const char *name;
  int kind;
  spc_dtype dt;
  int ndim;
  int64_t shape[SPC_MAX_DIMS]; /* the full tensor; T along dim */
  int dim;
  int pat;        /* how T is cut over the ranks */
  int pass_sizes;
  int scale;      /* split_backward and all_gather_backward_own */
} bw_case;

/* K_SPLIT_BWD: grad_out is piece r (own data), grad_in the full tensor
 * cat_k scale(g_k). The others: grad_out is full (own data per rank),
 * grad_in piece r: K_AG_OWN of scale(own grad), K_RS / K_AG_SUM of the sum
 * over ranks. */
static int bw_rank(int rank, int w, void *arg) {
  const bw_case *c = arg;
  opr_rk k;
  if (opr_rk_open(&k, rank, w) < 0)
    return 1;
  int nd = c->ndim, d = opr_norm(c->dim, nd), gather = c->kind == K_SPLIT_BWD;
  int64_t sz[OPR_MAXW], part[SPC_MAX_DIMS], outer, inner, T = c->shape[d];
  opr_pieces(c->pat, T, w, sz);
  memcpy(part, c->shape, sizeof(part));
  part[d] = sz[rank];
  size_t es = spc_dtype_size(c->dt), fn = opr_numel(c->shape, nd),
         pn = opr_numel(part, nd);
  opr_around(c->shape, nd, d, &outer, &inner);
  const int64_t *sizes = c->pass_sizes ? sz : NULL;
  spc_tensor go, gi;
  void *x = opr_rk_tensor(&k, &go, c->dt, nd, gather ? part : c->shape);
  void *y = opr_rk_tensor(&k, &gi, c->dt, nd, gather ? c->shape : part);
  if (x == NULL || y == NULL)
    return opr_rk_close(&k, 1);
  opr_fill(x, c->dt, gather ? pn : fn, OPR_SEED, rank);
  static const char *names[] = {"reduce_scatter", "split_backward",
                                "all_gather_backward_own",
                                "all_gather_backward_sum"};
  int rc = c->kind == K_RS ? spc_reduce_scatter(k.g, &go, &gi, c->dim, sizes)
           : c->kind == K_SPLIT_BWD
               ? spc_split_backward(k.g, &go, &gi, c->dim, sizes,
                                    (spc_grad_scale)c->scale)
           : c->kind == K_AG_OWN
               ? spc_all_gather_backward_own(k.g, &go, &gi, c->dim, sizes,
                                             (spc_grad_scale)c->scale)
               : spc_all_gather_backward_sum(k.g, &go, &gi, c->dim, sizes);
  if (rc < 0)
    return opr_rk_close(&k, opr_op_failed(&k, names[c->kind], rc));
  char *ref = malloc(fn * es + 1), *src;
  if (c->kind == K_SPLIT_BWD) {
    for (int j = 0; j < w; j++) {
      src = opr_fresh(c->dt, (size_t)(outer * sz[j] * inner), OPR_SEED, j);
      opr_rows_copy(ref, T, opr_sum_before(sz, j), src, sz[j], 0, sz[j], outer,
                    inner, es);
      free(src);
    }
    opr_scale_ref(c->dt, ref, fn, c->scale, w);
  } else {
    src = malloc(fn * es + 1);
    if (c->kind == K_AG_OWN)
      opr_fill(src, c->dt, fn, OPR_SEED, rank);
    else
      reduce_ref(c->dt, SPC_SUM, fn, OPR_SEED, w, src);
    opr_rows_copy(ref, sz[rank], 0, src, T, opr_sum_before(sz, rank), sz[rank],
                  outer, inner, es);
    if (c->kind == K_AG_OWN)
      opr_scale_ref(c->dt, ref, pn, c->scale, w);
    free(src);
  }
  int bad =
      opr_expect_same(rank, names[c->kind], c->dt, y, ref, gather ? fn : pn);
  free(ref);
  return opr_rk_close(&k, bad);
}

static bw_case rs_cases[] = {
    {"rs-first-rule", K_RS, SPC_FLOAT32, 3, {11, 3, 2}, 0, OPR_P_RULE, 0, 0},
    {"rs-first-rev-sizes", K_RS, SPC_FLOAT32, 2, {10, 5}, 0, OPR_P_REV, 1, 0},
    {"rs-last-rule", K_RS, SPC_FLOAT32, 3, {2, 3, 13}, -1, OPR_P_RULE, 0, 0},
    {"rs-last-hole-sizes", K_RS, SPC_FLOAT32, 2, {4, 9}, 1, OPR_P_HOLE, 1, 0},
    {"rs-large", K_RS, SPC_FLOAT32, 2, {1100, 512}, 0, OPR_P_RULE, 0, 0},
    {"rs-i64", K_RS, SPC_INT64, 2, {7, 6}, 0, OPR_P_RULE, 1, 0},
    {"rs-bf16-last", K_RS, SPC_BFLOAT16, 2, {3, 17}, -1, OPR_P_REV, 1, 0},
};

static bw_case bw_cases[] = {
    {"split-bwd-down",
     K_SPLIT_BWD,
     SPC_FLOAT32,
     3,
     {3, 10, 2},
     1,
     OPR_P_RULE,
     0,
     SPC_SCALE_DOWN},
    {"split-bwd-down-rev",
     K_SPLIT_BWD,
     SPC_FLOAT32,
     2,
     {11, 3},
     0,
     OPR_P_REV,
     1,
     SPC_SCALE_DOWN},
    {"split-bwd-none-last",
     K_SPLIT_BWD,
     SPC_FLOAT32,
     2,
     {3, 7},
     -1,
     OPR_P_RULE,
     0,
     SPC_SCALE_NONE},
    {"split-bwd-up",
     K_SPLIT_BWD,
     SPC_FLOAT32,
     2,
     {5, 4},
     0,
     OPR_P_HOLE,
     1,
     SPC_SCALE_UP},
    {"split-bwd-bf16",
     K_SPLIT_BWD,
     SPC_BFLOAT16,
     2,
     {9, 5},
     0,
     OPR_P_RULE,
     0,
     SPC_SCALE_DOWN},
    {"split-bwd-f16",
     K_SPLIT_BWD,
     SPC_FLOAT16,
     3,
     {2, 3, 13},
     2,
     OPR_P_REV,
     1,
     SPC_SCALE_DOWN},
    {"ag-own-up",
     K_AG_OWN,
     SPC_FLOAT32,
     3,
     {2, 11, 3},
     1,
     OPR_P_RULE,
     0,
     SPC_SCALE_UP},
    {"ag-own-up-rev",
     K_AG_OWN,
     SPC_FLOAT32,
     2,
     {10, 3},
     0,
     OPR_P_REV,
     1,
     SPC_SCALE_UP},
    {"ag-own-none",
     K_AG_OWN,
     SPC_FLOAT32,
     2,
     {3, 9},
     -1,
     OPR_P_RULE,
     0,
     SPC_SCALE_NONE},
    {"ag-own-down",
     K_AG_OWN,
     SPC_FLOAT32,
     2,
     {7, 2},
     0,
     OPR_P_RULE,
     0,
     SPC_SCALE_DOWN},
    {"ag-own-bf16",
     K_AG_OWN,
     SPC_BFLOAT16,
     2,
     {9, 4},
     0,
     OPR_P_RULE,
     1,
     SPC_SCALE_UP},
    {"ag-sum", K_AG_SUM, SPC_FLOAT32, 3, {2, 3, 10}, -1, OPR_P_RULE, 0, 0},
    {"ag-sum-sizes", K_AG_SUM, SPC_FLOAT32, 2, {11, 3}, 0, OPR_P_REV, 1, 0},
    {"ag-sum-bf16", K_AG_SUM, SPC_BFLOAT16, 2, {7, 5}, 0, OPR_P_RULE, 0, 0},
};

START_TEST(reduce_scatter_cases) { OPR_RUN_TABLE(rs_cases, bw_rank); }
END_TEST

START_TEST(backward_cases) { OPR_RUN_TABLE(bw_cases, bw_rank); }
END_TEST

/* ---- group split ---------------------------------------------------- */

/* all_gather along dim 0 in `sub`, whose ranks should be the parent
 * ranks members[0..n) in order, this process being members[me]. Pieces of
 * 7 rows by the rule, data from (seed, parent rank). */
static int sub_gather(opr_rk *k, spc_group *sub, const int *members, int n,
                      int me, uint64_t seed, const char *what) {
  if (sub == NULL || spc_group_size(sub) != n || spc_group_rank(sub) != me) {
    fprintf(stderr,
            "[%s] rank %d: %s group: %s, size %d, rank %d; want "
            "size %d, rank %d\n",
            opr_gname, k->rank, what, sub ? "present" : "NULL",
            sub ? spc_group_size(sub) : -1, sub ? spc_group_rank(sub) : -1, n,
            me);
    return 1;
  }
  /* Across nodes a sub-group spans nodes exactly when its members do. */
  int spans = 0;
  for (int m = 1; m < n; m++)
    spans |= opr_node_of(members[m]) != opr_node_of(members[0]);
  if (spc_group_spans_nodes(sub) != spans) {
    fprintf(stderr, "[%s] rank %d: %s group spans nodes: %d, want %d\n",
            opr_gname, k->rank, what, spc_group_spans_nodes(sub), spans);
    return 1;
  }
  int64_t ish[2] = {opr_rule(7, n, me), 3}, osh[2] = {7, 3};
  spc_tensor in, out;
  void *x = opr_rk_tensor(k, &in, SPC_FLOAT32, 2, ish);
  void *y = opr_rk_tensor(k, &out, SPC_FLOAT32, 2, osh);
  if (x == NULL || y == NULL)
    return 1;
  opr_fill(x, SPC_FLOAT32, (size_t)ish[0] * 3, seed, k->rank);
  int rc = spc_all_gather(sub, &in, &out, 0, NULL);
  if (rc < 0)
    return opr_op_failed(k, what, rc);
  float ref[21];
  for (int m = 0; m < n; m++)
    opr_fill(ref + opr_rule_off(7, n, m) * 3, SPC_FLOAT32,
             (size_t)opr_rule(7, n, m) * 3, seed, members[m]);
  return opr_expect_same(k->rank, what, SPC_FLOAT32, y, ref, 21);
}

static int split_groups_rank(int rank, int w, void *arg) {
  (void)arg;
  opr_rk k;
  if (opr_rk_open(&k, rank, w) < 0)
    return 1;
  spc_group *ring = NULL, *uly = NULL, *rev = NULL, *three = NULL;
  int rc = spc_group_split(k.g, rank / 2, rank, &ring);
  if (rc == 0)
    rc = spc_group_split(k.g, rank % 2, rank, &uly);
  if (rc == 0)
    rc = spc_group_split(k.g, 7, -rank, &rev); /* keys reverse the order */
  if (rc == 0)
    rc = spc_group_split(k.g, rank == 3 ? -1 : 5, rank, &three);
  if (rc < 0)
    return opr_rk_close(&k, opr_op_failed(&k, "group_split", rc));
  int ring_m[2] = {rank / 2 * 2, rank / 2 * 2 + 1}, uly_m[2] = {rank % 2,
                                                              rank % 2 + 2};
  int rev_m[4] = {3, 2, 1, 0}, three_m[3] = {0, 1, 2};
  int bad = sub_gather(&k, ring, ring_m, 2, rank % 2, 1, "ring all_gather");
  bad |= sub_gather(&k, uly, uly_m, 2, rank / 2, 2, "ulysses all_gather");
  bad |= sub_gather(&k, rev, rev_m, 4, 3 - rank, 3, "reversed all_gather");
  if (rank == 3 && three != NULL) {
    fprintf(stderr, "[%s] rank 3: color -1 gave a group\n", opr_gname);
    bad = 1;
  }
  if (rank != 3)
    bad |= sub_gather(&k, three, three_m, 3, rank, 4, "three all_gather");
  /* the parent still works */
  int all_m[4] = {0, 1, 2, 3};
  bad |= sub_gather(&k, k.g, all_m, 4, rank, 5, "parent all_gather");
  spc_group *subs[] = {ring, uly, rev, three};
  for (int i = 0; i < 4; i++)
    if (subs[i] != NULL)
      spc_group_leave(subs[i]);
  return opr_rk_close(&k, bad);
}

START_TEST(group_split_ring_ulysses) {
  snprintf(opr_gname, sizeof(opr_gname), "gsplit");
  ck_assert_int_eq(spt_run_ranks(4, split_groups_rank, NULL, 60), 0);
}
END_TEST

/* A split whose colors follow the nodes (color = node, rank r on node
 * r % n): every sub-group is of one node's ranks, so it is a local group:
 * it says it spans no node, its ops are right, and no daemon moves a byte
 * over UCX for it. The parent, across nodes, says it spans them. */
static int split_by_node_rank(int rank, int w, void *arg) {
  (void)arg;
  opr_rk k;
  if (opr_rk_open(&k, rank, w) < 0)
    return 1;
  int nodes = opr_nodes.n ? opr_nodes.n : 2, bad = 0;
  spc_group *sub = NULL;
  int rc = spc_group_split(k.g, rank % nodes, rank, &sub);
  if (rc < 0)
    return opr_rk_close(&k, opr_op_failed(&k, "group_split", rc));
  if (spc_group_spans_nodes(k.g) != (opr_nodes.n > 1)) {
    fprintf(stderr, "[%s] rank %d: parent spans nodes: %d\n", opr_gname,
            rank, spc_group_spans_nodes(k.g));
    bad = 1;
  }
  int members[8], n = 0;
  for (int m = rank % nodes; m < w; m += nodes)
    members[n++] = m;
  bad |= sub_gather(&k, sub, members, n, rank / nodes, 7, "node all_gather");
  if (sub != NULL)
    spc_group_leave(sub);
  return opr_rk_close(&k, bad);
}

/* mover_ucx_ops of every daemon of the suite, into n[]. */
static void ucx_ops(long long *n) {
  int nd = opr_nodes.n ? opr_nodes.n : 1;
  for (int i = 0; i < nd; i++) {
    n[i] = spt_daemon_stat(opr_nodes.n ? &opr_nodes.d[i] : &opr_daemon,
                           "mover_ucx_ops");
    ck_assert_msg(n[i] >= 0, "daemon %d: no mover_ucx_ops stat", i);
  }
}

START_TEST(group_split_by_node_is_local) {
  snprintf(opr_gname, sizeof(opr_gname), "gsplitnode");
  long long before[SPT_MAX_NODES], after[SPT_MAX_NODES];
  ucx_ops(before);
  int w = 2 * (opr_nodes.n ? opr_nodes.n : 2);
  ck_assert_int_eq(spt_run_ranks(w, split_by_node_rank, NULL, 60), 0);
  ucx_ops(after);
  for (int i = 0; i < (opr_nodes.n ? opr_nodes.n : 1); i++)
    ck_assert_msg(after[i] == before[i], "daemon %d ran %lld ops over UCX "
                  "for sub-groups of one node", i, after[i] - before[i]);
}
END_TEST

/* Hybrid 2x2: x [4c, H] is zigzag-split over the ring group (rank r gets
 * chunks r and 3-r), that over the Ulysses group (rank u gets chunk u of
 * the two); global rank = u * 2 + r. Then back: gather over Ulysses,
 * zigzag gather over the ring. */
static int hybrid_rank(int rank, int w, void *arg) {
  (void)arg;
  opr_rk k;
  if (opr_rk_open(&k, rank, w) < 0)
    return 1;
  enum { C = 3, H = 5 };
  spc_group *ring = NULL, *uly = NULL;
  int rc = spc_group_split(k.g, rank / 2, rank, &ring);
  if (rc == 0)
    rc = spc_group_split(k.g, rank % 2, rank, &uly);
  if (rc < 0)
    return opr_rk_close(&k, opr_op_failed(&k, "group_split", rc));
  if (ring == NULL || uly == NULL) {
    fprintf(stderr, "[%s] rank %d: no sub-group\n", opr_gname, rank);
    return opr_rk_close(&k, 1);
  }
  int r = spc_group_rank(ring), u = spc_group_rank(uly), bad = 0;
  if (u * 2 + r != rank) {
    fprintf(stderr, "[%s] rank %d: ring rank %d, ulysses rank %d\n", opr_gname,
            rank, r, u);
    bad = 1;
  }
  int64_t fs[2] = {4 * C, H}, ys[2] = {2 * C, H}, zs[2] = {C, H};
  spc_tensor x_t, y_t, z_t, y2_t, x2_t;
  void *x = opr_rk_tensor(&k, &x_t, SPC_FLOAT32, 2, fs);
  void *y = opr_rk_tensor(&k, &y_t, SPC_FLOAT32, 2, ys);
  void *z = opr_rk_tensor(&k, &z_t, SPC_FLOAT32, 2, zs);
  void *y2 = opr_rk_tensor(&k, &y2_t, SPC_FLOAT32, 2, ys);
  void *x2 = opr_rk_tensor(&k, &x2_t, SPC_FLOAT32, 2, fs);
  if (!x || !y || !z || !y2 || !x2)
    return opr_rk_close(&k, 1);
  opr_fill(x, SPC_FLOAT32, 4 * C * H, OPR_SEED, 0);
  float xf[4 * C * H], ref[2 * C * H];
  opr_fill(xf, SPC_FLOAT32, 4 * C * H, OPR_SEED, 0);
  memcpy(ref, xf + r * C * H, sizeof(float) * C * H);
  memcpy(ref + C * H, xf + (3 - r) * C * H, sizeof(float) * C * H);
  if ((rc = spc_zigzag_split(ring, &x_t, &y_t, 0)) < 0 ||
      (rc = spc_split(uly, &y_t, &z_t, 0, NULL)) < 0)
    bad |= opr_op_failed(&k, "zigzag_split / split", rc);
  else
    bad |= opr_expect_same(rank, "hybrid piece", SPC_FLOAT32, z,
                           ref + u * C * H, C * H);
  if ((rc = spc_all_gather(uly, &z_t, &y2_t, 0, NULL)) < 0 ||
      (rc = spc_zigzag_gather(ring, &y2_t, &x2_t, 0)) < 0)
    bad |= opr_op_failed(&k, "all_gather / zigzag_gather", rc);
  else {
    bad |= opr_expect_same(rank, "hybrid ring piece", SPC_FLOAT32, y2, ref,
                           2 * C * H);
    bad |= opr_expect_same(rank, "hybrid round trip", SPC_FLOAT32, x2, xf,
                           4 * C * H);
  }
  spc_group_leave(ring);
  spc_group_leave(uly);
  return opr_rk_close(&k, bad);
}

START_TEST(hybrid_2x2) {
  snprintf(opr_gname, sizeof(opr_gname), "hybrid");
  ck_assert_int_eq(spt_run_ranks(4, hybrid_rank, NULL, 60), 0);
}
END_TEST

/* ---- bad input ------------------------------------------------------ */

enum { B_OP, B_DTYPE, B_DIM, B_INSHAPE, B_SIZES, B_ZIGZAG, B_SUM, B_RANGE,
       B_OUTSHAPE, B_A2A_G, B_A2AV, B_GSPLIT };

typedef struct {
  const char *name;
  int kind;
  int status;
  const char *needle; /* in the message on every rank */
} bad_case;

/* Every rank asks for an all_gather of [2, 3] along 0 unless the case
 * says otherwise; the last rank is the odd one out where one is needed. */
static int bad_rank(int rank, int w, void *arg) {
  const bad_case *c = arg;
  opr_rk k;
  if (opr_rk_open(&k, rank, w) < 0)
    return 1;
  int last = rank == w - 1, nd = 2;
  spc_dtype dt = SPC_FLOAT32;
  int64_t is[3] = {2, 3, 2}, os[3] = {2 * w, 3, 2}, sz[OPR_MAXW], sz2[OPR_MAXW];
  for (int j = 0; j < w; j++)
    sz[j] = 2, sz2[j] = 1;
  spc_op op = spc_op_all_gather(0, NULL);
  switch (c->kind) {
  case B_OP: /* rank 0 all_gather, the others split */
    if (rank > 0)
      is[0] = 2 * w, os[0] = 2, op = spc_op_split(0, NULL);
    break;
  case B_DTYPE: dt = last ? SPC_INT32 : SPC_FLOAT32; break;
  case B_DIM: /* the last rank gathers along dim 1 */
    if (last)
      os[0] = 2, os[1] = 3 * w, op = spc_op_all_gather(1, NULL);
    break;
  case B_INSHAPE: is[1] = os[1] = last ? 4 : 3; break;
  case B_SIZES: /* split size lists differ; each fits its own rank */
    if (last)
      sz[0] = 3, sz[1] = 1;
    is[0] = 2 * w, os[0] = sz[rank], op = spc_op_split(0, sz);
    break;
  case B_ZIGZAG: is[0] = 2 * w + 2, os[0] = 2, op = spc_op_zigzag_split(0);
    break;
  case B_SUM:
    sz[w - 1] = 3;
    is[0] = 2 * w, os[0] = sz[rank], op = spc_op_split(0, sz);
    break;
  case B_RANGE: op = spc_op_all_gather(2, NULL); break;
  case B_OUTSHAPE: os[0] += last; break;
  case B_A2A_G: /* unequal gather sizes, no gather_size */
    nd = 3, is[0] = 4, is[1] = opr_rule(2 * w + 1, w, rank);
    os[0] = opr_rule(4, w, rank), os[1] = is[1] * w;
    op = spc_op_all_to_all(0, 1, 0);
    break;
  case B_A2AV: /* rank 0 sends 2 rows to rank 1, which expects 1 */
    sz[0] = sz2[0] = 1;
    for (int j = 1; j < w; j++)
      sz[j] = 1;
    if (rank == 0)
      sz[1] = 2;
    is[0] = w + (rank == 0), os[0] = w;
    op = spc_op_all_to_all_v(sz, sz2);
    break;
  }
  spc_tensor in, out;
  void *x = opr_rk_tensor(&k, &in, dt, nd, is);
  if (x == NULL || opr_rk_tensor(&k, &out, dt, nd, os) == NULL)
    return opr_rk_close(&k, 1);
  opr_fill(x, dt, opr_numel(is, nd), OPR_SEED, rank);
  spc_group *sub = NULL; /* B_GSPLIT: rank 0 splits, the others gather */
  int rc = c->kind == B_GSPLIT && rank == 0
               ? spc_group_split(k.g, 0, 0, &sub)
               : spc_run(k.g, &op, &in, &out);
  int bad = 0;
  if (rc != c->status || !strstr(spc_last_error(k.c), c->needle)) {
    fprintf(stderr,
            "[%s] rank %d: got %d (%s) '%s'; want %d (%s) with "
            "'%s'\n",
            opr_gname, rank, rc, spc_strerror(rc),
            rc < 0 ? spc_last_error(k.c) : "", c->status,
            spc_strerror(c->status), c->needle);
    bad = 1;
  }
  /* the group still works */
  /* spt_check_gather reads SPC_MAX_DIMS entries of the shape */
  int64_t gs[2] = {2, 3}, go[SPC_MAX_DIMS] = {2 * w, 3};
  int64_t twos[OPR_MAXW];
  for (int i = 0; i < OPR_MAXW; i++)
    twos[i] = 2;
  spc_tensor gin, gout;
  void *gx = opr_rk_tensor(&k, &gin, SPC_FLOAT32, 2, gs);
  void *gy = opr_rk_tensor(&k, &gout, SPC_FLOAT32, 2, go);
  if (gx == NULL || gy == NULL)
    return opr_rk_close(&k, 1);
  opr_fill(gx, SPC_FLOAT32, 6, OPR_SEED + 1, rank);
  rc = spc_all_gather(k.g, &gin, &gout, 0, NULL);
  if (rc < 0)
    bad |= opr_op_failed(&k, "all_gather after the bad op", rc);
  else
    bad |= spt_check_gather(gy, SPC_FLOAT32, 2, go, 0, twos, w, OPR_SEED + 1,
                            rank);
  return opr_rk_close(&k, bad);
}

static bad_case bad_cases[] = {
    {"bad-op", B_OP, SPC_EMISMATCH, "ranks disagree on op"},
    {"bad-dtype", B_DTYPE, SPC_EMISMATCH, "ranks disagree on dtype"},
    {"bad-dim", B_DIM, SPC_EMISMATCH, "ranks disagree on dim"},
    {"bad-input-shape", B_INSHAPE, SPC_EMISMATCH, "input dim 1"},
    {"bad-sizes", B_SIZES, SPC_EMISMATCH, "ranks disagree on sizes"},
    {"bad-zigzag-len", B_ZIGZAG, SPC_EINVAL, "not divisible by 2*cp"},
    {"bad-split-sum", B_SUM, SPC_EINVAL, "split sizes sum to"},
    {"bad-dim-range", B_RANGE, SPC_EINVAL, "gather dim 2 out of range"},
    {"bad-out-shape", B_OUTSHAPE, SPC_EINVAL, "output shape"},
    {"bad-a2a-gather-size", B_A2A_G, SPC_EINVAL, "need gather_size"},
    {"bad-a2av-pair", B_A2AV, SPC_EMISMATCH, "rank 0 sends 2 rows to rank 1"},
    {"bad-split-vs-op", B_GSPLIT, SPC_EMISMATCH, "ranks disagree on op"},
};

START_TEST(bad_input_cases) { OPR_RUN_TABLE(bad_cases, bad_rank); }
END_TEST

int main(void) {
  /* Across nodes (SPT_NODES) rank r runs on node r % n, so every split
   * below but group_split_by_node_is_local makes sub-groups across nodes. */
  const TTest *tests[] = {all_reduce_cases,         reduce_scatter_cases,
                          backward_cases,           bad_input_cases,
                          group_split_ring_ulysses, hybrid_2x2,
                          group_split_by_node_is_local};
  return opr_run_suite("ops_reduce", tests, sizeof(tests) / sizeof(tests[0]));
}
