/* spc_out_shape: each op's output shape for a rank, and a rank's own bad
 * arguments found before anything is sent. */
#include <check.h>
#include <string.h>

#include "check_run.h"
#include "client_internal.h"

static spc_client client;
static spc_group group = {.client = &client, .rank = 1, .world = 4};

/* Output shape of op on an input of shape in (ndim dims). */
static int shape_of(const spc_op *op, int ndim, const int64_t *in,
                    int64_t *out, int *nd) {
  spc_tensor t = {.buf = NULL, .dtype = SPC_FLOAT32, .ndim = ndim};
  memcpy(t.shape, in, (size_t)ndim * sizeof(int64_t));
  return spc_out_shape(&group, op, &t, out, nd);
}

#define EXPECT_SHAPE(op, in, ...)                                         \
  do {                                                                    \
    int64_t want_[] = {__VA_ARGS__}, got_[SPC_MAX_DIMS];                  \
    int nd_;                                                              \
    spc_op op_ = (op);                                                    \
    ck_assert_int_eq(shape_of(&op_, (int)(sizeof(in) / sizeof(in[0])),    \
                              in, got_, &nd_), 0);                        \
    ck_assert_int_eq(nd_, (int)(sizeof(want_) / sizeof(want_[0])));       \
    ck_assert_mem_eq(got_, want_, sizeof(want_));                         \
  } while (0)

START_TEST(shapes_of_every_op) {
  int64_t x[3] = {2, 10, 8}, seq[2] = {6, 3};
  int64_t a2av_in[4] = {1, 2, 3, 4}, a2av_out[4] = {2, 2, 2, 2};
  EXPECT_SHAPE(spc_op_split(1, NULL), x, 2, 3, 8); /* 10 over 4: 3,3,2,2 */
  EXPECT_SHAPE(spc_op_all_gather(-1, NULL), x, 2, 10, 32);
  EXPECT_SHAPE(spc_op_all_to_all(2, 1, 0), x, 2, 40, 2);
  EXPECT_SHAPE(spc_op_all_to_all(1, 2, 30), x, 2, 3, 30);
  EXPECT_SHAPE(spc_op_all_reduce(SPC_MAX), x, 2, 10, 8);
  EXPECT_SHAPE(spc_op_reduce_scatter(-1, NULL), x, 2, 10, 2);
  EXPECT_SHAPE(spc_op_zigzag_split(2), x, 2, 10, 2);
  EXPECT_SHAPE(spc_op_zigzag_gather(2), x, 2, 10, 32);
  EXPECT_SHAPE(spc_op_packed_split(1, seq, 2), x, 2, 3, 8); /* 2 + 1 */
  int64_t local[3] = {2, 3, 8};
  EXPECT_SHAPE(spc_op_packed_gather(1, seq, 2), local, 2, 9, 8);
  int64_t rows[2] = {10, 3};
  EXPECT_SHAPE(spc_op_all_to_all_v(a2av_in, a2av_out), rows, 8, 3);
}
END_TEST

START_TEST(bad_arguments_found_early) {
  int64_t x[3] = {2, 10, 8}, out[SPC_MAX_DIMS], bad[4] = {1, 1, 1, 1};
  int nd;
  spc_op op = spc_op_split(3, NULL);
  ck_assert_int_eq(shape_of(&op, 3, x, out, &nd), SPC_EINVAL);
  ck_assert_ptr_nonnull(strstr(spc_last_error(&client), "dim 3 out of range"));
  op = spc_op_zigzag_split(1);
  ck_assert_int_eq(shape_of(&op, 3, x, out, &nd), SPC_EINVAL);
  ck_assert_ptr_nonnull(strstr(spc_last_error(&client), "not divisible"));
  int64_t huge[3] = {0, (int64_t)1 << 62, 8};
  op = spc_op_all_gather(1, NULL); /* 2^62 * 4 ranks wraps */
  ck_assert_int_eq(shape_of(&op, 3, huge, out, &nd), SPC_EINVAL);
  int64_t wrap[4] = {INT64_MAX, 24, 0, 0}; /* found by fuzz_frame */
  op = spc_op_all_gather(1, wrap);
  ck_assert_int_eq(shape_of(&op, 3, x, out, &nd), SPC_EINVAL);
  op = spc_op_split(1, bad); /* sums to 4, not 10 */
  ck_assert_int_eq(shape_of(&op, 3, x, out, &nd), SPC_EINVAL);
  ck_assert_ptr_nonnull(strstr(spc_last_error(&client), "sum to 4"));
}
END_TEST

int main(void) {
  Suite *s = suite_create("client_outshape");
  TCase *tc = tcase_create("outshape");
  tcase_add_test(tc, shapes_of_every_op);
  tcase_add_test(tc, bad_arguments_found_early);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
