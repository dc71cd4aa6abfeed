/* kernels/cpu/mamba_math.h — the scalar helpers the CPU Mamba kernels share
 * (kernels/cpu/mamba.c: Mamba v1's scan; kernels/cpu/mamba2.c: the Mamba-2
 * SSD scan): sigmoid, PyTorch's softplus and its derivative, and a
 * vectorisable expf. static inline: each kernel file gets its own copy. */
#ifndef SL_CPU_MAMBA_MATH_H
#define SL_CPU_MAMBA_MATH_H
#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* PyTorch softplus(beta=1, threshold=20): x for x > 20, else log1p(exp(x)). */
static inline float softplusf_(float x) { return x > 20.0f ? x : log1pf(expf(x)); }
/* d softplus / dx = sigmoid(x), exactly 1 where the forward is the identity. */
static inline float dsoftplusf_(float x) { return x > 20.0f ? 1.0f : sigmoidf_(x); }

/* expf written with plain arithmetic (Cephes polynomial, max error 1.3 ulp
 * on [-87, 88], measured) so that loops over the state dimension vectorise
 * without -ffast-math. The argument is clamped to [-87, 88] on its bit
 * pattern with branch-free integer masks: float compares or selects would
 * count as possibly trapping and keep gcc from vectorising the loop. Below
 * -87 it returns 1.6e-38 instead of underflowing towards 0, immaterial for a
 * decay factor; a NaN argument is clamped too (the caller's other terms
 * still carry the NaN). */
static inline float exp_vf_(float x) {
  const int32_t neg87 = (int32_t)0xC2AE0000u, pos88 = 0x42B00000; /* -87.f, 88.f */
  int32_t xi;
  memcpy(&xi, &x, sizeof xi);
  int32_t m = -(int32_t)((xi < 0) & (xi > neg87)); /* x < -87 */
  xi ^= (xi ^ neg87) & m;
  m = -(int32_t)(xi > pos88); /* x > 88 */
  xi ^= (xi ^ pos88) & m;
  memcpy(&x, &xi, sizeof x);
  /* n = round(x / ln2) by the 1.5*2^23 trick; its low bits are n itself */
  float tm = x * 1.44269504088896341f + 12582912.0f;
  int32_t ti;
  memcpy(&ti, &tm, sizeof ti);
  float n = tm - 12582912.0f;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  int32_t e = (ti - 0x4B400000 + 127) * (1 << 23); /* 2^n, n in [-126, 127] */
  float sc;
  memcpy(&sc, &e, sizeof sc);
  return p * sc;
}

#endif /* SL_CPU_MAMBA_MATH_H */
