/* kernels/cuda_stub.c — built when no CUDA toolkit is found. */
#include "base/base.h"
#include "kernels/kernels.h"
const sl_ops *sl_ops_cuda(void) {
  sl_fail(SL_EINPUT, "this build has no CUDA backend (configured without a CUDA toolkit)");
  return 0;
}
