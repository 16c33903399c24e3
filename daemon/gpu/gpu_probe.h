/* What the daemon's build and machine offer for GPU work: logged at start
 * and reported in stats. */
#ifndef SPD_GPU_PROBE_H
#define SPD_GPU_PROBE_H

#include <stddef.h>

#include "daemon.h"

/* One line such as "cuda 13.0 runtime, 0 devices (no driver); nccl 2.28.3"
 * or "cuda: not built". */
void spd_gpu_probe(char *buf, size_t len);

#endif
