// gpu_state.h: per-device state of the GPU backend, shared by its files, and
// the GEMM interface between the single-source kernels and the vendor BLAS.
#ifndef LOOMRT_GPU_GPU_STATE_H
#define LOOMRT_GPU_GPU_STATE_H

#include "common/backend.h"
#include "gpu/gpu_api.h"

#include <mutex>
#include <string>
#include <unordered_map>

namespace loomrt {
struct GpuState {
  int ordinal;
  void *blas = nullptr; // the vendor BLAS handle, created on first GEMM
  void *blasLt = nullptr; // the vendor's epilogue GEMMs (cuBLASLt), on first use
  /// Large pinned buffers made by mmap, first touch on every core and a
  /// host registration (gpuAllocImpl), by address with their size: freed
  /// by unregistering and unmapping, not by the vendor's host free.
  std::mutex registeredMutex;
  std::unordered_map<void *, size_t> registered;
};
loomrt_status gpuCheck(gpuError_t e, const char *what);

/// One strided-batched GEMM in BLAS's column-major terms:
///   C_z = alpha op(A_z) op(B_z) + beta C_z,  z < batch,
/// op(A) m x k, op(B) k x n, C m x n; inputs `in` (fp32 or bf16), C `out`;
/// fp32 accumulation. C is not read when beta is 0.
struct GpuGemm {
  bool transA, transB;
  int m, n, k;
  float alpha, beta;
  const void *a, *b;
  void *c;
  int lda, ldb, ldc;
  int64_t strideA, strideB, strideC;
  int batch;
  loomrt_dtype in, out;
};
/// The vendor library's GEMM: cuBLAS (linked, cuda/cuda_blas.cpp) or rocBLAS
/// (loaded at run time, hip/rocblas_loader.cpp). Fails naming the library
/// when it is missing; `available` says so without failing.
loomrt_status vendorGemm(GpuState *gs, gpuStream_t st, const GpuGemm &g);
bool vendorGemmAvailable(std::string *why);
/// What a vendor GEMM epilogue does to the fp32 accumulator before C is
/// written: add a bias (g.m elements of g.out, one per row of the
/// column-major C); add it and apply GELU (tanh form), keeping the sum in
/// `aux` (laid out as C with leading dimension ldAux); or multiply by
/// GELU's derivative at `aux` (the gradient's GEMM); or write into
/// `bias` the sum over k of B (g.n elements of g.out: a weight gradient's
/// bias gradient).
struct GemmEpilogue {
  enum Kind { Bias, BiasGeluAux, DGelu, BGradB } kind = Bias;
  const void *bias = nullptr;
  const void *aux = nullptr;
  int ldAux = 0;
};
/// The GEMM with its epilogue; LOOMRT_ERR_UNSUPPORTED, with no error
/// recorded, where the vendor has no such epilogue for it.
loomrt_status vendorGemmEpilogue(GpuState *gs, gpuStream_t st, const GpuGemm &g,
                                 const GemmEpilogue &e);
/// Releases the handles vendorGemm and vendorGemmEpilogue made.
void vendorGemmDestroy(GpuState *gs);
/// Loom's own tiled GEMM (gpu/gpu_gemm.cu): every backend has it.
loomrt_status portableGemm(gpuStream_t st, const GpuGemm &g);
/// Whether LOOMRT_GEMM=portable asks for Loom's kernel only.
bool gemmIsPortable();
/// The one the LOOMRT_GEMM setting and the vendor library's presence pick.
loomrt_status runGemm(GpuState *gs, gpuStream_t st, const GpuGemm &g);
} // namespace loomrt

#endif
