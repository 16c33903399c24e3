/* Every bad input of the foundation issue: each gets a clear error, the
 * daemon keeps serving everyone else, and nothing leaks (fd count, and
 * LeakSanitizer at daemon exit under check-asan). */
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check_run.h"
#include "client_internal.h"
#include "harness.h"

static spt_daemon daemon_;
static int fds_before;

static void setup(void) {
  ck_assert_int_eq(spt_daemon_start(&daemon_, NULL), 0);
  /* The readiness probe's connection closes asynchronously: wait until the
   * count holds still before taking it as the baseline. */
  int same = 0, prev = -1;
  for (int i = 0; i < 200 && same < 5; i++) {
    fds_before = spt_daemon_fds(&daemon_);
    same = fds_before == prev ? same + 1 : 0;
    prev = fds_before;
    usleep(10000);
  }
}

/* The daemon must still serve a well-behaved client. */
static void assert_daemon_serves(void) {
  spc_client *c = spt_connect(daemon_.socket);
  ck_assert_ptr_nonnull(c);
  spc_group *g;
  ck_assert_int_eq(spc_group_join(c, "alive", 1, 0, &g), 0);
  spc_buffer *b;
  ck_assert_int_eq(spc_buffer_alloc(c, 64, &b), 0);
  int64_t shape[1] = {4};
  spc_tensor in, out;
  ck_assert_int_eq(spc_tensor_init(&in, b, 0, SPC_INT32, 1, shape), 0);
  ck_assert_int_eq(spc_tensor_init(&out, b, 16, SPC_INT32, 1, shape), 0);
  int32_t *p = spc_buffer_data(b);
  for (int i = 0; i < 4; i++)
    p[i] = 10 + i;
  ck_assert_int_eq(spc_all_gather(g, &in, &out, 0, NULL), 0);
  ck_assert_int_eq(p[4 + 3], 13);
  ck_assert_int_eq(spc_buffer_free(b), 0);
  ck_assert_int_eq(spc_group_leave(g), 0);
  spc_disconnect(c);
}

static void teardown(void) {
  assert_daemon_serves();
  /* Closed clients are reaped on the loop; give it a moment. */
  int fds = -1;
  for (int i = 0; i < 100 && fds != fds_before; i++) {
    fds = spt_daemon_fds(&daemon_);
    usleep(10000);
  }
  ck_assert_int_eq(fds, fds_before);
  ck_assert_int_eq(spt_daemon_stop(&daemon_), 0);
}

/* Expect an Error frame of `status` whose message contains `needle`. */
static void expect_error(int fd, int status, const char *needle) {
  Spcoll__Frame *f = spt_raw_recv(fd, 10);
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(f->body_case, SPCOLL__FRAME__BODY_ERROR);
  ck_assert_int_eq(-(int)f->error->status, status);
  ck_assert_msg(strstr(f->error->message, needle) != NULL,
                "message '%s' lacks '%s'", f->error->message, needle);
  spcoll__frame__free_unpacked(f, NULL);
}

START_TEST(malformed_protobuf) {
  int fd = spt_raw_connect(daemon_.socket);
  uint8_t bad[] = {6, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  ck_assert_int_eq(spt_raw_send_bytes(fd, bad, sizeof(bad)), 0);
  expect_error(fd, SPC_EPROTOCOL, "not a valid spcoll.Frame");
  ck_assert(spt_raw_closed(fd, 10));
  close(fd);
}
END_TEST

START_TEST(frame_over_cap) {
  int fd = spt_raw_connect(daemon_.socket);
  uint32_t n = SPF_FRAME_MAX + 1;
  uint8_t hdr[4] = {n & 0xff, (n >> 8) & 0xff, (n >> 16) & 0xff, n >> 24};
  ck_assert_int_eq(spt_raw_send_bytes(fd, hdr, 4), 0);
  expect_error(fd, SPC_EPROTOCOL, "outside 1..1048576");
  ck_assert(spt_raw_closed(fd, 10));
  close(fd);
  fd = spt_raw_connect(daemon_.socket);
  uint8_t zero[4] = {0, 0, 0, 0};
  ck_assert_int_eq(spt_raw_send_bytes(fd, zero, 4), 0);
  expect_error(fd, SPC_EPROTOCOL, "frame length 0");
  close(fd);
}
END_TEST

START_TEST(unknown_message_type) {
  int fd = spt_raw_connect(daemon_.socket);
  ck_assert_int_eq(spt_raw_hello(fd), 0);
  /* field 99 (not in the oneof), varint 1: decodes, but names nothing */
  uint8_t unk[] = {3, 0, 0, 0, 0x98, 0x06, 0x01};
  ck_assert_int_eq(spt_raw_send_bytes(fd, unk, sizeof(unk)), 0);
  expect_error(fd, SPC_EPROTOCOL, "unknown or unexpected message type");
  ck_assert(spt_raw_closed(fd, 10));
  close(fd);
}
END_TEST

START_TEST(request_before_hello) {
  int fd = spt_raw_connect(daemon_.socket);
  Spcoll__GroupJoin j = SPCOLL__GROUP_JOIN__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  j.name = "g", j.world_size = 1, j.rank = 0;
  f.id = 5, f.body_case = SPCOLL__FRAME__BODY_GROUP_JOIN, f.group_join = &j;
  ck_assert_int_eq(spt_raw_send(fd, &f), 0);
  expect_error(fd, SPC_EPROTOCOL, "first frame must be hello, got group_join");
  ck_assert(spt_raw_closed(fd, 10));
  close(fd);
}
END_TEST

START_TEST(version_mismatch) {
  int fd = spt_raw_connect(daemon_.socket);
  Spcoll__Hello h = SPCOLL__HELLO__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  h.protocol_version = 99;
  f.id = 1, f.body_case = SPCOLL__FRAME__BODY_HELLO, f.hello = &h;
  ck_assert_int_eq(spt_raw_send(fd, &f), 0);
  expect_error(fd, SPC_EVERSION, "client speaks 99, daemon speaks 1");
  ck_assert(spt_raw_closed(fd, 10));
  close(fd);
}
END_TEST

START_TEST(join_bad_rank) {
  spc_client *c = spt_connect(daemon_.socket);
  spc_group *g;
  ck_assert_int_eq(spc_group_join(c, "g", 2, 2, &g), SPC_EINVAL);
  ck_assert_ptr_nonnull(strstr(spc_last_error(c), "rank 2 outside 0..1"));
  ck_assert_int_eq(spc_group_join(c, "g", 2, -1, &g), SPC_EINVAL);
  ck_assert_int_eq(spc_group_join(c, "g", 0, 0, &g), SPC_EINVAL);
  ck_assert_ptr_nonnull(strstr(spc_last_error(c), "world_size 0"));
  spc_disconnect(c);
}
END_TEST

START_TEST(world_size_conflict) {
  int fd = spt_raw_join_pending(daemon_.socket, "ws", 0);
  ck_assert_int_ge(fd, 0);
  spc_client *c = spt_connect(daemon_.socket);
  spc_group *g;
  ck_assert_int_eq(spc_group_join(c, "ws", 3, 1, &g), SPC_ECONFLICT);
  ck_assert_ptr_nonnull(strstr(spc_last_error(c), "world size 2, not 3"));
  ck_assert_int_eq(spc_group_join(c, "ws", 2, 1, &g), 0);
  Spcoll__Frame *r = spt_raw_recv(fd, 10);
  ck_assert_ptr_nonnull(r);
  ck_assert_int_eq(r->body_case, SPCOLL__FRAME__BODY_GROUP_JOINED);
  spcoll__frame__free_unpacked(r, NULL);
  close(fd);
  spc_disconnect(c);
}
END_TEST

START_TEST(rank_taken) {
  int fd = spt_raw_join_pending(daemon_.socket, "taken", 0);
  ck_assert_int_ge(fd, 0);
  spc_client *c = spt_connect(daemon_.socket);
  spc_group *g;
  ck_assert_int_eq(spc_group_join(c, "taken", 2, 0, &g), SPC_ECONFLICT);
  ck_assert_ptr_nonnull(strstr(spc_last_error(c), "rank 0 of group 'taken' "
                                                  "is already joined"));
  close(fd);
  spc_disconnect(c);
}
END_TEST

typedef struct {
  const char *group;
  int bad_rank;
} bad_case;

/* One rank names bytes outside its buffer: the op fails on every rank with
 * a message naming that rank, and the group stays usable. */
static int outside_rank(int rank, int world, void *arg) {
  const bad_case *bc = arg;
  spc_client *c = spt_connect(daemon_.socket);
  spc_group *g;
  spc_buffer *b;
  spc_tensor in, out;
  int64_t s1[1] = {4}, s2[1] = {8};
  if (spc_group_join(c, bc->group, world, rank, &g) < 0 ||
      spc_buffer_alloc(c, 64, &b) < 0 ||
      spc_tensor_init(&in, b, 0, SPC_INT32, 1, s1) < 0 ||
      spc_tensor_init(&out, b, 16, SPC_INT32, 1, s2) < 0)
    return 1;
  spc_tensor bad = in;
  if (rank == bc->bad_rank)
    bad.offset = 60; /* 16 bytes at 60 in a 64-byte buffer */
  int rc = spc_all_gather(g, &bad, &out, 0, NULL);
  if (rc != SPC_EINVAL || !strstr(spc_last_error(c), "rank 1: input tensor "
                                  "(offset 60, 16 bytes) reaches outside")) {
    fprintf(stderr, "rank %d: got %d '%s'\n", rank, rc, spc_last_error(c));
    return 1;
  }
  rc = spc_all_gather(g, &in, &out, 0, NULL);
  if (rc != 0)
    fprintf(stderr, "rank %d: retry: %s\n", rank, spc_last_error(c));
  spc_disconnect(c);
  return rc != 0;
}

START_TEST(tensor_outside_buffer) {
  bad_case bc = {"outside", 1};
  ck_assert_int_eq(spt_run_ranks(2, outside_rank, &bc, 60), 0);
}
END_TEST

START_TEST(foreign_buffer_id) {
  spc_client *a = spt_connect(daemon_.socket), *b = spt_connect(daemon_.socket);
  spc_buffer *ba, *bb;
  spc_group *g;
  ck_assert_int_eq(spc_buffer_alloc(a, 64, &ba), 0);
  ck_assert_int_eq(spc_buffer_alloc(b, 64, &bb), 0);
  ck_assert_int_eq(spc_group_join(b, "foreign", 1, 0, &g), 0);
  struct spc_buffer forged = *bb;
  forged.id = ba->id; /* a's buffer, named by b */
  int64_t s[1] = {4};
  spc_tensor in, out;
  ck_assert_int_eq(spc_tensor_init(&in, &forged, 0, SPC_INT32, 1, s), 0);
  ck_assert_int_eq(spc_tensor_init(&out, bb, 16, SPC_INT32, 1, s), 0);
  ck_assert_int_eq(spc_all_gather(g, &in, &out, 0, NULL), SPC_ENOTFOUND);
  ck_assert_msg(strstr(spc_last_error(b), "not registered by this client"),
                "%s", spc_last_error(b));
  spc_disconnect(a);
  spc_disconnect(b);
}
END_TEST

/* Register `fd` claiming `size` bytes through the client's transport. */
static int register_fd(spc_client *c, int fd, uint64_t size) {
  Spcoll__BufRegister reg = SPCOLL__BUF_REGISTER__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  reg.size = size;
  f.body_case = SPCOLL__FRAME__BODY_BUF_REGISTER;
  f.buf_register = &reg;
  Spcoll__Frame *reply = NULL;
  int rc = spc__call(c, &f, fd, &reply);
  if (reply)
    spcoll__frame__free_unpacked(reply, NULL);
  return rc;
}

static int memfd_sized(size_t size, unsigned seals) {
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

START_TEST(bad_buffer_fds) {
  spc_client *c = spt_connect(daemon_.socket);
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  ck_assert_int_eq(register_fd(c, p[0], 64), SPC_EINVAL);
  ck_assert_msg(strstr(spc_last_error(c), "not a memfd"), "%s",
                spc_last_error(c));
  close(p[0]), close(p[1]);
  int fd = memfd_sized(64, 0);
  ck_assert_int_eq(register_fd(c, fd, 64), SPC_EINVAL);
  ck_assert_msg(strstr(spc_last_error(c), "not sealed with F_SEAL_SHRINK"),
                "%s", spc_last_error(c));
  close(fd);
  fd = memfd_sized(64, F_SEAL_SHRINK);
  ck_assert_int_eq(register_fd(c, fd, 128), SPC_EINVAL);
  ck_assert_msg(strstr(spc_last_error(c), "size 128 does not match the "
                       "memfd's size 64"), "%s", spc_last_error(c));
  ck_assert_int_eq(register_fd(c, fd, 64), SPC_OK);
  close(fd);
  /* No descriptor at all is a protocol error: the connection goes. */
  ck_assert_int_eq(register_fd(c, -1, 64), SPC_EPROTOCOL);
  ck_assert_msg(strstr(spc_last_error(c), "without a file descriptor"), "%s",
                spc_last_error(c));
  spc_disconnect(c);
}
END_TEST

/* A stats request carrying n descriptors, which nothing takes. */
static int stats_with_fds(spc_client *c, const int *fds, int n) {
  Spcoll__StatsRequest q = SPCOLL__STATS_REQUEST__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  f.body_case = SPCOLL__FRAME__BODY_STATS_REQUEST;
  f.stats_request = &q;
  Spcoll__Frame *reply = NULL;
  int rc = spc__call_fds(c, &f, fds, n, &reply);
  if (reply)
    spcoll__frame__free_unpacked(reply, NULL);
  return rc;
}

/* The daemon holds descriptors sent with one byte of a frame until the
 * frame is whole (or its deadline). */
static int park(const int *fds, int n) {
  int s = spt_raw_connect(daemon_.socket);
  ck_assert_int_ge(s, 0);
  ck_assert_int_eq(spt_raw_send_fds(s, fds, n, 0), 0);
  return s;
}

/* Descriptors in flight are bounded:
 * - sent with a frame that takes none: that client is dropped;
 * - more than one frame's worth (64) ahead of their frames: dropped;
 * - held by a frame not whole yet: counted until it is (or its deadline);
 * - past its uid's share (uid_max_fds_in_flight, 96 by default): the
 *   registration they came with is refused naming the key (after
 *   libspclient has sent it again for about 2 s), the client goes on, and
 *   registers once the others' descriptors are closed. */
START_TEST(fds_in_flight_are_bounded) {
  int fds[64];
  for (int i = 0; i < 64; i++)
    ck_assert_int_ge(fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC), 0);
  /* A whole stats request with 2 descriptors: answered, then an error
   * naming why, then the connection is closed. */
  int c = spt_raw_connect(daemon_.socket);
  ck_assert_int_eq(spt_raw_hello(c), 0);
  Spcoll__StatsRequest q = SPCOLL__STATS_REQUEST__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT, *r;
  f.id = 2;
  f.body_case = SPCOLL__FRAME__BODY_STATS_REQUEST;
  f.stats_request = &q;
  uint8_t *bytes;
  size_t len;
  spk_err err;
  ck_assert_int_eq(spf_encode(&f, &bytes, &len, &err), 0);
  ck_assert_int_eq(spt_raw_send_fds(c, fds, 2, (char)bytes[0]), 0);
  ck_assert_int_eq(spt_raw_send_bytes(c, bytes + 1, len - 1), 0);
  free(bytes);
  int said = 0;
  while ((r = spt_raw_recv(c, 5)) != NULL) {
    said |= r->body_case == SPCOLL__FRAME__BODY_ERROR &&
            strstr(r->error->message, "came with frames that take none");
    spcoll__frame__free_unpacked(r, NULL);
  }
  ck_assert_msg(said, "no error naming the descriptors no frame took");
  close(c);
  int capped = park(fds, 64);
  ck_assert_int_eq(spt_raw_send_fds(capped, fds, 1, 0), 0);
  ck_assert_int_eq(spt_raw_closed(capped, 5), 1); /* 65 ahead: dropped */
  close(capped);
  int over = park(fds, 40);
  int more = park(fds, 25);
  ck_assert_int_eq(spt_raw_closed(over, 1), 0); /* 40 held: fine */
  int a = park(fds, 32);  /* 40 + 25 + 32 > 96 */
  spc_client *d = spt_connect(daemon_.socket);
  spc_buffer *buf;
  ck_assert_int_eq(spc_buffer_alloc(d, 4096, &buf), SPC_ENOMEM);
  ck_assert_msg(strstr(spc_last_error(d), "uid_max_fds_in_flight"), "%s",
                spc_last_error(d));
  ck_assert_int_eq(stats_with_fds(d, NULL, 0), SPC_OK); /* d goes on */
  close(a), close(over), close(more);
  int rc = SPC_ENOMEM;
  for (int i = 0; i < 500 && rc == SPC_ENOMEM; i++) {
    usleep(10000); /* their descriptors go back once the daemon sees them go */
    rc = spc_buffer_alloc(d, 4096, &buf);
  }
  ck_assert_msg(rc == SPC_OK, "%s", spc_last_error(d));
  spc_disconnect(d);
  for (int i = 0; i < 64; i++)
    close(fds[i]);
}
END_TEST

/* Rank 2 joins, then goes away while ranks 0 and 1 wait in an op. */
static int lost_rank(int rank, int world, void *arg) {
  (void)arg;
  spc_client *c = spt_connect(daemon_.socket);
  spc_group *g;
  if (spc_group_join(c, "lost", world, rank, &g) < 0)
    return 1;
  if (rank == 2) {
    usleep(300000); /* let the others block in their op first */
    spc_disconnect(c);
    return 0;
  }
  spc_buffer *b;
  spc_tensor in, out;
  int64_t s1[1] = {4}, s2[1] = {12};
  spc_buffer_alloc(c, 128, &b);
  spc_tensor_init(&in, b, 0, SPC_INT32, 1, s1);
  spc_tensor_init(&out, b, 16, SPC_INT32, 1, s2);
  int rc = spc_all_gather(g, &in, &out, 0, NULL);
  int ok = rc == SPC_EPEERLOST && strstr(spc_last_error(c), "rank 2 of group "
                                         "'lost' was lost");
  rc = spc_all_gather(g, &in, &out, 0, NULL); /* the group is broken now */
  ok = ok && rc == SPC_EPEERLOST && strstr(spc_last_error(c), "rank 2");
  if (!ok)
    fprintf(stderr, "rank %d: %d '%s'\n", rank, rc, spc_last_error(c));
  spc_group_leave(g);
  /* A new group on the same daemon works. */
  if (ok && spc_group_join(c, "after", 2, rank, &g) == 0) {
    s2[0] = 8;
    spc_tensor_init(&out, b, 16, SPC_INT32, 1, s2);
    ok = spc_all_gather(g, &in, &out, 0, NULL) == 0;
  }
  spc_disconnect(c);
  return !ok;
}

START_TEST(client_lost_mid_op) {
  ck_assert_int_eq(spt_run_ranks(3, lost_rank, NULL, 60), 0);
}
END_TEST

/* Every dtype spcoll knows reduces; an unknown dtype id is refused on every
 * rank and the group goes on. */
static int bad_dtype_rank(int rank, int world, void *arg) {
  (void)arg;
  spc_client *c = spt_connect(daemon_.socket);
  spc_group *g;
  spc_buffer *b;
  spc_tensor in, out;
  int64_t s[1] = {4};
  if (spc_group_join(c, "dtype", world, rank, &g) < 0 ||
      spc_buffer_alloc(c, 64, &b) < 0 ||
      spc_tensor_init(&in, b, 0, SPC_FLOAT32, 1, s) < 0 ||
      spc_tensor_init(&out, b, 32, SPC_FLOAT32, 1, s) < 0)
    return 1;
  spc_tensor bad_in = in, bad_out = out;
  if (rank == 0)
    bad_in.dtype = bad_out.dtype = (spc_dtype)42;
  int rc = spc_all_reduce(g, &bad_in, &bad_out, SPC_SUM);
  int ok = rc == SPC_EINVAL &&
           strstr(spc_last_error(c), "rank 0: input tensor has unknown dtype "
                  "42");
  if (!ok)
    fprintf(stderr, "rank %d: %d '%s'\n", rank, rc, spc_last_error(c));
  ok = ok && spc_all_reduce(g, &in, &out, SPC_MAX) == 0;
  spc_disconnect(c);
  return !ok;
}

START_TEST(reduce_unknown_dtype) {
  ck_assert_int_eq(spt_run_ranks(2, bad_dtype_rank, NULL, 60), 0);
}
END_TEST

/* Empty tensors with huge dims: the gathered size would wrap int64. It is
 * refused on every rank, and the daemon (also its UBSan build) lives. */
static int huge_dim_rank(int rank, int world, void *arg) {
  (void)arg;
  spc_client *c = spt_connect(daemon_.socket);
  spc_group *g;
  spc_buffer *b;
  spc_tensor in, out;
  int64_t s[2] = {0, 4};
  if (spc_group_join(c, "huge", world, rank, &g) < 0 ||
      spc_buffer_alloc(c, 64, &b) < 0 ||
      spc_tensor_init(&in, b, 0, SPC_FLOAT32, 2, s) < 0 ||
      spc_tensor_init(&out, b, 0, SPC_FLOAT32, 2, s) < 0)
    return 1;
  in.shape[1] = (int64_t)1 << 62; /* 0 elements: fits any buffer */
  out.shape[1] = 5;
  int rc = spc_all_gather(g, &in, &out, 1, NULL);
  int ok = rc == SPC_EINVAL && strstr(spc_last_error(c), "overflows int64");
  if (!ok)
    fprintf(stderr, "rank %d: %d '%s'\n", rank, rc, spc_last_error(c));
  spc_disconnect(c);
  return !ok;
}

START_TEST(gather_size_overflow) {
  ck_assert_int_eq(spt_run_ranks(2, huge_dim_rank, NULL, 60), 0);
}
END_TEST

/* A rank that leaves with its op still pending hears about it: the wait
 * returns instead of blocking forever. */
static int leave_pending_rank(int rank, int world, void *arg) {
  (void)arg;
  spc_client *c = spt_connect(daemon_.socket);
  spc_group *g;
  if (spc_group_join(c, "leaver", world, rank, &g) < 0)
    return 1;
  if (rank == 1) { /* never issues the op; stays until rank 0 is done */
    usleep(500000);
    spc_disconnect(c);
    return 0;
  }
  spc_buffer *b;
  spc_tensor in, out;
  int64_t s1[1] = {4}, s2[1] = {8};
  spc_buffer_alloc(c, 64, &b);
  spc_tensor_init(&in, b, 0, SPC_FLOAT32, 1, s1);
  spc_tensor_init(&out, b, 16, SPC_FLOAT32, 1, s2);
  spc_request *req;
  int ok = spc_all_gather_async(g, &in, &out, 0, NULL, &req) == 0 &&
           spc_group_leave(g) == 0 && spc_wait(&req) == SPC_EPEERLOST &&
           strstr(spc_last_error(c), "rank 0 of group 'leaver' left");
  if (!ok)
    fprintf(stderr, "rank 0: '%s'\n", spc_last_error(c));
  spc_disconnect(c);
  return !ok;
}

START_TEST(leave_with_pending_op) {
  ck_assert_int_eq(spt_run_ranks(2, leave_pending_rank, NULL, 30), 0);
}
END_TEST

int main(void) {
  Suite *s = suite_create("badinput");
  TCase *tc = tcase_create("badinput");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, malformed_protobuf);
  tcase_add_test(tc, frame_over_cap);
  tcase_add_test(tc, unknown_message_type);
  tcase_add_test(tc, request_before_hello);
  tcase_add_test(tc, version_mismatch);
  tcase_add_test(tc, join_bad_rank);
  tcase_add_test(tc, world_size_conflict);
  tcase_add_test(tc, rank_taken);
  tcase_add_test(tc, tensor_outside_buffer);
  tcase_add_test(tc, foreign_buffer_id);
  tcase_add_test(tc, bad_buffer_fds);
  tcase_add_test(tc, fds_in_flight_are_bounded);
  tcase_add_test(tc, client_lost_mid_op);
  tcase_add_test(tc, reduce_unknown_dtype);
  tcase_add_test(tc, gather_size_overflow);
  tcase_add_test(tc, leave_with_pending_op);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
