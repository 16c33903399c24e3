/* Tensors that overlap or sit misaligned, through a real daemon (issue
 * 13): an in-place all_to_all, an all_gather input outside its own slot, a
 * shifted output and two clients in one memfd are refused on every rank
 * with a message naming both tensors; the in-place layouts that are
 * defined (all_reduce, all_gather's and reduce_scatter's own slot) give
 * the right numbers; a misaligned offset is refused by the client and by
 * the daemon (whose UBSan build died of it), in the same words. After each
 * attack the group goes on and the daemon serves a fresh client. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check_run.h"
#include "client_internal.h"
#include "harness.h"

static spt_daemon daemon_;

static void setup(void) {
  ck_assert_int_eq(spt_daemon_start(&daemon_, NULL), 0);
}

/* The daemon lives (its sanitizer build too) and serves a fresh client. */
static void teardown(void) {
  spc_client *c = spt_connect(daemon_.socket);
  ck_assert_ptr_nonnull(c);
  spc_group *g;
  spc_buffer *b;
  spc_tensor in, out;
  int64_t s[1] = {4};
  ck_assert_int_eq(spc_group_join(c, "alive", 1, 0, &g), 0);
  ck_assert_int_eq(spc_buffer_alloc(c, 64, &b), 0);
  ck_assert_int_eq(spc_tensor_init(&in, b, 0, SPC_FLOAT32, 1, s), 0);
  ck_assert_int_eq(spc_tensor_init(&out, b, 16, SPC_FLOAT32, 1, s), 0);
  ck_assert_int_eq(spc_all_reduce(g, &in, &out, SPC_SUM), 0);
  spc_disconnect(c);
  int rc = spt_daemon_stop(&daemon_);
  if (rc != 0)
    spt_daemon_dump_log(&daemon_);
  ck_assert_int_eq(rc, 0);
}

/* rc must be SPC_EINVAL with both needles in the client's last error. */
static int refused(spc_client *c, int rank, int rc, const char *n1,
                   const char *n2) {
  const char *msg = spc_last_error(c);
  if (rc == SPC_EINVAL && strstr(msg, n1) && (n2 == NULL || strstr(msg, n2)))
    return 1;
  fprintf(stderr, "rank %d: got %d '%s', want EINVAL with '%s' and '%s'\n",
          rank, rc, msg, n1, n2 ? n2 : "");
  return 0;
}

typedef struct {
  spc_client *c;
  spc_group *g;
  spc_buffer *b;
} rank_env;

static int env_open(rank_env *e, const char *group, int world, int rank,
                    size_t bytes) {
  e->c = spt_connect(daemon_.socket);
  return e->c == NULL || spc_group_join(e->c, group, world, rank, &e->g) < 0 ||
         spc_buffer_alloc(e->c, bytes, &e->b) < 0;
}

static int32_t *at(const rank_env *e, uint64_t off) {
  return (int32_t *)((uint8_t *)spc_buffer_data(e->b) + off);
}

/* all_to_all [2, 1] -> [1, 2] with its output on its input: refused,
 * then run out of place; rank r's output j is rank j's element r. */
static int a2a_rank(int rank, int world, void *arg) {
  (void)arg;
  rank_env e;
  spc_tensor x, y, same;
  int64_t s[2] = {2, 1}, o[2] = {1, 2};
  if (env_open(&e, "a2a-in-place", world, rank, 64) ||
      spc_tensor_init(&x, e.b, 0, SPC_INT32, 2, s) < 0 ||
      spc_tensor_init(&same, e.b, 0, SPC_INT32, 2, o) < 0 ||
      spc_tensor_init(&y, e.b, 32, SPC_INT32, 2, o) < 0)
    return 1;
  at(&e, 0)[0] = 10 * rank, at(&e, 0)[1] = 10 * rank + 1;
  int ok = refused(e.c, rank,
                   spc_all_to_all(e.g, &x, rank == 0 ? &same : &y, 0, 1, 0),
                   "all_to_all: rank 0 input (buffer", "bytes [0, 8)) and "
                   "rank 0 output");
  ok = ok && strstr(spc_last_error(e.c), "does not run in place");
  ok = ok && at(&e, 0)[0] == 10 * rank; /* untouched */
  ok = ok && spc_all_to_all(e.g, &x, &y, 0, 1, 0) == 0 &&
       at(&e, 32)[0] == rank && at(&e, 32)[1] == 10 + rank;
  spc_disconnect(e.c);
  return !ok;
}

START_TEST(in_place_all_to_all) {
  ck_assert_int_eq(spt_run_ranks(2, a2a_rank, NULL, 60), 0);
}
END_TEST

/* all_gather of 3 ranks, 2 ints each: rank 1's input on slot 0 of its
 * output is refused; on its own slot (as NCCL allows) it runs in place. */
static int gather_rank(int rank, int world, void *arg) {
  (void)arg;
  rank_env e;
  spc_tensor in, out, wrong;
  int64_t s1[1] = {2}, s2[1] = {6};
  if (env_open(&e, "gather-slot", world, rank, 64) ||
      spc_tensor_init(&out, e.b, 0, SPC_INT32, 1, s2) < 0 ||
      spc_tensor_init(&in, e.b, (uint64_t)rank * 8, SPC_INT32, 1, s1) < 0 ||
      spc_tensor_init(&wrong, e.b, 0, SPC_INT32, 1, s1) < 0)
    return 1;
  int ok = refused(e.c, rank,
                   spc_all_gather(e.g, rank == 1 ? &wrong : &in, &out, 0, NULL),
                   "all_gather: rank 1 input (buffer", "bytes [0, 8)) and "
                   "rank 1 output");
  ok = ok && strstr(spc_last_error(e.c), "bytes [0, 24)) share memory");
  spt_fill(at(&e, (uint64_t)rank * 8), SPC_INT32, 2, 5, rank);
  ok = ok && spc_all_gather(e.g, &in, &out, 0, NULL) == 0;
  int64_t sizes[3] = {2, 2, 2};
  ok = ok && spt_check_gather(at(&e, 0), SPC_INT32, 1, s2, 0, sizes, world, 5,
                              rank) == 0;
  spc_disconnect(e.c);
  return !ok;
}

START_TEST(all_gather_own_slot) {
  ck_assert_int_eq(spt_run_ranks(3, gather_rank, NULL, 60), 0);
}
END_TEST

/* all_reduce: an output one element past its input is refused; the same
 * bytes (in place) sum right. */
static int reduce_rank(int rank, int world, void *arg) {
  (void)arg;
  rank_env e;
  spc_tensor x, shifted;
  int64_t s[1] = {5};
  if (env_open(&e, "reduce-shift", world, rank, 64) ||
      spc_tensor_init(&x, e.b, 0, SPC_INT32, 1, s) < 0 ||
      spc_tensor_init(&shifted, e.b, 4, SPC_INT32, 1, s) < 0)
    return 1;
  for (int i = 0; i < 5; i++)
    at(&e, 0)[i] = 100 * rank + i;
  /* rank 1 runs in place, which is fine; rank 0's output is shifted */
  int ok = refused(e.c, rank,
                   spc_all_reduce(e.g, &x, rank == 0 ? &shifted : &x, SPC_SUM),
                   "all_reduce: rank 0 input (buffer", "bytes [0, 20)) and "
                   "rank 0 output");
  ok = ok && strstr(spc_last_error(e.c), "bytes [4, 24)) share memory");
  ok = ok && spc_all_reduce(e.g, &x, &x, SPC_SUM) == 0;
  for (int i = 0; ok && i < 5; i++)
    ok = at(&e, 0)[i] == 100 * (0 + 1) + 2 * i; /* ranks 0 and 1 */
  if (!ok)
    fprintf(stderr, "rank %d: sums %d %d %d %d %d\n", rank, at(&e, 0)[0],
            at(&e, 0)[1], at(&e, 0)[2], at(&e, 0)[3], at(&e, 0)[4]);
  spc_disconnect(e.c);
  return !ok;
}

START_TEST(all_reduce_shifted_and_in_place) {
  ck_assert_int_eq(spt_run_ranks(2, reduce_rank, NULL, 60), 0);
}
END_TEST

/* reduce_scatter in place: rank r's output is its own slot (rows 2r,
 * 2r + 1) of its input. */
static int rs_rank(int rank, int world, void *arg) {
  (void)arg;
  rank_env e;
  spc_tensor in, out;
  int64_t s[1] = {4}, o[1] = {2};
  if (env_open(&e, "rs-in-place", world, rank, 64) ||
      spc_tensor_init(&in, e.b, 0, SPC_INT32, 1, s) < 0 ||
      spc_tensor_init(&out, e.b, (uint64_t)rank * 8, SPC_INT32, 1, o) < 0)
    return 1;
  for (int i = 0; i < 4; i++)
    at(&e, 0)[i] = 10 * rank + i;
  int ok = spc_reduce_scatter(e.g, &in, &out, 0, NULL) == 0;
  for (int i = 0; ok && i < 2; i++)
    ok = at(&e, (uint64_t)rank * 8)[i] == 10 + 2 * (2 * rank + i);
  if (!ok)
    fprintf(stderr, "rank %d: '%s'\n", rank, spc_last_error(e.c));
  spc_disconnect(e.c);
  return !ok;
}

START_TEST(reduce_scatter_own_slot) {
  ck_assert_int_eq(spt_run_ranks(2, rs_rank, NULL, 60), 0);
}
END_TEST

/* One memfd, made before the ranks fork, registered by both: two buffer
 * ids of one memory. Rank 1's input on rank 0's output is refused. */
static int shared_fd = -1;

static int shared_rank(int rank, int world, void *arg) {
  (void)arg;
  spc_client *c = spt_connect(daemon_.socket);
  spc_group *g;
  if (c == NULL || spc_group_join(c, "one-memfd", world, rank, &g) < 0)
    return 1;
  Spcoll__BufRegister reg = SPCOLL__BUF_REGISTER__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT, *reply = NULL;
  reg.size = 4096;
  f.body_case = SPCOLL__FRAME__BODY_BUF_REGISTER;
  f.buf_register = &reg;
  if (spc__call(c, &f, shared_fd, &reply) < 0 ||
      reply->body_case != SPCOLL__FRAME__BODY_BUF_REGISTERED)
    return 1;
  void *data = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, shared_fd,
                    0);
  if (data == MAP_FAILED)
    return 1;
  struct spc_buffer b = {.client = c, .id = reply->buf_registered->buffer_id,
                         .data = data, .size = 4096};
  spcoll__frame__free_unpacked(reply, NULL);
  spc_tensor in, out;
  int64_t s1[1] = {4}, s2[1] = {8};
  /* rank 0: input [0, 16), output [64, 96); rank 1: input [64, 80) */
  uint64_t in_off = rank == 0 ? 0 : 64;
  if (spc_tensor_init(&in, &b, in_off, SPC_INT32, 1, s1) < 0 ||
      spc_tensor_init(&out, &b, 128 + 64 * (uint64_t)rank, SPC_INT32, 1,
                      s2) < 0)
    return 1;
  spc_tensor out0 = out;
  if (rank == 0)
    out0.offset = 64;
  int ok = refused(c, rank, spc_all_gather(g, &in, &out0, 0, NULL),
                   "rank 1 input (buffer", "bytes [64, 80)) and rank 0 "
                   "output (buffer");
  ok = ok && strstr(spc_last_error(c), "bytes [64, 96)) share memory");
  /* apart in the one memfd: fine */
  ok = ok && spc_all_gather(g, &in, &out, 0, NULL) == 0;
  munmap(data, 4096);
  spc_disconnect(c);
  return !ok;
}

START_TEST(two_clients_one_memfd) {
  shared_fd = memfd_create("shared", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ck_assert_int_ge(shared_fd, 0);
  ck_assert_int_eq(ftruncate(shared_fd, 4096), 0);
  char zero[4096] = {0}; /* populated: the daemon maps no sparse file */
  ck_assert_int_eq(pwrite(shared_fd, zero, sizeof(zero), 0), 4096);
  ck_assert_int_eq(fcntl(shared_fd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  ck_assert_int_eq(spt_run_ranks(2, shared_rank, NULL, 60), 0);
  close(shared_fd);
}
END_TEST

/* A float32 tensor 2 bytes into its buffer: spc_tensor_init refuses it;
 * made by hand it reaches the daemon, which fails the op on every rank
 * with the same words (its UBSan build died of it in a reduction). */
static int misaligned_rank(int rank, int world, void *arg) {
  (void)arg;
  rank_env e;
  spc_tensor in, out, bad;
  int64_t s[1] = {4};
  if (env_open(&e, "misaligned", world, rank, 64) ||
      spc_tensor_init(&in, e.b, 0, SPC_FLOAT32, 1, s) < 0 ||
      spc_tensor_init(&out, e.b, 32, SPC_FLOAT32, 1, s) < 0)
    return 1;
  const char *words = "tensor offset 2 is not a multiple of 4, the size of a "
                      "float32 element";
  int ok = refused(e.c, rank, spc_tensor_init(&bad, e.b, 2, SPC_FLOAT32, 1, s),
                   words, NULL);
  bad = in;
  if (rank == 1)
    bad.offset = 2;
  ok = ok && refused(e.c, rank, spc_all_reduce(e.g, &bad, &out, SPC_SUM),
                     "rank 1: input tensor offset 2", words);
  spc_tensor bad_out = out;
  if (rank == 0)
    bad_out.offset = 34;
  ok = ok && refused(e.c, rank, spc_all_reduce(e.g, &in, &bad_out, SPC_SUM),
                     "rank 0: output tensor offset 34", "float32");
  ok = ok && spc_all_reduce(e.g, &in, &out, SPC_SUM) == 0;
  spc_disconnect(e.c);
  return !ok;
}

START_TEST(misaligned_offset) {
  ck_assert_int_eq(spt_run_ranks(2, misaligned_rank, NULL, 60), 0);
}
END_TEST

/* Two daemons, rank r on node r: node 1 alone sees that rank 1 runs
 * all_to_all in place. Node 0 would run the op and wait for rank 1's
 * bytes forever; it hears the refusal and fails rank 0 too. */
static spt_nodes nodes_;

static int nodes_rank(int rank, int world, void *arg) {
  (void)arg;
  spc_client *c = spt_connect(nodes_.d[rank].socket);
  spc_group *g;
  spc_buffer *b;
  spc_tensor x, y, same;
  int64_t s[2] = {2, 1}, o[2] = {1, 2};
  if (c == NULL || spc_group_join(c, "a2a-nodes", world, rank, &g) < 0 ||
      spc_buffer_alloc(c, 64, &b) < 0 ||
      spc_tensor_init(&x, b, 0, SPC_INT32, 2, s) < 0 ||
      spc_tensor_init(&same, b, 0, SPC_INT32, 2, o) < 0 ||
      spc_tensor_init(&y, b, 32, SPC_INT32, 2, o) < 0)
    return 1;
  int rc = spc_all_to_all(g, &x, rank == 1 ? &same : &y, 0, 1, 0);
  int ok = refused(c, rank, rc, "all_to_all: rank 1 input (buffer",
                   "share memory; this op does not run in place");
  spc_disconnect(c);
  return !ok;
}

START_TEST(in_place_across_nodes) {
  ck_assert_int_eq(spt_nodes_start(&nodes_, 2, NULL), 0);
  int failed = spt_run_ranks(2, nodes_rank, NULL, 60);
  ck_assert_int_eq(spt_nodes_stop(&nodes_), 0);
  ck_assert_int_eq(failed, 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("tensors");
  TCase *tc = tcase_create("tensors");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, in_place_all_to_all);
  tcase_add_test(tc, all_gather_own_slot);
  tcase_add_test(tc, all_reduce_shifted_and_in_place);
  tcase_add_test(tc, reduce_scatter_own_slot);
  tcase_add_test(tc, two_clients_one_memfd);
  tcase_add_test(tc, misaligned_offset);
  suite_add_tcase(s, tc);
  TCase *tn = tcase_create("nodes");
  tcase_set_timeout(tn, 120);
  tcase_add_test(tn, in_place_across_nodes);
  suite_add_tcase(s, tn);
  return spt_run_suite(s);
}
