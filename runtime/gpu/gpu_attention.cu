// gpu_attention.cu: fused (flash) attention for bf16, head dim 64, self-
// attention (t == s, a multiple of 64), causal or not: the shape of GPT-2
// and Llama training. Other shapes return LOOMRT_ERR_UNSUPPORTED and the
// composed path (common/attention.cpp, GEMMs and a softmax over the
// materialised [t, s] scores) runs instead; it is also the reference the
// conformance tests hold this to.
//
// FlashAttention-2 (Dao 2023, Algorithms 1 and 2): the forward walks key
// tiles with an online softmax, keeping the running max and sum per query
// row, and never writes the scores; the backward recomputes the scores tile
// by tile from the log-sum-exp the forward kept. Here the backward is two
// kernels, one per key tile (dK, dV) and one per query tile (dQ), so every
// gradient is summed in a fixed order (no atomics: runs are bit-for-bit
// reproducible, like the rest of the runtime). Tiles are 64 x 64; four warps
// each own 16 rows; products use the tensor cores through WMMA (bf16 in,
// fp32 accumulate).
#include "common/backend.h"
#include "gpu/gpu_state.h"

#include <cuda_bf16.h>
#include <mma.h>

namespace loomrt {
namespace {

using namespace nvcuda;
using bf16 = __nv_bfloat16;

constexpr int kT = 64;        // rows of a tile (queries or keys)
constexpr int kD = 64;        // head dimension
constexpr int kWarps = 4;     // 16 rows each
constexpr int kThreads = 32 * kWarps;
constexpr int kLd = kD + 8;   // bf16 tile row stride (WMMA wants a multiple of 8)
constexpr int kFLd = kT + 4;  // fp32 scratch row stride (a multiple of 4)

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// Copies a [64, 64] bf16 tile (global row stride 64) into shared memory
/// (row stride kLd), 16 bytes per thread per step.
__device__ void loadTile(bf16 *dst, const bf16 *src) {
  for (int c = threadIdx.x; c < kT * kD / 8; c += kThreads) {
    int r = c / (kD / 8), col = (c % (kD / 8)) * 8;
    *reinterpret_cast<uint4 *>(dst + r * kLd + col) =
        *reinterpret_cast<const uint4 *>(src + size_t(r) * kD + col);
  }
}

/// acc[n] (n = 0..3, 16 columns each) = A (16 x 64, row-major at a, ld kLd)
/// times B, where B is 64 x 64: `bT` false reads B row-major at b (k rows,
/// n columns), true reads it as the transpose of a row-major tile (so
/// B[k][n] = b[n][k]).
template <bool BT>
__device__ void mma16x64(FragC (&acc)[4], const bf16 *a, const bf16 *b) {
  for (int n = 0; n < 4; ++n)
    wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    FragA fa;
    wmma::load_matrix_sync(fa, a + kk * 16, kLd);
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      if constexpr (BT) {
        FragBCol fb;
        wmma::load_matrix_sync(fb, b + n * 16 * kLd + kk * 16, kLd);
        wmma::mma_sync(acc[n], fa, fb, acc[n]);
      } else {
        FragBRow fb;
        wmma::load_matrix_sync(fb, b + kk * 16 * kLd + n * 16, kLd);
        wmma::mma_sync(acc[n], fa, fb, acc[n]);
      }
    }
  }
}
/// As mma16x64 but accumulating into acc.
template <bool BT>
__device__ void mmaAcc16x64(FragC (&acc)[4], const bf16 *a, const bf16 *b) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    FragA fa;
    wmma::load_matrix_sync(fa, a + kk * 16, kLd);
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      if constexpr (BT) {
        FragBCol fb;
        wmma::load_matrix_sync(fb, b + n * 16 * kLd + kk * 16, kLd);
        wmma::mma_sync(acc[n], fa, fb, acc[n]);
      } else {
        FragBRow fb;
        wmma::load_matrix_sync(fb, b + kk * 16 * kLd + n * 16, kLd);
        wmma::mma_sync(acc[n], fa, fb, acc[n]);
      }
    }
  }
}
__device__ void storeAcc(float *dst, FragC (&acc)[4]) {
  for (int n = 0; n < 4; ++n)
    wmma::store_matrix_sync(dst + n * 16, acc[n], kFLd, wmma::mem_row_major);
}
/// Writes a warp's 16 x 64 fp32 block (row stride kFLd) to global bf16 rows
/// of 64, times `mul` per row (mul may be null).
__device__ void writeRows(bf16 *dst, const float *src, const float *mul, int lane) {
  for (int i = lane; i < 16 * kD; i += 32) {
    int r = i / kD, c = i % kD;
    float v = src[r * kFLd + c];
    dst[size_t(r) * kD + c] = __float2bfloat16(mul ? v * mul[r] : v);
  }
}

// Shared memory of the forward.
constexpr size_t kFwdSmem = 3 * kT * kLd * 2      // Q, K, V tiles
                            + kWarps * 16 * kFLd * 4 // scores / PV scratch
                            + kWarps * 16 * kLd * 2  // P (bf16)
                            + kT * kFLd * 4          // O accumulator
                            + 2 * kT * 4;            // running max and sum

/// One (batch*head, 64-query tile) per block. Writes O and, when lse is not
/// null, each query row's log-sum-exp of its scaled scores.
__global__ void __launch_bounds__(kThreads)
flashForward(const bf16 *Q, const bf16 *K, const bf16 *V, bf16 *O, float *lse, int t,
             float scale, int causal) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16 *sQ = reinterpret_cast<bf16 *>(smem), *sK = sQ + kT * kLd, *sV = sK + kT * kLd;
  float *sS = reinterpret_cast<float *>(sV + kT * kLd);
  bf16 *sP = reinterpret_cast<bf16 *>(sS + kWarps * 16 * kFLd);
  float *sO = reinterpret_cast<float *>(sP + kWarps * 16 * kLd);
  float *sM = sO + kT * kFLd, *sL = sM + kT;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, qb = blockIdx.x;
  size_t base = size_t(blockIdx.y) * t * kD;
  loadTile(sQ, Q + base + size_t(qb) * kT * kD);
  for (int i = threadIdx.x; i < kT * kFLd; i += kThreads)
    sO[i] = 0.0f;
  for (int i = threadIdx.x; i < kT; i += kThreads)
    sM[i] = -INFINITY, sL[i] = 0.0f;
  float *S = sS + warp * 16 * kFLd;
  bf16 *P = sP + warp * 16 * kLd;
  // Lane pairs own a row: lane l takes row l/2, columns (l%2)*32 ... +31.
  int r = lane >> 1, c0 = (lane & 1) * 32, row = warp * 16 + r, qi = qb * kT + row;
  int tiles = causal ? qb + 1 : t / kT;
  for (int kb = 0; kb < tiles; ++kb) {
    __syncthreads();
    loadTile(sK, K + base + size_t(kb) * kT * kD);
    loadTile(sV, V + base + size_t(kb) * kT * kD);
    __syncthreads();
    FragC acc[4];
    mma16x64<true>(acc, sQ + warp * 16 * kLd, sK); // S = Q K^T
    storeAcc(S, acc);
    __syncwarp();
    float mx = -INFINITY;
    for (int c = 0; c < 32; ++c) {
      int key = kb * kT + c0 + c;
      float x = causal && key > qi ? -INFINITY : S[r * kFLd + c0 + c] * scale;
      S[r * kFLd + c0 + c] = x;
      mx = fmaxf(mx, x);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    float mOld = sM[row], mNew = fmaxf(mOld, mx), sum = 0;
    for (int c = 0; c < 32; ++c) {
      float p = __expf(S[r * kFLd + c0 + c] - mNew); // exp(-inf) = 0
      sum += p;
      P[r * kLd + c0 + c] = __float2bfloat16(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    float alpha = __expf(mOld - mNew); // 0 on the first tile
    __syncwarp();
    if ((lane & 1) == 0) {
      sM[row] = mNew;
      sL[row] = sL[row] * alpha + sum;
    }
    mma16x64<false>(acc, P, sV); // P V
    storeAcc(S, acc);
    __syncwarp();
    for (int c = 0; c < 32; ++c)
      sO[row * kFLd + c0 + c] = sO[row * kFLd + c0 + c] * alpha + S[r * kFLd + c0 + c];
    __syncwarp();
  }
  __syncwarp();
  float inv = 1.0f / sL[row];
  bf16 *out = O + base + size_t(qi) * kD;
  for (int c = 0; c < 32; ++c)
    out[c0 + c] = __float2bfloat16(sO[row * kFLd + c0 + c] * inv);
  if (lse && (lane & 1) == 0)
    lse[size_t(blockIdx.y) * t + qi] = sM[row] + logf(sL[row]);
}

/// D[row] = sum_c dO[row, c] * O[row, c] (FlashAttention-2's D_i): one warp
/// per row.
__global__ void rowDot(const bf16 *dO, const bf16 *O, float *D, size_t rows) {
  size_t row = size_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows)
    return;
  float s = __bfloat162float(dO[row * kD + lane]) * __bfloat162float(O[row * kD + lane]) +
            __bfloat162float(dO[row * kD + lane + 32]) * __bfloat162float(O[row * kD + lane + 32]);
  for (int o = 16; o > 0; o >>= 1)
    s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0)
    D[row] = s;
}

constexpr size_t kBwdSmem = 4 * kT * kLd * 2        // Q, dO, K, V tiles
                            + kWarps * 16 * kFLd * 4 // fp32 scratch
                            + 2 * kWarps * 16 * kLd * 2 // P and dS (bf16)
                            + 2 * kT * 4;            // lse and D of a query tile

/// dK and dV of one 64-key tile: warps own 16 keys and walk the query tiles
/// that see them, with P^T and dS^T per warp (keys x queries).
__global__ void __launch_bounds__(kThreads)
flashBackwardKV(const bf16 *Q, const bf16 *K, const bf16 *V, const bf16 *dO,
                const float *lse, const float *Dv, bf16 *dK, bf16 *dV, int t, float scale,
                int causal) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16 *sQ = reinterpret_cast<bf16 *>(smem), *sdO = sQ + kT * kLd, *sK = sdO + kT * kLd,
       *sV = sK + kT * kLd;
  float *sF = reinterpret_cast<float *>(sV + kT * kLd);
  bf16 *sPT = reinterpret_cast<bf16 *>(sF + kWarps * 16 * kFLd), *sdST = sPT + kWarps * 16 * kLd;
  float *sLse = reinterpret_cast<float *>(sdST + kWarps * 16 * kLd), *sD = sLse + kT;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, kb = blockIdx.x;
  size_t base = size_t(blockIdx.y) * t * kD, rowBase = size_t(blockIdx.y) * t;
  loadTile(sK, K + base + size_t(kb) * kT * kD);
  loadTile(sV, V + base + size_t(kb) * kT * kD);
  float *F = sF + warp * 16 * kFLd;
  bf16 *PT = sPT + warp * 16 * kLd, *dST = sdST + warp * 16 * kLd;
  FragC dKacc[4], dVacc[4];
  for (int n = 0; n < 4; ++n) {
    wmma::fill_fragment(dKacc[n], 0.0f);
    wmma::fill_fragment(dVacc[n], 0.0f);
  }
  int r = lane >> 1, c0 = (lane & 1) * 32, key = kb * kT + warp * 16 + r;
  for (int qb = causal ? kb : 0; qb < t / kT; ++qb) {
    __syncthreads();
    loadTile(sQ, Q + base + size_t(qb) * kT * kD);
    loadTile(sdO, dO + base + size_t(qb) * kT * kD);
    for (int i = threadIdx.x; i < kT; i += kThreads) {
      sLse[i] = lse[rowBase + size_t(qb) * kT + i];
      sD[i] = Dv[rowBase + size_t(qb) * kT + i];
    }
    __syncthreads();
    FragC acc[4];
    mma16x64<true>(acc, sK + warp * 16 * kLd, sQ); // S^T = K Q^T (keys x queries)
    storeAcc(F, acc);
    __syncwarp();
    for (int c = 0; c < 32; ++c) {
      int q = c0 + c, qi = qb * kT + q;
      float p = causal && key > qi ? 0.0f : __expf(F[r * kFLd + q] * scale - sLse[q]);
      PT[r * kLd + q] = __float2bfloat16(p);
    }
    __syncwarp();
    mma16x64<true>(acc, sV + warp * 16 * kLd, sdO); // dP^T = V dO^T
    storeAcc(F, acc);
    __syncwarp();
    for (int c = 0; c < 32; ++c) {
      int q = c0 + c;
      float p = __bfloat162float(PT[r * kLd + q]);
      dST[r * kLd + q] = __float2bfloat16(p * (F[r * kFLd + q] - sD[q]) * scale);
    }
    __syncwarp();
    mmaAcc16x64<false>(dVacc, PT, sdO);  // dV += P^T dO
    mmaAcc16x64<false>(dKacc, dST, sQ);  // dK += dS^T Q
  }
  storeAcc(F, dKacc);
  __syncwarp();
  writeRows(dK + base + size_t(kb * kT + warp * 16) * kD, F, nullptr, lane);
  __syncwarp();
  storeAcc(F, dVacc);
  __syncwarp();
  writeRows(dV + base + size_t(kb * kT + warp * 16) * kD, F, nullptr, lane);
}

/// dQ of one 64-query tile: warps own 16 queries and walk the key tiles
/// they see.
__global__ void __launch_bounds__(kThreads)
flashBackwardQ(const bf16 *Q, const bf16 *K, const bf16 *V, const bf16 *dO, const float *lse,
               const float *Dv, bf16 *dQ, int t, float scale, int causal) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16 *sQ = reinterpret_cast<bf16 *>(smem), *sdO = sQ + kT * kLd, *sK = sdO + kT * kLd,
       *sV = sK + kT * kLd;
  float *sF = reinterpret_cast<float *>(sV + kT * kLd);
  bf16 *sP = reinterpret_cast<bf16 *>(sF + kWarps * 16 * kFLd), *sdS = sP + kWarps * 16 * kLd;
  float *sLse = reinterpret_cast<float *>(sdS + kWarps * 16 * kLd), *sD = sLse + kT;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, qb = blockIdx.x;
  size_t base = size_t(blockIdx.y) * t * kD, rowBase = size_t(blockIdx.y) * t;
  loadTile(sQ, Q + base + size_t(qb) * kT * kD);
  loadTile(sdO, dO + base + size_t(qb) * kT * kD);
  for (int i = threadIdx.x; i < kT; i += kThreads) {
    sLse[i] = lse[rowBase + size_t(qb) * kT + i];
    sD[i] = Dv[rowBase + size_t(qb) * kT + i];
  }
  float *F = sF + warp * 16 * kFLd;
  bf16 *P = sP + warp * 16 * kLd, *dS = sdS + warp * 16 * kLd;
  FragC dQacc[4];
  for (int n = 0; n < 4; ++n)
    wmma::fill_fragment(dQacc[n], 0.0f);
  int r = lane >> 1, c0 = (lane & 1) * 32, row = warp * 16 + r, qi = qb * kT + row;
  int tiles = causal ? qb + 1 : t / kT;
  for (int kb = 0; kb < tiles; ++kb) {
    __syncthreads();
    loadTile(sK, K + base + size_t(kb) * kT * kD);
    loadTile(sV, V + base + size_t(kb) * kT * kD);
    __syncthreads();
    FragC acc[4];
    mma16x64<true>(acc, sQ + warp * 16 * kLd, sK); // S = Q K^T
    storeAcc(F, acc);
    __syncwarp();
    for (int c = 0; c < 32; ++c) {
      int kidx = kb * kT + c0 + c;
      float p = causal && kidx > qi ? 0.0f : __expf(F[r * kFLd + c0 + c] * scale - sLse[row]);
      P[r * kLd + c0 + c] = __float2bfloat16(p);
    }
    __syncwarp();
    mma16x64<true>(acc, sdO + warp * 16 * kLd, sV); // dP = dO V^T
    storeAcc(F, acc);
    __syncwarp();
    for (int c = 0; c < 32; ++c) {
      float p = __bfloat162float(P[r * kLd + c0 + c]);
      dS[r * kLd + c0 + c] = __float2bfloat16(p * (F[r * kFLd + c0 + c] - sD[row]) * scale);
    }
    __syncwarp();
    mmaAcc16x64<false>(dQacc, dS, sK); // dQ += dS K
  }
  storeAcc(F, dQacc);
  __syncwarp();
  writeRows(dQ + base + size_t(qb * kT + warp * 16) * kD, F, nullptr, lane);
}

bool covered(loomrt_dtype dt, int64_t t, int64_t s, int64_t dh) {
  return dt == LOOMRT_BF16 && dh == kD && t == s && t % kT == 0 && t > 0 &&
         t <= (int64_t(1) << 24);
}

loomrt_status launched(const char *what) {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? LOOMRT_OK
                          : fail(LOOMRT_ERR_BACKEND, std::string(what) + ": " + cudaGetErrorString(e));
}

bool smemConfigured = false;
loomrt_status configure() {
  if (smemConfigured)
    return LOOMRT_OK;
  cudaError_t e = cudaFuncSetAttribute(flashForward, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(kFwdSmem));
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(flashBackwardKV, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(kBwdSmem));
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(flashBackwardQ, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(kBwdSmem));
  if (e != cudaSuccess)
    return fail(LOOMRT_ERR_BACKEND, std::string("flash attention: ") + cudaGetErrorString(e));
  smemConfigured = true;
  return LOOMRT_OK;
}

} // namespace

loomrt_status flashAttentionG(void *, void *stream, loomrt_dtype dt, int64_t bh, int64_t t,
                              int64_t s, int64_t dh, float scale, int causal, const void *q,
                              const void *k, const void *v, void *o, void *) {
  if (!covered(dt, t, s, dh))
    return LOOMRT_ERR_UNSUPPORTED;
  if (loomrt_status e = configure())
    return e;
  auto st = static_cast<cudaStream_t>(stream);
  flashForward<<<dim3(unsigned(t / kT), unsigned(bh)), kThreads, kFwdSmem, st>>>(
      static_cast<const bf16 *>(q), static_cast<const bf16 *>(k), static_cast<const bf16 *>(v),
      static_cast<bf16 *>(o), nullptr, int(t), scale, causal);
  return launched("flash attention");
}

size_t flashAttentionGradWorkspace(int64_t bh, int64_t t, int64_t dh) {
  return size_t(bh * t * dh) * 2 + size_t(bh * t) * 8;
}

loomrt_status flashAttentionGradG(void *, void *stream, loomrt_dtype dt, int64_t bh, int64_t t,
                                  int64_t s, int64_t dh, float scale, int causal, const void *q,
                                  const void *k, const void *v, const void *dout, void *dq,
                                  void *dk, void *dv, void *workspace) {
  if (!covered(dt, t, s, dh))
    return LOOMRT_ERR_UNSUPPORTED;
  if (loomrt_status e = configure())
    return e;
  auto st = static_cast<cudaStream_t>(stream);
  // Workspace: O recomputed (bf16), then the log-sum-exp and D rows (fp32).
  auto *O = static_cast<bf16 *>(workspace);
  auto *lse = reinterpret_cast<float *>(O + size_t(bh * t * dh));
  float *D = lse + size_t(bh * t);
  auto Q = static_cast<const bf16 *>(q), K = static_cast<const bf16 *>(k),
       V = static_cast<const bf16 *>(v), dO = static_cast<const bf16 *>(dout);
  dim3 grid(unsigned(t / kT), unsigned(bh));
  flashForward<<<grid, kThreads, kFwdSmem, st>>>(Q, K, V, O, lse, int(t), scale, causal);
  size_t rows = size_t(bh * t);
  rowDot<<<unsigned((rows + 7) / 8), 256, 0, st>>>(dO, O, D, rows);
  flashBackwardKV<<<grid, kThreads, kBwdSmem, st>>>(Q, K, V, dO, lse, D, static_cast<bf16 *>(dk),
                                                   static_cast<bf16 *>(dv), int(t), scale, causal);
  flashBackwardQ<<<grid, kThreads, kBwdSmem, st>>>(Q, K, V, dO, lse, D, static_cast<bf16 *>(dq),
                                                  int(t), scale, causal);
  return launched("flash attention gradient");
}

} // namespace loomrt
