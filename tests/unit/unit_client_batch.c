/* Batch preparation: padding, slicing, positions, logits_to_keep masks and
 * unpadding, on cases worked by hand from the seeds' rules. */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "check_run.h"
#include "spcoll.h"

START_TEST(pad_len) {
  ck_assert_int_eq(spc_sp_pad_len(7, 2), 1);
  ck_assert_int_eq(spc_sp_pad_len(8, 2), 0);
  ck_assert_int_eq(spc_sp_pad_len(5, 3), 1);
  ck_assert_int_eq(spc_sp_pad_len(1, 4), 3);
  ck_assert_int_eq(spc_sp_pad_len(0, 4), 0);
  ck_assert_int_eq(spc_sp_pad_len(5, 0), SPC_EINVAL);
  ck_assert_int_eq(spc_sp_pad_len(-1, 2), SPC_EINVAL);
}
END_TEST

START_TEST(slice_labels_pad_with_minus_100) {
  int64_t labels[7] = {0, 1, 2, 3, 4, 5, 6}, shape[2] = {1, 7}, out[4];
  int64_t fill = -100;
  ck_assert_int_eq(spc_sp_slice(labels, SPC_INT64, 2, shape, 1, 2, 0, &fill,
                                out), 0);
  int64_t r0[4] = {0, 1, 2, 3}, r1[4] = {4, 5, 6, -100};
  ck_assert_mem_eq(out, r0, sizeof(r0));
  ck_assert_int_eq(spc_sp_slice(labels, SPC_INT64, 2, shape, 1, 2, 1, &fill,
                                out), 0);
  ck_assert_mem_eq(out, r1, sizeof(r1));
}
END_TEST

START_TEST(slice_embeddings_3d) {
  /* [b=2, L=3, e=2] over 2 ranks: pad 1, chunks of 2 rows per batch row */
  float x[12], out[8], zero = 0;
  for (int i = 0; i < 12; i++)
    x[i] = (float)i;
  int64_t shape[3] = {2, 3, 2};
  ck_assert_int_eq(spc_sp_slice(x, SPC_FLOAT32, 3, shape, 1, 2, 1, &zero, out),
                   0);
  float want[8] = {4, 5, 0, 0, 10, 11, 0, 0};
  ck_assert_mem_eq(out, want, sizeof(want));
}
END_TEST

START_TEST(positions_continue_into_the_pad) {
  int64_t out[3];
  ck_assert_int_eq(spc_sp_positions(5, 2, 0, out), 0);
  ck_assert_int_eq(out[0], 0);
  ck_assert_int_eq(out[2], 2);
  ck_assert_int_eq(spc_sp_positions(5, 2, 1, out), 0);
  ck_assert_int_eq(out[0], 3);
  ck_assert_int_eq(out[1], 4);
  ck_assert_int_eq(out[2], 0); /* the pad starts again at 0 */
}
END_TEST

START_TEST(keep_mask_never_flags_a_pad_token) {
  /* L = 7, keep 3, w = 2: chunks of 4; the last 3 real tokens are global
   * positions 4, 5, 6; position 7 is padding (axolotl flags it). */
  uint8_t m[4];
  ck_assert_int_eq(spc_sp_keep_mask(7, 3, 2, 0, m), 0);
  uint8_t r0[4] = {0, 0, 0, 0}, r1[4] = {1, 1, 1, 0};
  ck_assert_mem_eq(m, r0, 4);
  ck_assert_int_eq(spc_sp_keep_mask(7, 3, 2, 1, m), 0);
  ck_assert_mem_eq(m, r1, 4);
  ck_assert_int_eq(spc_sp_keep_mask(7, 100, 2, 0, m), 0); /* keep > L */
  uint8_t all[4] = {1, 1, 1, 1};
  ck_assert_mem_eq(m, all, 4);
  ck_assert_int_eq(spc_sp_keep_mask(7, 0, 2, 1, m), 0); /* 0 keeps all */
  ck_assert_mem_eq(m, r1 /* 4, 5, 6 real, 7 pad */, 4);
}
END_TEST

START_TEST(unpad_drops_the_tail) {
  float x[2 * 4 * 3], out[2 * 3 * 3];
  for (int i = 0; i < 24; i++)
    x[i] = (float)i;
  int64_t shape[3] = {2, 4, 3};
  ck_assert_int_eq(spc_sp_unpad(x, SPC_FLOAT32, 3, shape, 1, 3, out), 0);
  ck_assert(out[8] == 8.0f && out[9] == 12.0f && out[17] == 20.0f);
  ck_assert_int_eq(spc_sp_unpad(x, SPC_FLOAT32, 3, shape, 1, 5, out),
                   SPC_EINVAL);
}
END_TEST

START_TEST(bad_arguments) {
  int64_t x[4] = {0}, shape[2] = {1, 4}, fill = 0;
  ck_assert_int_eq(spc_sp_slice(x, SPC_INT64, 2, shape, 1, 2, 2, &fill, x),
                   SPC_EINVAL);
  ck_assert_int_eq(spc_sp_slice(x, SPC_INT64, 2, shape, 5, 2, 0, &fill, x),
                   SPC_EINVAL);
  ck_assert_int_eq(spc_sp_positions(4, 0, 0, x), SPC_EINVAL);
  ck_assert_int_eq(spc_sp_keep_mask(4, -1, 2, 0, (uint8_t *)x), SPC_EINVAL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("client_batch");
  TCase *tc = tcase_create("batch");
  tcase_add_test(tc, pad_len);
  tcase_add_test(tc, slice_labels_pad_with_minus_100);
  tcase_add_test(tc, slice_embeddings_3d);
  tcase_add_test(tc, positions_continue_into_the_pad);
  tcase_add_test(tc, keep_mask_never_flags_a_pad_token);
  tcase_add_test(tc, unpad_drops_the_tail);
  tcase_add_test(tc, bad_arguments);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
