/* The fast path's thresholds, as the settings give them: queries of the
 * settings struct (config.h), which the fast row (daemon/fast/) reads, so
 * they live with the struct, below every layer. */
#include "config.h"

long long spd_config_fast_limit(const spd_config *cfg, int kind) {
  long long v = kind >= 0 && kind < SPK_OP_COUNT ? cfg->fast_op_bytes[kind]
                                                 : -1;
  return v >= 0 ? v : cfg->fast_bytes;
}

long long spd_config_fast_stage(const spd_config *cfg) {
  long long m = 0;
  for (int k = 0; k < SPK_OP_COUNT; k++)
    if (spd_config_fast_limit(cfg, k) > m)
      m = spd_config_fast_limit(cfg, k);
  return m;
}
