/* The overlap check (kernels/plan_overlap.c): tensors placed in one shared
 * arena. Fixed cases name each attack of issue 13 (in-place all_to_all, an
 * all_gather input outside its own slot, a shifted output, two ranks in
 * one memfd) and each in-place layout that must run. The random case is
 * the property: whatever the check accepts, running the plan in the arena
 * gives what the op gives on separate tensors; and it refuses every
 * placement where an output shares bytes outside an in-place layout. */
#include <stdlib.h>
#include <string.h>

#include "plan_overlap.h"
#include "plan_testlib.h"
#include "split_rule.h"

#define W 4

typedef struct {
  int world;
  int64_t sizes[W];
  spk_op_args args[W];
  const spk_op_args *argp[W];
  spk_tensor_loc locs[W * SPK_T_COUNT];
  size_t bytes[W * SPK_T_COUNT];
} ocase;

/* Every rank's op; outputs shaped by spk_out_shape. Each tensor starts
 * in its own memory (key r * 2 + t + 1), at offset 0. */
static void mk(ocase *c, spk_op_kind op, int world, int nd,
               const int64_t *shape, int d0, int d1, uint32_t flags) {
  memset(c, 0, sizeof(*c));
  c->world = world;
  for (int r = 0; r < world; r++) {
    spk_op_args *a = &c->args[r];
    a->op = op, a->dtype = SPK_I32, a->flags = flags;
    a->in.ndim = nd;
    memcpy(a->in.dim, shape, (size_t)nd * sizeof(int64_t));
    a->ndims = op == SPK_OP_ALL_REDUCE ? 0 : op == SPK_OP_ALL_TO_ALL ? 2 : 1;
    a->dims[0] = d0, a->dims[1] = d1;
    spk_err err;
    ck_assert_int_eq(spk_out_shape(a, world, r, &a->out, &err), SPK_OK);
    c->argp[r] = a;
    for (int t = 0; t < SPK_T_COUNT; t++) {
      c->bytes[r * SPK_T_COUNT + t] =
          4 * ptl_numel(t == SPK_T_IN ? &a->in : &a->out);
      c->locs[r * SPK_T_COUNT + t] =
          (spk_tensor_loc){{7, (uint64_t)(r * 2 + t + 1)}, 0, 100 + r};
    }
  }
}

/* Put rank r's tensor t in the shared memory (key {7, 0}) at off. */
static void place(ocase *c, int r, int t, uint64_t off) {
  c->locs[r * SPK_T_COUNT + t] = (spk_tensor_loc){{7, 0}, off, 1};
}

static int check(ocase *c, spk_plan *p, spk_err *err) {
  spk_plan_init(p, c->world);
  int rc = spk_plan_build(c->argp, c->world, p, err);
  ck_assert_msg(rc == SPK_OK, "plan: %s", err->msg);
  return spk_plan_overlap(c->argp, c->world, c->locs, p, err);
}

static void expect_refused(ocase *c, const char *n1, const char *n2) {
  spk_plan p;
  spk_err err;
  ptl_expect(check(c, &p, &err), err.msg, SPK_EINVAL, n1, n2);
  spk_plan_free(&p);
}

/* Run c in an arena where its placed tensors lie, and on separate tensors
 * with the same input bytes; every output must match. The check must
 * accept c. Returns the plan's move count after the check. */
static size_t run_in_arena(ocase *c, size_t arena_len, const char *tag) {
  int world = c->world, n = world * SPK_T_COUNT;
  uint8_t *arena = malloc(arena_len);
  uint8_t *sep[W * SPK_T_COUNT], *own[W * SPK_T_COUNT];
  uint8_t *bases[W * SPK_T_COUNT];
  ck_assert_ptr_nonnull(arena);
  ptl_fill_random(arena, arena_len);
  for (int i = 0; i < n; i++) {
    sep[i] = calloc(1, c->bytes[i] + 1);
    own[i] = calloc(1, c->bytes[i] + 1);
    ck_assert(sep[i] != NULL && own[i] != NULL);
    int shared = c->locs[i].mem[1] == 0;
    bases[i] = shared ? arena + c->locs[i].off : own[i];
    if (i % SPK_T_COUNT == SPK_T_IN) {
      if (!shared)
        ptl_fill_random(own[i], c->bytes[i]);
      memcpy(sep[i], bases[i], c->bytes[i]); /* the bytes before the op */
    }
  }
  spk_plan ref, p;
  spk_err err;
  spk_plan_init(&ref, world);
  ck_assert_int_eq(spk_plan_build(c->argp, world, &ref, &err), SPK_OK);
  spk_plan_exec(&ref, sep);
  int rc = check(c, &p, &err);
  ck_assert_msg(rc == SPK_OK, "%s: refused: %s", tag, err.msg);
  spk_plan_exec(&p, bases);
  for (int r = 0; r < world; r++) {
    int i = r * SPK_T_COUNT + SPK_T_OUT;
    ck_assert_msg(memcmp(bases[i], sep[i], c->bytes[i]) == 0,
                  "%s: rank %d output differs from the op on separate "
                  "tensors", tag, r);
  }
  size_t moves = p.nmoves;
  spk_plan_free(&ref);
  spk_plan_free(&p);
  for (int i = 0; i < n; i++)
    free(sep[i]), free(own[i]);
  free(arena);
  return moves;
}

START_TEST(test_all_to_all_in_place) {
  ocase c;
  int64_t s[2] = {8, 3};
  mk(&c, SPK_OP_ALL_TO_ALL, 2, 2, s, 0, 1, 0);
  place(&c, 0, SPK_T_IN, 0), place(&c, 0, SPK_T_OUT, 0);
  expect_refused(&c, "all_to_all: rank 0 input (buffer 1, bytes [0, 96)) "
                 "and rank 0 output (buffer 1, bytes [0, 96)) share memory",
                 "does not run in place");
}
END_TEST

START_TEST(test_gather_outside_own_slot) {
  ocase c;
  int64_t s[2] = {2, 3};
  mk(&c, SPK_OP_ALL_GATHER, 3, 2, s, 0, 0, 0);
  /* rank 1's input at slot 0 of its output: other ranks' rows land on
   * it while it is read */
  place(&c, 1, SPK_T_OUT, 72), place(&c, 1, SPK_T_IN, 72);
  expect_refused(&c, "rank 1 input (buffer 1, bytes [72, 96))",
                 "rank 1 output (buffer 1, bytes [72, 144))");
  /* its own slot: runs, and the self-copy is gone */
  place(&c, 1, SPK_T_IN, 72 + 24);
  ck_assert_uint_eq(run_in_arena(&c, 256, "own slot"), 8);
  /* the first rank's and last rank's own slots too, together */
  place(&c, 0, SPK_T_OUT, 0), place(&c, 0, SPK_T_IN, 0);
  place(&c, 2, SPK_T_OUT, 144), place(&c, 2, SPK_T_IN, 144 + 48);
  ck_assert_uint_eq(run_in_arena(&c, 256, "three own slots"), 6);
}
END_TEST

START_TEST(test_gather_strided_slot) {
  ocase c;
  int64_t s[2] = {2, 3};
  /* along dim 1 of a [2, 3] tensor a slot is strided: never in place */
  mk(&c, SPK_OP_ALL_GATHER, 2, 2, s, 1, 0, 0);
  place(&c, 0, SPK_T_OUT, 0), place(&c, 0, SPK_T_IN, 0);
  expect_refused(&c, "rank 0 input", "own contiguous slot");
  /* with dim 0 of size 1 the slot along dim 1 is contiguous */
  int64_t s1[2] = {1, 3};
  mk(&c, SPK_OP_ALL_GATHER, 2, 2, s1, 1, 0, 0);
  place(&c, 1, SPK_T_OUT, 0), place(&c, 1, SPK_T_IN, 12);
  run_in_arena(&c, 64, "dim 1 of a [1, n] tensor");
}
END_TEST

START_TEST(test_gather_scaled_in_place) {
  ocase c;
  int64_t s[1] = {4};
  /* scaling the own slot in place would race with the moves reading it */
  mk(&c, SPK_OP_ALL_GATHER, 2, 1, s, 0, 0, SPK_SCALE_UP << SPK_FLAG_SCALE_SHIFT);
  place(&c, 0, SPK_T_OUT, 0), place(&c, 0, SPK_T_IN, 0);
  expect_refused(&c, "rank 0 input", "unscaled");
}
END_TEST

START_TEST(test_reduce_in_place) {
  ocase c;
  int64_t s[1] = {10};
  mk(&c, SPK_OP_ALL_REDUCE, 3, 1, s, 0, 0, SPK_RED_SUM);
  for (int r = 0; r < 3; r++)
    place(&c, r, SPK_T_IN, (uint64_t)r * 64), place(&c, r, SPK_T_OUT,
                                                     (uint64_t)r * 64);
  run_in_arena(&c, 256, "all_reduce in place");
  /* a shifted output: one element later than the input */
  place(&c, 1, SPK_T_OUT, 64 + 4);
  expect_refused(&c, "all_reduce: rank 1 input (buffer 1, bytes [64, 104)) "
                 "and rank 1 output (buffer 1, bytes [68, 108))",
                 "only when a rank's output is its input");
}
END_TEST

START_TEST(test_reduce_scatter_in_place) {
  ocase c;
  int64_t s[2] = {7, 2};
  mk(&c, SPK_OP_REDUCE_SCATTER, 3, 2, s, 0, 0, 0);
  /* split rule: 3, 2, 2 rows of 8 bytes; slot r starts at row 0, 3, 5 */
  const uint64_t at[3] = {0, 24, 40};
  for (int r = 0; r < 3; r++)
    place(&c, r, SPK_T_IN, (uint64_t)r * 64),
        place(&c, r, SPK_T_OUT, (uint64_t)r * 64 + at[r]);
  run_in_arena(&c, 256, "reduce_scatter in place");
  place(&c, 2, SPK_T_OUT, 128); /* rank 2's output on slot 0 */
  expect_refused(&c, "reduce_scatter: rank 2 input", "own contiguous slot");
}
END_TEST

/* Two ranks in one memory (one memfd registered twice): one's output on
 * the other's input, or two outputs on one another. */
START_TEST(test_across_ranks) {
  ocase c;
  int64_t s[1] = {4};
  mk(&c, SPK_OP_ALL_REDUCE, 2, 1, s, 0, 0, SPK_RED_SUM);
  place(&c, 0, SPK_T_OUT, 0), place(&c, 1, SPK_T_IN, 8);
  c.locs[1 * SPK_T_COUNT + SPK_T_IN].buf = 2;
  expect_refused(&c, "rank 1 input (buffer 2, bytes [8, 24))",
                 "rank 0 output (buffer 1, bytes [0, 16))");
  /* the same bytes as rank 1's output, not input: two writers */
  mk(&c, SPK_OP_ALL_REDUCE, 2, 1, s, 0, 0, SPK_RED_SUM);
  place(&c, 0, SPK_T_OUT, 0), place(&c, 1, SPK_T_OUT, 0);
  expect_refused(&c, "rank 0 output", "rank 1 output");
  /* in place on rank 0, but rank 1 reads rank 0's tensor */
  mk(&c, SPK_OP_ALL_GATHER, 2, 1, s, 0, 0, 0);
  place(&c, 0, SPK_T_OUT, 0), place(&c, 0, SPK_T_IN, 0);
  place(&c, 1, SPK_T_IN, 0);
  expect_refused(&c, "rank 1 input", "rank 0 output");
}
END_TEST

/* What may share: inputs with inputs; the same offsets in other memories;
 * tensors not on this node (key 0); empty tensors. */
START_TEST(test_allowed) {
  ocase c;
  int64_t s[1] = {12};
  mk(&c, SPK_OP_SPLIT, 3, 1, s, 0, 0, 0);
  for (int r = 0; r < 3; r++)
    place(&c, r, SPK_T_IN, 0), place(&c, r, SPK_T_OUT, 64 + 16 * (uint64_t)r);
  run_in_arena(&c, 128, "one input shared by every rank");
  int64_t a2[2] = {8, 2};
  mk(&c, SPK_OP_ALL_TO_ALL, 2, 2, a2, 0, 1, 0);
  spk_plan p;
  spk_err err;
  ck_assert_int_eq(check(&c, &p, &err), SPK_OK); /* every offset 0 */
  spk_plan_free(&p);
  place(&c, 0, SPK_T_IN, 0);
  c.locs[0 * SPK_T_COUNT + SPK_T_OUT] = (spk_tensor_loc){{0, 0}, 0, 0};
  ck_assert_int_eq(check(&c, &p, &err), SPK_OK);
  spk_plan_free(&p);
  int64_t e[2] = {0, 3};
  mk(&c, SPK_OP_ALL_GATHER, 2, 2, e, 0, 0, 0);
  place(&c, 0, SPK_T_IN, 0), place(&c, 0, SPK_T_OUT, 0);
  ck_assert_int_eq(check(&c, &p, &err), SPK_OK);
  spk_plan_free(&p);
}
END_TEST

/* 1 when [a, a + la) and [b, b + lb) share a byte. */
static int meets(uint64_t a, size_t la, uint64_t b, size_t lb) {
  return la && lb && a < b + lb && b < a + la;
}

/* The property, on random placements in a small arena: accepted means the
 * same result as on separate tensors; an output that shares bytes with
 * anything outside an in-place layout means refused. */
START_TEST(test_random) {
  static const spk_op_kind ops[] = {SPK_OP_ALL_GATHER, SPK_OP_ALL_REDUCE,
                                    SPK_OP_REDUCE_SCATTER, SPK_OP_ALL_TO_ALL,
                                    SPK_OP_SPLIT};
  int accepted = 0, refused = 0, in_place = 0;
  ptl_rng_seed(13);
  for (int it = 0; it < 3000; it++) {
    spk_op_kind op = ops[it % 5];
    int world = (int)ptl_rng_range(1, W);
    int64_t s[2] = {world * ptl_rng_range(1, 3), ptl_rng_range(1, 3)};
    if (op == SPK_OP_ALL_GATHER)
      s[0] = ptl_rng_range(1, 3);
    ocase c;
    mk(&c, op, world, 2, s, 0, 1, 0);
    size_t arena = 0;
    for (int i = 0; i < world * SPK_T_COUNT; i++)
      arena += c.bytes[i];
    arena = arena / 2 + 4;
    for (int i = 0; i < world * SPK_T_COUNT; i++) {
      int r = i / SPK_T_COUNT, t = i % SPK_T_COUNT;
      int64_t room = (int64_t)(arena - c.bytes[i]) / 4;
      if (room < 0 || ptl_rng_range(0, 3) == 0)
        continue; /* its own memory */
      uint64_t off = 4 * (uint64_t)ptl_rng_range(0, room);
      place(&c, r, t, off);
    }
    /* one rank in two takes an in-place layout (its op's, or all_reduce's
     * for the others), exact or one element off */
    for (int r = 0; r < world; r++) {
      spk_tensor_loc *li = &c.locs[r * SPK_T_COUNT + SPK_T_IN];
      spk_tensor_loc *lo = &c.locs[r * SPK_T_COUNT + SPK_T_OUT];
      if (li->mem[1] != 0 || lo->mem[1] != 0 || ptl_rng_range(0, 1))
        continue;
      int64_t slip = 4 * ptl_rng_range(-1, 1);
      if (op == SPK_OP_ALL_GATHER)
        li->off = lo->off + (uint64_t)(r * s[0] * s[1]) * 4;
      else if (op == SPK_OP_REDUCE_SCATTER)
        lo->off = li->off + (uint64_t)(spk_split_offset(s[0], world, r) *
                                       s[1]) * 4;
      else
        lo->off = li->off;
      uint64_t *moved = op == SPK_OP_ALL_GATHER ? &li->off : &lo->off;
      if ((int64_t)*moved + slip >= 0)
        *moved = (uint64_t)((int64_t)*moved + slip);
    }
    /* the arena holds every placed tensor */
    for (int i = 0; i < world * SPK_T_COUNT; i++)
      if (c.locs[i].mem[1] == 0 && c.locs[i].off + c.bytes[i] > arena)
        arena = c.locs[i].off + c.bytes[i];
    char tag[PTL_TAG];
    ptl_tag(tag, 13, it, spk_op_name(op), world, 2, 0);
    int shares = 0; /* an output shares bytes with another tensor */
    for (int i = 0; i < world * SPK_T_COUNT; i++)
      for (int j = 0; j < world * SPK_T_COUNT; j++)
        if (i != j && (i % 2 == SPK_T_OUT || j % 2 == SPK_T_OUT) &&
            c.locs[i].mem[1] == 0 && c.locs[j].mem[1] == 0 &&
            meets(c.locs[i].off, c.bytes[i], c.locs[j].off, c.bytes[j]))
          shares = 1;
    spk_plan p;
    spk_err err;
    int rc = check(&c, &p, &err);
    spk_plan_free(&p);
    if (rc == SPK_OK) {
      run_in_arena(&c, arena, tag);
      accepted++, in_place += shares;
      ck_assert_msg(!shares || op == SPK_OP_ALL_REDUCE ||
                        op == SPK_OP_ALL_GATHER ||
                        op == SPK_OP_REDUCE_SCATTER,
                    "%s: accepted shared bytes", tag);
    } else {
      ck_assert_msg(rc == SPK_EINVAL && shares, "%s: %s", tag, err.msg);
      refused++;
    }
  }
  ck_assert_int_gt(accepted, 100);
  ck_assert_int_gt(refused, 100);
  ck_assert_int_gt(in_place, 10);
}
END_TEST

int main(void) {
  const TTest *tests[] = {test_all_to_all_in_place, test_gather_outside_own_slot,
                          test_gather_strided_slot, test_gather_scaled_in_place,
                          test_reduce_in_place,     test_reduce_scatter_in_place,
                          test_across_ranks,        test_allowed,
                          test_random};
  return ptl_run_suite("plan_overlap", 120, tests, PTL_LEN(tests));
}
