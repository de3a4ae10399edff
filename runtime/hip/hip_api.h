// hip_api.h: HIP's names for the gpu* vocabulary used by runtime/gpu.
// Not built yet (no ROCm on the project's machines); kept beside the CUDA
// mapping so the kernels never name a vendor API directly.
#ifndef LOOMRT_HIP_HIP_API_H
#define LOOMRT_HIP_HIP_API_H

#include <hip/hip_runtime.h>
#include <hipblas/hipblas.h>

#define LOOMRT_GPU_VENDOR "hip"
using gpuError_t = hipError_t;
using gpuStream_t = hipStream_t;
using gpuEvent_t = hipEvent_t;
#define gpuSuccess hipSuccess
#define gpuErrorMemoryAllocation hipErrorOutOfMemory
#define gpuGetErrorString hipGetErrorString
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuSetDevice hipSetDevice
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuHostAlloc(p, n) hipHostMalloc((p), (n), hipHostMallocPortable | hipHostMallocMapped)
#define gpuHostRegister(p, n) hipHostRegister((p), (n), hipHostRegisterPortable | hipHostRegisterMapped)
#define gpuHostUnregister hipHostUnregister
#define gpuFreeHost hipHostFree
#define gpuMemcpyAsync(d, s, n, st) hipMemcpyAsync((d), (s), (n), hipMemcpyDefault, (st))
#define gpuStreamCreate(s) hipStreamCreateWithFlags((s), hipStreamNonBlocking)
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamWaitEvent(s, e) hipStreamWaitEvent((s), (e), 0)
#define gpuEventCreate hipEventCreate
#define gpuEventDestroy hipEventDestroy
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuGetLastError hipGetLastError
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemGetInfo hipMemGetInfo
#define gpuMallocAsync hipMallocAsync
#define gpuFreeAsync hipFreeAsync
#define gpuMemcpyDtoHAsync(d, s, n, st) hipMemcpyAsync((d), (s), (n), hipMemcpyDeviceToHost, (st))

// BLAS
using gpublasHandle_t = hipblasHandle_t;
using gpublasStatus_t = hipblasStatus_t;
#define GPUBLAS_STATUS_SUCCESS HIPBLAS_STATUS_SUCCESS
#define gpublasCreate hipblasCreate
#define gpublasDestroy hipblasDestroy
#define gpublasSetStream hipblasSetStream
#define GPUBLAS_OP_N HIPBLAS_OP_N
#define GPUBLAS_OP_T HIPBLAS_OP_T
#define GPU_R_32F HIP_R_32F
#define GPU_R_16BF HIP_R_16BF
#define GPUBLAS_COMPUTE_32F HIPBLAS_COMPUTE_32F
#define GPUBLAS_GEMM_DEFAULT HIPBLAS_GEMM_DEFAULT
#define gpublasGemmStridedBatchedEx hipblasGemmStridedBatchedEx_v2

#endif // LOOMRT_HIP_HIP_API_H
