/* The split rule (kernels/split_rule.h): n over w ranks gives n/w + 1 to the
 * first n % w ranks and n/w to the rest; offsets are prefix sums. The
 * expected values here are written out by hand or recomputed with a plain
 * loop, never with the functions under test. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "check_run.h"
#include "split_rule.h"

/* Fixed-seed generator so a failure reproduces; the seed is in messages. */
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

/* Checks spk_split_sizes, spk_split_size and spk_split_offset against a
 * hand-written expectation for one (n, w). */
static void expect_split(int64_t n, int w, const int64_t *want) {
  int64_t got[16];
  ck_assert_int_le(w, 16);
  spk_split_sizes(n, w, got);
  int64_t off = 0;
  for (int r = 0; r < w; r++) {
    ck_assert_msg(got[r] == want[r], "%lld/%d sizes[%d]: got %lld want %lld",
                  (long long)n, w, r, (long long)got[r], (long long)want[r]);
    ck_assert_int_eq(spk_split_size(n, w, r), want[r]);
    ck_assert_msg(spk_split_offset(n, w, r) == off,
                  "%lld/%d offset[%d]: got %lld want %lld", (long long)n, w, r,
                  (long long)spk_split_offset(n, w, r), (long long)off);
    off += want[r];
  }
}

START_TEST(test_examples) {
  expect_split(7, 3, (const int64_t[]){3, 2, 2});
  expect_split(2, 4, (const int64_t[]){1, 1, 0, 0});
  expect_split(0, 3, (const int64_t[]){0, 0, 0});
  expect_split(9, 3, (const int64_t[]){3, 3, 3});
  expect_split(10, 4, (const int64_t[]){3, 3, 2, 2});
  expect_split(11, 4, (const int64_t[]){3, 3, 3, 2});
  expect_split(5, 1, (const int64_t[]){5});
  expect_split(1, 5, (const int64_t[]){1, 0, 0, 0, 0});
  expect_split(17, 16, (const int64_t[]){2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
                                        1, 1, 1, 1});
}
END_TEST

/* Sizes used as tensor dims can be large: no overflow in the arithmetic. */
START_TEST(test_large_n) {
  int64_t n = INT64_MAX - 2; /* 9223372036854775805 = 3 * 3074457345618258601 + 2 */
  expect_split(n, 3,
               (const int64_t[]){3074457345618258602LL, 3074457345618258602LL,
                                 3074457345618258601LL});
  int64_t big = (int64_t)1 << 40;
  ck_assert_int_eq(spk_split_size(big + 5, 8, 4), (big >> 3) + 1);
  ck_assert_int_eq(spk_split_size(big + 5, 8, 5), big >> 3);
  ck_assert_int_eq(spk_split_offset(big + 5, 8, 7), 7 * (big >> 3) + 5);
}
END_TEST

/* Random n in 0..10000, w in 1..64: recompute the rule with a plain loop,
 * and check the sizes sum to n, differ by at most one and never grow. */
START_TEST(test_random) {
  const uint64_t seed = 0x5eed5a1175ull;
  rng_state = seed;
  int64_t sizes[64];
  for (int it = 0; it < 5000; it++) {
    int64_t n = rng_range(0, 10000);
    int w = (int)rng_range(1, 64);
    spk_split_sizes(n, w, sizes);
    int64_t sum = 0, base = n / w, extra = n % w;
    for (int r = 0; r < w; r++) {
      int64_t want = base + (r < extra ? 1 : 0);
      ck_assert_msg(sizes[r] == want,
                    "seed %#llx case %d: %lld/%d sizes[%d]=%lld want %lld",
                    (unsigned long long)seed, it, (long long)n, w, r,
                    (long long)sizes[r], (long long)want);
      ck_assert_msg(spk_split_size(n, w, r) == sizes[r],
                    "seed %#llx case %d: size/sizes differ at rank %d",
                    (unsigned long long)seed, it, r);
      ck_assert_msg(spk_split_offset(n, w, r) == sum,
                    "seed %#llx case %d: %lld/%d offset[%d]=%lld want %lld",
                    (unsigned long long)seed, it, (long long)n, w, r,
                    (long long)spk_split_offset(n, w, r), (long long)sum);
      if (r > 0)
        ck_assert_int_le(sizes[r], sizes[r - 1]);
      sum += sizes[r];
    }
    ck_assert_msg(sum == n, "seed %#llx case %d: %lld/%d sums to %lld",
                  (unsigned long long)seed, it, (long long)n, w,
                  (long long)sum);
    ck_assert_int_le(sizes[0] - sizes[w - 1], 1);
  }
}
END_TEST

static Suite *split_suite(void) {
  Suite *s = suite_create("split_rule");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_examples);
  tcase_add_test(tc, test_large_n);
  tcase_add_test(tc, test_random);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return spt_run_suite(split_suite());
}
