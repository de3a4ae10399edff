// cuda_blas.cpp: GEMM through cuBLAS, and GEMMs with epilogues (bias,
// bias + GELU, GELU's gradient) through cuBLASLt, both linked (the CUDA
// toolkit has them).
#include "gpu/gpu_state.h"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
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
using LtKey = std::tuple<int, int, bool, bool, int, int, int, int, int, int, int, int>;
struct Lt {
  cublasLtHandle_t handle = nullptr;
  std::map<LtKey, LtPlan> plans;
  std::mutex m; // the plans, and a plan's pointers until its call is issued
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

/// cuBLASLt's epilogue for ours. Its GELU is the tanh form (PyTorch
/// routes only gelu(approximate='tanh') through it, and the CUDA
/// conformance test holds it to that formula in fp32).
cublasLtEpilogue_t ltEpilogue(GemmEpilogue::Kind k) {
  switch (k) {
  case GemmEpilogue::BiasGeluAux:
    return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  case GemmEpilogue::DGelu:
    return CUBLASLT_EPILOGUE_DGELU;
  case GemmEpilogue::BGradB:
    return CUBLASLT_EPILOGUE_BGRADB;
  case GemmEpilogue::Bias:
    break;
  }
  return CUBLASLT_EPILOGUE_BIAS;
}

const char *epilogueName(GemmEpilogue::Kind k) {
  switch (k) {
  case GemmEpilogue::BiasGeluAux:
    return "GELU_AUX_BIAS";
  case GemmEpilogue::DGelu:
    return "DGELU";
  case GemmEpilogue::BGradB:
    return "BGRADB";
  case GemmEpilogue::Bias:
    break;
  }
  return "BIAS";
}

/// LOOMRT_EPILOGUES: `off` declines every epilogue (the runtime composes
/// each call from the GEMM and the elementwise call or reduce: an A/B of
/// the epilogues within one binary); `report` writes one line to stderr for
/// each shape cuBLASLt has no algorithm for.
EnvSwitch epilogueMode() {
  static const EnvSwitch mode = envSwitch("LOOMRT_EPILOGUES");
  return mode;
}

/// The plan for g with epilogue `e` (batch 1), made on first use.
const LtPlan &ltPlan(Lt &lt, const GpuGemm &g, const GemmEpilogue &e) {
  LtKey key{int(e.kind), e.ldAux, g.transA, g.transB, g.m,       g.n,
            g.k,         g.lda,   g.ldb,    g.ldc,    int(g.in), int(g.out)};
  auto [it, fresh] = lt.plans.try_emplace(key);
  LtPlan &p = it->second;
  if (!fresh)
    return p;
  cublasOperation_t ta = g.transA ? CUBLAS_OP_T : CUBLAS_OP_N,
                    tb = g.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtEpilogue_t epi = ltEpilogue(e.kind);
  int64_t ldAux = e.ldAux;
  bool ok = cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) ==
                CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta) ==
                CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb) ==
                CUBLAS_STATUS_SUCCESS &&
            cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                           sizeof epi) == CUBLAS_STATUS_SUCCESS &&
            (e.kind == GemmEpilogue::Bias || e.kind == GemmEpilogue::BGradB ||
             cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ldAux,
                                            sizeof ldAux) == CUBLAS_STATUS_SUCCESS);
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
  if (!ok && epilogueMode() == EnvSwitch::Report)
    std::fprintf(stderr,
                 "loomrt: cuBLASLt has no %s algorithm for m %d n %d k %d (trans %d%d, %s): "
                 "composed instead\n",
                 epilogueName(e.kind), g.m, g.n, g.k, int(g.transA), int(g.transB),
                 g.in == LOOMRT_BF16 ? "bf16" : "fp32");
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

/// The GEMM through cuBLASLt with epilogue `e`: the bias, the GELU and
/// GELU's derivative all act on the fp32 accumulator before C is rounded;
/// BGRADB's sum is accumulated in fp32 and written in C's type.
/// One batch only (the caller folds a batch of contiguous A and C over a
/// shared B into rows); operands 16-byte aligned. Anything else, or no
/// algorithm: unsupported, and the caller composes the call itself.
loomrt_status vendorGemmEpilogue(GpuState *gs, gpuStream_t st, const GpuGemm &g,
                                 const GemmEpilogue &e) {
  if (epilogueMode() == EnvSwitch::Off)
    return LOOMRT_ERR_UNSUPPORTED;
  auto aligned = [](const void *p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  bool wantsBias = e.kind != GemmEpilogue::DGelu,
       wantsAux = e.kind == GemmEpilogue::BiasGeluAux || e.kind == GemmEpilogue::DGelu;
  if (g.batch != 1 || g.beta != 0.0f || !aligned(g.a) || !aligned(g.b) || !aligned(g.c) ||
      (wantsBias && !aligned(e.bias)) ||
      (wantsAux && (!aligned(e.aux) || e.ldAux < g.m || e.ldAux % 8)))
    return LOOMRT_ERR_UNSUPPORTED;
  if (!gs->blasLt) {
    auto *lt = new Lt;
    if (cublasLtCreate(&lt->handle) != CUBLAS_STATUS_SUCCESS) {
      delete lt;
      return fail(LOOMRT_ERR_BACKEND, "matmul epilogue: could not create the cuBLASLt handle");
    }
    gs->blasLt = lt;
  }
  Lt &lt = *static_cast<Lt *>(gs->blasLt);
  std::lock_guard<std::mutex> lock(lt.m);
  const LtPlan &p = ltPlan(lt, g, e);
  if (!p.ok)
    return LOOMRT_ERR_UNSUPPORTED;
  // The bias and aux pointers are the per-call attributes.
  auto set = [&](cublasLtMatmulDescAttributes_t a, const void *v, size_t n) {
    return cublasLtMatmulDescSetAttribute(p.op, a, v, n) == CUBLAS_STATUS_SUCCESS;
  };
  if ((wantsBias && !set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &e.bias, sizeof e.bias)) ||
      (wantsAux && !set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &e.aux, sizeof e.aux)))
    return fail(LOOMRT_ERR_BACKEND, "matmul epilogue: could not set its pointers");
  void *ws = nullptr;
  if (p.workspace)
    if (loomrt_status r = gpuCheck(gpuMallocAsync(&ws, p.workspace, st), "matmul workspace"))
      return r;
  cublasStatus_t r = cublasLtMatmul(lt.handle, p.op, &g.alpha, g.a,
                                    p.a, g.b, p.b, &g.beta, g.c, p.c, g.c, p.c, &p.algo, ws,
                                    p.workspace, st);
  if (ws)
    (void)gpuFreeAsync(ws, st);
  if (r != CUBLAS_STATUS_SUCCESS)
    return fail(LOOMRT_ERR_BACKEND, "matmul epilogue: cuBLASLt matmul failed with status " +
                                        std::to_string(int(r)));
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
