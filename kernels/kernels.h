/* kernels/kernels.h — the op table: pure compute, no ranks, no files.
 *
 * One table, implementations with identical signatures: kernels/cpu
 * (C, OpenMP, OpenBLAS; fp32; the oracle), kernels/cuda (CUDA C, cuBLASLt;
 * the context carries the stream) and kernels/count (computes nothing,
 * counts FLOPs: the planner's engine check). Every pointer is backend
 * memory. Pick one by name through kernels/registry.h. The cpu and cuda
 * tables are their fp32 ops wrapped by the one bf16-compute layer
 * (kernels/bf16.h: ctx_set_compute and the rounding points).
 *
 * Conventions
 * - Sizes and counts are elements (int64_t), never bytes.
 * - Row-major. N = number of token rows (B*T). C = model width.
 * - Linear layers follow PyTorch: w is (OC, IC), out = inp @ w^T + b.
 * - Every backward function ADDS into its gradient outputs (dinp, dw, db):
 *   the caller zeroes them once. This lets residual branches and tied weights
 *   accumulate without extra passes.
 * - Attention works on a packed qkv tensor (B, T, (nh + 2*nkv) * hd): the nh
 *   query heads, then nkv key heads, then nkv value heads, per token, which is
 *   exactly the output of one GEMM with the q/k/v projection weights stacked.
 */
#ifndef SL_KERNELS_H
#define SL_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sl_kctx sl_kctx; /* backend context: threads, scratch, stream */

/* moe_route_fwd / moe_route_bwd's mode bits (0: softmax scores, weights not renormalised). */
#define SL_MOE_NORM 1    /* the k weights divided by their sum (Mixtral, Qwen-MoE's norm_topk_prob) */
#define SL_MOE_SIGMOID 2 /* sigmoid scores instead of the softmax (DeepSeek-V3, Nemotron-H) */

/* A device context's host-side costs (ops dev_stats), cumulative counts. */
typedef struct {
  int64_t allocs;    /* device / pinned host allocations (cudaMalloc, cudaMallocHost) */
  int64_t frees;     /* cudaFree, cudaFreeHost */
  int64_t syncs;     /* host waits for the stream or device (cudaStreamSynchronize, cudaDeviceSynchronize) */
  int64_t downloads; /* device -> host copies the host waits for (each also one sync) */
  int64_t uploads;   /* host -> device copies the host waits for (each also one sync) */
} sl_dev_stats;

typedef struct sl_ops {
  const char *name; /* "cpu" or "cuda" */

  /* Context. threads <= 0 means the backend's default (OMP_NUM_THREADS). */
  sl_kctx *(*ctx_create)(int threads);
  void (*ctx_destroy)(sl_kctx *ctx);
  size_t (*ctx_scratch_bytes)(const sl_kctx *ctx); /* high-water scratch */

  /* out (N, C) = wte[tok[i]] ; tok values must be in [0, V) */
  void (*embedding_fwd)(sl_kctx *, float *out, const int32_t *tok, const float *wte, int64_t N, int64_t C);
  /* dwte (V, C) += scatter of dout (N, C) by tok */
  void (*embedding_bwd)(sl_kctx *, float *dwte, const float *dout, const int32_t *tok, int64_t N, int64_t C);

  /* out = inp * rsqrt(mean(inp^2) + eps) * w over N rows of C elements;
   * row i of inp / out (and of dout / dinp in backward) starts at i * ld
   * (ld >= C; ld == C: packed (N, C); ld > C: rows inside a wider buffer,
   * e.g. a per-head norm: one head_dim-wide head in each token's row of
   * packed qkv, ld = the row width). Elements between rows are neither read
   * nor written. rstd (N, packed) saved for backward; dw (C) += the weight
   * gradient. w NULL: a weightless norm (w = 1; Falcon-Mamba's dt, B and C
   * norms), backward then writes no dw. */
  void (*rmsnorm_fwd)(sl_kctx *, float *out, float *rstd, const float *inp, const float *w, int64_t N, int64_t C,
                      int64_t ld, float eps);
  void (*rmsnorm_bwd)(sl_kctx *, float *dinp, float *dw, const float *dout, const float *inp, const float *w,
                      const float *rstd, int64_t N, int64_t C, int64_t ld);
  /* RMSNorm over rows split across ranks (Mamba-2's gated norm when a group's
   * channels span several TP ranks): each rank holds C of a row's Cw
   * elements. rmsnorm_rowsum: out[i] = sum_j (w ? w[j] a[i,j] : a[i,j]) b[i,j]
   * over this rank's C (double accumulation; a = b = inp, w NULL: the sum of
   * squares; a = dout, b = inp, w: backward's dot), which the caller sums
   * over the ranks sharing the row. rmsnorm_fwd_sum: rstd[i] =
   * 1 / sqrt(sums[i] / Cw + eps) and out = w * (inp * rstd) (w NULL: 1).
   * rmsnorm_bwd_sum: dinp += rstd w dout - inp rstd^3 dots[i] / Cw, dots the
   * summed rmsnorm_rowsum(dout, inp, w); dw: rmsnorm_bwd with dinp NULL.
   * Rows at stride ld as rmsnorm_fwd. At one rank (C = Cw, the sums its own)
   * these are rmsnorm_fwd / _bwd's arithmetic. */
  void (*rmsnorm_rowsum)(sl_kctx *, float *out, const float *a, const float *b, const float *w, int64_t N, int64_t C,
                         int64_t ld);
  void (*rmsnorm_fwd_sum)(sl_kctx *, float *out, float *rstd, const float *inp, const float *w, const float *sums,
                          int64_t N, int64_t C, int64_t ld, int64_t Cw, float eps);
  void (*rmsnorm_bwd_sum)(sl_kctx *, float *dinp, const float *dout, const float *inp, const float *w,
                          const float *rstd, const float *dots, int64_t N, int64_t C, int64_t ld, int64_t Cw);

  /* out (N, OC) = inp (N, IC) @ w (OC, IC)^T (+ b (OC) if b != NULL) */
  void (*linear_fwd)(sl_kctx *, float *out, const float *inp, const float *w, const float *b, int64_t N, int64_t IC,
                     int64_t OC);
  /* dinp += dout @ w ; dw += dout^T @ inp ; db += colsum(dout).
   * Any of dinp, dw, db may be NULL (skipped). */
  void (*linear_bwd)(sl_kctx *, float *dinp, float *dw, float *db, const float *dout, const float *inp, const float *w,
                     int64_t N, int64_t IC, int64_t OC);

  /* ---- document masking (packed samples) ------------------------------
   * The seg argument of rope and attention: (B*T) int32 backend memory, or
   * NULL (no masking: one document per sample). For token t of sample b, the
   * position in the sample where its document starts; 0 <= seg[t] <= t, and
   * seg is constant within a document (it steps up at each document start). */
  /* Rotary embedding, HF rotate-half layout, in place on the q and k heads of
   * packed qkv (B, T, (nh+2nkv)*hd). Position of token t is t (restarts at 0
   * in every sample), or t - seg[t] with document masking (seg: above;
   * NULL: no masking). inv_freq (hd/2, backend
   * memory): the frequency of each rotated pair, which the model computes
   * (models/rope.h: theta^(-2i/hd), or a scaled rule); angle = (float)pos *
   * inv_freq[i] in fp32, then cos and sin in double rounded to fp32, as torch
   * does. */
  void (*rope_fwd)(sl_kctx *, float *qkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                   const float *inv_freq, const int32_t *seg);
  /* The transpose (inverse) rotation, in place on dq and dk of dqkv. */
  void (*rope_bwd)(sl_kctx *, float *dqkv, int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd,
                   const float *inv_freq, const int32_t *seg);

  /* Causal grouped-query attention. q head h uses kv head h / (nh/nkv).
   * Query i sees key j iff j <= i and (window <= 0 or i - j < window), and,
   * with document masking (seg != NULL, above), j >=
   * seg[i]: no attention across documents. The scores are scale * q.k
   * (callers pass 1.0f / sqrtf((float)hd) for HF's head_dim^-0.5). out (B, T,
   * nh*hd); lse (B, nh, T) = log-sum-exp of the scaled scores of each query
   * row, saved for backward. Never holds scores for more than one (batch,
   * kv-head) block at a time. softcap > 0 (Gemma 2's attn_logit_softcapping):
   * each scaled score s becomes softcap * tanh(s / softcap) before the mask
   * and the softmax (lse is of the capped scores); 0: no cap. */
  void (*attention_fwd)(sl_kctx *, float *out, float *lse, const float *qkv, int64_t B, int64_t T, int64_t nh,
                        int64_t nkv, int64_t hd, int64_t window, float scale, const int32_t *seg, float softcap);
  /* dqkv (packed like qkv) += gradient given dout, recomputing scores; the
   * same window, scale, seg and softcap as the forward (dS carries the cap's
   * derivative 1 - tanh^2). */
  void (*attention_bwd)(sl_kctx *, float *dqkv, const float *dout, const float *qkv, const float *out, const float *lse,
                        int64_t B, int64_t T, int64_t nh, int64_t nkv, int64_t hd, int64_t window, float scale,
                        const int32_t *seg, float softcap);

  /* out (N, H) = silu(gu[:, :H]) * gu[:, H:] where gu is (N, 2H) */
  void (*swiglu_fwd)(sl_kctx *, float *out, const float *gu, int64_t N, int64_t H);
  void (*swiglu_bwd)(sl_kctx *, float *dgu, const float *dout, const float *gu, int64_t N, int64_t H);
  /* GeGLU (Gemma): out (N, H) = gelu_tanh(gu[:, :H]) * gu[:, H:], with
   * PyTorch's gelu(approximate="tanh"): 0.5 g (1 + tanh(sqrt(2/pi) (g +
   * 0.044715 g^3))) in fp32; backward like swiglu_bwd. */
  void (*geglu_fwd)(sl_kctx *, float *out, const float *gu, int64_t N, int64_t H);
  void (*geglu_bwd)(sl_kctx *, float *dgu, const float *dout, const float *gu, int64_t N, int64_t H);

  /* y[i] += x[i] */
  void (*add_inplace)(sl_kctx *, float *y, const float *x, int64_t n);
  /* y[i] = fmaf(alpha, y[i], beta): one rounding, bit-identical on every
   * backend (Gemma: the embedding scale sqrt(hidden), alpha = s, beta = 0;
   * the (1 + w) norm weight, alpha = 1, beta = 1). Never rounded to bf16. */
  void (*scale_add)(sl_kctx *, float *y, float alpha, float beta, int64_t n);
  /* y[i] = cap * tanhf(y[i] / cap) (cap > 0): Gemma 2's final-logit softcap
   * on logits the model returns (lmhead_ce / lmhead_vp cap inside). */
  void (*softcap)(sl_kctx *, float *y, float cap, int64_t n);

  /* Fused LM head + softmax cross-entropy, chunked over rows so that at most
   * a (chunk, V) block of logits exists at once.
   * losses (N) = lse_i - logit_i[target_i]; lse (N) saved for backward.
   * Rows whose target < 0 are ignored (loss 0, no gradient). */
  void (*lmhead_ce_fwd)(sl_kctx *, float *losses, float *lse, const float *x, const float *w, const int32_t *targets,
                        int64_t N, int64_t C, int64_t V, float softcap);
  /* Recomputes logits chunk by chunk; dlogits = (softmax - onehot) * scale;
   * dx (N, C) += dlogits @ w ; dw (V, C) += dlogits^T @ x. */
  void (*lmhead_ce_bwd)(sl_kctx *, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                        const float *lse, float scale, int64_t N, int64_t C, int64_t V, float softcap);

  /* AdamW, PyTorch semantics (torch.optim.AdamW, single-tensor path):
   *   g = g * grad_scale                (clip coefficient, 1 if none)
   *   p *= 1 - lr*wd
   *   m = b1*m + (1-b1)*g ; v = b2*v + (1-b2)*g*g
   *   p -= (lr/bc1) * m / (sqrt(v)/sqrt(bc2) + eps)
   * with bc1 = 1 - b1^step, bc2 = 1 - b2^step computed in double (step >= 1).
   * Updates p, m, v in place over n elements. */
  void (*adamw)(sl_kctx *, float *p, float *m, float *v, const float *g, int64_t n, float lr, float b1, float b2,
                float eps, float wd, int64_t step, float grad_scale);

  /* sum of x[i]^2 accumulated in double */
  double (*sumsq)(sl_kctx *, const float *x, int64_t n);

  /* bf16 (uint16_t, round to nearest even) <-> fp32 */
  void (*f32_to_bf16)(sl_kctx *, uint16_t *out, const float *in, int64_t n);
  void (*bf16_to_f32)(sl_kctx *, float *out, const uint16_t *in, int64_t n);
  /* x rounded to bf16 in place (nearest even; what f32_to_bf16 then
   * bf16_to_f32 gives): a bf16 residual stream (models/decoder.h) */
  void (*round_bf16)(sl_kctx *, float *x, int64_t n);

  /* ---- Mamba (v1) ------------------------------------------------------
   * D = d_inner channels, S = state size, K = conv kernel width.
   * Inputs that are column slices of a wider row take a row stride (ld*),
   * in elements; outputs are dense (row stride = their width).
   * Document resets (packed samples): the seg argument of conv1d and scan is
   * rope's and attention's (above; NULL: one document per sample). With it a
   * packed row computes what its documents would, each run on its own. */
  /* Depthwise causal conv over time, per sample:
   * out[b,t,d] = bias[d] + sum_k w[d,k] * x[b, t-(K-1)+k, d] over the k with
   * t-(K-1)+k >= lo, lo = seg[b*T+t] (0 with seg NULL): the inputs before t's
   * document start count as zero; x rows have stride ldx; w (D, K); bias (D)
   * or NULL. out (B, T, D). */
  void (*conv1d_fwd)(sl_kctx *, float *out, const float *x, int64_t ldx, const float *w, const float *bias, int64_t B,
                     int64_t T, int64_t D, int64_t K, const int32_t *seg);
  /* The adjoint, the same seg: dx (rows of stride ldx) += ..., dw (D, K) +=
   * ..., dbias (D) += ... (NULL ok); no gradient crosses a document start.
   * CPU: with seg, dw and dbias add each document's sums on their own, in
   * order (sample, time): the bits of its documents run one after another
   * (B = 1) into the same dw, dbias. */
  void (*conv1d_bwd)(sl_kctx *, float *dx, int64_t ldx, float *dw, float *dbias, const float *dout, const float *x,
                     int64_t ldx_in, const float *w, int64_t B, int64_t T, int64_t D, int64_t K, const int32_t *seg);
  /* out[i] = silu(x[i]) ; dx[i] += dout[i] * silu'(x[i]) */
  void (*silu_fwd)(sl_kctx *, float *out, const float *x, int64_t n);
  void (*silu_bwd)(sl_kctx *, float *dx, const float *dout, const float *x, int64_t n);
  /* Squared ReLU (Nemotron-H's MLP, HF ACT2FN["relu2"]), r = relu(x):
   * out[i] = r*r ; dx[i] += dout[i] * 2r (one fmaf: every backend gives the
   * same bits). x < 0 gives 0 (x = 0 too: gradient 0), NaN stays NaN. */
  void (*relu2_fwd)(sl_kctx *, float *out, const float *x, int64_t n);
  void (*relu2_bwd)(sl_kctx *, float *dx, const float *dout, const float *x, int64_t n);
  /* Gate: out (N, D) = y (N, D) * silu(z) where z rows have stride ldz. */
  void (*gate_fwd)(sl_kctx *, float *out, const float *y, const float *z, int64_t ldz, int64_t N, int64_t D);
  /* dy += dout*silu(z) ; dz (stride ldz) += dout*y*silu'(z) */
  void (*gate_bwd)(sl_kctx *, float *dy, float *dz, int64_t ldz, const float *dout, const float *y, const float *z,
                   int64_t N, int64_t D);
  /* Selective scan with softplus on dt, per sample; the state is 0 at t = 0
   * and again at every document start (seg, above; NULL: none; seg[b*T+t]
   * == t > 0 starts one), as ssd_fwd's:
   *   delta[t,d] = softplus(dt[t,d])        (dt already includes dt_proj bias)
   *   A[d,s]     = -exp(A_log[d,s])
   *   h[d,s]     = exp(delta*A[d,s]) * h[d,s] + delta * Bm[t,s] * u[t,d]
   *   y[t,d]     = sum_s Cm[t,s] * h[d,s] + Dp[d] * u[t,d]
   * u, dt: (B, T, D) dense; Bm, Cm: (B, T, S) with row stride ldbc;
   * A_log (D, S); Dp (D). y (B, T, D).
   * ckpt (B, ceil(T/chunk), D, S) receives the state at the start of every
   * chunk of `chunk` steps (chunk >= 1; before a reset at that step) so
   * backward can recompute states chunk by chunk instead of storing all T
   * of them. */
  void (*scan_fwd)(sl_kctx *, float *y, float *ckpt, const float *u, const float *dt, const float *A_log,
                   const float *Bm, const float *Cm, int64_t ldbc, const float *Dp, const int32_t *seg, int64_t B,
                   int64_t T, int64_t D, int64_t S, int64_t chunk);
  /* Adds gradients into du, ddt (B,T,D), dA_log (D,S), dBm, dCm (stride
   * ldbc), dDp (D), given dy; recomputes states from ckpt; the same seg as
   * the forward (no gradient crosses a document start). CPU: with seg,
   * dA_log and dDp add each document's sums on their own, in the order the
   * backward visits them (samples in order, a sample's documents last to
   * first): the bits of its documents run one after another (B = 1). */
  void (*scan_bwd)(sl_kctx *, float *du, float *ddt, float *dA_log, float *dBm, float *dCm, float *dDp, const float *dy,
                   const float *u, const float *dt, const float *A_log, const float *Bm, const float *Cm, int64_t ldbc,
                   const float *Dp, const int32_t *seg, const float *ckpt, int64_t B, int64_t T, int64_t D, int64_t S,
                   int64_t chunk);

  /* ---- Mamba-2 (the SSD recurrence) -------------------------------------
   * H heads of P channels (x and y rows: H*P), G groups of S states (B and C
   * rows: G*S each); head h reads group h / (H/G) (H a multiple of G). Per
   * sample the state is 0 at t = 0 and again at every document start (seg,
   * as rope's and attention's, or NULL: seg[b*T+t] == t > 0 starts one):
   *   delta[t,h] = clamp(softplus(dt[t,h] + dt_bias[h]), dt_min, dt_max)
   *   s[h,p,n]   = exp(delta * -exp(A_log[h])) * s[h,p,n] + delta * B[t,g,n] * x[t,h,p]
   *   y[t,h,p]   = sum_n C[t,g,n] * s[h,p,n] + Dp[h] * x[t,h,p]
   * (transformers' Mamba2Mixer: time_step_limit is (dt_min, dt_max); dt_max
   * may be INFINITY). x rows have stride ldx, dt rows lddt, B and C rows
   * ldbc (all in elements, from the pointer given). y (B, T, H*P) dense.
   * ckpt (B, ceil(T/chunk), H, P, S) receives the state at the start of every
   * chunk of `chunk` steps (before a reset at that step), so backward
   * recomputes states chunk by chunk. */
  void (*ssd_fwd)(sl_kctx *, float *y, float *ckpt, const float *x, int64_t ldx, const float *dt, int64_t lddt,
                  const float *dt_bias, const float *A_log, const float *Bm, const float *Cm, int64_t ldbc,
                  const float *Dp, const int32_t *seg, float dt_min, float dt_max, int64_t B, int64_t T, int64_t H,
                  int64_t P, int64_t G, int64_t S, int64_t chunk);
  /* Adds the gradients, given dy (B, T, H*P) dense: dx (stride ldx), ddt
   * (stride lddt: the gradient of dt before the bias and softplus; 0 where
   * the clamp bites, as torch.clamp), ddt_bias (H), dA_log (H), dBm and dCm
   * (stride ldbc), dDp (H); the same inputs as the forward, whose ckpt it
   * reads. Deterministic: the same bits for any thread count. */
  void (*ssd_bwd)(sl_kctx *, float *dx, float *ddt, float *ddt_bias, float *dA_log, float *dBm, float *dCm, float *dDp,
                  const float *dy, const float *x, int64_t ldx, const float *dt, int64_t lddt, const float *dt_bias,
                  const float *A_log, const float *Bm, const float *Cm, int64_t ldbc, const float *Dp,
                  const int32_t *seg, const float *ckpt, float dt_min, float dt_max, int64_t B, int64_t T, int64_t H,
                  int64_t P, int64_t G, int64_t S, int64_t chunk);

  /* ---- memory ------------------------------------------------------------
   * Backend memory: plain host memory on the CPU, device memory on CUDA.
   * Sizes here are BYTES (raw memory, no element type). On CUDA every call
   * is queued on the context's stream in issue order; "host" pointers are
   * ordinary (pageable or pinned) host memory. p == NULL with bytes == 0 is
   * a no-op everywhere. Errors: alloc returns NULL with a message (sl_fail)
   * and leaves the context usable; the others record the context's status
   * (CUDA: sticky, see cuda_backend.h), which sync returns. */
  /* Zeroed block of `bytes` (0 allowed: a valid, distinct pointer).
   * CPU: 64-byte aligned. CUDA: cudaMalloc (256-byte aligned), zeroed in the
   * stream's order. NULL on failure. */
  void *(*alloc)(sl_kctx *, size_t bytes);
  /* Frees a block from alloc (NULL ok). CUDA: waits for the context's stream
   * first; other streams (comm) must be done with p (wait their requests). */
  void (*free)(sl_kctx *, void *p);
  /* p[0..bytes) = 0, asynchronous on the stream. */
  void (*zero)(sl_kctx *, void *p, size_t bytes);
  /* Backend memory to backend memory, asynchronous on the stream. The two
   * ranges must not overlap. */
  void (*copy)(sl_kctx *, void *dst, const void *src, size_t bytes);
  /* Host -> backend and backend -> host. Synchronous with respect to the
   * host data: on return host_src may be reused / host_dst holds the data
   * (CUDA: waits for the stream, so earlier queued work is done too). */
  void (*upload)(sl_kctx *, void *dst, const void *host_src, size_t bytes);
  void (*download)(sl_kctx *, void *host_dst, const void *src, size_t bytes);
  /* sum of x[i] accumulated in double; deterministic run to run (fixed
   * order for a given n). CUDA: waits for the stream (result on the host). */
  double (*sum)(sl_kctx *, const float *x, int64_t n);
  /* Waits until all work queued on the context is done; returns SL_OK or the
   * context's first error status (base/base.h codes). CPU: always SL_OK. */
  int (*sync)(sl_kctx *);
  /* 1 when pointers of this backend are device memory (host code must not
   * dereference them), 0 on the CPU. */
  int (*is_device)(void);
  /* The backend's compute stream (cudaStream_t on CUDA), NULL on the CPU:
   * what an NCCL communicator orders its work against. */
  void *(*stream)(sl_kctx *);

  /* Free and total bytes of the backend's memory (CUDA: cudaMemGetInfo of
   * the context's device); NULL where the backend's memory is host memory. */
  int (*mem_info)(sl_kctx *, size_t *free_bytes, size_t *total_bytes);

  /* ---- device scalars (docs/cuda.md, "Per-step syncs and allocations") ----
   * The context owns an array of double slots in backend memory: reductions
   * are added into a slot in stream order and one fetch brings every slot to
   * the host, so a step downloads its loss and gradient norms once. */
  /* Sizes the array to at least n slots, all 0 (allocates: call at start-up,
   * not per step). SL_OK, SL_EINPUT (n < 0), SL_ENOMEM. */
  int (*scalars_reserve)(sl_kctx *, int n);
  /* slot += sum of x[i] (square 0) or of x[i]^2 (square 1) over n
   * elements, the double that sum / sumsq return, added in issue order (the
   * same bits as adding their results on the host). CPU: at once; CUDA:
   * queued on the stream, no wait. slot in [0, reserved). */
  void (*scalar_acc)(sl_kctx *, int slot, const float *x, int64_t n, int square);
  /* slot += v, in the same order (a host-side term of a sum) */
  void (*scalar_add)(sl_kctx *, int slot, double v);
  /* host[0..n) = slots 0..n-1, then those slots = 0. CUDA: one
   * device->host copy and one stream wait. SL_OK or the context's status. */
  int (*scalars_fetch)(sl_kctx *, double *host, int n);
  /* What the context has done that costs the host (cumulative since
   * ctx_create; all 0 on the CPU and counting backends). */
  void (*dev_stats)(sl_kctx *, sl_dev_stats *out);

  /* ---- vocabulary parallelism (tensor parallel over the vocabulary) -----
   * A rank holds rows [v0, v0 + Vl) of the (padded) vocabulary: wte / w are
   * its (Vl, C) slice. Token ids and targets stay global ids. The head ops
   * read only the first Vvalid rows (0 <= Vvalid <= Vl; the rest are padding
   * of a vocabulary padded to a multiple of T, never read, never counted in
   * a max or sum, and never given a gradient). models/vocab_parallel.h
   * combines the ranks' results through the TP group. */
  /* out (N, C) = wte[tok[i] - v0] when v0 <= tok[i] < v0 + Vl, else 0 */
  void (*vocab_embedding_fwd)(sl_kctx *, float *out, const int32_t *tok, const float *wte, int64_t N, int64_t C,
                              int64_t v0, int64_t Vl);
  /* dwte (Vl, C) += scatter of the rows of dout (N, C) whose token is in
   * [v0, v0 + Vl); other rows are skipped. */
  void (*vocab_embedding_bwd)(sl_kctx *, float *dwte, const float *dout, const int32_t *tok, int64_t N, int64_t C,
                              int64_t v0, int64_t Vl);
  /* Loss-parallel LM head, forward statistics of this rank's slice, chunked
   * like lmhead_ce_fwd (at most one (chunk, Vvalid) block of logits; the same
   * softcap, applied to l_ij before every statistic).
   * For row i over the logits l_ij = x_i . w_j, j < Vvalid:
   *   lmax (N)     = max_j l_ij                       (-inf when Vvalid = 0)
   *   st (N, 2)    = { sum_j exp(l_ij - lmax_i),       (0 when Vvalid = 0)
   *                    l_i,targets[i]-v0 when v0 <= targets[i] < v0 + Vvalid,
   *                    else 0 }
   * (a target must be a real id: < V, never a padding row). */
  void (*lmhead_vp_fwd)(sl_kctx *, float *lmax, float *st, const float *x, const float *w, const int32_t *targets,
                        int64_t N, int64_t C, int64_t v0, int64_t Vl, int64_t Vvalid, float softcap);
  /* After gmax = max over the ranks of lmax: st[2i] *= exp(lmax[i] -
   * gmax[i]) (0 when lmax[i] = -inf), so the ranks' st sum to the global
   * { sum exp(l - gmax), target logit }. */
  void (*lmhead_vp_rescale)(sl_kctx *, float *st, const float *lmax, const float *gmax, int64_t N);
  /* After st is summed over the ranks: lse (N) = gmax + log(st[2i]);
   * losses (N) = lse - st[2i+1] when targets[i] >= 0, else 0. */
  void (*lmhead_vp_loss)(sl_kctx *, float *losses, float *lse, const float *st, const float *gmax,
                         const int32_t *targets, int64_t N);
  /* Recomputes this slice's logits chunk by chunk; with the global lse (N):
   * dlogits_ij = (exp(l_ij - lse_i) - [targets[i] == v0 + j]) * scale for
   * j < Vvalid (rows with targets[i] < 0: 0);
   * dx (N, C) += dlogits @ w ; dw (Vl, C) += dlogits^T @ x (rows >= Vvalid
   * untouched). dx is this slice's part: the caller sums it over the ranks.
   * dx or dw may be NULL (skipped). */
  void (*lmhead_vp_bwd)(sl_kctx *, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                        const float *lse, float scale, int64_t N, int64_t C, int64_t v0, int64_t Vl, int64_t Vvalid,
                        float softcap);
  /* ---- mixture of experts (token-choice top-k routing) ------------------
   * N tokens, E experts, k choices a token; slot s = t*k + j is token t's
   * j-th choice. The permuted buffer holds one row per slot, grouped by
   * expert (expert e's rows [offs[e], offs[e+1]), tokens ascending within
   * a group), so each expert's MLP is one GEMM over its group (a group may
   * be empty); the slots a capacity dropped follow, grouped the same way
   * (expert e's dropped rows [offs[E+e], offs[E+e+1]); offs[2E] = N*k).
   * All fp32, also under bf16 compute (they move or weight rows).
   * moe_route_fwd: probs (N, E) = the scores of logits (N, E) in fp32:
   * softmax, or with SL_MOE_SIGMOID in mode 1 / (1 + exp(-logit)) each
   * (transformers' DeepseekV3TopkRouter); lse (N, NULL: not written) the
   * softmax's logsumexp (must be NULL in sigmoid mode: the router z-loss is
   * defined through the softmax; the CUDA backend refuses it, the CPU
   * leaves it unwritten); sel (N, k) int32 the experts of the k largest
   * probs + bias (bias (E) or NULL: none; the selection only, as
   * DeepSeek-V3's aux-loss-free balancing), descending (a tie goes to the
   * lower expert); wts (N, k) their probabilities (without the bias),
   * divided by their sum with SL_MOE_NORM (sigmoid: by their sum + 1e-20,
   * as DeepseekV3MoE.route_tokens_to_experts), then times scale (the routed
   * scaling factor; > 0, 1.0f leaves the weights bit for bit). cap > 0:
   * each expert keeps the cap slots of largest wts (a tie: the earlier
   * token; Megatron-Core's "probs" drop policy), the others are dropped:
   * sel = -1 - e, wts = 0 (not renormalised); cap 0: dropless. offs
   * (2E+1), perm (N*k): permuted row r holds slot perm[r]; pos (N*k) its
   * inverse (pos[perm[r]] = r). */
  void (*moe_route_fwd)(sl_kctx *, float *probs, int32_t *sel, float *wts, int32_t *offs, int32_t *perm, int32_t *pos,
                        float *lse, const float *logits, const float *bias, int64_t N, int64_t E, int64_t k, int mode,
                        float scale, int64_t cap);
  /* dlogits (N, E) += the gradient of the logits given dwts (N, k), the
   * gradient of wts (the forward's, mode and scale the same: through the
   * scale and, with SL_MOE_NORM, the renormalisation; a dropped slot's
   * dwts is 0), gp (E, or NULL: none), a gradient of every token's probs
   * row (the load-balancing loss's), through the softmax or the sigmoid,
   * and zg * lse[t] on token t's logsumexp (the router z-loss's; lse NULL:
   * none; sigmoid mode: lse NULL and zg 0, the CUDA backend refuses
   * others). k <= 64. */
  void (*moe_route_bwd)(sl_kctx *, float *dlogits, const float *dwts, const float *probs, const int32_t *sel,
                        const float *wts, const float *gp, const float *lse, float zg, int64_t N, int64_t E, int64_t k,
                        int mode, float scale);
  /* xp (N*k, C): permuted row pos[s] = x row s / k. */
  void (*moe_permute_fwd)(sl_kctx *, float *xp, const float *x, const int32_t *pos, int64_t N, int64_t k, int64_t C);
  /* dx (N, C) += sum over j of dxp row pos[t*k + j] (in j order). */
  void (*moe_permute_bwd)(sl_kctx *, float *dx, const float *dxp, const int32_t *pos, int64_t N, int64_t k, int64_t C);
  /* out (N, C) = sum over j of wts[t*k + j] * yp row pos[t*k + j] (in j order). */
  void (*moe_combine_fwd)(sl_kctx *, float *out, const float *yp, const float *wts, const int32_t *pos, int64_t N,
                          int64_t k, int64_t C);
  /* dyp row pos[s] += wts[s] * dout row s / k; dwts[s] += dout row s / k . yp row pos[s]. */
  void (*moe_combine_bwd)(sl_kctx *, float *dyp, float *dwts, const float *dout, const float *yp, const float *wts,
                          const int32_t *pos, int64_t N, int64_t k, int64_t C);
  /* ---- compute dtype (docs/bf16.md) -------------------------------------
   * SL_COMPUTE_FP32 (every context starts so): the ops as documented above.
   * SL_COMPUTE_BF16: the ops round what a bf16 engine stores in bf16 to
   * bf16-valued fp32 (round to nearest even): GEMM operands (linear, LM
   * head), and the activations and activation gradients the ops write
   * (rmsnorm/linear/rope/attention/swiglu/conv1d/silu/relu2/gate/scan
   * outputs, logits, dlogits, and dinp/dqkv/dgu/... of the backwards); GEMMs
   * and attention accumulate in fp32. Stays fp32: rstd, lse, losses, the scan's
   * state checkpoints, weight gradients, the residual stream and its
   * gradient (embedding_fwd, add_inplace, rmsnorm_bwd's dinp), and every
   * optimizer / memory op. Either may be OR-ed with SL_COMPUTE_TF32: the
   * GEMMs that stay fp32 run on TF32 tensor cores (10-bit mantissa
   * products, fp32 accumulation); only a backend with tensor cores takes
   * it (cuda), the host backends refuse it. SL_OK, or SL_EINPUT for
   * another value. */
  int (*ctx_set_compute)(sl_kctx *, int compute);
} sl_ops;

enum { SL_COMPUTE_FP32 = 0, SL_COMPUTE_BF16 = 1, SL_COMPUTE_TF32 = 2 }; /* ctx_set_compute values (TF32: a flag) */

/* Every op field of sl_ops, in struct order (what sl_ops_check and the
 * size check below walk). A new op is added to the struct AND here. */
#define SL_OPS_LIST(X)                                                                                                 \
  X(ctx_create)                                                                                                        \
  X(ctx_destroy)                                                                                                       \
  X(ctx_scratch_bytes)                                                                                                 \
  X(embedding_fwd)                                                                                                     \
  X(embedding_bwd)                                                                                                     \
  X(rmsnorm_fwd)                                                                                                       \
  X(rmsnorm_bwd)                                                                                                       \
  X(rmsnorm_rowsum) X(rmsnorm_fwd_sum) X(rmsnorm_bwd_sum)                                                              \
  X(linear_fwd)                                                                                                        \
  X(linear_bwd)                                                                                                        \
  X(rope_fwd)                                                                                                          \
  X(rope_bwd) X(attention_fwd) X(attention_bwd) X(swiglu_fwd) X(swiglu_bwd) X(geglu_fwd) X(geglu_bwd) X(add_inplace)   \
      X(scale_add) X(softcap) X(lmhead_ce_fwd) X(lmhead_ce_bwd) X(adamw) X(sumsq) X(f32_to_bf16) X(bf16_to_f32)        \
          X(round_bf16) X(conv1d_fwd) X(conv1d_bwd) X(silu_fwd) X(silu_bwd) X(relu2_fwd) X(relu2_bwd) X(gate_fwd)      \
              X(gate_bwd) X(scan_fwd) X(scan_bwd) X(ssd_fwd) X(ssd_bwd) X(alloc) X(free) X(zero) X(copy) X(upload)     \
                  X(download) X(sum) X(sync) X(is_device) X(stream) X(mem_info) X(scalars_reserve) X(scalar_acc)       \
                      X(scalar_add) X(scalars_fetch) X(dev_stats) X(vocab_embedding_fwd) X(vocab_embedding_bwd)        \
                          X(lmhead_vp_fwd) X(lmhead_vp_rescale) X(lmhead_vp_loss) X(lmhead_vp_bwd) X(moe_route_fwd)    \
                              X(moe_route_bwd) X(moe_permute_fwd) X(moe_permute_bwd) X(moe_combine_fwd)                \
                                  X(moe_combine_bwd) X(ctx_set_compute)
#define SL_OPS_COUNT_ONE_(f) +1
enum { SL_OPS_COUNT = 0 SL_OPS_LIST(SL_OPS_COUNT_ONE_) }; /* op fields of sl_ops */

/* Which ops a backend supports: a NULL field is an op the backend does not
 * have. Returns SL_OK when every op is present except the optional ones
 * (mem_info: NULL for host-memory backends), else an SL_EINPUT failure
 * naming the backend and every missing op. Run once when a backend is
 * picked (sl_ops_cuda's probe, the trainer). */
int sl_ops_check(const sl_ops *ops);
/* 1 when `op` (a field name of sl_ops) may be NULL. */
int sl_ops_optional(const char *op);

/* The CPU backend; always present. */
const sl_ops *sl_ops_cpu(void);
/* The CUDA backend, or NULL (and sl_errmsg() says why: built without CUDA,
 * or the CUDA error of the device probe) when it cannot be used. */
const sl_ops *sl_ops_cuda(void);

/* Scalar helpers shared by backends and tests. */
static inline uint16_t sl_f32_to_bf16_scalar(float f) {
  union {
    float f;
    uint32_t u;
  } x = {f};
  if ((x.u & 0x7f800000u) == 0x7f800000u && (x.u & 0x007fffffu)) /* NaN */
    return (uint16_t)((x.u >> 16) | 0x40u);
  uint32_t r = x.u + 0x7fffu + ((x.u >> 16) & 1u);
  return (uint16_t)(r >> 16);
}
static inline float sl_bf16_to_f32_scalar(uint16_t h) {
  union {
    uint32_t u;
    float f;
  } x = {(uint32_t)h << 16};
  return x.f;
}

#ifdef __cplusplus
}
#endif
#endif /* SL_KERNELS_H */
