/* spc_abi: the line bindings compare their struct layouts with. Checked
 * field by field against this compiler's view of spcoll.h, and for the
 * exact text the Python package builds (client/python/spcoll/_lib.py). */
#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "check_run.h"
#include "spcoll.h"

/* " name offset" must appear in the line. */
static void expect_field(const char *line, const char *name, size_t off) {
  char want[64];
  snprintf(want, sizeof(want), " %s %zu", name, off);
  ck_assert_msg(strstr(line, want) != NULL, "'%s' not in '%s'", want, line);
}

START_TEST(layouts_are_reported) {
  const char *line = spc_abi();
  ck_assert_ptr_nonnull(line);
  ck_assert_ptr_eq(line, spc_abi()); /* built once, stable */
  char head[64];
  snprintf(head, sizeof(head), "spcoll %s abi %d; spc_tensor %zu", SPC_VERSION,
           SPC_ABI_VERSION, sizeof(spc_tensor));
  ck_assert_msg(strncmp(line, head, strlen(head)) == 0, "%s", line);
  expect_field(line, "shape", offsetof(spc_tensor, shape));
  expect_field(line, "ndim", offsetof(spc_tensor, ndim));
  expect_field(line, "flags", offsetof(spc_op, flags));
  expect_field(line, "scalar", offsetof(spc_op, scalar));
  char tail[64];
  snprintf(tail, sizeof(tail), "; spc_timing %zu; SPC_MAX_DIMS %d",
           sizeof(spc_timing), SPC_MAX_DIMS);
  size_t n = strlen(line), m = strlen(tail);
  ck_assert_msg(n > m && strcmp(line + n - m, tail) == 0, "%s", line);
}
END_TEST

START_TEST(x86_64_layout_is_the_documented_one) {
  /* the values the Python package was written against on LP64 */
  if (sizeof(void *) != 8)
    return;
  ck_assert_str_eq(spc_abi(),
                   "spcoll " SPC_VERSION " abi 1; spc_tensor 88 buf 0 offset 8 "
                   "dtype 16 ndim 20 shape 24; spc_op 64 kind 0 ndims 4 dims "
                   "8 sizes 16 nsizes 24 sizes2 32 nsizes2 40 scalar 48 flags "
                   "56; spc_timing 32; SPC_MAX_DIMS 8");
}
END_TEST

int main(void) {
  Suite *s = suite_create("client_abi");
  TCase *tc = tcase_create("abi");
  tcase_add_test(tc, layouts_are_reported);
  tcase_add_test(tc, x86_64_layout_is_the_documented_one);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
