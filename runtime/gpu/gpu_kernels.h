// gpu_kernels.h: what the GPU backend's kernel files share (private to
// runtime/gpu): launch shapes, the stream cast, the launch check, dtype
// dispatch, the grid-stride loop and block reductions. Each kernel file
// (gpu_elementwise.cu, gpu_matmul.cu, gpu_rows.cu, gpu_sparse.cu) fills its
// family's entries of the KernelOps table by field name (gpu_ops.cu).
#ifndef LOOMRT_GPU_GPU_KERNELS_H
#define LOOMRT_GPU_GPU_KERNELS_H

#include "common/backend.h"
#include "common/fused_eval.h"
#include "common/kernel_math.h"
#include "common/launch_rules.h"
#include "gpu/gpu_device.h"
#include "gpu/gpu_state.h"

#include <algorithm>
#include <cfloat>
#include <string>
#include <type_traits>
#include <vector>

namespace loomrt {
namespace gpu {

/// Each family's entries of the table.
void addElementwiseKernels(KernelOps &k);
void addMatmulKernels(KernelOps &k);
void addRowKernels(KernelOps &k);
void addSparseKernels(KernelOps &k);

/// loomrt_copy_strided's kernel (gpu_elementwise.cu), which the GEMMs use
/// to pack operands.
loomrt_status copyStrided(void *state, void *stream, size_t elem, const void *src,
                          const int64_t *srcStrides, void *dst, const int64_t *dstStrides,
                          const int64_t *shape, int rank);

} // namespace gpu

namespace {


constexpr int kThreads = 256;

inline unsigned gridFor(size_t n, int threads = kThreads) {
  size_t b = (n + threads - 1) / threads;
  return unsigned(b < 65535 * 8 ? (b ? b : 1) : 65535 * 8);
}

inline gpuStream_t S(void *stream) { return static_cast<gpuStream_t>(stream); }

inline loomrt_status launched(const char *what) {
  return gpuCheck(gpuGetLastError(), what);
}

template <typename F> void withType(loomrt_dtype dt, F &&f) {
  if (dt == LOOMRT_BF16)
    f(uint16_t{});
  else
    f(float{});
}
/// Calls f with an unsigned integer type of `bytes` bytes (uint4 for 16):
/// copies move elements as opaque words of their size.
template <typename F> void withElem(size_t bytes, F &&f) {
  switch (bytes) {
  case 1: f(uint8_t{}); break;
  case 2: f(uint16_t{}); break;
  case 4: f(uint32_t{}); break;
  case 8: f(uint64_t{}); break;
  default: f(uint4{}); break;
  }
}

#define GRID_STRIDE(i, n)                                                      \
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);      \
       i += size_t(gridDim.x) * blockDim.x)

//===----------------------------------------------------------------------===//
// Block reductions
//===----------------------------------------------------------------------===//

__device__ float warpSum(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1)
    v += shuffleXor(v, o);
  return v;
}
__device__ float warpMax(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1)
    v = fmaxf(v, shuffleXor(v, o));
  return v;
}
/// Sum (or max) over the block; every thread gets the result.
template <bool Max> __device__ float blockReduce(float v) {
  // A block has at most 1024 threads: kWarp warps or fewer, either width.
  __shared__ float part[kWarp];
  __shared__ float result;
  v = Max ? warpMax(v) : warpSum(v);
  int lane = laneId(), warp = warpId();
  if (lane == 0)
    part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int nw = (int(blockDim.x) + kWarp - 1) / kWarp;
    float x = lane < nw ? part[lane] : (Max ? -FLT_MAX : 0.0f);
    x = Max ? warpMax(x) : warpSum(x);
    if (lane == 0)
      result = x;
  }
  __syncthreads();
  float r = result;
  __syncthreads(); // part/result reusable by the next reduction
  return r;
}



// Elementwise kernels move 16-byte words (8 bf16 or 4 fp32 per thread and
// access) when sizes and addresses allow: one 2-byte access per thread left
// the bf16 GPT-2 step's adds at a quarter of memory bandwidth (ncu).
template <typename T> struct Word {
  static constexpr int W = 16 / int(sizeof(T));
  T v[W];
};
template <typename T> __device__ __forceinline__ Word<T> loadWord(const T *p) {
  Word<T> w;
  *reinterpret_cast<uint4 *>(w.v) = *reinterpret_cast<const uint4 *>(p);
  return w;
}
template <typename T> __device__ __forceinline__ void storeWord(T *p, const Word<T> &w) {
  *reinterpret_cast<uint4 *>(p) = *reinterpret_cast<const uint4 *>(w.v);
}
inline bool wordAligned(std::initializer_list<const void *> ps) {
  for (const void *p : ps)
    if (reinterpret_cast<uintptr_t>(p) % 16)
      return false;
  return true;
}

/// Column tiles of tall reductions (gpu_elementwise.cu, gpu_rows.cu): kColTile columns (adjacent
/// threads, so loads coalesce whatever the warp width) by kRowLanes row lanes.
constexpr int kColTile = 32, kRowLanes = 8;

} // namespace
} // namespace loomrt

#endif // LOOMRT_GPU_GPU_KERNELS_H
