/* The zigzag planners (kernels/plan_zigzag.c): plans run by the reference
 * executor (spk_plan_exec) over per-rank byte arrays are compared with a
 * naive per-element reference that shares no code with the planner, for
 * worlds of 1..8 ranks and of 100 (the seeds' int8 chunk indices stopped at
 * 63). Also: the grad scale flag, gather after split is the identity, and
 * bad arguments fail with the right status and a message naming them. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"

#define MAXW 100
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

/* One zigzag op as every rank describes it: the full sequence has shape
 * `shape` with 2w chunks of c along d; ranks hold 2c. */
typedef struct {
  int world, nd, d, gather;
  int64_t c;
  spk_dtype dt;
  spk_op_args args[MAXW];
  const spk_op_args *argp[MAXW];
} zcase;

static void mk(zcase *c, int gather, int world, int nd, const int64_t *shape,
               int d, spk_dtype dt, uint32_t flags) {
  memset(c, 0, sizeof(*c));
  c->world = world, c->nd = nd, c->d = d, c->gather = gather, c->dt = dt;
  c->c = shape[d] / (2 * world);
  for (int r = 0; r < world; r++) {
    spk_op_args *a = &c->args[r];
    a->op = gather ? SPK_OP_ZIGZAG_GATHER : SPK_OP_ZIGZAG_SPLIT;
    a->dtype = dt, a->ndims = 1, a->dims[0] = d, a->flags = flags;
    a->in.ndim = a->out.ndim = nd;
    for (int i = 0; i < nd; i++)
      a->in.dim[i] = a->out.dim[i] = shape[i];
    (gather ? &a->in : &a->out)->dim[d] = 2 * c->c;
    c->argp[r] = a;
  }
}

static size_t numel(const spk_shape *s) {
  size_t n = 1;
  for (int i = 0; i < s->ndim; i++)
    n *= (size_t)s->dim[i];
  return n;
}

/* Where output position j of rank r comes from: rank *k, position (the
 * return value) along d. Chunk q of the sequence is [q*c, (q+1)*c); rank
 * r holds chunks r and 2w-1-r. */
static int64_t zz_source(const zcase *c, int r, int64_t j, int *k) {
  int64_t w2 = 2 * (int64_t)c->world;
  if (!c->gather) {
    *k = r;
    int64_t q = j < c->c ? r : w2 - 1 - r;
    return q * c->c + j % c->c;
  }
  int64_t q = j / c->c;
  *k = (int)(q < c->world ? q : w2 - 1 - q);
  return (q < c->world ? 0 : c->c) + j % c->c;
}

/* Copy one element, scaled as the plan's flags say (float32 only). */
static void put(const zcase *c, uint8_t *dst, const uint8_t *src) {
  uint32_t scale = c->args[0].flags >> SPK_FLAG_SCALE_SHIFT;
  float x;
  if (scale == SPK_SCALE_NONE)
    return (void)memcpy(dst, src, spk_dtype_size(c->dt));
  memcpy(&x, src, sizeof(x));
  x = scale == SPK_SCALE_UP ? x * (float)c->world : x / (float)c->world;
  memcpy(dst, &x, sizeof(x));
}

/* Reference: every output element, found by its C-order index. */
static void naive(const zcase *c, uint8_t *const *in, uint8_t **want) {
  size_t es = spk_dtype_size(c->dt);
  for (int r = 0; r < c->world; r++) {
    const spk_shape *os = &c->args[r].out;
    for (size_t o = 0; o < numel(os); o++) {
      int64_t idx[SPK_MAX_DIMS];
      size_t rem = o, si = 0;
      for (int i = c->nd - 1; i >= 0; i--) {
        idx[i] = (int64_t)(rem % (size_t)os->dim[i]);
        rem /= (size_t)os->dim[i];
      }
      int k;
      idx[c->d] = zz_source(c, r, idx[c->d], &k);
      for (int i = 0; i < c->nd; i++)
        si = si * (size_t)c->args[k].in.dim[i] + (size_t)idx[i];
      put(c, want[r] + o * es, in[k] + si * es);
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
 * tensors and the plan must write exactly the outputs' bytes. */
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
    ck_assert_msg(m->src_t == SPK_T_IN && m->dst_t == SPK_T_OUT &&
                      m->src_rank < (uint32_t)world &&
                      m->dst_rank < (uint32_t)world,
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

static void bufs_alloc(bufs *b, const zcase *c) {
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
static void run_case(const zcase *c, const char *tag) {
  static uint8_t *in[MAXW], *want[MAXW];
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

/* A random case: shape (now and then an empty dim), chunks of 0..3, the
 * dim spelled from either end per rank. */
static void random_case(zcase *c, int gather, int world, uint32_t flags,
                        spk_dtype dt) {
  int nd = (int)rng_range(1, world > 8 ? 3 : 5), d = (int)rng_range(0, nd - 1);
  int64_t shape[SPK_MAX_DIMS];
  for (int i = 0; i < nd; i++)
    shape[i] = rng_range(0, 19) == 0 ? 0 : rng_range(1, nd > 3 ? 3 : 4);
  shape[d] = 2 * world * rng_range(rng_range(0, 5) == 0 ? 0 : 1, 3);
  mk(c, gather, world, nd, shape, d, dt, flags);
  for (int r = 0; r < world; r++)
    if (rng_range(0, 1))
      c->args[r].dims[0] = d - nd;
}

static void random_run(uint64_t seed, int n, int world, uint32_t flags) {
  static zcase c;
  rng_state = seed;
  for (int it = 0; it < n; it++) {
    int w = world ? world : (int)rng_range(1, 8), gather = it % 2;
    uint32_t f = flags;
    if (f) /* alternate down and up */
      f = (it / 2 % 2 ? SPK_SCALE_UP : SPK_SCALE_DOWN) << SPK_FLAG_SCALE_SHIFT;
    random_case(&c, gather, w, f, f ? SPK_F32 : dts[it / 2 % 8]);
    char tag[128];
    snprintf(tag, sizeof(tag), "seed %#llx case %d (%s w %d nd %d d %d)",
             (unsigned long long)seed, it, gather ? "gather" : "split", w, c.nd,
             c.d);
    run_case(&c, tag);
  }
}

START_TEST(test_random) { random_run(0x2192a9ull, 1000, 0, 0); }
END_TEST

START_TEST(test_world_100) { random_run(0x100ull, 12, 100, 0); }
END_TEST

/* Float32 scaled by 1/w (one IEEE division, bitwise) and by w. */
START_TEST(test_scale) { random_run(0x5ca1eull, 100, 0, 1); }
END_TEST

/* The worked example: w = 2, L = 8, positions as values. */
START_TEST(test_example) {
  static zcase c;
  uint8_t x[8] = {0, 1, 2, 3, 4, 5, 6, 7}, o[2][4], back[2][8];
  uint8_t *sb[4] = {x, o[0], x, o[1]}, *gb[4] = {o[0], back[0], o[1], back[1]};
  size_t ssz[4] = {8, 4, 8, 4}, gsz[4] = {4, 8, 4, 8};
  mk(&c, 0, 2, 1, (const int64_t[]){8}, 0, SPK_U8, 0);
  exec(c.argp, 2, sb, ssz, "example split");
  ck_assert_mem_eq(o[0], ((const uint8_t[]){0, 1, 6, 7}), 4);
  ck_assert_mem_eq(o[1], ((const uint8_t[]){2, 3, 4, 5}), 4);
  mk(&c, 1, 2, 1, (const int64_t[]){8}, 0, SPK_U8, 0);
  exec(c.argp, 2, gb, gsz, "example gather");
  ck_assert_mem_eq(back[0], x, 8);
  ck_assert_mem_eq(back[1], x, 8);
}
END_TEST

/* zigzag_gather(zigzag_split(x)) == x on every rank when every rank holds
 * x: the gather's inputs are the split's outputs. */
START_TEST(test_inverse) {
  const uint64_t seed = 0x1d3e7ull;
  static zcase s, g;
  rng_state = seed;
  for (int it = 0; it < 300; it++) {
    bufs b;
    int w = it % 50 == 0 ? 100 : (int)rng_range(1, 8);
    random_case(&s, 0, w, 0, dts[it % 8]);
    mk(&g, 1, w, s.nd, s.args[0].in.dim, s.d, s.dt, 0);
    bufs_alloc(&b, &s);
    for (int r = 1; r < w; r++)
      memcpy(b.b[IN(r)], b.b[IN(0)], b.sz[IN(0)]);
    char tag[96];
    snprintf(tag, sizeof(tag), "seed %#llx case %d (w %d nd %d d %d)",
             (unsigned long long)seed, it, w, s.nd, s.d);
    exec(s.argp, w, b.b, b.sz, tag);
    static uint8_t *gb[MAXW * SPK_T_COUNT];
    static size_t gsz[MAXW * SPK_T_COUNT];
    for (int r = 0; r < w; r++) {
      gb[IN(r)] = b.b[OUT(r)], gsz[IN(r)] = b.sz[OUT(r)];
      gsz[OUT(r)] = b.sz[IN(r)], gb[OUT(r)] = malloc(gsz[OUT(r)] + 1);
      memset(gb[OUT(r)], 0xa5, gsz[OUT(r)]);
    }
    exec(g.argp, w, gb, gsz, tag);
    for (int r = 0; r < w; r++) {
      ck_assert_msg(memcmp(gb[OUT(r)], b.b[IN(0)], gsz[OUT(r)]) == 0,
                    "%s: rank %d: gather(split(x)) != x", tag, r);
      free(gb[OUT(r)]);
    }
    bufs_free(&b, w);
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

static void expect_build(zcase *c, int rc, const char *n1, const char *n2) {
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

static const int64_t S38[] = {3, 8};

START_TEST(test_bad_args) {
  static zcase c;
  for (int gather = 0; gather < 2; gather++) {
    mk(&c, gather, 2, 2, S38, 1, SPK_F32, 0);
    for (int r = 0; r < 2; r++)
      c.args[r].ndims = 2;
    expect_build(&c, SPK_EINVAL,
                 gather ? "zigzag_gather takes 1 dim"
                        : "zigzag_split takes 1 dim",
                 "got 2");
    mk(&c, gather, 2, 2, S38, 1, SPK_F32, 0);
    c.args[1].dims[0] = -3;
    expect_build(&c, SPK_EINVAL, "zigzag dim -3", NULL);
  }
  mk(&c, 0, 2, 2, S38, 1, SPK_F32, 0);
  for (int r = 0; r < 2; r++)
    c.args[r].in.dim[1] = 7;
  expect_build(&c, SPK_EINVAL,
               "zigzag length 7 along dim 1 is not divisible by 2*cp = 4",
               NULL);
  mk(&c, 0, 3, 2, (const int64_t[]){3, 12}, 1, SPK_F32, 0);
  for (int r = 0; r < 3; r++) /* even, and divisible by w, not by 2w */
    c.args[r].in.dim[1] = 9, c.args[r].out.dim[1] = 3;
  expect_build(&c, SPK_EINVAL, "length 9", "2*cp = 6");
  mk(&c, 1, 2, 2, S38, 1, SPK_F32, 0);
  for (int r = 0; r < 2; r++)
    c.args[r].in.dim[1] = 3, c.args[r].out.dim[1] = 6;
  expect_build(&c, SPK_EINVAL, "input length 3 along dim 1 is odd", NULL);
}
END_TEST

START_TEST(test_bad_output) {
  static zcase c;
  mk(&c, 0, 2, 2, S38, 1, SPK_F32, 0);
  c.args[1].out.dim[1] = 8;
  expect_build(&c, SPK_EINVAL, "rank 1", "should be [3, 4]");
  mk(&c, 0, 2, 2, S38, 1, SPK_F32, 0);
  c.args[0].out.dim[0] = 1;
  expect_build(&c, SPK_EINVAL, "rank 0", "should be [3, 4]");
  mk(&c, 1, 2, 2, S38, 1, SPK_F32, 0);
  c.args[1].out.dim[1] = 4;
  expect_build(&c, SPK_EINVAL, "rank 1", "should be [3, 8]");
  mk(&c, 1, 2, 2, S38, 1, SPK_F32, 0);
  c.args[0].out.ndim = 1;
  expect_build(&c, SPK_EINVAL, "output shape [3]", "should be [3, 8]");
}
END_TEST

START_TEST(test_mismatch) {
  static zcase c;
  for (int gather = 0; gather < 2; gather++) {
    /* Off the zigzag dim; each rank's output fits its own input. */
    mk(&c, gather, 3, 2, (const int64_t[]){3, 12}, 1, SPK_F32, 0);
    c.args[2].in.dim[0] = c.args[2].out.dim[0] = 2;
    expect_build(&c, SPK_EMISMATCH, "input shape", "rank 2 has [2, ");
    /* Along it: rank 1 splits 24 (gathers chunks of 4) instead of 12. */
    mk(&c, gather, 3, 2, (const int64_t[]){3, 12}, 1, SPK_F32, 0);
    c.args[1].in.dim[1] = gather ? 8 : 24;
    c.args[1].out.dim[1] = gather ? 24 : 8;
    expect_build(&c, SPK_EMISMATCH, "input shape", "rank 1 has [3, ");
  }
}
END_TEST

START_TEST(test_args_check) {
  static zcase c;
  mk(&c, 0, 100, 2, (const int64_t[]){2, 600}, 1, SPK_F32, 0);
  spk_op_args a = c.args[99];
  expect_check(&a, 100, 99, SPK_OK, NULL);
  a.in.dim[1] = 500;
  expect_check(&a, 100, 99, SPK_EINVAL, "2*cp = 200");
  mk(&c, 1, 100, 2, (const int64_t[]){2, 600}, 1, SPK_F32, 0);
  a = c.args[42];
  expect_check(&a, 100, 42, SPK_OK, NULL);
  a.out.dim[1] = 599;
  expect_check(&a, 100, 42, SPK_EINVAL, "should be [2, 600]");
  /* 2^62 uint8 per rank is a valid input; 4 of them overflow int64. */
  mk(&c, 1, 4, 1, (const int64_t[]){8}, 0, SPK_U8, 0);
  a = c.args[0], a.in.dim[0] = (int64_t)1 << 62;
  expect_check(&a, 4, 0, SPK_EINVAL, "overflows");
}
END_TEST

static Suite *zigzag_suite(void) {
  Suite *s = suite_create("plan_zigzag");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_random);
  tcase_add_test(tc, test_world_100);
  tcase_add_test(tc, test_scale);
  tcase_add_test(tc, test_example);
  tcase_add_test(tc, test_inverse);
  tcase_add_test(tc, test_bad_args);
  tcase_add_test(tc, test_bad_output);
  tcase_add_test(tc, test_mismatch);
  tcase_add_test(tc, test_args_check);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner *sr = srunner_create(zigzag_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
