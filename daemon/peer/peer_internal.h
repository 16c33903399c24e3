/* State of the peer layer, shared by its files: the bootstrap that
 * authenticates a node and hands over its UCX address (peer_boot.c, with
 * peer_auth.c), the transport (peer.c: endpoints, control messages;
 * peer_xfer.c: op data streams), node membership above it (peer_member.c:
 * Hello, heartbeats, up and lost) and their set-up and stop
 * (peer_life.c). Not seen elsewhere: the rest of
 * the daemon includes peer.h, which has no UCX type. */
#ifndef SPD_PEER_INTERNAL_H
#define SPD_PEER_INTERNAL_H

#include <sys/queue.h>
#include <ucp/api/ucp.h>

#include "peer.h"
#include "peer_auth.h"

#define SPD_PEER_PROTOCOL 2
#define SPD_PEER_AM_ID 7
/* The largest control message taken (an op's Args with its lists are the
 * largest sent); anything longer is dropped before its MAC is computed. */
#define SPD_PEER_MSG_MAX ((size_t)4 << 20)

/* The header of every control message (an active message of id
 * SPD_PEER_AM_ID), as the sender wrote it: nothing in it is used before
 * its MAC, under the session the sender's bootstrap opened, checks out
 * (spd_peer_on_am). */
typedef struct {
  uint32_t node;              /* the sender's node index */
  uint32_t zero;
  uint64_t incarnation;       /* the sender's start: stale senders show */
  uint64_t seq;               /* 1, 2, ... per session: replays show */
  uint8_t mac[SPD_AUTH_MSG_MAC]; /* of the fields above and the body */
} spd_am_header;

/* One direction's session with a node: the MAC keyed with what its
 * bootstrap settled, the next (out) or last (in) message number, the
 * tag salt. */
typedef struct {
  int keyed;
  spd_auth_mac *mac;
  uint64_t seq;
  uint64_t salt;
} spd_peer_session;

/* Key a session with a bootstrap's session key (message numbers start
 * again); clear one (its MAC freed). -1 when the MAC could not be made:
 * the session is then not keyed. */
int spd_peer_session_key(spd_peer_session *s, const uint8_t key[32]);
void spd_peer_session_clear(spd_peer_session *s);

/* Something a UCX callback saw, handled after progress returns so that
 * no callback sends, closes or frees from inside the worker. */
typedef struct spd_peer_event {
  TAILQ_ENTRY(spd_peer_event) link;
  enum { EV_MSG, EV_EP_ERROR, EV_XFER, EV_XFER_GIVEN_UP } kind;
  int node;
  uint64_t incarnation;       /* of the sender, from the header */
  Spcoll__Peer__Msg *msg;
  ucp_ep_h ep;
  int status;
  char why[160];
  struct spd_xfer *xfer;
} spd_peer_event;

typedef struct spd_xfer {
  TAILQ_ENTRY(spd_xfer) link;
  struct spd_peers *peers;
  int node, recv, done;
  uint64_t bytes;
  void *req;
  spd_xfer_cb cb;             /* NULL once its op was told (given up) */
  ucp_dt_iov_t *iov;          /* UCX's copy of the caller's list */
  void *arg;
  int given_up;               /* a send its receiver will never take */
  spd_peer_event ev;          /* its completion, queued without allocating */
  spd_peer_event given_up_ev; /* the op told early, queued likewise */
} spd_xfer;

struct spd_boot_conn;

typedef struct {
  struct spd_peers *peers;
  int node;
  ucp_ep_h ep;                /* ours, outgoing; NULL while down */
  struct spd_boot_conn *dial; /* our bootstrap to it, while under way */
  spd_peer_session out;       /* what we send it (our bootstrap's) */
  spd_peer_session in;        /* what it sends us (its bootstrap's) */
  int up;                     /* Hello heard and ep made */
  int heard;                  /* its Hello came: its messages count */
  int departed;               /* said Bye: wait for its Hello */
  uint64_t incarnation;       /* theirs */
  uint64_t heard_ns, connect_ns;
} spd_peer;

/* A registration spd_peer_map made: where its owner keeps it. */
typedef struct spd_peer_mapped {
  void **memh_p;
  uint64_t id;
} spd_peer_mapped;

struct spd_peers;

/* What the transport tells node membership, set at start (as the groups'
 * spd_peer_hooks are one layer up): a control message of node ev->node
 * came (returns 1 when membership keeps ev, 0 when the transport frees
 * it); an endpoint of node failed (why); our endpoint to node was made
 * (after our bootstrap to it). */
typedef struct spd_peer_member_hooks {
  int (*on_msg)(struct spd_peers *P, spd_peer_event *ev);
  void (*on_lost)(struct spd_peers *P, int node, const char *why);
  void (*on_connected)(struct spd_peers *P, int node);
} spd_peer_member_hooks;

/* Membership's (peer_member.c). */
extern const spd_peer_member_hooks spd_peer_member;

typedef struct spd_peers {
  spd_ctx *ctx;
  spd_peer_hooks hooks;       /* the groups, above the peer layer */
  spd_peer_member_hooks member; /* membership, above the transport */
  ucp_context_h ucp;
  ucp_worker_h worker;
  ucp_address_t *addr;        /* our worker's, handed over by bootstrap */
  size_t addr_len;
  spd_auth_key key;           /* the node key */
  uv_tcp_t boot;              /* the bootstrap's listener */
  int boot_given;             /* handed to a new daemon and closed here */
  TAILQ_HEAD(, spd_boot_conn) boots; /* bootstraps under way */
  int nboots;
  uv_poll_t poll;
  uv_timer_t tick;            /* heartbeats, silence, reconnects: 1 s */
  uv_timer_t kick;            /* progress while streams are in flight */
  int handles;                /* libuv handles not yet closed */
  uint64_t incarnation;
  int stopping, progressing;
  int cuda;                   /* UCX moves CUDA memory */
  spd_peer peer[SPD_MAX_NODES];
  TAILQ_HEAD(, spd_xfer) xfers;
  TAILQ_HEAD(, spd_peer_event) events;
  TAILQ_HEAD(, spd_peer_event) held;  /* messages that overtook a Hello */
  int nheld;
  struct spd_peer_mapped *mapped; /* memory holding a memh */
  size_t nmapped, mapped_cap;
} spd_peers;

/* peer.c's handlers, set up by peer_life.c. */
ucs_status_t spd_peer_on_am(void *arg, const void *header, size_t hlen,
                            void *data, size_t len,
                            const ucp_am_recv_param_t *param);
void spd_peer_on_poll(uv_poll_t *h, int status, int events);
void spd_peer_on_tick(uv_timer_t *t);
/* Send m to node now (endpoint made and session keyed). */
void spd_peer_am_send(spd_peers *P, int node, const Spcoll__Peer__Msg *m);
int spd_peer_resolve(const spd_hostport *hp, struct sockaddr_storage *ss,
                     socklen_t *len, char *why, size_t wlen);

/* The bootstrap (peer_boot.c). Listen at cfg.ucx_listen. */
int spd_peer_boot_listen(spd_peers *P, spk_err *err);
/* Dial node, unless a dial to it is under way; on success
 * spd_peer_ep_made runs. */
void spd_peer_boot_dial(spd_peers *P, int node);
/* Close bootstraps older than their deadline (all: stopping). */
void spd_peer_boot_sweep(spd_peers *P, int all);
/* A refused bootstrap or control message: counted and logged, at most
 * SPD_REFUSED_BURST lines a window. */
void spd_peer_unauthenticated(spd_peers *P, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* What a finished bootstrap gives the transport (peer.c): node proved
 * itself and dialed us (x: its session, for what it sends us); or we
 * dialed node and it gave us its worker address. */
void spd_peer_session_in(spd_peers *P, int node, const spd_auth_exchange *x);
/* (The address carries its own length; the bootstrap MACed it whole.) */
void spd_peer_ep_made(spd_peers *P, int node, const void *addr,
                      const spd_auth_exchange *x);

/* Run the worker until idle, handle what it reported, re-arm its fd. */
void spd_peers_progress(spd_peers *P);
void spd_peer_event_push(spd_peers *P, spd_peer_event *ev);
/* Close an endpoint without waiting for what it still had to send. */
void spd_peer_ep_close(spd_peers *P, ucp_ep_h ep);
/* Cancel the streams of node; their callbacks report status. */
void spd_peer_xfers_cancel(spd_peers *P, int node);
/* 1 when a send to node is still in flight (at a stop: a given-up
 * rendezvous send, which a graceful close would wait on for ever). */
int spd_peer_xfers_stuck(const spd_peers *P, int node);
void spd_peer_xfer_finish(spd_peers *P, spd_xfer *x);
/* A send given up (spd_peer_stream_cancel): its op hears now. */
void spd_peer_xfer_given_up(spd_peers *P, spd_xfer *x);
void spd_peer_unmap_all(spd_peers *P);

#endif
