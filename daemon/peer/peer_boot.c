/* The peers' bootstrap: how daemons authenticate each other before UCX
 * carries anything. Each daemon listens on its --peers address (TCP,
 * libuv; nothing of UCX listens for connections). To reach node R, node
 * I dials it and they run the handshake of peer_auth.h; R then sends its
 * UCX worker address under the session's MAC, and I makes its endpoint
 * from it (spd_peer_ep_made), while R keeps the session to check what I
 * sends (spd_peer_session_in). Each direction has its own bootstrap.
 *
 * Against strangers: a connection reads exactly what its next step
 * needs, a frame of fixed length or an address of at most
 * SPD_AUTH_ADDR_MAX bytes; it lives at most SPD_BOOT_DEADLINE_S seconds;
 * at most SPD_BOOT_MAX are under way (more are closed at once); a failed
 * one is counted in peer_unauthenticated and logged (rate-limited), with
 * the address it came from. No byte of it reaches UCX, the groups or the
 * ops unless its proof checked out. Loop thread only. */
#include <arpa/inet.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "peer_internal.h"

#define SPD_BOOT_DEADLINE_S 5
#define SPD_BOOT_MAX 64

enum boot_step { READ_HELLO, READ_REPLY, READ_FINISH, READ_ALEN, READ_ADDR };

typedef struct spd_boot_conn {
  TAILQ_ENTRY(spd_boot_conn) link;
  uv_tcp_t tcp;
  uv_connect_t connect;
  spd_peers *P;              /* NULL once closing */
  int node;                  /* the node dialed; -1 for one accepted */
  enum boot_step step;
  uint8_t *buf;              /* what this step has read */
  size_t want, have;
  spd_auth_exchange x;
  uint64_t started_ns;
  int connected;             /* a dial: the TCP connection is made */
  char from[64];             /* the other end, for the log */
} spd_boot_conn;

typedef struct {
  uv_write_t req;
  int close_after;           /* the last frame: close once written */
  uint8_t data[];
} boot_write;

static void conn_closed(uv_handle_t *h) {
  spd_boot_conn *c = h->data;
  free(c->buf);
  OPENSSL_cleanse(&c->x, sizeof(c->x));
  free(c);
}

/* End a bootstrap (done or refused): it leaves the peer state at once;
 * libuv's callbacks still to come see c->P == NULL. */
static void conn_close(spd_boot_conn *c) {
  spd_peers *P = c->P;
  if (P == NULL)
    return;
  TAILQ_REMOVE(&P->boots, c, link);
  P->nboots--;
  if (c->node >= 0 && P->peer[c->node].dial == c)
    P->peer[c->node].dial = NULL;
  c->P = NULL;
  uv_close((uv_handle_t *)&c->tcp, conn_closed);
}

static void conn_refuse(spd_boot_conn *c, const char *why) {
  if (c->node >= 0)
    spd_peer_unauthenticated(c->P, "bootstrap to node %d (%s): %s", c->node,
                             c->from, why);
  else
    spd_peer_unauthenticated(c->P, "bootstrap from %s: %s", c->from, why);
  conn_close(c);
}

/* The next step reads exactly want bytes. */
static int conn_expect(spd_boot_conn *c, enum boot_step step, size_t want) {
  uint8_t *b = realloc(c->buf, want);
  if (b == NULL)
    return -1;
  c->buf = b;
  c->step = step;
  c->want = want;
  c->have = 0;
  return 0;
}

static void on_written(uv_write_t *req, int status) {
  boot_write *w = (boot_write *)req;
  spd_boot_conn *c = req->data;
  int close_after = w->close_after;
  free(w);
  if (c->P == NULL)
    return;
  if (status < 0)
    conn_refuse(c, uv_strerror(status));
  else if (close_after)
    conn_close(c);
}

static int conn_send(spd_boot_conn *c, const void *a, size_t alen,
                     const void *b, size_t blen, int close_after) {
  boot_write *w = malloc(sizeof(*w) + alen + blen);
  if (w == NULL)
    return -1;
  memcpy(w->data, a, alen);
  if (blen > 0)
    memcpy(w->data + alen, b, blen);
  w->close_after = close_after;
  w->req.data = c;
  uv_buf_t buf = uv_buf_init((char *)w->data, (unsigned)(alen + blen));
  int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &buf, 1, on_written);
  if (rc < 0) {
    free(w);
    return -1;
  }
  return 0;
}

/* ---- the responder's steps ------------------------------------------------- */

static void got_hello(spd_boot_conn *c) {
  spd_peers *P = c->P;
  spk_err err;
  uint8_t reply[SPD_AUTH_REPLY_LEN];
  int rc = spd_auth_hello_read(c->buf, (uint32_t)P->ctx->cfg.node_index,
                               (uint32_t)P->ctx->cfg.npeers, &c->x, &err);
  if (rc == SPK_OK)
    rc = spd_auth_nonce(c->x.nonce_r, &err);
  if (rc == SPK_OK)
    rc = spd_auth_reply_write(reply, &P->key, &c->x, &err);
  if (rc < 0)
    return conn_refuse(c, err.msg);
  if (conn_send(c, reply, sizeof(reply), NULL, 0, 0) < 0 ||
      conn_expect(c, READ_FINISH, SPD_AUTH_FINISH_LEN) < 0)
    conn_refuse(c, "out of memory, or the reply could not be written");
}

/* The initiator proved itself: its session counts from now on, and it
 * gets our worker address (length, address, MAC of both). */
static void got_finish(spd_boot_conn *c) {
  spd_peers *P = c->P;
  spk_err err;
  if (spd_auth_finish_read(c->buf, &P->key, &c->x, &err) < 0)
    return conn_refuse(c, err.msg);
  /* Nothing more is read: what the initiator may still send is not a
   * step of ours. */
  uv_read_stop((uv_stream_t *)&c->tcp);
  uint8_t head[4], mac[SPD_AUTH_MSG_MAC];
  spd_auth_put32(head, (uint32_t)P->addr_len);
  if (spd_auth_msg_mac(c->x.session, head, sizeof(head), P->addr,
                       P->addr_len, mac) < 0 ||
      conn_send(c, head, sizeof(head), P->addr, P->addr_len, 0) < 0 ||
      conn_send(c, mac, sizeof(mac), NULL, 0, 1) < 0)
    return conn_refuse(c, "out of memory, or the address could not be "
                          "written");
  SPD_DEBUG(&P->ctx->log, "node %u authenticated (bootstrap from %s)",
            c->x.initiator, c->from);
  spd_peer_session_in(P, (int)c->x.initiator, &c->x);
}

/* ---- the initiator's steps ------------------------------------------------- */

static void got_reply(spd_boot_conn *c) {
  spd_peers *P = c->P;
  spk_err err;
  uint8_t finish[SPD_AUTH_FINISH_LEN];
  int rc = spd_auth_reply_read(c->buf, &P->key, &c->x, &err);
  if (rc == SPK_OK)
    rc = spd_auth_finish_write(finish, &P->key, &c->x, &err);
  if (rc < 0)
    return conn_refuse(c, err.msg);
  if (conn_send(c, finish, sizeof(finish), NULL, 0, 0) < 0 ||
      conn_expect(c, READ_ALEN, 4) < 0)
    conn_refuse(c, "out of memory, or the finish could not be written");
}

static void got_alen(spd_boot_conn *c) {
  uint32_t len = spd_auth_get32(c->buf);
  if (len == 0 || len > SPD_AUTH_ADDR_MAX) {
    char why[96];
    snprintf(why, sizeof(why), "a worker address of %u bytes (1..%u)", len,
             SPD_AUTH_ADDR_MAX);
    return conn_refuse(c, why);
  }
  if (conn_expect(c, READ_ADDR, 4 + len + SPD_AUTH_MSG_MAC) < 0)
    return conn_refuse(c, "out of memory");
  spd_auth_put32(c->buf, len);
  c->have = 4;
}

static void got_addr(spd_boot_conn *c) {
  spd_peers *P = c->P;
  size_t len = c->want - 4 - SPD_AUTH_MSG_MAC;
  if (!spd_auth_msg_ok(c->x.session, c->buf, 4, c->buf + 4, len,
                       c->buf + 4 + len))
    return conn_refuse(c, "the worker address's MAC is wrong");
  SPD_DEBUG(&P->ctx->log, "node %d authenticated (our bootstrap to %s)",
            c->node, c->from);
  spd_peer_ep_made(P, c->node, c->buf + 4, &c->x);
  conn_close(c);
}

static void step(spd_boot_conn *c) {
  switch (c->step) {
  case READ_HELLO: got_hello(c); break;
  case READ_FINISH: got_finish(c); break;
  case READ_REPLY: got_reply(c); break;
  case READ_ALEN: got_alen(c); break;
  case READ_ADDR: got_addr(c); break;
  }
}

/* ---- reading ---------------------------------------------------------------- */

/* Room for exactly what the step still needs: a stranger cannot make a
 * bootstrap read more than its frames. */
static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf) {
  spd_boot_conn *c = h->data;
  (void)hint;
  *buf = uv_buf_init((char *)c->buf + c->have, (unsigned)(c->want - c->have));
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  spd_boot_conn *c = s->data;
  (void)buf;
  if (c->P == NULL || n == 0)
    return;
  if (n < 0)
    return conn_refuse(c, n == UV_EOF ? "closed before the handshake ended"
                                      : uv_strerror((int)n));
  c->have += (size_t)n;
  if (c->have == c->want)
    step(c);
}

static spd_boot_conn *conn_new(spd_peers *P, int node) {
  spd_boot_conn *c = calloc(1, sizeof(*c));
  if (c == NULL)
    return NULL;
  if (uv_tcp_init(P->ctx->loop, &c->tcp) < 0) {
    free(c);
    return NULL;
  }
  c->tcp.data = c;
  c->P = P;
  c->node = node;
  c->started_ns = spd_now_ns();
  snprintf(c->from, sizeof(c->from), "?");
  TAILQ_INSERT_TAIL(&P->boots, c, link);
  P->nboots++;
  return c;
}

static void name_peer(spd_boot_conn *c) {
  struct sockaddr_storage ss;
  int len = sizeof(ss);
  char host[INET6_ADDRSTRLEN] = "?";
  if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) < 0)
    return;
  int port = 0;
  if (ss.ss_family == AF_INET) {
    struct sockaddr_in *a = (struct sockaddr_in *)&ss;
    uv_ip4_name(a, host, sizeof(host));
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
    uv_ip6_name(a, host, sizeof(host));
    port = ntohs(a->sin6_port);
  }
  snprintf(c->from, sizeof(c->from), "%s:%d", host, port);
}

/* ---- accepting -------------------------------------------------------------- */

static void on_connection(uv_stream_t *server, int status) {
  spd_peers *P = server->data;
  if (status < 0) {
    SPD_WARN(&P->ctx->log, "bootstrap listener: %s", uv_strerror(status));
    return;
  }
  spd_boot_conn *c = conn_new(P, -1);
  if (c == NULL) {
    SPD_ERROR(&P->ctx->log, "bootstrap connection: out of memory");
    return;
  }
  if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0)
    return conn_close(c);
  name_peer(c);
  if (P->stopping)
    return conn_close(c);
  if (P->nboots > SPD_BOOT_MAX)
    return conn_refuse(c, "too many bootstraps under way");
  if (conn_expect(c, READ_HELLO, SPD_AUTH_HELLO_LEN) < 0 ||
      uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
    conn_refuse(c, "out of memory, or uv_read_start failed");
}

int spd_peer_boot_listen(spd_peers *P, spk_err *err) {
  const spd_hostport *hp = &P->ctx->cfg.ucx_listen;
  struct sockaddr_storage ss;
  socklen_t slen;
  char why[160];
  int rc, taken = P->ctx->taken[2];
  if (taken >= 0) { /* the running daemon's (--upgrade) */
    P->ctx->taken[2] = -1;
    if ((rc = uv_tcp_open(&P->boot, taken)) < 0)
      close(taken);
  } else if (spd_peer_resolve(hp, &ss, &slen, why, sizeof(why)) < 0) {
    return spk_err_set(err, SPK_EINVAL, "ucx_listen: %s", why);
  } else {
    rc = uv_tcp_bind(&P->boot, (struct sockaddr *)&ss, 0);
  }
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)&P->boot, SPD_BOOT_MAX, on_connection);
  if (rc < 0)
    return spk_err_set(err, SPK_ESYSTEM, "peers' bootstrap: listen on %s:%d: "
                       "%s", hp->host, hp->port, uv_strerror(rc));
  return SPK_OK;
}

/* ---- dialing ---------------------------------------------------------------- */

static void on_connect(uv_connect_t *req, int status) {
  spd_boot_conn *c = req->data;
  if (c->P == NULL)
    return;
  if (status < 0) {
    /* Not there (yet): not an attack, the next tick dials again. */
    SPD_DEBUG(&c->P->ctx->log, "bootstrap to node %d (%s): %s", c->node,
              c->from, uv_strerror(status));
    return conn_close(c);
  }
  c->connected = 1;
  uint8_t hello[SPD_AUTH_HELLO_LEN];
  spk_err err;
  if (spd_auth_nonce(c->x.nonce_i, &err) < 0)
    return conn_refuse(c, err.msg);
  spd_auth_hello_write(hello, &c->x);
  if (conn_send(c, hello, sizeof(hello), NULL, 0, 0) < 0 ||
      conn_expect(c, READ_REPLY, SPD_AUTH_REPLY_LEN) < 0 ||
      uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
    conn_refuse(c, "out of memory, or the hello could not be written");
}

void spd_peer_boot_dial(spd_peers *P, int node) {
  spd_peer *p = &P->peer[node];
  if (p->dial != NULL || P->stopping)
    return;
  const spd_hostport *hp = &P->ctx->cfg.peers[node];
  struct sockaddr_storage ss;
  socklen_t slen;
  char why[160];
  if (spd_peer_resolve(hp, &ss, &slen, why, sizeof(why)) < 0) {
    SPD_WARN(&P->ctx->log, "node %d: %s", node, why);
    return;
  }
  spd_boot_conn *c = conn_new(P, node);
  if (c == NULL) {
    SPD_ERROR(&P->ctx->log, "bootstrap to node %d: out of memory", node);
    return;
  }
  snprintf(c->from, sizeof(c->from), "%s:%d", hp->host, hp->port);
  c->x.initiator = (uint32_t)P->ctx->cfg.node_index;
  c->x.responder = (uint32_t)node;
  c->connect.data = c;
  p->dial = c;
  int rc = uv_tcp_connect(&c->connect, &c->tcp, (struct sockaddr *)&ss,
                          on_connect);
  if (rc < 0) {
    SPD_DEBUG(&P->ctx->log, "bootstrap to node %d (%s): %s", node, c->from,
              uv_strerror(rc));
    conn_close(c);
  }
}

void spd_peer_boot_sweep(spd_peers *P, int all) {
  uint64_t limit = (uint64_t)SPD_BOOT_DEADLINE_S * 1000000000u;
  uint64_t now = spd_now_ns();
  spd_boot_conn *c = TAILQ_FIRST(&P->boots), *next;
  for (; c != NULL; c = next) {
    next = TAILQ_NEXT(c, link);
    if (all) {
      conn_close(c);
    } else if (now - c->started_ns <= limit) {
      continue;
    } else if (c->node >= 0 && !c->connected) {
      SPD_DEBUG(&P->ctx->log, "bootstrap to node %d (%s): no connection "
                "within %d s", c->node, c->from, SPD_BOOT_DEADLINE_S);
      conn_close(c);
    } else {
      conn_refuse(c, "the handshake did not end within 5 s");
    }
  }
}
