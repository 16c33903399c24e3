/* Authentication of peer daemons: the node key every daemon of a cluster
 * shares, the bootstrap handshake that proves it both ways, and the keys
 * of the session it opens (the MAC of each control message, the salt of
 * each data tag). HMAC-SHA256 from OpenSSL's libcrypto. Pure functions
 * of their arguments: no UCX, no libuv, no daemon state.
 *
 * The handshake, over the bootstrap TCP connection that node I (the
 * initiator) makes to node R (the responder it dialed):
 *   I -> R  hello   magic, version, I, R, nonce_i
 *   R -> I  reply   magic, version, R, I, nonce_r, proof_r
 *   I -> R  finish  proof_i
 *   R -> I  address length, R's UCX worker address, MAC of both (session)
 * proof_r and proof_i are HMACs under the node key of distinct labels,
 * both node indices and both nonces: each side proves it holds the key,
 * for this pair and this exchange only (a recorded exchange replays to
 * no one, a proof reflected back fails its label). The session key is a
 * third HMAC of the same: it authenticates every control message node I
 * sends R afterwards (spd_auth_msg_mac) and salts the tags of I's data to
 * R. Nothing is encrypted: see docs/security.md. */
#ifndef SPD_PEER_AUTH_H
#define SPD_PEER_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define SPD_AUTH_KEY_MIN 32
#define SPD_AUTH_KEY_MAX 4096
#define SPD_AUTH_NONCE 32
#define SPD_AUTH_PROOF 32
#define SPD_AUTH_MSG_MAC 16       /* truncated HMAC-SHA256 of a message */
#define SPD_AUTH_VERSION 1
#define SPD_AUTH_HELLO_LEN (16 + SPD_AUTH_NONCE)
#define SPD_AUTH_REPLY_LEN (16 + SPD_AUTH_NONCE + SPD_AUTH_PROOF)
#define SPD_AUTH_FINISH_LEN SPD_AUTH_PROOF
#define SPD_AUTH_ADDR_MAX (64u << 10) /* a UCX worker address, at most */

typedef struct {
  uint8_t key[SPD_AUTH_KEY_MAX];
  size_t len;
} spd_auth_key;

/* What one handshake settled: the two nodes and nonces, and the session
 * key derived from them. */
typedef struct {
  uint32_t initiator, responder;
  uint8_t nonce_i[SPD_AUTH_NONCE], nonce_r[SPD_AUTH_NONCE];
  uint8_t session[32];
} spd_auth_exchange;

/* Big-endian 32-bit words, as every frame of the bootstrap writes them. */
static inline void spd_auth_put32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8), p[3] = (uint8_t)v;
}

static inline uint32_t spd_auth_get32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
         p[3];
}

/* Read the node key from path: a regular file (not a link) of
 * SPD_AUTH_KEY_MIN..MAX bytes, owned by root or the daemon's user,
 * readable by its owner alone. */
int spd_auth_key_load(const char *path, spd_auth_key *k, spk_err *err);

/* A fresh random nonce (getrandom). */
int spd_auth_nonce(uint8_t nonce[SPD_AUTH_NONCE], spk_err *err);

/* Handshake frames, written into out (of exactly their length). */
void spd_auth_hello_write(uint8_t *out, const spd_auth_exchange *x);
int spd_auth_reply_write(uint8_t *out, const spd_auth_key *k,
                         const spd_auth_exchange *x, spk_err *err);
int spd_auth_finish_write(uint8_t *out, const spd_auth_key *k,
                          const spd_auth_exchange *x, spk_err *err);

/* Read a hello that node `self` of `nnodes` received: fills the
 * initiator, responder and nonce_i of x; SPK_EPROTOCOL naming what is
 * wrong (magic, version, a node index). */
int spd_auth_hello_read(const uint8_t *in, uint32_t self, uint32_t nnodes,
                        spd_auth_exchange *x, spk_err *err);
/* Check a reply against the hello x describes (nodes swapped, proof_r
 * under k); fills nonce_r and the session key. */
int spd_auth_reply_read(const uint8_t *in, const spd_auth_key *k,
                        spd_auth_exchange *x, spk_err *err);
/* Check a finish (proof_i) against x, whose nonces are set; fills the
 * session key. */
int spd_auth_finish_read(const uint8_t *in, const spd_auth_key *k,
                         spd_auth_exchange *x, spk_err *err);

/* A session's message MAC, keyed once (what each control message costs:
 * a re-init, not a key schedule). */
typedef struct spd_auth_mac spd_auth_mac;
int spd_auth_mac_open(const uint8_t session[32], spd_auth_mac **m_p);
void spd_auth_mac_close(spd_auth_mac *m); /* NULL: nothing */
/* The MAC of a message's header bytes and body (SPK_ESYSTEM when it
 * could not be computed). */
int spd_auth_mac_sign(spd_auth_mac *m, const void *head, size_t hlen,
                      const void *body, size_t blen,
                      uint8_t mac[SPD_AUTH_MSG_MAC]);
/* 1 when mac is that MAC (compared in constant time); 0 otherwise, and
 * when it could not be computed. */
int spd_auth_mac_check(spd_auth_mac *m, const void *head, size_t hlen,
                       const void *body, size_t blen,
                       const uint8_t mac[SPD_AUTH_MSG_MAC]);

/* The same, once, under a session key (the bootstrap's address frame). */
int spd_auth_msg_mac(const uint8_t session[32], const void *head,
                     size_t hlen, const void *body, size_t blen,
                     uint8_t mac[SPD_AUTH_MSG_MAC]);
int spd_auth_msg_ok(const uint8_t session[32], const void *head, size_t hlen,
                    const void *body, size_t blen,
                    const uint8_t mac[SPD_AUTH_MSG_MAC]);
/* The salt a session's data tags are XORed with: without the session
 * key, no one can name a tag that a receive of that session matches. */
int spd_auth_tag_salt(const uint8_t session[32], uint64_t *salt_p);

#endif
