/* The frame codec (proto/frame.h): 4-byte little-endian length + protobuf
 * Frame. Round trips through spf_encode and spf_reader with bytes fed one at
 * a time and in random chunks, plus the protocol errors. Everything is
 * freed: this suite also runs under valgrind with CK_FORK=no. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_run.h"
#include "frame.h"

static uint64_t rng_state;
static uint64_t rng_next(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Sample frames; the static parts outlive every test that packs them. */
#define NSAMPLES 5
static char big_text[10001];
static int64_t in_shape[] = {2, 3, 4}, out_shape[] = {2, 6, 4};
static int32_t op_dims[] = {-2};
static int64_t op_sizes[] = {3, 3}, op_sizes2[] = {1, -1, (int64_t)1 << 50};

static void sample(int i, Spcoll__Frame *f, Spcoll__Hello *h,
                   Spcoll__OpRequest *op, Spcoll__Tensor *ti,
                   Spcoll__Tensor *to, Spcoll__Error *e, Spcoll__Done *d,
                   Spcoll__StatsReply *st) {
  spcoll__frame__init(f);
  switch (i) {
  case 0:
    spcoll__hello__init(h);
    h->protocol_version = SPF_PROTOCOL_VERSION, h->framework = "torch";
    h->pid = 1234;
    f->id = 7, f->body_case = SPCOLL__FRAME__BODY_HELLO, f->hello = h;
    break;
  case 1:
    spcoll__op_request__init(op);
    spcoll__tensor__init(ti);
    spcoll__tensor__init(to);
    ti->buffer_id = 5, ti->offset = 128, ti->dtype = 7;
    ti->n_shape = 3, ti->shape = in_shape;
    to->buffer_id = 6, to->n_shape = 3, to->shape = out_shape;
    op->group_id = 9, op->op = 1, op->input = ti, op->output = to;
    op->n_dims = 1, op->dims = op_dims;
    op->n_sizes = 2, op->sizes = op_sizes;
    op->n_sizes2 = 3, op->sizes2 = op_sizes2;
    op->scalar = -5, op->flags = 0xffffffffu;
    f->id = ((uint64_t)1 << 40) + 3, f->body_case = SPCOLL__FRAME__BODY_OP;
    f->op = op;
    break;
  case 2:
    spcoll__error__init(e);
    e->status = SPCOLL__STATUS__STATUS_MISMATCH, e->message = "ranks disagree";
    f->id = 8, f->body_case = SPCOLL__FRAME__BODY_ERROR, f->error = e;
    break;
  case 3: /* an empty body still encodes its field tag */
    spcoll__done__init(d);
    f->id = 0, f->body_case = SPCOLL__FRAME__BODY_DONE, f->done = d;
    break;
  default: /* bigger than the reader's first allocation */
    memset(big_text, 'x', sizeof(big_text) - 1);
    spcoll__stats_reply__init(st);
    st->text = big_text;
    f->id = 11, f->body_case = SPCOLL__FRAME__BODY_STATS_REPLY;
    f->stats_reply = st;
    break;
  }
}

/* Encode sample i; checks the length prefix by hand. */
static void encode_sample(int i, uint8_t **buf, size_t *len) {
  Spcoll__Frame f;
  Spcoll__Hello h;
  Spcoll__OpRequest op;
  Spcoll__Tensor ti, to;
  Spcoll__Error e;
  Spcoll__Done d;
  Spcoll__StatsReply st;
  sample(i, &f, &h, &op, &ti, &to, &e, &d, &st);
  spk_err err = {{0}};
  ck_assert_int_eq(spf_encode(&f, buf, len, &err), SPK_OK);
  ck_assert_uint_gt(*len, SPF_HEADER);
  uint8_t *p = *buf;
  uint32_t n = p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24;
  ck_assert_uint_eq(n, *len - SPF_HEADER);
}

/* Field-by-field check of a decoded sample. */
static void check_sample(int i, const Spcoll__Frame *f) {
  static const uint64_t ids[NSAMPLES] = {7, ((uint64_t)1 << 40) + 3, 8, 0, 11};
  ck_assert_uint_eq(f->id, ids[i]);
  switch (i) {
  case 0:
    ck_assert_int_eq(f->body_case, SPCOLL__FRAME__BODY_HELLO);
    ck_assert_uint_eq(f->hello->protocol_version, SPF_PROTOCOL_VERSION);
    ck_assert_str_eq(f->hello->framework, "torch");
    ck_assert_int_eq(f->hello->pid, 1234);
    break;
  case 1: {
    ck_assert_int_eq(f->body_case, SPCOLL__FRAME__BODY_OP);
    const Spcoll__OpRequest *op = f->op;
    ck_assert_uint_eq(op->group_id, 9);
    ck_assert_uint_eq(op->op, 1);
    ck_assert_ptr_nonnull(op->input);
    ck_assert_ptr_nonnull(op->output);
    ck_assert_uint_eq(op->input->buffer_id, 5);
    ck_assert_uint_eq(op->input->offset, 128);
    ck_assert_uint_eq(op->input->dtype, 7);
    ck_assert_uint_eq(op->input->n_shape, 3);
    ck_assert_int_eq(op->input->shape[2], 4);
    ck_assert_uint_eq(op->output->buffer_id, 6);
    ck_assert_uint_eq(op->output->n_shape, 3);
    ck_assert_int_eq(op->output->shape[1], 6);
    ck_assert_uint_eq(op->n_dims, 1);
    ck_assert_int_eq(op->dims[0], -2);
    ck_assert_uint_eq(op->n_sizes, 2);
    ck_assert_int_eq(op->sizes[0], 3);
    ck_assert_int_eq(op->sizes[1], 3);
    ck_assert_uint_eq(op->n_sizes2, 3);
    ck_assert_int_eq(op->sizes2[1], -1);
    ck_assert_int_eq(op->sizes2[2], (int64_t)1 << 50);
    ck_assert_int_eq(op->scalar, -5);
    ck_assert_uint_eq(op->flags, 0xffffffffu);
    break;
  }
  case 2:
    ck_assert_int_eq(f->body_case, SPCOLL__FRAME__BODY_ERROR);
    ck_assert_int_eq(f->error->status, SPCOLL__STATUS__STATUS_MISMATCH);
    ck_assert_str_eq(f->error->message, "ranks disagree");
    break;
  case 3:
    ck_assert_int_eq(f->body_case, SPCOLL__FRAME__BODY_DONE);
    ck_assert_ptr_nonnull(f->done);
    break;
  default:
    ck_assert_int_eq(f->body_case, SPCOLL__FRAME__BODY_STATS_REPLY);
    ck_assert_uint_eq(strlen(f->stats_reply->text), sizeof(big_text) - 1);
    ck_assert_int_eq(f->stats_reply->text[5000], 'x');
    break;
  }
}

static void feed(spf_reader *r, const uint8_t *p, size_t n) {
  uint8_t *space;
  size_t avail;
  spk_err err = {{0}};
  ck_assert_int_eq(spf_reader_space(r, n, &space, &avail, &err), SPK_OK);
  ck_assert_uint_ge(avail, n);
  memcpy(space, p, n);
  spf_reader_commit(r, n);
}

/* One byte at a time: nothing comes out before the last byte. */
START_TEST(test_bytewise) {
  for (int i = 0; i < NSAMPLES; i++) {
    uint8_t *buf;
    size_t len;
    encode_sample(i, &buf, &len);
    spf_reader r;
    spf_reader_init(&r);
    Spcoll__Frame *f = NULL;
    spk_err err = {{0}};
    for (size_t k = 0; k + 1 < len; k++) {
      feed(&r, buf + k, 1);
      ck_assert_msg(spf_reader_next(&r, &f, &err) == 0,
                    "sample %d: frame out after %zu of %zu bytes", i, k + 1,
                    len);
    }
    feed(&r, buf + len - 1, 1);
    ck_assert_int_eq(spf_reader_next(&r, &f, &err), 1);
    check_sample(i, f);
    spcoll__frame__free_unpacked(f, NULL);
    ck_assert_int_eq(spf_reader_next(&r, &f, &err), 0);
    ck_assert_uint_eq(r.len, 0);
    spf_reader_free(&r);
    free(buf);
  }
}
END_TEST

/* Three copies of every sample back to back, fed in random chunks and
 * drained after each chunk: frames come out whole and in order. */
START_TEST(test_random_chunks) {
  uint8_t *all = NULL;
  size_t total = 0;
  int order[3 * NSAMPLES];
  for (int k = 0; k < 3 * NSAMPLES; k++) {
    uint8_t *buf;
    size_t len;
    order[k] = (k * 3) % NSAMPLES; /* mixes big and small frames */
    encode_sample(order[k], &buf, &len);
    all = realloc(all, total + len);
    memcpy(all + total, buf, len);
    total += len;
    free(buf);
  }
  for (uint64_t seed = 1; seed <= 20; seed++) {
    rng_state = seed;
    spf_reader r;
    spf_reader_init(&r);
    spk_err err = {{0}};
    int got = 0;
    for (size_t off = 0; off < total;) {
      size_t n = 1 + rng_next() % (seed < 10 ? 40 : 9000);
      if (n > total - off)
        n = total - off;
      feed(&r, all + off, n);
      off += n;
      Spcoll__Frame *f;
      int rc;
      while ((rc = spf_reader_next(&r, &f, &err)) == 1) {
        ck_assert_msg(got < 3 * NSAMPLES, "seed %llu: extra frame",
                      (unsigned long long)seed);
        check_sample(order[got++], f);
        spcoll__frame__free_unpacked(f, NULL);
      }
      ck_assert_msg(rc == 0, "seed %llu: %d %s", (unsigned long long)seed,
                    rc, err.msg);
    }
    ck_assert_int_eq(got, 3 * NSAMPLES);
    ck_assert_uint_eq(r.len, 0);
    spf_reader_free(&r);
  }
  free(all);
}
END_TEST

/* Whole frames in a single buffer, then a partial one. */
START_TEST(test_several_and_partial) {
  spf_reader r;
  spf_reader_init(&r);
  spk_err err = {{0}};
  Spcoll__Frame *f = NULL;
  ck_assert_int_eq(spf_reader_next(&r, &f, &err), 0); /* empty reader */
  uint8_t *b[3];
  size_t l[3];
  for (int i = 0; i < 3; i++)
    encode_sample(i, &b[i], &l[i]);
  feed(&r, b[0], l[0]);
  feed(&r, b[2], l[2]);
  feed(&r, b[1], l[1] - 1); /* all but the last byte of the op */
  ck_assert_int_eq(spf_reader_next(&r, &f, &err), 1);
  check_sample(0, f);
  spcoll__frame__free_unpacked(f, NULL);
  ck_assert_int_eq(spf_reader_next(&r, &f, &err), 1);
  check_sample(2, f);
  spcoll__frame__free_unpacked(f, NULL);
  ck_assert_int_eq(spf_reader_next(&r, &f, &err), 0);
  ck_assert_int_eq(spf_reader_next(&r, &f, &err), 0); /* stays partial */
  ck_assert_uint_eq(r.len, l[1] - 1);
  feed(&r, b[1] + l[1] - 1, 1);
  ck_assert_int_eq(spf_reader_next(&r, &f, &err), 1);
  check_sample(1, f);
  spcoll__frame__free_unpacked(f, NULL);
  for (int i = 0; i < 3; i++)
    free(b[i]);
  /* A lone header, or less than a header, is not a frame yet. */
  feed(&r, (const uint8_t[]){5, 0, 0}, 3);
  ck_assert_int_eq(spf_reader_next(&r, &f, &err), 0);
  feed(&r, (const uint8_t[]){0, 0x08}, 2);
  ck_assert_int_eq(spf_reader_next(&r, &f, &err), 0);
  spf_reader_free(&r);
  ck_assert_ptr_null(r.buf);
}
END_TEST

/* Feeds raw bytes and expects SPK_EPROTOCOL with `needle` in the message. */
static void expect_protocol(const uint8_t *p, size_t n, const char *needle) {
  spf_reader r;
  spf_reader_init(&r);
  spk_err err = {{0}};
  Spcoll__Frame *f = NULL;
  feed(&r, p, n);
  int rc = spf_reader_next(&r, &f, &err);
  if (rc == 1)
    spcoll__frame__free_unpacked(f, NULL);
  spf_reader_free(&r);
  ck_assert_msg(rc == SPK_EPROTOCOL, "got %d (%s)", rc, err.msg);
  ck_assert_msg(strstr(err.msg, needle) != NULL, "'%s' lacks '%s'", err.msg,
                needle);
}

START_TEST(test_bad_length) {
  expect_protocol((const uint8_t[]){0, 0, 0, 0}, 4, "length 0");
  /* Rejected from the header alone, before the payload arrives. */
  uint32_t over = SPF_FRAME_MAX + 1;
  uint8_t h[4] = {(uint8_t)over, (uint8_t)(over >> 8), (uint8_t)(over >> 16),
                  (uint8_t)(over >> 24)};
  char want[32];
  snprintf(want, sizeof(want), "%u", over);
  expect_protocol(h, 4, want);
  expect_protocol((const uint8_t[]){0xff, 0xff, 0xff, 0xff}, 4, "4294967295");
  /* Exactly the cap is a legal length: the reader waits for the bytes. */
  spf_reader r;
  spf_reader_init(&r);
  spk_err err = {{0}};
  Spcoll__Frame *f = NULL;
  uint32_t max = SPF_FRAME_MAX;
  feed(&r, (const uint8_t[]){(uint8_t)max, (uint8_t)(max >> 8),
                             (uint8_t)(max >> 16), (uint8_t)(max >> 24)},
       4);
  ck_assert_int_eq(spf_reader_next(&r, &f, &err), 0);
  spf_reader_free(&r);
}
END_TEST

/* Valid lengths around bytes that are not a Frame. */
START_TEST(test_garbage) {
  /* hello (field 2) claims 16 bytes, 1 follows */
  expect_protocol((const uint8_t[]){3, 0, 0, 0, 0x12, 0x10, 0x00}, 7,
                  "not a valid");
  /* a varint that never ends */
  expect_protocol((const uint8_t[]){4, 0, 0, 0, 0x08, 0xff, 0xff, 0xff}, 8,
                  "not a valid");
  /* wire type 7 does not exist */
  expect_protocol((const uint8_t[]){2, 0, 0, 0, 0x0f, 0x01}, 6, "not a valid");
  /* op (field 11) whose input tensor is cut short */
  expect_protocol((const uint8_t[]){6, 0, 0, 0, 0x5a, 4, 0x1a, 5, 0x08, 1},
                  10, "not a valid");
}
END_TEST

/* A string with a NUL inside decodes, by protobuf-c, to the bytes before
 * it: "job\0evil" would be "job". Such frames (and any other that is not
 * protobuf's own encoding) do not re-encode to their bytes: refused. */
START_TEST(test_cut_string) {
  /* GroupJoin (field 5) { name (1) = "job\0evil", world_size (2) = 1 } */
  const uint8_t nul[] = {14, 0, 0, 0, 0x2a, 12, 0x0a, 8, 'j', 'o', 'b', 0,
                         'e', 'v', 'i', 'l', 0x10, 1};
  expect_protocol(nul, sizeof(nul), "holds a NUL byte");
  /* world_size twice: decodes (the last wins), re-encodes shorter */
  const uint8_t twice[] = {9, 0, 0, 0, 0x2a, 7, 0x0a, 1, 'j', 0x10, 1,
                           0x10, 2};
  expect_protocol(twice, sizeof(twice), "not a canonical");
  /* the same join without the NUL is read whole */
  const uint8_t ok[] = {13, 0, 0, 0, 0x2a, 11, 0x0a, 7, 'j', 'o', 'b', 'e',
                        'v', 'i', 'l', 0x10, 1};
  spf_reader r;
  spf_reader_init(&r);
  spk_err err = {{0}};
  Spcoll__Frame *f = NULL;
  feed(&r, ok, sizeof(ok));
  ck_assert_int_eq(spf_reader_next(&r, &f, &err), 1);
  ck_assert_str_eq(f->group_join->name, "jobevil");
  spcoll__frame__free_unpacked(f, NULL);
  spf_reader_free(&r);
}
END_TEST

START_TEST(test_encode_errors) {
  spk_err err = {{0}};
  uint8_t *buf = NULL;
  size_t len = 0;
  Spcoll__Frame f;
  spcoll__frame__init(&f); /* id 0, no body: zero bytes */
  ck_assert_int_eq(spf_encode(&f, &buf, &len, &err), SPK_EINVAL);
  ck_assert_ptr_null(buf);
  ck_assert_ptr_nonnull(strstr(err.msg, "0 bytes"));
  /* One byte over the cap once the field's tag and length are added. */
  char *text = malloc(SPF_FRAME_MAX + 1);
  memset(text, 'y', SPF_FRAME_MAX);
  text[SPF_FRAME_MAX] = '\0';
  Spcoll__StatsReply st;
  spcoll__stats_reply__init(&st);
  st.text = text;
  f.body_case = SPCOLL__FRAME__BODY_STATS_REPLY, f.stats_reply = &st;
  ck_assert_int_eq(spf_encode(&f, &buf, &len, &err), SPK_EINVAL);
  ck_assert_ptr_null(buf);
  free(text);
}
END_TEST

START_TEST(test_reader_space) {
  spf_reader r;
  spf_reader_init(&r);
  spk_err err = {{0}};
  uint8_t *space;
  size_t avail;
  ck_assert_int_eq(spf_reader_space(&r, 10, &space, &avail, &err), SPK_OK);
  ck_assert_ptr_eq(space, r.buf);
  ck_assert_uint_ge(avail, 10);
  memset(space, 0xab, 10);
  spf_reader_commit(&r, 10);
  ck_assert_int_eq(spf_reader_space(&r, 100000, &space, &avail, &err), SPK_OK);
  ck_assert_ptr_eq(space, r.buf + 10);
  ck_assert_uint_ge(avail, 100000);
  ck_assert_uint_le(avail, r.cap - r.len); /* never more than is there */
  ck_assert_int_eq(r.buf[9], 0xab); /* growth keeps what was there */
  spf_reader_free(&r);
}
END_TEST

START_TEST(test_body_names) {
  ck_assert_str_eq(spf_body_name(SPCOLL__FRAME__BODY_HELLO), "hello");
  ck_assert_str_eq(spf_body_name(SPCOLL__FRAME__BODY_OP), "op");
  ck_assert_str_eq(spf_body_name(SPCOLL__FRAME__BODY_GROUP_JOINED),
                   "group_joined");
  ck_assert_str_eq(spf_body_name(SPCOLL__FRAME__BODY_STATS_REPLY),
                   "stats_reply");
  ck_assert_str_eq(spf_body_name(SPCOLL__FRAME__BODY__NOT_SET), "unknown");
  ck_assert_str_eq(spf_body_name((Spcoll__Frame__BodyCase)99), "unknown");
}
END_TEST

static Suite *frame_suite(void) {
  Suite *s = suite_create("frame");
  TCase *tc = tcase_create("core");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_bytewise);
  tcase_add_test(tc, test_random_chunks);
  tcase_add_test(tc, test_several_and_partial);
  tcase_add_test(tc, test_bad_length);
  tcase_add_test(tc, test_garbage);
  tcase_add_test(tc, test_cut_string);
  tcase_add_test(tc, test_encode_errors);
  tcase_add_test(tc, test_reader_space);
  tcase_add_test(tc, test_body_names);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return spt_run_suite(frame_suite());
}
