/* Run a Check suite and turn its result into an exit status: every test
 * program of the tree ends this way. */
#ifndef SPT_CHECK_RUN_H
#define SPT_CHECK_RUN_H

#include <check.h>

static inline int spt_run_suite(Suite *s) {
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}

#endif
