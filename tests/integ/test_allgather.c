/* All-gather through a real daemon: several rank processes, random data,
 * every output element checked against a naive reference. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "harness.h"

static spt_daemon daemon_;

typedef struct {
  const char *group;
  int ndim;
  int64_t shape[SPC_MAX_DIMS];   /* dim `dim` is replaced per rank */
  int dim;                       /* as passed (may be negative) */
  int64_t sizes[8];              /* per-rank size along dim */
  int pass_sizes;
  spc_dtype dtype;
  int async;
  int repeat;
} gather_case;

static size_t numel(const int64_t *s, int nd) {
  size_t n = 1;
  for (int i = 0; i < nd; i++)
    n *= (size_t)s[i];
  return n;
}

static int gather_rank(int rank, int world, void *arg) {
  const gather_case *gc = arg;
  spc_client *c = spt_connect(daemon_.socket);
  spc_group *g;
  if (c == NULL || spc_group_join(c, gc->group, world, rank, &g) < 0)
    return 1;
  int d = gc->dim < 0 ? gc->dim + gc->ndim : gc->dim;
  int64_t ishape[SPC_MAX_DIMS], oshape[SPC_MAX_DIMS];
  memcpy(ishape, gc->shape, sizeof(ishape));
  memcpy(oshape, gc->shape, sizeof(oshape));
  ishape[d] = gc->sizes[rank];
  oshape[d] = 0;
  for (int k = 0; k < world; k++)
    oshape[d] += gc->sizes[k];
  size_t es = spc_dtype_size(gc->dtype);
  size_t ib = numel(ishape, gc->ndim) * es, ob = numel(oshape, gc->ndim) * es;
  spc_buffer *buf;
  spc_tensor in, out;
  int rc = spc_buffer_alloc(c, ib + ob + 64, &buf);
  if (rc == 0)
    rc = spc_tensor_init(&in, buf, 0, gc->dtype, gc->ndim, ishape);
  if (rc == 0)
    rc = spc_tensor_init(&out, buf, (ib + 63) / 64 * 64, gc->dtype, gc->ndim,
                         oshape);
  if (rc < 0) {
    fprintf(stderr, "rank %d setup: %s\n", rank, spc_last_error(c));
    return 1;
  }
  spt_fill(spc_tensor_data(&in), gc->dtype, numel(ishape, gc->ndim), 42, rank);
  for (int it = 0; it < (gc->repeat ? gc->repeat : 1) && rc == 0; it++) {
    memset(spc_tensor_data(&out), 0xEE, ob);
    if (gc->async) {
      spc_request *req;
      int done = 0;
      rc = spc_all_gather_async(g, &in, &out, gc->dim,
                                gc->pass_sizes ? gc->sizes : NULL, &req);
      while (rc == 0 && !done)
        rc = spc_test(&req, &done);
    } else {
      rc = spc_all_gather(g, &in, &out, gc->dim,
                          gc->pass_sizes ? gc->sizes : NULL);
    }
    if (rc < 0)
      fprintf(stderr, "rank %d: all_gather: %s\n", rank, spc_last_error(c));
    else
      rc = spt_check_gather(spc_tensor_data(&out), gc->dtype, gc->ndim,
                            oshape, d, gc->sizes, world, 42, rank);
  }
  spc_buffer_free(buf);
  spc_group_leave(g);
  spc_disconnect(c);
  return rc != 0;
}

static void setup(void) {
  ck_assert_int_eq(spt_daemon_start(&daemon_, NULL), 0);
}

static void teardown(void) {
  ck_assert_int_eq(spt_daemon_stop(&daemon_), 0);
}

static void run_case(gather_case *gc, int world) {
  ck_assert_int_eq(spt_run_ranks(world, gather_rank, gc, 60), 0);
}

START_TEST(aligned_every_dim) {
  for (int dim = -3; dim < 3; dim++) {
    char name[32];
    snprintf(name, sizeof(name), "aligned%d", dim);
    gather_case gc = {name, 3, {4, 6, 5}, dim, {2, 2, 2}, 0, SPC_FLOAT32, 0, 0};
    int d = dim < 0 ? dim + 3 : dim;
    for (int k = 0; k < 3; k++)
      gc.sizes[k] = gc.shape[d];
    run_case(&gc, 3);
  }
}
END_TEST

START_TEST(unaligned_with_and_without_sizes) {
  gather_case a = {"unal1", 3, {2, 7, 3}, 1, {3, 2, 2}, 1, SPC_FLOAT32, 0, 0};
  run_case(&a, 3);
  gather_case b = {"unal2", 3, {2, 7, 3}, 1, {3, 2, 2}, 0, SPC_INT64, 0, 0};
  run_case(&b, 3);
  gather_case z = {"zero", 2, {0, 5}, 0, {1, 0, 2, 3}, 1, SPC_UINT8, 0, 0};
  run_case(&z, 4);
}
END_TEST

START_TEST(four_ranks_many_dtypes_async) {
  spc_dtype dts[] = {SPC_FLOAT64, SPC_INT8, SPC_INT32, SPC_BFLOAT16};
  for (int i = 0; i < 4; i++) {
    char name[32];
    snprintf(name, sizeof(name), "dt%d", i);
    gather_case gc = {name, 4, {2, 3, 9, 4}, -2, {3, 2, 2, 2}, i % 2,
                      dts[i], 1, 3};
    run_case(&gc, 4);
  }
}
END_TEST

START_TEST(large_last_dim) {
  /* Big enough that the mover cuts moves across threads. */
  gather_case gc = {"large", 2, {64, 0}, -1, {40000, 39999, 40001}, 1,
                    SPC_FLOAT32, 0, 0};
  run_case(&gc, 3);
}
END_TEST

START_TEST(world_of_one) {
  gather_case gc = {"solo", 2, {3, 5}, 0, {3}, 0, SPC_FLOAT32, 0, 0};
  run_case(&gc, 1);
}
END_TEST

int main(void) {
  Suite *s = suite_create("allgather");
  TCase *tc = tcase_create("allgather");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, aligned_every_dim);
  tcase_add_test(tc, unaligned_with_and_without_sizes);
  tcase_add_test(tc, four_ranks_many_dtypes_async);
  tcase_add_test(tc, large_last_dim);
  tcase_add_test(tc, world_of_one);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
