/* How the NCCL mover runs a plan whose ranks sit on several devices (one
 * NCCL rank per device). A block that stays on its device is copied there;
 * a block that crosses devices is packed into the source device's send
 * area, exchanged with one ncclSend/ncclRecv per device pair and phase,
 * and unpacked from the destination's receive area. A reduce step reads
 * the sources of other devices from its receive area. Also: whether a plan
 * is exactly one NCCL collective. Plain C with no CUDA or NCCL call, so it
 * is unit-tested on the host with memcpy standing in for the exchange. */
#ifndef SPK_GPU_ROUTE_H
#define SPK_GPU_ROUTE_H

#include <stdint.h>

#include "gpu_desc.h"

typedef struct {
  int ndev;
  int self_p2p;           /* route every block through the exchange, even
                           * within a device (NCCL's own path on one GPU) */
  uint64_t *bytes;        /* [phase][s][d]: bytes s sends to d */
  uint64_t *send_off;     /* [phase][s][d]: where in s's send area */
  uint64_t *recv_off;     /* [phase][d][s]: where in d's receive area */
  uint64_t *recv_base;    /* [dev]: the receive area's offset in staging */
  uint64_t *stage_bytes;  /* [dev]: staging bytes (send, then receive) */
  spk_cdesc_list *pack;   /* [phase][dev]: into the send area, before the
                           * exchange */
  spk_cdesc_list *post;   /* [phase][dev]: after it: local copies and
                           * unpacks (phase 1), reduce steps (phase 0) */
} spk_route;

#define SPK_ROUTE_AT(rt, p, a, b) ((((size_t)(p) * (rt)->ndev) + (a)) * \
                                   (rt)->ndev + (b))

/* Size the exchange of plan p: rank_dev[r] is rank r's device index in
 * [0, ndev); the lists are cut in chunks of `chunk` bytes (0: the
 * default). Fills bytes, offsets and stage_bytes; free with
 * spk_route_free even on failure. */
int spk_route_init(spk_route *rt, const spk_plan *p, const int *rank_dev,
                   int ndev, int self_p2p, uint64_t chunk, spk_err *err);

/* Build the descriptor lists, with bases[rank * SPK_T_COUNT + t] the
 * address of rank's tensor t and stage[dev] the address of dev's staging
 * (stage_bytes[dev] bytes; may be NULL when that is 0). */
int spk_route_build(spk_route *rt, const spk_plan *p, uint8_t *const *bases,
                    const int *rank_dev, uint8_t *const *stage, spk_err *err);

void spk_route_free(spk_route *rt);

typedef enum {
  SPK_COLL_NONE = 0,
  SPK_COLL_ALL_GATHER,     /* count: bytes of each rank's input */
  SPK_COLL_ALL_TO_ALL,     /* count: bytes each rank sends each rank */
  SPK_COLL_REDUCE_SCATTER, /* count: bytes of each rank's output */
  SPK_COLL_ALL_REDUCE      /* count: bytes of each tensor */
} spk_coll;

const char *spk_coll_name(spk_coll c);

/* The NCCL collective plan p of op `op` is exactly, with the ranks' tensor
 * sizes in_bytes[r] and out_bytes[r] (rank r being NCCL rank r), or
 * SPK_COLL_NONE. Reductions of 16-bit floats over more than two ranks are
 * never one: NCCL would accumulate them in 16 bits, spcoll in fp32. */
spk_coll spk_route_collective(const spk_plan *p, spk_op_kind op,
                              const uint64_t *in_bytes,
                              const uint64_t *out_bytes, uint64_t *count_p);

#endif
