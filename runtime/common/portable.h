// portable.h: LOOMRT_HD, the qualifier of functions that run on the host
// and on either GPU vendor's device (the per-element math the CPU and GPU
// backends share). The one place outside runtime/gpu's portability headers
// that tells the compilers apart (scripts/check-portable-kernels.py).
#ifndef LOOMRT_COMMON_PORTABLE_H
#define LOOMRT_COMMON_PORTABLE_H

#if defined(__CUDACC__)
#define LOOMRT_HD __host__ __device__ __forceinline__
#elif defined(__HIP__) // clang's HIP mode: its wrapper defines __host__, __device__
#define LOOMRT_HD __host__ __device__ inline __attribute__((always_inline))
#else
#define LOOMRT_HD inline
#endif

// Products, sums and differences that no compiler fuses into a multiply-add
// (nvcc and hipcc contract a*b+c into an FMA by default; the host build of
// the files that use these compiles with -ffp-contract=off), so an
// expression written with them rounds the same on the host and on either
// GPU: the CPU's and the GPU's Adam give the same bits (an offloaded plan
// may update a parameter on either).
LOOMRT_HD float mulRn(float a, float b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
LOOMRT_HD float addRn(float a, float b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
LOOMRT_HD float subRn(float a, float b) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

#endif // LOOMRT_COMMON_PORTABLE_H
