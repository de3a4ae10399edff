// cuda_api.h: CUDA's names for the gpu* vocabulary used by runtime/gpu.
#ifndef LOOMRT_CUDA_CUDA_API_H
#define LOOMRT_CUDA_CUDA_API_H

#include <cublas_v2.h>
#include <cuda_runtime.h>

#define LOOMRT_GPU_VENDOR "cuda"
using gpuError_t = cudaError_t;
using gpuStream_t = cudaStream_t;
using gpuEvent_t = cudaEvent_t;
#define gpuSuccess cudaSuccess
#define gpuErrorMemoryAllocation cudaErrorMemoryAllocation
#define gpuGetErrorString cudaGetErrorString
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuSetDevice cudaSetDevice
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuHostAlloc(p, n) cudaHostAlloc((p), (n), cudaHostAllocPortable | cudaHostAllocMapped)
#define gpuHostRegister(p, n) cudaHostRegister((p), (n), cudaHostRegisterPortable | cudaHostRegisterMapped)
#define gpuHostUnregister cudaHostUnregister
#define gpuFreeHost cudaFreeHost
#define gpuMemcpyAsync(d, s, n, st) cudaMemcpyAsync((d), (s), (n), cudaMemcpyDefault, (st))
#define gpuStreamCreate(s) cudaStreamCreateWithFlags((s), cudaStreamNonBlocking)
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamWaitEvent(s, e) cudaStreamWaitEvent((s), (e), 0)
#define gpuEventCreate cudaEventCreate
#define gpuEventDestroy cudaEventDestroy
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuGetLastError cudaGetLastError
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemGetInfo cudaMemGetInfo
#define gpuMallocAsync cudaMallocAsync
#define gpuFreeAsync cudaFreeAsync
#define gpuMemcpyDtoHAsync(d, s, n, st) cudaMemcpyAsync((d), (s), (n), cudaMemcpyDeviceToHost, (st))

// BLAS
using gpublasHandle_t = cublasHandle_t;
using gpublasStatus_t = cublasStatus_t;
#define GPUBLAS_STATUS_SUCCESS CUBLAS_STATUS_SUCCESS
#define gpublasCreate cublasCreate
#define gpublasDestroy cublasDestroy
#define gpublasSetStream cublasSetStream
#define GPUBLAS_OP_N CUBLAS_OP_N
#define GPUBLAS_OP_T CUBLAS_OP_T
#define GPU_R_32F CUDA_R_32F
#define GPU_R_16BF CUDA_R_16BF
#define GPUBLAS_COMPUTE_32F CUBLAS_COMPUTE_32F
#define GPUBLAS_GEMM_DEFAULT CUBLAS_GEMM_DEFAULT
#define gpublasGemmStridedBatchedEx cublasGemmStridedBatchedEx

#endif // LOOMRT_CUDA_CUDA_API_H
