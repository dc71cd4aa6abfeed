/* kernels/cuda/gemm.cu — cuBLASLt matmuls and the linear layer.
 *
 * Row-major X (N, IC) is column-major X^T (IC, N) with ld IC, so every
 * row-major product maps to one column-major cuBLASLt call:
 *   out^T (OC, N)  = W^T' X^T      : A = w  (IC x OC, ld IC) transposed, B = x (IC x N)
 *   dx^T  (IC, N) += W^T dout^T    : A = w  (IC x OC, ld IC), B = dout (OC x N, ld OC)
 *   dw^T  (IC, OC)+= X^T dout      : A = x  (IC x N, ld IC),  B = dout (OC x N) transposed
 * Accumulation uses beta = 1 with C = D (in place, same layout).
 * Bias and db are separate small kernels (db: deterministic two-pass colsum).
 * Compute type CUBLAS_COMPUTE_32F (the oracle path) or _FAST_TF32 when
 * SL_CUDA_TF32=1; bf16 inputs always accumulate in fp32.
 * Plans (descriptors + the heuristic's algorithm) are cached per shape and
 * pointer alignment in the context (at most 256, replaced round-robin), so
 * after warm-up a GEMM is one cublasLtMatmul call. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/gemm.cuh"

#define DB_ROWS_PER_PART 64

/* One cached plan: the descriptors of a shape and the algorithm the
 * heuristic chose for it. The key includes the alignment (bytes, a power of
 * two <= 256) of A, B and D as passed: the heuristic is told those
 * alignments (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*), so an algorithm that
 * needs more (LM-head chunk offsets, unpadded tensor offsets) is never
 * chosen, and a differently aligned call gets its own plan. */
struct sl_gemm_plan {
  int ta, tb, ab, ct;
  int64_t m, n, k, lda, ldb, ldd;
  uint32_t al_a, al_b, al_d;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulAlgo_t algo;
};
#define SL_GEMM_MAX_PLANS 256

static uint32_t ptr_align(const void *p) {
  uintptr_t a = (uintptr_t)p;
  uint32_t al = 256;
  while (al > 1 && (a & (al - 1))) al >>= 1;
  return al;
}

static void plan_release(sl_gemm_plan *p) {
  if (p->ld) cublasLtMatrixLayoutDestroy(p->ld);
  if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
  if (p->la) cublasLtMatrixLayoutDestroy(p->la);
  if (p->op) cublasLtMatmulDescDestroy(p->op);
  memset(p, 0, sizeof *p);
}

void sl_cuda_gemm_plans_free(sl_kctx *ctx) {
  if (!ctx || !ctx->plans) return;
  for (int i = 0; i < ctx->nplans; i++) plan_release(&ctx->plans[i]);
  free(ctx->plans);
  ctx->plans = NULL;
  ctx->nplans = 0;
}

int sl_cuda_gemm(sl_kctx *ctx, int ta, int tb, int64_t m, int64_t n, int64_t k, const void *A, int64_t lda,
                 const void *B, int64_t ldb, float *D, int64_t ldd, float alpha, float beta, cudaDataType_t ab) {
  if (!ctx) return SL_EINPUT;
  if (ctx->status) return ctx->status;
  if (m <= 0 || n <= 0) return SL_OK;
  if (k <= 0) { /* empty sum: D = beta * D */
    if (beta == 1.0f) return SL_OK;
    if (beta == 0.0f) {
      cudaError_t e = cudaMemset2DAsync(D, (size_t)ldd * 4, 0, (size_t)m * 4, (size_t)n, ctx->stream);
      if (e != cudaSuccess) return sl_cuda_fail(ctx, SL_EINTERNAL, "gemm: memset: %s", cudaGetErrorString(e));
      return SL_OK;
    }
    return sl_cuda_fail(ctx, SL_EINPUT, "gemm: k = 0 with beta %g unsupported", beta);
  }
  cublasComputeType_t ct =
      (ab == CUDA_R_32F && sl_cuda_tf32_enabled(ctx)) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  uint32_t al_a = ptr_align(A), al_b = ptr_align(B), al_d = ptr_align(D);
  sl_gemm_plan *pl = NULL;
  for (int i = 0; i < ctx->nplans && !pl; i++) {
    sl_gemm_plan *q = &ctx->plans[i];
    if (q->ta == ta && q->tb == tb && q->ab == (int)ab && q->ct == (int)ct && q->m == m && q->n == n && q->k == k &&
        q->lda == lda && q->ldb == ldb && q->ldd == ldd && q->al_a == al_a && q->al_b == al_b && q->al_d == al_d)
      pl = q;
  }
  size_t ws = ctx->lt_ws_bytes;
  const char *what = "";
  cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
  cublasLtMatmulPreference_t pref = NULL;
  sl_gemm_plan fresh;
  memset(&fresh, 0, sizeof fresh);
#define LT(call)                                                                                                       \
  do {                                                                                                                 \
    what = #call;                                                                                                      \
    s = (call);                                                                                                        \
    if (s != CUBLAS_STATUS_SUCCESS) goto fail;                                                                         \
  } while (0)
  if (!pl) {
    if (!ctx->plans && !(ctx->plans = (sl_gemm_plan *)calloc(SL_GEMM_MAX_PLANS, sizeof(sl_gemm_plan))))
      return sl_cuda_fail(ctx, SL_ENOMEM, "gemm: out of host memory for the plan cache");
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulHeuristicResult_t heur;
    int nres = 0;
    fresh.ta = ta;
    fresh.tb = tb;
    fresh.ab = (int)ab;
    fresh.ct = (int)ct;
    fresh.m = m;
    fresh.n = n;
    fresh.k = k;
    fresh.lda = lda;
    fresh.ldb = ldb;
    fresh.ldd = ldd;
    fresh.al_a = al_a;
    fresh.al_b = al_b;
    fresh.al_d = al_d;
    LT(cublasLtMatmulDescCreate(&fresh.op, ct, CUDA_R_32F));
    LT(cublasLtMatmulDescSetAttribute(fresh.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
    LT(cublasLtMatmulDescSetAttribute(fresh.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
    /* stored shapes: A is (m x k) or (k x m) when transposed; B likewise */
    LT(cublasLtMatrixLayoutCreate(&fresh.la, ab, ta ? k : m, ta ? m : k, lda));
    LT(cublasLtMatrixLayoutCreate(&fresh.lb, ab, tb ? n : k, tb ? k : n, ldb));
    LT(cublasLtMatrixLayoutCreate(&fresh.ld, CUDA_R_32F, m, n, ldd));
    LT(cublasLtMatmulPreferenceCreate(&pref));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof al_d));
    LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));
    LT(cublasLtMatmulAlgoGetHeuristic(ctx->lt, fresh.op, fresh.la, fresh.lb, fresh.ld, fresh.ld, pref, 1, &heur,
                                      &nres));
    if (nres == 0) {
      what = "cublasLtMatmulAlgoGetHeuristic (no algorithm)";
      s = CUBLAS_STATUS_NOT_SUPPORTED;
      goto fail;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    pref = NULL;
    fresh.algo = heur.algo;
    if (ctx->nplans < SL_GEMM_MAX_PLANS) {
      pl = &ctx->plans[ctx->nplans++];
    } else { /* full: replace round-robin */
      pl = &ctx->plans[ctx->next_evict];
      ctx->next_evict = (ctx->next_evict + 1) % SL_GEMM_MAX_PLANS;
      plan_release(pl);
    }
    *pl = fresh;
  }
  LT(cublasLtMatmul(ctx->lt, pl->op, &alpha, A, pl->la, B, pl->lb, &beta, D, pl->ld, D, pl->ld, &pl->algo, ctx->lt_ws,
                    ws, ctx->stream));
#undef LT
  return SL_OK;
fail:
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  plan_release(&fresh);
  return sl_cuda_fail(ctx, SL_EINTERNAL,
                      "gemm (m %lld n %lld k %lld ta %d tb %d, alignment A %u B %u D %u bytes): %s: %s", (long long)m,
                      (long long)n, (long long)k, ta, tb, al_a, al_b, al_d, what, cublasLtGetStatusString(s));
}

int sl_cuda_rm_xwT(sl_kctx *ctx, float *out, const void *x, const void *w, int64_t N, int64_t IC, int64_t OC,
                   float beta, cudaDataType_t ab) {
  return sl_cuda_gemm(ctx, 1, 0, OC, N, IC, w, IC, x, IC, out, OC, 1.0f, beta, ab);
}
int sl_cuda_rm_dx(sl_kctx *ctx, float *dx, const void *dout, const void *w, int64_t N, int64_t IC, int64_t OC,
                  cudaDataType_t ab) {
  return sl_cuda_gemm(ctx, 0, 0, IC, N, OC, w, IC, dout, OC, dx, IC, 1.0f, 1.0f, ab);
}
int sl_cuda_rm_dw(sl_kctx *ctx, float *dw, const void *dout, const void *x, int64_t N, int64_t IC, int64_t OC,
                  cudaDataType_t ab) {
  return sl_cuda_gemm(ctx, 0, 1, IC, OC, N, x, IC, dout, OC, dw, IC, 1.0f, 1.0f, ab);
}

/* db partials: part[p][c] = sum of dout rows of group p, column c */
template <typename E> static __global__ void db_pass1(float *part, const E *dout, int64_t N, int64_t OC) {
  int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  int64_t p = blockIdx.y;
  if (c >= OC) return;
  int64_t r0 = p * DB_ROWS_PER_PART, r1 = min(N, r0 + DB_ROWS_PER_PART);
  float s = 0.0f;
  for (int64_t r = r0; r < r1; r++) s += sl_ld(dout, r * OC + c);
  part[p * OC + c] = s;
}

template <typename E> static void linear_db(sl_kctx *ctx, float *db, const E *dout, int64_t N, int64_t OC) {
  int64_t P = (N + DB_ROWS_PER_PART - 1) / DB_ROWS_PER_PART;
  SL_CUDA_REQUIRE(ctx, P <= 65535);
  float *part = (float *)sl_cuda_scratch(ctx, (size_t)(P * OC) * sizeof(float), "linear_bwd");
  if (!part) return;
  dim3 grid((unsigned)((OC + 127) / 128), (unsigned)P);
  db_pass1<E><<<grid, 128, 0, ctx->stream>>>(part, dout, N, OC);
  CUDA_LAUNCH_CHECK(ctx);
  sl_cuda_colsum_partials(ctx, db, part, P, OC);
}

static void linear_fwd_any(sl_kctx *ctx, float *out, const void *inp, const void *w, const float *b, int64_t N,
                           int64_t IC, int64_t OC, cudaDataType_t ab) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && IC >= 0 && OC >= 0);
  if (N == 0 || OC == 0) return;
  if (sl_cuda_rm_xwT(ctx, out, inp, w, N, IC, OC, 0.0f, ab)) return;
  if (b) sl_cuda_add_bias(ctx, out, b, N, OC);
}

void sl_cuda_linear_fwd(sl_kctx *ctx, float *out, const float *inp, const float *w, const float *b, int64_t N,
                        int64_t IC, int64_t OC) {
  linear_fwd_any(ctx, out, inp, w, b, N, IC, OC, CUDA_R_32F);
}
void sl_cuda_linear_fwd_bf16(sl_kctx *ctx, float *out, const uint16_t *inp, const uint16_t *w, const float *b,
                             int64_t N, int64_t IC, int64_t OC) {
  linear_fwd_any(ctx, out, inp, w, b, N, IC, OC, CUDA_R_16BF);
}

template <typename E>
static void linear_bwd_any(sl_kctx *ctx, float *dinp, float *dw, float *db, const E *dout, const E *inp, const E *w,
                           int64_t N, int64_t IC, int64_t OC, cudaDataType_t ab) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && IC >= 0 && OC >= 0);
  if (N == 0) return;
  if (dinp && IC > 0 && sl_cuda_rm_dx(ctx, dinp, dout, w, N, IC, OC, ab)) return;
  if (dw && IC > 0 && OC > 0 && sl_cuda_rm_dw(ctx, dw, dout, inp, N, IC, OC, ab)) return;
  if (db && OC > 0) linear_db<E>(ctx, db, dout, N, OC);
}

void sl_cuda_linear_bwd(sl_kctx *ctx, float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, int64_t N, int64_t IC, int64_t OC) {
  linear_bwd_any<float>(ctx, dinp, dw, db, dout, inp, w, N, IC, OC, CUDA_R_32F);
}
void sl_cuda_linear_bwd_bf16(sl_kctx *ctx, float *dinp, float *dw, float *db, const uint16_t *dout, const uint16_t *inp,
                             const uint16_t *w, int64_t N, int64_t IC, int64_t OC) {
  linear_bwd_any<uint16_t>(ctx, dinp, dw, db, dout, inp, w, N, IC, OC, CUDA_R_16BF);
}
