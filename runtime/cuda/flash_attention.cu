// flash_attention.cu: fused (flash) attention for bf16 self-attention
// (t == s, a multiple of 64), head size 64 or 128, causal or not: the
// shapes of GPT-2 (64) and of Llama-style models (128). Other shapes return
// LOOMRT_ERR_UNSUPPORTED and the composed path (common/attention.cpp, GEMMs
// and a softmax over the materialised [t, s] scores) runs instead; it is
// also the reference the conformance tests hold this to.
//
// FlashAttention-2 (Dao 2023, Algorithms 1 and 2): the forward walks key
// tiles with an online softmax, keeping the running max and sum per query
// row, and never writes the scores; the backward recomputes the scores tile
// by tile from the log-sum-exp the forward kept. Here the backward is two
// kernels, one per key tile (dK, dV) and one per query tile (dQ), so every
// gradient is summed in a fixed order (no atomics: runs are bit-for-bit
// reproducible, like the rest of the runtime).
//
// Products are the tensor cores' mma.sync.m16n8k16 (bf16 in, fp32
// accumulate) on operands read from shared memory with ldmatrix; scores
// never leave registers (an accumulator of probabilities is, element by
// element, the A operand of the next product: FlashAttention-2's trick).
// The walked tiles (keys in the forward and dQ kernels, queries in the
// dK/dV kernel) are double-buffered: the next tile is copied with cp.async
// while the tensor cores work on the current one (FlashAttention-2 section
// 3.3). Softmax exponentials are base 2 on prescaled scores (one FFMA and
// one MUFU.EX2 an element, FlashAttention-2's and -3's formulation).
//
// How it got here (bench/RESULTS.md, 2026-11-28): WMMA's loads compiled to
// plain shared loads with bank conflicts rather than ldmatrix, the backward
// spilled, and ncu found the warps stalled on dependent tensor-core chains
// ("wait") with 8-12 warps an SM; the layout below, the chunk pairs of the
// backward and the tree reductions of the forward's row statistics answer
// those in turn.
//
// This file is CUDA's own (it lives in runtime/cuda, outside the single-
// source kernels of runtime/gpu): mma.sync, ldmatrix and cp.async are
// NVIDIA's. The HIP build leaves the fused entries of the kernel table
// empty and attention runs the composed path, whose GEMMs and warp-width-
// generic softmax are portable.
#include "common/backend.h"
#include "common/launch_rules.h"
#include "gpu/gpu_state.h"

#include <cuda_bf16.h>

#include <cstdint>

namespace loomrt {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kRows = 64;     // rows a block owns (queries, or keys for dK/dV)
constexpr int kWarps = 4;     // backward: 16 rows each
constexpr int kThreads = 32 * kWarps;
static_assert(kRows == loomrt::kFlashTile, "common/launch_rules.h describes these kernels");
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

/// The width of the tile a block walks, by head size: 64 at head size 64,
/// 32 at 128 (the accumulators of 128 columns take twice the registers).
/// The sizes can be overridden at compile time for tuning sweeps.
template <int D> struct Walk;
template <> struct Walk<64> {
#ifndef LOOMRT_FLASH_WALK64
#define LOOMRT_FLASH_WALK64 64
#endif
  static constexpr int kFwd = LOOMRT_FLASH_WALK64, kBwd = LOOMRT_FLASH_WALK64;
};
template <> struct Walk<128> {
#ifndef LOOMRT_FLASH_WALK128_FWD
#define LOOMRT_FLASH_WALK128_FWD 32
#endif
#ifndef LOOMRT_FLASH_WALK128_BWD
#define LOOMRT_FLASH_WALK128_BWD 64
#endif
  static constexpr int kFwd = LOOMRT_FLASH_WALK128_FWD, kBwd = LOOMRT_FLASH_WALK128_BWD;
};

/// Shared-memory row stride of a [rows, D] bf16 tile: D + 8 puts ldmatrix's
/// eight 16-byte rows on distinct banks (144 or 272 bytes apart).
template <int D> __host__ __device__ constexpr int ldOf() { return D + 8; }

// ---------------------------------------------------------------------------
// Fragments of mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (PTX ISA,
// "Matrix Fragments for mma.m16n8k16"), held as 16 x 16 tiles. With lane l,
// g = l / 4 and c = 2 * (l % 4):
//   C (fp32) element i: row g + 8 * ((i / 2) % 2), column c + (i % 2) + 8 * (i / 4)
//   A (bf16) register j: row g + 8 * (j % 2), columns c + 8 * (j / 2), + 1
// so converting an accumulator element by element gives the A operand of
// the same 16 x 16 values. B registers 0-1 are the first eight columns
// (k rows c, c + 1 and c + 8, c + 9 of column g), 2-3 the second eight.
struct FragA {
  uint32_t r[4];
};
struct FragB {
  uint32_t r[4];
};
struct FragC {
  float x[8];
};
__device__ __forceinline__ int fragRow(int lane, int i) { return (lane >> 2) + 8 * ((i >> 1) & 1); }
__device__ __forceinline__ int fragCol(int lane, int i) {
  return 2 * (lane & 3) + (i & 1) + 8 * (i >> 2);
}

__device__ __forceinline__ unsigned smemAddr(const void *p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
/// A 16 x 16 A operand from a row-major tile (row stride ld elements).
__device__ __forceinline__ void loadA(FragA &a, const bf16 *tile, int ld) {
  int lane = threadIdx.x & 31;
  const bf16 *p = tile + ((lane & 7) + ((lane >> 3) & 1) * 8) * ld + (lane >> 4) * 8;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(a.r[0]), "=r"(a.r[1]), "=r"(a.r[2]), "=r"(a.r[3])
               : "r"(smemAddr(p)));
}
/// A 16 x 16 B operand B[k][n] = tile[n * ld + k]: the transpose of a
/// row-major tile (keys as columns of Q K^T).
__device__ __forceinline__ void loadBT(FragB &b, const bf16 *tile, int ld) {
  int lane = threadIdx.x & 31, j = lane >> 3;
  const bf16 *p = tile + ((lane & 7) + (j >> 1) * 8) * ld + (j & 1) * 8;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(b.r[0]), "=r"(b.r[1]), "=r"(b.r[2]), "=r"(b.r[3])
               : "r"(smemAddr(p)));
}
/// A 16 x 16 B operand B[k][n] = tile[k * ld + n]: a row-major tile as is
/// (values as the right operand of P V), transposed on the way by ldmatrix.
__device__ __forceinline__ void loadB(FragB &b, const bf16 *tile, int ld) {
  int lane = threadIdx.x & 31, j = lane >> 3;
  const bf16 *p = tile + ((lane & 7) + (j & 1) * 8) * ld + (j >> 1) * 8;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(b.r[0]), "=r"(b.r[1]), "=r"(b.r[2]), "=r"(b.r[3])
               : "r"(smemAddr(p)));
}
/// c += a b over a 16 x 16 x 16 product (two m16n8k16 instructions).
__device__ __forceinline__ void mma(FragC &c, const FragA &a, const FragB &b) {
#pragma unroll
  for (int h = 0; h < 2; ++h)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c.x[4 * h]), "+f"(c.x[4 * h + 1]), "+f"(c.x[4 * h + 2]),
                   "+f"(c.x[4 * h + 3])
                 : "r"(a.r[0]), "r"(a.r[1]), "r"(a.r[2]), "r"(a.r[3]), "r"(b.r[2 * h]),
                   "r"(b.r[2 * h + 1]));
}
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}
/// An accumulator as the A operand of the next product.
__device__ __forceinline__ FragA toA(const FragC &c) {
  FragA a;
#pragma unroll
  for (int j = 0; j < 4; ++j) // register j holds elements 2j, 2j + 1
    a.r[j] = pack(c.x[2 * j], c.x[2 * j + 1]);
  return a;
}
__device__ __forceinline__ void zero(FragC &c) {
#pragma unroll
  for (int i = 0; i < 8; ++i)
    c.x[i] = 0.0f;
}
template <int N> __device__ __forceinline__ void zero(FragC (&c)[N]) {
#pragma unroll
  for (int n = 0; n < N; ++n)
    zero(c[n]);
}
__device__ __forceinline__ float exp2Approx(float x) { // MUFU.EX2; 2^-inf = 0
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// cp.async: global -> shared without a trip through registers, completed
// by groups (PTX ISA, "Data Movement: cp.async").
__device__ __forceinline__ void copy16(void *dst, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smemAddr(dst)), "l"(src));
}
__device__ __forceinline__ void copy4(void *dst, const void *src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smemAddr(dst)), "l"(src));
}
__device__ __forceinline__ void commitCopies() { asm volatile("cp.async.commit_group;\n" ::); }
/// Waits until at most N of this thread's copy groups are in flight.
template <int N> __device__ __forceinline__ void waitCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/// Starts copying a [R, D] bf16 tile (global row stride D) into shared
/// memory (row stride D + 8), 16 bytes a copy, over Threads threads.
template <int D, int R, int Threads = kThreads>
__device__ __forceinline__ void loadTile(bf16 *dst, const bf16 *src) {
  constexpr int kPerRow = D / 8;
#pragma unroll
  for (int c = threadIdx.x; c < R * kPerRow; c += Threads) {
    int r = c / kPerRow, col = (c % kPerRow) * 8;
    copy16(dst + r * ldOf<D>() + col, src + size_t(r) * D + col);
  }
}
/// Starts copying n floats (n <= kThreads).
__device__ __forceinline__ void loadRow(float *dst, const float *src, int n) {
  if (int(threadIdx.x) < n)
    copy4(dst + threadIdx.x, src + threadIdx.x);
}

/// Writes 16 x D accumulators to global bf16 rows of D, each row times
/// mul[0] (rows l/4) or mul[1] (rows l/4 + 8).
template <int D>
__device__ __forceinline__ void writeAcc(bf16 *dst, const FragC (&c)[D / 16], int lane,
                                         const float (&mul)[2]) {
#pragma unroll
  for (int n = 0; n < D / 16; ++n)
#pragma unroll
    for (int i = 0; i < 8; i += 2) {
      int r = fragRow(lane, i), col = n * 16 + fragCol(lane, i);
      float m = mul[(i >> 1) & 1];
      *reinterpret_cast<__nv_bfloat162 *>(dst + size_t(r) * D + col) =
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
/// Pairwise (tree) reduction of v with `op`: log2(K) dependent steps
/// instead of K, which a running max or sum would chain one after another.
/// (The halving is a template recursion: a `s /= 2` loop is not unrolled,
/// and the array would then live in local memory.)
template <int S, int K, typename Op>
__device__ __forceinline__ void treeStep(float (&v)[K], Op op) {
  if constexpr (S > 0) {
#pragma unroll
    for (int i = 0; i < S; ++i)
      v[i] = op(v[i], v[i + S]);
    treeStep<S / 2>(v, op);
  }
}
template <int K> __device__ __forceinline__ float treeMax(float (&v)[K]) {
  treeStep<K / 2>(v, [](float a, float b) { return fmaxf(a, b); });
  return v[0];
}
template <int K> __device__ __forceinline__ float treeSum(float (&v)[K]) {
  treeStep<K / 2>(v, [](float a, float b) { return a + b; });
  return v[0];
}

/// Forward shared memory: the query tile, then two buffers of a key and a
/// value tile of N rows.
template <int D> constexpr size_t fwdSmem() {
  return size_t(kRows + 4 * Walk<D>::kFwd) * ldOf<D>() * 2;
}

// The forward's warps own 32 query rows each (two 16-row fragments), two
// warps a 64-query block: every key and value fragment read from shared
// memory feeds two products (FlashAttention-2, section 3.3, gives each
// warp a larger share of the rows for the same reason).
constexpr int kFwdWarps = 2, kFwdThreads = 32 * kFwdWarps, kFwdFrags = kRows / 16 / kFwdWarps;

/// One (batch*head, 64-query tile) per block, two warps of 32 queries,
/// walking key tiles of N. Writes O and, when lse is not null, each query's
/// log-sum-exp of its scaled scores (natural log).
template <int D>
__global__ void __launch_bounds__(kFwdThreads)
flashForward(const bf16 *Q, const bf16 *K, const bf16 *V, bf16 *O, float *lse, int t,
             float scale, int causal) {
  constexpr int N = Walk<D>::kFwd, L = ldOf<D>(), F = kFwdFrags;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16 *sQ = reinterpret_cast<bf16 *>(smem), *sKV = sQ + kRows * L;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Causal blocks of late queries walk the most keys: start them first.
  int qb = causal ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
  size_t base = size_t(blockIdx.y) * t * D;
  int tiles = causal ? (qb + 1) * (kRows / N) : t / N;
  loadTile<D, kRows, kFwdThreads>(sQ, Q + base + size_t(qb) * kRows * D);
  loadTile<D, N, kFwdThreads>(sKV, K + base);
  loadTile<D, N, kFwdThreads>(sKV + N * L, V + base);
  commitCopies();
  const float scale2 = scale * kLog2e; // scores in log2 units: p = 2^(s scale2 - m)
  FragC o[F][D / 16];
#pragma unroll
  for (int f = 0; f < F; ++f)
    zero(o[f]);
  // This lane's rows: queries q0 + 16 f (fragment rows l/4) and q0 + 16 f + 8.
  const bf16 *rows = sQ + warp * 16 * F * L;
  int q0 = qb * kRows + warp * 16 * F + (lane >> 2);
  float m[F][2], l[F][2];
#pragma unroll
  for (int f = 0; f < F; ++f)
    for (int h = 0; h < 2; ++h) {
      m[f][h] = -INFINITY;
      l[f][h] = 0.0f;
    }
  for (int kb = 0; kb < tiles; ++kb) {
    if (kb + 1 < tiles) { // the next key and value tiles, into the other buffer
      bf16 *next = sKV + ((kb + 1) & 1) * 2 * N * L;
      loadTile<D, N, kFwdThreads>(next, K + base + size_t(kb + 1) * N * D);
      loadTile<D, N, kFwdThreads>(next + N * L, V + base + size_t(kb + 1) * N * D);
    }
    commitCopies();
    waitCopies<1>();
    __syncthreads();
    const bf16 *sK = sKV + (kb & 1) * 2 * N * L, *sV = sK + N * L;
    FragC sc[F][N / 16]; // S = Q K^T
#pragma unroll
    for (int f = 0; f < F; ++f)
      zero(sc[f]);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      FragA qa[F];
#pragma unroll
      for (int f = 0; f < F; ++f)
        loadA(qa[f], rows + f * 16 * L + kk * 16, L);
#pragma unroll
      for (int n = 0; n < N / 16; ++n) {
        FragB kf;
        loadBT(kf, sK + n * 16 * L + kk * 16, L);
#pragma unroll
        for (int f = 0; f < F; ++f)
          mma(sc[f][n], qa[f], kf);
      }
    }
    FragA pa[F][N / 16];
    bool diagonal = causal && kb * N + N > qb * kRows; // the mask cuts this tile
#pragma unroll
    for (int f = 0; f < F; ++f) {
      float mx[2][N / 4];
#pragma unroll
      for (int n = 0; n < N / 16; ++n)
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          int h = (i >> 1) & 1, key = kb * N + n * 16 + fragCol(lane, i);
          float x = sc[f][n].x[i] * scale2;
          if (diagonal && key > q0 + 16 * f + 8 * h)
            x = -INFINITY;
          sc[f][n].x[i] = x;
          mx[h][n * 4 + (i >> 2) * 2 + (i & 1)] = x;
        }
      // Key 0 is in the first tile and every query sees it, so m is finite
      // from the first tile on and alpha never computes inf - inf.
      float alpha[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mNew = fmaxf(m[f][h], quadMax(treeMax(mx[h])));
        alpha[h] = exp2Approx(m[f][h] - mNew); // 0 on the first tile
        m[f][h] = mNew;
      }
      float sum[2][N / 4];
#pragma unroll
      for (int n = 0; n < N / 16; ++n)
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          int h = (i >> 1) & 1;
          float p = exp2Approx(sc[f][n].x[i] - m[f][h]); // 2^-inf = 0
          sc[f][n].x[i] = p;
          sum[h][n * 4 + (i >> 2) * 2 + (i & 1)] = p;
        }
#pragma unroll
      for (int n = 0; n < D / 16; ++n)
#pragma unroll
        for (int i = 0; i < 8; ++i)
          o[f][n].x[i] *= alpha[(i >> 1) & 1];
#pragma unroll
      for (int h = 0; h < 2; ++h)
        l[f][h] = l[f][h] * alpha[h] + quadSum(treeSum(sum[h]));
#pragma unroll
      for (int n = 0; n < N / 16; ++n)
        pa[f][n] = toA(sc[f][n]);
    }
#pragma unroll
    for (int kk = 0; kk < N / 16; ++kk) // O += P V
#pragma unroll
      for (int n = 0; n < D / 16; ++n) {
        FragB vf;
        loadB(vf, sV + kk * 16 * L + n * 16, L);
#pragma unroll
        for (int f = 0; f < F; ++f)
          mma(o[f][n], pa[f][kk], vf);
      }
    __syncthreads(); // the buffer is refilled two tiles on
  }
#pragma unroll
  for (int f = 0; f < F; ++f) {
    float inv[2] = {1.0f / l[f][0], 1.0f / l[f][1]};
    writeAcc<D>(O + base + size_t(qb * kRows + warp * 16 * F + 16 * f) * D, o[f], lane, inv);
    if (lse && (lane & 3) == 0)
      for (int h = 0; h < 2; ++h)
        lse[size_t(blockIdx.y) * t + q0 + 16 * f + 8 * h] = (m[f][h] + __log2f(l[f][h])) * kLn2;
  }
}

/// D[row] = sum_c dO[row, c] * O[row, c] (FlashAttention-2's D_i): one warp
/// per row.
template <int D> __global__ void rowDot(const bf16 *dO, const bf16 *O, float *Dv, size_t rows) {
  size_t row = size_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (row >= rows)
    return;
  float s = 0.0f;
#pragma unroll
  for (int c = lane; c < D; c += 32)
    s += __bfloat162float(dO[row * D + c]) * __bfloat162float(O[row * D + c]);
  for (int o = 16; o > 0; o >>= 1)
    s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0)
    Dv[row] = s;
}

/// Shared memory of both backward kernels: the block's own two tiles (K and
/// V, or Q and dO) of 64 rows, then two buffers of the two walked tiles of
/// M rows and, for dK/dV, the walked queries' log-sum-exp and D rows.
template <int D> constexpr size_t bwdSmem() {
  constexpr int M = Walk<D>::kBwd;
  return size_t(2 * kRows + 4 * M) * ldOf<D>() * 2 + 2 * 2 * M * 4;
}

/// The walked tile is taken C chunks of 16 rows at a time: two, so that
/// four independent accumulator chains keep the tensor cores busy (ncu saw
/// one chunk's two chains stall on each other's latency). With mma.sync's
/// own fragments both head sizes fit that without spilling.
template <int D> constexpr int kChunks = 2;

/// The A operands of a warp's 16 rows of the block's own tiles (K and V, or
/// Q and dO), D/16 fragments each. At head size 64 they are loaded once and
/// held in registers; at 128 they would not fit beside the gradient
/// accumulators, and each product reads them from shared memory again.
template <int D> struct OwnRows {
  static constexpr bool kHeld = D == 64;
  FragA a[kHeld ? D / 16 : 1], b[kHeld ? D / 16 : 1];
  const bf16 *sa, *sb;
  __device__ OwnRows(const bf16 *rowsA, const bf16 *rowsB) : sa(rowsA), sb(rowsB) {
    if constexpr (kHeld)
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        loadA(a[kk], sa + kk * 16, ldOf<D>());
        loadA(b[kk], sb + kk * 16, ldOf<D>());
      }
  }
  /// x[c] = A rows times B^T and y[c] = B rows times C^T over C chunks of
  /// 16 walked rows (B and C row-major in shared memory, chunk c's rows at
  /// bt + 16 c ld and ct + 16 c ld): the two score-like products.
  template <int C>
  __device__ __forceinline__ void scores(FragC (&x)[C], FragC (&y)[C], const bf16 *bt,
                                         const bf16 *ct) const {
    constexpr int L = ldOf<D>();
    zero(x);
    zero(y);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      FragA fa, fb;
      if constexpr (kHeld) {
        fa = a[kk];
        fb = b[kk];
      } else {
        loadA(fa, sa + kk * 16, L);
        loadA(fb, sb + kk * 16, L);
      }
#pragma unroll
      for (int c = 0; c < C; ++c) {
        FragB f;
        loadBT(f, bt + c * 16 * L + kk * 16, L);
        mma(x[c], fa, f);
        loadBT(f, ct + c * 16 * L + kk * 16, L);
        mma(y[c], fb, f);
      }
    }
  }
};

/// acc[c] += a B[:, 16c : 16c + 16] for the 16 x D row-major B at b.
template <int D>
__device__ __forceinline__ void accumulateRows(FragC (&acc)[D / 16], const FragA &a, const bf16 *b) {
#pragma unroll
  for (int c = 0; c < D / 16; ++c) {
    FragB f;
    loadB(f, b + c * 16, ldOf<D>());
    mma(acc[c], a, f);
  }
}

/// Blocks of the backward kernels an SM should hold at once: the register
/// cap each kernel compiles to (__launch_bounds__' second argument). Two
/// (255 registers) fits both kernels at head size 128 without spilling.
/// Overridable at compile time for tuning sweeps, as Walk is.
#ifndef LOOMRT_FLASH_BLOCKS_KV64
#define LOOMRT_FLASH_BLOCKS_KV64 3
#endif
#ifndef LOOMRT_FLASH_BLOCKS_Q64
#define LOOMRT_FLASH_BLOCKS_Q64 2
#endif
template <int D> struct Occupancy {
  static constexpr int kKV = D == 64 ? LOOMRT_FLASH_BLOCKS_KV64 : 2;
  static constexpr int kQ = D == 64 ? LOOMRT_FLASH_BLOCKS_Q64 : 2;
};

/// dK and dV of one 64-key tile: warps own 16 keys and walk the query tiles
/// (of M) that see them, with P^T and dS^T (keys x queries) in registers.
template <int D>
__global__ void __launch_bounds__(kThreads, Occupancy<D>::kKV)
flashBackwardKV(const bf16 *Q, const bf16 *K, const bf16 *V, const bf16 *dO,
                const float *lse, const float *Dv, bf16 *dK, bf16 *dV, int t, float scale,
                int causal) {
  constexpr int M = Walk<D>::kBwd, L = ldOf<D>(), C = kChunks<D>;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16 *sK = reinterpret_cast<bf16 *>(smem), *sV = sK + kRows * L, *sWalk = sV + kRows * L;
  float *sRows = reinterpret_cast<float *>(sWalk + 4 * M * L); // [buffer][lse, D][M]
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, kb = blockIdx.x;
  size_t base = size_t(blockIdx.y) * t * D, rowBase = size_t(blockIdx.y) * t;
  int first = causal ? kb * (kRows / M) : 0, last = t / M;
  auto issue = [&](int qb, int buf) {
    bf16 *q = sWalk + buf * 2 * M * L;
    loadTile<D, M>(q, Q + base + size_t(qb) * M * D);
    loadTile<D, M>(q + M * L, dO + base + size_t(qb) * M * D);
    loadRow(sRows + buf * 2 * M, lse + rowBase + size_t(qb) * M, M);
    loadRow(sRows + buf * 2 * M + M, Dv + rowBase + size_t(qb) * M, M);
  };
  loadTile<D, kRows>(sK, K + base + size_t(kb) * kRows * D);
  loadTile<D, kRows>(sV, V + base + size_t(kb) * kRows * D);
  issue(first, 0);
  commitCopies();
  waitCopies<0>();
  __syncthreads();
  OwnRows<D> kv(sK + warp * 16 * L, sV + warp * 16 * L);
  FragC dKacc[D / 16], dVacc[D / 16];
  zero(dKacc);
  zero(dVacc);
  const float scale2 = scale * kLog2e;
  int k0 = kb * kRows + warp * 16 + (lane >> 2); // this lane's keys: k0, k0 + 8
  for (int qb = first; qb < last; ++qb) {
    int buf = (qb - first) & 1;
    if (qb + 1 < last)
      issue(qb + 1, buf ^ 1);
    commitCopies();
    waitCopies<1>();
    __syncthreads();
    const bf16 *sQ = sWalk + buf * 2 * M * L, *sdO = sQ + M * L;
    const float *sLse = sRows + buf * 2 * M, *sD = sLse + M;
    bool diagonal = causal && qb * M < kb * kRows + kRows; // the mask cuts this tile
#pragma unroll(M / 16 / C)
    for (int n = 0; n < M / 16; n += C) {
      FragC pt[C], dpt[C];
      kv.scores(pt, dpt, sQ + n * 16 * L, sdO + n * 16 * L); // S^T = K Q^T, dP^T = V dO^T
#pragma unroll
      for (int c = 0; c < C; ++c) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          int q = (n + c) * 16 + fragCol(lane, i), key = k0 + 8 * ((i >> 1) & 1);
          float p = exp2Approx(pt[c].x[i] * scale2 - sLse[q] * kLog2e);
          if (diagonal && key > qb * M + q)
            p = 0.0f;
          pt[c].x[i] = p;
          dpt[c].x[i] = p * (dpt[c].x[i] - sD[q]) * scale; // dS^T
        }
        accumulateRows<D>(dVacc, toA(pt[c]), sdO + (n + c) * 16 * L); // dV += P^T dO
        accumulateRows<D>(dKacc, toA(dpt[c]), sQ + (n + c) * 16 * L); // dK += dS^T Q
      }
    }
    __syncthreads();
  }
  const float one[2] = {1.0f, 1.0f};
  writeAcc<D>(dK + base + size_t(kb * kRows + warp * 16) * D, dKacc, lane, one);
  writeAcc<D>(dV + base + size_t(kb * kRows + warp * 16) * D, dVacc, lane, one);
}

/// dQ of one 64-query tile: warps own 16 queries and walk the key tiles
/// (of M) they see.
template <int D>
__global__ void __launch_bounds__(kThreads, Occupancy<D>::kQ)
flashBackwardQ(const bf16 *Q, const bf16 *K, const bf16 *V, const bf16 *dO, const float *lse,
               const float *Dv, bf16 *dQ, int t, float scale, int causal) {
  constexpr int M = Walk<D>::kBwd, L = ldOf<D>(), C = kChunks<D>;
  extern __shared__ __align__(16) unsigned char smem[];
  bf16 *sQ = reinterpret_cast<bf16 *>(smem), *sdO = sQ + kRows * L, *sWalk = sdO + kRows * L;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int qb = causal ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
  size_t base = size_t(blockIdx.y) * t * D, rowBase = size_t(blockIdx.y) * t;
  int tiles = causal ? (qb + 1) * (kRows / M) : t / M;
  auto issue = [&](int kb, int buf) {
    bf16 *k = sWalk + buf * 2 * M * L;
    loadTile<D, M>(k, K + base + size_t(kb) * M * D);
    loadTile<D, M>(k + M * L, V + base + size_t(kb) * M * D);
  };
  loadTile<D, kRows>(sQ, Q + base + size_t(qb) * kRows * D);
  loadTile<D, kRows>(sdO, dO + base + size_t(qb) * kRows * D);
  issue(0, 0);
  commitCopies();
  const float scale2 = scale * kLog2e;
  int q0 = qb * kRows + warp * 16 + (lane >> 2); // this lane's queries: q0, q0 + 8
  float rowLse[2], rowD[2];
  for (int h = 0; h < 2; ++h) {
    rowLse[h] = lse[rowBase + q0 + 8 * h] * kLog2e;
    rowD[h] = Dv[rowBase + q0 + 8 * h];
  }
  waitCopies<0>();
  __syncthreads();
  OwnRows<D> qdo(sQ + warp * 16 * L, sdO + warp * 16 * L);
  FragC dQacc[D / 16];
  zero(dQacc);
  for (int kb = 0; kb < tiles; ++kb) {
    int buf = kb & 1;
    if (kb + 1 < tiles)
      issue(kb + 1, buf ^ 1);
    commitCopies();
    waitCopies<1>();
    __syncthreads();
    const bf16 *sK = sWalk + buf * 2 * M * L, *sV = sK + M * L;
    bool diagonal = causal && kb * M + M > qb * kRows; // the mask cuts this tile
#pragma unroll(M / 16 / C)
    for (int n = 0; n < M / 16; n += C) {
      FragC p[C], dp[C];
      qdo.scores(p, dp, sK + n * 16 * L, sV + n * 16 * L); // S = Q K^T, dP = dO V^T
#pragma unroll
      for (int c = 0; c < C; ++c) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          int h = (i >> 1) & 1, key = kb * M + (n + c) * 16 + fragCol(lane, i);
          float pv = exp2Approx(p[c].x[i] * scale2 - rowLse[h]);
          if (diagonal && key > q0 + 8 * h)
            pv = 0.0f;
          dp[c].x[i] = pv * (dp[c].x[i] - rowD[h]) * scale; // dS
        }
        accumulateRows<D>(dQacc, toA(dp[c]), sK + (n + c) * 16 * L); // dQ += dS K
      }
    }
    __syncthreads();
  }
  const float one[2] = {1.0f, 1.0f};
  writeAcc<D>(dQ + base + size_t(qb * kRows + warp * 16) * D, dQacc, lane, one);
}

loomrt_status launched(const char *what) {
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? LOOMRT_OK
                          : fail(LOOMRT_ERR_BACKEND, std::string(what) + ": " + cudaGetErrorString(e));
}

template <int D> cudaError_t raiseSmemLimits() {
  cudaError_t e = cudaFuncSetAttribute(flashForward<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       int(fwdSmem<D>()));
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(flashBackwardKV<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(bwdSmem<D>()));
  if (e == cudaSuccess)
    e = cudaFuncSetAttribute(flashBackwardQ<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             int(bwdSmem<D>()));
  return e;
}

int smemState = -1; // -1 not yet raised, 0 failed, 1 raised
/// Raises the kernels' shared-memory limits once. False (with err set) when
/// the device refuses.
bool configure(loomrt_status &err) {
  err = LOOMRT_OK;
  if (smemState < 0) {
    cudaError_t e = raiseSmemLimits<64>();
    if (e == cudaSuccess)
      e = raiseSmemLimits<128>();
    smemState = e == cudaSuccess;
    if (e != cudaSuccess)
      err = fail(LOOMRT_ERR_BACKEND, std::string("flash attention: ") + cudaGetErrorString(e));
  }
  return smemState == 1;
}

template <int D>
void forward(cudaStream_t st, int64_t bh, int64_t t, float scale, int causal, const bf16 *q,
             const bf16 *k, const bf16 *v, bf16 *o, float *lse) {
  flashForward<D><<<dim3(unsigned(t / kRows), unsigned(bh)), kFwdThreads, fwdSmem<D>(), st>>>(
      q, k, v, o, lse, int(t), scale, causal);
}

template <int D>
void backward(cudaStream_t st, int64_t bh, int64_t t, float scale, int causal, const bf16 *Q,
              const bf16 *K, const bf16 *V, const bf16 *dO, const bf16 *O, const float *lse,
              float *Dv, bf16 *dQ, bf16 *dK, bf16 *dV) {
  size_t rows = size_t(bh * t);
  rowDot<D><<<unsigned((rows + 7) / 8), 256, 0, st>>>(dO, O, Dv, rows);
  dim3 grid(unsigned(t / kRows), unsigned(bh));
  flashBackwardKV<D><<<grid, kThreads, bwdSmem<D>(), st>>>(Q, K, V, dO, lse, Dv, dK, dV, int(t),
                                                          scale, causal);
  flashBackwardQ<D><<<grid, kThreads, bwdSmem<D>(), st>>>(Q, K, V, dO, lse, Dv, dQ, int(t), scale,
                                                         causal);
}

} // namespace

loomrt_status flashAttentionG(void *, void *stream, loomrt_dtype dt, int64_t bh, int64_t t,
                              int64_t s, int64_t dh, float scale, int causal, const void *q,
                              const void *k, const void *v, void *o, void *, float *lse) {
  loomrt_status err = LOOMRT_OK;
  if (!loomrt::flashCovers(dt, t, s, dh) || !configure(err))
    return err ? err : LOOMRT_ERR_UNSUPPORTED;
  auto st = static_cast<cudaStream_t>(stream);
  auto Q = static_cast<const bf16 *>(q), K = static_cast<const bf16 *>(k),
       V = static_cast<const bf16 *>(v);
  auto O = static_cast<bf16 *>(o);
  if (dh == 64)
    forward<64>(st, bh, t, scale, causal, Q, K, V, O, lse);
  else
    forward<128>(st, bh, t, scale, causal, Q, K, V, O, lse);
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
  if (!loomrt::flashCovers(dt, t, s, dh) || !configure(err))
    return err ? err : LOOMRT_ERR_UNSUPPORTED;
  auto st = static_cast<cudaStream_t>(stream);
  // Workspace: O recomputed (bf16), then the log-sum-exp and D rows (fp32);
  // with the forward's O and log-sum-exp given (loomrt_attention_save), only
  // D is computed: the forward does not run again.
  auto *wsO = static_cast<bf16 *>(workspace);
  auto *wsLse = reinterpret_cast<float *>(wsO + size_t(bh * t * dh));
  float *Dv = wsLse + size_t(bh * t);
  auto Q = static_cast<const bf16 *>(q), K = static_cast<const bf16 *>(k),
       V = static_cast<const bf16 *>(v), dO = static_cast<const bf16 *>(dout);
  const bf16 *O = static_cast<const bf16 *>(savedO);
  const float *lse = savedLse;
  if (!O || !lse) {
    if (dh == 64)
      forward<64>(st, bh, t, scale, causal, Q, K, V, wsO, wsLse);
    else
      forward<128>(st, bh, t, scale, causal, Q, K, V, wsO, wsLse);
    O = wsO;
    lse = wsLse;
  }
  auto gQ = static_cast<bf16 *>(dq), gK = static_cast<bf16 *>(dk), gV = static_cast<bf16 *>(dv);
  if (dh == 64)
    backward<64>(st, bh, t, scale, causal, Q, K, V, dO, O, lse, Dv, gQ, gK, gV);
  else
    backward<128>(st, bh, t, scale, causal, Q, K, V, dO, O, lse, Dv, gQ, gK, gV);
  return launched("flash attention gradient");
}

} // namespace loomrt
