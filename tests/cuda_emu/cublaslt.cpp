/* tests/cuda_emu/cublaslt.cpp — the emulator's cuBLASLt: descriptors as
 * plain structs, a heuristic that returns one "algorithm" recording the
 * problem and the alignment it was chosen for, and a reference matmul
 * (column-major, double accumulation, one rounding to the output type).
 * Everything real cuBLASLt would reject, or would run out of bounds with, is
 * refused with a reason (cublasLtGetStatusString returns it; also printed
 * to stderr with "cublasLt-emu:"): attribute sizes, shapes inconsistent with
 * the transposes, ld < rows, unsupported type / compute-type combinations,
 * C == D with different layouts, matrices extending past their device
 * allocation, pointers less aligned than the algorithm's preference
 * (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_*_BYTES, default 256), an algorithm
 * used for another problem. CUBLAS_COMPUTE_32F_FAST_TF32 rounds A and B to
 * TF32 (10-bit mantissa, nearest-even) like the tensor cores. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cublasLt.h"

struct cublasLtContext {
  int magic;
};
struct cublasLtMatmulDescOpaque_t {
  int32_t ct, scale, op[3], pmode;
  uint32_t epilogue;
};
struct cublasLtMatrixLayoutOpaque_t {
  uint32_t type;
  int32_t order, batch;
  uint64_t rows, cols;
  int64_t ld, stride;
};
struct cublasLtMatmulPreferenceOpaque_t {
  uint64_t ws;
  uint32_t search, align[4]; /* A, B, C, D */
};

namespace {
constexpr uint64_t kAlgoMagic = 0x616c676f656d75ull;
char g_reason[512];

cublasStatus_t bad(cublasStatus_t s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
cublasStatus_t bad(cublasStatus_t s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_reason, sizeof g_reason, fmt, ap);
  va_end(ap);
  fprintf(stderr, "cublasLt-emu: %s: %s\n", cublasLtGetStatusName(s), g_reason);
  return s;
}
template <class T> cublasStatus_t put(T *dst, int attr, const void *buf, size_t bytes) {
  if (!buf || bytes != sizeof(T))
    return bad(CUBLAS_STATUS_INVALID_VALUE, "attribute %d: %zu bytes given, %zu expected", attr, bytes, sizeof(T));
  memcpy(dst, buf, bytes);
  return CUBLAS_STATUS_SUCCESS;
}
template <class T> cublasStatus_t create(T **out) {
  if (!out) return bad(CUBLAS_STATUS_INVALID_VALUE, "create: NULL result pointer");
  *out = new T{};
  return CUBLAS_STATUS_SUCCESS;
}
size_t elem_bytes(uint32_t t) { return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF ? 2 : 0; }

struct Problem {
  int64_t m, n, k;
};
/* Shapes, types and layouts of D = alpha op(A) op(B) + beta C. */
cublasStatus_t check(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                     cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, Problem *p) {
  if (!d || !A || !B || !C || !D) return bad(CUBLAS_STATUS_INVALID_VALUE, "NULL descriptor");
  const cublasLtMatrixLayout_t L[4] = {A, B, C, D};
  for (int i = 0; i < 4; i++) {
    if (L[i]->order != CUBLASLT_ORDER_COL)
      return bad(CUBLAS_STATUS_NOT_SUPPORTED, "matrix %c: only column-major order is emulated", "ABCD"[i]);
    if (L[i]->ld < (int64_t)(L[i]->rows ? L[i]->rows : 1))
      return bad(CUBLAS_STATUS_INVALID_VALUE, "matrix %c: ld %lld < rows %llu", "ABCD"[i], (long long)L[i] -> ld,
                 (unsigned long long)L[i] -> rows);
    if (L[i]->batch != A->batch)
      return bad(CUBLAS_STATUS_INVALID_VALUE, "batch counts differ (%d vs %d)", L[i]->batch, A->batch);
  }
  if (d->op[0] > 1 || d->op[1] > 1 || d->op[2] != CUBLAS_OP_N)
    return bad(CUBLAS_STATUS_NOT_SUPPORTED, "transa %d transb %d transc %d (N/T for A and B, N for C)", d->op[0],
               d->op[1], d->op[2]);
  if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT || d->pmode != CUBLASLT_POINTER_MODE_HOST)
    return bad(CUBLAS_STATUS_NOT_SUPPORTED, "epilogue %u / pointer mode %d not emulated", d->epilogue, d->pmode);
  int64_t m = d->op[0] ? A->cols : A->rows, k = d->op[0] ? A->rows : A->cols;
  int64_t kb = d->op[1] ? B->cols : B->rows, n = d->op[1] ? B->rows : B->cols;
  if (kb != k || (int64_t)C->rows != m || (int64_t)C->cols != n || D->rows != C->rows || D->cols != C->cols)
    return bad(CUBLAS_STATUS_INVALID_VALUE,
               "op(A) %lldx%lld, op(B) %lldx%lld, C %llux%llu, D "
               "%llux%llu (transa %d transb %d) do not chain",
               (long long)m, (long long)k, (long long)kb, (long long)n, (unsigned long long)C->rows,
               (unsigned long long)C->cols, (unsigned long long)D->rows, (unsigned long long)D->cols, d->op[0],
               d->op[1]);
  bool tf = d->ct == CUBLAS_COMPUTE_32F_FAST_TF32 || d->ct == CUBLAS_COMPUTE_32F_FAST_16BF ||
            d->ct == CUBLAS_COMPUTE_32F_FAST_16F;
  bool ok = d->scale == CUDA_R_32F && A->type == B->type && C->type == D->type && elem_bytes(A->type) &&
            elem_bytes(C->type) &&
            ((d->ct == CUBLAS_COMPUTE_32F && (C->type == CUDA_R_32F || C->type == A->type)) ||
             (tf && A->type == CUDA_R_32F && C->type == CUDA_R_32F));
  if (!ok)
    return bad(CUBLAS_STATUS_NOT_SUPPORTED,
               "compute type %d, scale type %d, A %u B %u C %u D %u: "
               "not a supported combination (emulated: 32F or 16BF inputs with COMPUTE_32F, fp32 "
               "with COMPUTE_32F_FAST_*)",
               d->ct, d->scale, A->type, B->type, C->type, D->type);
  *p = {m, n, k};
  return CUBLAS_STATUS_SUCCESS;
}

float tf32(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & 0xffffe000u;
  memcpy(&f, &u, 4);
  return f;
}
double load(const void *p, uint32_t t, int64_t i, bool round_tf32) {
  if (t == CUDA_R_16BF) {
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  float f = ((const float *)p)[i];
  return round_tf32 ? tf32(f) : f;
}
void store(void *p, uint32_t t, int64_t i, double v) {
  float f = (float)v;
  if (t == CUDA_R_32F) {
    ((float *)p)[i] = f;
    return;
  }
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) u |= 0x400000u;
  else u += 0x7fffu + ((u >> 16) & 1u);
  ((uint16_t *)p)[i] = (uint16_t)(u >> 16);
}
/* bytes a matrix spans, batches included */
size_t extent(cublasLtMatrixLayout_t L) {
  size_t one = L->cols ? ((L->cols - 1) * (size_t)L->ld + L->rows) : 0;
  return (one + (size_t)(L->batch - 1) * (size_t)L->stride) * elem_bytes(L->type);
}
} // namespace

const char *cublasLtGetStatusName(cublasStatus_t s) {
  switch (s) {
  case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
  case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
  default: return "CUBLAS_STATUS_INTERNAL_ERROR";
  }
}
const char *cublasLtGetStatusString(cublasStatus_t s) {
  static char buf[640];
  snprintf(buf, sizeof buf, "%s%s%s", cublasLtGetStatusName(s), s ? " (emulator: " : "", s ? g_reason : "");
  if (s) strncat(buf, ")", sizeof buf - strlen(buf) - 1);
  return buf;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  cublasStatus_t s = create(h);
  if (!s) (*h)->magic = 1;
  return s;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  if (!h || h->magic != 1) return bad(CUBLAS_STATUS_NOT_INITIALIZED, "destroy: bad handle");
  h->magic = 0;
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d, cublasComputeType_t ct, cudaDataType_t scale) {
  cublasStatus_t s = create(d);
  if (!s) (*d)->ct = ct, (*d)->scale = scale, (*d)->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  return s;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) { return delete d, CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t a, const void *buf,
                                              size_t bytes) {
  if (!d) return bad(CUBLAS_STATUS_INVALID_VALUE, "matmul desc: NULL");
  switch (a) {
  case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return put(&d->ct, a, buf, bytes);
  case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return put(&d->scale, a, buf, bytes);
  case CUBLASLT_MATMUL_DESC_POINTER_MODE: return put(&d->pmode, a, buf, bytes);
  case CUBLASLT_MATMUL_DESC_TRANSA: return put(&d->op[0], a, buf, bytes);
  case CUBLASLT_MATMUL_DESC_TRANSB: return put(&d->op[1], a, buf, bytes);
  case CUBLASLT_MATMUL_DESC_TRANSC: return put(&d->op[2], a, buf, bytes);
  case CUBLASLT_MATMUL_DESC_EPILOGUE: return put(&d->epilogue, a, buf, bytes);
  }
  return bad(CUBLAS_STATUS_NOT_SUPPORTED, "matmul desc attribute %d not emulated", (int)a);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l, cudaDataType_t type, uint64_t rows, uint64_t cols,
                                          int64_t ld) {
  cublasStatus_t s = create(l);
  if (!s) **l = {(uint32_t)type, CUBLASLT_ORDER_COL, 1, rows, cols, ld, 0};
  return s;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) { return delete l, CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t a,
                                                const void *buf, size_t bytes) {
  if (!l) return bad(CUBLAS_STATUS_INVALID_VALUE, "layout: NULL");
  switch (a) {
  case CUBLASLT_MATRIX_LAYOUT_TYPE: return put(&l->type, a, buf, bytes);
  case CUBLASLT_MATRIX_LAYOUT_ORDER: return put(&l->order, a, buf, bytes);
  case CUBLASLT_MATRIX_LAYOUT_ROWS: return put(&l->rows, a, buf, bytes);
  case CUBLASLT_MATRIX_LAYOUT_COLS: return put(&l->cols, a, buf, bytes);
  case CUBLASLT_MATRIX_LAYOUT_LD: return put(&l->ld, a, buf, bytes);
  case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return put(&l->batch, a, buf, bytes);
  case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return put(&l->stride, a, buf, bytes);
  }
  return bad(CUBLAS_STATUS_NOT_SUPPORTED, "layout attribute %d not emulated", (int)a);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  cublasStatus_t s = create(p);
  if (!s) **p = {0, 0, {256, 256, 256, 256}};
  return s;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) { return delete p, CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                                    cublasLtMatmulPreferenceAttributes_t a, const void *buf,
                                                    size_t bytes) {
  if (!p) return bad(CUBLAS_STATUS_INVALID_VALUE, "preference: NULL");
  switch (a) {
  case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return put(&p->search, a, buf, bytes);
  case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return put(&p->ws, a, buf, bytes);
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
  case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
    return put(&p->align[a - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES], a, buf, bytes);
  }
  return bad(CUBLAS_STATUS_NOT_SUPPORTED, "preference attribute %d not emulated", (int)a);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A,
                                              cublasLtMatrixLayout_t B, cublasLtMatrixLayout_t C,
                                              cublasLtMatrixLayout_t D, cublasLtMatmulPreference_t pref, int requested,
                                              cublasLtMatmulHeuristicResult_t *res, int *nres) {
  if (!h || h->magic != 1) return bad(CUBLAS_STATUS_NOT_INITIALIZED, "heuristic: bad handle");
  if (!pref || !res || !nres || requested < 1)
    return bad(CUBLAS_STATUS_INVALID_VALUE, "heuristic: NULL preference/result or count %d", requested);
  Problem p;
  cublasStatus_t s = check(d, A, B, C, D, &p);
  if (s) return s;
  memset(res, 0, sizeof *res);
  uint64_t *a = res->algo.data;
  a[0] = kAlgoMagic;
  a[1] =
      pref->align[0] | (uint64_t)pref->align[1] << 16 | (uint64_t)pref->align[2] << 32 | (uint64_t)pref->align[3] << 48;
  a[2] = (uint64_t)p.m, a[3] = (uint64_t)p.n, a[4] = (uint64_t)p.k;
  a[5] = (uint64_t)d->ct << 32 | (uint64_t)A->type << 16 | C->type;
  res->state = CUBLAS_STATUS_SUCCESS;
  res->wavesCount = 1.0f;
  *nres = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t Al, const void *B, cublasLtMatrixLayout_t Bl, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cl, void *D, cublasLtMatrixLayout_t Dl,
                              const cublasLtMatmulAlgo_t *algo, void *ws, size_t ws_bytes, cudaStream_t stream) {
  (void)ws, (void)ws_bytes, (void)stream;
  if (!h || h->magic != 1) return bad(CUBLAS_STATUS_NOT_INITIALIZED, "matmul: bad handle");
  Problem p;
  cublasStatus_t s = check(d, Al, Bl, Cl, Dl, &p);
  if (s) return s;
  if (!alpha || !beta) return bad(CUBLAS_STATUS_INVALID_VALUE, "matmul: NULL alpha or beta");
  float al = *(const float *)alpha, be = *(const float *)beta;
  if (!algo || algo->data[0] != kAlgoMagic)
    return bad(CUBLAS_STATUS_INVALID_VALUE, "matmul: no algorithm from cublasLtMatmulAlgoGetHeuristic");
  const uint64_t *a = algo->data;
  if (a[2] != (uint64_t)p.m || a[3] != (uint64_t)p.n || a[4] != (uint64_t)p.k ||
      a[5] != ((uint64_t)d->ct << 32 | (uint64_t)Al->type << 16 | Cl->type))
    return bad(CUBLAS_STATUS_INVALID_VALUE,
               "matmul: the algorithm was chosen for m %llu n %llu k "
               "%llu, not for m %lld n %lld k %lld (or other types)",
               (unsigned long long)a[2], (unsigned long long)a[3], (unsigned long long)a[4], (long long)p.m,
               (long long)p.n, (long long)p.k);
  if (C == D && (Cl->ld != Dl->ld || Cl->type != Dl->type || Cl->stride != Dl->stride))
    return bad(CUBLAS_STATUS_INVALID_VALUE, "matmul in place (C == D) with different C and D layouts");
  const void *ptr[4] = {A, B, be != 0.0f ? C : D, D};
  const cublasLtMatrixLayout_t L[4] = {Al, Bl, Cl, Dl};
  for (int i = 0; i < 4; i++) {
    uintptr_t u = (uintptr_t)ptr[i];
    unsigned need = (unsigned)(a[1] >> (16 * i) & 0xffff);
    if (!ptr[i]) return bad(CUBLAS_STATUS_INVALID_VALUE, "matmul: matrix %c is NULL", "ABCD"[i]);
    if (u % elem_bytes(L[i]->type) || (need && u % need))
      return bad(CUBLAS_STATUS_NOT_SUPPORTED,
                 "matmul: matrix %c at %p is not %u-byte aligned, the "
                 "alignment the algorithm was chosen for (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_%c_BYTES"
                 ", default 256)",
                 "ABCD"[i], ptr[i], need, "ABCD"[i]);
    if (!sl_emu::device_range(ptr[i], extent(L[i])))
      return bad(CUBLAS_STATUS_INVALID_VALUE,
                 "matmul: matrix %c [%p, +%zu bytes) (%llux%llu, ld "
                 "%lld) is not inside one device allocation",
                 "ABCD"[i], ptr[i], extent(L[i]), (unsigned long long)L[i] -> rows, (unsigned long long)L[i] -> cols,
                 (long long)L[i] -> ld);
  }
  /* queued on the stream with copies of the descriptors (freed at once by callers) */
  std::vector<sl_emu::access> acc;
  for (int i = 0; i < 4; i++)
    if (i != 2 || be != 0.0f) sl_emu::note(acc, ptr[i], extent(L[i]), i == 3);
  const cublasLtMatmulDescOpaque_t dd = *d;
  const cublasLtMatrixLayoutOpaque_t la = *Al, lb = *Bl, lc = *Cl, ld = *Dl;
  sl_emu::enqueue(stream, "cublasLtMatmul", "", 0, std::move(acc), [=] {
    bool tf = dd.ct != CUBLAS_COMPUTE_32F;
    for (int64_t b = 0; b < la.batch; b++)
      for (int64_t j = 0; j < p.n; j++)
        for (int64_t i = 0; i < p.m; i++) {
          double acc = 0.0;
          for (int64_t q = 0; q < p.k; q++) {
            int64_t ia = dd.op[0] ? i * la.ld + q : q * la.ld + i;
            int64_t ib = dd.op[1] ? q * lb.ld + j : j * lb.ld + q;
            acc += load(A, la.type, b * la.stride + ia, tf) * load(B, lb.type, b * lb.stride + ib, tf);
          }
          double v = (double)al * acc;
          if (be != 0.0f) v += (double)be * load(C, lc.type, b * lc.stride + j * lc.ld + i, false);
          store(D, ld.type, b * ld.stride + j * ld.ld + i, v);
        }
  });
  return CUBLAS_STATUS_SUCCESS;
}
