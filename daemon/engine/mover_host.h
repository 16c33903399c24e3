/* The host mover: executes copy plans on worker threads and reports each
 * finished plan back on the loop thread. Tiny plans (64 KiB or less) run
 * on the loop thread at submit instead: the copy costs less than the two
 * thread hand-offs it would otherwise take (see mover_host.c). */
#ifndef SPD_MOVER_HOST_H
#define SPD_MOVER_HOST_H

#include <uv.h>

#include "plan.h"
#include "status.h"

typedef struct spd_mover spd_mover;
typedef void (*spd_mover_done_cb)(void *arg);

/* Start `threads` workers; completions are delivered on loop. */
int spd_mover_start(uv_loop_t *loop, int threads, spd_mover **mover_p,
                    spk_err *err);

/* Queue a plan (loop thread only). bases[rank * SPK_T_COUNT + t] is the
 * address of rank's tensor t. plan and bases must stay valid until cb
 * runs, on the loop thread and never inside this call, even for a plan
 * already executed inline. SPK_ENO_MEMORY when the task list cannot be
 * allocated. */
int spd_mover_submit(spd_mover *mover, const spk_plan *plan,
                     uint8_t *const *bases, spd_mover_done_cb cb, void *arg,
                     spk_err *err);

/* Stop the workers (after every submitted plan completed) and close the
 * loop handle; the mover is freed in the close callback. */
void spd_mover_stop(spd_mover *mover);

#endif
