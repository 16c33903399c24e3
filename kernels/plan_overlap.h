/* Overlapping tensors. Ranks' tensors may share memory (one rank's input
 * and output in one buffer, two clients that registered one memfd). The
 * movers copy with memcpy and run a phase's steps in parallel, so an
 * output that shares bytes with another tensor is only defined where the
 * op defines in place. This check decides, from where each tensor lies,
 * whether a plan is safe to run; it is pure code, shared by the daemon
 * (the authority) and the tests. */
#ifndef SPK_PLAN_OVERLAP_H
#define SPK_PLAN_OVERLAP_H

#include <stdint.h>

#include "plan.h"
#include "types.h"

/* Where one tensor lies. Tensors can share bytes only when their `mem`
 * keys are equal (the daemon keys a host buffer by its memfd's device and
 * inode, so two registrations of one memfd are one memory, and device
 * buffers by one device address space). mem {0, 0}: not on this node or
 * unknown; such a tensor overlaps nothing here. */
typedef struct {
  uint64_t mem[2];
  uint64_t off;     /* first byte of the tensor within mem */
  uint64_t buf;     /* the buffer id, for messages */
} spk_tensor_loc;

/* Check how the tensors of an op overlap; locs[rank * SPK_T_COUNT + t]
 * says where rank's tensor t lies, plan is what spk_plan_build made of
 * args. Inputs may overlap inputs. Outputs may overlap nothing, except in
 * the in-place layouts NCCL also defines, each within one rank:
 *   all_reduce      out_r is in_r (the same bytes);
 *   all_gather      in_r is rank r's slot of out_r, and that slot is
 *                   contiguous (every dim before the gather dim is 1);
 *   reduce_scatter  out_r is rank r's slot of in_r, likewise contiguous.
 * Anything else is SPK_EINVAL naming both tensors, their ranks, buffers
 * and byte ranges. On success the moves that would copy a tensor onto
 * itself (an in-place all_gather's own slot, unscaled) are dropped from
 * the plan, so no mover ever copies between overlapping ranges. */
int spk_plan_overlap(const spk_op_args *const *args, int world,
                     const spk_tensor_loc *locs, spk_plan *plan,
                     spk_err *err);

#endif
