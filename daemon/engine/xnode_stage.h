/* Device tensors across nodes, staged through pinned host memory: this
 * site's UCX moves host memory only, so a stream whose pieces lie in
 * device memory travels as its wire chunks (SPD_PEER_CHUNK, peer.h), each
 * copied down into a pinned buffer and sent (or received into one and
 * copied up) on a CUDA stream of the op, SPD_XSTAGE_DEPTH chunks of a
 * stream in flight so the copies overlap the network. The buffers come
 * from the GPU's staging pool, bounded by the xnode_staging_bytes key: an
 * op that would take it past the bound is refused (on every rank: the
 * caller fails the work before posting anything). The staging streams
 * wait for the ranks' ready events, so stream order is kept as on one
 * node. This header needs no CUDA: without it every call says so. Loop
 * thread only. */
#ifndef SPD_XNODE_STAGE_H
#define SPD_XNODE_STAGE_H

#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "peer.h"

#define SPD_XSTAGE_DEPTH 2

typedef struct spd_xstage spd_xstage;
typedef struct spd_xstage_stream spd_xstage_stream;

/* Buffers a stream of `bytes` takes while it runs. */
int spd_xstage_buffers(uint64_t bytes);
/* Staging for work w on GPU dev with nbufs buffers (what its streams
 * running at once take) reserved, CUDA streams ordered after the ranks'
 * ready events. SPK_ENO_MEMORY naming the key when the pool is short. */
int spd_xstage_open(const spd_work *w, int dev, int nbufs,
                    spd_xstage **xs_p, spk_err *err);
/* Device memory on the stage's GPU for a proxy of another node's tensor;
 * freed by spd_xstage_close. */
int spd_xstage_proxy(spd_xstage *xs, size_t bytes, uint8_t **p_out,
                     spk_err *err);
/* Every proxy made: cb(arg, status, msg) once the staging streams have
 * passed the ranks' ready events and the proxies exist, so streams may
 * start (on the loop thread, after this call). */
int spd_xstage_start(spd_xstage *xs, spd_xfer_cb cb, void *arg,
                     spk_err *err);
/* One stream, as spd_peer_stream over iov[0..niov) (device addresses,
 * the list copied): cb(arg, status, msg) once, when every chunk is done
 * (possibly inside this call, as spd_peer_stream's); *st_p names it for
 * spd_xstage_stream_cancel until then. A failure returned is the whole
 * stream's: cb does not run then. */
int spd_xstage_post(spd_xstage *xs, int node, int recv, uint64_t tag,
                      const spd_iov *iov, size_t niov, uint64_t bytes,
                      spd_xfer_cb cb, void *arg, spd_xstage_stream **st_p,
                      spk_err *err);
/* Its node will not take part: no more chunks, the open ones cancelled;
 * cb still runs once, failed. */
void spd_xstage_stream_cancel(spd_xstage_stream *st);
/* Nothing of the stage runs any more: proxies freed in stream order,
 * buffers and streams back to their pools. */
void spd_xstage_close(spd_xstage *xs);

#endif
