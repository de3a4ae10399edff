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

#endif // LOOMRT_COMMON_PORTABLE_H
