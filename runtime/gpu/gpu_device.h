// gpu_device.h: the device-side half of the portability layer (gpu_api.h is
// the host half). Every name that differs between CUDA and HIP device code,
// and the width of a warp, is spelled here once; runtime/gpu/*.cu use only
// these. test/Tools/portable-kernels.test runs scripts/check-portable-kernels.py,
// which fails on a CUDA-only name or a literal warp size anywhere else in
// runtime/gpu.
//
// Warps: 32 lanes on NVIDIA, 64 on the AMD CDNA GPUs the HIP build targets
// (gfx90a = MI250X, gfx942 = MI300X; runtime/CMakeLists.txt refuses a wave32
// target such as RDNA's gfx11). kWarp is a compile-time constant on both
// passes (host and device) because launch shapes are computed on the host.
#ifndef LOOMRT_GPU_GPU_DEVICE_H
#define LOOMRT_GPU_GPU_DEVICE_H

#include "gpu/gpu_api.h"

#include <cstdint>

#if defined(LOOMRT_GPU_HIP)
// No hipCUB/rocPRIM in Debian: the sorted row gather runs unsorted on HIP.
#define LOOMRT_GPU_HAS_RADIX_SORT 0
#else
#include <cub/cub.cuh>
#define LOOMRT_GPU_HAS_RADIX_SORT 1
#endif

namespace loomrt {

#if defined(LOOMRT_GPU_HIP)
constexpr int kWarp = 64;
#else
constexpr int kWarp = 32;
#endif

/// The lane's index in its warp, and the warp's index in its block.
__device__ __forceinline__ int laneId() { return int(threadIdx.x) % kWarp; }
__device__ __forceinline__ int warpId() { return int(threadIdx.x) / kWarp; }

/// v of the lane whose index differs from this one's in the bits of `mask`
/// (every lane of the warp takes part).
__device__ __forceinline__ float shuffleXor(float v, int mask) {
#if defined(LOOMRT_GPU_HIP)
  return __shfl_xor(v, mask, kWarp);
#else
  return __shfl_xor_sync(0xffffffffu, v, mask);
#endif
}

/// A clock that runs at a fixed rate while the kernel runs: the global
/// timer in ns on NVIDIA; the real-time counter on AMD, whose rate the host
/// turns ns into (gpuTimerTicks in gpu_backend.cu).
__device__ __forceinline__ int64_t deviceClock() {
#if defined(LOOMRT_GPU_HIP)
#if defined(__HIP_DEVICE_COMPILE__)
  return int64_t(__builtin_amdgcn_s_memrealtime()); // what wall_clock64() reads on gfx9
#else
  return 0; // the host pass only parses device functions
#endif
#else
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return int64_t(t);
#endif
}
#if LOOMRT_GPU_HAS_RADIX_SORT
/// (key, value) pairs sorted by the low `bits` bits of the key, stably, on
/// `st` (CUB's radix sort). With temp null, only sets tempBytes.
inline gpuError_t sortPairs(void *temp, size_t &tempBytes, const int64_t *keysIn,
                            int64_t *keysOut, const int64_t *valuesIn, int64_t *valuesOut,
                            size_t n, int bits, gpuStream_t st) {
  return cub::DeviceRadixSort::SortPairs(temp, tempBytes, keysIn, keysOut, valuesIn, valuesOut,
                                         int(n), 0, bits, st);
}
#endif

/// Gives the SM / CU away for about a microsecond.
__device__ __forceinline__ void backOff() {
#if defined(LOOMRT_GPU_HIP)
  __builtin_amdgcn_s_sleep(127); // 127 x 64 clocks
#else
  __nanosleep(1000);
#endif
}

} // namespace loomrt

#endif // LOOMRT_GPU_GPU_DEVICE_H
