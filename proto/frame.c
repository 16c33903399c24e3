#include "frame.h"

#include <stdlib.h>
#include <string.h>

static void put_le32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

int spf_encode(const Spcoll__Frame *f, uint8_t **buf_p, size_t *len_p,
               spk_err *err) {
  size_t n = spcoll__frame__get_packed_size(f);
  if (n == 0 || n > SPF_FRAME_MAX)
    return spk_err_set(err, SPK_EINVAL, "frame of %zu bytes outside 1..%u", n,
                       SPF_FRAME_MAX);
  uint8_t *buf = malloc(SPF_HEADER + n);
  if (buf == NULL)
    return spk_err_set(err, SPK_ENO_MEMORY, "malloc(%zu) for a frame failed",
                       SPF_HEADER + n);
  put_le32(buf, (uint32_t)n);
  spcoll__frame__pack(f, buf + SPF_HEADER);
  *buf_p = buf;
  *len_p = SPF_HEADER + n;
  return SPK_OK;
}

void spf_reader_init(spf_reader *r) {
  memset(r, 0, sizeof(*r));
}

void spf_reader_free(spf_reader *r) {
  free(r->buf);
  memset(r, 0, sizeof(*r));
}

int spf_reader_space(spf_reader *r, size_t want, uint8_t **space_p,
                     size_t *avail_p, spk_err *err) {
  if (want > 2 * (SPF_FRAME_MAX + SPF_HEADER))
    return spk_err_set(err, SPK_EINVAL, "reader space of %zu bytes requested, "
                       "frames are at most %u", want, SPF_FRAME_MAX);
  if (r->cap - r->len < want) {
    size_t cap = r->cap ? r->cap : 4096;
    while (cap - r->len < want)
      cap *= 2;
    uint8_t *buf = realloc(r->buf, cap);
    if (buf == NULL)
      return spk_err_set(err, SPK_ENO_MEMORY,
                         "realloc(%zu) for the frame reader failed", cap);
    r->buf = buf;
    r->cap = cap;
  }
  *space_p = r->buf + r->len;
  *avail_p = r->cap - r->len;
  return SPK_OK;
}

void spf_reader_commit(spf_reader *r, size_t n) {
  r->len += n;
}

int spf_reader_next(spf_reader *r, Spcoll__Frame **frame_p, spk_err *err) {
  if (r->len < SPF_HEADER)
    return 0;
  uint32_t n = get_le32(r->buf);
  if (n == 0 || n > SPF_FRAME_MAX)
    return spk_err_set(err, SPK_EPROTOCOL,
                       "frame length %u outside 1..%u bytes", n,
                       SPF_FRAME_MAX);
  if (r->len < SPF_HEADER + (size_t)n)
    return 0;
  int rc = spf_decode(r->buf + SPF_HEADER, n, frame_p, err);
  memmove(r->buf, r->buf + SPF_HEADER + n, r->len - SPF_HEADER - n);
  r->len -= SPF_HEADER + n;
  return rc < 0 ? rc : 1;
}

int spf_decode(const uint8_t *p, uint32_t n, Spcoll__Frame **frame_p,
               spk_err *err) {
  if (n == 0 || n > SPF_FRAME_MAX)
    return spk_err_set(err, SPK_EPROTOCOL,
                       "frame length %u outside 1..%u bytes", n,
                       SPF_FRAME_MAX);
  Spcoll__Frame *f = spcoll__frame__unpack(NULL, n, p);
  if (f == NULL)
    return spk_err_set(err, SPK_EPROTOCOL,
                       "frame of %u bytes is not a valid spcoll.Frame", n);
  /* protobuf-c hands strings over as C strings: a NUL inside one would
   * silently cut it ("job\0x" read as "job"). Such a frame, like any
   * that is not protobuf's own encoding, re-encodes to fewer bytes. */
  size_t again = spcoll__frame__get_packed_size(f);
  if (again != n) {
    spcoll__frame__free_unpacked(f, NULL);
    return spk_err_set(err, SPK_EPROTOCOL,
                       "frame of %u bytes re-encodes to %zu: a string in it "
                       "holds a NUL byte, or it is not a canonical protobuf "
                       "encoding", n, again);
  }
  *frame_p = f;
  return SPK_OK;
}

const char *spf_body_name(Spcoll__Frame__BodyCase body) {
  switch (body) {
  case SPCOLL__FRAME__BODY_HELLO: return "hello";
  case SPCOLL__FRAME__BODY_WELCOME: return "welcome";
  case SPCOLL__FRAME__BODY_ERROR: return "error";
  case SPCOLL__FRAME__BODY_GROUP_JOIN: return "group_join";
  case SPCOLL__FRAME__BODY_GROUP_JOINED: return "group_joined";
  case SPCOLL__FRAME__BODY_GROUP_LEAVE: return "group_leave";
  case SPCOLL__FRAME__BODY_BUF_REGISTER: return "buf_register";
  case SPCOLL__FRAME__BODY_BUF_REGISTERED: return "buf_registered";
  case SPCOLL__FRAME__BODY_BUF_RELEASE: return "buf_release";
  case SPCOLL__FRAME__BODY_OP: return "op";
  case SPCOLL__FRAME__BODY_DONE: return "done";
  case SPCOLL__FRAME__BODY_STATS_REQUEST: return "stats_request";
  case SPCOLL__FRAME__BODY_STATS_REPLY: return "stats_reply";
  case SPCOLL__FRAME__BODY_CONTROL: return "control";
  case SPCOLL__FRAME__BODY_GROUP_SPLIT: return "group_split";
  case SPCOLL__FRAME__BODY_KICK: return "kick";
  default: break;
  }
  return "unknown";
}
