/* Authentication of peer daemons (peer_auth.h): the node key, the
 * handshake's frames and proofs, the session's message MACs and tag
 * salt. */
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/hmac.h>
#include <openssl/params.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "peer_auth.h"

static const uint8_t MAGIC[4] = {'S', 'P', 'C', 'B'};

/* ---- the node key -------------------------------------------------------- */

static int key_file_check(const char *path, const struct stat *st,
                          spk_err *err) {
  if (!S_ISREG(st->st_mode))
    return spk_err_set(err, SPK_EINVAL, "peer key %s is not a regular file",
                       path);
  if (st->st_uid != 0 && st->st_uid != geteuid())
    return spk_err_set(err, SPK_EPERM, "peer key %s belongs to uid %u: it "
                       "must belong to root or to spcolld's user (uid %u)",
                       path, (unsigned)st->st_uid, (unsigned)geteuid());
  if (st->st_mode & 077)
    return spk_err_set(err, SPK_EPERM, "peer key %s has mode %04o: others "
                       "may read it; chmod 600 (or 400) it", path,
                       (unsigned)(st->st_mode & 07777));
  if (st->st_size < SPD_AUTH_KEY_MIN || st->st_size > SPD_AUTH_KEY_MAX)
    return spk_err_set(err, SPK_EINVAL, "peer key %s has %lld bytes, not "
                       "%d..%d (make one: head -c 32 /dev/urandom > %s)",
                       path, (long long)st->st_size, SPD_AUTH_KEY_MIN,
                       SPD_AUTH_KEY_MAX, path);
  return SPK_OK;
}

int spd_auth_key_load(const char *path, spd_auth_key *k, spk_err *err) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return spk_err_set(err, SPK_EINVAL, "open of peer key %s: %s", path,
                       strerror(errno));
  struct stat st;
  int rc = fstat(fd, &st) < 0
               ? spk_err_set(err, SPK_ESYSTEM, "fstat of peer key %s: %s",
                             path, strerror(errno))
               : key_file_check(path, &st, err);
  size_t got = 0;
  while (rc == SPK_OK && got < (size_t)st.st_size) {
    ssize_t n = read(fd, k->key + got, (size_t)st.st_size - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      rc = spk_err_set(err, SPK_ESYSTEM, "read of peer key %s: %s", path,
                       n < 0 ? strerror(errno) : "shorter than its size");
    else
      got += (size_t)n;
  }
  if (close(fd) < 0 && rc == SPK_OK)
    rc = spk_err_set(err, SPK_ESYSTEM, "close of peer key %s: %s", path,
                     strerror(errno));
  k->len = rc == SPK_OK ? got : 0;
  return rc;
}

int spd_auth_nonce(uint8_t nonce[SPD_AUTH_NONCE], spk_err *err) {
  ssize_t n;
  do
    n = getrandom(nonce, SPD_AUTH_NONCE, 0);
  while (n < 0 && errno == EINTR);
  if (n != SPD_AUTH_NONCE)
    return spk_err_set(err, SPK_ESYSTEM, "getrandom of a %d-byte nonce: %s",
                       SPD_AUTH_NONCE, n < 0 ? strerror(errno) : "short");
  return SPK_OK;
}

/* ---- proofs ---------------------------------------------------------------- */

/* HMAC(key, label || initiator || responder || nonce_i || nonce_r). The
 * labels differ per use, so that no value stands in for another. */
static int bound_mac(const uint8_t *key, size_t klen, const char *label,
                     const spd_auth_exchange *x, uint8_t out[32]) {
  uint8_t msg[32 + 8 + 2 * SPD_AUTH_NONCE];
  size_t ll = strlen(label);
  memcpy(msg, label, ll);
  spd_auth_put32(msg + ll, x->initiator);
  spd_auth_put32(msg + ll + 4, x->responder);
  memcpy(msg + ll + 8, x->nonce_i, SPD_AUTH_NONCE);
  memcpy(msg + ll + 8 + SPD_AUTH_NONCE, x->nonce_r, SPD_AUTH_NONCE);
  unsigned olen = 32;
  return HMAC(EVP_sha256(), key, (int)klen, msg, ll + 8 + 2 * SPD_AUTH_NONCE,
              out, &olen) != NULL
             ? SPK_OK
             : SPK_ESYSTEM;
}

#define LABEL_R "spcoll peer responder v1"
#define LABEL_I "spcoll peer initiator v1"
#define LABEL_S "spcoll peer session v1"

static int session_derive(const spd_auth_key *k, spd_auth_exchange *x,
                          spk_err *err) {
  if (bound_mac(k->key, k->len, LABEL_S, x, x->session) < 0)
    return spk_err_set(err, SPK_ESYSTEM, "HMAC-SHA256 of the session key "
                       "failed");
  return SPK_OK;
}

/* ---- frames ---------------------------------------------------------------- */

static void head_write(uint8_t *out, uint32_t from, uint32_t to) {
  memcpy(out, MAGIC, 4);
  spd_auth_put32(out + 4, SPD_AUTH_VERSION);
  spd_auth_put32(out + 8, from);
  spd_auth_put32(out + 12, to);
}

static int head_read(const uint8_t *in, const char *what, spk_err *err) {
  if (memcmp(in, MAGIC, 4) != 0)
    return spk_err_set(err, SPK_EPROTOCOL, "%s: not a spcolld bootstrap "
                       "(bad magic 0x%08x)", what, spd_auth_get32(in));
  if (spd_auth_get32(in + 4) != SPD_AUTH_VERSION)
    return spk_err_set(err, SPK_EVERSION, "%s: bootstrap version %u, we "
                       "speak %d", what, spd_auth_get32(in + 4), SPD_AUTH_VERSION);
  return SPK_OK;
}

void spd_auth_hello_write(uint8_t *out, const spd_auth_exchange *x) {
  head_write(out, x->initiator, x->responder);
  memcpy(out + 16, x->nonce_i, SPD_AUTH_NONCE);
}

int spd_auth_reply_write(uint8_t *out, const spd_auth_key *k,
                         const spd_auth_exchange *x, spk_err *err) {
  head_write(out, x->responder, x->initiator);
  memcpy(out + 16, x->nonce_r, SPD_AUTH_NONCE);
  if (bound_mac(k->key, k->len, LABEL_R, x, out + 16 + SPD_AUTH_NONCE) < 0)
    return spk_err_set(err, SPK_ESYSTEM, "HMAC-SHA256 of the reply failed");
  return SPK_OK;
}

int spd_auth_finish_write(uint8_t *out, const spd_auth_key *k,
                          const spd_auth_exchange *x, spk_err *err) {
  if (bound_mac(k->key, k->len, LABEL_I, x, out) < 0)
    return spk_err_set(err, SPK_ESYSTEM, "HMAC-SHA256 of the finish failed");
  return SPK_OK;
}

int spd_auth_hello_read(const uint8_t *in, uint32_t self, uint32_t nnodes,
                        spd_auth_exchange *x, spk_err *err) {
  int rc = head_read(in, "hello", err);
  if (rc < 0)
    return rc;
  uint32_t from = spd_auth_get32(in + 8), to = spd_auth_get32(in + 12);
  if (to != self)
    return spk_err_set(err, SPK_EPROTOCOL, "hello for node %u, but this is "
                       "node %u", to, self);
  if (from >= nnodes || from == self)
    return spk_err_set(err, SPK_EPROTOCOL, "hello from node %u: not another "
                       "node of the %u in --peers", from, nnodes);
  x->initiator = from;
  x->responder = to;
  memcpy(x->nonce_i, in + 16, SPD_AUTH_NONCE);
  return SPK_OK;
}

static int proof_check(const uint8_t *got, const spd_auth_key *k,
                       const char *label, const spd_auth_exchange *x,
                       const char *who, spk_err *err) {
  uint8_t want[32];
  if (bound_mac(k->key, k->len, label, x, want) < 0)
    return spk_err_set(err, SPK_ESYSTEM, "HMAC-SHA256 of %s's proof failed",
                       who);
  if (CRYPTO_memcmp(got, want, sizeof(want)) != 0)
    return spk_err_set(err, SPK_EPERM, "%s's proof of the node key is wrong "
                       "(a different peer_key_file, or not a spcolld of "
                       "this cluster)", who);
  return SPK_OK;
}

int spd_auth_reply_read(const uint8_t *in, const spd_auth_key *k,
                        spd_auth_exchange *x, spk_err *err) {
  int rc = head_read(in, "reply", err);
  if (rc < 0)
    return rc;
  uint32_t from = spd_auth_get32(in + 8), to = spd_auth_get32(in + 12);
  if (from != x->responder || to != x->initiator)
    return spk_err_set(err, SPK_EPROTOCOL, "reply from node %u to node %u, "
                       "but node %u dialed node %u", from, to, x->initiator,
                       x->responder);
  memcpy(x->nonce_r, in + 16, SPD_AUTH_NONCE);
  rc = proof_check(in + 16 + SPD_AUTH_NONCE, k, LABEL_R, x, "the responder",
                   err);
  return rc == SPK_OK ? session_derive(k, x, err) : rc;
}

int spd_auth_finish_read(const uint8_t *in, const spd_auth_key *k,
                         spd_auth_exchange *x, spk_err *err) {
  int rc = proof_check(in, k, LABEL_I, x, "the initiator", err);
  return rc == SPK_OK ? session_derive(k, x, err) : rc;
}

/* ---- the session ----------------------------------------------------------- */

/* A session's message MAC: HMAC-SHA256 keyed once (EVP_MAC), so that a
 * message costs a re-init with the same key, not HMAC()'s algorithm
 * lookup and key schedule (docs/performance.md, "What peer
 * authentication costs").
 * bench-multinode's baseline daemon (spcolld-noauth, mk/multinode.mk) is
 * built with SPD_PEER_NO_AUTH: every MAC is zeros and every tag salt 0,
 * so that the benchmark shows what they cost. Never installed or tested
 * as the daemon. */
struct spd_auth_mac {
  EVP_MAC_CTX *ctx;
};

int spd_auth_mac_open(const uint8_t session[32], spd_auth_mac **m_p) {
  spd_auth_mac *m = calloc(1, sizeof(*m));
  EVP_MAC *alg = m != NULL ? EVP_MAC_fetch(NULL, "HMAC", NULL) : NULL;
  OSSL_PARAM prm[] = {
      OSSL_PARAM_construct_utf8_string("digest", (char *)"SHA256", 0),
      OSSL_PARAM_construct_end()};
  if (alg != NULL)
    m->ctx = EVP_MAC_CTX_new(alg); /* holds its own reference to alg */
  EVP_MAC_free(alg);
  if (m == NULL || m->ctx == NULL || !EVP_MAC_init(m->ctx, session, 32, prm)) {
    spd_auth_mac_close(m);
    return SPK_ENO_MEMORY;
  }
  *m_p = m;
  return SPK_OK;
}

void spd_auth_mac_close(spd_auth_mac *m) {
  if (m == NULL)
    return;
  EVP_MAC_CTX_free(m->ctx);
  free(m);
}

/* 0 when it could not be computed: then no MAC is given or taken. */
static int mac_full(spd_auth_mac *m, const void *head, size_t hlen,
                    const void *body, size_t blen, uint8_t full[32]) {
#ifdef SPD_PEER_NO_AUTH
  (void)m, (void)head, (void)hlen, (void)body, (void)blen;
  memset(full, 0, 32);
  return 1;
#endif
  size_t olen;
  return EVP_MAC_init(m->ctx, NULL, 0, NULL) &&
         EVP_MAC_update(m->ctx, head, hlen) &&
         EVP_MAC_update(m->ctx, body, blen) &&
         EVP_MAC_final(m->ctx, full, &olen, 32) && olen == 32;
}

int spd_auth_mac_sign(spd_auth_mac *m, const void *head, size_t hlen,
                      const void *body, size_t blen,
                      uint8_t mac[SPD_AUTH_MSG_MAC]) {
  uint8_t full[32];
  if (!mac_full(m, head, hlen, body, blen, full))
    return SPK_ESYSTEM;
  memcpy(mac, full, SPD_AUTH_MSG_MAC);
  return SPK_OK;
}

int spd_auth_mac_check(spd_auth_mac *m, const void *head, size_t hlen,
                       const void *body, size_t blen,
                       const uint8_t mac[SPD_AUTH_MSG_MAC]) {
  uint8_t full[32];
  return mac_full(m, head, hlen, body, blen, full) &&
         CRYPTO_memcmp(full, mac, SPD_AUTH_MSG_MAC) == 0;
}

int spd_auth_msg_mac(const uint8_t session[32], const void *head,
                     size_t hlen, const void *body, size_t blen,
                     uint8_t mac[SPD_AUTH_MSG_MAC]) {
  spd_auth_mac *m = NULL;
  int rc = spd_auth_mac_open(session, &m);
  if (rc == SPK_OK)
    rc = spd_auth_mac_sign(m, head, hlen, body, blen, mac);
  spd_auth_mac_close(m);
  return rc;
}

int spd_auth_msg_ok(const uint8_t session[32], const void *head, size_t hlen,
                    const void *body, size_t blen,
                    const uint8_t mac[SPD_AUTH_MSG_MAC]) {
  spd_auth_mac *m = NULL;
  if (spd_auth_mac_open(session, &m) < 0)
    return 0;
  int ok = spd_auth_mac_check(m, head, hlen, body, blen, mac);
  spd_auth_mac_close(m);
  return ok;
}

int spd_auth_tag_salt(const uint8_t session[32], uint64_t *salt_p) {
#ifdef SPD_PEER_NO_AUTH
  *salt_p = 0;
  return SPK_OK;
#endif
  static const char label[] = "spcoll peer tags v1";
  uint8_t out[32];
  unsigned olen = sizeof(out);
  if (HMAC(EVP_sha256(), session, 32, (const uint8_t *)label,
           sizeof(label) - 1, out, &olen) == NULL)
    return SPK_ESYSTEM;
  uint64_t salt = 0;
  for (int i = 0; i < 8; i++)
    salt = salt << 8 | out[i];
  *salt_p = salt;
  return SPK_OK;
}
