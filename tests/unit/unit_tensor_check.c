/* One-tensor and name checks (kernels/tensor_check.c), the words the client
 * and the daemon both give. */
#include <check.h>
#include <string.h>

#include "check_run.h"
#include "tensor_check.h"

static void expect(int got, const spk_err *err, int want, const char *needle) {
  ck_assert_int_eq(got, want);
  if (needle != NULL)
    ck_assert_msg(strstr(err->msg, needle) != NULL, "'%s' lacks '%s'",
                  err->msg, needle);
}

START_TEST(test_align) {
  spk_err err;
  for (int dt = 0; dt < SPK_DTYPE_COUNT; dt++) {
    size_t es = spk_dtype_size((spk_dtype)dt);
    for (uint64_t off = 0; off < 24; off++)
      ck_assert_int_eq(spk_tensor_align_check("input", off, 4096 + off,
                                              (spk_dtype)dt, &err),
                       off % es == 0 ? SPK_OK : SPK_EINVAL);
  }
  expect(spk_tensor_align_check("input", 6, 6, SPK_F32, &err), &err,
         SPK_EINVAL, "input tensor offset 6 is not a multiple of 4, the "
         "size of a float32 element (misaligned by 2 bytes)");
  /* the address decides: a device view 2 bytes into its allocation */
  expect(spk_tensor_align_check("output", 8, 0x7f0000000002 + 8, SPK_BF16,
                                &err), &err, SPK_OK, NULL);
  expect(spk_tensor_align_check("output", 8, 0x7f0000000002 + 8, SPK_I64,
                                &err), &err, SPK_EINVAL,
         "output tensor offset 8 is not a multiple of 8, the size of a int64");
  expect(spk_tensor_align_check("input", 0, 0, (spk_dtype)42, &err), &err,
         SPK_EINVAL, "unknown dtype 42");
}
END_TEST

/* A tensor's bytes from its offset lie inside its buffer, counted without
 * wrapping; the refusal names the shape and the buffer's size. */
START_TEST(test_extent) {
  spk_err err;
  uint64_t bytes = 0;
  spk_shape s = {2, {16, 4}};
  expect(spk_tensor_extent_check("send", &s, SPK_F32, 0, 256, &bytes, &err),
         &err, SPK_OK, NULL);
  ck_assert_uint_eq(bytes, 256);
  expect(spk_tensor_extent_check("send", &s, SPK_F32, 4, 256, NULL, &err),
         &err, SPK_EINVAL, "send tensor of shape [16, 4] float32 at offset 4 "
         "(256 bytes) does not fit in a buffer of 256 bytes");
  spk_shape huge = {2, {(int64_t)1 << 62, 4}};
  bytes = 7;
  expect(spk_tensor_extent_check("send", &huge, SPK_F32, 0, 65536, &bytes,
                                 &err), &err, SPK_EINVAL,
         "send tensor of shape [4611686018427387904, 4] float32 has more "
         "than 2^64 bytes: it does not fit in a buffer of 65536 bytes");
  ck_assert_uint_eq(bytes, 7); /* set on success only */
  /* 2^61 x 8 bytes wraps to 0 when counted naively */
  spk_shape wraps = {1, {(int64_t)1 << 61}};
  expect(spk_tensor_extent_check("input", &wraps, SPK_I64, 0, 64, NULL, &err),
         &err, SPK_EINVAL, "more than 2^64 bytes");
  expect(spk_tensor_extent_check("input", &s, SPK_F32, UINT64_MAX, 64, NULL,
                                 &err), &err, SPK_EINVAL,
         "at offset 18446744073709551615");
  spk_shape neg = {2, {4, -1}};
  expect(spk_tensor_extent_check("input", &neg, SPK_F32, 0, 64, NULL, &err),
         &err, SPK_EINVAL, "shape [4, -1] has a negative dim 1 (-1)");
  spk_shape none = {0, {0}};
  expect(spk_tensor_extent_check("input", &none, SPK_F32, 0, 64, NULL, &err),
         &err, SPK_EINVAL, "0 dims, not 1..8");
  expect(spk_tensor_extent_check("input", &s, (spk_dtype)42, 0, 64, NULL,
                                 &err), &err, SPK_EINVAL, "unknown dtype 42");
  spk_shape empty = {1, {0}};
  expect(spk_tensor_extent_check("input", &empty, SPK_F32, 64, 64, NULL,
                                 &err), &err, SPK_OK, NULL);
}
END_TEST

START_TEST(test_names) {
  spk_err err;
  const char *good[] = {"a", "job42", "Job.4-2_x", "team:job/sub@node",
                        "conformance-1234"};
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
    expect(spk_name_check(good[i], strlen(good[i]), &err), &err, SPK_OK,
           NULL);
  char n[130];
  memset(n, 'a', sizeof(n));
  expect(spk_name_check(n, 127, &err), &err, SPK_OK, NULL);
  expect(spk_name_check(n, 128, &err), &err, SPK_EINVAL,
         "group name must be 1..127 bytes, got 128");
  expect(spk_name_check("", 0, &err), &err, SPK_EINVAL, "got 0");
  expect(spk_name_check(NULL, 3, &err), &err, SPK_EINVAL, "1..127");
  expect(spk_name_check("job\0x", 5, &err), &err, SPK_EINVAL,
         "byte 0x00 at offset 3");
  /* every byte outside the set, one at a time */
  for (int b = 0; b < 256; b++) {
    char one[3] = {'a', (char)b, 'z'};
    int in_set = (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') ||
                 (b >= '0' && b <= '9') || strchr("._:/@-", b) != NULL;
    ck_assert_int_eq(spk_name_check(one, 3, &err),
                     in_set && b != 0 ? SPK_OK : SPK_EINVAL);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("tensor_check");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_align);
  tcase_add_test(tc, test_extent);
  tcase_add_test(tc, test_names);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
