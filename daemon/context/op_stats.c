#include "op_stats.h"

int spd_op_slot(int kind) {
  return kind > 0 && kind < SPK_OP_COUNT ? kind : 0;
}

const char *spd_op_slot_name(int slot) {
  if (slot == SPD_OP_SLOT_GROUP_SPLIT)
    return "group_split";
  return slot == 0 ? "unknown" : spk_op_name((spk_op_kind)slot);
}

double spd_lat_bucket_le(int i) {
  return (double)(1ull << i) * 1e-6;
}

void spd_op_stats_done(spd_op_stats *st, uint64_t bytes, uint64_t ns) {
  uint64_t us = ns / 1000;
  int b = 0;
  while (b < SPD_LAT_BUCKETS - 1 && us >= (1ull << b))
    b++;
  st->count++;
  st->bytes += bytes;
  st->seconds += (double)ns * 1e-9;
  st->lat[b]++;
}

void spd_op_stats_failed(spd_op_stats *st) {
  st->errors++;
}

double spd_op_stats_quantile(const spd_op_stats *st, double q) {
  if (st->count == 0)
    return 0;
  uint64_t want = (uint64_t)(q * (double)st->count + 0.5), seen = 0;
  if (want < 1)
    want = 1;
  for (int b = 0; b < SPD_LAT_BUCKETS; b++) {
    seen += st->lat[b];
    if (seen >= want)
      return spd_lat_bucket_le(b);
  }
  return spd_lat_bucket_le(SPD_LAT_BUCKETS - 1);
}
