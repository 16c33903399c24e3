/* Vocabulary of the planners (kernels/types.h, kernels/status.h): element
 * counts with their overflow guard, Python-style dims, dtype tables, status
 * strings. Expected values are spelled out here, not derived from the code
 * under test. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "status.h"
#include "types.h"

static spk_shape shape_of(int ndim, const int64_t *dims) {
  spk_shape s;
  memset(&s, 0, sizeof(s));
  s.ndim = ndim;
  for (int i = 0; i < ndim; i++)
    s.dim[i] = dims[i];
  return s;
}

/* numel of a valid shape, failing the test on an error. */
static int64_t numel_ok(int ndim, const int64_t *dims, size_t esize) {
  spk_shape s = shape_of(ndim, dims);
  spk_err err = {{0}};
  int64_t n = -42;
  int rc = spk_shape_numel(&s, esize, &n, &err);
  ck_assert_msg(rc == SPK_OK, "numel failed: %d %s", rc, err.msg);
  return n;
}

/* numel that must fail with SPK_EINVAL and a message containing `needle`. */
static void numel_bad(int ndim, const int64_t *dims, size_t esize,
                      const char *needle) {
  spk_shape s = shape_of(ndim > 0 && ndim <= SPK_MAX_DIMS ? ndim : 0, dims);
  s.ndim = ndim;
  spk_err err = {{0}};
  int64_t n = -42;
  int rc = spk_shape_numel(&s, esize, &n, &err);
  ck_assert_int_eq(rc, SPK_EINVAL);
  ck_assert_msg(strstr(err.msg, needle) != NULL, "message '%s' lacks '%s'",
                err.msg, needle);
}

START_TEST(test_numel_plain) {
  ck_assert_int_eq(numel_ok(3, (const int64_t[]){2, 3, 4}, 4), 24);
  ck_assert_int_eq(numel_ok(1, (const int64_t[]){7}, 1), 7);
  ck_assert_int_eq(numel_ok(0, NULL, 8), 1); /* a scalar has one element */
  ck_assert_int_eq(numel_ok(3, (const int64_t[]){5, 0, 9}, 2), 0);
  ck_assert_int_eq(numel_ok(8, (const int64_t[]){1, 2, 1, 2, 1, 2, 1, 2}, 8),
                   16);
}
END_TEST

START_TEST(test_numel_negative) {
  numel_bad(3, (const int64_t[]){2, -3, 4}, 4, "dim 1");
  numel_bad(3, (const int64_t[]){2, -3, 4}, 4, "-3");
  numel_bad(1, (const int64_t[]){-1}, 1, "negative");
  /* A zero dim before a negative one must not hide it. */
  numel_bad(2, (const int64_t[]){0, -5}, 1, "-5");
  numel_bad(SPK_MAX_DIMS + 1, NULL, 1, "ndim");
  numel_bad(-1, NULL, 1, "ndim");
}
END_TEST

/* The guard is on bytes: elements * esize must fit in int64. */
START_TEST(test_numel_overflow) {
  const int64_t p31 = (int64_t)1 << 31, p32 = (int64_t)1 << 32;
  const int64_t p62 = (int64_t)1 << 62;
  ck_assert_int_eq(numel_ok(2, (const int64_t[]){p31, p31}, 1), p62);
  ck_assert_int_eq(numel_ok(1, (const int64_t[]){INT64_MAX}, 1), INT64_MAX);
  ck_assert_int_eq(numel_ok(1, (const int64_t[]){INT64_MAX / 8}, 8),
                   INT64_MAX / 8);
  ck_assert_int_eq(numel_ok(2, (const int64_t[]){p31, p31 - 1}, 2),
                   p31 * (p31 - 1));
  /* 2^63 elements overflow even for 1-byte elements. */
  numel_bad(2, (const int64_t[]){p32, p31}, 1, "too large");
  numel_bad(2, (const int64_t[]){p32, p31}, 1, "dim 1");
  /* 2^62 elements fit, but not as 2^63 bytes of int16. */
  numel_bad(2, (const int64_t[]){p31, p31}, 2, "too large");
  numel_bad(1, (const int64_t[]){INT64_MAX / 8 + 1}, 8, "too large");
  /* Products that wrap around to small values must still be caught. */
  numel_bad(4, (const int64_t[]){p32, p32, p32, 2}, 1, "too large");
}
END_TEST

static void norm_ok(int dim, int ndim, int want) {
  spk_err err = {{0}};
  int got = -99;
  int rc = spk_dim_normalize(dim, ndim, "dim", &got, &err);
  ck_assert_msg(rc == SPK_OK, "normalize(%d, %d): %s", dim, ndim, err.msg);
  ck_assert_msg(got == want, "normalize(%d, %d) = %d, want %d", dim, ndim,
                got, want);
}

START_TEST(test_dim_normalize) {
  norm_ok(0, 1, 0);
  norm_ok(-1, 1, 0);
  norm_ok(2, 3, 2);
  norm_ok(-1, 3, 2);
  norm_ok(-3, 3, 0);
  norm_ok(-8, 8, 0);
  norm_ok(7, 8, 7);
  const struct {
    int dim, ndim;
  } bad[] = {{3, 3}, {-4, 3}, {0, 0}, {-1, 0}, {8, 8}, {-9, 8}, {100, 2}};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    spk_err err = {{0}};
    int got = -99;
    int rc = spk_dim_normalize(bad[i].dim, bad[i].ndim, "scatter dim", &got,
                               &err);
    ck_assert_msg(rc == SPK_EINVAL, "normalize(%d, %d) gave %d", bad[i].dim,
                  bad[i].ndim, rc);
    /* The message names what the dim is for, its value and the ndim. */
    char want[64];
    snprintf(want, sizeof(want), "scatter dim %d", bad[i].dim);
    ck_assert_msg(strstr(err.msg, want) != NULL, "'%s' lacks '%s'", err.msg,
                  want);
    snprintf(want, sizeof(want), "%d-d", bad[i].ndim);
    ck_assert_msg(strstr(err.msg, want) != NULL, "'%s' lacks '%s'", err.msg,
                  want);
  }
}
END_TEST

START_TEST(test_dtypes) {
  static const struct {
    spk_dtype t;
    size_t size;
    const char *name;
  } want[] = {{SPK_F32, 4, "float32"}, {SPK_F64, 8, "float64"},
              {SPK_F16, 2, "float16"}, {SPK_BF16, 2, "bfloat16"},
              {SPK_I8, 1, "int8"},     {SPK_U8, 1, "uint8"},
              {SPK_I32, 4, "int32"},   {SPK_I64, 8, "int64"}};
  ck_assert_int_eq(sizeof(want) / sizeof(want[0]), SPK_DTYPE_COUNT);
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    ck_assert_uint_eq(spk_dtype_size(want[i].t), want[i].size);
    ck_assert_str_eq(spk_dtype_name(want[i].t), want[i].name);
  }
  /* Out-of-range values (the wire carries a uint32) are not indexed. */
  ck_assert_uint_eq(spk_dtype_size(SPK_DTYPE_COUNT), 0);
  ck_assert_uint_eq(spk_dtype_size((spk_dtype)-1), 0);
  ck_assert_uint_eq(spk_dtype_size((spk_dtype)1000), 0);
  ck_assert_str_eq(spk_dtype_name(SPK_DTYPE_COUNT), "unknown-dtype");
  ck_assert_str_eq(spk_dtype_name((spk_dtype)-7), "unknown-dtype");
  ck_assert_str_eq(spk_op_name(SPK_OP_ALL_GATHER), "all_gather");
  ck_assert_str_eq(spk_op_name((spk_op_kind)0), "unknown-op");
  ck_assert_str_eq(spk_op_name(SPK_OP_COUNT), "unknown-op");
  ck_assert_str_eq(spk_op_name((spk_op_kind)99), "unknown-op");
}
END_TEST

START_TEST(test_strerror) {
  /* Each status, its wire number and its text, written out by hand. */
  static const struct {
    int st, wire;
    const char *msg;
  } want[] = {{SPK_EINVAL, 1, "invalid argument"},
              {SPK_EPROTOCOL, 2, "protocol error"},
              {SPK_EVERSION, 3, "protocol version mismatch"},
              {SPK_ENOT_FOUND, 4, "no such object"},
              {SPK_ECONFLICT, 5, "conflicting membership"},
              {SPK_EMISMATCH, 6, "ranks disagree on the op"},
              {SPK_EPEER_LOST, 7, "a rank of the group was lost"},
              {SPK_ESHUTDOWN, 8, "daemon shutting down"},
              {SPK_ENO_MEMORY, 9, "out of memory"},
              {SPK_ESYSTEM, 10, "system call failed"},
              {SPK_EABORTED, 11, "aborted"},
              {SPK_ECONNECTION, 12, "connection to the daemon failed"},
              {SPK_EPERM, 13, "permission denied"},
              {SPK_ETIMEDOUT, 14, "timed out"}};
  ck_assert_str_eq(spk_strerror(SPK_OK), "success");
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    ck_assert_int_eq(want[i].st, -want[i].wire);
    ck_assert_str_eq(spk_strerror(want[i].st), want[i].msg);
  }
  ck_assert_str_eq(spk_strerror(-19), "unknown status");
  ck_assert_str_eq(spk_strerror(1), "unknown status");
  ck_assert_str_eq(spk_strerror(-1000), "unknown status");
}
END_TEST

START_TEST(test_err_set) {
  spk_err err = {{0}};
  ck_assert_int_eq(spk_err_set(&err, SPK_EMISMATCH, "rank %d: %s", 3, "x"),
                   SPK_EMISMATCH);
  ck_assert_str_eq(err.msg, "rank 3: x");
  /* NULL err: the status still comes back. */
  ck_assert_int_eq(spk_err_set(NULL, SPK_ESYSTEM, "%s", "ignored"),
                   SPK_ESYSTEM);
  /* An over-long message is cut, and stays NUL-terminated. */
  char big[2000];
  memset(big, 'a', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  spk_err_set(&err, SPK_EINVAL, "%s", big);
  ck_assert_uint_eq(strlen(err.msg), sizeof(err.msg) - 1);
}
END_TEST

START_TEST(test_shape_str_equal) {
  char buf[128];
  spk_shape a = shape_of(3, (const int64_t[]){2, 3, 4});
  spk_shape b = shape_of(3, (const int64_t[]){2, 3, 4});
  spk_shape c = shape_of(3, (const int64_t[]){2, 3, 5});
  spk_shape d = shape_of(2, (const int64_t[]){2, 3});
  spk_shape e = shape_of(0, NULL);
  ck_assert_str_eq(spk_shape_str(&a, buf, sizeof(buf)), "[2, 3, 4]");
  ck_assert_str_eq(spk_shape_str(&e, buf, sizeof(buf)), "[]");
  spk_shape big = shape_of(1, (const int64_t[]){INT64_MAX});
  ck_assert_str_eq(spk_shape_str(&big, buf, sizeof(buf)),
                   "[9223372036854775807]");
  /* A short buffer truncates without overrunning it. */
  char small[6];
  memset(small, 'x', sizeof(small));
  spk_shape_str(&c, small, sizeof(small));
  ck_assert_uint_lt(strlen(small), sizeof(small));
  ck_assert_int_eq(strncmp(small, "[2, 3", strlen(small)), 0);
  ck_assert(spk_shape_equal(&a, &b));
  ck_assert(!spk_shape_equal(&a, &c));
  ck_assert(!spk_shape_equal(&a, &d));
  /* Dims past ndim do not take part. */
  spk_shape f = d;
  f.dim[5] = 77;
  ck_assert(spk_shape_equal(&d, &f));
}
END_TEST

static Suite *types_suite(void) {
  Suite *s = suite_create("types");
  TCase *tc = tcase_create("core");
  tcase_add_test(tc, test_numel_plain);
  tcase_add_test(tc, test_numel_negative);
  tcase_add_test(tc, test_numel_overflow);
  tcase_add_test(tc, test_dim_normalize);
  tcase_add_test(tc, test_dtypes);
  tcase_add_test(tc, test_strerror);
  tcase_add_test(tc, test_err_set);
  tcase_add_test(tc, test_shape_str_equal);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return spt_run_suite(types_suite());
}
