// hip_api.h: HIP's names for the gpu* vocabulary used by runtime/gpu (the
// HIP build, cmake/LoomHip.cmake; compiled in CI, never run: the project has
// no AMD GPU).
#ifndef LOOMRT_HIP_HIP_API_H
#define LOOMRT_HIP_HIP_API_H

// HIP 5.2's headers (Debian's) size warpSize from __AMDGCN_WAVEFRONT_SIZE,
// which clang stopped defining in version 20. Every target this build
// accepts is wave64 (runtime/gpu/gpu_device.h).
#if defined(__clang__) && !defined(__AMDGCN_WAVEFRONT_SIZE)
#define __AMDGCN_WAVEFRONT_SIZE 64
#endif
#include <hip/hip_runtime.h>

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
#define gpuEventQuery hipEventQuery
#define gpuEventCreateNoTiming(e) hipEventCreateWithFlags((e), hipEventDisableTiming)
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuGetLastError hipGetLastError
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemGetInfo hipMemGetInfo
#define gpuMallocAsync hipMallocAsync
#define gpuFreeAsync hipFreeAsync
#define gpuMemcpyDtoHAsync(d, s, n, st) hipMemcpyAsync((d), (s), (n), hipMemcpyDeviceToHost, (st))
using gpuGraph_t = hipGraph_t;
using gpuGraphExec_t = hipGraphExec_t;
#define gpuStreamBeginCaptureLocal(s) hipStreamBeginCapture((s), hipStreamCaptureModeThreadLocal)
#define gpuStreamEndCapture hipStreamEndCapture
#define gpuGraphInstantiate(e, g) hipGraphInstantiate((e), (g), nullptr, nullptr, 0)
#define gpuGraphGetNodes hipGraphGetNodes
#define gpuGraphLaunch hipGraphLaunch
#define gpuGraphDestroy hipGraphDestroy
#define gpuGraphExecDestroy hipGraphExecDestroy

#endif // LOOMRT_HIP_HIP_API_H
