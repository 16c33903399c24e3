/* Block moves (kernels/plan.h): spk_plan_add_block turns an N-d block copy
 * into a coalesced strided move, spk_move_run executes unit ranges of it.
 * Results are compared with a naive per-element copy written here. */
#include <stdlib.h>
#include <string.h>

#include "plan_testlib.h"

/* Reference: visit every element of the block with a plain odometer and
 * copy it from its C-order position in src to its position in dst. */
static void naive_copy(const spk_shape *ss, const int64_t *so,
                       const spk_shape *ds, const int64_t *dorg,
                       const int64_t *ext, size_t esize, const uint8_t *src,
                       uint8_t *dst) {
  int nd = ss->ndim;
  int64_t k[SPK_MAX_DIMS] = {0};
  for (int i = 0; i < nd; i++)
    if (ext[i] == 0)
      return;
  for (;;) {
    int64_t si = 0, di = 0;
    for (int i = 0; i < nd; i++) {
      si = si * ss->dim[i] + so[i] + k[i];
      di = di * ds->dim[i] + dorg[i] + k[i];
    }
    memcpy(dst + (size_t)di * esize, src + (size_t)si * esize, esize);
    int i = nd - 1;
    while (i >= 0 && ++k[i] == ext[i])
      k[i--] = 0;
    if (i < 0)
      return;
  }
}

/* Descriptor invariants that hold whatever the coalescing chose. */
static void check_move_shape(const spk_move *m, uint64_t bytes) {
  ck_assert_int_ge(m->nd, 1);
  ck_assert_int_le(m->nd, SPK_MOVE_DIMS);
  uint64_t prod = 1;
  for (int i = 0; i < m->nd; i++) {
    ck_assert_uint_gt(m->len[i], 0);
    prod *= m->len[i];
  }
  ck_assert_uint_eq(prod, bytes);
  ck_assert_uint_eq(spk_move_units(m), m->len[0]);
}

/* A random block between random shapes, executed through the plan, with
 * the unit range cut into random pieces run in random order. */
static void random_case(int it, uint64_t seed) {
  int nd = (int)ptl_rng_range(1, SPK_MAX_DIMS);
  size_t esize = (size_t)1 << ptl_rng_range(0, 3);
  spk_shape ss = {.ndim = nd}, ds = {.ndim = nd};
  int64_t ext[SPK_MAX_DIMS], so[SPK_MAX_DIMS], dorg[SPK_MAX_DIMS];
  int64_t maxe = nd > 5 ? 2 : 4; /* keeps 8-d tensors small */
  for (int i = 0; i < nd; i++) {
    ext[i] = ptl_rng_range(1, maxe);
    ss.dim[i] = ext[i] + ptl_rng_range(0, 2);
    ds.dim[i] = ext[i] + ptl_rng_range(0, 2);
    so[i] = ptl_rng_range(0, ss.dim[i] - ext[i]);
    dorg[i] = ptl_rng_range(0, ds.dim[i] - ext[i]);
  }
  size_t sb = ptl_numel(&ss) * esize, db = ptl_numel(&ds) * esize;
  uint8_t *src = malloc(sb), *got = malloc(db), *want = malloc(db);
  uint8_t *piece = malloc(db);
  ptl_fill_random(src, sb);
  ptl_fill_random(want, db);
  memcpy(got, want, db);
  memcpy(piece, want, db);
  naive_copy(&ss, so, &ds, dorg, ext, esize, src, want);

  spk_plan plan;
  spk_plan_init(&plan, 2);
  spk_err err = {{0}};
  spk_block_end s = {1, SPK_T_IN, &ss, so}, d = {0, SPK_T_OUT, &ds, dorg};
  int rc = spk_plan_add_block(&plan, &s, &d, ext, esize, &err);
  ck_assert_msg(rc == SPK_OK, "seed %#llx case %d: %s",
                (unsigned long long)seed, it, err.msg);
  ck_assert_uint_eq(plan.nmoves, 1);
  const spk_move *m = &plan.moves[0];
  uint64_t bytes = esize;
  for (int i = 0; i < nd; i++)
    bytes *= (uint64_t)ext[i];
  ck_assert_uint_eq(plan.bytes, bytes);
  ck_assert_uint_eq(m->src_rank, 1);
  ck_assert_uint_eq(m->dst_rank, 0);
  ck_assert_uint_eq(m->src_t, SPK_T_IN);
  ck_assert_uint_eq(m->dst_t, SPK_T_OUT);
  check_move_shape(m, bytes);
  ck_assert_msg(ptl_move_end(m, 0) <= sb && ptl_move_end(m, 1) <= db,
                "seed %#llx case %d: move leaves its tensors",
                (unsigned long long)seed, it);

  uint64_t units = spk_move_units(m);
  spk_move_run(m, src, got, 0, units);
  ck_assert_msg(memcmp(got, want, db) == 0,
                "seed %#llx case %d: nd %d esize %zu differs from naive copy",
                (unsigned long long)seed, it, nd, esize);

  /* Cut [0, units) at up to 4 random points; run the pieces backwards so
   * no piece can rely on an earlier one. */
  uint64_t cut[6] = {0};
  int nc = 1 + (int)ptl_rng_range(0, 4);
  for (int i = 1; i < nc; i++)
    cut[i] = ptl_rng_next() % (units + 1);
  cut[nc] = units;
  for (int i = 1; i < nc; i++) /* insertion sort of the inner cuts */
    for (int j = i; j > 1 && cut[j] < cut[j - 1]; j--) {
      uint64_t t = cut[j];
      cut[j] = cut[j - 1], cut[j - 1] = t;
    }
  for (int i = nc - 1; i >= 0; i--)
    spk_move_run(m, src, piece, cut[i], cut[i + 1]);
  ck_assert_msg(memcmp(piece, want, db) == 0,
                "seed %#llx case %d: %d pieces of %llu units differ",
                (unsigned long long)seed, it, nc, (unsigned long long)units);
  spk_plan_free(&plan);
  free(src), free(got), free(want), free(piece);
}

START_TEST(test_random_blocks) {
  const uint64_t seed = 0x600dcafeull;
  ptl_rng_seed(seed);
  for (int it = 0; it < 600; it++)
    random_case(it, seed);
}
END_TEST

/* Adds one block and returns its move (asserting exactly one was added). */
static const spk_move *add_one(spk_plan *plan, const spk_shape *ss,
                               const int64_t *so, const spk_shape *ds,
                               const int64_t *dorg, const int64_t *ext,
                               size_t esize) {
  spk_err err = {{0}};
  spk_block_end s = {0, SPK_T_IN, ss, so}, d = {0, SPK_T_OUT, ds, dorg};
  size_t before = plan->nmoves;
  ck_assert_int_eq(spk_plan_add_block(plan, &s, &d, ext, esize, &err),
                   SPK_OK);
  ck_assert_uint_eq(plan->nmoves, before + 1);
  return &plan->moves[before];
}

START_TEST(test_coalesce) {
  spk_plan plan;
  spk_plan_init(&plan, 1);
  const int64_t z[SPK_MAX_DIMS] = {0};
  /* A whole contiguous tensor is one byte run. */
  spk_shape a = {3, {2, 3, 4}};
  const spk_move *m = add_one(&plan, &a, z, &a, z, a.dim, 4);
  ck_assert_uint_eq(m->nd, 1);
  ck_assert_uint_eq(m->len[0], 96);
  ck_assert_uint_eq(spk_move_units(m), 96);
  ck_assert_uint_eq(m->src_off, 0);
  ck_assert_uint_eq(m->dst_off, 0);
  /* Full rows of inner dims at an offset along dim 0: still one run. */
  spk_shape b1 = {3, {4, 3, 5}}, b2 = {3, {6, 3, 5}};
  m = add_one(&plan, &b1, (const int64_t[]){1, 0, 0}, &b2,
              (const int64_t[]){3, 0, 0}, (const int64_t[]){2, 3, 5}, 2);
  ck_assert_uint_eq(m->nd, 1);
  ck_assert_uint_eq(m->len[0], 60);
  ck_assert_uint_eq(m->src_off, 30);
  ck_assert_uint_eq(m->dst_off, 90);
  /* Half of each row: rows stay a strided dim. */
  spk_shape c = {2, {4, 6}};
  m = add_one(&plan, &c, z, &c, (const int64_t[]){0, 3},
              (const int64_t[]){4, 3}, 4);
  ck_assert_uint_eq(m->nd, 2);
  ck_assert_uint_eq(m->len[0], 4);
  ck_assert_uint_eq(m->len[1], 12);
  ck_assert_uint_eq(m->src_stride[0], 24);
  ck_assert_uint_eq(m->dst_stride[0], 24);
  ck_assert_uint_eq(m->dst_off, 12);
  ck_assert_uint_eq(spk_move_units(m), 4);
  /* Unit dims are dropped; the remaining dim is strided. */
  spk_shape e = {3, {2, 3, 2}};
  m = add_one(&plan, &e, (const int64_t[]){1, 0, 1}, &e, z,
              (const int64_t[]){1, 3, 1}, 1);
  ck_assert_uint_eq(m->nd, 2);
  ck_assert_uint_eq(m->len[0], 3);
  ck_assert_uint_eq(m->len[1], 1);
  ck_assert_uint_eq(m->src_stride[0], 2);
  ck_assert_uint_eq(m->src_off, 7);
  /* One element: a run of esize bytes. */
  m = add_one(&plan, &a, (const int64_t[]){1, 2, 3}, &a, z,
              (const int64_t[]){1, 1, 1}, 8);
  ck_assert_uint_eq(m->nd, 1);
  ck_assert_uint_eq(m->len[0], 8);
  ck_assert_uint_eq(m->src_off, 23 * 8);
  /* Contiguous in src but not in dst: rows of 4 elements. */
  spk_shape f1 = {2, {3, 4}}, f2 = {2, {3, 5}};
  m = add_one(&plan, &f1, z, &f2, z, f1.dim, 2);
  ck_assert_uint_eq(m->nd, 2);
  ck_assert_uint_eq(m->len[0], 3);
  ck_assert_uint_eq(m->len[1], 8);
  ck_assert_uint_eq(m->src_stride[0], 8);
  ck_assert_uint_eq(m->dst_stride[0], 10);
  ck_assert_uint_eq(plan.bytes, 96 + 60 + 48 + 3 + 8 + 24);
  spk_plan_free(&plan);
  ck_assert_ptr_null(plan.moves);
  ck_assert_uint_eq(plan.nmoves, 0);
}
END_TEST

START_TEST(test_empty_extent) {
  spk_plan plan;
  spk_plan_init(&plan, 3);
  ck_assert_int_eq(plan.world, 3);
  spk_err err = {{0}};
  const int64_t z[SPK_MAX_DIMS] = {0};
  spk_shape s = {3, {2, 0, 3}}, t = {1, {5}};
  spk_block_end a = {0, SPK_T_IN, &s, z}, b = {1, SPK_T_OUT, &s, z};
  spk_block_end c = {0, SPK_T_IN, &t, z}, d = {2, SPK_T_OUT, &t, z};
  ck_assert_int_eq(spk_plan_add_block(&plan, &a, &b, s.dim, 4, &err), SPK_OK);
  ck_assert_int_eq(
      spk_plan_add_block(&plan, &c, &d, (const int64_t[]){0}, 4, &err),
      SPK_OK);
  /* Zero only in the outermost dim of a non-empty shape. */
  spk_shape u = {2, {3, 3}};
  spk_block_end e = {0, SPK_T_IN, &u, z}, f = {1, SPK_T_OUT, &u, z};
  ck_assert_int_eq(
      spk_plan_add_block(&plan, &e, &f, (const int64_t[]){0, 3}, 1, &err),
      SPK_OK);
  ck_assert_uint_eq(plan.nmoves, 0);
  ck_assert_uint_eq(plan.bytes, 0);
  spk_plan_free(&plan);
}
END_TEST

/* Many blocks in one plan: the move array grows past its first capacity
 * and earlier moves survive; running them in order matches the naive
 * copies in the same order (blocks may overlap in dst). */
START_TEST(test_many_blocks) {
  ptl_rng_seed(0xb10c5ull);
  spk_shape ss = {2, {9, 7}};
  spk_shape d2 = {2, {8, 10}};
  size_t sb = 63 * 4, db = 80 * 4;
  uint8_t src[63 * 4], got[80 * 4], want[80 * 4];
  ptl_fill_random(src, sb);
  ptl_fill_random(want, db);
  memcpy(got, want, db);
  spk_plan plan;
  spk_plan_init(&plan, 1);
  spk_err err = {{0}};
  uint64_t bytes = 0;
  for (int i = 0; i < 100; i++) {
    int64_t ext[2] = {ptl_rng_range(1, 8), ptl_rng_range(1, 7)};
    int64_t so[2] = {ptl_rng_range(0, 9 - ext[0]),
                     ptl_rng_range(0, 7 - ext[1])};
    int64_t dorg[2] = {ptl_rng_range(0, 8 - ext[0]),
                       ptl_rng_range(0, 10 - ext[1])};
    spk_block_end s = {0, SPK_T_IN, &ss, so}, d = {0, SPK_T_OUT, &d2, dorg};
    ck_assert_int_eq(spk_plan_add_block(&plan, &s, &d, ext, 4, &err), SPK_OK);
    naive_copy(&ss, so, &d2, dorg, ext, 4, src, want);
    bytes += (uint64_t)(ext[0] * ext[1] * 4);
  }
  ck_assert_uint_eq(plan.nmoves, 100);
  ck_assert_uint_ge(plan.cap, 100);
  ck_assert_uint_eq(plan.bytes, bytes);
  for (size_t i = 0; i < plan.nmoves; i++)
    spk_move_run(&plan.moves[i], src, got, 0, spk_move_units(&plan.moves[i]));
  ck_assert(memcmp(got, want, db) == 0);
  spk_plan_free(&plan);
}
END_TEST

/* An empty unit range writes nothing. */
START_TEST(test_empty_range) {
  spk_plan plan;
  spk_plan_init(&plan, 1);
  spk_shape a = {2, {4, 6}};
  const int64_t z[2] = {0};
  const spk_move *m =
      add_one(&plan, &a, z, &a, z, (const int64_t[]){4, 3}, 1);
  uint8_t src[24], dst[24], keep[24];
  memset(src, 1, sizeof(src));
  memset(dst, 2, sizeof(dst));
  memcpy(keep, dst, sizeof(dst));
  spk_move_run(m, src, dst, 2, 2);
  spk_move_run(m, src, dst, 4, 4);
  ck_assert(memcmp(dst, keep, sizeof(dst)) == 0);
  /* Units [1, 3) are rows 1 and 2 only. */
  spk_move_run(m, src, dst, 1, 3);
  for (int i = 0; i < 24; i++)
    ck_assert_int_eq(dst[i], (i >= 6 && i < 18 && i % 6 < 3) ? 1 : 2);
  spk_plan_free(&plan);
}
END_TEST

int main(void) {
  const TTest *tests[] = {test_random_blocks, test_coalesce, test_empty_extent,
                          test_many_blocks, test_empty_range};
  return ptl_run_suite("plan_move", 60, tests, PTL_LEN(tests));
}
