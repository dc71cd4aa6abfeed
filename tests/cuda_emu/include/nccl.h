/* tests/cuda_emu/include/nccl.h — stand-in for NCCL under the CUDA emulator
 * (implemented in tests/cuda_emu/nccl.cpp): the entry points shard/comm_nccl.c
 * calls, with NCCL's types and values. Ranks are processes (mpirun); the
 * unique id names a POSIX shared-memory segment that every rank of the
 * communicator maps. Every call completes before it returns, after the work
 * queued before it on its stream (emu.cpp "streams"), collectives sum in rank order 0..n-1
 * (deterministic), and buffers must lie inside one emulated device
 * allocation. Every function is renamed to sl_emu_NAME so that a real
 * libnccl in the same link never clashes. C and C++. */
#ifndef SL_EMU_NCCL_H
#define SL_EMU_NCCL_H

#include <stddef.h>

#include "cuda_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NCCL_UNIQUE_ID_BYTES 128
#define NCCL_SPLIT_NOCOLOR -1
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;
typedef struct sl_emu_nccl_comm *ncclComm_t;
typedef struct ncclConfig_v21700 ncclConfig_t; /* never read: NULL is the only config used */

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
} ncclResult_t;
typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
} ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

#define ncclGetUniqueId sl_emu_ncclGetUniqueId
#define ncclCommInitRank sl_emu_ncclCommInitRank
#define ncclCommSplit sl_emu_ncclCommSplit
#define ncclCommDestroy sl_emu_ncclCommDestroy
#define ncclCommAbort sl_emu_ncclCommAbort
#define ncclCommCount sl_emu_ncclCommCount
#define ncclCommUserRank sl_emu_ncclCommUserRank
#define ncclCommGetAsyncError sl_emu_ncclCommGetAsyncError
#define ncclGetErrorString sl_emu_ncclGetErrorString
#define ncclGetLastError sl_emu_ncclGetLastError
#define ncclGroupStart sl_emu_ncclGroupStart
#define ncclGroupEnd sl_emu_ncclGroupEnd
#define ncclAllGather sl_emu_ncclAllGather
#define ncclReduceScatter sl_emu_ncclReduceScatter
#define ncclAllReduce sl_emu_ncclAllReduce
#define ncclBroadcast sl_emu_ncclBroadcast
#define ncclSend sl_emu_ncclSend
#define ncclRecv sl_emu_ncclRecv

ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
/* collective over comm: ranks of one color, ordered by (key, rank); NCCL_SPLIT_NOCOLOR gives NULL */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *async_error);
const char *ncclGetErrorString(ncclResult_t result);
const char *ncclGetLastError(ncclComm_t comm);
/* no-ops: every call below completes before it returns */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* SL_EMU_NCCL_H */
