// cuda_blas.cpp: GEMM through cuBLAS, linked (the CUDA toolkit has it).
#include "gpu/gpu_state.h"

#include <cublas_v2.h>

namespace loomrt {

bool vendorGemmAvailable(std::string *) { return true; }

void vendorGemmDestroy(void *handle) { cublasDestroy(static_cast<cublasHandle_t>(handle)); }

loomrt_status vendorGemm(GpuState *gs, gpuStream_t st, const GpuGemm &g) {
  if (!gs->blas) {
    cublasHandle_t h = nullptr;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS)
      return fail(LOOMRT_ERR_BACKEND, "matmul: could not create the cuBLAS handle");
    gs->blas = h;
  }
  auto h = static_cast<cublasHandle_t>(gs->blas);
  if (cublasSetStream(h, st) != CUBLAS_STATUS_SUCCESS)
    return fail(LOOMRT_ERR_BACKEND, "matmul: could not set the cuBLAS stream");
  auto ty = [](loomrt_dtype d) { return d == LOOMRT_BF16 ? CUDA_R_16BF : CUDA_R_32F; };
  cublasStatus_t r = cublasGemmStridedBatchedEx(
      h, g.transA ? CUBLAS_OP_T : CUBLAS_OP_N, g.transB ? CUBLAS_OP_T : CUBLAS_OP_N, g.m, g.n,
      g.k, &g.alpha, g.a, ty(g.in), g.lda, g.strideA, g.b, ty(g.in), g.ldb, g.strideB, &g.beta,
      g.c, ty(g.out), g.ldc, g.strideC, g.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  if (r != CUBLAS_STATUS_SUCCESS)
    return fail(LOOMRT_ERR_BACKEND,
                "matmul: cuBLAS GEMM failed with status " + std::to_string(int(r)));
  return LOOMRT_OK;
}

} // namespace loomrt
