// cuda_blas.cpp: GEMM through cuBLAS, and GEMMs with a bias epilogue
// through cuBLASLt, both linked (the CUDA toolkit has them).
#include "gpu/gpu_state.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <map>
#include <mutex>
#include <tuple>

namespace loomrt {
namespace {

/// A cuBLASLt matmul for one shape, made once: the descriptors and the
/// algorithm the heuristic picked (cublasLtMatmulAlgoGetHeuristic costs tens
/// of microseconds of host time; a step issues the same shapes every time).
struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool ok = false; // the heuristic found an algorithm
};
using LtKey = std::tuple<bool, bool, int, int, int, int, int, int, int, int>;
struct Lt {
  cublasLtHandle_t handle = nullptr;
  std::map<LtKey, LtPlan> plans;
  std::mutex m; // the plans, and a plan's bias pointer until its call is issued
  ~Lt() {
    for (auto &[key, p] : plans) {
      cublasLtMatrixLayoutDestroy(p.a);
      cublasLtMatrixLayoutDestroy(p.b);
      cublasLtMatrixLayoutDestroy(p.c);
      cublasLtMatmulDescDestroy(p.op);
    }
    if (handle)
      cublasLtDestroy(handle);
  }
};
constexpr size_t kLtWorkspace = size_t(32) << 20; // cuBLAS's own default on Hopper

cudaDataType_t cudaType(loomrt_dtype d) { return d == LOOMRT_BF16 ? CUDA_R_16BF : CUDA_R_32F; }

/// The plan for g (bias epilogue, batch 1), made on first use.
const LtPlan &ltPlan(Lt &lt, const GpuGemm &g) {
  LtKey key{g.transA, g.transB, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, int(g.in), int(g.out)};
  auto [it, fresh] = lt.plans.try_emplace(key);
  LtPlan &p = it->second;
  if (!fresh)
    return p;
  cublasOperation_t ta = g.transA ? CUBLAS_OP_T : CUBLAS_OP_N,
                    tb = g.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
  bool ok = cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ==
                CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ==
                CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) ==
                CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                           sizeof epi) == CUBLAS_STATUS_SUCCESS;
  // Column-major layouts of the stored matrices: A is m x k (k x m when
  // transposed), B k x n (n x k), C m x n.
  ok = ok &&
       cublasLtMatrixLayoutCreate(&p.a, cudaType(g.in), g.transA ? g.k : g.m,
                                  g.transA ? g.m : g.k, g.lda) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&p.b, cudaType(g.in), g.transB ? g.n : g.k,
                                  g.transB ? g.k : g.n, g.ldb) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatrixLayoutCreate(&p.c, cudaType(g.out), g.m, g.n, g.ldc) ==
           CUBLAS_STATUS_SUCCESS;
  cublasLtMatmulPreference_t pref = nullptr;
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  ok = ok && cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                            &kLtWorkspace, sizeof kLtWorkspace) ==
           CUBLAS_STATUS_SUCCESS &&
       cublasLtMatmulAlgoGetHeuristic(lt.handle, p.op, p.a, p.b, p.c, p.c, pref, 1, &result,
                                      &found) == CUBLAS_STATUS_SUCCESS &&
       found > 0;
  if (pref)
    cublasLtMatmulPreferenceDestroy(pref);
  p.ok = ok;
  p.algo = result.algo;
  p.workspace = result.workspaceSize;
  return p;
}

} // namespace

bool vendorGemmAvailable(std::string *) { return true; }

void vendorGemmDestroy(GpuState *gs) {
  if (gs->blas)
    cublasDestroy(static_cast<cublasHandle_t>(gs->blas));
  delete static_cast<Lt *>(gs->blasLt);
  gs->blas = gs->blasLt = nullptr;
}

/// cuBLASLt's CUBLASLT_EPILOGUE_BIAS: the bias joins the fp32 accumulator
/// before C is rounded. One batch only (the caller folds a batch of
/// contiguous A and C over a shared B into rows); inputs and C 16-byte
/// aligned. Anything else, or no algorithm: unsupported, and the caller
/// adds the bias itself.
loomrt_status vendorGemmBias(GpuState *gs, gpuStream_t st, const GpuGemm &g, const void *bias) {
  auto aligned = [](const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (g.batch != 1 || g.beta != 0.0f || !aligned(g.a) || !aligned(g.b) || !aligned(g.c) ||
      !aligned(bias))
    return LOOMRT_ERR_UNSUPPORTED;
  if (!gs->blasLt) {
    auto *lt = new Lt;
    if (cublasLtCreate(&lt->handle) != CUBLAS_STATUS_SUCCESS) {
      delete lt;
      return fail(LOOMRT_ERR_BACKEND, "matmul_bias: could not create the cuBLASLt handle");
    }
    gs->blasLt = lt;
  }
  Lt &lt = *static_cast<Lt *>(gs->blasLt);
  std::lock_guard<std::mutex> lock(lt.m);
  const LtPlan &p = ltPlan(lt, g);
  if (!p.ok)
    return LOOMRT_ERR_UNSUPPORTED;
  // The bias pointer is the one per-call attribute.
  if (cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                     sizeof bias) != CUBLAS_STATUS_SUCCESS)
    return fail(LOOMRT_ERR_BACKEND, "matmul_bias: could not set the bias");
  void *ws = nullptr;
  if (p.workspace)
    if (loomrt_status e = gpuCheck(gpuMallocAsync(&ws, p.workspace, st), "matmul_bias workspace"))
      return e;
  cublasStatus_t r = cublasLtMatmul(lt.handle, p.op, &g.alpha, g.a,
                                    p.a, g.b, p.b, &g.beta, g.c, p.c, g.c, p.c, &p.algo, ws,
                                    p.workspace, st);
  if (ws)
    (void)gpuFreeAsync(ws, st);
  if (r != CUBLAS_STATUS_SUCCESS)
    return fail(LOOMRT_ERR_BACKEND,
                "matmul_bias: cuBLASLt matmul failed with status " + std::to_string(int(r)));
  return LOOMRT_OK;
}

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
  cublasStatus_t r = cublasGemmStridedBatchedEx(
      h, g.transA ? CUBLAS_OP_T : CUBLAS_OP_N, g.transB ? CUBLAS_OP_T : CUBLAS_OP_N, g.m, g.n,
      g.k, &g.alpha, g.a, cudaType(g.in), g.lda, g.strideA, g.b, cudaType(g.in), g.ldb,
      g.strideB, &g.beta, g.c, cudaType(g.out), g.ldc, g.strideC, g.batch, CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT);
  if (r != CUBLAS_STATUS_SUCCESS)
    return fail(LOOMRT_ERR_BACKEND,
                "matmul: cuBLAS GEMM failed with status " + std::to_string(int(r)));
  return LOOMRT_OK;
}

} // namespace loomrt
