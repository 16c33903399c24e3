/* Op times of the fast path's stats (rank 0 times every op it runs).
 * Two clock_gettime calls cost a third of an 8-byte op's own work, so
 * where the kernel keeps time with the TSC (its clocksource is "tsc":
 * constant rate, the same on every CPU) an op is timed with rdtsc and
 * converted at a rate measured against CLOCK_MONOTONIC over the first
 * CALIB_NS of use; until then, and anywhere else, with the clock. */
#include <stdio.h>
#include <string.h>

#include "client_fast_internal.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define HAVE_TSC 1
#else
#define HAVE_TSC 0
#endif

#define CALIB_NS 1000000u /* 1 ms: the rate to 1e-4, plenty for the stats */
#define CLOCKSOURCE "/sys/devices/system/clocksource/clocksource0/" \
                    "current_clocksource"

static uint64_t ticks(void) {
#if HAVE_TSC
  return __rdtsc();
#else
  return 0;
#endif
}

/* Whether the kernel keeps time with the TSC (unreadable: no). */
static int kernel_uses_tsc(void) {
  char name[32] = "";
  FILE *fp = fopen(CLOCKSOURCE, "re");
  if (fp == NULL)
    return 0;
  int ok = fgets(name, sizeof(name), fp) != NULL;
  fclose(fp);
  return ok && strcmp(name, "tsc\n") == 0;
}

void spc__fast_clock_init(spc_fast_clock *k) {
  memset(k, 0, sizeof(*k));
  k->tsc = HAVE_TSC && kernel_uses_tsc();
  k->calib_ns = spc__fast_now_ns();
  k->calib_ticks = ticks();
}

uint64_t spc__fast_clock_stamp(spc_fast_clock *k) {
  if (k->ns_per_tick > 0)
    return ticks();
  k->stamp_ns = spc__fast_now_ns();
  return 0;
}

uint64_t spc__fast_clock_ns(spc_fast_clock *k, uint64_t stamp) {
  if (k->ns_per_tick > 0)
    return (uint64_t)((double)(ticks() - stamp) * k->ns_per_tick);
  uint64_t now = spc__fast_now_ns(), t = ticks();
  /* Calibrated from the next op on: this one was stamped in ns. */
  if (k->tsc && now - k->calib_ns >= CALIB_NS && t > k->calib_ticks)
    k->ns_per_tick = (double)(now - k->calib_ns) /
                     (double)(t - k->calib_ticks);
  return now - k->stamp_ns;
}
