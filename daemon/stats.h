/* The daemon's counters as stable "name value" lines. */
#ifndef SPD_STATS_H
#define SPD_STATS_H

#include "daemon.h"

/* malloc'd text; NULL when out of memory. */
char *spd_stats_text(spd_ctx *ctx);

#endif
