/* Length-prefixed frames on the control socket: a 4-byte little-endian
 * length, then that many bytes of a protobuf-encoded spcoll.Frame. */
#ifndef SPF_FRAME_H
#define SPF_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "spcoll.pb-c.h"
#include "status.h"

#define SPF_PROTOCOL_VERSION 1
/* The largest frame either side accepts (payload bytes). Requests are a few
 * hundred bytes; the cap bounds what a bad peer can make us allocate. */
#define SPF_FRAME_MAX (1u << 20)
#define SPF_HEADER 4

/* Encode f with its length prefix into a malloc'd buffer. */
int spf_encode(const Spcoll__Frame *f, uint8_t **buf_p, size_t *len_p,
               spk_err *err);

/* Incremental decoder: bytes go in with spf_reader_space/commit, whole
 * frames come out of spf_reader_next. */
typedef struct {
  uint8_t *buf;
  size_t len, cap;
} spf_reader;

void spf_reader_init(spf_reader *r);
void spf_reader_free(spf_reader *r);
/* Room for at least `want` more bytes at *space_p. */
int spf_reader_space(spf_reader *r, size_t want, uint8_t **space_p,
                     size_t *avail_p, spk_err *err);
void spf_reader_commit(spf_reader *r, size_t n);
/* 1 and *frame_p set when a whole frame was decoded (free it with
 * spcoll__frame__free_unpacked), 0 when more bytes are needed, and
 * SPK_EPROTOCOL for a zero or oversized length or undecodable bytes. */
int spf_reader_next(spf_reader *r, Spcoll__Frame **frame_p, spk_err *err);

/* The frame in the n bytes at p (no length prefix), as spf_reader_next
 * decodes one: SPK_EPROTOCOL for what is not a canonical spcoll.Frame. */
int spf_decode(const uint8_t *p, uint32_t n, Spcoll__Frame **frame_p,
               spk_err *err);

const char *spf_body_name(Spcoll__Frame__BodyCase body);

#endif
