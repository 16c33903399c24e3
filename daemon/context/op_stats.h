/* Per-op-type counters and latency histograms, kept for the daemon as a
 * whole and for each group. Loop thread only. */
#ifndef SPD_OP_STATS_H
#define SPD_OP_STATS_H

#include <stdint.h>

#include "types.h"

/* Bucket i counts latencies below 2^i microseconds (the last one counts
 * the rest): 1 us .. 2^30 us (about 18 minutes). */
#define SPD_LAT_BUCKETS 31
/* Index of the daemon's own group split among the op slots. */
#define SPD_OP_SLOT_GROUP_SPLIT SPK_OP_COUNT
#define SPD_OP_SLOTS (SPK_OP_COUNT + 1)

typedef struct {
  uint64_t count;      /* completed */
  uint64_t errors;     /* failed */
  uint64_t bytes;      /* written by completed ops */
  double seconds;      /* sum of latencies of completed ops */
  uint64_t lat[SPD_LAT_BUCKETS];
} spd_op_stats;

/* Slot of an op kind (unknown kinds share slot 0). */
int spd_op_slot(int kind);
const char *spd_op_slot_name(int slot);

void spd_op_stats_done(spd_op_stats *st, uint64_t bytes, uint64_t ns);
void spd_op_stats_failed(spd_op_stats *st);

/* Latency (seconds) below which a fraction q of completed ops fall: the
 * upper bound of the bucket holding that rank; 0 with no ops. */
double spd_op_stats_quantile(const spd_op_stats *st, double q);

/* Upper bound in seconds of bucket i (for histograms). */
double spd_lat_bucket_le(int i);

#endif
