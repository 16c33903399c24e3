/* The split planner (kernels/plan_split.c): plans run by the reference
 * executor (spk_plan_exec) over per-rank byte arrays are compared with a
 * naive per-element reference that shares no code with the planner (its
 * pieces come from dealing elements round-robin, not from split_rule).
 * Ranks hold different contents: each must keep a slice of its own input.
 * Also: the grad scale flag, all_gather after split is the identity, and
 * bad arguments fail with the right status and a message naming them. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"

#define MAXW 8
#define IN(r) ((r)*SPK_T_COUNT + SPK_T_IN)
#define OUT(r) ((r)*SPK_T_COUNT + SPK_T_OUT)

static uint64_t rng_state;
static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int64_t rng_range(int64_t lo, int64_t hi) { /* inclusive */
  return lo + (int64_t)(rng_next() % (uint64_t)(hi - lo + 1));
}

/* Elements i of [0, n) with i % w == r: the rule's piece r, found by
 * dealing the elements out one by one. */
static int64_t dealt(int64_t n, int w, int r) {
  int64_t k = 0;
  for (int64_t i = 0; i < n; i++)
    k += i % w == r;
  return k;
}

/* One split as every rank describes it; each rank owns a copy of the size
 * list, as on the wire. piece[r] / off[r]: rank r's slice along d. */
typedef struct {
  int world, nd, d;
  spk_dtype dt;
  int64_t piece[MAXW], off[MAXW];
  int64_t sizes[MAXW][MAXW];
  spk_op_args args[MAXW];
  const spk_op_args *argp[MAXW];
} scase;

static void mk(scase *c, int world, int nd, const int64_t *shape, int d,
               const int64_t *sizes, spk_dtype dt, uint32_t flags) {
  memset(c, 0, sizeof(*c));
  c->world = world, c->nd = nd, c->d = d, c->dt = dt;
  for (int r = 0; r < world; r++) {
    c->piece[r] = sizes ? sizes[r] : dealt(shape[d], world, r);
    c->off[r] = r ? c->off[r - 1] + c->piece[r - 1] : 0;
    spk_op_args *a = &c->args[r];
    a->op = SPK_OP_SPLIT, a->dtype = dt, a->ndims = 1, a->dims[0] = d;
    a->flags = flags;
    a->in.ndim = a->out.ndim = nd;
    for (int i = 0; i < nd; i++)
      a->in.dim[i] = a->out.dim[i] = shape[i];
    a->out.dim[d] = c->piece[r];
    if (sizes) {
      memcpy(c->sizes[r], sizes, sizeof(int64_t) * (size_t)world);
      a->nsizes = world, a->sizes = c->sizes[r];
    }
    c->argp[r] = a;
  }
}

static size_t numel(const spk_shape *s) {
  size_t n = 1;
  for (int i = 0; i < s->ndim; i++)
    n *= (size_t)s->dim[i];
  return n;
}

/* Copy one element, scaled as the plan's flags say (float32 only). */
static void put(const scase *c, uint8_t *dst, const uint8_t *src) {
  uint32_t scale = c->args[0].flags >> SPK_FLAG_SCALE_SHIFT;
  float x;
  if (scale == SPK_SCALE_NONE)
    return (void)memcpy(dst, src, spk_dtype_size(c->dt));
  memcpy(&x, src, sizeof(x));
  x = scale == SPK_SCALE_UP ? x * (float)c->world : x / (float)c->world;
  memcpy(dst, &x, sizeof(x));
}

/* C-order index of element o of shape s, and back. */
static void unravel(size_t o, const spk_shape *s, int64_t *idx) {
  for (int i = s->ndim - 1; i >= 0; i--) {
    idx[i] = (int64_t)(o % (size_t)s->dim[i]);
    o /= (size_t)s->dim[i];
  }
}

static size_t ravel(const int64_t *idx, const spk_shape *s) {
  size_t at = 0;
  for (int i = 0; i < s->ndim; i++)
    at = at * (size_t)s->dim[i] + (size_t)idx[i];
  return at;
}

/* Reference: out_r element idx is rank r's input element idx with idx[d]
 * moved by the start of r's piece. */
static void naive(const scase *c, uint8_t *const *in, uint8_t **want) {
  size_t es = spk_dtype_size(c->dt);
  for (int r = 0; r < c->world; r++) {
    const spk_shape *os = &c->args[r].out;
    for (size_t o = 0; o < numel(os); o++) {
      int64_t idx[SPK_MAX_DIMS];
      unravel(o, os, idx);
      idx[c->d] += c->off[r];
      put(c, want[r] + o * es, in[r] + ravel(idx, &c->args[r].in) * es);
    }
  }
}

/* Highest byte + 1 a move touches on one side. */
static uint64_t move_end(const spk_move *m, int dst_side) {
  uint64_t end = dst_side ? m->dst_off : m->src_off;
  for (int i = 0; i < m->nd - 1; i++)
    end += (m->len[i] - 1) * (dst_side ? m->dst_stride[i] : m->src_stride[i]);
  return end + m->len[m->nd - 1];
}

/* Build the plan and run it on bases; every move must stay inside its
 * tensors (on its own rank for a split) and the plan must write exactly
 * the outputs' bytes. */
static void exec(const spk_op_args *const *argp, int world, uint8_t **bases,
                 const size_t *sz, const char *tag) {
  spk_plan plan;
  spk_plan_init(&plan, world);
  spk_err err = {{0}};
  int rc = spk_plan_build(argp, world, &plan, &err);
  ck_assert_msg(rc == SPK_OK, "%s: plan_build: %d %s", tag, rc, err.msg);
  uint64_t out_total = 0;
  for (int r = 0; r < world; r++)
    out_total += sz[OUT(r)];
  ck_assert_msg(plan.bytes == out_total, "%s: plan.bytes %llu want %llu", tag,
                (unsigned long long)plan.bytes, (unsigned long long)out_total);
  for (size_t i = 0; i < plan.nmoves; i++) {
    const spk_move *m = &plan.moves[i];
    ck_assert_msg(
        m->src_t == SPK_T_IN && m->dst_t == SPK_T_OUT &&
            m->src_rank < (uint32_t)world && m->dst_rank < (uint32_t)world &&
            (argp[0]->op != SPK_OP_SPLIT || m->src_rank == m->dst_rank),
        "%s: move %zu has bad ends", tag, i);
    ck_assert_msg(move_end(m, 0) <= sz[IN(m->src_rank)] &&
                      move_end(m, 1) <= sz[OUT(m->dst_rank)],
                  "%s: move %zu leaves its tensors", tag, i);
  }
  spk_plan_exec(&plan, bases);
  spk_plan_free(&plan);
}

/* Per-rank buffers of a case; inputs random (finite floats if scaled). */
typedef struct {
  uint8_t *b[MAXW * SPK_T_COUNT];
  size_t sz[MAXW * SPK_T_COUNT];
} bufs;

static void bufs_alloc(bufs *b, const scase *c) {
  size_t es = spk_dtype_size(c->dt);
  for (int r = 0; r < c->world; r++) {
    b->sz[IN(r)] = numel(&c->args[r].in) * es;
    b->sz[OUT(r)] = numel(&c->args[r].out) * es;
    b->b[IN(r)] = malloc(b->sz[IN(r)] + 1);
    b->b[OUT(r)] = malloc(b->sz[OUT(r)] + 1);
    for (size_t i = 0; i < b->sz[IN(r)]; i++) /* |float| < 2 if scaled */
      b->b[IN(r)][i] =
          (uint8_t)rng_next() & (c->args[0].flags && i % 4 == 3 ? 0xbf : 0xff);
  }
}

static void bufs_free(bufs *b, int world) {
  for (int i = 0; i < world * SPK_T_COUNT; i++)
    free(b->b[i]);
}

/* Run the plan twice (outputs prefilled 0x00, then 0xff, so an unwritten
 * byte shows) and compare every output byte with the reference. */
static void run_case(const scase *c, const char *tag) {
  uint8_t *in[MAXW], *want[MAXW];
  bufs b;
  bufs_alloc(&b, c);
  for (int r = 0; r < c->world; r++)
    in[r] = b.b[IN(r)], want[r] = malloc(b.sz[OUT(r)] + 1);
  naive(c, in, want);
  for (int fill = 0; fill < 2; fill++) {
    for (int r = 0; r < c->world; r++)
      memset(b.b[OUT(r)], fill ? 0xff : 0, b.sz[OUT(r)]);
    exec(c->argp, c->world, b.b, b.sz, tag);
    for (int r = 0; r < c->world; r++)
      ck_assert_msg(memcmp(b.b[OUT(r)], want[r], b.sz[OUT(r)]) == 0,
                    "%s: rank %d output differs from reference (fill %d)", tag,
                    r, fill);
  }
  for (int r = 0; r < c->world; r++)
    free(want[r]);
  bufs_free(&b, c->world);
}

static const spk_dtype dts[] = {SPK_I8,  SPK_U8,  SPK_F16, SPK_BF16,
                                SPK_F32, SPK_I32, SPK_F64, SPK_I64};

/* A random split: shape, dim (spelled from either end per rank), pieces
 * with empty ones, with or without a size list. */
static void random_case(scase *c, uint32_t flags, spk_dtype dt) {
  int world = (int)rng_range(1, MAXW), nd = (int)rng_range(1, 5);
  int d = (int)rng_range(0, nd - 1), with_sizes = (int)rng_range(0, 1);
  int64_t shape[SPK_MAX_DIMS], sizes[MAXW], n = 0;
  for (int i = 0; i < nd; i++)
    shape[i] = rng_range(0, 19) == 0 ? 0 : rng_range(1, nd > 3 ? 3 : 4);
  for (int r = 0; r < world; r++)
    n += sizes[r] = rng_range(0, 2) == 0 ? 0 : rng_range(1, 4);
  shape[d] = with_sizes ? n : rng_range(0, 3 * world);
  mk(c, world, nd, shape, d, with_sizes ? sizes : NULL, dt, flags);
  for (int r = 0; r < world; r++)
    if (rng_range(0, 1))
      c->args[r].dims[0] = d - nd;
}

static void random_run(uint64_t seed, int n, int scaled) {
  scase c;
  rng_state = seed;
  for (int it = 0; it < n; it++) {
    uint32_t f = 0;
    if (scaled) /* alternate down and up */
      f = (it % 2 ? SPK_SCALE_UP : SPK_SCALE_DOWN) << SPK_FLAG_SCALE_SHIFT;
    random_case(&c, f, scaled ? SPK_F32 : dts[it % 8]);
    char tag[96];
    snprintf(tag, sizeof(tag), "seed %#llx case %d (w %d nd %d d %d)",
             (unsigned long long)seed, it, c.world, c.nd, c.d);
    run_case(&c, tag);
  }
}

START_TEST(test_random) { random_run(0x5b117ull, 800, 0); }
END_TEST

/* The gather-backward use: float32 scaled by 1/w (one IEEE division per
 * element, bitwise), and by w. */
START_TEST(test_scale) { random_run(0x5ca1eull, 100, 1); }
END_TEST

START_TEST(test_edges) {
  scase c;
  mk(&c, 1, 1, (const int64_t[]){7}, 0, NULL, SPK_I8, 0);
  run_case(&c, "world 1");
  mk(&c, 5, 2, (const int64_t[]){3, 2}, 1, NULL, SPK_F32, 0);
  run_case(&c, "fewer elements than ranks");
  mk(&c, 3, 2, (const int64_t[]){4, 0}, 1, NULL, SPK_F64, 0);
  run_case(&c, "empty split dim");
  mk(&c, 3, 3, (const int64_t[]){2, 5, 3}, 1, (const int64_t[]){0, 5, 0},
     SPK_U8, 0);
  run_case(&c, "one rank takes all");
  mk(&c, 2, 8, (const int64_t[]){2, 1, 2, 1, 2, 1, 2, 3}, 7, NULL, SPK_I64, 0);
  for (int r = 0; r < 2; r++)
    c.args[r].dims[0] = -1;
  run_case(&c, "8-d, last dim");
}
END_TEST

/* all_gather with the split's sizes undoes the split when every rank holds
 * the same tensor. */
static void gather_back(const scase *c, const bufs *b, const char *tag) {
  spk_op_args g[MAXW];
  const spk_op_args *gp[MAXW];
  uint8_t *gb[MAXW * SPK_T_COUNT];
  size_t gsz[MAXW * SPK_T_COUNT];
  for (int r = 0; r < c->world; r++) {
    g[r] = c->args[r];
    g[r].op = SPK_OP_ALL_GATHER;
    g[r].in = c->args[r].out, g[r].out = c->args[r].in;
    g[r].nsizes = c->world, g[r].sizes = c->piece;
    gp[r] = &g[r];
    int i = IN(r), o = OUT(r);
    gb[i] = b->b[o], gsz[i] = b->sz[o];
    gsz[o] = b->sz[i], gb[o] = malloc(gsz[o] + 1);
    memset(gb[o], 0xa5, gsz[o]);
  }
  exec(gp, c->world, gb, gsz, tag);
  for (int r = 0; r < c->world; r++) {
    int o = OUT(r);
    ck_assert_msg(memcmp(gb[o], b->b[IN(0)], gsz[o]) == 0,
                  "%s: rank %d: gather(split(x)) != x", tag, r);
    free(gb[o]);
  }
}

START_TEST(test_gather_inverse) {
  const uint64_t seed = 0x1d3e7ull;
  rng_state = seed;
  for (int it = 0; it < 300; it++) {
    scase c;
    bufs b;
    random_case(&c, 0, dts[it % 8]);
    bufs_alloc(&b, &c);
    for (int r = 1; r < c.world; r++)
      memcpy(b.b[IN(r)], b.b[IN(0)], b.sz[IN(0)]);
    char tag[96];
    snprintf(tag, sizeof(tag), "seed %#llx case %d (w %d nd %d d %d)",
             (unsigned long long)seed, it, c.world, c.nd, c.d);
    exec(c.argp, c.world, b.b, b.sz, tag);
    gather_back(&c, &b, tag);
    bufs_free(&b, c.world);
  }
}
END_TEST

/* got must be rc, with a message holding both needles (NULL: any). */
static void expect(int got, const char *msg, int rc, const char *n1,
                   const char *n2) {
  ck_assert_msg(got == rc, "gave %d (%s), want %d", got, msg, rc);
  ck_assert_msg(n1 == NULL || strstr(msg, n1) != NULL, "'%s' lacks '%s'", msg,
                n1);
  ck_assert_msg(n2 == NULL || strstr(msg, n2) != NULL, "'%s' lacks '%s'", msg,
                n2);
}

static void expect_build(scase *c, int rc, const char *n1, const char *n2) {
  spk_plan plan;
  spk_err err = {{0}};
  spk_plan_init(&plan, c->world);
  expect(spk_plan_build(c->argp, c->world, &plan, &err), err.msg, rc, n1, n2);
  spk_plan_free(&plan);
}

static void expect_check(const spk_op_args *a, int world, int rank, int rc,
                         const char *needle) {
  spk_err err = {{0}};
  expect(spk_args_check(a, world, rank, &err), err.msg, rc, needle, NULL);
}

static const int64_t S64[] = {6, 4}, P123[] = {1, 2, 3};

START_TEST(test_bad_args) {
  scase c;
  mk(&c, 3, 2, S64, 0, NULL, SPK_F32, 0);
  for (int r = 0; r < 3; r++)
    c.args[r].ndims = 2;
  expect_build(&c, SPK_EINVAL, "split takes 1 dim", "got 2");
  for (int r = 0; r < 3; r++)
    c.args[r].ndims = 1, c.args[r].dims[0] = 2;
  expect_build(&c, SPK_EINVAL, "split dim 2", NULL);
  c.args[0].dims[0] = c.args[2].dims[0] = 0; /* only rank 1 is wrong */
  c.args[1].dims[0] = -3;
  expect_build(&c, SPK_EINVAL, "split dim -3", NULL);
  mk(&c, 3, 2, S64, 0, P123, SPK_F32, 0);
  for (int r = 0; r < 3; r++)
    c.args[r].nsizes = 2;
  expect_build(&c, SPK_EINVAL, "2 entries", "world size is 3");
  mk(&c, 3, 2, S64, 0, (const int64_t[]){1, 2, 4}, SPK_F32, 0);
  expect_build(&c, SPK_EINVAL, "sum to 7", "size 6");
  mk(&c, 3, 2, S64, 0, (const int64_t[]){-1, 3, 4}, SPK_F32, 0);
  c.args[0].out.dim[0] = 0;
  expect_build(&c, SPK_EINVAL, "sizes[0] is negative", NULL);
}
END_TEST

START_TEST(test_bad_output) {
  scase c;
  mk(&c, 3, 2, S64, 0, NULL, SPK_F32, 0);
  c.args[1].out.dim[1] = 5;
  expect_build(&c, SPK_EINVAL, "rank 1", "should be [2, 4]");
  mk(&c, 3, 2, S64, 0, P123, SPK_F32, 0);
  c.args[2].out.dim[0] = 2;
  expect_build(&c, SPK_EINVAL, "rank 2", "should be [3, 4]");
  mk(&c, 3, 2, S64, 1, NULL, SPK_F32, 0); /* 4 over 3: 2, 1, 1 */
  c.args[0].out.dim[1] = 1;
  expect_build(&c, SPK_EINVAL, "rank 0", "should be [6, 2]");
  mk(&c, 3, 2, S64, 0, NULL, SPK_F32, 0);
  c.args[0].out.ndim = 3, c.args[0].out.dim[2] = 1;
  expect_build(&c, SPK_EINVAL, "output shape [2, 4, 1]", "[2, 4]");
}
END_TEST

START_TEST(test_mismatch) {
  scase c;
  /* Rank 2's input differs off the split dim; its output fits it. */
  mk(&c, 3, 2, S64, 0, NULL, SPK_F32, 0);
  c.args[2].in.dim[1] = c.args[2].out.dim[1] = 5;
  expect_build(&c, SPK_EMISMATCH, "input shape", "rank 2 has [6, 5]");
  /* Rank 1's input is longer along the split dim: 7 over 3 gives it 2 too. */
  mk(&c, 3, 2, S64, 0, NULL, SPK_F32, 0);
  c.args[1].in.dim[0] = 7;
  expect_build(&c, SPK_EMISMATCH, "input shape", "rank 1 has [7, 4]");
  /* Size lists that each fit their own rank. */
  mk(&c, 3, 2, S64, 0, P123, SPK_F32, 0);
  c.sizes[1][0] = 2, c.sizes[1][2] = 2;
  expect_build(&c, SPK_EMISMATCH, "sizes", "rank 1");
  mk(&c, 2, 2, (const int64_t[]){4, 4}, 0, NULL, SPK_F32, 0);
  c.args[1].dims[0] = 1, c.args[1].out.dim[0] = 4, c.args[1].out.dim[1] = 2;
  expect_build(&c, SPK_EMISMATCH, "dim", "rank 1");
  mk(&c, 2, 2, S64, 0, NULL, SPK_F32, 0);
  c.args[1].flags = SPK_SCALE_DOWN << SPK_FLAG_SCALE_SHIFT;
  expect_build(&c, SPK_EMISMATCH, "flags", "rank 1");
}
END_TEST

/* What one rank can check alone: everything but the other ranks' shapes. */
START_TEST(test_args_check) {
  scase c;
  mk(&c, 3, 2, S64, 1, NULL, SPK_F32, 0);
  spk_op_args a = c.args[2];
  expect_check(&a, 3, 2, SPK_OK, NULL);
  a.dims[0] = -1;
  expect_check(&a, 3, 2, SPK_OK, NULL);
  a.dims[0] = -3;
  expect_check(&a, 3, 2, SPK_EINVAL, "split dim -3");
  a = c.args[2], a.ndims = 0;
  expect_check(&a, 3, 2, SPK_EINVAL, "1 dim");
  a = c.args[2], a.out.dim[1] = 2;
  expect_check(&a, 3, 2, SPK_EINVAL, "should be [6, 1]");
  mk(&c, 3, 2, S64, 0, P123, SPK_F32, 0);
  a = c.args[0];
  expect_check(&a, 3, 0, SPK_OK, NULL);
  a.in.dim[0] = 5;
  expect_check(&a, 3, 0, SPK_EINVAL, "input dim 0 has size 5");
  a = c.args[0], a.nsizes = 2; /* {1, 2} for a world of 2 */
  expect_check(&a, 2, 0, SPK_EINVAL, "sum to 3");
  a = c.args[0];
  expect_check(&a, 3, 1, SPK_EINVAL, "rank 1");
}
END_TEST

static Suite *split_suite(void) {
  Suite *s = suite_create("plan_split");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_random);
  tcase_add_test(tc, test_scale);
  tcase_add_test(tc, test_edges);
  tcase_add_test(tc, test_gather_inverse);
  tcase_add_test(tc, test_bad_args);
  tcase_add_test(tc, test_bad_output);
  tcase_add_test(tc, test_mismatch);
  tcase_add_test(tc, test_args_check);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(split_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
