#include "half.h"

float spk_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13);         /* inf, NaN */
  } else if (exp != 0) {
    u = sign | ((exp + 112u) << 23) | (man << 13); /* normal */
  } else if (man == 0) {
    u = sign;                                      /* zero */
  } else {                                         /* subnormal: normalize */
    exp = 113;
    while (!(man & 0x400u)) {
      man <<= 1;
      exp--;
    }
    u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

uint16_t spk_f32_to_f16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)
    return sign | 0x7e00u;                         /* NaN */
  if (a >= 0x477ff000u)
    return sign | 0x7c00u;                         /* overflow to inf */
  if (a < 0x38800000u) {                           /* subnormal or zero */
    if (a < 0x33000000u)
      return sign;
    uint32_t man = (a & 0x7fffffu) | 0x800000u;
    int shift = 126 - (int)(a >> 23);              /* 14..24 */
    uint32_t half = 1u << (shift - 1), rest = man & ((1u << shift) - 1);
    uint32_t h = man >> shift;
    if (rest > half || (rest == half && (h & 1u)))
      h++;
    return sign | (uint16_t)h;
  }
  uint32_t h = ((a >> 13) - (112u << 10));
  uint32_t rest = a & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
    h++;
  return sign | (uint16_t)h;
}
