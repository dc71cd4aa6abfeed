/* kernels/cpu/vocab_parallel.c — the CPU backend's vocabulary-parallel ops:
 * the embedding over one rank's vocabulary slice [v0, v0 + Vl) and the
 * loss-parallel LM head (slice statistics, their rescale to the global max,
 * the loss from the summed statistics, and the slice's backward). The head
 * runs the tiled loops of lmhead_ce.c over the slice's first Vvalid rows, so
 * no more than one (rows, vocabulary) tile of logits exists and padding rows
 * are never read. Semantics: kernels/kernels.h; how the ranks combine:
 * models/vocab_parallel.h. */
#include <math.h>
#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/cpu/cpu_ops.h"

void sl_cpu_vocab_embedding_fwd(sl_kctx *ctx, float *out, const int32_t *tok, const float *wte, int64_t N, int64_t C,
                                int64_t v0, int64_t Vl) {
#pragma omp parallel for num_threads(N *C >= SL_CPU_PAR_MIN ? ctx->threads : 1) schedule(static)
  for (int64_t i = 0; i < N; i++) {
    int64_t j = (int64_t)tok[i] - v0;
    if (j >= 0 && j < Vl) memcpy(out + i * C, wte + j * C, (size_t)C * sizeof(float));
    else memset(out + i * C, 0, (size_t)C * sizeof(float));
  }
}

/* Thread t owns the slice rows [Vl t / nt, Vl (t+1) / nt) and walks every
 * token in order: each row of dwte is summed in token order by one thread
 * (deterministic, race-free). */
void sl_cpu_vocab_embedding_bwd(sl_kctx *ctx, float *dwte, const float *dout, const int32_t *tok, int64_t N, int64_t C,
                                int64_t v0, int64_t Vl) {
  if (N <= 0 || C <= 0 || Vl <= 0) return;
  int nt = N * C >= SL_CPU_PAR_MIN ? ctx->threads : 1;
  if (nt > Vl) nt = (int)Vl;
#pragma omp parallel num_threads(nt)
  {
    int t = omp_get_thread_num(), n = omp_get_num_threads();
    int64_t lo = Vl * t / n, hi = Vl * (t + 1) / n;
    for (int64_t i = 0; i < N; i++) {
      int64_t j = (int64_t)tok[i] - v0;
      if (j < lo || j >= hi) continue;
      float *d = dwte + j * C;
      const float *s = dout + i * C;
      for (int64_t c = 0; c < C; c++) d[c] += s[c];
    }
  }
}

void sl_cpu_lmhead_vp_fwd(sl_kctx *ctx, float *lmax, float *st, const float *x, const float *w, const int32_t *targets,
                          int64_t N, int64_t C, int64_t v0, int64_t Vl, int64_t Vvalid, float softcap) {
  if (Vvalid < 0 || Vvalid > Vl) { /* a caller bug: poison, never guess */
    sl_cpu_poison(lmax, N);
    sl_cpu_poison(st, 2 * N);
    return;
  }
  sl_cpu_ce_fwd_core(ctx, x, w, targets, N, C, Vvalid, v0, NULL, NULL, lmax, st, "lmhead_vp_fwd", softcap);
}

void sl_cpu_lmhead_vp_rescale(sl_kctx *ctx, float *st, const float *lmax, const float *gmax, int64_t N) {
  (void)ctx;
  for (int64_t i = 0; i < N; i++)
    st[2 * i] = lmax[i] == -INFINITY ? 0.0f : st[2 * i] * (float)exp((double)lmax[i] - (double)gmax[i]);
}

void sl_cpu_lmhead_vp_loss(sl_kctx *ctx, float *losses, float *lse, const float *st, const float *gmax,
                           const int32_t *targets, int64_t N) {
  (void)ctx;
  for (int64_t i = 0; i < N; i++) {
    float z = gmax[i] + (float)log((double)st[2 * i]);
    lse[i] = z;
    losses[i] = targets[i] >= 0 ? z - st[2 * i + 1] : 0.0f;
  }
}

void sl_cpu_lmhead_vp_bwd(sl_kctx *ctx, float *dx, float *dw, const float *x, const float *w, const int32_t *targets,
                          const float *lse, float scale, int64_t N, int64_t C, int64_t v0, int64_t Vl, int64_t Vvalid,
                          float softcap) {
  if (Vvalid < 0 || Vvalid > Vl) {
    sl_cpu_poison(dx, N * C);
    sl_cpu_poison(dw, Vl * C);
    return;
  }
  sl_cpu_ce_bwd_core(ctx, dx, dw, x, w, targets, lse, scale, N, C, Vvalid, v0, "lmhead_vp_bwd", softcap);
}
