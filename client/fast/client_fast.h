/* libspclient's shared-memory fast path (client/fast/), its face to the
 * rest of the library: small host ops of a group whose ranks are all on
 * this node run through the segment the daemon made for it
 * (kernels/fast_seg.h), with no message to the daemon. */
#ifndef SPC_CLIENT_FAST_H
#define SPC_CLIENT_FAST_H

#include <stdint.h>

#include "client_internal.h"

/* Map the group's segment (fd, size bytes, from GroupJoined) and check
 * its header. Takes fd (closed here in every case). */
int spc__fast_attach(spc_group *g, int fd, uint64_t size);

/* Unmap the group's segment; NULL segment is a no-op. */
void spc__fast_detach(spc_group *g);

/* This rank leaves the dead daemon's segment (to rejoin the new daemon,
 * or leaving the group or the client while the daemon is gone): break it (SPC_ERESTARTED, the same words from every rank that does),
 * so that a rank still waiting in one of its ops, which has not seen the
 * daemon go, ends that wait and reconnects too, rather than wait for this
 * one for the op timeout while this one waits for it to rejoin. A
 * segment already broken, or none, is left as it is. */
void spc__fast_leave(spc_group *g);

/* Run op through the segment when every rank can (blocking, as spc_run).
 * *handled_p = 0: some rank cannot, so every rank takes the daemon path
 * and so must the caller; the op keeps its place in the group's order.
 * Otherwise the op is done and the return is its status. It is the fast
 * path's four steps, shaped as an engine's (client_fast.c): fits (may
 * the op run here), publish (this rank's descriptor and input, then
 * every rank's read: all may run it, or all go to the daemon), run (the
 * plan, the moves into this rank's output) and done (said to the others,
 * waited for where buffers are read in place, counted). */
int spc__fast_run(spc_group *g, const spc_op *op, const spc_tensor *in,
                  const spc_tensor *out, int *handled_p);

/* req went to the daemon and the caller is about to block for it: poll
 * the segment's answered word for it for a short while first (the
 * daemon's mid_spin_us, adapted), so a mid-size op's answer finds this
 * rank awake. No-op without a segment. */
void spc__fast_await(spc_group *g, const spc_request *req);

/* c freed a buffer: the other ranks of its groups drop what they mapped
 * of its buffers (client_fast_map.c). */
void spc__fast_freed(spc_client *c);
/* c freed b, a record of caller memory: no group repeats a call naming
 * it. */
void spc__fast_forget(spc_client *c, const spc_buffer *b);

/* g's segment header, NULL without one (for the suites). */
struct spk_fseg_hdr;
const struct spk_fseg_hdr *spc__fast_hdr(const spc_group *g);

/* Tell the other ranks that this rank's next op takes the daemon path
 * (spc_start, device tensors), so that theirs does too. op, in and out
 * are NULL for a request that is no op but keeps an op's place in the
 * group's sequence (a group split). */
int spc__fast_slow(spc_group *g, const spc_op *op, const spc_tensor *in,
                   const spc_tensor *out);

/* Descriptors that came with frames (SCM_RIGHTS), oldest first: the
 * connection stores them, GroupJoined takes one. */
void spc__fd_push(spc_client *c, int fd);
/* GroupJoined announced a segment of size bytes for group_id: keep the
 * oldest descriptor received for it (wanted) or close it (an answer
 * nobody waits for). */
void spc__seg_keep(spc_client *c, int wanted, uint64_t group_id,
                   uint64_t size);
/* Map the segment kept for g's group id into g, if one was announced. */
int spc__seg_claim(spc_group *g);
/* Close every descriptor kept (at disconnect). */
void spc__seg_forget(spc_client *c);

/* Keep the descriptors that came with msg (closing any beyond room). */
struct msghdr;
void spc__fds_take(spc_client *c, struct msghdr *msg);
int spc__fd_pop(spc_client *c);

#endif
