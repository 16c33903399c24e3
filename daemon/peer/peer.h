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

#include <ucp/api/ucp.h>

#include "buffer.h"
#include "daemon.h"
#include "peer.pb-c.h"

int spd_peers_start(spd_ctx *ctx, spk_err *err);
/* Stop accepting peer connections (the start of a shutdown). */
void spd_peers_quiesce(spd_ctx *ctx);
/* Close endpoints, listener and worker (at shutdown). */
void spd_peers_stop(spd_ctx *ctx);

int spd_peers_enabled(const spd_ctx *ctx);
int spd_peer_is_up(const spd_ctx *ctx, int node);
int spd_peer_self(const spd_ctx *ctx);
int spd_peer_count(const spd_ctx *ctx);

/* Send a control message. To a node that is not up it is dropped: the
 * node hears the state again when it comes up (spd_peers_on_up). */
void spd_peer_send(spd_ctx *ctx, int node, const Spcoll__Peer__Msg *m);

/* One stream of an op: a tagged message to (recv = 0) or from (recv = 1)
 * node, over an iov list that must stay valid until cb. cb(arg, status,
 * message) runs once, on the loop thread, never from inside this call. */
typedef void (*spd_xfer_cb)(void *arg, int status, const char *msg);
int spd_peer_stream(spd_ctx *ctx, int node, int recv, uint64_t tag,
                    ucp_dt_iov_t *iov, size_t niov, uint64_t bytes,
                    spd_xfer_cb cb, void *arg, spk_err *err);

/* Cancel the open receive whose callback argument is arg (if any). */
void spd_peer_stream_cancel(spd_ctx *ctx, void *arg);

/* Register buf with UCX once (kept in buf->peer_memh). */
int spd_peer_map(spd_ctx *ctx, spd_buffer *buf, spk_err *err);

/* Upcalls into the group layer (group_peer.c). */
void spd_peers_on_msg(spd_ctx *ctx, int node, const Spcoll__Peer__Msg *m);
void spd_peers_on_up(spd_ctx *ctx, int node);
void spd_peers_on_lost(spd_ctx *ctx, int node, const char *reason);

#endif
