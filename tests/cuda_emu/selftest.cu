/* tests/cuda_emu/selftest.cu — the emulator's own test (ctest
 * test_cuda_emu_selftest): warp primitives give CUDA's results, and every
 * kernel bug the emulator claims to catch is caught — a missing barrier, a
 * barrier skipped or split, shuffle masks naming exited / absent / elsewhere
 * waiting lanes, out-of-bounds shared memory (in a child process: the
 * sanitizers end it) — plus the cuBLASLt and runtime argument checks, and
 * streams: ordered by an event, a host sync or the legacy stream's implicit
 * waits they pass; the same program without the wait is reported as a race.
 * The emulated mma.sync m16n8k16 (kernels/cuda/mma.cuh) equals a plain
 * matrix product with lane-distinct values, and fragments loaded with B's
 * layout transposed do not.
 * Compiled like the kernels (cu2cpp.cmake), host C++ only. */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/cuda/mma.cuh"

static int npass, nfail;
static void report(const char *name, bool ok, const char *detail = "") {
  printf("%-40s %s  %s\n", name, ok ? "PASS" : "FAIL", detail);
  ok ? npass++ : nfail++;
}
/* the last launch failed with a message containing `what` */
static void expect_error(const char *name, cudaError_t want, const char *what) {
  (void)cudaDeviceSynchronize(); /* a kernel's failure shows once it has run */
  cudaError_t e = cudaGetLastError();
  const char *msg = cudaGetErrorString(e);
  report(name, e == want && strstr(msg, what), msg);
}
/* fn() ends its process abnormally (run in a child) */
static bool dies(void (*fn)()) {
  fflush(stdout);
  fflush(stderr);
  pid_t p = fork();
  if (p == 0) {
    fn();
    _exit(0);
  }
  int st = 0;
  waitpid(p, &st, 0);
  return !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}
static int *dev_ints(int n) {
  int *p = nullptr;
  cudaMalloc(&p, (size_t)n * sizeof(int));
  cudaMemset(p, 0, (size_t)n * sizeof(int));
  return p;
}

/* ---- correct kernels: CUDA's results ------------------------------------- */
static __global__ void k_shuffles(int *out) {
  int lane = threadIdx.x & 31, t = threadIdx.x;
  int *o = out + t * 8;
  o[0] = __shfl_sync(0xffffffffu, t * 10, 5);
  o[1] = __shfl_xor_sync(0xffffffffu, t, 3);
  o[2] = __shfl_up_sync(0xffffffffu, t, 2, 8);
  o[3] = __shfl_down_sync(0xffffffffu, t, 3, 16);
  o[4] = (int)__ballot_sync(0xffffffffu, lane & 1);
  o[5] = __any_sync(0xffffffffu, t == 40);
  o[6] = __all_sync(0xffffffffu, t < 40);
  float f = (float)t;
  for (int s = 16; s; s >>= 1) f += __shfl_xor_sync(0xffffffffu, f, s);
  o[7] = (int)f;
}
static void test_shuffles() {
  int *d = dev_ints(64 * 8), h[64 * 8];
  k_shuffles<<<1, 64>>>(d);
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  int bad = cudaGetLastError() != cudaSuccess;
  for (int t = 0; t < 64; t++) {
    int wb = t & ~31, lane = t & 31;
    int want[8] = {(wb + 5) * 10,
                   wb + (lane ^ 3),
                   (lane & 7) >= 2 ? t - 2 : t,
                   (lane & 15) + 3 < 16 ? t + 3 : t,
                   (int)0xaaaaaaaau,
                   wb == 32,
                   wb == 0,
                   32 * wb + 496};
    bad += memcmp(want, h + t * 8, sizeof want) != 0;
  }
  report("shuffle / ballot / any / all results", bad == 0);
  cudaFree(d);
}

/* s[t + 1] is read in the same phase it is written: the shuffled order makes
 * some threads read it before it is written */
template <bool SYNC> static __global__ void k_neighbour(int *out) {
  __shared__ int s[128];
  s[threadIdx.x] = threadIdx.x + 1 + 1000 * blockIdx.x;
  if (SYNC) __syncthreads();
  out[blockIdx.x * 128 + threadIdx.x] = s[(threadIdx.x + 1) % 128];
}
static __global__ void k_dyn(int *out) {
  extern __shared__ int dyn[];
  dyn[threadIdx.x] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = dyn[31 - threadIdx.x];
}
static void test_barriers() {
  int *d = dev_ints(4 * 128), h[4 * 128];
  int wrong[2] = {0, 0};
  for (int v = 0; v < 2; v++) {
    if (v) k_neighbour<true><<<4, 128>>>(d);
    else k_neighbour<false><<<4, 128>>>(d);
    cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
    for (int i = 0; i < 4 * 128; i++) wrong[v] += h[i] != (i % 128 + 1) % 128 + 1 + 1000 * (i / 128);
  }
  char msg[96];
  snprintf(msg, sizeof msg, "%d of 512 stale reads without the barrier", wrong[0]);
  report("missing __syncthreads shows", wrong[0] > 0 && wrong[1] == 0, msg);
  k_dyn<<<1, 32, 32 * sizeof(int)>>>(d);
  cudaMemcpy(h, d, 32 * sizeof(int), cudaMemcpyDeviceToHost);
  bool ok = cudaGetLastError() == cudaSuccess;
  for (int i = 0; i < 32; i++) ok = ok && h[i] == 31 - i;
  report("extern __shared__ per block", ok);
  cudaFree(d);
}

/* ---- kernel bugs that must fail the launch --------------------------------- */
static __global__ void k_barrier_after_exit(int *out) {
  if (threadIdx.x >= 20) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}
static __global__ void k_barrier_split(int *out) {
  if (threadIdx.x & 1) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}
static __global__ void k_shfl_exited(int *out) {
  if ((threadIdx.x & 31) >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
}
static __global__ void k_shfl_own_mask(int *out) { out[threadIdx.x] = __shfl_sync(0xffffu, 1, 0); }
static __global__ void k_shfl_source(int *out) {
  if ((threadIdx.x & 31) < 16) out[threadIdx.x] = __shfl_sync(0xffffu, 1, 20);
}
static __global__ void k_shfl_masks_differ(int *out) {
  unsigned m = (threadIdx.x & 31) < 16 ? 0xffffffffu : 0xffff0000u;
  out[threadIdx.x] = __shfl_xor_sync(m, 1, 1);
}
static __global__ void k_deadlock(int *out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
  else __syncthreads();
}
static void test_kernel_bugs() {
  struct {
    void (*k)(int *);
    unsigned threads;
    const char *name;
    cudaError_t want;
    const char *what; /* in the message */
  } const bugs[] = {
      {k_barrier_after_exit, 64, "barrier after some threads exit", cudaErrorLaunchFailure, "reached by 20 of 64"},
      {k_barrier_split, 64, "threads at different barriers", cudaErrorLaunchFailure, "different __syncthreads"},
      {k_shfl_exited, 32, "shuffle mask names an exited lane", cudaErrorLaunchFailure, "has exited"},
      {k_shfl_own_mask, 32, "lane outside its own mask", cudaErrorLaunchFailure, "not in its own mask"},
      {k_shfl_source, 32, "shuffle source outside the mask", cudaErrorLaunchFailure, "not in mask"},
      {k_shfl_masks_differ, 32, "lanes with different masks", cudaErrorLaunchFailure, "different warp primitives"},
      {k_deadlock, 32, "shuffle vs barrier deadlock", cudaErrorLaunchFailure, "deadlock"},
      {k_shfl_exited, 2048, "invalid launch configuration", cudaErrorInvalidConfiguration, "block (2048"},
  };
  int *d = dev_ints(2 * 64);
  for (const auto &b : bugs) {
    b.k<<<2, b.threads>>>(d);
    expect_error(b.name, b.want, b.what);
  }
  cudaFree(d);
  test_shuffles(); /* the emulator still works after failed launches */
}

#ifdef SL_EMU_SANITIZED
static __global__ void k_smem_oob(int *out) {
  __shared__ int s[4][8];
  s[threadIdx.x / 8][threadIdx.x % 8 + 1] = 1; /* row overflow: UBSan bounds */
  out[threadIdx.x] = s[0][0];
}
static __global__ void k_dyn_oob(int *out) {
  extern __shared__ int dyn[];
  dyn[threadIdx.x + 1] = 1; /* past the launch's bytes: ASan */
  out[threadIdx.x] = dyn[0];
}
static void run_smem_oob() {
  k_smem_oob<<<1, 32>>>(dev_ints(32));
  cudaDeviceSynchronize();
}
static void run_dyn_oob() {
  k_dyn_oob<<<1, 32, 32 * sizeof(int)>>>(dev_ints(32));
  cudaDeviceSynchronize();
}
static void test_oob() {
  printf("(two sanitizer reports follow: they are expected)\n");
  report("__shared__ index out of bounds", dies(run_smem_oob));
  report("extern __shared__ out of bounds", dies(run_dyn_oob));
}
#else
static void test_oob() { printf("(out-of-bounds checks skipped: built without sanitizers)\n"); }
#endif

/* ---- cuBLASLt stand-in ----------------------------------------------------- */
struct Gemm {
  int ta = 0, tb = 0;
  uint64_t m = 3, n = 4, k = 5;
  int64_t lda = 0, ldb = 0, ldd = 0; /* 0: tight */
  size_t a_off = 0;                  /* bytes added to A */
  uint32_t align_a = 0;              /* 0: preference not set */
  cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
  bool reuse_for_other_shape = false;
};
/* D = op(A) op(B) on small integers (exact); *ok = D is right */
static cublasStatus_t run_gemm(const Gemm &g, bool *ok) {
  cublasLtHandle_t h;
  cublasLtCreate(&h);
  uint64_t ar = g.ta ? g.k : g.m, ac = g.ta ? g.m : g.k, br = g.tb ? g.n : g.k, bc = g.tb ? g.k : g.n;
  int64_t lda = g.lda ? g.lda : (int64_t)ar, ldb = g.ldb ? g.ldb : (int64_t)br;
  int64_t ldd = g.ldd ? g.ldd : (int64_t)g.m;
  float ha[64], hb[64], hd[64];
  for (int i = 0; i < 64; i++) ha[i] = (float)(i % 7 - 3), hb[i] = (float)(i % 5 - 2);
  char *A;
  float *B, *D;
  cudaMalloc(&A, sizeof ha + 8), cudaMalloc(&B, sizeof hb), cudaMalloc(&D, sizeof hd);
  cudaMemcpy(A + g.a_off, ha, sizeof ha, cudaMemcpyHostToDevice);
  cudaMemcpy(B, hb, sizeof hb, cudaMemcpyHostToDevice);
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, ld, lbo, lo; /* lbo, lo: one column fewer */
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulHeuristicResult_t heur;
  int nres = 0;
  cublasLtMatmulDescCreate(&op, g.ct, CUDA_R_32F);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &g.ta, sizeof g.ta);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &g.tb, sizeof g.tb);
  cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, ar, ac, lda);
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, br, bc, ldb);
  cublasLtMatrixLayoutCreate(&ld, CUDA_R_32F, g.m, g.n, ldd);
  cublasLtMatrixLayoutCreate(&lbo, CUDA_R_32F, g.tb ? g.n - 1 : g.k, g.tb ? g.k : g.n - 1, ldb);
  cublasLtMatrixLayoutCreate(&lo, CUDA_R_32F, g.m, g.n - 1, ldd);
  cublasLtMatmulPreferenceCreate(&pref);
  if (g.align_a)
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &g.align_a,
                                         sizeof g.align_a);
  float one = 1.0f, zero = 0.0f;
  cublasStatus_t s =
      cublasLtMatmulAlgoGetHeuristic(h, op, la, g.reuse_for_other_shape ? lbo : lb, g.reuse_for_other_shape ? lo : ld,
                                     g.reuse_for_other_shape ? lo : ld, pref, 1, &heur, &nres);
  if (!s) s = cublasLtMatmul(h, op, &one, A + g.a_off, la, B, lb, &zero, D, ld, D, ld, &heur.algo, nullptr, 0, 0);
  *ok = false;
  if (!s && cudaMemcpy(hd, D, sizeof hd, cudaMemcpyDeviceToHost) == cudaSuccess) {
    *ok = true;
    for (uint64_t i = 0; i < g.m; i++)
      for (uint64_t j = 0; j < g.n; j++) {
        double acc = 0;
        for (uint64_t q = 0; q < g.k; q++)
          acc += (double)ha[g.ta ? i * lda + q : q * lda + i] * hb[g.tb ? q * ldb + j : j * ldb + q];
        *ok = *ok && hd[j * ldd + i] == (float)acc;
      }
  }
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(lo), cublasLtMatrixLayoutDestroy(lbo), cublasLtMatrixLayoutDestroy(ld);
  cublasLtMatrixLayoutDestroy(lb), cublasLtMatrixLayoutDestroy(la);
  cublasLtMatmulDescDestroy(op);
  cublasLtDestroy(h);
  cudaFree(A), cudaFree(B), cudaFree(D);
  return s;
}
static void test_cublaslt() {
  bool ok = false, all = true;
  for (int t = 0; t < 4; t++) {
    Gemm g;
    g.ta = t & 1, g.tb = t >> 1, g.lda = 6, g.ldd = 4;
    all = all && run_gemm(g, &ok) == CUBLAS_STATUS_SUCCESS && ok;
  }
  report("reference GEMM, all transposes, ld > rows", all);
  Gemm g;
  g.lda = 2; /* A is 3 x 5 */
  cublasStatus_t s = run_gemm(g, &ok);
  report("ld < rows refused", s == CUBLAS_STATUS_INVALID_VALUE, cublasLtGetStatusString(s));
  g = Gemm();
  g.a_off = 4;
  s = run_gemm(g, &ok);
  report("A 4-byte aligned, default preference", s == CUBLAS_STATUS_NOT_SUPPORTED, cublasLtGetStatusString(s));
  g.align_a = 4;
  report("A 4-byte aligned, preference 4", run_gemm(g, &ok) == CUBLAS_STATUS_SUCCESS && ok);
  g = Gemm();
  g.m = 8, g.k = 8; /* 64 floats of A fit, the allocation has 66 */
  g.lda = 9;
  s = run_gemm(g, &ok);
  report("A past its allocation refused", s == CUBLAS_STATUS_INVALID_VALUE, cublasLtGetStatusString(s));
  g = Gemm();
  g.reuse_for_other_shape = true;
  s = run_gemm(g, &ok);
  report("algorithm of another shape refused", s == CUBLAS_STATUS_INVALID_VALUE, cublasLtGetStatusString(s));
  g = Gemm();
  g.ct = CUBLAS_COMPUTE_32F_FAST_TF32;
  report("TF32 compute on integer inputs", run_gemm(g, &ok) == CUBLAS_STATUS_SUCCESS && ok);
}

static void test_runtime() {
  float host[4] = {0, 0, 0, 0}, *d = nullptr;
  cudaMalloc(&d, sizeof host);
  bool ok = cudaMemcpy(host, d, sizeof host, cudaMemcpyHostToDevice) == cudaErrorInvalidValue &&
            cudaMemcpy(d, host, 2 * sizeof host, cudaMemcpyHostToDevice) == cudaErrorInvalidValue &&
            cudaFree(host) == cudaErrorInvalidValue &&
            cudaMemcpy(d, host, sizeof host, cudaMemcpyHostToDevice) == cudaSuccess;
  (void)cudaGetLastError();
  report("memcpy / free argument checks", ok);
  cudaFree(d);
}

/* ---- streams: a missing wait is a race ----------------------------------- */
static __global__ void k_fill(int *p, int v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}
static __global__ void k_copy(int *dst, const int *src, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i] + 1;
}
enum Order { NO_WAIT, EVENT, HOST_SYNC, LEGACY };
/* x filled on stream a, copied to y on stream b; how b learns that a is done */
static bool two_streams(Order o) {
  cudaStream_t a, b = 0;
  cudaEvent_t ev;
  cudaStreamCreateWithFlags(&a, o == LEGACY ? cudaStreamDefault : cudaStreamNonBlocking);
  if (o != LEGACY) cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking);
  cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  int *x = dev_ints(64), *y = dev_ints(64), h[64];
  cudaDeviceSynchronize(); /* the memsets (legacy stream) before the non-blocking streams */
  k_fill<<<2, 32, 0, a>>>(x, 7, 64);
  if (o == EVENT) cudaEventRecord(ev, a), cudaStreamWaitEvent(b, ev, 0);
  if (o == HOST_SYNC) cudaStreamSynchronize(a);
  k_copy<<<2, 32, 0, b>>>(y, x, 64); /* LEGACY: b is the legacy stream, which waits for blocking a */
  cudaMemcpyAsync(h, y, sizeof h, cudaMemcpyDeviceToHost, b); /* pageable: done at return */
  bool ok = cudaGetLastError() == cudaSuccess;
  for (int i = 0; i < 64; i++) ok = ok && h[i] == 8;
  cudaFree(x), cudaFree(y), cudaEventDestroy(ev), cudaStreamDestroy(a);
  if (b) cudaStreamDestroy(b);
  return ok;
}
static void run_no_wait() { two_streams(NO_WAIT); }
/* fn() ends its process abnormally and its stderr contains `what` (printed) */
static bool dies_saying(void (*fn)(), const char *what) {
  char path[] = "/tmp/sl_emu_selftest_XXXXXX", buf[2048] = "";
  int fd = mkstemp(path);
  fflush(stdout);
  fflush(stderr);
  pid_t p = fork();
  if (p == 0) {
    dup2(fd, 2);
    fn();
    _exit(0);
  }
  int st = 0;
  waitpid(p, &st, 0);
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  buf[n > 0 ? n : 0] = 0;
  close(fd);
  unlink(path);
  printf("  %s", buf);
  return !(WIFEXITED(st) && WEXITSTATUS(st) == 0) && strstr(buf, what);
}
static void test_streams() {
  report("two streams, event wait", two_streams(EVENT));
  report("two streams, host sync between", two_streams(HOST_SYNC));
  report("blocking stream, then legacy stream", two_streams(LEGACY));
  /* the planted bug: the same program without the wait */
  report("two streams, missing wait: a race", dies_saying(run_no_wait, "cuda-emu: race on device bytes"));
}

/* ---- mma.sync m16n8k16 bf16 -> f32 (kernels/cuda/mma.cuh) ------------------ */
/* D (16x8) = A (16x16) B (16x8) + C, all row-major in global memory; each
 * lane loads its fragments with the PTX ISA layout (g = lane / 4, t = lane % 4),
 * or with B's rows and columns swapped (`bt`: the negative control). */
static __global__ void k_mma(float *D, const uint16_t *A, const uint16_t *Bm, const float *C, int bt) {
  int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  uint32_t a[4], b[2];
  float c[4];
  for (int r = 0; r < 4; r++) {
    int row = g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1);
    a[r] = (uint32_t)A[row * 16 + col] | (uint32_t)A[row * 16 + col + 1] << 16;
  }
  for (int r = 0; r < 2; r++) {
    int k = 2 * t + 8 * r;
    b[r] = bt ? (uint32_t)Bm[(g + 8 * r) % 16 * 8 + 2 * t] | (uint32_t)Bm[(g + 8 * r) % 16 * 8 + 2 * t + 1] << 16
              : (uint32_t)Bm[k * 8 + g] | (uint32_t)Bm[(k + 1) * 8 + g] << 16;
  }
  for (int i = 0; i < 4; i++) c[i] = C[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)];
  sl_mma_bf16_16816(c, a, b, c); /* d aliases c */
  for (int i = 0; i < 4; i++) D[(g + 8 * (i >> 1)) * 8 + 2 * t + (i & 1)] = c[i];
}
static uint16_t bf16_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return (uint16_t)(u >> 16); /* exact: small integers */
}
/* the number of D elements that differ from the plain product */
static int mma_case(int bt) {
  uint16_t ha[256], hb[128];
  float hc[128], hd[128], ref[128];
  for (int i = 0; i < 256; i++) ha[i] = bf16_of((float)(i - 128)); /* every element distinct, bf16-exact */
  for (int i = 0; i < 128; i++) hb[i] = bf16_of((float)(i - 64)), hc[i] = (float)(3 * i);
  for (int m = 0; m < 16; m++)
    for (int n = 0; n < 8; n++) {
      float acc = hc[m * 8 + n]; /* integers < 2^24: exact in any order */
      for (int k = 0; k < 16; k++) acc += (float)(m * 16 + k - 128) * (float)(k * 8 + n - 64);
      ref[m * 8 + n] = acc;
    }
  uint16_t *da, *db;
  float *dc, *dd;
  cudaMalloc(&da, sizeof ha), cudaMalloc(&db, sizeof hb), cudaMalloc(&dc, sizeof hc), cudaMalloc(&dd, sizeof hd);
  cudaMemcpy(da, ha, sizeof ha, cudaMemcpyHostToDevice), cudaMemcpy(db, hb, sizeof hb, cudaMemcpyHostToDevice);
  cudaMemcpy(dc, hc, sizeof hc, cudaMemcpyHostToDevice), cudaMemset(dd, 0, sizeof hd);
  k_mma<<<1, 32>>>(dd, da, db, dc, bt);
  cudaMemcpy(hd, dd, sizeof hd, cudaMemcpyDeviceToHost);
  cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dd);
  int bad = 0;
  for (int i = 0; i < 128; i++) bad += hd[i] != ref[i];
  return bad;
}
static void test_mma() {
  char msg[64];
  int bad = mma_case(0);
  snprintf(msg, sizeof msg, "%d of 128 differ", bad);
  report("mma m16n8k16 = plain product", bad == 0, msg);
  bad = mma_case(1);
  snprintf(msg, sizeof msg, "%d of 128 differ", bad);
  report("mma, B fragments transposed: wrong", bad > 64, msg);
  uint16_t *z16 = nullptr;
  float *zf = nullptr;
  cudaMalloc(&z16, 512), cudaMalloc(&zf, 512);
  cudaMemset(z16, 0, 512), cudaMemset(zf, 0, 512);
  k_mma<<<1, 16>>>(zf, z16, z16, zf, 0); /* half a warp */
  expect_error("mma in a 16-thread block", cudaErrorLaunchFailure, "does not exist");
  cudaFree(z16), cudaFree(zf);
}

int main() {
  test_shuffles();
  test_barriers();
  test_kernel_bugs();
  test_oob();
  test_cublaslt();
  test_runtime();
  test_streams();
  test_mma();
  printf("%d passed, %d failed\n", npass, nfail);
  return nfail ? 1 : 0;
}
