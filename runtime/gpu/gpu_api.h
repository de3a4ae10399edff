// gpu_api.h: the small portability layer that lets runtime/gpu/*.cu compile
// for CUDA (nvcc) and, later, HIP (hipcc) from one source. Vendor headers and
// the name mapping live in each vendor's folder.
#ifndef LOOMRT_GPU_GPU_API_H
#define LOOMRT_GPU_GPU_API_H

#if defined(LOOMRT_GPU_HIP)
#include "hip/hip_api.h"
#else
#include "cuda/cuda_api.h"
#endif

#endif // LOOMRT_GPU_GPU_API_H
