/* IEEE binary16 and bfloat16 <-> float conversions (round to nearest
 * even), so 16-bit sums accumulate in fp32. The bit work is
 * kernels/half_bits.h, shared with the device code. */
#ifndef SPK_HALF_H
#define SPK_HALF_H

#include <stdint.h>
#include <string.h>

#include "half_bits.h"

static inline float spk_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint32_t spk_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static inline float spk_bf16_to_f32(uint16_t h) {
  return spk_bits_f32(spk_bf16_to_f32_bits(h));
}

static inline uint16_t spk_f32_to_bf16(float f) {
  return spk_f32_bits_to_bf16(spk_f32_bits(f));
}

float spk_f16_to_f32(uint16_t h);
uint16_t spk_f32_to_f16(float f);

#endif
