/* Cutting a plan across nodes. node_of[rank] says which node holds each
 * rank's tensors. Every node cuts the same plan the same way, so the pieces
 * of a stream (one direction of one phase between two nodes) are listed in
 * the same order at both of its ends, so a stream's bytes are one ordered
 * sequence (on the wire, messages of SPD_PEER_CHUNK bytes).
 *
 * Phase 0 carries the sources of reduce steps to the node of their
 * destination; phase 1 carries moves. A node runs: phase-0 streams, its
 * local[0] plan (its reduce steps), phase-1 streams, its local[1] plan.
 * Unscaled moves land straight in their destination ("direct"); the
 * sources of reduce steps and of scaled moves land in a proxy of the
 * remote tensor, at the source's own offsets, and run locally. A source
 * span goes to a node once: other moves of it to ranks of that node are
 * local copies there (from where it landed, or from the proxy). */
#ifndef SPK_PLAN_CUT_H
#define SPK_PLAN_CUT_H

#include "plan.h"

enum { SPK_PIECE_MOVE = 0, SPK_PIECE_RSRC = 1 };

typedef struct {
  uint8_t kind;
  uint32_t index;            /* the move, or the reduce step */
  uint32_t src;              /* SPK_PIECE_RSRC: index into plan->rsrcs */
} spk_piece;

typedef struct {
  spk_piece *pieces;
  size_t npieces, cap;
  uint64_t bytes;
} spk_stream;

typedef struct {
  int nnodes, self;
  int direct;                /* unscaled plan: moves land in place */
  spk_stream *send[2];       /* [phase][node]; the self entry stays empty */
  spk_stream *recv[2];
  spk_plan local[2];         /* reduce steps, then moves, run on self */
  uint8_t *proxy;            /* [rank * SPK_T_COUNT + t]: 1 when a remote
                              * tensor needs a proxy here */
} spk_cut;

/* One side of a piece: a strided span of rank's tensor t. */
typedef struct {
  uint32_t rank;
  uint8_t t, nd;
  uint64_t off;
  const uint64_t *len, *stride;
} spk_span;

int spk_plan_cut(const spk_plan *plan, const int *node_of, int nnodes,
                 int self, spk_cut *cut, spk_err *err);
void spk_cut_free(spk_cut *cut);

/* Where piece p is read on its sending node (recv_side = 0) or written on
 * its receiving node (1). */
void spk_piece_span(const spk_plan *plan, const spk_cut *cut,
                    const spk_piece *p, int recv_side, spk_span *span);

/* Call fn(arg, ptr, len) for each contiguous run of span over base, in
 * C order, runs that touch merged. Returns the number of calls. */
typedef void (*spk_run_fn)(void *arg, uint8_t *ptr, uint64_t len);
uint64_t spk_span_walk(const spk_span *span, uint8_t *base, spk_run_fn fn,
                       void *arg);

#endif
