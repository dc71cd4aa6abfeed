/* kernels/cuda_stub.c — built when no CUDA toolkit is found. */
#include "kernels/kernels.h"
const sl_ops *sl_ops_cuda(void) { return 0; }
