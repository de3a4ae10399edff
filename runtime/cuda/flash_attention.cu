// flash_attention.cu: fused (flash) attention for bf16, head dim 64, self-
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
// fp32 accumulate) and scores never leave registers.
//
// This file is CUDA's own (it lives in runtime/cuda, outside the single-
// source kernels of runtime/gpu): WMMA and the mma.m16n8k16 fragment layout
// below are NVIDIA's. The HIP build leaves the fused entries of the kernel
// table empty and attention runs the composed path, whose GEMMs and warp-
// width-generic softmax are portable.
#include "common/backend.h"
#include "common/launch_rules.h"
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

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Scores, probabilities and outputs stay in registers. That relies on the
// element layout of the 16x16 fragments, which WMMA leaves unspecified but
// which on sm_80/sm_90 is mma.m16n8k16's: element i of lane l sits at
//   row (l / 4) + 8 * ((i / 2) % 2),  column 2 * (l % 4) + (i % 2) + 8 * (i / 4)
// for accumulators and row-major A operands alike, so an accumulator of
// probabilities converts to an A operand element by element (FlashAttention-
// 2's trick). checkLayout() verifies this on the device before the first
// use; where it does not hold the fused path declines and the composed one
// runs.
__device__ __forceinline__ int fragRow(int lane, int i) { return (lane >> 2) + 8 * ((i >> 1) & 1); }
__device__ __forceinline__ int fragCol(int lane, int i) {
  return 2 * (lane & 3) + (i & 1) + 8 * (i >> 2);
}

__global__ void checkLayout(int *ok) {
  __shared__ float f[16 * 16];
  __shared__ bf16 h[16 * 16];
  int lane = threadIdx.x;
  for (int i = lane; i < 256; i += 32) {
    f[i] = float(i);
    h[i] = __float2bfloat16(float(i));
  }
  __syncwarp();
  FragC c;
  FragA a;
  wmma::load_matrix_sync(c, f, 16, wmma::mem_row_major);
  wmma::load_matrix_sync(a, h, 16);
  int good = c.num_elements == 8 && a.num_elements == 8;
  for (int i = 0; i < 8 && good; ++i) {
    float want = float(fragRow(lane, i) * 16 + fragCol(lane, i));
    good = c.x[i] == want && __bfloat162float(a.x[i]) == want;
  }
  good = __all_sync(0xffffffffu, good);
  if (lane == 0)
    *ok = good;
}

/// Copies a [64, 64] bf16 tile (global row stride 64) into shared memory
/// (row stride kLd), 16 bytes per thread per step.
__device__ void loadTile(bf16 *dst, const bf16 *src) {
  for (int c = threadIdx.x; c < kT * kD / 8; c += kThreads) {
    int r = c / (kD / 8), col = (c % (kD / 8)) * 8;
    *reinterpret_cast<uint4 *>(dst + r * kLd + col) =
        *reinterpret_cast<const uint4 *>(src + size_t(r) * kD + col);
  }
}

/// acc[n] = A (16 rows x 64, four A fragments) times the n-th 16 columns of
/// B (64 x 64 in shared memory): row-major B, or with BT the transpose of a
/// row-major tile (B[k][n] = b[n][k]).
template <bool BT>
__device__ void mmaTile(FragC (&acc)[4], const FragA (&a)[4], const bf16 *b, bool accumulate) {
#pragma unroll
  for (int n = 0; n < 4; ++n)
    if (!accumulate)
      wmma::fill_fragment(acc[n], 0.0f);
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int n = 0; n < 4; ++n) {
      if constexpr (BT) {
        FragBCol fb;
        wmma::load_matrix_sync(fb, b + n * 16 * kLd + kk * 16, kLd);
        wmma::mma_sync(acc[n], a[kk], fb, acc[n]);
      } else {
        FragBRow fb;
        wmma::load_matrix_sync(fb, b + kk * 16 * kLd + n * 16, kLd);
        wmma::mma_sync(acc[n], a[kk], fb, acc[n]);
      }
    }
}
__device__ void loadA(FragA (&a)[4], const bf16 *rows) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    wmma::load_matrix_sync(a[kk], rows + kk * 16, kLd);
}
/// Accumulators (16 x 64) as the A operand of the next product.
__device__ void toA(FragA (&a)[4], const FragC (&c)[4]) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int i = 0; i < 8; ++i)
      a[kk].x[i] = __float2bfloat16(c[kk].x[i]);
}
/// Writes 16 x 64 accumulators to global bf16 rows of 64 (row stride kD),
/// each row times mul[0] (rows l/4) or mul[1] (rows l/4 + 8).
__device__ void writeAcc(bf16 *dst, const FragC (&c)[4], int lane, const float (&mul)[2]) {
#pragma unroll
  for (int n = 0; n < 4; ++n)
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
      int r = fragRow(lane, i), col = n * 16 + fragCol(lane, i);
      float m = mul[(i >> 1) & 1];
      *reinterpret_cast<__nv_bfloat162 *>(dst + size_t(r) * kD + col) =
          __floats2bfloat162_rn(c[n].x[i] * m, c[n].x[i + 1] * m);
    }
}
__device__ __forceinline__ float quadMax(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quadSum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

constexpr size_t kFwdSmem = 3 * kT * kLd * 2; // Q, K, V tiles

/// One (batch*head, 64-query tile) per block, four warps of 16 queries.
/// Writes O and, when lse is not null, each query's log-sum-exp of its
/// scaled scores.
__global__ void __launch_bounds__(kThreads)
flashForward(const bf16 *Q, const bf16 *K, const bf16 *V, bf16 *O, float *lse, int t,
             float scale, int causal) {
  extern __shared__ __align__(16) unsigned char smem[];
  bf16 *sQ = reinterpret_cast<bf16 *>(smem), *sK = sQ + kT * kLd, *sV = sK + kT * kLd;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, qb = blockIdx.x;
  size_t base = size_t(blockIdx.y) * t * kD;
  loadTile(sQ, Q + base + size_t(qb) * kT * kD);
  __syncthreads();
  FragA qa[4];
  loadA(qa, sQ + warp * 16 * kLd);
  FragC o[4];
  for (int n = 0; n < 4; ++n)
    wmma::fill_fragment(o[n], 0.0f);
  // This lane's two rows: queries q0 (fragment rows l/4) and q0 + 8.
  int q0 = qb * kT + warp * 16 + (lane >> 2);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  int tiles = causal ? qb + 1 : t / kT;
  for (int kb = 0; kb < tiles; ++kb) {
    __syncthreads();
    loadTile(sK, K + base + size_t(kb) * kT * kD);
    loadTile(sV, V + base + size_t(kb) * kT * kD);
    __syncthreads();
    FragC sc[4];
    mmaTile<true>(sc, qa, sK, false); // S = Q K^T
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        int h = (i >> 1) & 1, key = kb * kT + n * 16 + fragCol(lane, i);
        float x = causal && key > q0 + 8 * h ? -INFINITY : sc[n].x[i] * scale;
        sc[n].x[i] = x;
        mx[h] = fmaxf(mx[h], x);
      }
    float alpha[2], sum[2] = {0.0f, 0.0f};
    for (int h = 0; h < 2; ++h) {
      float mNew = fmaxf(m[h], quadMax(mx[h]));
      alpha[h] = __expf(m[h] - mNew); // 0 on the first tile
      m[h] = mNew;
    }
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        int h = (i >> 1) & 1;
        float p = __expf(sc[n].x[i] - m[h]); // exp(-inf) = 0
        sc[n].x[i] = p;
        sum[h] += p;
        o[n].x[i] *= alpha[h];
      }
    for (int h = 0; h < 2; ++h)
      l[h] = l[h] * alpha[h] + quadSum(sum[h]);
    FragA pa[4];
    toA(pa, sc);
    mmaTile<false>(o, pa, sV, true); // O += P V
  }
  float inv[2] = {1.0f / l[0], 1.0f / l[1]};
  writeAcc(O + base + size_t(qb * kT + warp * 16) * kD, o, lane, inv);
  if (lse && (lane & 3) == 0)
    for (int h = 0; h < 2; ++h)
      lse[size_t(blockIdx.y) * t + q0 + 8 * h] = m[h] + logf(l[h]);
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

constexpr size_t kBwdSmem = 4 * kT * kLd * 2 // Q, dO, K, V tiles
                            + 2 * kT * 4;    // lse and D of a query tile

/// The backward kernels' shared memory: four bf16 tiles, then a query
/// tile's log-sum-exp and D rows.
struct BwdTiles {
  bf16 *q, *dO, *k, *v;
  float *lse, *d;
  __device__ explicit BwdTiles(unsigned char *smem)
      : q(reinterpret_cast<bf16 *>(smem)), dO(q + kT * kLd), k(dO + kT * kLd),
        v(k + kT * kLd), lse(reinterpret_cast<float *>(v + kT * kLd)), d(lse + kT) {}
};

/// dK and dV of one 64-key tile: warps own 16 keys and walk the query tiles
/// that see them, with P^T and dS^T (keys x queries) in registers.
__global__ void __launch_bounds__(kThreads)
flashBackwardKV(const bf16 *Q, const bf16 *K, const bf16 *V, const bf16 *dO,
                const float *lse, const float *Dv, bf16 *dK, bf16 *dV, int t, float scale,
                int causal) {
  extern __shared__ __align__(16) unsigned char smem[];
  BwdTiles mem(smem);
  bf16 *sQ = mem.q, *sdO = mem.dO, *sK = mem.k, *sV = mem.v;
  float *sLse = mem.lse, *sD = mem.d;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, kb = blockIdx.x;
  size_t base = size_t(blockIdx.y) * t * kD, rowBase = size_t(blockIdx.y) * t;
  loadTile(sK, K + base + size_t(kb) * kT * kD);
  loadTile(sV, V + base + size_t(kb) * kT * kD);
  __syncthreads();
  FragA ka[4], va[4];
  loadA(ka, sK + warp * 16 * kLd);
  loadA(va, sV + warp * 16 * kLd);
  FragC dKacc[4], dVacc[4];
  for (int n = 0; n < 4; ++n) {
    wmma::fill_fragment(dKacc[n], 0.0f);
    wmma::fill_fragment(dVacc[n], 0.0f);
  }
  int k0 = kb * kT + warp * 16 + (lane >> 2); // this lane's keys: k0, k0 + 8
  for (int qb = causal ? kb : 0; qb < t / kT; ++qb) {
    __syncthreads();
    loadTile(sQ, Q + base + size_t(qb) * kT * kD);
    loadTile(sdO, dO + base + size_t(qb) * kT * kD);
    for (int i = threadIdx.x; i < kT; i += kThreads) {
      sLse[i] = lse[rowBase + size_t(qb) * kT + i];
      sD[i] = Dv[rowBase + size_t(qb) * kT + i];
    }
    __syncthreads();
    FragC pt[4], dpt[4];
    mmaTile<true>(pt, ka, sQ, false);   // S^T = K Q^T
    mmaTile<true>(dpt, va, sdO, false); // dP^T = V dO^T
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        int q = n * 16 + fragCol(lane, i), key = k0 + 8 * ((i >> 1) & 1);
        float p = causal && key > qb * kT + q ? 0.0f : __expf(pt[n].x[i] * scale - sLse[q]);
        pt[n].x[i] = p;
        dpt[n].x[i] = p * (dpt[n].x[i] - sD[q]) * scale; // dS^T
      }
    FragA pa[4], dsa[4];
    toA(pa, pt);
    toA(dsa, dpt);
    mmaTile<false>(dVacc, pa, sdO, true); // dV += P^T dO
    mmaTile<false>(dKacc, dsa, sQ, true); // dK += dS^T Q
  }
  const float one[2] = {1.0f, 1.0f};
  writeAcc(dK + base + size_t(kb * kT + warp * 16) * kD, dKacc, lane, one);
  writeAcc(dV + base + size_t(kb * kT + warp * 16) * kD, dVacc, lane, one);
}

/// dQ of one 64-query tile: warps own 16 queries and walk the key tiles
/// they see.
__global__ void __launch_bounds__(kThreads)
flashBackwardQ(const bf16 *Q, const bf16 *K, const bf16 *V, const bf16 *dO, const float *lse,
               const float *Dv, bf16 *dQ, int t, float scale, int causal) {
  extern __shared__ __align__(16) unsigned char smem[];
  BwdTiles mem(smem);
  bf16 *sQ = mem.q, *sdO = mem.dO, *sK = mem.k, *sV = mem.v;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, qb = blockIdx.x;
  size_t base = size_t(blockIdx.y) * t * kD, rowBase = size_t(blockIdx.y) * t;
  loadTile(sQ, Q + base + size_t(qb) * kT * kD);
  loadTile(sdO, dO + base + size_t(qb) * kT * kD);
  __syncthreads();
  FragA qa[4], doa[4];
  loadA(qa, sQ + warp * 16 * kLd);
  loadA(doa, sdO + warp * 16 * kLd);
  int q0 = qb * kT + warp * 16 + (lane >> 2); // this lane's queries: q0, q0 + 8
  float rowLse[2], rowD[2];
  for (int h = 0; h < 2; ++h) {
    rowLse[h] = lse[rowBase + q0 + 8 * h];
    rowD[h] = Dv[rowBase + q0 + 8 * h];
  }
  FragC dQacc[4];
  for (int n = 0; n < 4; ++n)
    wmma::fill_fragment(dQacc[n], 0.0f);
  int tiles = causal ? qb + 1 : t / kT;
  for (int kb = 0; kb < tiles; ++kb) {
    __syncthreads();
    loadTile(sK, K + base + size_t(kb) * kT * kD);
    loadTile(sV, V + base + size_t(kb) * kT * kD);
    __syncthreads();
    FragC p[4], dp[4];
    mmaTile<true>(p, qa, sK, false);   // S = Q K^T
    mmaTile<true>(dp, doa, sV, false); // dP = dO V^T
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        int h = (i >> 1) & 1, key = kb * kT + n * 16 + fragCol(lane, i);
        float pv = causal && key > q0 + 8 * h ? 0.0f : __expf(p[n].x[i] * scale - rowLse[h]);
        dp[n].x[i] = pv * (dp[n].x[i] - rowD[h]) * scale; // dS
      }
    FragA dsa[4];
    toA(dsa, dp);
    mmaTile<false>(dQacc, dsa, sK, true); // dQ += dS K
  }
  const float one[2] = {1.0f, 1.0f};
  writeAcc(dQ + base + size_t(qb * kT + warp * 16) * kD, dQacc, lane, one);
}

static_assert(kD == loomrt::kFlashHeadDim && kT == loomrt::kFlashTile,
              "common/launch_rules.h describes these kernels");
bool covered(loomrt_dtype dt, int64_t t, int64_t s, int64_t dh) {
  return loomrt::flashCovers(dt, t, s, dh);
}

loomrt_status launched(const char *what) {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? LOOMRT_OK
                          : fail(LOOMRT_ERR_BACKEND, std::string(what) + ": " + cudaGetErrorString(e));
}

int layoutState = -1; // -1 unknown, 0 unusable, 1 verified
/// Verifies the fragment layout once and raises the kernels' shared-memory
/// limits. False when the fused kernels cannot be used on this device.
bool configure(loomrt_status &err) {
  err = LOOMRT_OK;
  if (layoutState >= 0)
    return layoutState == 1;
  int *dOk = nullptr, ok = 0;
  cudaError_t e = cudaMalloc(&dOk, sizeof(int));
  if (e == cudaSuccess) {
    checkLayout<<<1, 32>>>(dOk);
    e = cudaMemcpy(&ok, dOk, sizeof(int), cudaMemcpyDeviceToHost);
    cudaFree(dOk);
  }
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(flashForward, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(kFwdSmem));
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(flashBackwardKV, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(kBwdSmem));
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(flashBackwardQ, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(kBwdSmem));
  if (e != cudaSuccess) {
    err = fail(LOOMRT_ERR_BACKEND, std::string("flash attention: ") + cudaGetErrorString(e));
    return false;
  }
  layoutState = ok ? 1 : 0;
  return ok;
}

} // namespace

loomrt_status flashAttentionG(void *, void *stream, loomrt_dtype dt, int64_t bh, int64_t t,
                              int64_t s, int64_t dh, float scale, int causal, const void *q,
                              const void *k, const void *v, void *o, void *, float *lse) {
  loomrt_status err = LOOMRT_OK;
  if (!covered(dt, t, s, dh) || !configure(err))
    return err ? err : LOOMRT_ERR_UNSUPPORTED;
  auto st = static_cast<cudaStream_t>(stream);
  flashForward<<<dim3(unsigned(t / kT), unsigned(bh)), kThreads, kFwdSmem, st>>>(
      static_cast<const bf16 *>(q), static_cast<const bf16 *>(k), static_cast<const bf16 *>(v),
      static_cast<bf16 *>(o), lse, int(t), scale, causal);
  return launched("flash attention");
}

size_t flashAttentionGradWorkspace(int64_t bh, int64_t t, int64_t dh) {
  return size_t(bh * t * dh) * 2 + size_t(bh * t) * 8;
}

loomrt_status flashAttentionGradG(void *, void *stream, loomrt_dtype dt, int64_t bh, int64_t t,
                                  int64_t s, int64_t dh, float scale, int causal, const void *q,
                                  const void *k, const void *v, const void *dout, void *dq,
                                  void *dk, void *dv, void *workspace, const void *savedO,
                                  const float *savedLse) {
  loomrt_status err = LOOMRT_OK;
  if (!covered(dt, t, s, dh) || !configure(err))
    return err ? err : LOOMRT_ERR_UNSUPPORTED;
  auto st = static_cast<cudaStream_t>(stream);
  // Workspace: O recomputed (bf16), then the log-sum-exp and D rows (fp32);
  // with the forward's O and log-sum-exp given (loomrt_attention_save), only
  // D is computed: the forward does not run again.
  auto *wsO = static_cast<bf16 *>(workspace);
  auto *wsLse = reinterpret_cast<float *>(wsO + size_t(bh * t * dh));
  float *D = wsLse + size_t(bh * t);
  auto Q = static_cast<const bf16 *>(q), K = static_cast<const bf16 *>(k),
       V = static_cast<const bf16 *>(v), dO = static_cast<const bf16 *>(dout);
  dim3 grid(unsigned(t / kT), unsigned(bh));
  const bf16 *O = static_cast<const bf16 *>(savedO);
  const float *lse = savedLse;
  if (!O || !lse) {
    flashForward<<<grid, kThreads, kFwdSmem, st>>>(Q, K, V, wsO, wsLse, int(t), scale, causal);
    O = wsO;
    lse = wsLse;
  }
  size_t rows = size_t(bh * t);
  rowDot<<<unsigned((rows + 7) / 8), 256, 0, st>>>(dO, O, D, rows);
  flashBackwardKV<<<grid, kThreads, kBwdSmem, st>>>(Q, K, V, dO, lse, D, static_cast<bf16 *>(dk),
                                                   static_cast<bf16 *>(dv), int(t), scale, causal);
  flashBackwardQ<<<grid, kThreads, kBwdSmem, st>>>(Q, K, V, dO, lse, D, static_cast<bf16 *>(dq),
                                                  int(t), scale, causal);
  return launched("flash attention gradient");
}

} // namespace loomrt
