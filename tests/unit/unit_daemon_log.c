/* The log's defences against text it does not own (issue 33): a client's
 * or a peer's words are escaped and cut (spd_log_str), every line is one
 * line whatever its message holds (spd_log_write), and lines a client
 * can cause at will are bounded per window (spd_log_limit). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check_run.h"
#include "log.h"

START_TEST(words_escaped) {
  char b[SPD_LOG_STR_SIZE];
  ck_assert_str_eq(spd_log_str(b, sizeof(b), "abort"), "abort");
  ck_assert_str_eq(spd_log_str(b, sizeof(b), "a\nb\r\\c\x7f\xff"),
                   "a\\x0ab\\x0d\\x5cc\\x7f\\xff");
  ck_assert_str_eq(spd_log_str(b, sizeof(b), NULL), "(none)");
  ck_assert_str_eq(spd_log_str(b, sizeof(b), ""), "");
}
END_TEST

/* The longest words, all escaped, fill SPD_LOG_STR_SIZE; longer ones and
 * a short buffer are cut, saying so. */
START_TEST(words_cut) {
  char in[SPD_LOG_STR_MAX * 2 + 1], b[SPD_LOG_STR_SIZE];
  memset(in, '\n', sizeof(in) - 1);
  in[sizeof(in) - 1] = '\0';
  spd_log_str(b, sizeof(b), in);
  ck_assert_uint_eq(strlen(b), SPD_LOG_STR_MAX * 4 + 3);
  ck_assert_str_eq(b + SPD_LOG_STR_MAX * 4, "...");
  memset(in, 'a', sizeof(in) - 1);
  spd_log_str(b, sizeof(b), in);
  ck_assert_uint_eq(strlen(b), SPD_LOG_STR_MAX + 3);
  char small[10];
  ck_assert_str_eq(spd_log_str(small, sizeof(small), "a\nbcdefgh"),
                   "a\\x0ab...");
  ck_assert_str_eq(spd_log_str(small, sizeof(small), "a\nb"), "a\\x0ab");
  ck_assert_str_eq(spd_log_str(small, sizeof(small), "\n\n"), "\\x0a...");
  ck_assert_str_eq(spd_log_str(small, 3, "abc"), "");
}
END_TEST

/* A message holding a newline stays one line. */
START_TEST(one_line_per_call) {
  char path[] = "/tmp/spcoll-log-test-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  unlink(path);
  int saved = dup(STDERR_FILENO);
  ck_assert_int_ge(saved, 0);
  ck_assert_int_ge(dup2(fd, STDERR_FILENO), 0);
  spd_logger lg = {.level = SPD_LOG_INFO};
  SPD_INFO(&lg, "reason: %s", "x\nspcolld info forged.c:1 drained");
  ck_assert_int_ge(dup2(saved, STDERR_FILENO), 0);
  close(saved);
  char text[512] = "";
  ck_assert_int_gt(pread(fd, text, sizeof(text) - 1, 0), 0);
  close(fd);
  ck_assert_ptr_nonnull(strstr(text, "reason: x\\x0aspcolld info forged.c:1 "
                                     "drained\n"));
  ck_assert_ptr_eq(strchr(text, '\n'), text + strlen(text) - 1);
}
END_TEST

#define S 1000000000ull

/* burst lines a window; the rest counted, and told once the window is
 * over: by the next line's take, or by end when none comes. */
START_TEST(limit_per_window) {
  spd_log_limit l = {0};
  uint64_t ended = 99;
  int logged = 0;
  for (int i = 0; i < 100; i++) {
    logged += spd_log_limit_take(&l, 5 * S + (uint64_t)i, 3, 60 * S, &ended);
    ck_assert_uint_eq(ended, 0);
  }
  ck_assert_int_eq(logged, 3);
  ck_assert_uint_eq(spd_log_limit_end(&l, 64 * S, 60 * S), 0); /* not yet */
  ck_assert_int_eq(spd_log_limit_take(&l, 66 * S, 3, 60 * S, &ended), 1);
  ck_assert_uint_eq(ended, 97);
  ck_assert_int_eq(spd_log_limit_take(&l, 67 * S, 3, 60 * S, &ended), 1);
  ck_assert_uint_eq(ended, 0);
  ck_assert_int_eq(spd_log_limit_take(&l, 68 * S, 3, 60 * S, &ended), 1);
  ck_assert_int_eq(spd_log_limit_take(&l, 69 * S, 3, 60 * S, &ended), 0);
  ck_assert_uint_eq(spd_log_limit_end(&l, 200 * S, 60 * S), 1);
  ck_assert_uint_eq(spd_log_limit_end(&l, 300 * S, 60 * S), 0); /* told */
}
END_TEST

int main(void) {
  Suite *s = suite_create("daemon_log");
  TCase *tc = tcase_create("log");
  tcase_add_test(tc, words_escaped);
  tcase_add_test(tc, words_cut);
  tcase_add_test(tc, one_line_per_call);
  tcase_add_test(tc, limit_per_window);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
