/* What the two files of point-to-point ops share: op_p2p.c (halves,
 * matching, running a pair) and op_p2p_peer.c (pairs whose ranks live on
 * two nodes). Not seen elsewhere: the rest of the daemon includes
 * op_p2p.h. Loop thread only. */
#ifndef SPD_OP_P2P_INTERNAL_H
#define SPD_OP_P2P_INTERNAL_H

#include <stdint.h>
#include <sys/types.h>

#include "buffer.h"
#include "engine.h"
#include "op_p2p.h"

typedef struct spd_p2p_run spd_p2p_run;

/* One rank's send or receive. A rank of this node's (node -1), or a
 * proxy: a send of another node's rank, posted here because its receiver
 * lives here (node >= 0, no session, no buffer). */
typedef struct spd_p2p_half {
  TAILQ_ENTRY(spd_p2p_half) link;
  spd_group *g;
  int send, rank, peer, tag;  /* peer: the other rank; -1 any (receive) */
  spd_session *session;       /* NULL once its client went away */
  uint64_t req, arrived_ns;
  uid_t uid;
  int charged;                /* holds quota of uid (proxies do not) */
  int status;                 /* a local error found at arrival */
  spk_err err;
  spd_buffer *buf;
  uint64_t off;
  spk_op_args args;           /* dtype; shape in `in` (send) or `out` */
  int64_t numel;
  int node;                   /* proxy: its rank's node; -1 here */
  uint64_t id;                /* a send posted to (or from) another node:
                               * its id on the sender's node */
  int posted;                 /* a local send whose receiver's node matches
                               * it: waiting for that node's word */
  spd_p2p_run *run;           /* in p2p_run: the pair it runs in */
} spd_p2p_half;

/* A matched pair running: on one node, both halves; across nodes, this
 * node's half (the other one NULL) and the other half's node. */
struct spd_p2p_run {
  spd_p2p_half *h[2];         /* the send, the receive; NULL: remote */
  int remote;                 /* the other half's node, -1: none */
  int src, dst;
  spk_dtype dtype;
  int64_t numel;
  spk_op_args rargs;          /* the remote half's arguments */
  uint64_t seq;               /* across nodes: the pair's stream number */
  int told;                   /* the remote node knows the pair runs */
  int aborted;                /* the engine was told to stop it */
  int engine_done;            /* the engine finished this node's end */
  int acked;                  /* the sender's end: the receiver's node said
                               * its output holds the data */
  int engine;
  spk_plan plan;
  uint8_t *bases[2 * SPK_T_COUNT];
  int dev[2], node_of[2];
  void *rank_state[2];
  spd_work_rank ranks[2];
  spd_work work;
};

/* op_p2p.c */
/* Answer h's request (a proxy: tell its node); source: a receive's
 * sender. */
void spd_p2p_half_answer(spd_p2p_half *h, int status, const char *msg,
                         int source);
void spd_p2p_half_free(spd_p2p_half *h);
/* The earliest unmatched half that pairs with h, or NULL. */
spd_p2p_half *spd_p2p_match(spd_group *g, const spd_p2p_half *h);
/* A matched send and receive (either may be a proxy): checked, then run
 * (or both answered with the error). Both are off the unmatched lists. */
void spd_p2p_pair_start(spd_group *g, spd_p2p_half *snd, spd_p2p_half *rcv);
/* Run the pair run describes (its halves, remote side, dtype and count
 * set): linked into p2p_run and handed to the engine the table picks.
 * SPK_OK: the engine answers; < 0: nothing started, run freed, its halves
 * still the caller's. */
int spd_p2p_run_start(spd_group *g, spd_p2p_run *run, spk_err *err);

/* Answer the run's halves with status and msg, count it, free it (the
 * group is the caller's to free). */
void spd_p2p_run_end(spd_p2p_run *run, int status, const char *msg);

/* op_p2p_peer.c */
/* A local send h to a rank of another node: posted there (h->posted), and
 * kept in p2p_sends until that node answers. */
void spd_p2p_peer_post(spd_group *g, spd_p2p_half *h);
/* A proxy half is answered: tell its node (status < 0: the error its
 * rank gets). */
void spd_p2p_peer_answer(spd_p2p_half *h, int status, const char *msg);
/* A posted send fails here before its receiver's node matched it: that
 * node drops its proxy. */
void spd_p2p_peer_drop(spd_p2p_half *h, int status, const char *msg);
/* The receiver's side of a pair whose send came from another node: snd
 * is the proxy (freed here), rcv the local receive; both checked. */
void spd_p2p_peer_start(spd_group *g, spd_p2p_half *snd, spd_p2p_half *rcv);
/* The engine finished this node's end of a pair across nodes: 1 while
 * the run must still wait (a send, for its receiver's word); 0: end it
 * now. */
int spd_p2p_peer_ended(spd_p2p_run *run, int status, const char *msg);
/* A cross-node run's engine failed (work.broken). */
void spd_p2p_peer_broken(void *arg, int status, const char *msg, int tell);

/* Why no point-to-point op between ranks a and b (b -1: any) can run in
 * g now (its reason, or msg filled), NULL when it can. */
const char *spd_p2p_closed(const spd_group *g, int a, int b, char *msg,
                           size_t len);

#endif
