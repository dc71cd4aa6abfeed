/* tests/unit/models/test_vocab_parallel.c — the vocabulary-parallel embedding and the
 * loss-parallel LM head (models/vocab_parallel.h) with T ranks emulated in
 * one process: one thread per rank, each with its own model, kernel context
 * and vocabulary slice (padding rows NaN, so a read of one shows), calling
 * the functions exactly as a rank would; the TP group's hooks meet at a
 * barrier and reduce the T buffers in rank order. Oracle: the single-rank
 * sl_lm_head and embedding ops on the whole vocabulary. Checks, for V in
 * {211, 300, 5} x T in {2, 4} (and T = 1), tied and untied, with and without
 * sequence parallelism (x, dres, the embedding rows on N/T rows per rank;
 * the norm gradient summed over the ranks): losses, lse and
 * the loss sum within 1e-5 relative; dres, the norm's gradient and the
 * (tied: embedding + head) weight gradient within 1e-5; padding rows get
 * exactly zero gradient; every rank holds the same dres and losses; the
 * embedding rows exactly; the gathered logits; the elements each kind of
 * collective moves; and the refusals.
 * Ends with "N passed, M failed". */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "kernels/kernels.h"
#include "models/model.h"
#include "models/vocab_parallel.h"

#define MAXT 4
enum { B = 2, S = 8, N = B * S, C = 32 };
static const float EPS = 1e-5f;

static int g_pass, g_fail;
static uint64_t g_rng = 0x243f6a8885a308d3ull;
static float rnd(float a) { return (float)(((double)(sl_splitmix64(&g_rng) >> 11) / 9007199254740992.0 * 2 - 1) * a); }

static void report(const char *name, double err, double tol) {
  int ok = err <= tol; /* NaN fails */
  printf("%-4s %-66s err %.3e tol %.1e\n", ok ? "ok" : "FAIL", name, err, tol);
  if (ok) g_pass++;
  else g_fail++;
}
/* max |a - b| / max(max |b|, floor) */
static double rel(const float *a, const float *b, int64_t n, double floor) {
  double m = floor, e = 0;
  for (int64_t i = 0; i < n; i++) m = fmax(m, fabs(b[i]));
  for (int64_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (!(d <= e)) e = d;
  }
  return e / m;
}

/* ---- the fake TP group: T threads meet at a barrier ------------------------ */
typedef struct {
  int T;
  pthread_barrier_t bar;
  const float *in[MAXT];
  int64_t n[MAXT];
  float *res; /* reduction result, (capacity) floats */
  int64_t cap, err;
  int64_t moved[3]; /* elements of the full buffers: all-reduced, all-gathered, reduce-scattered */
} world;
typedef struct {
  world *w;
  int rank;
  const float *wte, *W; /* unit 0's params (tied: the slice), the head's flat */
  float *dwte;          /* unit 0's gradient */
  void *owner;          /* the vcase */
} rank_ctx;

static int fake_allreduce(void *user, float *buf, int64_t n, sl_tp_op op) {
  rank_ctx *rc = user;
  world *w = rc->w;
  w->in[rc->rank] = buf;
  w->n[rc->rank] = n;
  pthread_barrier_wait(&w->bar);
  if (rc->rank == 0) {
    for (int r = 0; r < w->T; r++) w->err |= w->n[r] != n || n > w->cap;
    for (int64_t i = 0; !w->err && i < n; i++) {
      float a = w->in[0][i];
      for (int r = 1; r < w->T; r++) a = op == SL_TP_MAX ? fmaxf(a, w->in[r][i]) : a + w->in[r][i];
      w->res[i] = a;
    }
    w->moved[0] += n;
  }
  pthread_barrier_wait(&w->bar);
  if (!w->err) memcpy(buf, w->res, (size_t)n * sizeof(float));
  pthread_barrier_wait(&w->bar);
  return w->err ? sl_fail(SL_EINTERNAL, "fake allreduce: mismatched sizes") : SL_OK;
}
static int fake_allgather(void *user, const float *in, float *out, int64_t n) {
  rank_ctx *rc = user;
  world *w = rc->w;
  w->in[rc->rank] = in;
  w->n[rc->rank] = n;
  pthread_barrier_wait(&w->bar);
  for (int r = 0; r < w->T; r++) memcpy(out + r * n, w->in[r], (size_t)n * sizeof(float));
  if (rc->rank == 0) w->moved[1] += w->T * n;
  pthread_barrier_wait(&w->bar);
  return SL_OK;
}
static int fake_reducescatter(void *user, const float *in, float *out, int64_t n) {
  rank_ctx *rc = user;
  world *w = rc->w;
  w->in[rc->rank] = in;
  pthread_barrier_wait(&w->bar);
  for (int64_t i = 0; i < n; i++) {
    float a = w->in[0][rc->rank * n + i];
    for (int r = 1; r < w->T; r++) a += w->in[r][rc->rank * n + i];
    out[i] = a;
  }
  if (rc->rank == 0) w->moved[2] += w->T * n;
  pthread_barrier_wait(&w->bar);
  return SL_OK;
}
static int acc_params(void *user, int u, const float **p) {
  rank_ctx *rc = user;
  *p = u == 0 ? rc->wte : rc->W;
  return SL_OK;
}
static int acc_grads(void *user, int u, float **g) {
  rank_ctx *rc = user;
  if (u != 0) return sl_fail(SL_EINTERNAL, "unexpected unit %d", u);
  *g = rc->dwte;
  return SL_OK;
}

/* ---- one case ------------------------------------------------------------------ */
typedef struct {
  const sl_ops *ops;
  int64_t V, T;
  int tied, sp;
  /* shared inputs */
  const int32_t *tok, *tgt;
  const float *x, *dout, *norm, *wfull; /* wfull (V, C): head weight = embedding when tied */
  /* per rank */
  rank_ctx rc[MAXT];
  sl_model *m[MAXT];
  sl_lm_head_vp hv[MAXT];
  float *flat[MAXT], *grads[MAXT], *wte[MAXT], *dwte[MAXT], *emb[MAXT], *dres[MAXT], *dln[MAXT], *logits[MAXT];
  int status[MAXT];
} vcase;

static sl_model *hand_model(const sl_ops *ops, rank_ctx *rc, sl_tp_group tp) {
  sl_model *m = calloc(1, sizeof *m);
  m->ops = ops;
  m->k = ops->ctx_create(1);
  m->B = B;
  m->T = S;
  m->access = (sl_unit_access){.user = rc, .params = acc_params, .grads = acc_grads, .tp = tp};
  return m;
}

static void *rank_main(void *p) {
  rank_ctx *rc = p;
  vcase *c = rc->owner;
  int r = rc->rank, st;
  sl_model *m = c->m[r];
  sl_vocab_split *vs = &c->hv[r].vs;
  int64_t off = c->sp ? r * (N / c->T) * C : 0; /* this rank's rows under SP */
  float *spb = c->sp ? c->dln[r] : NULL;        /* (N, C) scratch under SP */
  if ((st = sl_vp_embedding_fwd(m, vs, c->emb[r], c->wte[r], N, C, spb)) ||
      (st = sl_lm_head_vp_fwd(m, &c->hv[r], c->flat[r], c->x + off)) ||
      (st = sl_lm_head_vp_logits(m, &c->hv[r], c->logits[r])) ||
      (st = sl_lm_head_vp_bwd(m, &c->hv[r], c->flat[r], c->grads[r], c->x + off, c->dres[r], c->dln[r])) ||
      (st = sl_vp_embedding_bwd(m, vs, c->dwte[r], c->dout + off, N, C, spb)))
    fprintf(stderr, "rank %d: %s\n", r, sl_errmsg());
  c->status[r] = st;
  return NULL;
}

static float *nanpad_slice(const float *w, int64_t V, const sl_vocab_split *s) {
  float *p = malloc((size_t)(s->Vl * C) * sizeof(float));
  for (int64_t i = 0; i < s->Vl * C; i++) p[i] = s->v0 * C + i < V * C ? w[s->v0 * C + i] : NAN;
  return p;
}

static void run_case(const sl_ops *ops, int64_t V, int T, int tied, int sp) {
  char tag[64], nm[160];
  snprintf(tag, sizeof tag, "V=%lld T=%d %s%s", (long long)V, T, tied ? "tied" : "untied", sp ? " SP" : "");
  int32_t tok[N], tgt[N];
  for (int i = 0; i < N; i++) {
    tok[i] = (int32_t)(sl_splitmix64(&g_rng) % (uint64_t)V);
    tgt[i] = i % 5 == 2 ? -1 : (int32_t)(sl_splitmix64(&g_rng) % (uint64_t)V);
  }
  tok[0] = tgt[1] = (int32_t)(V - 1); /* the last real id: next to the padding */
  float x[N * C], dout[N * C], norm[C];
  for (int i = 0; i < N * C; i++) x[i] = rnd(1.0f), dout[i] = rnd(1.0f);
  for (int i = 0; i < C; i++) norm[i] = 1.0f + rnd(0.2f);
  float *wfull = malloc((size_t)(V * C) * sizeof(float));
  for (int64_t i = 0; i < V * C; i++) wfull[i] = rnd(0.5f);
  float scale = 1.0f / (float)N;

  /* the single-rank oracle */
  rank_ctx rc0 = {0};
  sl_model *m0 = hand_model(ops, &rc0, sl_tp_single());
  sl_lm_head h0;
  float *flat0 = calloc((size_t)(C + V * C), sizeof(float)), *g0 = calloc((size_t)(C + V * C), sizeof(float));
  float *dwte0 = calloc((size_t)(V * C), sizeof(float)), *emb0 = calloc(N * C, sizeof(float));
  float *dres0 = calloc(N * C, sizeof(float)), *dln0 = calloc(N * C, sizeof(float));
  float *log0 = calloc((size_t)(N * V), sizeof(float));
  memcpy(flat0, norm, sizeof norm);
  if (!tied) memcpy(flat0 + C, wfull, (size_t)(V * C) * sizeof(float));
  rc0.wte = wfull;
  rc0.W = flat0;
  rc0.dwte = tied ? dwte0 : NULL;
  sl_model_set_batch(m0, tok, tgt, scale);
  if (sl_lm_head_init(m0, &h0, C, V, EPS, tied, 1)) exit(1);
  ops->embedding_fwd(m0->k, emb0, tok, wfull, N, C);
  sl_lm_head_fwd(m0, &h0, flat0, x);
  sl_lm_head_logits(m0, &h0, log0);
  sl_lm_head_bwd(m0, &h0, flat0, g0, x, dres0, dln0);
  ops->embedding_bwd(m0->k, dwte0, dout, tok, N, C);
  float *dW0 = tied ? dwte0 : g0 + C; /* (V, C) */

  /* T ranks */
  vcase *c = calloc(1, sizeof *c);
  world w = {.T = T, .cap = N * C};
  w.res = malloc((size_t)w.cap * sizeof(float));
  pthread_barrier_init(&w.bar, NULL, (unsigned)T);
  c->ops = ops;
  c->V = V;
  c->T = T;
  c->tied = tied;
  c->sp = sp;
  c->tok = tok;
  c->tgt = tgt;
  c->x = x;
  c->dout = dout;
  for (int r = 0; r < T; r++) {
    rank_ctx *rc = &c->rc[r];
    rc->w = &w;
    rc->rank = r;
    rc->owner = c;
    sl_tp_group tp = {.rank = r,
                      .size = T,
                      .user = rc,
                      .allreduce = fake_allreduce,
                      .allgather = fake_allgather,
                      .reducescatter = fake_reducescatter};
    if (T == 1) tp = sl_tp_single();
    c->m[r] = hand_model(ops, rc, tp);
    sl_model_set_batch(c->m[r], tok, tgt, scale);
    sl_vocab_split vs;
    if (sl_vocab_split_make(V, T, r, &vs) || sl_lm_head_vp_init(c->m[r], &c->hv[r], &vs, C, EPS, tied, 1, sp)) exit(1);
    int64_t Vl = vs.Vl;
    c->wte[r] = nanpad_slice(wfull, V, &vs);
    c->dwte[r] = calloc((size_t)(Vl * C), sizeof(float));
    c->flat[r] = calloc((size_t)(C + Vl * C), sizeof(float));
    c->grads[r] = calloc((size_t)(C + Vl * C), sizeof(float));
    memcpy(c->flat[r], norm, sizeof norm);
    if (!tied) memcpy(c->flat[r] + C, c->wte[r], (size_t)(Vl * C) * sizeof(float));
    c->emb[r] = calloc(N * C, sizeof(float));
    c->dres[r] = calloc(N * C, sizeof(float));
    c->dln[r] = calloc(N * C, sizeof(float));
    c->logits[r] = calloc((size_t)(N * V), sizeof(float));
    rc->wte = c->wte[r];
    rc->W = c->flat[r];
    rc->dwte = c->dwte[r];
  }
  pthread_t th[MAXT];
  for (int r = 0; r < T; r++) pthread_create(&th[r], NULL, rank_main, &c->rc[r]);
  for (int r = 0; r < T; r++) pthread_join(th[r], NULL);

  double e_loss = 0, e_lse = 0, e_sum = 0, e_dres = 0, e_norm = 0, e_emb = 0, e_log = 0, same = 0, pad = 0, e_dw = 0;
  int st = 0;
  int64_t n = sp ? N / T : N; /* rows of x / dres / the embedding output per rank */
  for (int r = 0; r < T; r++) {
    sl_lm_head_vp *hv = &c->hv[r];
    const sl_vocab_split *vs = &hv->vs;
    int64_t off = sp ? r * n * C : 0;
    st |= c->status[r];
    e_loss = fmax(e_loss, rel(hv->h.losses, h0.losses, N, 1.0));
    e_lse = fmax(e_lse, rel(hv->h.lse, h0.lse, N, 1.0));
    e_sum = fmax(e_sum, fabs(c->m[r]->loss_sum - m0->loss_sum) / fmax(fabs(m0->loss_sum), 1.0));
    e_dres = fmax(e_dres, rel(c->dres[r], dres0 + off, n * C, 1e-3));
    e_norm = fmax(e_norm, rel(c->grads[r], g0, C, 1e-3)); /* under SP summed over TP by the head */
    e_emb = fmax(e_emb, rel(c->emb[r], emb0 + off, n * C, 1.0));
    e_log = fmax(e_log, rel(c->logits[r], log0, N * V, 1.0));
    same =
        fmax(same, (sp ? 0 : rel(c->dres[r], c->dres[0], N * C, 1e-3)) + rel(hv->h.losses, c->hv[0].h.losses, N, 1.0));
    /* the slice's gradient: tied = embedding + head in unit 0's gradient */
    const float *dW = tied ? c->dwte[r] : c->grads[r] + C;
    if (vs->valid) e_dw = fmax(e_dw, rel(dW, dW0 + vs->v0 * C, vs->valid * C, 1e-3));
    for (int64_t i = vs->valid * C; i < vs->Vl * C; i++) pad = fmax(pad, fabs(dW[i]));
    if (!tied)
      for (int64_t i = vs->valid * C; i < vs->Vl * C; i++) pad = fmax(pad, fabs(c->dwte[r][i]));
  }
  snprintf(nm, sizeof nm, "%s: every rank returned SL_OK", tag);
  report(nm, st ? 1.0 : 0.0, 0.0);
  snprintf(nm, sizeof nm, "%s: losses = sl_lm_head", tag);
  report(nm, e_loss, 1e-5);
  snprintf(nm, sizeof nm, "%s: lse = sl_lm_head", tag);
  report(nm, e_lse, 1e-5);
  snprintf(nm, sizeof nm, "%s: loss_sum = sl_lm_head (every rank)", tag);
  report(nm, e_sum, 1e-5);
  snprintf(nm, sizeof nm, "%s: dres = sl_lm_head_bwd", tag);
  report(nm, e_dres, 1e-5);
  snprintf(nm, sizeof nm, "%s: final-norm gradient%s = sl_lm_head_bwd", tag, sp ? " (summed over TP)" : "");
  report(nm, e_norm, 1e-5);
  snprintf(nm, sizeof nm, "%s: %s gradient slices = single rank", tag, tied ? "tied (embedding + head)" : "lm_head");
  report(nm, e_dw, 1e-5);
  snprintf(nm, sizeof nm, "%s: padding rows get exactly zero gradient", tag);
  report(nm, pad, 0.0);
  snprintf(nm, sizeof nm, "%s: every rank holds the same losses%s", tag, sp ? "" : " and dres");
  report(nm, same, 0.0);
  snprintf(nm, sizeof nm, "%s: embedding rows = embedding_fwd (exact)", tag);
  report(nm, e_emb, 0.0);
  snprintf(nm, sizeof nm, "%s: gathered logits = sl_lm_head_logits", tag);
  report(nm, e_log, 1e-5);
  if (T > 1) {
    /* no SP: embedding N*C, head 3N + N*C all-reduced; SP: head 3N and the
     * final norm's weight gradient C all-reduced,
     * lnf N*C and the embedding's dout N*C all-gathered, the embedding's rows
     * N*C and dln N*C reduce-scattered; both: the logits' N*Vp all-gathered */
    int64_t Vp = c->hv[0].vs.Vp;
    int64_t want[3] = {sp ? 3 * N + C : 2 * N * C + 3 * N, (sp ? 2 * N * C : 0) + N * Vp, sp ? 2 * N * C : 0};
    snprintf(nm, sizeof nm, "%s: elements all-reduced %lld, all-gathered %lld, reduce-scattered %lld", tag,
             (long long)want[0], (long long)want[1], (long long)want[2]);
    report(nm, (double)(llabs(w.moved[0] - want[0]) + llabs(w.moved[1] - want[1]) + llabs(w.moved[2] - want[2])), 0.0);
  }

  for (int r = 0; r < T; r++) {
    sl_kctx *k = c->m[r]->k;
    sl_model_destroy(c->m[r]);
    ops->ctx_destroy(k);
    free(c->wte[r]), free(c->dwte[r]), free(c->flat[r]), free(c->grads[r]), free(c->emb[r]);
    free(c->dres[r]), free(c->dln[r]), free(c->logits[r]);
  }
  pthread_barrier_destroy(&w.bar);
  free(w.res);
  free(c);
  sl_kctx *k0 = m0->k;
  sl_model_destroy(m0);
  ops->ctx_destroy(k0);
  free(wfull), free(flat0), free(g0), free(dwte0), free(emb0), free(dres0), free(dln0), free(log0);
}

/* A split for another group, bad sizes: refused with a message, no crash. */
static void refusals(const sl_ops *ops) {
  sl_vocab_split vs;
  report("split refuses vocab_size 0 (SL_EINPUT)", sl_vocab_split_make(0, 2, 0, &vs) == SL_EINPUT ? 0 : 1, 0);
  report("split refuses T = 0 (SL_EINPUT)", sl_vocab_split_make(10, 0, 0, &vs) == SL_EINPUT ? 0 : 1, 0);
  report("split refuses rank 2 of 2 (SL_EINPUT)", sl_vocab_split_make(10, 2, 2, &vs) == SL_EINPUT ? 0 : 1, 0);
  sl_vocab_split_make(211, 4, 3, &vs);
  report("split 211 / 4, rank 3: Vl 53, v0 159, valid 52",
         vs.Vl == 53 && vs.Vp == 212 && vs.v0 == 159 && vs.valid == 52 ? 0 : 1, 0);
  rank_ctx rc = {0};
  sl_model *m = hand_model(ops, &rc, sl_tp_single()); /* T = 1 group, split for T = 4 */
  int32_t tok[N] = {0};
  float out[N * C];
  sl_model_set_batch(m, tok, tok, 1.0f);
  int st = sl_vp_embedding_fwd(m, &vs, out, out, N, C, NULL);
  int ok = st == SL_EINTERNAL && strstr(sl_errmsg(), "rank 3 of 4") && strstr(sl_errmsg(), "rank 0 of 1");
  printf("     (message: %s)\n", sl_errmsg());
  report("a split for another TP group is refused, naming both", ok ? 0 : 1, 0);
  sl_kctx *k = m->k;
  sl_model_destroy(m);
  ops->ctx_destroy(k);
}

int main(void) {
  const sl_ops *ops = sl_ops_cpu();
  static const int64_t Vs[] = {211, 300, 5};
  static const int Ts[] = {2, 4};
  for (int tied = 0; tied <= 1; tied++) {
    run_case(ops, 211, 1, tied, 0); /* T = 1 through the same functions */
    run_case(ops, 211, 1, tied, 1); /* T = 1: sequence parallelism is a no-op */
    for (int sp = 0; sp <= 1; sp++)
      for (int vi = 0; vi < 3; vi++)
        for (int ti = 0; ti < 2; ti++) run_case(ops, Vs[vi], Ts[ti], tied, sp);
  }
  refusals(ops);
  printf("%d passed, %d failed\n", g_pass, g_fail);
  return g_fail ? 1 : 0;
}
