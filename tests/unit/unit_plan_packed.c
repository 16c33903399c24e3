/* The packed planners (kernels/plan_packed.c): plans run by the reference
 * executor (spk_plan_exec) over per-rank byte arrays are compared with a
 * naive per-element reference that shares no code with the planner (its
 * pieces come from dealing each sequence's elements round-robin, not from
 * split_rule). Also: the grad scale flag, gather after split is the
 * identity on the packed prefix, and bad arguments fail with the right
 * status and a message naming them. */
#include <stdlib.h>
#include <string.h>

#include "plan_testlib.h"

#define MAXW 8
#define MAXS 6
#define MAXP (MAXS * 10) /* longest packing of the random cases */

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
      local += ptl_dealt(L[i], world, r);
    a->in.dim[d] = gather ? local : c->total + pad;
    a->out.dim[d] = gather ? c->total : local;
    memcpy(c->sizes[r], L, sizeof(int64_t) * (size_t)nseq);
    a->nsizes = nseq, a->sizes = c->sizes[r];
    c->argp[r] = a;
  }
}

/* The packing, element by element: position p of the full sequence axis
 * is held by rank own[p] at position at[p] of its packed pieces; rank r's
 * j-th packed element is inv[r][j]. */
typedef struct {
  const pcase *c;
  int own[MAXP];
  int64_t at[MAXP], inv[MAXW][MAXP];
} pmap;

static void pk_map(const pcase *c, pmap *m) {
  int64_t p = 0, next[MAXW] = {0};
  ck_assert(c->total <= MAXP);
  m->c = c;
  for (int i = 0; i < c->nseq; i++)
    for (int k = 0; k < c->world; k++)
      for (int64_t e = 0; e < ptl_dealt(c->L[i], c->world, k); e++, p++) {
        m->own[p] = k, m->at[p] = next[k]++;
        m->inv[k][m->at[p]] = p;
      }
}

/* Reference: output element idx found through the packing's map (its
 * inverse for a split). */
static int source(const void *cv, int r, int64_t *idx) {
  const pmap *m = cv;
  int64_t j = idx[m->c->d];
  idx[m->c->d] = m->c->gather ? m->at[j] : m->inv[r][j];
  return m->c->gather ? m->own[j] : r;
}

/* A split keeps every rank on its own input. */
static void run_case(const pcase *c, const char *tag) {
  pmap m;
  pk_map(c, &m);
  ptl_run_case(c->argp, c->world, source, &m, !c->gather, tag);
}

/* A random case: shape (now and then an empty dim), 1..MAXS sequences of
 * 0..10 (shorter than w now and then), padding, the dim spelled from
 * either end per rank. */
static void random_case(pcase *c, int gather, uint32_t flags, spk_dtype dt) {
  int world = (int)ptl_rng_range(1, MAXW), nd = (int)ptl_rng_range(1, 5);
  int d = (int)ptl_rng_range(0, nd - 1), nseq = (int)ptl_rng_range(1, MAXS);
  int64_t shape[SPK_MAX_DIMS], L[MAXS];
  ptl_random_dims(shape, nd, 20, nd > 3 ? 3 : 4);
  for (int i = 0; i < nseq; i++)
    L[i] = ptl_rng_range(0, 3) == 0 ? ptl_rng_range(0, world)
                                    : ptl_rng_range(0, 10);
  int64_t pad = ptl_rng_range(0, 1) ? 0 : ptl_rng_range(1, 3);
  mk(c, gather, world, nd, shape, d, nseq, L, pad, dt, flags);
  ptl_respell_dim(c->args, world, 0, d, nd);
}

static void random_run(uint64_t seed, int n, int scaled) {
  pcase c;
  ptl_rng_seed(seed);
  for (int it = 0; it < n; it++) {
    int gather = it % 2;
    uint32_t f = scaled ? ptl_scale_flags(it / 2) : 0;
    random_case(&c, gather, f, scaled ? SPK_F32 : ptl_dtypes[it / 2 % 8]);
    char tag[PTL_TAG];
    ptl_tag(tag, seed, it, gather ? "gather" : "split", c.world, c.nd, c.d);
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
  ptl_exec(c.argp, 3, sb, ssz, 1, "example split");
  ck_assert_mem_eq(o[0], ((const uint8_t[]){0, 1, 5}), 3);
  ck_assert_mem_eq(o[1], ((const uint8_t[]){2, 3, 6}), 3);
  ck_assert_mem_eq(o[2], ((const uint8_t[]){4}), 1);
  mk(&c, 1, 3, 1, (const int64_t[]){0}, 0, 2, L, 0, SPK_U8, 0);
  ptl_exec(c.argp, 3, gb, gsz, 0, "example gather");
  for (int r = 0; r < 3; r++)
    ck_assert_mem_eq(back[r], x, 7);
}
END_TEST

/* Is out (the packed prefix) equal to x[..., :total, ...] along d? */
static int prefix_equal(const spk_shape *os, const spk_shape *xs, size_t es,
                        const uint8_t *out, const uint8_t *x) {
  for (size_t o = 0; o < ptl_numel(os); o++) {
    int64_t idx[SPK_MAX_DIMS];
    ptl_unravel(o, os, idx);
    if (memcmp(out + o * es, x + ptl_ravel(idx, xs) * es, es) != 0)
      return 0;
  }
  return 1;
}

/* packed_gather(packed_split(x)) == x on the packed prefix when every rank
 * holds x: the gather's inputs are the split's outputs. */
START_TEST(test_inverse) {
  const uint64_t seed = 0x1d3e7ull;
  ptl_rng_seed(seed);
  for (int it = 0; it < 300; it++) {
    pcase s, g;
    ptl_bufs b, gb;
    random_case(&s, 0, 0, ptl_dtypes[it % 8]);
    mk(&g, 1, s.world, s.nd, s.args[0].in.dim, s.d, s.nseq, s.L, 0, s.dt, 0);
    ptl_bufs_alloc(&b, s.argp, s.world, 1);
    ptl_bufs_replicate_in(&b);
    char tag[PTL_TAG];
    ptl_tag(tag, seed, it, NULL, s.world, s.nd, s.d);
    ptl_exec(s.argp, s.world, b.b, b.sz, 1, tag);
    ptl_bufs_chain(&gb, &b, g.argp);
    ptl_exec(g.argp, s.world, gb.b, gb.sz, 0, tag);
    for (int r = 0; r < s.world; r++)
      ck_assert_msg(prefix_equal(&g.args[r].out, &s.args[0].in,
                                 spk_dtype_size(s.dt), gb.b[PTL_OUT(r)],
                                 b.b[PTL_IN(0)]),
                    "%s: rank %d: gather(split(x)) != x", tag, r);
    ptl_bufs_chain_free(&gb);
    ptl_bufs_free(&b);
  }
}
END_TEST

/* spk_plan_build must give rc, with a message holding both needles. */
static void expect_build(pcase *c, int rc, const char *n1, const char *n2) {
  ptl_expect_build(c->argp, c->world, rc, n1, n2);
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
  ptl_expect_check(&a, 3, 2, SPK_OK, NULL);
  a.dims[0] = -1;
  ptl_expect_check(&a, 3, 2, SPK_OK, NULL);
  ptl_expect_check(&a, 3, 1, SPK_EINVAL, "should be [2, 3]");
  mk(&c, 1, 3, 2, S27, 1, 2, L52, 0, SPK_F32, 0);
  a = c.args[2];
  ptl_expect_check(&a, 3, 2, SPK_OK, NULL);
  ptl_expect_check(&a, 3, 0, SPK_EINVAL, "rank 0 holds 1");
}
END_TEST

int main(void) {
  const TTest *tests[] = {test_random,   test_scale,     test_example,
                          test_inverse,  test_bad_args,  test_bad_output,
                          test_mismatch, test_args_check};
  return ptl_run_suite("plan_packed", 120, tests, PTL_LEN(tests));
}
