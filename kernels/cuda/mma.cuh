/* kernels/cuda/mma.cuh — the one tensor-core primitive of the backend:
 * mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (sm_80+), D = A B + C
 * for one warp, A 16x16 and B 16x8 bf16, C and D 16x8 fp32, and the helpers
 * that pack its fragments. Fragment layout (PTX ISA, "Matrix Fragments for
 * mma.m16n8k16 with floating point type"), g = lane >> 2, t = lane % 4:
 *   A register r (r < 4), low half then high half h: row g + 8 (r & 1),
 *     col 2t + h + 8 (r >> 1)
 *   B register r (r < 2), half h: row (k) 2t + h + 8 r, col (n) g
 *   C / D element i (i < 4): row g + 8 (i >> 1), col 2t + (i & 1)
 * Under the emulator (tests/cuda_emu) the call is a warp collective that
 * computes the product with exactly this layout (sl_emu.h). */
#ifndef SL_CUDA_MMA_CUH
#define SL_CUDA_MMA_CUH

#include <stdint.h>

#include "kernels/cuda/common.cuh"

/* d = a * b + c; every lane of the warp calls it with its fragments (d may
 * be c). */
__device__ __forceinline__ void sl_mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2],
                                                  const float c[4]) {
#if defined(SL_EMU_H)
  sl_emu::mma_m16n8k16_bf16(d, a, b, c, __builtin_FILE(), __builtin_LINE());
#elif defined(__CUDA_ARCH__)
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
               "{%8, %9}, {%10, %11, %12, %13};\n"
               : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
                 "f"(c[3]));
#else
  (void)d, (void)a, (void)b, (void)c; /* host pass of nvcc: never called */
#endif
}

/* Two floats as a register of two bf16 (lo in the low half), rounded to
 * nearest even. */
__device__ __forceinline__ uint32_t sl_pack_bf16x2(float lo, float hi) {
  return (uint32_t)sl_dev_f32_to_bf16(lo) | (uint32_t)sl_dev_f32_to_bf16(hi) << 16;
}
/* The register of two consecutive bf16 at p (4-byte aligned). */
__device__ __forceinline__ uint32_t sl_ld_bf16x2(const uint16_t *p) { return *(const uint32_t *)(const void *)p; }

/* An A fragment from two 16x8 C fragments side by side (cols 0-7: c0, 8-15:
 * c1), as FlashAttention-2 reuses the scores for P.V, rounded to bf16. */
__device__ __forceinline__ void sl_frag_c2a(uint32_t a[4], const float c0[4], const float c1[4]) {
  a[0] = sl_pack_bf16x2(c0[0], c0[1]);
  a[1] = sl_pack_bf16x2(c0[2], c0[3]);
  a[2] = sl_pack_bf16x2(c1[0], c1[1]);
  a[3] = sl_pack_bf16x2(c1[2], c1[3]);
}

/* A B fragment from shared memory where element (k, n) sits at s[n * ld + k]
 * (the matrix stored n-major: rows of B^T, e.g. K rows for Q K^T); n0, k0
 * the tile's corner, ld even. */
__device__ __forceinline__ void sl_frag_b(uint32_t b[2], const uint16_t *s, int ld, int n0, int k0) {
  int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const uint16_t *p = s + (n0 + g) * ld + k0 + 2 * t;
  b[0] = sl_ld_bf16x2(p);
  b[1] = sl_ld_bf16x2(p + 8);
}

#endif /* SL_CUDA_MMA_CUH */
