/* Registered host buffers: the memfd checks and the bounds check every
 * tensor reference goes through. */
#include <check.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <linux/magic.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "check_run.h"
#include "buffer.h"

static spd_ctx ctx;

static int memfd_of(size_t size, unsigned seals) {
  int fd = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
  char zero[4096] = {0};
  for (size_t off = 0; off < size; off += sizeof(zero)) /* populated */
    ck_assert_int_eq(pwrite(fd, zero, size - off < sizeof(zero) ? size - off
                                                                : sizeof(zero),
                            (off_t)off) > 0, 1);
  if (seals)
    ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
  return fd;
}

START_TEST(bounds) {
  spd_buffer b = {.id = 3, .size = 100};
  spk_err err;
  ck_assert_int_eq(spd_buffer_check_range(&b, 0, 100, "input", &err), 0);
  ck_assert_int_eq(spd_buffer_check_range(&b, 100, 0, "input", &err), 0);
  ck_assert_int_eq(spd_buffer_check_range(&b, 60, 40, "input", &err), 0);
  ck_assert_int_eq(spd_buffer_check_range(&b, 61, 40, "output", &err),
                   SPK_EINVAL);
  ck_assert_str_eq(err.msg, "output tensor (offset 61, 40 bytes) reaches "
                            "outside buffer 3 of 100 bytes");
  ck_assert_int_eq(spd_buffer_check_range(&b, 101, 0, "input", &err),
                   SPK_EINVAL);
  /* offset + bytes would wrap: must still be refused */
  ck_assert_int_eq(spd_buffer_check_range(&b, 8, UINT64_MAX - 4, "input",
                                          &err), SPK_EINVAL);
  ck_assert_int_eq(spd_buffer_check_range(&b, UINT64_MAX, 2, "input", &err),
                   SPK_EINVAL);
}
END_TEST

START_TEST(map_checks_seal_and_size) {
  spd_buffer *b;
  spk_err err;
  ctx.log.level = SPD_LOG_ERROR;
  ck_assert_int_eq(spd_buffer_map(&ctx, memfd_of(64, 0), 64, &b, &err),
                   SPK_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "not sealed with F_SEAL_SHRINK"));
  ck_assert_int_eq(spd_buffer_map(&ctx, memfd_of(64, F_SEAL_SHRINK), 65, &b,
                                  &err), SPK_EINVAL);
  ck_assert_ptr_nonnull(strstr(err.msg, "size 65 does not match"));
  ck_assert_int_eq(spd_buffer_map(&ctx, memfd_of(64, F_SEAL_SHRINK), 0, &b,
                                  &err), SPK_EINVAL);
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  ck_assert_int_eq(spd_buffer_map(&ctx, p[0], 64, &b, &err), SPK_EINVAL);
  close(p[1]);
  /* A regular file elsewhere than shmem (here: the build directory's
   * filesystem, when it is not tmpfs) is refused by its filesystem. */
  char path[] = "spcoll-buffer-test-XXXXXX";
  int f = mkstemp(path);
  ck_assert_int_ge(f, 0);
  unlink(path);
  ck_assert_int_eq(ftruncate(f, 64), 0);
  struct statfs fs;
  ck_assert_int_eq(fstatfs(f, &fs), 0);
  if (fs.f_type != TMPFS_MAGIC) {
    ck_assert_int_eq(spd_buffer_map(&ctx, f, 64, &b, &err), SPK_EINVAL);
    ck_assert_ptr_nonnull(strstr(err.msg, "not a shmem memfd"));
  } else {
    close(f);
  }
  /* A sparse file: the daemon would pay for the pages it faults in. */
  int sparse = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ck_assert_int_ge(sparse, 0);
  ck_assert_int_eq(ftruncate(sparse, 1 << 20), 0);
  char page[4096] = {1};
  ck_assert_int_eq(pwrite(sparse, page, sizeof(page), 0), 4096);
  ck_assert_int_eq(fcntl(sparse, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  ck_assert_int_eq(spd_buffer_map(&ctx, sparse, 1 << 20, &b, &err),
                   SPK_EINVAL);
  ck_assert_msg(strstr(err.msg, "pages from byte 4096 of 1048576"), "%s",
                err.msg);
  ck_assert_int_eq(spd_buffer_map(&ctx, memfd_of(64, F_SEAL_SHRINK), 64, &b,
                                  &err), SPK_OK);
  ck_assert_int_eq(b->size, 64);
  memset(b->base, 7, 64); /* mapped writable */
  spd_buffer_ref(b);
  spd_buffer_unref(&ctx, b);
  ck_assert_int_eq(b->refs, 1);
  spd_buffer_unref(&ctx, b);
}
END_TEST

/* A 0-byte buffer is refused for its size, in those words, not as a
 * mismatch between two equal sizes. */
START_TEST(zero_size_named) {
  spd_buffer *b;
  spk_err err;
  ctx.log.level = SPD_LOG_ERROR;
  ck_assert_int_eq(spd_buffer_map(&ctx, memfd_of(0, F_SEAL_SHRINK), 0, &b,
                                  &err), SPK_EINVAL);
  ck_assert_str_eq(err.msg, "buffer size must be greater than 0, got 0");
}
END_TEST

/* Pages fallocated but never written are refused like holes, and the
 * message says what does populate them, as docs/security.md does:
 * fallocate alone does not. */
START_TEST(fallocated_pages_refused_as_documented) {
  spd_buffer *b;
  spk_err err;
  ctx.log.level = SPD_LOG_ERROR;
  int fd = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(fallocate(fd, 0, 0, 1 << 16), 0);
  ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  ck_assert_int_eq(spd_buffer_map(&ctx, fd, 1 << 16, &b, &err), SPK_EINVAL);
  ck_assert_msg(strstr(err.msg, "pages from byte 0 of 65536"), "%s",
                err.msg);
  ck_assert_msg(strstr(err.msg, "MADV_POPULATE_WRITE") &&
                    strstr(err.msg, "fallocate alone does not"),
                "%s", err.msg);
}
END_TEST

int main(void) {
  Suite *s = suite_create("daemon_buffer");
  TCase *tc = tcase_create("buffer");
  tcase_add_test(tc, bounds);
  tcase_add_test(tc, map_checks_seal_and_size);
  tcase_add_test(tc, zero_size_named);
  tcase_add_test(tc, fallocated_pages_refused_as_documented);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
