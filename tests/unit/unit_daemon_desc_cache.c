/* The CUDA mover's kept descriptors (daemon/gpu/gpu_desc_cache.c), without
 * a GPU: the bookkeeping alone. A kept copy serves another op only once
 * the job that uploaded it is done, and never after that job failed; held
 * copies are never evicted, idle ones go least recently used first; large
 * descriptor blocks are not kept. (The device frees fail without a GPU and
 * are ignored, as the cache ignores a failed free.) The GPU suites run the
 * cache for real on spcsim and on hardware. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"

#ifdef SPC_HAVE_CUDA
#include "gpu.h"

static spd_gpu gpu_;

static spd_desc_entry *keep(int tag, size_t size) {
  uint8_t *b = calloc(1, size);
  memcpy(b, &tag, sizeof(tag));
  uint64_t h;
  ck_assert_ptr_null(spd_gpu_desc_find(&gpu_, 0, b, size, &h));
  spd_desc_entry *e = spd_gpu_desc_keep(&gpu_, 0, (void *)(uintptr_t)(0x1000 + tag),
                                        b, size, h, 0);
  free(b);
  return e;
}

static spd_desc_entry *find(int tag, size_t size) {
  uint8_t *b = calloc(1, size);
  memcpy(b, &tag, sizeof(tag));
  uint64_t h;
  spd_desc_entry *e = spd_gpu_desc_find(&gpu_, 0, b, size, &h);
  free(b);
  return e;
}

START_TEST(served_once_uploaded) {
  spd_desc_entry *e = keep(1, 256);
  ck_assert_ptr_nonnull(e);
  ck_assert_ptr_null(find(1, 256)); /* the upload may not have run yet */
  spd_gpu_desc_put(e, 1);
  spd_desc_entry *again = find(1, 256);
  ck_assert_ptr_eq(again, e);
  ck_assert_ptr_eq(spd_gpu_desc_dev(again), (void *)(uintptr_t)0x1001);
  spd_gpu_desc_put(again, 1);
  ck_assert_ptr_null(find(2, 256)); /* other bytes */
  ck_assert_ptr_null(find(1, 512)); /* another size */
  spd_gpu_desc_cache_free(&gpu_);
}
END_TEST

START_TEST(never_served_after_a_failed_upload) {
  spd_desc_entry *e = keep(3, 128);
  spd_gpu_desc_put(e, 0);
  ck_assert_ptr_null(find(3, 128));
  spd_gpu_desc_cache_free(&gpu_);
}
END_TEST

START_TEST(held_kept_idle_evicted_oldest_first) {
  /* 64 entries fill the cache; entry 0 stays held, the rest go idle in
   * order, 1 touched again last. */
  spd_desc_entry *held = keep(0, 64);
  for (int i = 1; i < 64; i++) {
    spd_desc_entry *e = keep(i, 64);
    ck_assert_ptr_nonnull(e);
    spd_gpu_desc_put(e, 1);
  }
  spd_gpu_desc_put(find(1, 64), 1);
  /* Two more: the two least recently used idle ones (2, 3) go. */
  spd_gpu_desc_put(keep(100, 64), 1);
  spd_gpu_desc_put(keep(101, 64), 1);
  ck_assert_ptr_null(find(2, 64));
  ck_assert_ptr_null(find(3, 64));
  spd_desc_entry *one = find(1, 64);
  ck_assert_ptr_nonnull(one);
  spd_gpu_desc_put(one, 1);
  spd_desc_entry *four = find(4, 64);
  ck_assert_ptr_nonnull(four);
  spd_gpu_desc_put(four, 1);
  spd_gpu_desc_put(held, 1); /* uploaded: served from now on */
  spd_desc_entry *zero = find(0, 64);
  ck_assert_ptr_eq(zero, held);
  spd_gpu_desc_put(zero, 1);
  spd_gpu_desc_cache_free(&gpu_);
}
END_TEST

START_TEST(full_of_held_entries_keeps_nothing) {
  spd_desc_entry *e[64];
  for (int i = 0; i < 64; i++)
    ck_assert_ptr_nonnull(e[i] = keep(i, 32));
  ck_assert_ptr_null(keep(64, 32)); /* the caller frees its own block */
  for (int i = 0; i < 64; i++)
    spd_gpu_desc_put(e[i], 1);
  spd_gpu_desc_cache_free(&gpu_);
}
END_TEST

START_TEST(large_blocks_not_kept) {
  ck_assert_ptr_null(keep(7, (size_t)512 << 10));
  spd_gpu_desc_cache_free(&gpu_);
}
END_TEST

int main(void) {
  Suite *s = suite_create("daemon_desc_cache");
  TCase *tc = tcase_create("desc_cache");
  tcase_add_test(tc, served_once_uploaded);
  tcase_add_test(tc, never_served_after_a_failed_upload);
  tcase_add_test(tc, held_kept_idle_evicted_oldest_first);
  tcase_add_test(tc, full_of_held_entries_keeps_nothing);
  tcase_add_test(tc, large_blocks_not_kept);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}

#else

int main(void) {
  printf("skipped: built without CUDA (no descriptor cache)\n");
  return 77;
}

#endif
