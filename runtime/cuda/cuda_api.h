// cuda_api.h: CUDA's names for the gpu* vocabulary used by runtime/gpu.
#ifndef LOOMRT_CUDA_CUDA_API_H
#define LOOMRT_CUDA_CUDA_API_H

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
#define gpuEventQuery cudaEventQuery
#define gpuEventCreateNoTiming(e) cudaEventCreateWithFlags((e), cudaEventDisableTiming)
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuGetLastError cudaGetLastError
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemGetInfo cudaMemGetInfo
#define gpuMallocAsync cudaMallocAsync
#define gpuFreeAsync cudaFreeAsync
#define gpuMemcpyDtoHAsync(d, s, n, st) cudaMemcpyAsync((d), (s), (n), cudaMemcpyDeviceToHost, (st))
using gpuGraph_t = cudaGraph_t;
using gpuGraphExec_t = cudaGraphExec_t;
#define gpuStreamBeginCaptureLocal(s) cudaStreamBeginCapture((s), cudaStreamCaptureModeThreadLocal)
#define gpuStreamEndCapture cudaStreamEndCapture
#define gpuGraphInstantiate(e, g) cudaGraphInstantiate((e), (g), 0)
#define gpuGraphGetNodes cudaGraphGetNodes
#define gpuGraphLaunch cudaGraphLaunch
#define gpuGraphDestroy cudaGraphDestroy
#define gpuGraphExecDestroy cudaGraphExecDestroy

#endif // LOOMRT_CUDA_CUDA_API_H
