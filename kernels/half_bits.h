/* IEEE binary16 and bfloat16 <-> float conversions on the bits (round to
 * nearest even; NaNs kept quiet with their sign), written once for the
 * host (kernels/half.[ch]: the host mover, the planners' tests, the GPU
 * simulator) and the device (daemon/gpu/plan_cuda.cu): a device result must
 * equal the host mover's bit for bit, NaN payloads included, which the
 * hardware's own conversions do not promise. */
#ifndef SPK_HALF_BITS_H
#define SPK_HALF_BITS_H

#include <stdint.h>

#ifdef __CUDACC__
#define SPK_HD static __host__ __device__ __forceinline__
#else
#define SPK_HD static inline
#endif

SPK_HD uint32_t spk_f16_to_f32_bits(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f)
    return sign | 0x7f800000u | (man << 13);         /* inf, NaN */
  if (exp != 0)
    return sign | ((exp + 112u) << 23) | (man << 13); /* normal */
  if (man == 0)
    return sign;                                      /* zero */
  exp = 113;                                          /* subnormal */
  while (!(man & 0x400u)) {
    man <<= 1;
    exp--;
  }
  return sign | (exp << 23) | ((man & 0x3ffu) << 13);
}

SPK_HD uint16_t spk_f32_bits_to_f16(uint32_t u) {
  uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)
    return sign | 0x7e00u;                           /* NaN */
  if (a >= 0x477ff000u)
    return sign | 0x7c00u;                           /* overflow to inf */
  if (a < 0x38800000u) {                             /* subnormal or zero */
    if (a < 0x33000000u)
      return sign;
    uint32_t man = (a & 0x7fffffu) | 0x800000u;
    int shift = 126 - (int)(a >> 23);                /* 14..24 */
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

SPK_HD uint32_t spk_bf16_to_f32_bits(uint16_t h) {
  return (uint32_t)h << 16;
}

SPK_HD uint16_t spk_f32_bits_to_bf16(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet, keep sign */
    return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

#undef SPK_HD

#endif
