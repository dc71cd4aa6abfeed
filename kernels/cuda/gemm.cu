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
 * SL_CUDA_TF32=1; bf16 inputs always accumulate in fp32. */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/gemm.cuh"

#define DB_ROWS_PER_PART 64

/* largest power of two (<= 256) dividing the address */
static uint32_t ptr_align(const void *p) {
  uint32_t a = 256;
  while (a > 1 && (uintptr_t)p % a) a >>= 1;
  return a;
}

int sl_cuda_gemm(sl_kctx *ctx, int ta, int tb, int64_t m, int64_t n, int64_t k, const void *A,
                 int64_t lda, const void *B, int64_t ldb, float *D, int64_t ldd, float alpha,
                 float beta, cudaDataType_t ab) {
  if (!ctx) return SL_EINPUT;
  if (ctx->status) return ctx->status;
  if (m <= 0 || n <= 0) return SL_OK;
  if (k <= 0) { /* empty sum: D = beta * D */
    if (beta == 1.0f) return SL_OK;
    if (beta == 0.0f) {
      cudaError_t e = cudaMemset2DAsync(D, (size_t)ldd * 4, 0, (size_t)m * 4, (size_t)n, ctx->stream);
      if (e != cudaSuccess)
        return sl_cuda_fail(ctx, SL_EINTERNAL, "gemm: memset: %s", cudaGetErrorString(e));
      return SL_OK;
    }
    return sl_cuda_fail(ctx, SL_EINPUT, "gemm: k = 0 with beta %g unsupported", beta);
  }
  cublasLtMatmulDesc_t op = NULL;
  cublasLtMatrixLayout_t la = NULL, lb = NULL, ld = NULL;
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t heur;
  int nres = 0;
  cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasComputeType_t ct =
      (ab == CUDA_R_32F && ctx->tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  size_t ws = ctx->lt_ws_bytes;
  const uint32_t align[3] = {ptr_align(A), ptr_align(B), ptr_align(D)};
  const char *what = "";
  cublasStatus_t s;
#define LT(call)                 \
  do {                           \
    what = #call;                \
    s = (call);                  \
    if (s != CUBLAS_STATUS_SUCCESS) goto fail; \
  } while (0)
  LT(cublasLtMatmulDescCreate(&op, ct, CUDA_R_32F));
  LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
  LT(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
  /* stored shapes: A is (m x k) or (k x m) when transposed; B likewise */
  LT(cublasLtMatrixLayoutCreate(&la, ab, ta ? k : m, ta ? m : k, lda));
  LT(cublasLtMatrixLayoutCreate(&lb, ab, tb ? n : k, tb ? k : n, ldb));
  LT(cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, m, n, ldd));
  LT(cublasLtMatmulPreferenceCreate(&pref));
  LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                          sizeof ws));
  /* the heuristic assumes 256-byte aligned matrices unless told otherwise;
   * row offsets into flat buffers and LM-head chunks can be less aligned */
  LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                          &align[0], sizeof align[0]));
  LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                          &align[1], sizeof align[1]));
  LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                          &align[2], sizeof align[2]));
  LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                          &align[2], sizeof align[2]));
  LT(cublasLtMatmulAlgoGetHeuristic(ctx->lt, op, la, lb, ld, ld, pref, 1, &heur, &nres));
  if (nres == 0) {
    what = "cublasLtMatmulAlgoGetHeuristic (no algorithm)";
    s = CUBLAS_STATUS_NOT_SUPPORTED;
    goto fail;
  }
  LT(cublasLtMatmul(ctx->lt, op, &alpha, A, la, B, lb, &beta, D, ld, D, ld, &heur.algo, ctx->lt_ws,
                    ws, ctx->stream));
#undef LT
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(op);
  return SL_OK;
fail:
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  if (ld) cublasLtMatrixLayoutDestroy(ld);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (op) cublasLtMatmulDescDestroy(op);
  return sl_cuda_fail(ctx, SL_EINTERNAL, "gemm (m %lld n %lld k %lld ta %d tb %d): %s: %s",
                      (long long)m, (long long)n, (long long)k, ta, tb, what,
                      cublasLtGetStatusString(s));
}

int sl_cuda_rm_xwT(sl_kctx *ctx, float *out, const void *x, const void *w, int64_t N, int64_t IC,
                   int64_t OC, float beta, cudaDataType_t ab) {
  return sl_cuda_gemm(ctx, 1, 0, OC, N, IC, w, IC, x, IC, out, OC, 1.0f, beta, ab);
}
int sl_cuda_rm_dx(sl_kctx *ctx, float *dx, const void *dout, const void *w, int64_t N, int64_t IC,
                  int64_t OC, cudaDataType_t ab) {
  return sl_cuda_gemm(ctx, 0, 0, IC, N, OC, w, IC, dout, OC, dx, IC, 1.0f, 1.0f, ab);
}
int sl_cuda_rm_dw(sl_kctx *ctx, float *dw, const void *dout, const void *x, int64_t N, int64_t IC,
                  int64_t OC, cudaDataType_t ab) {
  return sl_cuda_gemm(ctx, 0, 1, IC, OC, N, x, IC, dout, OC, dw, IC, 1.0f, 1.0f, ab);
}

/* db partials: part[p][c] = sum of dout rows of group p, column c */
template <typename E>
static __global__ void db_pass1(float *part, const E *dout, int64_t N, int64_t OC) {
  int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  int64_t p = blockIdx.y;
  if (c >= OC) return;
  int64_t r0 = p * DB_ROWS_PER_PART, r1 = min(N, r0 + DB_ROWS_PER_PART);
  float s = 0.0f;
  for (int64_t r = r0; r < r1; r++) s += sl_ld(dout, r * OC + c);
  part[p * OC + c] = s;
}

template <typename E>
static void linear_db(sl_kctx *ctx, float *db, const E *dout, int64_t N, int64_t OC) {
  int64_t P = (N + DB_ROWS_PER_PART - 1) / DB_ROWS_PER_PART;
  SL_CUDA_REQUIRE(ctx, P <= 65535);
  float *part = (float *)sl_cuda_scratch(ctx, (size_t)(P * OC) * sizeof(float), "linear_bwd");
  if (!part) return;
  dim3 grid((unsigned)((OC + 127) / 128), (unsigned)P);
  db_pass1<E><<<grid, 128, 0, ctx->stream>>>(part, dout, N, OC);
  CUDA_LAUNCH_CHECK(ctx);
  sl_cuda_colsum_partials(ctx, db, part, P, OC);
}

static void linear_fwd_any(sl_kctx *ctx, float *out, const void *inp, const void *w,
                           const float *b, int64_t N, int64_t IC, int64_t OC, cudaDataType_t ab) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && IC >= 0 && OC >= 0);
  if (N == 0 || OC == 0) return;
  if (sl_cuda_rm_xwT(ctx, out, inp, w, N, IC, OC, 0.0f, ab)) return;
  if (b) sl_cuda_add_bias(ctx, out, b, N, OC);
}

void sl_cuda_linear_fwd(sl_kctx *ctx, float *out, const float *inp, const float *w,
                        const float *b, int64_t N, int64_t IC, int64_t OC) {
  linear_fwd_any(ctx, out, inp, w, b, N, IC, OC, CUDA_R_32F);
}
void sl_cuda_linear_fwd_bf16(sl_kctx *ctx, float *out, const uint16_t *inp, const uint16_t *w,
                             const float *b, int64_t N, int64_t IC, int64_t OC) {
  linear_fwd_any(ctx, out, inp, w, b, N, IC, OC, CUDA_R_16BF);
}

template <typename E>
static void linear_bwd_any(sl_kctx *ctx, float *dinp, float *dw, float *db, const E *dout,
                           const E *inp, const E *w, int64_t N, int64_t IC, int64_t OC,
                           cudaDataType_t ab) {
  SL_CUDA_BEGIN(ctx);
  SL_CUDA_REQUIRE(ctx, N >= 0 && IC >= 0 && OC >= 0);
  if (N == 0) return;
  if (dinp && IC > 0 && sl_cuda_rm_dx(ctx, dinp, dout, w, N, IC, OC, ab)) return;
  if (dw && IC > 0 && OC > 0 && sl_cuda_rm_dw(ctx, dw, dout, inp, N, IC, OC, ab)) return;
  if (db && OC > 0) linear_db<E>(ctx, db, dout, N, OC);
}

void sl_cuda_linear_bwd(sl_kctx *ctx, float *dinp, float *dw, float *db, const float *dout,
                        const float *inp, const float *w, int64_t N, int64_t IC, int64_t OC) {
  linear_bwd_any<float>(ctx, dinp, dw, db, dout, inp, w, N, IC, OC, CUDA_R_32F);
}
void sl_cuda_linear_bwd_bf16(sl_kctx *ctx, float *dinp, float *dw, float *db,
                             const uint16_t *dout, const uint16_t *inp, const uint16_t *w,
                             int64_t N, int64_t IC, int64_t OC) {
  linear_bwd_any<uint16_t>(ctx, dinp, dw, db, dout, inp, w, N, IC, OC, CUDA_R_16BF);
}
