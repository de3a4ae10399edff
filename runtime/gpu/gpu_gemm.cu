// gpu_gemm.cu: Loom's own GEMM kernel, single source for CUDA and HIP, and
// the choice between it and the vendor library.
//
// The kernel is a plain shared-memory tiling (no tensor cores / matrix
// cores): a block computes a kGemmTile x kGemmTile tile of C, stepping
// through K kGemmDepth at a time; each of its 256 threads keeps a 4 x 4
// patch of accumulators in registers. It exists so the HIP backend works
// where rocBLAS is not installed (Debian has no rocBLAS), and so the same
// code is testable on NVIDIA (LOOMRT_GEMM=portable runs the conformance
// suite through it). It is several times slower than the vendor GEMMs.
#include "common/kernel_math.h"
#include "gpu/gpu_device.h"
#include "gpu/gpu_state.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace loomrt {
namespace {

constexpr int kGemmTile = 64, kGemmDepth = 16, kGemmThreads = 256;
constexpr int kPatch = 4;                       // a thread's C patch is kPatch x kPatch
constexpr int kGemmSide = kGemmTile / kPatch;   // threads along a tile side (16)
static_assert(kGemmSide * kGemmSide == kGemmThreads, "one thread a patch");

template <typename TI, typename TO>
__global__ void __launch_bounds__(kGemmThreads)
gemmTiledKernel(GpuGemm g, const TI *A, const TI *B, TO *C) {
  __shared__ float sa[kGemmDepth][kGemmTile + 1]; // op(A)[i][l] at sa[l][i]
  __shared__ float sb[kGemmDepth][kGemmTile + 1]; // op(B)[l][j] at sb[l][j]
  const int tx = int(threadIdx.x) % kGemmSide, ty = int(threadIdx.x) / kGemmSide;
  const int i0 = int(blockIdx.x) * kGemmTile, j0 = int(blockIdx.y) * kGemmTile;
  for (int z = blockIdx.z; z < g.batch; z += gridDim.z) {
    const TI *a = A + z * g.strideA, *b = B + z * g.strideB;
    TO *c = C + z * g.strideC;
    float acc[kPatch][kPatch] = {};
    for (int l0 = 0; l0 < g.k; l0 += kGemmDepth) {
      // Column-major storage: A[i + l*lda] untransposed (i contiguous),
      // A[l + i*lda] transposed; likewise B with (l, j).
      for (int e = threadIdx.x; e < kGemmTile * kGemmDepth; e += kGemmThreads) {
        int ii = g.transA ? e / kGemmDepth : e % kGemmTile;
        int ll = g.transA ? e % kGemmDepth : e / kGemmTile;
        int i = i0 + ii, l = l0 + ll;
        sa[ll][ii] = i < g.m && l < g.k
                         ? load(g.transA ? a[l + int64_t(i) * g.lda] : a[i + int64_t(l) * g.lda])
                         : 0.0f;
      }
      for (int e = threadIdx.x; e < kGemmTile * kGemmDepth; e += kGemmThreads) {
        int jj = g.transB ? e % kGemmTile : e / kGemmDepth;
        int ll = g.transB ? e / kGemmTile : e % kGemmDepth;
        int j = j0 + jj, l = l0 + ll;
        sb[ll][jj] = j < g.n && l < g.k
                         ? load(g.transB ? b[j + int64_t(l) * g.ldb] : b[l + int64_t(j) * g.ldb])
                         : 0.0f;
      }
      __syncthreads();
#pragma unroll 4
      for (int ll = 0; ll < kGemmDepth; ++ll) {
        float ar[kPatch], br[kPatch];
#pragma unroll
        for (int r = 0; r < kPatch; ++r) {
          ar[r] = sa[ll][tx + kGemmSide * r];
          br[r] = sb[ll][ty + kGemmSide * r];
        }
#pragma unroll
        for (int r = 0; r < kPatch; ++r)
#pragma unroll
          for (int q = 0; q < kPatch; ++q)
            acc[r][q] += ar[r] * br[q];
      }
      __syncthreads();
    }
    // Adjacent threads write adjacent rows i: contiguous in column-major C.
#pragma unroll
    for (int q = 0; q < kPatch; ++q)
#pragma unroll
      for (int r = 0; r < kPatch; ++r) {
        int i = i0 + tx + kGemmSide * r, j = j0 + ty + kGemmSide * q;
        if (i < g.m && j < g.n) {
          TO *p = c + i + int64_t(j) * g.ldc;
          float v = g.alpha * acc[r][q];
          *p = store<TO>(g.beta != 0.0f ? v + g.beta * load(*p) : v);
        }
      }
  }
}

template <typename F> void withGemmTypes(const GpuGemm &g, F &&f) {
  auto out = [&](auto in) {
    if (g.out == LOOMRT_BF16)
      f(in, uint16_t{});
    else
      f(in, float{});
  };
  if (g.in == LOOMRT_BF16)
    out(uint16_t{});
  else
    out(float{});
}

enum class GemmChoice { Auto, Vendor, Portable, Invalid };
GemmChoice gemmChoice() {
  static const GemmChoice c = [] {
    const char *v = std::getenv("LOOMRT_GEMM");
    if (!v || !*v || !std::strcmp(v, "auto"))
      return GemmChoice::Auto;
    if (!std::strcmp(v, "vendor"))
      return GemmChoice::Vendor;
    if (!std::strcmp(v, "portable"))
      return GemmChoice::Portable;
    return GemmChoice::Invalid;
  }();
  return c;
}

} // namespace

bool gemmIsPortable() { return gemmChoice() == GemmChoice::Portable; }

loomrt_status portableGemm(gpuStream_t st, const GpuGemm &g) {
  if (g.m <= 0 || g.n <= 0 || g.batch <= 0)
    return LOOMRT_OK;
  // A grid's y extent is at most 65535 blocks (x goes to 2^31 - 1).
  const int tilesN = (g.n + kGemmTile - 1) / kGemmTile;
  if (tilesN > 65535)
    return fail(LOOMRT_ERR_UNSUPPORTED, "matmul: the portable GEMM takes n up to " +
                                            std::to_string(65535 * kGemmTile));
  dim3 grid(unsigned((g.m + kGemmTile - 1) / kGemmTile), unsigned(tilesN),
            unsigned(g.batch < 65535 ? g.batch : 65535));
  withGemmTypes(g, [&](auto in, auto out) {
    using TI = decltype(in);
    using TO = decltype(out);
    gemmTiledKernel<TI, TO><<<grid, kGemmThreads, 0, st>>>(
        g, static_cast<const TI *>(g.a), static_cast<const TI *>(g.b), static_cast<TO *>(g.c));
  });
  return gpuCheck(gpuGetLastError(), "portable GEMM launch");
}

/// LOOMRT_GEMM: auto (the vendor library where it loads, else the portable
/// kernel, said once on stderr), vendor (its absence is an error), portable.
loomrt_status runGemm(GpuState *gs, gpuStream_t st, const GpuGemm &g) {
  switch (gemmChoice()) {
  case GemmChoice::Invalid:
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                std::string("LOOMRT_GEMM='") + std::getenv("LOOMRT_GEMM") +
                    "': expected auto, vendor or portable");
  case GemmChoice::Portable:
    return portableGemm(st, g);
  case GemmChoice::Vendor:
    return vendorGemm(gs, st, g);
  case GemmChoice::Auto:
    break;
  }
  std::string why;
  if (vendorGemmAvailable(&why))
    return vendorGemm(gs, st, g);
  static std::once_flag once;
  std::call_once(once, [&] {
    std::fprintf(stderr,
                 "loomrt: %s; GEMMs run on Loom's portable kernel, several times slower "
                 "(LOOMRT_GEMM=portable says this is intended)\n",
                 why.c_str());
  });
  return portableGemm(st, g);
}

} // namespace loomrt
