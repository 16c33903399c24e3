/* What libcuda.so.1's parts (cudrv.c, cudrv_vmm.c) share. */
#ifndef SPCSIM_CUDRV_H
#define SPCSIM_CUDRV_H

#include <cuda.h>

/* The driver's code for a core result (SIM_*); after a device fault, the
 * sticky error whatever the call did (sim_poison). */
CUresult cudrv_result(int e);

#endif
