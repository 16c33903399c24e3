/* The fast path's op descriptors as another rank may write them: every
 * member of a group can write anything in its own ring slots, so a
 * descriptor whose counts reach past what it holds (size lists longer
 * than SPK_FSEG_MAXLIST, dims outside the shape arrays) must make the op
 * take the daemon's path (which checks it in its own words), and must
 * never make a reader, or the planners it feeds, read past the
 * descriptor. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "client_fast_internal.h"

#define WORLD 2
#define STAGE 4096

static void *seg;
static spc_fast *f;

static void setup(void) {
  seg = calloc(1, spk_fseg_size(WORLD, STAGE));
  f = calloc(1, sizeof(*f));
  ck_assert(seg != NULL && f != NULL);
  spk_fseg_init(seg, WORLD, STAGE, 0);
  f->hdr = seg;
  f->size = spk_fseg_size(WORLD, STAGE);
  f->stage = STAGE;
}

static void teardown(void) {
  free(f);
  free(seg);
}

/* An all_gather of 4 float32 along dim 0 with a size list of 2 entries,
 * as rank r publishes it for op s. */
static spk_fseg_desc *publish(int r, uint64_t s) {
  spk_fseg_desc *d = &spc__fast_rank(f, r)->ring[s % SPK_FSEG_RING];
  memset(d, 0, sizeof(*d));
  d->seq = s;
  d->eligible = 1;
  d->op = SPK_OP_ALL_GATHER;
  d->dtype = SPC_FLOAT32;
  d->ndims = 1;
  d->in_ndim = d->out_ndim = 1;
  d->in_shape[0] = 4;
  d->out_shape[0] = 8;
  d->nsizes = 2;
  d->sizes[0] = d->sizes[1] = 4;
  return d;
}

static int all_of(uint64_t s) {
  int all = -1, repeat = -1;
  spc__fast_desc_read(f, WORLD, s, &all, &repeat);
  return all;
}

START_TEST(good_descriptors_run_here) {
  publish(0, 1);
  publish(1, 1);
  ck_assert_int_eq(all_of(1), 1);
}
END_TEST

/* Each count a rank may scribble, out of what the descriptor holds: the
 * op goes to the daemon. (Shapes' dims were refused already, through the
 * staging bound, but for an op read in place.) */
START_TEST(counts_past_the_descriptor_refused) {
  static const struct {
    size_t off;
    int32_t v;
  } bad[] = {
      {offsetof(spk_fseg_desc, nsizes), SPK_FSEG_MAXLIST + 1},
      {offsetof(spk_fseg_desc, nsizes), 1000},
      {offsetof(spk_fseg_desc, nsizes), -5},
      {offsetof(spk_fseg_desc, nsizes2), 1000},
      {offsetof(spk_fseg_desc, nsizes2), INT32_MIN},
      {offsetof(spk_fseg_desc, ndims), 3},
      {offsetof(spk_fseg_desc, ndims), -1},
      {offsetof(spk_fseg_desc, in_ndim), SPK_MAX_DIMS + 1},
      {offsetof(spk_fseg_desc, out_ndim), 0},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    uint64_t s = i + 1;
    publish(0, s);
    spk_fseg_desc *d = publish(1, s);
    memcpy((uint8_t *)d + bad[i].off, &bad[i].v, sizeof(int32_t));
    ck_assert_msg(all_of(s) == 0, "case %zu: value %d at offset %zu taken "
                  "for the fast path", i, bad[i].v, bad[i].off);
  }
  /* A good op after them still runs here. */
  publish(0, 100);
  publish(1, 100);
  ck_assert_int_eq(all_of(100), 1);
}
END_TEST

/* The planners' arguments of a descriptor never point past its lists:
 * a descriptor alone in its allocation, so that ASan sees any read past
 * it, with a list length of 1000, through the planners' own checks. */
START_TEST(args_stay_inside_the_descriptor) {
  spk_fseg_desc *d = malloc(sizeof(*d));
  ck_assert_ptr_nonnull(d);
  *d = *publish(0, 1);
  d->nsizes = 1000;
  d->nsizes2 = 1000;
  spk_op_args a;
  spk_err err;
  spc__fast_args_of(d, &a);
  ck_assert_int_lt(spk_args_check(&a, WORLD, 0, &err), 0);
  ck_assert(a.nsizes >= 0 && a.nsizes <= SPK_FSEG_MAXLIST);
  ck_assert(a.nsizes2 >= 0 && a.nsizes2 <= SPK_FSEG_MAXLIST);
  free(d);
}
END_TEST

int main(void) {
  Suite *s = suite_create("client_fast_desc");
  TCase *tc = tcase_create("desc");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, good_descriptors_run_here);
  tcase_add_test(tc, counts_past_the_descriptor_refused);
  tcase_add_test(tc, args_stay_inside_the_descriptor);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
