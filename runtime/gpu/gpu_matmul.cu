// gpu_matmul.cu: the GPU backend's GEMMs (with bias) and fused elementwise regions (single
// source for CUDA and HIP; gpu_kernels.h has what the kernel files share).
#include "gpu/gpu_kernels.h"

namespace loomrt {
namespace {

//===----------------------------------------------------------------------===//
// GEMM
//===----------------------------------------------------------------------===//

/// A row-major operand as stored: its base, leading dimension and batch
/// stride (elements).
struct RowMajor {
  const void *p;
  int64_t ld, stride;
};
/// The m x n x k GEMM of `g` (alpha, beta, types, transposes) on row-major
/// operands, as the column-major GEMM BLAS runs: row-major C = op(A) op(B)
/// is column-major C^T = op(B)^T op(A)^T, so the operands swap and each
/// keeps its transpose flag.
GpuGemm columnMajor(const loomrt_gemm &g, int64_t m, int64_t n, int64_t k, int batch, RowMajor A,
                    RowMajor B, RowMajor C) {
  GpuGemm call{};
  call.transA = g.trans_b, call.transB = g.trans_a;
  call.m = int(n), call.n = int(m), call.k = int(k);
  call.alpha = g.alpha, call.beta = g.beta;
  call.a = B.p, call.lda = int(B.ld), call.strideA = B.stride;
  call.b = A.p, call.ldb = int(A.ld), call.strideB = A.stride;
  call.c = const_cast<void *>(C.p), call.ldc = int(C.ld), call.strideC = C.stride;
  call.batch = batch, call.in = g.in, call.out = g.out;
  return call;
}

loomrt_status matmulG(void *state, void *st, const loomrt_gemm *g,
                      const void *a, const void *b, void *c) {
  auto *gs = static_cast<GpuState *>(state);
  auto esize = [](loomrt_dtype d) { return int64_t(d == LOOMRT_BF16 ? 2 : 4); };
  // Each operand as stored: rows x cols with leading dimension cols, and the
  // padded shape it is copied into when the GEMM is padded.
  struct Operand {
    const void *p;
    int64_t rows, cols, ld, stride, es, prows = 0, pcols = 0;
    void *padded = nullptr;
  };
  Operand A{a, g->trans_a ? g->k : g->m, g->trans_a ? g->m : g->k, 0, g->stride_a, esize(g->in)};
  Operand B{b, g->trans_b ? g->n : g->k, g->trans_b ? g->k : g->n, 0, g->stride_b, esize(g->in)};
  Operand C{c, g->m, g->n, 0, g->stride_c, esize(g->out)};
  for (Operand *o : {&A, &B, &C})
    o->ld = o->cols;
  // Tensor-core GEMMs want every dimension a multiple of 8: with GPT-2's
  // vocabulary (50257) as M, N or K, cuBLAS falls back to an sm75 kernel
  // 5-8x slower (ncu: 8 ms each for the LM-head gradients of a batch-8
  // step). Large GEMMs with such a dimension run on zero-padded scratch
  // copies (zeros along K add nothing; extra rows/columns of C are dropped),
  // which costs a pass over each padded operand.
  auto up8 = [](int64_t x) { return (x + 7) / 8 * 8; };
  int64_t m = g->m, n = g->n, k = g->k;
  bool big = double(m) * double(n) * double(k) * double(g->batch) >= double(1 << 27);
  if (big && (m % 8 || n % 8 || k % 8)) {
    m = up8(m), n = up8(n), k = up8(k);
    A.prows = g->trans_a ? k : m, A.pcols = g->trans_a ? m : k;
    B.prows = g->trans_b ? n : k, B.pcols = g->trans_b ? k : n;
    C.prows = m, C.pcols = n;
  }
  std::vector<Operand *> padded;
  auto release = [&] {
    for (Operand *o : padded)
      (void)gpuFreeAsync(o->padded, S(st));
  };
  for (Operand *o : {&A, &B, &C}) {
    if (!o->prows || (o->prows == o->rows && o->pcols == o->cols))
      continue;
    int64_t copies = o->stride ? g->batch : 1, size = o->prows * o->pcols;
    size_t bytes = size_t(copies * size * o->es);
    loomrt_status e = gpuCheck(gpuMallocAsync(&o->padded, bytes, S(st)),
                               "matmul padding scratch");
    if (e == LOOMRT_OK)
      padded.push_back(o);
    if (e == LOOMRT_OK && (o != &C || g->beta != 0.0f)) {
      e = gpuCheck(gpuMemsetAsync(o->padded, 0, bytes, S(st)), "matmul padding");
      const int64_t shape[3] = {copies, o->rows, o->cols},
                    from[3] = {o->stride, o->ld, 1}, to[3] = {size, o->pcols, 1};
      if (e == LOOMRT_OK)
        e = gpu::copyStrided(nullptr, st, size_t(o->es), o->p, from, o->padded, to, shape, 3);
    }
    if (e != LOOMRT_OK) {
      release();
      return e;
    }
    o->ld = o->pcols;
    o->stride = o->stride ? size : 0;
  }
  auto ptr = [](Operand &o) { return o.padded ? o.padded : const_cast<void *>(o.p); };
  GpuGemm call = columnMajor(*g, m, n, k, int(g->batch), {ptr(A), A.ld, A.stride},
                             {ptr(B), B.ld, B.stride}, {ptr(C), C.ld, C.stride});
  loomrt_status result = runGemm(gs, S(st), call);
  if (C.padded && result == LOOMRT_OK) {
    const int64_t shape[3] = {g->batch, C.rows, C.cols}, from[3] = {C.stride, C.ld, 1},
                  to[3] = {g->stride_c, C.cols, 1}; // the stored m x n block
    result = gpu::copyStrided(nullptr, st, size_t(C.es), C.padded, from, c, to, shape, 3);
  }
  release();
  return result;
}

/// A GEMM through the vendor's epilogue `e`, where it applies: one batch,
/// or a batch of contiguous, untransposed A and contiguous C over one
/// shared B (a linear layer over [batch, m] rows, folded into batch*m
/// rows), every dimension a multiple of 8 (else the caller composes the
/// call: loomrt_matmul's padding path, then the elementwise one).
/// Unsupported otherwise, with no error recorded. Aux (where the epilogue
/// has one) is laid out as C.
loomrt_status matmulEpilogueG(void *state, void *st, const loomrt_gemm *g, const void *a,
                              const void *b, void *c, GemmEpilogue e) {
  int64_t rows = g->m, batch = g->batch;
  if (batch > 1 && g->stride_b == 0 && !g->trans_a && g->stride_a == g->m * g->k &&
      g->stride_c == g->m * g->n)
    rows = batch * g->m, batch = 1;
  if (batch != 1 || rows % 8 || g->n % 8 || g->k % 8 || gemmIsPortable() ||
      rows > INT32_MAX || g->n > INT32_MAX || g->k > INT32_MAX)
    return LOOMRT_ERR_UNSUPPORTED;
  // The bias runs along the rows of the column-major C^T.
  GpuGemm call = columnMajor(*g, rows, g->n, g->k, 1, {a, g->trans_a ? g->m : g->k, 0},
                             {b, g->trans_b ? g->k : g->n, 0}, {c, g->n, 0});
  e.ldAux = int(g->n);
  return vendorGemmEpilogue(static_cast<GpuState *>(state), S(st), call, e);
}

loomrt_status matmulBiasG(void *state, void *st, const loomrt_gemm *g, const void *a,
                          const void *b, const void *bias, void *c) {
  return matmulEpilogueG(state, st, g, a, b, c, {GemmEpilogue::Bias, bias, nullptr, 0});
}

loomrt_status matmulBiasActG(void *state, void *st, const loomrt_gemm *g, loomrt_unary_op act,
                             const void *a, const void *b, const void *bias, void *aux,
                             void *c) {
  if (act != LOOMRT_GELU_TANH)
    return LOOMRT_ERR_UNSUPPORTED;
  return matmulEpilogueG(state, st, g, a, b, c, {GemmEpilogue::BiasGeluAux, bias, aux, 0});
}

loomrt_status matmulActGradG(void *state, void *st, const loomrt_gemm *g, loomrt_unary_op act,
                             const void *a, const void *b, const void *aux, void *c) {
  if (act != LOOMRT_GELU_TANH)
    return LOOMRT_ERR_UNSUPPORTED;
  return matmulEpilogueG(state, st, g, a, b, c, {GemmEpilogue::DGelu, nullptr, aux, 0});
}

/// loomrt_matmul_bgrad: the row-major op(A) is the column-major call's B,
/// so db (the sum over k of op(A)) is cuBLASLt's BGRADB. One batch (the
/// API's check), dims multiples of 8 (else unsupported: the matmul, then
/// the reduce).
loomrt_status matmulBgradG(void *state, void *st, const loomrt_gemm *g, const void *a,
                           const void *b, void *c, void *db) {
  return matmulEpilogueG(state, st, g, a, b, c, {GemmEpilogue::BGradB, db, nullptr, 0});
}

/// A fused region's program interpreted per element: the portable path
/// (HIP, or CUDA where the generated kernel cannot be built). The program
/// travels by value as the kernel's argument.
__global__ void fusedInterpretKernel(FusedProgram p, FusedBuffers b, size_t n) {
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x)
    fusedElement(p, b, i);
}

} // namespace

#if !defined(LOOMRT_GPU_HIP)
loomrt_status fusedGeneratedG(void *state, void *stream, const char *name,
                              const FusedProgram *p, const FusedBuffers *b, size_t n,
                              unsigned grid, int threads);
#endif

namespace {

/// loomrt_fused_elementwise: on CUDA the region's generated kernel
/// (cuda/fused_rtc.cpp, compiled once with NVRTC), else the interpreter.
loomrt_status fusedG(void *state, void *st, const FusedProgram *p,
                     const loomrt_fused_program *src, const FusedBuffers *b, size_t n) {
#if !defined(LOOMRT_GPU_HIP)
  loomrt_status s = fusedGeneratedG(state, st, src->name, p, b, n, gridFor(n), kThreads);
  if (s != LOOMRT_ERR_UNSUPPORTED)
    return s;
#else
  (void)state;
  (void)src;
#endif
  fusedInterpretKernel<<<gridFor(n), kThreads, 0, S(st)>>>(*p, *b, n);
  return launched("fused_elementwise");
}


} // namespace

void gpu::addMatmulKernels(KernelOps &k) {
  k.matmul = matmulG;
  k.matmul_bias = matmulBiasG;
  k.matmul_bias_act = matmulBiasActG;
  k.matmul_act_grad = matmulActGradG;
  k.matmul_bgrad = matmulBgradG;
  k.fused = fusedG;
}

} // namespace loomrt
