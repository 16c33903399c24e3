/* The copy ops through a real daemon: split, all_gather, all_to_all (and
 * its backward), all_to_all_v, sp2hp/hp2sp, zigzag and packed split and
 * gather with their backward ops. Every case runs with 2, 3 and 4 ranks on
 * random data; every output element is compared with a naive reference
 * that each rank computes on its own by regenerating every rank's input
 * (plain index loops, nothing from kernels/). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops_ref.h"

/* ---- split and all_gather ------------------------------------------- */

typedef struct {
  const char *name;
  spc_dtype dt;
  int ndim;
  int64_t shape[SPC_MAX_DIMS]; /* the full tensor; T along dim */
  int dim;
  int pat;        /* how T is cut over the ranks */
  int pass_sizes; /* pass the list (else NULL) */
} dim_case;

/* split: every rank passes the same full x and gets piece r. */
static int split_rank(int rank, int w, void *arg) {
  const dim_case *c = arg;
  opr_rk k;
  if (opr_rk_open(&k, rank, w) < 0)
    return 1;
  int d = opr_norm(c->dim, c->ndim);
  int64_t sz[OPR_MAXW], oshape[SPC_MAX_DIMS], outer, inner;
  opr_pieces(c->pat, c->shape[d], w, sz);
  memcpy(oshape, c->shape, sizeof(oshape));
  oshape[d] = sz[rank];
  spc_tensor in, out;
  void *x = opr_rk_tensor(&k, &in, c->dt, c->ndim, c->shape);
  void *y = opr_rk_tensor(&k, &out, c->dt, c->ndim, oshape);
  if (x == NULL || y == NULL)
    return opr_rk_close(&k, 1);
  /* same x everywhere */
  opr_fill(x, c->dt, opr_numel(c->shape, c->ndim), OPR_SEED, 0);
  int rc = spc_split(k.g, &in, &out, c->dim, c->pass_sizes ? sz : NULL);
  if (rc < 0)
    return opr_rk_close(&k, opr_op_failed(&k, "split", rc));
  void *full = opr_fresh(c->dt, opr_numel(c->shape, c->ndim), OPR_SEED, 0);
  void *ref = malloc(opr_numel(oshape, c->ndim) * spc_dtype_size(c->dt) + 1);
  opr_around(c->shape, c->ndim, d, &outer, &inner);
  opr_rows_copy(ref, sz[rank], 0, full, c->shape[d], opr_sum_before(sz, rank),
                sz[rank], outer, inner, spc_dtype_size(c->dt));
  int bad =
      opr_expect_same(rank, "split", c->dt, y, ref, opr_numel(oshape, c->ndim));
  free(full), free(ref);
  return opr_rk_close(&k, bad);
}

/* all_gather: rank r holds piece r (its own data); out is the whole. In
 * place (issue 13), in is rank r's own slot of out, as NCCL allows. */
static int gather_run(int rank, int w, const dim_case *c, int in_place) {
  opr_rk k;
  if (opr_rk_open(&k, rank, w) < 0)
    return 1;
  int d = opr_norm(c->dim, c->ndim);
  int64_t sz[OPR_MAXW], ishape[SPC_MAX_DIMS], outer, inner;
  size_t es = spc_dtype_size(c->dt), on = opr_numel(c->shape, c->ndim);
  opr_pieces(c->pat, c->shape[d], w, sz);
  memcpy(ishape, c->shape, sizeof(ishape));
  ishape[d] = sz[rank];
  spc_tensor in, out;
  void *x = in_place ? NULL : opr_rk_tensor(&k, &in, c->dt, c->ndim, ishape);
  void *y = opr_rk_tensor(&k, &out, c->dt, c->ndim, c->shape);
  opr_around(c->shape, c->ndim, d, &outer, &inner);
  uint64_t slot = (uint64_t)(opr_sum_before(sz, rank) * inner) * es;
  if (in_place && y != NULL &&
      spc_tensor_init(&in, k.buf, out.offset + slot, c->dt, c->ndim,
                      ishape) == 0)
    x = spc_tensor_data(&in);
  if (x == NULL || y == NULL)
    return opr_rk_close(&k, 1);
  opr_fill(x, c->dt, opr_numel(ishape, c->ndim), OPR_SEED, rank);
  int rc = spc_all_gather(k.g, &in, &out, c->dim, c->pass_sizes ? sz : NULL);
  if (rc < 0)
    return opr_rk_close(&k, opr_op_failed(&k, "all_gather", rc));
  void *ref = malloc(on * es + 1);
  for (int j = 0; j < w; j++) {
    void *xj = opr_fresh(c->dt, (size_t)(outer * sz[j] * inner), OPR_SEED, j);
    opr_rows_copy(ref, c->shape[d], opr_sum_before(sz, j), xj, sz[j], 0, sz[j],
                  outer, inner, es);
    free(xj);
  }
  int bad = opr_expect_same(rank, "all_gather", c->dt, y, ref, on);
  free(ref);
  return opr_rk_close(&k, bad);
}

static int gather_rank(int rank, int w, void *arg) {
  return gather_run(rank, w, arg, 0);
}

static int gather_in_place_rank(int rank, int w, void *arg) {
  return gather_run(rank, w, arg, 1);
}

static dim_case split_cases[] = {
    {"split-d0-rule", SPC_FLOAT32, 3, {7, 5, 4}, 0, OPR_P_RULE, 0},
    {"split-d1-rule-sizes", SPC_FLOAT32, 3, {3, 10, 4}, 1, OPR_P_RULE, 1},
    {"split-last-rev-sizes", SPC_FLOAT32, 3, {2, 3, 11}, -1, OPR_P_REV, 1},
    {"split-hole", SPC_FLOAT32, 2, {9, 6}, 0, OPR_P_HOLE, 1},
    {"split-i64", SPC_INT64, 2, {5, 13}, 1, OPR_P_RULE, 0},
    {"split-bf16", SPC_BFLOAT16, 4, {2, 3, 9, 5}, 2, OPR_P_REV, 1},
    {"split-f16-1d", SPC_FLOAT16, 1, {37}, 0, OPR_P_RULE, 0},
};

static dim_case gather_cases[] = {
    {"gather-first-rev", SPC_FLOAT32, 3, {11, 3, 4}, 0, OPR_P_REV, 1},
    {"gather-first-rule", SPC_FLOAT32, 3, {10, 3, 4}, 0, OPR_P_RULE, 0},
    {"gather-last-rev", SPC_FLOAT32, 3, {2, 3, 11}, -1, OPR_P_REV, 0},
    {"gather-last-hole", SPC_FLOAT32, 2, {5, 9}, 1, OPR_P_HOLE, 1},
    {"gather-i64", SPC_INT64, 2, {7, 3}, 0, OPR_P_REV, 1},
    {"gather-bf16-last", SPC_BFLOAT16, 3, {2, 2, 9}, 2, OPR_P_RULE, 0},
};

/* Slots along dim 0, or along a later dim with only 1s before it. */
static dim_case gather_in_place_cases[] = {
    {"gather-first-rev-in-place", SPC_FLOAT32, 3, {11, 3, 4}, 0, OPR_P_REV, 1},
    {"gather-hole-i64-in-place", SPC_INT64, 2, {9, 6}, 0, OPR_P_HOLE, 0},
    {"gather-last-of-1-bf16-in-place", SPC_BFLOAT16, 2, {1, 301}, 1,
     OPR_P_RULE, 0},
};

START_TEST(split_cases_all) { OPR_RUN_TABLE(split_cases, split_rank); }
END_TEST

START_TEST(all_gather_cases) { OPR_RUN_TABLE(gather_cases, gather_rank); }
END_TEST

START_TEST(all_gather_in_place_cases) {
  OPR_RUN_TABLE(gather_in_place_cases, gather_in_place_rank);
}
END_TEST

/* ---- all_to_all ----------------------------------------------------- */

typedef struct {
  const char *name;
  spc_dtype dt;
  int ndim;
  int64_t shape[SPC_MAX_DIMS]; /* S along s, the total G along g */
  int s, g;
  int always_g; /* pass G even when it divides evenly (else 0 then) */
} a2a_case;

/* Output element e of rank r (shape: s -> piece r of S, g -> G) is, with
 * j the rank whose block holds it along g, x_j at e shifted by -start_j
 * along g and by +start_r along s. */
static int a2a_rank(int rank, int w, void *arg) {
  const a2a_case *c = arg;
  opr_rk k;
  if (opr_rk_open(&k, rank, w) < 0)
    return 1;
  int nd = c->ndim, s = opr_norm(c->s, nd), g = opr_norm(c->g, nd);
  int64_t S = c->shape[s], G = c->shape[g];
  size_t es = spc_dtype_size(c->dt);
  int64_t ish[OPR_MAXW][SPC_MAX_DIMS], osh[SPC_MAX_DIMS];
  void *xs[OPR_MAXW];
  for (int j = 0; j < w; j++) {
    memcpy(ish[j], c->shape, sizeof(ish[j]));
    ish[j][g] = opr_rule(G, w, j);
    xs[j] = opr_fresh(c->dt, opr_numel(ish[j], nd), OPR_SEED, j);
  }
  memcpy(osh, c->shape, sizeof(osh));
  osh[s] = opr_rule(S, w, rank);
  spc_tensor in, out, back;
  void *x = opr_rk_tensor(&k, &in, c->dt, nd, ish[rank]);
  void *y = opr_rk_tensor(&k, &out, c->dt, nd, osh);
  void *z = opr_rk_tensor(&k, &back, c->dt, nd, ish[rank]);
  if (x == NULL || y == NULL || z == NULL)
    return opr_rk_close(&k, 1);
  opr_fill(x, c->dt, opr_numel(ish[rank], nd), OPR_SEED, rank);
  int64_t gsz = c->always_g || G % w ? G : 0;
  int rc = spc_all_to_all(k.g, &in, &out, c->s, c->g, gsz);
  if (rc < 0)
    return opr_rk_close(&k, opr_op_failed(&k, "all_to_all", rc));
  size_t on = opr_numel(osh, nd);
  char *ref = calloc(on + 1, es);
  for (size_t e = 0; e < on; e++) {
    int64_t idx[SPC_MAX_DIMS];
    size_t rem = e, si = 0;
    for (int i = nd - 1; i >= 0; i--) {
      idx[i] = (int64_t)(rem % (size_t)osh[i]);
      rem /= (size_t)osh[i];
    }
    int j = 0;
    while (idx[g] >= opr_rule_off(G, w, j) + opr_rule(G, w, j))
      j++;
    idx[g] -= opr_rule_off(G, w, j);
    idx[s] += opr_rule_off(S, w, rank);
    for (int i = 0; i < nd; i++)
      si = si * (size_t)ish[j][i] + (size_t)idx[i];
    memcpy(ref + e * es, (char *)xs[j] + si * es, es);
  }
  int bad = opr_expect_same(rank, "all_to_all", c->dt, y, ref, on);
  /* The backward op (scatter and gather swapped) restores the input. */
  rc = spc_all_to_all_backward(k.g, &out, &back, c->s, c->g, S);
  if (rc < 0)
    bad |= opr_op_failed(&k, "all_to_all_backward", rc);
  else
    bad |= opr_expect_same(rank, "all_to_all_backward round trip", c->dt, z,
                           xs[rank], opr_numel(ish[rank], nd));
  free(ref);
  for (int j = 0; j < w; j++)
    free(xs[j]);
  return opr_rk_close(&k, bad);
}

static a2a_case a2a_cases[] = {
    /* 3-d, every (scatter, gather) pair; sizes even for some worlds only */
    {"a2a-3d-s0g1", SPC_FLOAT32, 3, {12, 6, 5}, 0, 1, 0},
    {"a2a-3d-s0g2", SPC_FLOAT32, 3, {7, 3, 12}, 0, 2, 1},
    {"a2a-3d-s1g0", SPC_FLOAT32, 3, {12, 24, 2}, 1, 0, 0},
    {"a2a-3d-s1g2", SPC_FLOAT32, 3, {2, 9, 10}, -2, -1, 0},
    {"a2a-3d-s2g0", SPC_FLOAT32, 3, {5, 3, 12}, 2, 0, 0},
    {"a2a-3d-s2g1", SPC_FLOAT32, 3, {2, 12, 12}, -1, 1, 1},
    /* Ulysses [b, s/P, h, d] -> [b, s, h/P, d] */
    {"a2a-ulysses", SPC_FLOAT32, 4, {2, 24, 12, 8}, 2, 1, 0},
    {"a2a-ulysses-bf16", SPC_BFLOAT16, 4, {2, 12, 24, 4}, 2, 1, 0},
    /* 2 MiB per tensor: moves cut into several mover tasks */
    {"a2a-ulysses-large", SPC_FLOAT32, 4, {1, 256, 16, 128}, 2, 1, 0},
    {"a2a-5d", SPC_FLOAT32, 5, {2, 3, 5, 4, 3}, 3, 1, 1},
    {"a2a-unaligned", SPC_FLOAT32, 3, {3, 7, 5}, 1, 2, 1},
    {"a2a-tiny", SPC_FLOAT32, 3, {2, 3, 2}, 1, 0, 1}, /* empty pieces */
    {"a2a-i64", SPC_INT64, 2, {11, 9}, 0, 1, 1},
    {"a2a-2d-f16", SPC_FLOAT16, 2, {13, 12}, 1, 0, 0},
};

START_TEST(all_to_all_cases) { OPR_RUN_TABLE(a2a_cases, a2a_rank); }
END_TEST

/* ---- all_to_all_v, sp2hp / hp2sp ------------------------------------ */

typedef struct {
  const char *name;
  spc_dtype dt;
  int nrow;                   /* trailing dims of a row */
  int64_t row[SPC_MAX_DIMS - 1];
  int pat;
} a2av_case;

/* Rows rank i sends to rank j. Pattern 1: rank 0 sends nothing. */
static int64_t a2av_m(int pat, int i, int j) {
  return pat == 0 ? (3 * i + j + 1) % 4 : (i * j) % 3 + (j == 2 && i);
}

static int a2av_rank(int rank, int w, void *arg) {
  const a2av_case *c = arg;
  opr_rk k;
  if (opr_rk_open(&k, rank, w) < 0)
    return 1;
  int nd = 1 + c->nrow;
  int64_t ins[OPR_MAXW], outs[OPR_MAXW], ish[SPC_MAX_DIMS], osh[SPC_MAX_DIMS], rowlen = 1;
  size_t es = spc_dtype_size(c->dt);
  for (int j = 0; j < w; j++) {
    ins[j] = a2av_m(c->pat, rank, j);
    outs[j] = a2av_m(c->pat, j, rank);
  }
  for (int i = 0; i < c->nrow; i++)
    rowlen *= ish[i + 1] = osh[i + 1] = c->row[i];
  ish[0] = opr_sum_before(ins, w);
  osh[0] = opr_sum_before(outs, w);
  spc_tensor in, out;
  void *x = opr_rk_tensor(&k, &in, c->dt, nd, ish);
  void *y = opr_rk_tensor(&k, &out, c->dt, nd, osh);
  if (x == NULL || y == NULL)
    return opr_rk_close(&k, 1);
  opr_fill(x, c->dt, opr_numel(ish, nd), OPR_SEED, rank);
  int rc = spc_all_to_all_v(k.g, &in, &out, ins, outs);
  if (rc < 0)
    return opr_rk_close(&k, opr_op_failed(&k, "all_to_all_v", rc));
  char *ref = malloc(opr_numel(osh, nd) * es + 1);
  for (int i = 0, at = 0; i < w; i++) {
    int64_t rows_i = 0, from = 0;
    for (int j = 0; j < w; j++) {
      rows_i += a2av_m(c->pat, i, j);
      from += j < rank ? a2av_m(c->pat, i, j) : 0;
    }
    void *xi = opr_fresh(c->dt, (size_t)(rows_i * rowlen), OPR_SEED, i);
    opr_rows_copy(ref, osh[0], at, xi, rows_i, from, outs[i], 1, rowlen, es);
    at += (int)outs[i];
    free(xi);
  }
  int bad =
      opr_expect_same(rank, "all_to_all_v", c->dt, y, ref, opr_numel(osh, nd));
  free(ref);
  return opr_rk_close(&k, bad);
}

static a2av_case a2av_cases[] = {
    {"a2av-f32", SPC_FLOAT32, 2, {3, 2}, 0},
    {"a2av-f32-rank0-silent", SPC_FLOAT32, 1, {5}, 1},
    {"a2av-i64", SPC_INT64, 1, {3}, 0},
    {"a2av-bf16", SPC_BFLOAT16, 2, {2, 3}, 1},
};

START_TEST(all_to_all_v_cases) { OPR_RUN_TABLE(a2av_cases, a2av_rank); }
END_TEST

typedef struct {
  const char *name;
  spc_dtype dt;
  int ndim;                      /* the sp2hp input: [..., H], H = w * hh */
  int64_t lead[SPC_MAX_DIMS - 1]; /* dims before H (n = their product) */
  int64_t hh;
} mega_case;

/* sp2hp: out_r[j*n + a][b] = x_j[a][r*hh + b]; hp2sp of that is x_r. */
static int mega_rank(int rank, int w, void *arg) {
  const mega_case *c = arg;
  opr_rk k;
  if (opr_rk_open(&k, rank, w) < 0)
    return 1;
  int64_t ish[SPC_MAX_DIMS], n = 1, H = w * c->hh;
  for (int i = 0; i < c->ndim - 1; i++)
    n *= ish[i] = c->lead[i];
  ish[c->ndim - 1] = H;
  int64_t osh[2] = {w * n, c->hh};
  size_t es = spc_dtype_size(c->dt);
  spc_tensor in, mid, back;
  void *x = opr_rk_tensor(&k, &in, c->dt, c->ndim, ish);
  void *y = opr_rk_tensor(&k, &mid, c->dt, 2, osh);
  void *z = opr_rk_tensor(&k, &back, c->dt, c->ndim, ish);
  if (x == NULL || y == NULL || z == NULL)
    return opr_rk_close(&k, 1);
  opr_fill(x, c->dt, (size_t)(n * H), OPR_SEED, rank);
  int rc = spc_sp2hp(k.g, &in, &mid);
  if (rc < 0)
    return opr_rk_close(&k, opr_op_failed(&k, "sp2hp", rc));
  char *ref = malloc((size_t)(n * H) * es + 1);
  for (int j = 0; j < w; j++) {
    char *xj = opr_fresh(c->dt, (size_t)(n * H), OPR_SEED, j);
    for (int64_t a = 0; a < n; a++)
      for (int64_t b = 0; b < c->hh; b++)
        memcpy(ref + (size_t)((j * n + a) * c->hh + b) * es,
               xj + (size_t)(a * H + rank * c->hh + b) * es, es);
    free(xj);
  }
  int bad = opr_expect_same(rank, "sp2hp", c->dt, y, ref, (size_t)(n * H));
  rc = spc_hp2sp(k.g, &mid, &back);
  if (rc < 0)
    bad |= opr_op_failed(&k, "hp2sp", rc);
  else {
    opr_fill(ref, c->dt, (size_t)(n * H), OPR_SEED, rank);
    bad |= opr_expect_same(rank, "hp2sp(sp2hp(x)) == x", c->dt, z, ref,
                           (size_t)(n * H));
  }
  free(ref);
  return opr_rk_close(&k, bad);
}

static mega_case mega_cases[] = {
    {"sp2hp-2d", SPC_FLOAT32, 2, {5}, 3},
    {"sp2hp-3d", SPC_FLOAT32, 3, {2, 3}, 4},
    {"sp2hp-bf16", SPC_BFLOAT16, 2, {7}, 2},
};

START_TEST(sp2hp_hp2sp_cases) { OPR_RUN_TABLE(mega_cases, mega_rank); }
END_TEST

/* ---- zigzag --------------------------------------------------------- */

typedef struct {
  const char *name;
  spc_dtype dt;
  int ndim;
  int64_t shape[SPC_MAX_DIMS]; /* chunk length c along dim: L = 2wc */
  int dim;
} zz_case;

/* split, gather back, split backward (gather / w), gather backward (own
 * chunks * w). Chunk q of the full sequence sits on rank min(q, 2w-1-q). */
static int zz_rank(int rank, int w, void *arg) {
  const zz_case *c = arg;
  opr_rk k;
  if (opr_rk_open(&k, rank, w) < 0)
    return 1;
  int nd = c->ndim, d = opr_norm(c->dim, nd);
  int64_t ch = c->shape[d], L = 2 * w * ch, full[SPC_MAX_DIMS],
          part[SPC_MAX_DIMS], outer, inner;
  memcpy(full, c->shape, sizeof(full));
  memcpy(part, c->shape, sizeof(part));
  full[d] = L, part[d] = 2 * ch;
  size_t es = spc_dtype_size(c->dt), fn = opr_numel(full, nd),
         pn = opr_numel(part, nd);
  opr_around(full, nd, d, &outer, &inner);
  spc_tensor x_t, y_t, z_t, gy_t, gx_t, gz_t, gyy_t;
  void *x = opr_rk_tensor(&k, &x_t, c->dt, nd, full);
  void *y = opr_rk_tensor(&k, &y_t, c->dt, nd, part);
  void *z = opr_rk_tensor(&k, &z_t, c->dt, nd, full);
  void *gy = opr_rk_tensor(&k, &gy_t, c->dt, nd, part);
  void *gx = opr_rk_tensor(&k, &gx_t, c->dt, nd, full);
  void *gz = opr_rk_tensor(&k, &gz_t, c->dt, nd, full);
  void *gyy = opr_rk_tensor(&k, &gyy_t, c->dt, nd, part);
  if (!x || !y || !z || !gy || !gx || !gz || !gyy)
    return opr_rk_close(&k, 1);
  opr_fill(x, c->dt, fn, OPR_SEED, 0);
  opr_fill(gy, c->dt, pn, OPR_SEED_GRAD, rank);
  opr_fill(gz, c->dt, fn, OPR_SEED_GRAD2, rank);
  char *xf = opr_fresh(c->dt, fn, OPR_SEED, 0), *ref = malloc(fn * es + 1);
  int bad = 0, rc;
  /* forward split: chunk r then chunk 2w-1-r */
  if ((rc = spc_zigzag_split(k.g, &x_t, &y_t, c->dim)) < 0)
    bad |= opr_op_failed(&k, "zigzag_split", rc);
  else {
    opr_rows_copy(ref, 2 * ch, 0, xf, L, rank * ch, ch, outer, inner, es);
    opr_rows_copy(ref, 2 * ch, ch, xf, L, (2 * w - 1 - rank) * ch, ch, outer,
                  inner, es);
    bad |= opr_expect_same(rank, "zigzag_split", c->dt, y, ref, pn);
    if ((rc = spc_zigzag_gather(k.g, &y_t, &z_t, c->dim)) < 0)
      bad |= opr_op_failed(&k, "zigzag_gather", rc);
    else
      bad |= opr_expect_same(rank, "zigzag_gather(split(x)) == x", c->dt, z, xf,
                             fn);
  }
  /* split backward: every rank's grad chunks in natural order, / w */
  if ((rc = spc_zigzag_split_backward(k.g, &gy_t, &gx_t, c->dim)) < 0)
    bad |= opr_op_failed(&k, "zigzag_split_backward", rc);
  else {
    for (int j = 0; j < w; j++) {
      char *gj = opr_fresh(c->dt, pn, OPR_SEED_GRAD, j);
      opr_rows_copy(ref, L, j * ch, gj, 2 * ch, 0, ch, outer, inner, es);
      opr_rows_copy(ref, L, (2 * w - 1 - j) * ch, gj, 2 * ch, ch, ch, outer,
                    inner, es);
      free(gj);
    }
    opr_scale_ref(c->dt, ref, fn, SPC_SCALE_DOWN, w);
    bad |= opr_expect_same(rank, "zigzag_split_backward", c->dt, gx, ref, fn);
  }
  /* gather backward: own chunks of own grad, * w */
  if ((rc = spc_zigzag_gather_backward(k.g, &gz_t, &gyy_t, c->dim)) < 0)
    bad |= opr_op_failed(&k, "zigzag_gather_backward", rc);
  else {
    char *gf = opr_fresh(c->dt, fn, OPR_SEED_GRAD2, rank);
    opr_rows_copy(ref, 2 * ch, 0, gf, L, rank * ch, ch, outer, inner, es);
    opr_rows_copy(ref, 2 * ch, ch, gf, L, (2 * w - 1 - rank) * ch, ch, outer,
                  inner, es);
    opr_scale_ref(c->dt, ref, pn, SPC_SCALE_UP, w);
    bad |= opr_expect_same(rank, "zigzag_gather_backward", c->dt, gyy, ref, pn);
    free(gf);
  }
  free(xf), free(ref);
  return opr_rk_close(&k, bad);
}

static zz_case zz_cases[] = {
    {"zz-seq-first", SPC_FLOAT32, 3, {3, 4, 2}, 0},
    {"zz-seq-mid", SPC_FLOAT32, 4, {2, 5, 3, 2}, 1},
    {"zz-seq-last", SPC_FLOAT32, 2, {3, 1}, -1},
    {"zz-bf16", SPC_BFLOAT16, 3, {2, 3, 4}, 1},
    {"zz-f16", SPC_FLOAT16, 2, {2, 5}, 0},
};

START_TEST(zigzag_cases) { OPR_RUN_TABLE(zz_cases, zz_rank); }
END_TEST

/* ---- packed (varlen) ------------------------------------------------ */

typedef struct {
  const char *name;
  spc_dtype dt;
  int ndim;
  int64_t shape[SPC_MAX_DIMS]; /* padding rows along dim (past the seqs) */
  int dim;
  int nseq;
  int64_t lens[OPR_MAXW];
} pk_case;

/* Rows of rank r's pieces between the packing (full, D rows) and rank r's
 * pieces back to back (part, P rows): to_part picks, else places. */
static void pk_rows(const pk_case *c, int w, int r, void *part, int64_t P,
                    void *full, int64_t D, int to_part, int64_t outer,
                    int64_t inner, size_t es) {
  int64_t start = 0, at = 0;
  for (int i = 0; i < c->nseq; i++) {
    int64_t len = opr_rule(c->lens[i], w, r);
    int64_t from = start + opr_rule_off(c->lens[i], w, r);
    if (to_part)
      opr_rows_copy(part, P, at, full, D, from, len, outer, inner, es);
    else
      opr_rows_copy(full, D, from, part, P, at, len, outer, inner, es);
    at += len;
    start += c->lens[i];
  }
}

static int pk_rank(int rank, int w, void *arg) {
  const pk_case *c = arg;
  opr_rk k;
  if (opr_rk_open(&k, rank, w) < 0)
    return 1;
  int nd = c->ndim, d = opr_norm(c->dim, nd);
  int64_t total = 0, local = 0, outer, inner;
  for (int i = 0; i < c->nseq; i++)
    total += c->lens[i], local += opr_rule(c->lens[i], w, rank);
  int64_t padded[SPC_MAX_DIMS], packed[SPC_MAX_DIMS], part[SPC_MAX_DIMS];
  memcpy(padded, c->shape, sizeof(padded));
  memcpy(packed, c->shape, sizeof(packed));
  memcpy(part, c->shape, sizeof(part));
  padded[d] = total + c->shape[d], packed[d] = total, part[d] = local;
  size_t es = spc_dtype_size(c->dt), xn = opr_numel(padded, nd),
         fn = opr_numel(packed, nd), pn = opr_numel(part, nd);
  opr_around(padded, nd, d, &outer, &inner);
  spc_tensor x_t, y_t, z_t, gy_t, gx_t, gz_t, gyy_t;
  void *x = opr_rk_tensor(&k, &x_t, c->dt, nd, padded);
  void *y = opr_rk_tensor(&k, &y_t, c->dt, nd, part);
  void *z = opr_rk_tensor(&k, &z_t, c->dt, nd, packed);
  void *gy = opr_rk_tensor(&k, &gy_t, c->dt, nd, part);
  void *gx = opr_rk_tensor(&k, &gx_t, c->dt, nd, padded);
  void *gz = opr_rk_tensor(&k, &gz_t, c->dt, nd, packed);
  void *gyy = opr_rk_tensor(&k, &gyy_t, c->dt, nd, part);
  if (!x || !y || !z || !gy || !gx || !gz || !gyy)
    return opr_rk_close(&k, 1);
  opr_fill(x, c->dt, xn, OPR_SEED, 0);
  opr_fill(gy, c->dt, pn, OPR_SEED_GRAD, rank);
  opr_fill(gz, c->dt, fn, OPR_SEED_GRAD2, rank);
  char *xf = opr_fresh(c->dt, xn, OPR_SEED, 0), *ref = calloc(xn + 1, es);
  int bad = 0, rc;
  if ((rc = spc_packed_split(k.g, &x_t, &y_t, c->dim, c->lens, c->nseq)) < 0)
    bad |= opr_op_failed(&k, "packed_split", rc);
  else {
    pk_rows(c, w, rank, ref, local, xf, padded[d], 1, outer, inner, es);
    bad |= opr_expect_same(rank, "packed_split", c->dt, y, ref, pn);
    rc = spc_packed_gather(k.g, &y_t, &z_t, c->dim, c->lens, c->nseq);
    if (rc < 0)
      bad |= opr_op_failed(&k, "packed_gather", rc);
    else { /* the packed rows of x, padding dropped */
      opr_rows_copy(ref, total, 0, xf, padded[d], 0, total, outer, inner, es);
      bad |= opr_expect_same(rank, "packed_gather(split(x)) == x", c->dt, z,
                             ref, fn);
    }
  }
  /* split backward: every rank's pieces placed, / w; padding rows zero */
  rc = spc_packed_split_backward(k.g, &gy_t, &gx_t, c->dim, c->lens, c->nseq);
  if (rc < 0)
    bad |= opr_op_failed(&k, "packed_split_backward", rc);
  else {
    memset(ref, 0, xn * es);
    for (int j = 0; j < w; j++) {
      int64_t lj = 0;
      for (int i = 0; i < c->nseq; i++)
        lj += opr_rule(c->lens[i], w, j);
      char *gj =
          opr_fresh(c->dt, (size_t)(outer * lj * inner), OPR_SEED_GRAD, j);
      pk_rows(c, w, j, gj, lj, ref, padded[d], 0, outer, inner, es);
      free(gj);
    }
    opr_scale_ref(c->dt, ref, xn, SPC_SCALE_DOWN, w);
    bad |= opr_expect_same(rank, "packed_split_backward", c->dt, gx, ref, xn);
  }
  /* gather backward: own pieces of own grad, * w */
  rc = spc_packed_gather_backward(k.g, &gz_t, &gyy_t, c->dim, c->lens,
                                  c->nseq);
  if (rc < 0)
    bad |= opr_op_failed(&k, "packed_gather_backward", rc);
  else {
    char *gf = opr_fresh(c->dt, fn, OPR_SEED_GRAD2, rank);
    pk_rows(c, w, rank, ref, local, gf, total, 1, outer, inner, es);
    opr_scale_ref(c->dt, ref, pn, SPC_SCALE_UP, w);
    bad |= opr_expect_same(rank, "packed_gather_backward", c->dt, gyy, ref, pn);
    free(gf);
  }
  free(xf), free(ref);
  return opr_rk_close(&k, bad);
}

static pk_case pk_cases[] = {
    {"packed-first", SPC_FLOAT32, 3, {0, 3, 2}, 0, 4, {5, 1, 7, 3}},
    {"packed-mid-zero-len", SPC_FLOAT32, 3, {2, 0, 3}, 1, 3, {6, 0, 9}},
    {"packed-last-one-seq", SPC_FLOAT32, 2, {3, 0}, -1, 1, {11}},
    {"packed-bf16", SPC_BFLOAT16, 2, {0, 4}, 0, 3, {4, 2, 5}},
    {"packed-equal", SPC_FLOAT32, 2, {0, 3}, 0, 2, {8, 8}},
    {"packed-padded", SPC_FLOAT32, 2, {2, 3}, 0, 2, {5, 4}},
};

START_TEST(packed_cases) { OPR_RUN_TABLE(pk_cases, pk_rank); }
END_TEST

int main(void) {
  const TTest *tests[] = {
      split_cases_all,   all_gather_cases, all_gather_in_place_cases, all_to_all_cases, all_to_all_v_cases,
      sp2hp_hp2sp_cases, zigzag_cases,     packed_cases};
  return opr_run_suite("ops_copy", tests, sizeof(tests) / sizeof(tests[0]));
}
