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
  tcase_add_test(tc, test_names);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
