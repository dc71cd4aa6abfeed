/* tests/cuda_emu/include/cuda_runtime.h — stand-in for the CUDA runtime API
 * under the emulator (implemented in tests/cuda_emu/emu.cpp). Device memory
 * is host memory (256-byte aligned, filled with NaN bytes on allocation, its
 * ranges tracked so copies and GEMMs can be bounds-checked); stream
 * operations are queued per stream and run at synchronising calls, checked
 * by a race detector (emu.cpp "streams", docs/cuda.md). Functions
 * have C++ linkage, so they never clash with a real libcudart in the same
 * link; a C file (shard/comm_nccl.c in shardlm_emu) reaches the same
 * functions under sl_emu_c_ names with C linkage (the #defines below,
 * tests/cuda_emu/emu_c.cpp). Errors are returned, recorded for
 * cudaGetLastError and printed to stderr with "cuda-emu:". */
#ifndef SL_EMU_CUDA_RUNTIME_H
#define SL_EMU_CUDA_RUNTIME_H

#include <stddef.h>

#include "library_types.h"
#ifdef __cplusplus
#include "sl_emu.h"
#define SL_EMU_DEFAULT(x) = x
#else
typedef struct CUstream_st *cudaStream_t;
#define SL_EMU_DEFAULT(x)
#define cudaGetLastError sl_emu_c_cudaGetLastError
#define cudaPeekAtLastError sl_emu_c_cudaPeekAtLastError
#define cudaGetErrorString sl_emu_c_cudaGetErrorString
#define cudaGetErrorName sl_emu_c_cudaGetErrorName
#define cudaGetDeviceCount sl_emu_c_cudaGetDeviceCount
#define cudaSetDevice sl_emu_c_cudaSetDevice
#define cudaGetDevice sl_emu_c_cudaGetDevice
#define cudaGetDeviceProperties sl_emu_c_cudaGetDeviceProperties
#define cudaMemGetInfo sl_emu_c_cudaMemGetInfo
#define cudaDeviceSynchronize sl_emu_c_cudaDeviceSynchronize
#define cudaRuntimeGetVersion sl_emu_c_cudaRuntimeGetVersion
#define cudaDriverGetVersion sl_emu_c_cudaDriverGetVersion
#define cudaDeviceGetStreamPriorityRange sl_emu_c_cudaDeviceGetStreamPriorityRange
#define cudaMalloc sl_emu_c_cudaMalloc
#define cudaFree sl_emu_c_cudaFree
#define cudaMallocAsync sl_emu_c_cudaMallocAsync
#define cudaFreeAsync sl_emu_c_cudaFreeAsync
#define cudaMallocHost sl_emu_c_cudaMallocHost
#define cudaHostAlloc sl_emu_c_cudaHostAlloc
#define cudaFreeHost sl_emu_c_cudaFreeHost
#define cudaMemcpy sl_emu_c_cudaMemcpy
#define cudaMemcpyAsync sl_emu_c_cudaMemcpyAsync
#define cudaMemset sl_emu_c_cudaMemset
#define cudaMemsetAsync sl_emu_c_cudaMemsetAsync
#define cudaMemset2DAsync sl_emu_c_cudaMemset2DAsync
#define cudaStreamCreate sl_emu_c_cudaStreamCreate
#define cudaStreamCreateWithFlags sl_emu_c_cudaStreamCreateWithFlags
#define cudaStreamCreateWithPriority sl_emu_c_cudaStreamCreateWithPriority
#define cudaStreamDestroy sl_emu_c_cudaStreamDestroy
#define cudaStreamSynchronize sl_emu_c_cudaStreamSynchronize
#define cudaStreamQuery sl_emu_c_cudaStreamQuery
#define cudaStreamWaitEvent sl_emu_c_cudaStreamWaitEvent
#define cudaEventCreate sl_emu_c_cudaEventCreate
#define cudaEventCreateWithFlags sl_emu_c_cudaEventCreateWithFlags
#define cudaEventDestroy sl_emu_c_cudaEventDestroy
#define cudaEventRecord sl_emu_c_cudaEventRecord
#define cudaEventSynchronize sl_emu_c_cudaEventSynchronize
#define cudaEventQuery sl_emu_c_cudaEventQuery
#define cudaEventElapsedTime sl_emu_c_cudaEventElapsedTime
#endif

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719,
};
typedef enum cudaError cudaError_t;
typedef enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
} cudaMemcpyKind;
typedef struct CUevent_st *cudaEvent_t;
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventDisableTiming 0x02
#define cudaHostAllocDefault 0x00

typedef struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem, sharedMemPerBlock;
  int warpSize, maxThreadsPerBlock, multiProcessorCount, major, minor;
} cudaDeviceProp;

cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaRuntimeGetVersion(int *v);
cudaError_t cudaDriverGetVersion(int *v);
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest);

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaHostAlloc(void **p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void *p);
/* stream-ordered: allocated at once; the free is queued on the stream */
cudaError_t cudaMallocAsync(void **p, size_t bytes, cudaStream_t s);
cudaError_t cudaFreeAsync(void *p, cudaStream_t s);
#ifdef __cplusplus
template <class T> inline cudaError_t cudaMalloc(T **p, size_t bytes) { return cudaMalloc((void **)p, bytes); }
template <class T> inline cudaError_t cudaMallocHost(T **p, size_t bytes) { return cudaMallocHost((void **)p, bytes); }
#endif

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t s SL_EMU_DEFAULT(0));
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s SL_EMU_DEFAULT(0));
cudaError_t cudaMemset2DAsync(void *p, size_t pitch, int value, size_t width, size_t height,
                              cudaStream_t s SL_EMU_DEFAULT(0));

cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags SL_EMU_DEFAULT(0));
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s SL_EMU_DEFAULT(0));
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b);

#endif /* SL_EMU_CUDA_RUNTIME_H */
