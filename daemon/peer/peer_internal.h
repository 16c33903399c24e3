/* State of the peer layer, shared by its files: the transport (peer.c:
 * endpoints, control messages; peer_xfer.c: op data streams), node
 * membership above it (peer_member.c: Hello, heartbeats, up and lost) and
 * their set-up and stop (peer_life.c). Not seen elsewhere: the rest of
 * the daemon includes peer.h, which has no UCX type. */
#ifndef SPD_PEER_INTERNAL_H
#define SPD_PEER_INTERNAL_H

#include <sys/queue.h>
#include <ucp/api/ucp.h>

#include "peer.h"

#define SPD_PEER_PROTOCOL 1
#define SPD_PEER_AM_ID 7

/* The header of every control message (an active message of id
 * SPD_PEER_AM_ID), as the sender wrote it: a peer's word, checked before
 * it is used (spd_peer_on_am). */
typedef struct {
  uint32_t node;              /* the sender's node index */
  uint64_t incarnation;       /* the sender's start: stale senders show */
} spd_am_header;

/* Something a UCX callback saw, handled after progress returns so that
 * no callback sends, closes or frees from inside the worker. */
typedef struct spd_peer_event {
  TAILQ_ENTRY(spd_peer_event) link;
  enum { EV_MSG, EV_EP_ERROR, EV_XFER, EV_XFER_GIVEN_UP } kind;
  int node;
  uint64_t incarnation;       /* of the sender, from the header */
  Spcoll__Peer__Msg *msg;
  ucp_ep_h ep, reply_ep;
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

/* An endpoint a peer made to us, known by node once its Hello came. */
typedef struct spd_in_ep {
  TAILQ_ENTRY(spd_in_ep) link;
  ucp_ep_h ep;
  int node;
} spd_in_ep;

typedef struct {
  struct spd_peers *peers;
  int node;
  ucp_ep_h ep;                /* ours, outgoing; NULL while down */
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
 * it); an endpoint of node failed (why). */
typedef struct spd_peer_member_hooks {
  int (*on_msg)(struct spd_peers *P, spd_peer_event *ev);
  void (*on_lost)(struct spd_peers *P, int node, const char *why);
} spd_peer_member_hooks;

/* Membership's (peer_member.c). */
extern const spd_peer_member_hooks spd_peer_member;

typedef struct spd_peers {
  spd_ctx *ctx;
  spd_peer_hooks hooks;       /* the groups, above the peer layer */
  spd_peer_member_hooks member; /* membership, above the transport */
  ucp_context_h ucp;
  ucp_worker_h worker;
  ucp_listener_h listener;
  uv_poll_t poll;
  uv_timer_t tick;            /* heartbeats, silence, reconnects: 1 s */
  uv_timer_t kick;            /* progress while streams are in flight */
  int handles;                /* libuv handles not yet closed */
  uint64_t incarnation;
  int stopping, progressing;
  int cuda;                   /* UCX moves CUDA memory */
  spd_peer peer[SPD_MAX_NODES];
  TAILQ_HEAD(, spd_in_ep) in_eps;
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
void spd_peer_on_conn_request(ucp_conn_request_h conn, void *arg);
void spd_peer_on_poll(uv_poll_t *h, int status, int events);
void spd_peer_on_tick(uv_timer_t *t);
/* Send m to node now (endpoint made), reply: with a reply endpoint. */
void spd_peer_am_send(spd_peers *P, int node, const Spcoll__Peer__Msg *m,
                      int reply);
/* Make our endpoint to node (P->peer[node].ep); -1 when it could not
 * (logged: the next tick tries again). */
int spd_peer_ep_open(spd_peers *P, int node);
/* node's Hello came on reply_ep: that endpoint is node's, older ones of
 * node are closed. */
void spd_peer_in_ep_claim(spd_peers *P, int node, ucp_ep_h reply_ep);
/* Close the endpoints peers made to us (node < 0: all). */
void spd_peer_in_eps_close(spd_peers *P, int node);
int spd_peer_resolve(const spd_hostport *hp, struct sockaddr_storage *ss,
                     socklen_t *len, char *why, size_t wlen);

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
