// gpu_ops.cu: the GPU backend's table of compute kernels (KernelOps), filled
// by field name from the kernel files of each family; single source for
// CUDA and HIP. Elementwise ops use the per-element math of
// common/kernel_math.h (the same functions as the CPU); row ops (norms, softmax, cross-entropy) give
// each row one block and reduce with warp shuffles (gpu_device.h: 32 lanes
// on NVIDIA, 64 on AMD); GEMMs go through GpuGemm (gpu_state.h: cuBLAS,
// rocBLAS or Loom's tiled kernel) with fp32 accumulation. Scratch memory is
// stream-ordered (gpuMallocAsync), so kernels never synchronise the host.
#include "gpu/gpu_kernels.h"

namespace loomrt {

loomrt_status flashAttentionG(void *, void *, loomrt_dtype, int64_t, int64_t, int64_t, int64_t,
                              float, int, const void *, const void *, const void *, void *,
                              void *, float *);
loomrt_status flashAttentionGradG(void *, void *, loomrt_dtype, int64_t, int64_t, int64_t,
                                  int64_t, float, int, const void *, const void *,
                                  const void *, const void *, void *, void *, void *, void *,
                                  const void *, const float *);

namespace {

KernelOps makeGpuKernels() {
  KernelOps k{};
  gpu::addElementwiseKernels(k);
  gpu::addMatmulKernels(k);
  gpu::addRowKernels(k);
  gpu::addSparseKernels(k);
#if !defined(LOOMRT_GPU_HIP)
  // cuda/flash_attention.cu (mma.sync); on HIP the composed path
  // (common/attention.cpp: GEMMs and softmax) runs instead.
  k.attention = flashAttentionG;
  k.attention_grad = flashAttentionGradG;
#endif
  return k;
}

} // namespace

const KernelOps *gpuKernels() {
  static const KernelOps kGpuKernels = makeGpuKernels();
  return &kGpuKernels;
}

} // namespace loomrt
