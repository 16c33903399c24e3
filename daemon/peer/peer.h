/* Peer daemons over UCX. One UCP worker, driven by the loop through its
 * event fd; to each other node an outgoing endpoint made through the
 * sockaddr connection manager with error mode PEER; control messages as
 * eager active messages (one protobuf Msg each, in order per endpoint);
 * op data as tagged messages whose iov lists point into the mapped
 * buffers (no staging). A node is up once its Hello came and our endpoint
 * to it works; it is lost on an endpoint error or after peer_timeout
 * seconds of silence (heartbeats go every second), and retried every
 * second after. Loop thread only. */
#ifndef SPD_PEER_H
#define SPD_PEER_H

#include <stddef.h>
#include <stdint.h>

#include "daemon.h"
#include "peer.pb-c.h"

/* What the layer above the peers (groups across nodes, group_peer.c)
 * hears, given at start: a control message from node, node up (its Hello
 * came and our endpoint works), node lost. Loop thread, never from inside
 * a UCX callback. */
typedef struct spd_peer_hooks {
  void (*on_msg)(spd_ctx *ctx, int node, const Spcoll__Peer__Msg *m);
  void (*on_up)(spd_ctx *ctx, int node);
  void (*on_lost)(spd_ctx *ctx, int node, const char *reason);
} spd_peer_hooks;

int spd_peers_start(spd_ctx *ctx, const spd_peer_hooks *hooks, spk_err *err);
/* Stop accepting peer connections (the start of a shutdown). */
void spd_peers_quiesce(spd_ctx *ctx);
/* Close endpoints, listener and worker (at shutdown). */
void spd_peers_stop(spd_ctx *ctx);

/* Upgrade (upgrade.c): the bootstrap listener's socket, to hand to the
 * new daemon (-1: no peers); then this one stops accepting on it (the
 * new one does), its peers hearing the new daemon as this node's restart.
 * The new daemon listens on the socket taken (ctx->taken[2]) instead of
 * binding the port. */
int spd_peers_boot_fd(spd_ctx *ctx);
void spd_peers_boot_give_up(spd_ctx *ctx);

int spd_peers_enabled(const spd_ctx *ctx);
int spd_peer_is_up(const spd_ctx *ctx, int node);
/* How many other nodes are up (authenticated, Hello heard, endpoint
 * made): stats show it. */
int spd_peer_nodes_up(const spd_ctx *ctx);
int spd_peer_self(const spd_ctx *ctx);
int spd_peer_count(const spd_ctx *ctx);
/* Whether this node's UCX moves CUDA memory (ucp_context_query). */
int spd_peer_moves_cuda(const spd_ctx *ctx);

/* Send a control message. To a node that is not up it is dropped: the
 * node hears the state again when it comes up (hooks.on_up). */
void spd_peer_send(spd_ctx *ctx, int node, const Spcoll__Peer__Msg *m);

/* A piece of memory a stream sends from or receives into. */
typedef struct spd_iov {
  void *base;
  size_t len;
} spd_iov;

/* A stream of B bytes travels as ceil(B / SPD_PEER_CHUNK) messages of
 * this many bytes (the last one the rest), one tag, in order: a protocol
 * constant, so the ends agree on the messages whether each moves host
 * memory directly or stages device memory chunk by chunk. */
#define SPD_PEER_CHUNK ((uint64_t)1 << 20)

/* One message of a stream: a tagged message to (recv = 0) or from (recv = 1)
 * node, over the memory iov[0..niov) names (the list itself is copied;
 * the memory must stay valid until cb). cb(arg, status, message) runs
 * once, on the loop thread, and may run inside this call (it runs the
 * worker, which may complete this message and others): count the message
 * before posting it. */
typedef void (*spd_xfer_cb)(void *arg, int status, const char *msg);
int spd_peer_stream(spd_ctx *ctx, int node, int recv, uint64_t tag,
                    const spd_iov *iov, size_t niov, uint64_t bytes,
                    spd_xfer_cb cb, void *arg, spk_err *err);

/* Cancel the open receive whose callback argument is arg (if any). */
void spd_peer_stream_cancel(spd_ctx *ctx, void *arg);

/* Register [base, base + size) with UCX once: the registration is kept in
 * *memh_p (the caller's, NULL while none) until spd_peer_unmap or the
 * peers stop. id names the memory in messages. */
int spd_peer_map(spd_ctx *ctx, void *base, size_t size, uint64_t id,
                 void **memh_p, spk_err *err);
/* Drop the registration in *memh_p (if any), before the memory goes. */
void spd_peer_unmap(spd_ctx *ctx, void **memh_p);

#endif
