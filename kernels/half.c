#include "half.h"

/* Out of line (unlike bf16): the subnormal loop is not worth inlining at
 * every call of the host mover's reduce. */
float spk_f16_to_f32(uint16_t h) {
  return spk_bits_f32(spk_f16_to_f32_bits(h));
}

uint16_t spk_f32_to_f16(float f) {
  return spk_f32_bits_to_f16(spk_f32_bits(f));
}
