/* The submission ring (kernels/submit_ring.h): libspclient's op frames go
 * through it (the daemon's ring_frames), right, with the fast path off;
 * SPCOLL_SUBMIT_RING=0 keeps them on the socket. A raw client checks the
 * daemon's side: a record waits for the socket frames sent before it
 * (answers come in the order sent), the daemon arms an idle ring, and a
 * record that breaks the rules (a length past the ring, a frame that is
 * not an op, a head past the tail) drops that client only. */
#include <check.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "check_run.h"
#include "client_internal.h"
#include "fast_ranks.h"
#include "harness.h"
#include "submit_ring.h"

enum { OPS = 24, N = 4096, RING = 4096 };

static spt_daemon daemon_;
static void *sh;

static void up(void) {
  static const char *const no_fast[] = {"--fast-bytes", "0", NULL};
  sh = spt_fixture_up(&daemon_, no_fast, 64);
  ck_assert_ptr_nonnull(sh);
}

static void teardown(void) {
  ck_assert_int_eq(spt_fixture_down(&daemon_, sh, 64), 0);
}

/* OPS async and OPS blocking all_reduces, each checked. */
static int reduces(int rank, int world, void *arg) {
  (void)arg;
  spt_rk k;
  if (spt_rk_open(&k, daemon_.socket, "ring", rank, world, 20000) < 0)
    return 1;
  int bad = 0;
  for (int s = 0; s < 2 * OPS && !bad; s++) {
    k.used = 0;
    bad = spt_rk_reduce_once(&k, rank, world, N, s, s < OPS) != 0;
  }
  return spt_rk_close(&k, bad);
}

START_TEST(ops_go_through_the_ring) {
  up();
  ck_assert_int_eq(spt_run_ranks(2, reduces, NULL, 120), 0);
  long long frames = spt_daemon_stat(&daemon_, "ring_frames");
  ck_assert_msg(frames >= 2 * 2 * OPS, "ring_frames %lld", frames);
  ck_assert_int_ge(spt_daemon_stat(&daemon_, "ring_kicks"), 1);
}
END_TEST

START_TEST(ring_off_keeps_the_socket) {
  up();
  ck_assert_int_eq(setenv("SPCOLL_SUBMIT_RING", "0", 1), 0);
  int failed = spt_run_ranks(2, reduces, NULL, 120);
  unsetenv("SPCOLL_SUBMIT_RING");
  ck_assert_int_eq(failed, 0);
  ck_assert_int_eq(spt_daemon_stat(&daemon_, "ring_frames"), 0);
}
END_TEST

/* ---- a raw client's ring ---- */

typedef struct {
  int fd;          /* the connection */
  uint8_t *ring;   /* its RING bytes, mapped */
  uint64_t head;
} raw_ring;

/* A raw client with a ring whose head is `head` when registered: the
 * daemon's answer. */
static Spcoll__Frame *raw_ring_register(raw_ring *r, uint64_t head) {
  r->fd = spt_raw_connect(daemon_.socket);
  ck_assert_int_ge(r->fd, 0);
  ck_assert_int_eq(spt_raw_hello(r->fd), 0);
  int m = memfd_create("ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ck_assert_int_ge(m, 0);
  ck_assert_int_eq(ftruncate(m, RING), 0);
  ck_assert_int_eq(fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  r->ring = mmap(NULL, RING, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
  ck_assert_ptr_ne(r->ring, MAP_FAILED);
  memset(r->ring, 0, RING);
  ((spk_sring_hdr *)r->ring)->head = r->head = head;
  Spcoll__BufRegister reg = SPCOLL__BUF_REGISTER__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT, *a;
  reg.size = RING;
  reg.submit_ring = 1;
  f.id = 2;
  f.body_case = SPCOLL__FRAME__BODY_BUF_REGISTER;
  f.buf_register = &reg;
  uint8_t *bytes;
  size_t len;
  spk_err err;
  ck_assert_int_eq(spf_encode(&f, &bytes, &len, &err), 0);
  ck_assert_int_eq(spt_raw_send_fds(r->fd, &m, 1, (char)bytes[0]), 0);
  ck_assert_int_eq(spt_raw_send_bytes(r->fd, bytes + 1, len - 1), 0);
  free(bytes);
  close(m);
  ck_assert_ptr_nonnull(a = spt_raw_recv(r->fd, 5));
  return a;
}

static void raw_ring_open(raw_ring *r) {
  Spcoll__Frame *a = raw_ring_register(r, 0);
  ck_assert_int_eq(a->body_case, SPCOLL__FRAME__BODY_BUF_REGISTERED);
  ck_assert(a->buf_registered->submit_ring); /* the daemon says it took it */
  spcoll__frame__free_unpacked(a, NULL);
}

/* A record of frame f (or saying len bytes, of what is there, when f is
 * NULL) after `after` socket frames, published: the head moves past it,
 * or by adv bytes where adv is not 0. */
static void raw_put(raw_ring *r, const Spcoll__Frame *f, uint32_t len,
                    uint32_t after, uint32_t adv) {
  uint8_t *data = r->ring + SPK_SRING_HDR;
  uint64_t pos = r->head % spk_sring_cap(RING);
  uint32_t n = f ? (uint32_t)spcoll__frame__get_packed_size(f) : len;
  uint32_t rec[2] = {n, after};
  memcpy(data + pos, rec, sizeof(rec));
  if (f)
    spcoll__frame__pack(f, data + pos + SPK_SRING_REC);
  r->head += adv ? adv : SPK_SRING_REC + spk_sring_pad(n);
  __atomic_store_n(&((spk_sring_hdr *)r->ring)->head, r->head,
                   __ATOMIC_SEQ_CST);
}

static void frame_release(Spcoll__Frame *f, Spcoll__BufRelease *b,
                          uint64_t id, uint64_t buffer) {
  *b = (Spcoll__BufRelease)SPCOLL__BUF_RELEASE__INIT;
  *f = (Spcoll__Frame)SPCOLL__FRAME__INIT;
  b->buffer_id = buffer;
  f->id = id;
  f->body_case = SPCOLL__FRAME__BODY_BUF_RELEASE;
  f->buf_release = b;
}

static void send_kick(int fd) {
  Spcoll__Kick k = SPCOLL__KICK__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  f.body_case = SPCOLL__FRAME__BODY_KICK;
  f.kick = &k;
  ck_assert_int_eq(spt_raw_send(fd, &f), 0);
}

/* Frames 11 (socket), 12 (ring, after 11), 13 (socket): the record is
 * published before either socket frame is sent, so a daemon that took it
 * at once would answer 12 first. Each is answered with an error (an
 * unknown buffer, an unknown group), in the order sent. */
START_TEST(records_wait_for_the_socket_frames_before_them) {
  up();
  raw_ring r;
  raw_ring_open(&r);
  Spcoll__OpRequest rq = SPCOLL__OP_REQUEST__INIT;
  Spcoll__Frame op = SPCOLL__FRAME__INIT, a, c;
  Spcoll__BufRelease ba, bc;
  rq.group_id = 999;
  op.id = 12;
  op.body_case = SPCOLL__FRAME__BODY_OP;
  op.op = &rq;
  raw_put(&r, &op, 0, 3, 0); /* after hello, the ring's registration, 11 */
  frame_release(&a, &ba, 11, 1001);
  frame_release(&c, &bc, 13, 1003);
  uint8_t *b1, *b2;
  size_t l1, l2;
  spk_err err;
  ck_assert_int_eq(spf_encode(&a, &b1, &l1, &err), 0);
  ck_assert_int_eq(spf_encode(&c, &b2, &l2, &err), 0);
  uint8_t both[256];
  ck_assert_uint_le(l1 + l2, sizeof(both));
  memcpy(both, b1, l1);
  memcpy(both + l1, b2, l2);
  ck_assert_int_eq(spt_raw_send_bytes(r.fd, both, l1 + l2), 0);
  free(b1), free(b2);
  for (uint64_t want = 11; want <= 13; want++) {
    Spcoll__Frame *got = spt_raw_recv(r.fd, 5);
    ck_assert_ptr_nonnull(got);
    ck_assert_int_eq(got->body_case, SPCOLL__FRAME__BODY_ERROR);
    ck_assert_uint_eq(got->id, want);
    spcoll__frame__free_unpacked(got, NULL);
  }
  /* idle now: the daemon armed the ring; a record and a kick are taken */
  spk_sring_hdr *h = (spk_sring_hdr *)r.ring;
  for (int i = 0; i < 500 && !__atomic_load_n(&h->armed, __ATOMIC_SEQ_CST);
       i++)
    usleep(10000);
  ck_assert_int_eq(__atomic_load_n(&h->armed, __ATOMIC_SEQ_CST), 1);
  op.id = 14;
  raw_put(&r, &op, 0, 4, 0);
  send_kick(r.fd);
  Spcoll__Frame *got = spt_raw_recv(r.fd, 5);
  ck_assert_ptr_nonnull(got);
  ck_assert_uint_eq(got->id, 14);
  spcoll__frame__free_unpacked(got, NULL);
  ck_assert_int_eq(spt_daemon_stat(&daemon_, "ring_frames"), 2);
  close(r.fd);
  munmap(r.ring, RING);
}
END_TEST

/* A bad record drops its client, saying why; the daemon serves others. */
static void bad_record(void (*spoil)(raw_ring *), const char *why) {
  raw_ring r;
  raw_ring_open(&r);
  spoil(&r);
  send_kick(r.fd);
  Spcoll__Frame *got;
  int said = 0;
  while ((got = spt_raw_recv(r.fd, 5)) != NULL) {
    said |= got->body_case == SPCOLL__FRAME__BODY_ERROR &&
            strstr(got->error->message, why) != NULL;
    spcoll__frame__free_unpacked(got, NULL);
  }
  ck_assert_msg(said, "no error saying \"%s\"", why);
  ck_assert(spt_raw_closed(r.fd, 5));
  close(r.fd);
  munmap(r.ring, RING);
  spc_client *c = spt_connect(daemon_.socket);
  ck_assert_ptr_nonnull(c);
  spc_disconnect(c);
}

static void too_long(raw_ring *r) {
  raw_put(r, NULL, RING, 3, 16);
}

static void not_an_op(raw_ring *r) {
  Spcoll__StatsRequest q = SPCOLL__STATS_REQUEST__INIT;
  Spcoll__Frame f = SPCOLL__FRAME__INIT;
  f.id = 5;
  f.body_case = SPCOLL__FRAME__BODY_STATS_REQUEST;
  f.stats_request = &q;
  raw_put(r, &f, 0, 3, 0);
}

static void head_far_ahead(raw_ring *r) {
  __atomic_store_n(&((spk_sring_hdr *)r->ring)->head, (uint64_t)10 * RING,
                   __ATOMIC_SEQ_CST);
}

static void garbage(raw_ring *r) {
  memset(r->ring + SPK_SRING_HDR + SPK_SRING_REC, 0xff, 16);
  raw_put(r, NULL, 16, 3, 0);
}

START_TEST(bad_records_drop_their_client) {
  up();
  bad_record(too_long, "record length out of bounds");
  bad_record(not_an_op, "only ops come this way");
  bad_record(head_far_ahead, "head past tail");
  bad_record(garbage, "not a valid spcoll.Frame");
}
END_TEST

START_TEST(a_second_ring_is_refused) {
  up();
  raw_ring r; /* a ring must start empty: every position then 8-aligned */
  Spcoll__Frame *e = raw_ring_register(&r, 3839);
  ck_assert_int_eq(e->body_case, SPCOLL__FRAME__BODY_ERROR);
  ck_assert_msg(strstr(e->error->message, "starts empty"), "%s",
                e->error->message);
  spcoll__frame__free_unpacked(e, NULL);
  close(r.fd);
  munmap(r.ring, RING);
  spc_client *c = spt_connect(daemon_.socket);
  ck_assert_ptr_nonnull(c);
  spc_buffer *a, *b;
  ck_assert_int_eq(spc__buffer_alloc(c, RING, SPC__BUF_RING, &a), SPC_OK);
  ck_assert_int_eq(spc__buffer_alloc(c, RING, SPC__BUF_RING, &b),
                   SPC_EINVAL);
  ck_assert_msg(strstr(spc_last_error(c), "submission ring already"), "%s",
                spc_last_error(c));
  ck_assert_int_eq(spc__buffer_alloc(c, 5000, SPC__BUF_RING, &b), SPC_EINVAL);
  ck_assert_msg(strstr(spc_last_error(c), "power of two"), "%s",
                spc_last_error(c));
  spc_disconnect(c);
}
END_TEST

int main(void) {
  Suite *s = suite_create("submit_ring");
  TCase *tc = tcase_create("submit_ring");
  tcase_add_checked_fixture(tc, NULL, teardown);
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, ops_go_through_the_ring);
  tcase_add_test(tc, ring_off_keeps_the_socket);
  tcase_add_test(tc, records_wait_for_the_socket_frames_before_them);
  tcase_add_test(tc, bad_records_drop_their_client);
  tcase_add_test(tc, a_second_ring_is_refused);
  suite_add_tcase(s, tc);
  return spt_run_suite(s);
}
