/* The packed planners (kernels/plan_packed.c): plans run by the reference
 * executor (spk_plan_exec) over per-rank byte arrays are compared with a
 * naive per-element reference that shares no code with the planner (its
 * pieces come from dealing each sequence's elements round-robin, not from
 * split_rule). Also: the grad scale flag, gather after split is the
 * identity on the packed prefix, and bad arguments fail with the right
 * status and a message naming them. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "planner.h"

#define MAXW 8
#define MAXS 6
#define MAXP (MAXS * 10) /* longest packing of the random cases */
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

/* One packed op as every rank describes it: sequences L[0..nseq) packed
 * along d (then `pad` ignored elements for a split); each rank owns a copy
 * of the length list, as on the wire. */
typedef struct {
  int world, nd, d, gather, nseq;
  int64_t L[MAXS], total, pad;
  spk_dtype dt;
  int64_t sizes[MAXW][MAXS];
  spk_op_args args[MAXW];
  const spk_op_args *argp[MAXW];
} pcase;

static void mk(pcase *c, int gather, int world, int nd, const int64_t *shape,
               int d, int nseq, const int64_t *L, int64_t pad, spk_dtype dt,
               uint32_t flags) {
  memset(c, 0, sizeof(*c));
  c->world = world, c->nd = nd, c->d = d, c->gather = gather;
  c->nseq = nseq, c->pad = pad, c->dt = dt;
  for (int i = 0; i < nseq; i++)
    c->total += c->L[i] = L[i];
  for (int r = 0; r < world; r++) {
    spk_op_args *a = &c->args[r];
    a->op = gather ? SPK_OP_PACKED_GATHER : SPK_OP_PACKED_SPLIT;
    a->dtype = dt, a->ndims = 1, a->dims[0] = d, a->flags = flags;
    a->in.ndim = a->out.ndim = nd;
    for (int i = 0; i < nd; i++)
      a->in.dim[i] = a->out.dim[i] = shape[i];
    int64_t local = 0;
    for (int i = 0; i < nseq; i++)
      local += dealt(L[i], world, r);
    a->in.dim[d] = gather ? local : c->total + pad;
    a->out.dim[d] = gather ? c->total : local;
    memcpy(c->sizes[r], L, sizeof(int64_t) * (size_t)nseq);
    a->nsizes = nseq, a->sizes = c->sizes[r];
    c->argp[r] = a;
  }
}

static size_t numel(const spk_shape *s) {
  size_t n = 1;
  for (int i = 0; i < s->ndim; i++)
    n *= (size_t)s->dim[i];
  return n;
}

/* The packing, element by element: position p of the full sequence axis
 * is held by rank own[p] at position at[p] of its packed pieces. */
static void pk_map(const pcase *c, int *own, int64_t *at) {
  int64_t p = 0, next[MAXW] = {0};
  for (int i = 0; i < c->nseq; i++)
    for (int k = 0; k < c->world; k++)
      for (int64_t e = 0; e < dealt(c->L[i], c->world, k); e++, p++)
        own[p] = k, at[p] = next[k]++;
}

/* Copy one element, scaled as the plan's flags say (float32 only). */
static void put(const pcase *c, uint8_t *dst, const uint8_t *src) {
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

/* Reference: every output element, found by its C-order index and the
 * packing's map (inverted for a split: rank r's j-th packed element). */
static void naive(const pcase *c, uint8_t *const *in, uint8_t **want) {
  size_t es = spk_dtype_size(c->dt);
  int own[MAXP];
  int64_t at[MAXP], inv[MAXW][MAXP];
  ck_assert(c->total <= MAXP);
  pk_map(c, own, at);
  for (int64_t p = 0; p < c->total; p++)
    inv[own[p]][at[p]] = p;
  for (int r = 0; r < c->world; r++) {
    const spk_shape *os = &c->args[r].out;
    for (size_t o = 0; o < numel(os); o++) {
      int64_t idx[SPK_MAX_DIMS], j;
      unravel(o, os, idx);
      j = idx[c->d];
      int k = c->gather ? own[j] : r;
      idx[c->d] = c->gather ? at[j] : inv[r][j];
      put(c, want[r] + o * es, in[k] + ravel(idx, &c->args[k].in) * es);
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
            (argp[0]->op == SPK_OP_PACKED_GATHER || m->src_rank == m->dst_rank),
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

static void bufs_alloc(bufs *b, const pcase *c) {
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
static void run_case(const pcase *c, const char *tag) {
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

/* A random case: shape (now and then an empty dim), 1..MAXS sequences of
 * 0..10 (shorter than w now and then), padding, the dim spelled from
 * either end per rank. */
static void random_case(pcase *c, int gather, uint32_t flags, spk_dtype dt) {
  int world = (int)rng_range(1, MAXW), nd = (int)rng_range(1, 5);
  int d = (int)rng_range(0, nd - 1), nseq = (int)rng_range(1, MAXS);
  int64_t shape[SPK_MAX_DIMS], L[MAXS];
  for (int i = 0; i < nd; i++)
    shape[i] = rng_range(0, 19) == 0 ? 0 : rng_range(1, nd > 3 ? 3 : 4);
  for (int i = 0; i < nseq; i++)
    L[i] = rng_range(0, 3) == 0 ? rng_range(0, world) : rng_range(0, 10);
  int64_t pad = rng_range(0, 1) ? 0 : rng_range(1, 3);
  mk(c, gather, world, nd, shape, d, nseq, L, pad, dt, flags);
  for (int r = 0; r < world; r++)
    if (rng_range(0, 1))
      c->args[r].dims[0] = d - nd;
}

static void random_run(uint64_t seed, int n, int scaled) {
  pcase c;
  rng_state = seed;
  for (int it = 0; it < n; it++) {
    int gather = it % 2;
    uint32_t f = 0;
    if (scaled) /* alternate down and up */
      f = (it / 2 % 2 ? SPK_SCALE_UP : SPK_SCALE_DOWN) << SPK_FLAG_SCALE_SHIFT;
    random_case(&c, gather, f, scaled ? SPK_F32 : dts[it / 2 % 8]);
    char tag[128];
    snprintf(tag, sizeof(tag), "seed %#llx case %d (%s w %d nd %d d %d)",
             (unsigned long long)seed, it, gather ? "gather" : "split", c.world,
             c.nd, c.d);
    run_case(&c, tag);
  }
}

START_TEST(test_random) { random_run(0xbac3edull, 1000, 0); }
END_TEST

/* Float32 scaled by 1/w (one IEEE division, bitwise) and by w. */
START_TEST(test_scale) { random_run(0x5ca1eull, 100, 1); }
END_TEST

/* Two sequences of 5 and 2 over 3 ranks, positions as values: pieces are
 * 2,2,1 and 1,1,0; element 7 is padding. */
START_TEST(test_example) {
  pcase c;
  uint8_t x[8] = {0, 1, 2, 3, 4, 5, 6, 99}, o[3][3], back[3][7];
  uint8_t *sb[6] = {x, o[0], x, o[1], x, o[2]};
  uint8_t *gb[6] = {o[0], back[0], o[1], back[1], o[2], back[2]};
  size_t ssz[6] = {8, 3, 8, 3, 8, 1}, gsz[6] = {3, 7, 3, 7, 1, 7};
  const int64_t L[2] = {5, 2};
  mk(&c, 0, 3, 1, (const int64_t[]){0}, 0, 2, L, 1, SPK_U8, 0);
  exec(c.argp, 3, sb, ssz, "example split");
  ck_assert_mem_eq(o[0], ((const uint8_t[]){0, 1, 5}), 3);
  ck_assert_mem_eq(o[1], ((const uint8_t[]){2, 3, 6}), 3);
  ck_assert_mem_eq(o[2], ((const uint8_t[]){4}), 1);
  mk(&c, 1, 3, 1, (const int64_t[]){0}, 0, 2, L, 0, SPK_U8, 0);
  exec(c.argp, 3, gb, gsz, "example gather");
  for (int r = 0; r < 3; r++)
    ck_assert_mem_eq(back[r], x, 7);
}
END_TEST

/* Is out (the packed prefix) equal to x[..., :total, ...] along d? */
static int prefix_equal(const spk_shape *os, const spk_shape *xs, size_t es,
                        const uint8_t *out, const uint8_t *x) {
  for (size_t o = 0; o < numel(os); o++) {
    int64_t idx[SPK_MAX_DIMS];
    unravel(o, os, idx);
    if (memcmp(out + o * es, x + ravel(idx, xs) * es, es) != 0)
      return 0;
  }
  return 1;
}

/* packed_gather(packed_split(x)) == x on the packed prefix when every rank
 * holds x: the gather's inputs are the split's outputs. */
START_TEST(test_inverse) {
  const uint64_t seed = 0x1d3e7ull;
  rng_state = seed;
  for (int it = 0; it < 300; it++) {
    pcase s, g;
    bufs b;
    uint8_t *gb[MAXW * SPK_T_COUNT];
    size_t gsz[MAXW * SPK_T_COUNT];
    random_case(&s, 0, 0, dts[it % 8]);
    mk(&g, 1, s.world, s.nd, s.args[0].in.dim, s.d, s.nseq, s.L, 0, s.dt, 0);
    bufs_alloc(&b, &s);
    for (int r = 1; r < s.world; r++)
      memcpy(b.b[IN(r)], b.b[IN(0)], b.sz[IN(0)]);
    char tag[96];
    snprintf(tag, sizeof(tag), "seed %#llx case %d (w %d nd %d d %d)",
             (unsigned long long)seed, it, s.world, s.nd, s.d);
    exec(s.argp, s.world, b.b, b.sz, tag);
    for (int r = 0; r < s.world; r++) {
      gb[IN(r)] = b.b[OUT(r)], gsz[IN(r)] = b.sz[OUT(r)];
      gsz[OUT(r)] = numel(&g.args[r].out) * spk_dtype_size(s.dt);
      gb[OUT(r)] = malloc(gsz[OUT(r)] + 1);
      memset(gb[OUT(r)], 0xa5, gsz[OUT(r)]);
    }
    exec(g.argp, s.world, gb, gsz, tag);
    for (int r = 0; r < s.world; r++) {
      ck_assert_msg(prefix_equal(&g.args[r].out, &s.args[0].in,
                                 spk_dtype_size(s.dt), gb[OUT(r)], b.b[IN(0)]),
                    "%s: rank %d: gather(split(x)) != x", tag, r);
      free(gb[OUT(r)]);
    }
    bufs_free(&b, s.world);
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

static void expect_build(pcase *c, int rc, const char *n1, const char *n2) {
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

/* Sequences of 5 and 2 over 3 ranks (locals 3, 3, 1) in a [2, 7] tensor. */
static const int64_t S27[] = {2, 7}, L52[] = {5, 2};

START_TEST(test_bad_args) {
  pcase c;
  for (int g = 0; g < 2; g++) {
    const char *op = g ? "packed_gather" : "packed_split";
    mk(&c, g, 3, 2, S27, 1, 2, L52, 0, SPK_F32, 0);
    for (int r = 0; r < 3; r++)
      c.args[r].ndims = 2;
    expect_build(&c, SPK_EINVAL, op, "takes 1 dim, got 2");
    mk(&c, g, 3, 2, S27, 1, 2, L52, 0, SPK_F32, 0);
    c.args[2].dims[0] = 2;
    expect_build(&c, SPK_EINVAL, "packed dim 2", NULL);
    mk(&c, g, 3, 2, S27, 1, 2, L52, 0, SPK_F32, 0);
    for (int r = 0; r < 3; r++)
      c.args[r].nsizes = 0, c.args[r].sizes = NULL;
    expect_build(&c, SPK_EINVAL, op, "sequence lengths in sizes, got 0");
    mk(&c, g, 3, 2, S27, 1, 2, L52, 0, SPK_F32, 0);
    for (int r = 0; r < 3; r++) /* locals and totals stay as they were */
      c.sizes[r][0] = 8, c.sizes[r][1] = -1;
    expect_build(&c, SPK_EINVAL, "sizes[1] is negative (-1)", NULL);
  }
  mk(&c, 0, 3, 2, S27, 1, 2, L52, 0, SPK_F32, 0);
  for (int r = 0; r < 3; r++)
    c.args[r].in.dim[1] = 6;
  expect_build(&c, SPK_EINVAL, "lengths sum to 7", "dim 1 has size 6");
  mk(&c, 1, 3, 2, S27, 1, 2, L52, 0, SPK_F32, 0);
  c.args[1].in.dim[1] = 4;
  expect_build(&c, SPK_EINVAL, "rank 1 holds 4 along dim 1", "sum to 3");
}
END_TEST

START_TEST(test_bad_output) {
  pcase c;
  mk(&c, 0, 3, 2, S27, 1, 2, L52, 2, SPK_F32, 0);
  c.args[2].out.dim[1] = 2;
  expect_build(&c, SPK_EINVAL, "rank 2", "should be [2, 1]");
  mk(&c, 0, 3, 2, S27, 1, 2, L52, 0, SPK_F32, 0);
  c.args[0].out.dim[0] = 1;
  expect_build(&c, SPK_EINVAL, "rank 0", "should be [2, 3]");
  mk(&c, 1, 3, 2, S27, 1, 2, L52, 0, SPK_F32, 0);
  c.args[1].out.dim[1] = 6; /* shorter than the packing (longer is fine) */
  expect_build(&c, SPK_EINVAL, "rank 1", "should be [2, 7]");
}
END_TEST

START_TEST(test_mismatch) {
  pcase c;
  /* Split inputs differ in their padding only; outputs fit. */
  mk(&c, 0, 3, 2, S27, 1, 2, L52, 0, SPK_F32, 0);
  c.args[2].in.dim[1] = 9;
  expect_build(&c, SPK_EMISMATCH, "input dim 1", "rank 2 has 9");
  /* Gather inputs differ off the packed dim; outputs fit. */
  mk(&c, 1, 3, 2, S27, 1, 2, L52, 0, SPK_F32, 0);
  c.args[1].in.dim[0] = c.args[1].out.dim[0] = 5;
  expect_build(&c, SPK_EMISMATCH, "input dim 0", "rank 1 has 5");
  /* Length lists that fit each rank's own shapes: 5,2 and 2,5 both pack
   * 7 and give rank 2 a single element over 3 ranks. */
  mk(&c, 1, 3, 2, S27, 1, 2, L52, 0, SPK_F32, 0);
  c.sizes[2][0] = 2, c.sizes[2][1] = 5;
  expect_build(&c, SPK_EMISMATCH, "sizes", "rank 2");
}
END_TEST

START_TEST(test_args_check) {
  pcase c;
  mk(&c, 0, 3, 2, S27, 1, 2, L52, 4, SPK_F32, 0);
  spk_op_args a = c.args[2];
  expect_check(&a, 3, 2, SPK_OK, NULL);
  a.dims[0] = -1;
  expect_check(&a, 3, 2, SPK_OK, NULL);
  expect_check(&a, 3, 1, SPK_EINVAL, "should be [2, 3]");
  mk(&c, 1, 3, 2, S27, 1, 2, L52, 0, SPK_F32, 0);
  a = c.args[2];
  expect_check(&a, 3, 2, SPK_OK, NULL);
  expect_check(&a, 3, 0, SPK_EINVAL, "rank 0 holds 1");
}
END_TEST

static Suite *packed_suite(void) {
  Suite *s = suite_create("plan_packed");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_random);
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
  SRunner *sr = srunner_create(packed_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
