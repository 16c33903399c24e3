#include "split_rule.h"

int64_t spk_split_size(int64_t n, int world, int rank) {
  return n / world + (rank < n % world ? 1 : 0);
}

int64_t spk_split_offset(int64_t n, int world, int rank) {
  int64_t rem = n % world;
  return (n / world) * rank + (rank < rem ? rank : rem);
}

void spk_split_sizes(int64_t n, int world, int64_t *sizes) {
  for (int r = 0; r < world; r++)
    sizes[r] = spk_split_size(n, world, r);
}
