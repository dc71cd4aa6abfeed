/* tests/cuda_emu/emu_c.cpp — the emulated CUDA runtime for C callers:
 * include/cuda_runtime.h, included from C, renames every function to
 * sl_emu_c_NAME; these are those names with C linkage, each calling the C++
 * function of emu.cpp. Used by shard/comm_nccl.c compiled for shardlm_emu.
 * Distinct names, so a real libcudart in the same link never clashes. */
#include "cuda_runtime.h"

extern "C" {
cudaError_t sl_emu_c_cudaGetLastError(void) { return cudaGetLastError(); }
cudaError_t sl_emu_c_cudaPeekAtLastError(void) { return cudaPeekAtLastError(); }
const char *sl_emu_c_cudaGetErrorString(cudaError_t e) { return cudaGetErrorString(e); }
const char *sl_emu_c_cudaGetErrorName(cudaError_t e) { return cudaGetErrorName(e); }
cudaError_t sl_emu_c_cudaGetDeviceCount(int *n) { return cudaGetDeviceCount(n); }
cudaError_t sl_emu_c_cudaSetDevice(int dev) { return cudaSetDevice(dev); }
cudaError_t sl_emu_c_cudaGetDevice(int *dev) { return cudaGetDevice(dev); }
cudaError_t sl_emu_c_cudaGetDeviceProperties(cudaDeviceProp *p, int dev) { return cudaGetDeviceProperties(p, dev); }
cudaError_t sl_emu_c_cudaMemGetInfo(size_t *fr, size_t *total) { return cudaMemGetInfo(fr, total); }
cudaError_t sl_emu_c_cudaDeviceSynchronize(void) { return cudaDeviceSynchronize(); }
cudaError_t sl_emu_c_cudaRuntimeGetVersion(int *v) { return cudaRuntimeGetVersion(v); }
cudaError_t sl_emu_c_cudaDriverGetVersion(int *v) { return cudaDriverGetVersion(v); }
cudaError_t sl_emu_c_cudaDeviceGetStreamPriorityRange(int *lo, int *hi) {
  return cudaDeviceGetStreamPriorityRange(lo, hi);
}
cudaError_t sl_emu_c_cudaMalloc(void **p, size_t bytes) { return cudaMalloc(p, bytes); }
cudaError_t sl_emu_c_cudaFree(void *p) { return cudaFree(p); }
cudaError_t sl_emu_c_cudaMallocAsync(void **p, size_t bytes, cudaStream_t s) { return cudaMallocAsync(p, bytes, s); }
cudaError_t sl_emu_c_cudaFreeAsync(void *p, cudaStream_t s) { return cudaFreeAsync(p, s); }
cudaError_t sl_emu_c_cudaMallocHost(void **p, size_t bytes) { return cudaMallocHost(p, bytes); }
cudaError_t sl_emu_c_cudaHostAlloc(void **p, size_t bytes, unsigned f) { return cudaHostAlloc(p, bytes, f); }
cudaError_t sl_emu_c_cudaFreeHost(void *p) { return cudaFreeHost(p); }
cudaError_t sl_emu_c_cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind k) { return cudaMemcpy(d, s, n, k); }
cudaError_t sl_emu_c_cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st) {
  return cudaMemcpyAsync(d, s, n, k, st);
}
cudaError_t sl_emu_c_cudaMemset(void *p, int v, size_t n) { return cudaMemset(p, v, n); }
cudaError_t sl_emu_c_cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) { return cudaMemsetAsync(p, v, n, s); }
cudaError_t sl_emu_c_cudaMemset2DAsync(void *p, size_t pitch, int v, size_t w, size_t h, cudaStream_t s) {
  return cudaMemset2DAsync(p, pitch, v, w, h, s);
}
cudaError_t sl_emu_c_cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreate(s); }
cudaError_t sl_emu_c_cudaStreamCreateWithFlags(cudaStream_t *s, unsigned f) { return cudaStreamCreateWithFlags(s, f); }
cudaError_t sl_emu_c_cudaStreamCreateWithPriority(cudaStream_t *s, unsigned f, int prio) {
  return cudaStreamCreateWithPriority(s, f, prio);
}
cudaError_t sl_emu_c_cudaStreamDestroy(cudaStream_t s) { return cudaStreamDestroy(s); }
cudaError_t sl_emu_c_cudaStreamSynchronize(cudaStream_t s) { return cudaStreamSynchronize(s); }
cudaError_t sl_emu_c_cudaStreamQuery(cudaStream_t s) { return cudaStreamQuery(s); }
cudaError_t sl_emu_c_cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned f) {
  return cudaStreamWaitEvent(s, e, f);
}
cudaError_t sl_emu_c_cudaEventCreate(cudaEvent_t *e) { return cudaEventCreate(e); }
cudaError_t sl_emu_c_cudaEventCreateWithFlags(cudaEvent_t *e, unsigned f) { return cudaEventCreateWithFlags(e, f); }
cudaError_t sl_emu_c_cudaEventDestroy(cudaEvent_t e) { return cudaEventDestroy(e); }
cudaError_t sl_emu_c_cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return cudaEventRecord(e, s); }
cudaError_t sl_emu_c_cudaEventSynchronize(cudaEvent_t e) { return cudaEventSynchronize(e); }
cudaError_t sl_emu_c_cudaEventQuery(cudaEvent_t e) { return cudaEventQuery(e); }
cudaError_t sl_emu_c_cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
  return cudaEventElapsedTime(ms, a, b);
}
}
