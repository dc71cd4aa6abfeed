/* tests/cuda_emu/include/cuda_bf16.h — stand-in: bf16 as its 16 bits with
 * the round-to-nearest-even conversions of the real header. */
#ifndef SL_EMU_CUDA_BF16_H
#define SL_EMU_CUDA_BF16_H
#include "sl_emu.h"
struct __nv_bfloat16 {
  unsigned short x;
};
static inline float __bfloat162float(__nv_bfloat16 h) { return __uint_as_float((unsigned)h.x << 16); }
static inline __nv_bfloat16 __float2bfloat16(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return {(unsigned short)((u >> 16) | 0x40u)};
  return {(unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
#endif
