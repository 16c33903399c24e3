/* Point-to-point ops of a group (issue 14): a send to a rank and a
 * receive from a rank (or from any), matched per (group, source,
 * destination, tag) in the order each rank posted them, checked against
 * each other (dtype, element count) and copied by the engine the table
 * picks. Same errors and bounds as collectives: the op timeout, a lost
 * rank, abort and drain reach unmatched halves; quotas count them. In a
 * group spanning nodes, a pair of one node runs as above; a pair across
 * nodes is matched on its receiver's node, which its sender's node posts
 * each send to, and moved as one UCX stream (op_p2p_peer.c). Loop thread
 * only. */
#ifndef SPD_OP_P2P_H
#define SPD_OP_P2P_H

#include <stdint.h>

#include "group.h"
#include "peer.pb-c.h"

/* Rank's P2p request rq (id req) on g. Answered now when refused. */
void spd_p2p_arrive(spd_group *g, int rank, spd_session *s, uint64_t req,
                    const Spcoll__P2p *rq);

/* Fail every unmatched half of g with status and msg (pairs in an engine
 * finish). */
void spd_p2p_fail_pending(spd_group *g, int status, const char *msg);
/* Rank left: its pending halves and those waiting on it fail; pairs of
 * the ranks that stayed go on. */
void spd_p2p_fail_rank(spd_group *g, int rank, int status, const char *msg);

/* rank leaves g: its halves in an engine stop referring to its session
 * (told first when it merely left: lost = 0). */
void spd_p2p_forget_rank(spd_group *g, int rank, int lost);

/* An unmatched half older than the group's op timeout fails the group,
 * naming the rank that never posted the other half. */
void spd_p2p_tick(spd_group *g, uint64_t now);

/* Across nodes (op_p2p_peer.c): a message of node about a pair of g; a
 * lost node's running pairs fail with msg (its unmatched halves fail with
 * the group's other pending ops). */
void spd_p2p_peer_msg(spd_group *g, int node, const Spcoll__Peer__P2p *m);
void spd_p2p_node_lost(spd_group *g, int node, const char *msg);

/* 1 while g has P2P halves not yet answered (the drain waits for them). */
int spd_p2p_busy(const spd_group *g);

#endif
