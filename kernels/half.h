/* IEEE binary16 and bfloat16 <-> float conversions (round to nearest
 * even), so 16-bit sums accumulate in fp32. */
#ifndef SPK_HALF_H
#define SPK_HALF_H

#include <stdint.h>
#include <string.h>

static inline float spk_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t spk_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet, keep sign */
    return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

float spk_f16_to_f32(uint16_t h);
uint16_t spk_f32_to_f16(float f);

#endif
