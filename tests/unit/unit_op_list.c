/* The op list (kernels/op_list.h) read back through its table: every row
 * has a name, a planner, a check and an output-shape rule, its number is
 * the wire value it always had, and the gradient pairs are consistent.
 * Expected numbers and names are spelled out here: they are the wire
 * protocol's and the Python package's, and must never move. */
#include <check.h>
#include <string.h>

#include "check_run.h"
#include "planner.h"

static const char *const wire_names[] = {
    [1] = "split",          [2] = "all_gather",    [3] = "all_to_all",
    [4] = "all_to_all_v",   [5] = "all_reduce",    [6] = "reduce_scatter",
    [7] = "zigzag_split",   [8] = "zigzag_gather", [9] = "packed_split",
    [10] = "packed_gather",
};
#define NWIRE ((int)(sizeof(wire_names) / sizeof(wire_names[0])))

START_TEST(test_every_row_complete) {
  ck_assert_ptr_null(spk_op_row_get(SPK_OP_NONE));
  ck_assert_ptr_null(spk_op_row_get(SPK_OP_COUNT));
  ck_assert_ptr_null(spk_op_row_get((spk_op_kind)-1));
  ck_assert_str_eq(spk_op_name(SPK_OP_COUNT), "unknown-op");
  for (int k = 1; k < SPK_OP_COUNT; k++) {
    const spk_op_row *r = spk_op_row_get((spk_op_kind)k);
    ck_assert_msg(r != NULL, "op %d: no row (kinds must run 1.. without "
                  "gaps)", k);
    ck_assert_int_eq(r->kind, k);
    ck_assert_msg(r->name != NULL && r->name[0] != '\0', "op %d: no name", k);
    ck_assert_str_eq(spk_op_name((spk_op_kind)k), r->name);
    ck_assert_msg(r->plan != NULL && r->check != NULL, "%s: no planner",
                  r->name);
    ck_assert_msg(r->shape >= SPK_SHAPE_SAME && r->shape <= SPK_SHAPE_CUSTOM,
                  "%s: shape rule %d", r->name, (int)r->shape);
    ck_assert_msg((r->shape == SPK_SHAPE_CUSTOM) == (r->out != NULL),
                  "%s: a CUSTOM shape rule, and only it, has spk_out_%s",
                  r->name, r->name);
    ck_assert_msg(r->reduces == 0 || r->reduces == 1, "%s", r->name);
    ck_assert_msg(r->shared_sizes == 0 || r->shared_sizes == 1, "%s",
                  r->name);
    for (int j = 1; j < k; j++)
      ck_assert_msg(strcmp(spk_op_name((spk_op_kind)j), r->name) != 0,
                    "ops %d and %d are both named %s", j, k, r->name);
  }
}
END_TEST

/* A kind's number is its wire value: rows may be added, never renumbered. */
START_TEST(test_numbers_are_the_wire_values) {
  ck_assert_int_ge(SPK_OP_COUNT, NWIRE);
  for (int k = 1; k < NWIRE; k++)
    ck_assert_str_eq(spk_op_name((spk_op_kind)k), wire_names[k]);
}
END_TEST

static int scale_inverse(int s) {
  return s == SPK_SCALE_UP ? SPK_SCALE_DOWN
                           : s == SPK_SCALE_DOWN ? SPK_SCALE_UP : s;
}

/* The gradient of the gradient is the forward op, with the inverse scale,
 * except where an op has a second gradient: all_gather's list gradient
 * is split (its own slice); reduce_scatter's is all_gather, whose other
 * gradient (the sum, a reduce_scatter) the client offers by name. */
START_TEST(test_gradient_pairs) {
  for (int k = 1; k < SPK_OP_COUNT; k++) {
    const spk_op_row *r = spk_op_row_get((spk_op_kind)k);
    ck_assert_msg(r->grad_scale >= SPK_SCALE_NONE &&
                      r->grad_scale <= SPK_SCALE_DOWN,
                  "%s: grad scale %d", r->name, r->grad_scale);
    if (r->grad == SPK_OP_NONE) {
      ck_assert_int_eq(r->grad_scale, SPK_SCALE_NONE);
      continue;
    }
    const spk_op_row *g = spk_op_row_get(r->grad);
    ck_assert_msg(g != NULL, "%s: gradient op %d is no row", r->name,
                  (int)r->grad);
    ck_assert_msg(!g->reduces || r->reduces, "%s: gradient %s reduces",
                  r->name, g->name);
    if (k == SPK_OP_REDUCE_SCATTER) {
      ck_assert_int_eq(r->grad, SPK_OP_ALL_GATHER);
      continue;
    }
    ck_assert_msg((int)g->grad == k, "%s: gradient %s has gradient %s", r->name,
                  g->name, spk_op_name(g->grad));
    ck_assert_msg(g->grad_scale == scale_inverse(r->grad_scale),
                  "%s scales its gradient by %d, %s by %d", r->name,
                  r->grad_scale, g->name, g->grad_scale);
  }
  /* The seeds' pairs, spelled out. */
  ck_assert_int_eq(spk_op_row_get(SPK_OP_SPLIT)->grad, SPK_OP_ALL_GATHER);
  ck_assert_int_eq(spk_op_row_get(SPK_OP_SPLIT)->grad_scale, SPK_SCALE_DOWN);
  ck_assert_int_eq(spk_op_row_get(SPK_OP_ZIGZAG_GATHER)->grad,
                   SPK_OP_ZIGZAG_SPLIT);
  ck_assert_int_eq(spk_op_row_get(SPK_OP_ZIGZAG_GATHER)->grad_scale,
                   SPK_SCALE_UP);
  ck_assert_int_eq(spk_op_row_get(SPK_OP_ALL_TO_ALL)->grad,
                   SPK_OP_ALL_TO_ALL);
  ck_assert_int_eq(spk_op_row_get(SPK_OP_ALL_REDUCE)->grad, SPK_OP_NONE);
}
END_TEST

/* The table-like rules give what their names say: in [12, 3] over 3
 * ranks along dim 0, rank 1. */
START_TEST(test_shape_rules) {
  static const int64_t want[] = {[SPK_SHAPE_SAME] = 12, [SPK_SHAPE_SPLIT] = 4,
                                 [SPK_SHAPE_GATHER] = 36,
                                 [SPK_SHAPE_DIVIDED] = 4};
  int seen[SPK_SHAPE_CUSTOM] = {0};
  for (int k = 1; k < SPK_OP_COUNT; k++) {
    const spk_op_row *r = spk_op_row_get((spk_op_kind)k);
    if (r->shape == SPK_SHAPE_CUSTOM || k == SPK_OP_PACKED_GATHER)
      continue; /* packed gather always has its sequence lengths */
    spk_op_args a = {.op = (spk_op_kind)k, .dtype = SPK_F32,
                     .in = {2, {12, 3}}, .ndims = 1, .dims = {0}};
    if (r->shape == SPK_SHAPE_SAME)
      a.ndims = 0; /* an op that keeps the shape takes no dim */
    spk_shape out;
    spk_err err;
    int rc = spk_out_shape(&a, 3, 1, &out, &err);
    ck_assert_msg(rc == SPK_OK, "%s: %s", r->name, err.msg);
    ck_assert_int_eq(out.ndim, 2);
    ck_assert_msg(out.dim[0] == want[r->shape] && out.dim[1] == 3,
                  "%s: out [%lld, %lld], want [%lld, 3]", r->name,
                  (long long)out.dim[0], (long long)out.dim[1],
                  (long long)want[r->shape]);
    seen[r->shape] = 1;
  }
  for (int s = 0; s < SPK_SHAPE_CUSTOM; s++)
    ck_assert_msg(seen[s], "no op tested shape rule %d", s);
}
END_TEST

static Suite *op_list_suite(void) {
  Suite *s = suite_create("op_list");
  TCase *tc = tcase_create("rows");
  tcase_add_test(tc, test_every_row_complete);
  tcase_add_test(tc, test_numbers_are_the_wire_values);
  tcase_add_test(tc, test_gradient_pairs);
  tcase_add_test(tc, test_shape_rules);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return spt_run_suite(op_list_suite());
}
