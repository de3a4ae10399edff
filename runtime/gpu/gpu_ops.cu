// gpu_ops.cu: the GPU backend's compute kernels, single source for CUDA and
// HIP. Elementwise ops use the per-element math of common/kernel_math.h (the
// same functions as the CPU); row ops (norms, softmax, cross-entropy) give
// each row one block and reduce with warp shuffles (gpu_device.h: 32 lanes
// on NVIDIA, 64 on AMD); GEMMs go through GpuGemm (gpu_state.h: cuBLAS,
// rocBLAS or Loom's tiled kernel) with fp32 accumulation. Scratch memory is
// stream-ordered (gpuMallocAsync), so kernels never synchronise the host.
#include "common/fused_eval.h"
#include "common/kernel_math.h"
#include "common/launch_rules.h"
#include "gpu/gpu_device.h"
#include "gpu/gpu_state.h"

#include <algorithm>
#include <cfloat>
#include <string>
#include <type_traits>
#include <vector>

namespace loomrt {
namespace {

constexpr int kThreads = 256;

unsigned gridFor(size_t n, int threads = kThreads) {
  size_t b = (n + threads - 1) / threads;
  return unsigned(b < 65535 * 8 ? (b ? b : 1) : 65535 * 8);
}

gpuStream_t S(void *stream) { return static_cast<gpuStream_t>(stream); }

loomrt_status launched(const char *what) {
  return gpuCheck(gpuGetLastError(), what);
}

template <typename F> void withType(loomrt_dtype dt, F &&f) {
  if (dt == LOOMRT_BF16)
    f(uint16_t{});
  else
    f(float{});
}
/// Calls f with an unsigned integer type of `bytes` bytes (uint4 for 16):
/// copies move elements as opaque words of their size.
template <typename F> void withElem(size_t bytes, F &&f) {
  switch (bytes) {
  case 1: f(uint8_t{}); break;
  case 2: f(uint16_t{}); break;
  case 4: f(uint32_t{}); break;
  case 8: f(uint64_t{}); break;
  default: f(uint4{}); break;
  }
}

#define GRID_STRIDE(i, n)                                                      \
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);      \
       i += size_t(gridDim.x) * blockDim.x)

//===----------------------------------------------------------------------===//
// Block reductions
//===----------------------------------------------------------------------===//

__device__ float warpSum(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1)
    v += shuffleXor(v, o);
  return v;
}
__device__ float warpMax(float v) {
  for (int o = kWarp / 2; o > 0; o >>= 1)
    v = fmaxf(v, shuffleXor(v, o));
  return v;
}
/// Sum (or max) over the block; every thread gets the result.
template <bool Max> __device__ float blockReduce(float v) {
  // A block has at most 1024 threads: kWarp warps or fewer, either width.
  __shared__ float part[kWarp];
  __shared__ float result;
  v = Max ? warpMax(v) : warpSum(v);
  int lane = laneId(), warp = warpId();
  if (lane == 0)
    part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    int nw = (int(blockDim.x) + kWarp - 1) / kWarp;
    float x = lane < nw ? part[lane] : (Max ? -FLT_MAX : 0.0f);
    x = Max ? warpMax(x) : warpSum(x);
    if (lane == 0)
      result = x;
  }
  __syncthreads();
  float r = result;
  __syncthreads(); // part/result reusable by the next reduction
  return r;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

// Elementwise kernels move 16-byte words (8 bf16 or 4 fp32 per thread and
// access) when sizes and addresses allow: one 2-byte access per thread left
// the bf16 GPT-2 step's adds at a quarter of memory bandwidth (ncu).
template <typename T> struct Word {
  static constexpr int W = 16 / int(sizeof(T));
  T v[W];
};
template <typename T> __device__ __forceinline__ Word<T> loadWord(const T *p) {
  Word<T> w;
  *reinterpret_cast<uint4 *>(w.v) = *reinterpret_cast<const uint4 *>(p);
  return w;
}
template <typename T> __device__ __forceinline__ void storeWord(T *p, const Word<T> &w) {
  *reinterpret_cast<uint4 *>(p) = *reinterpret_cast<const uint4 *>(w.v);
}
bool wordAligned(std::initializer_list<const void *> ps) {
  for (const void *p : ps)
    if (reinterpret_cast<uintptr_t>(p) % 16)
      return false;
  return true;
}

template <typename T>
__global__ void unaryKernel(loomrt_unary_op op, const T *x, T *y, size_t n) {
  GRID_STRIDE(i, n) y[i] = store<T>(unaryOp(op, load(x[i])));
}
/// The word kernels take the op as a template argument for the activations
/// (Op >= 0) and at run time for the rest (Op = -1): with the op at run
/// time, every case of unaryOp is inlined once per element of the unrolled
/// word, sin and cos with their slow paths, and GPT-2's GELU forward ran at
/// 1.8 TB/s against 2.6 with the op fixed (bench/unary_variants.cu, H200).
template <typename T, int Op>
__global__ void unaryWordKernel(loomrt_unary_op op, const T *x, T *y, size_t words) {
  constexpr int W = Word<T>::W;
  if constexpr (Op >= 0)
    op = loomrt_unary_op(Op);
  GRID_STRIDE(w, words) {
    Word<T> v = loadWord(x + w * W);
#pragma unroll
    for (int k = 0; k < W; ++k)
      v.v[k] = store<T>(unaryOp(op, load(v.v[k])));
    storeWord(y + w * W, v);
  }
}
template <typename T>
__global__ void unaryGradKernel(loomrt_unary_op op, const T *dy, const T *x,
                                T *dx, size_t n) {
  GRID_STRIDE(i, n) dx[i] = store<T>(unaryGrad(op, load(dy[i]), load(x[i])));
}
template <typename T, int Op>
__global__ void unaryGradWordKernel(loomrt_unary_op op, const T *dy, const T *x, T *dx,
                                    size_t words) {
  constexpr int W = Word<T>::W;
  if constexpr (Op >= 0)
    op = loomrt_unary_op(Op);
  GRID_STRIDE(w, words) {
    Word<T> g = loadWord(dy + w * W), v = loadWord(x + w * W);
#pragma unroll
    for (int k = 0; k < W; ++k)
      g.v[k] = store<T>(unaryGrad(op, load(g.v[k]), load(v.v[k])));
    storeWord(dx + w * W, g);
  }
}
/// Calls f with std::integral_constant<int, op> for the activations the word
/// kernels specialise, and with -1 for every other op.
template <typename F> void withActivation(loomrt_unary_op op, F &&f) {
  switch (op) {
  case LOOMRT_GELU_TANH: f(std::integral_constant<int, LOOMRT_GELU_TANH>{}); break;
  case LOOMRT_GELU: f(std::integral_constant<int, LOOMRT_GELU>{}); break;
  case LOOMRT_SILU: f(std::integral_constant<int, LOOMRT_SILU>{}); break;
  case LOOMRT_RELU: f(std::integral_constant<int, LOOMRT_RELU>{}); break;
  default: f(std::integral_constant<int, -1>{}); break;
  }
}
/// binaryFlatKernel on words: each operand is the output (m == n), a suffix
/// of it whose size is a whole number of words, or a scalar (m == 1).
template <typename T>
__global__ void binaryWordKernel(loomrt_binary_op op, const T *a, const T *b, T *out,
                                 size_t ma, size_t mb, size_t n) {
  constexpr int W = Word<T>::W;
  GRID_STRIDE(w, n / W) {
    size_t i = w * W;
    Word<T> x, y;
    if (ma == 1)
      for (int k = 0; k < W; ++k)
        x.v[k] = a[0];
    else
      x = loadWord(a + (ma == n ? i : i % ma));
    if (mb == 1)
      for (int k = 0; k < W; ++k)
        y.v[k] = b[0];
    else
      y = loadWord(b + (mb == n ? i : i % mb));
#pragma unroll
    for (int k = 0; k < W; ++k)
      x.v[k] = store<T>(binaryOp(op, load(x.v[k]), load(y.v[k])));
    storeWord(out + i, x);
  }
}
template <typename T>
__global__ void binaryKernel(loomrt_binary_op op, const uint8_t *cond,
                             const T *a, const T *b, T *out, Shape shape,
                             Strides sa, Strides sb, Strides sc, size_t n) {
  GRID_STRIDE(i, n) {
    int64_t oa, ob, oc;
    stridedOffsets(shape, int64_t(i), sa, sb, sc, oa, ob, oc);
    out[i] = cond ? (cond[oc] ? a[oa] : b[ob])
                  : store<T>(binaryOp(op, load(a[oa]), load(b[ob])));
  }
}
/// The common case of broadcasting: each operand is the output itself or a
/// suffix of it (a bias row, a scalar), so its element is i mod its size.
/// One modulo per operand instead of a rank-long division chain.
template <typename T, typename I>
__global__ void binaryFlatKernel(loomrt_binary_op op, const uint8_t *cond,
                                 const T *a, const T *b, T *out, I ma, I mb,
                                 I mc, I n) {
  for (I i = I(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += I(gridDim.x) * blockDim.x) {
    I oa = ma == n ? i : i % ma, ob = mb == n ? i : i % mb;
    out[i] = cond ? (cond[mc == n ? i : i % mc] ? a[oa] : b[ob])
                  : store<T>(binaryOp(op, load(a[oa]), load(b[ob])));
  }
}
template <typename F, typename T>
__global__ void castKernel(const F *x, T *y, size_t n) {
  GRID_STRIDE(i, n) y[i] = store<T>(load(x[i]));
}
/// int64 operands (device-side position ids and masks): the strided path
/// only, these tensors are small.
__global__ void binaryIntKernel(loomrt_binary_op op, const uint8_t *cond, const int64_t *a,
                                const int64_t *b, int64_t *out, Shape shape, Strides sa,
                                Strides sb, Strides sc, size_t n) {
  GRID_STRIDE(i, n) {
    int64_t oa, ob, oc;
    stridedOffsets(shape, int64_t(i), sa, sb, sc, oa, ob, oc);
    out[i] = cond ? (cond[oc] ? a[oa] : b[ob]) : binaryOpInt(op, a[oa], b[ob]);
  }
}
template <typename T>
__global__ void lerpKernel(const T *a, const T *b, T *y, size_t n, float w) {
  GRID_STRIDE(i, n) y[i] = store<T>(lerpOp(load(a[i]), load(b[i]), w));
}
template <typename T>
__global__ void lerpWordKernel(const T *a, const T *b, T *y, size_t words, float w) {
  constexpr int W = Word<T>::W;
  GRID_STRIDE(i, words) {
    Word<T> va = loadWord(a + i * W), vb = loadWord(b + i * W);
#pragma unroll
    for (int k = 0; k < W; ++k)
      va.v[k] = store<T>(lerpOp(load(va.v[k]), load(vb.v[k]), w));
    storeWord(y + i * W, va);
  }
}
template <typename T> __global__ void castFromIntKernel(const int64_t *x, T *y, size_t n) {
  GRID_STRIDE(i, n) y[i] = store<T>(float(x[i]));
}
template <typename T> __global__ void castToIntKernel(const T *x, int64_t *y, size_t n) {
  GRID_STRIDE(i, n) y[i] = floatToInt64(load(x[i]));
}
/// One thread per (outer, inner) column, scanning its `len` elements in
/// order: as the CPU backend adds, so floats round the same way. Position
/// ids are short columns; a long float scan (the gradient of a cumsum over
/// a long axis) is serial per column here.
template <typename T, typename A>
__global__ void cumsumKernel(const T *x, T *y, int64_t outer, int64_t len, int64_t inner,
                             int exclusive, int reverse) {
  GRID_STRIDE(c, size_t(outer * inner)) {
    int64_t base = (int64_t(c) / inner) * len * inner + int64_t(c) % inner;
    A acc = 0;
    for (int64_t k = 0; k < len; ++k) {
      int64_t at = base + (reverse ? len - 1 - k : k) * inner;
      A next;
      if constexpr (sizeof(A) == 8)
        next = binaryOpInt(LOOMRT_ADD, acc, x[at]);
      else
        next = acc + load(x[at]);
      A put = exclusive ? acc : next;
      if constexpr (sizeof(A) == 8)
        y[at] = put;
      else
        y[at] = store<T>(put);
      acc = next;
    }
  }
}
template <typename T> __global__ void fillKernel(T *x, T v, size_t n) {
  GRID_STRIDE(i, n) x[i] = v;
}
/// Strided copy over dims already normalised on the host (size-1 dims
/// dropped, dims contiguous on both sides merged, the inner run widened to
/// 16-byte elements where it can be): I is int32_t whenever every offset
/// fits. Then each dimension's divide and remainder are a multiply-high by
/// a magic number and a shift (Granlund & Montgomery 1994; the form of
/// PyTorch's IntDivider, exact for dividends below 2^31): a 32-bit divide
/// is a ~20-instruction sequence, and the head transposes' three of them
/// per 16-byte element were as costly as the element's memory traffic.
template <typename I> struct CopyDims {
  I shape[LOOMRT_MAX_RANK], ss[LOOMRT_MAX_RANK], ds[LOOMRT_MAX_RANK];
  uint32_t magic[LOOMRT_MAX_RANK], shift[LOOMRT_MAX_RANK]; // int32_t only
  int rank;
};
/// The magic number and shift of an unsigned 32-bit divisor d >= 1.
void divMagic(uint32_t d, uint32_t &magic, uint32_t &shift) {
  constexpr uint32_t kBits = 8 * sizeof(uint32_t);
  shift = 0;
  while (shift < kBits && (uint64_t(1) << shift) < d)
    ++shift;
  magic = uint32_t(((uint64_t(1) << kBits) * ((uint64_t(1) << shift) - d)) / d + 1);
}
template <typename I>
__device__ __forceinline__ I divDim(const CopyDims<I> &d, int k, I n) {
  if constexpr (sizeof(I) == 4) {
    uint32_t u = uint32_t(n);
    return I((__umulhi(u, d.magic[k]) + u) >> d.shift[k]);
  } else {
    return n / d.shape[k];
  }
}
/// Each thread moves kCopyUnroll elements a grid apart (so a warp's
/// accesses stay contiguous), all loads before the stores: one element a
/// thread left the head transposes of attention at 825 GB/s on an H100,
/// eight in flight reach 1760 GB/s (bench/RESULTS.md, 2026-11-27).
constexpr int kCopyUnroll = 8;
template <typename E, typename I>
__global__ void copyStridedKernel(const E *src, E *dst, CopyDims<I> d, I n) {
  const I stride = I(gridDim.x) * blockDim.x;
  for (I i0 = I(blockIdx.x) * blockDim.x + threadIdx.x; i0 < n; i0 += stride * kCopyUnroll) {
    E v[kCopyUnroll];
    I to[kCopyUnroll];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) {
      I i = i0 + u * stride;
      if (i < n) {
        I rem = i, os = 0, od = 0;
        for (int k = d.rank - 1; k > 0; --k) {
          I q = divDim(d, k, rem), c = rem - q * d.shape[k];
          rem = q;
          os += c * d.ss[k];
          od += c * d.ds[k];
        }
        to[u] = od + rem * d.ds[0];
        v[u] = src[os + rem * d.ss[0]];
      }
    }
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u)
      if (i0 + u * stride < n)
        dst[to[u]] = v[u];
  }
}
/// A 2-D block copy (rows of `cols` elements, unit stride inside a row):
/// no index division at all; the common shape of padded GEMM operands.
/// A block's threads split into groups of `rowThreads` (a power of two
/// dividing blockDim.x), one row per group: narrow rows (a rotary half of
/// 64 bf16 is eight 16-byte words) would otherwise leave all but a handful
/// of a block's threads idle, which made these copies 28% of a Llama step.
template <typename E>
__global__ void copyRowsKernel(const E *src, E *dst, int64_t rows, int64_t cols,
                               int64_t lds, int64_t ldd, int rowThreads) {
  // Four elements per thread in flight: rows of odd width move 2-byte
  // elements, and one narrow access per thread left the copy at a fraction
  // of the memory bandwidth.
  constexpr int kUnroll = 4;
  int rowsPerBlock = int(blockDim.x) / rowThreads;
  int lane = int(threadIdx.x) % rowThreads, group = int(threadIdx.x) / rowThreads;
  int64_t step = int64_t(gridDim.x) * rowThreads * kUnroll;
  for (int64_t r = int64_t(blockIdx.y) * rowsPerBlock + group; r < rows;
       r += int64_t(gridDim.y) * rowsPerBlock)
    for (int64_t c0 = int64_t(blockIdx.x) * rowThreads * kUnroll + lane; c0 < cols; c0 += step) {
      E v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        int64_t c = c0 + u * int64_t(rowThreads);
        if (c < cols)
          v[u] = src[r * lds + c];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        int64_t c = c0 + u * int64_t(rowThreads);
        if (c < cols)
          dst[r * ldd + c] = v[u];
      }
    }
}

/// Column tiles of the tall reductions below: kColTile columns (adjacent
/// threads, so loads coalesce whatever the warp width) by kRowLanes row lanes.
constexpr int kColTile = 32, kRowLanes = 8;
/// Tall reductions (bias gradients: [1, rows, cols] with rows in the
/// thousands and few columns): blocks of kColTile columns x kRowLanes row lanes each sum
/// one chunk of rows into a partial, so thousands of threads share the
/// work instead of one thread per column walking every row. Partials are
/// combined in a fixed order: deterministic.
using loomrt::kReduceChunk; // common/launch_rules.h
__device__ float combine(loomrt_reduce_op op, float acc, float v) {
  return op == LOOMRT_REDUCE_MAX   ? fmaxf(acc, v)
         : op == LOOMRT_REDUCE_MIN ? fminf(acc, v)
                                   : acc + v;
}
template <typename T>
__global__ void reducePartialKernel(loomrt_reduce_op op, const T *x,
                                    float *part, int64_t len, int64_t inner,
                                    int64_t tiles) {
  __shared__ float acc[kRowLanes][kColTile + 1];
  int64_t o = blockIdx.x / tiles, col = (blockIdx.x % tiles) * kColTile + threadIdx.x;
  int64_t r0 = int64_t(blockIdx.y) * kReduceChunk,
          r1 = min(len, r0 + kReduceChunk);
  float a = op == LOOMRT_REDUCE_MAX   ? -INFINITY
            : op == LOOMRT_REDUCE_MIN ? INFINITY
                                      : 0.0f;
  if (col < inner)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes)
      a = combine(op, a, load(x[(o * len + r) * inner + col]));
  acc[threadIdx.y][threadIdx.x] = a;
  __syncthreads();
  if (threadIdx.y == 0 && col < inner) {
    for (int k = 1; k < kRowLanes; ++k)
      a = combine(op, a, acc[k][threadIdx.x]);
    part[(o * gridDim.y + blockIdx.y) * inner + col] = a;
  }
}
template <typename T>
__global__ void reduceFinishKernel(loomrt_reduce_op op, const float *part,
                                   T *y, int64_t outer, int64_t chunks,
                                   int64_t len, int64_t inner) {
  GRID_STRIDE(t, size_t(outer * inner)) {
    int64_t o = int64_t(t) / inner, i = int64_t(t) % inner;
    float a = part[o * chunks * inner + i];
    for (int64_t c = 1; c < chunks; ++c)
      a = combine(op, a, part[(o * chunks + c) * inner + i]);
    if (op == LOOMRT_REDUCE_MEAN)
      a /= float(len);
    y[t] = store<T>(a);
  }
}
template <typename T>
__global__ void reduceKernel(loomrt_reduce_op op, const T *x, T *y,
                             int64_t outer, int64_t len, int64_t inner) {
  GRID_STRIDE(t, size_t(outer * inner)) {
    int64_t o = int64_t(t) / inner, i = int64_t(t) % inner;
    const T *p = x + o * len * inner + i;
    float acc = load(p[0]);
    for (int64_t r = 1; r < len; ++r) {
      float v = load(p[r * inner]);
      acc = op == LOOMRT_REDUCE_MAX   ? fmaxf(acc, v)
            : op == LOOMRT_REDUCE_MIN ? fminf(acc, v)
                                      : acc + v;
    }
    if (op == LOOMRT_REDUCE_MEAN)
      acc /= float(len);
    y[t] = store<T>(acc);
  }
}
template <typename T>
__global__ void dropoutKernel(const T *x, T *y, size_t n, uint64_t threshold, float scale,
                              uint64_t key, uint64_t offset) {
  GRID_STRIDE(i, n) {
    y[i] = store<T>(dropoutKeep(key, offset + i, threshold) ? load(x[i]) * scale : 0.0f);
  }
}
// 1-bit compression (loomrt.h: loomrt_onebit_*). The norm: block sums of
// (x + error)^2 added into *scale, then one thread turns the sum into
// ||c|| / sqrt(n); the signs and new error read it from device memory.
__global__ void onebitZero(float *scale) { *scale = 0.0f; }
__global__ void onebitSumSquares(const float *x, const float *error, float *sum, size_t n) {
  float acc = 0.0f;
  GRID_STRIDE(i, n) {
    float c = x[i] + error[i];
    acc += c * c;
  }
  acc = blockReduce<false>(acc);
  if (threadIdx.x == 0)
    atomicAdd(sum, acc);
}
// The same over float4 words (x and error 16-byte aligned, n a multiple
// of 8: every 1-bit payload is).
__global__ void onebitSumSquares4(const float4 *x, const float4 *error, float *sum, size_t words) {
  float acc = 0.0f;
  GRID_STRIDE(i, words) {
    float4 a = x[i], e = error[i];
    float c0 = a.x + e.x, c1 = a.y + e.y, c2 = a.z + e.z, c3 = a.w + e.w;
    acc += c0 * c0 + c1 * c1 + c2 * c2 + c3 * c3;
  }
  acc = blockReduce<false>(acc);
  if (threadIdx.x == 0)
    atomicAdd(sum, acc);
}
__global__ void onebitScale(float *scale, size_t n) { *scale = sqrtf(*scale / float(n)); }
// One byte of signs a thread from two float4 words of x and of the error
// (onebitPackByte's arithmetic, element 8j+k in bit 7-k).
__device__ __forceinline__ uint8_t packHalf(float4 x, float4 &e, float s, int shift) {
  float c[4] = {x.x + e.x, x.y + e.y, x.z + e.z, x.w + e.w};
  uint8_t bits = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k)
    bits = uint8_t(bits | (c[k] >= 0.0f ? 0x80u >> (shift + k) : 0u));
  e = make_float4(c[0] - (c[0] >= 0.0f ? s : -s), c[1] - (c[1] >= 0.0f ? s : -s),
                  c[2] - (c[2] >= 0.0f ? s : -s), c[3] - (c[3] >= 0.0f ? s : -s));
  return bits;
}
__global__ void onebitSigns4(const float4 *x, float4 *error, uint8_t *packed, const float *scale,
                             size_t bytes) {
  const float s = *scale;
  GRID_STRIDE(j, bytes) {
    float4 e0 = error[2 * j], e1 = error[2 * j + 1];
    uint8_t b = uint8_t(packHalf(x[2 * j], e0, s, 0) | packHalf(x[2 * j + 1], e1, s, 4));
    error[2 * j] = e0;
    error[2 * j + 1] = e1;
    packed[j] = b;
  }
}
// Decompression and the server's average a byte (8 elements) a thread,
// written as two float4 words (out 16-byte aligned).
__device__ __forceinline__ void signsOf(uint8_t b, float scale, float4 &lo, float4 &hi) {
  auto sg = [&](int k) { return (b >> (7 - k)) & 1 ? scale : -scale; };
  lo = make_float4(sg(0), sg(1), sg(2), sg(3));
  hi = make_float4(sg(4), sg(5), sg(6), sg(7));
}
__global__ void onebitDecompress8(const uint8_t *packed, const float *scales, float4 *out,
                                  size_t bytes, size_t n) {
  GRID_STRIDE(j, bytes) {
    float4 lo, hi;
    signsOf(packed[j], scales[8 * j / n], lo, hi);
    out[2 * j] = lo;
    out[2 * j + 1] = hi;
  }
}
__global__ void onebitAverage8(const uint8_t *packed, const float *scales, float4 *out,
                               size_t world, size_t n) {
  const float inv = 1.0f / float(world);
  GRID_STRIDE(j, n / 8) {
    float4 lo = make_float4(0, 0, 0, 0), hi = lo;
    for (size_t w = 0; w < world; ++w) {
      float4 l, h;
      signsOf(packed[w * (n / 8) + j], scales[w], l, h);
      lo = make_float4(lo.x + l.x, lo.y + l.y, lo.z + l.z, lo.w + l.w);
      hi = make_float4(hi.x + h.x, hi.y + h.y, hi.z + h.z, hi.w + h.w);
    }
    out[2 * j] = make_float4(lo.x * inv, lo.y * inv, lo.z * inv, lo.w * inv);
    out[2 * j + 1] = make_float4(hi.x * inv, hi.y * inv, hi.z * inv, hi.w * inv);
  }
}
__global__ void onebitSigns(const float *x, float *error, uint8_t *packed, const float *scale,
                            size_t bytes) {
  const float s = *scale;
  GRID_STRIDE(j, bytes) packed[j] = onebitPackByte(x, error, j, s);
}
__global__ void onebitDecompress(const uint8_t *packed, const float *scales, float *out,
                                 size_t total, size_t n) {
  GRID_STRIDE(i, total) out[i] = scales[i / n] * onebitSign(packed, i);
}
__global__ void onebitAverage(const uint8_t *packed, const float *scales, float *out,
                              size_t world, size_t n) {
  const float inv = 1.0f / float(world);
  GRID_STRIDE(i, n) {
    float acc = 0.0f;
    for (size_t w = 0; w < world; ++w)
      acc += scales[w] * onebitSign(packed + w * (n / 8), i);
    out[i] = acc * inv;
  }
}

// Block-scaled codecs: a warp a block of the codec (ZeRO++'s qwZ and qgZ
// quantise every step, so the loads are coalesced: lane l reads elements l,
// l+kWarp, ...); the block's largest magnitude by shuffles, so the scale is
// the CPU backend's bit for bit (max is exact in any order).
__global__ void blockCompressKernel(loomrt_block_codec codec, const float *x, float *scales,
                                    uint8_t *codes, size_t blocks, size_t block) {
  const float top = blockCodecMax(codec);
  const bool nibbles = blockCodecNibbles(codec);
  const unsigned lane = laneId();
  const size_t warps = size_t(gridDim.x) * blockDim.x / kWarp;
  for (size_t b = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; b < blocks; b += warps) {
    const float *xb = x + b * block;
    float amax = 0.0f;
    for (size_t i = lane; i < block; i += kWarp)
      amax = fmaxf(amax, fabsf(xb[i]));
    amax = warpMax(amax);
    float scale = amax > 0.0f ? amax / top : 1.0f;
    if (lane == 0)
      scales[b] = scale;
    if (!nibbles) {
      for (size_t i = lane; i < block; i += kWarp)
        codes[b * block + i] = blockCode(codec, xb[i] / scale);
    } else {
      for (size_t i = 2 * lane; i < block; i += 2 * kWarp)
        codes[(b * block + i) / 2] =
            uint8_t(blockCode(codec, xb[i] / scale) | blockCode(codec, xb[i + 1] / scale) << 4);
    }
  }
}
__global__ void blockDecompressKernel(loomrt_block_codec codec, const float *scales,
                                      const uint8_t *codes, float *out, size_t n, size_t block) {
  GRID_STRIDE(i, n) out[i] = blockElement(codec, codes, i) * scales[i / block];
}

// Zero-copy row gather (Min et al. 2021, §4.1, DGL's kernel): a warp a
// row; the warp's first word is at the 128-byte boundary at or below the
// row's start, so each of its requests covers whole 128-byte segments
// (PCIe read requests), and the words before the row are read and dropped.
// Word: 16 bytes where the table and row size allow, else 4, else 1. With
// `place`, row r goes to out[place[r]] (the sorted order's scatter).
template <typename Word>
__global__ void gatherRowsKernel(const char *table, size_t rowBytes, const int64_t *rows,
                                 const int64_t *place, size_t n, char *out) {
  const unsigned lane = laneId();
  const size_t warps = size_t(gridDim.x) * blockDim.x / kWarp;
  for (size_t r = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp; r < n; r += warps) {
    const char *start = table + size_t(rows[r]) * rowBytes;
    const char *base = reinterpret_cast<const char *>(reinterpret_cast<uintptr_t>(start) &
                                                      ~uintptr_t(127));
    char *dst = out + (place ? size_t(place[r]) : r) * rowBytes;
    for (const char *p = base + lane * sizeof(Word); p < start + rowBytes; p += kWarp * sizeof(Word))
      if (p >= start)
        *reinterpret_cast<Word *>(dst + (p - start)) = *reinterpret_cast<const Word *>(p);
  }
}
#if LOOMRT_GPU_HAS_RADIX_SORT
__global__ void iotaKernel(int64_t *v, size_t n) { GRID_STRIDE(i, n) v[i] = int64_t(i); }
#endif

loomrt_status gatherRowsG(void *, void *st, const void *table, size_t numRows, size_t rowBytes,
                          const int64_t *rows, size_t n, void *out, int flags) {
  auto aligned = [&](size_t w) {
    return rowBytes % w == 0 && reinterpret_cast<uintptr_t>(table) % w == 0 &&
           reinterpret_cast<uintptr_t>(out) % w == 0;
  };
  const int64_t *order = rows, *place = nullptr;
  void *scratch = nullptr;
#if LOOMRT_GPU_HAS_RADIX_SORT
  if (flags & LOOMRT_GATHER_SORTED) {
    // Sort (index, place) pairs by index: only the bits an index can have.
    int bits = 1;
    while (bits < 63 && (uint64_t(1) << bits) < numRows)
      ++bits;
    size_t temp = 0;
    sortPairs(nullptr, temp, rows, nullptr, nullptr, nullptr, n, bits, S(st));
    size_t pairs = 3 * n * sizeof(int64_t); // sorted keys, places in and out
    if (loomrt_status e = gpuCheck(gpuMallocAsync(&scratch, pairs + temp, S(st)),
                                   "gather_rows sort scratch"))
      return e;
    auto *keys = static_cast<int64_t *>(scratch), *in = keys + n, *outPlace = in + n;
    iotaKernel<<<gridFor(n), kThreads, 0, S(st)>>>(in, n);
    sortPairs(outPlace + n, temp, rows, keys, in, outPlace, n, bits, S(st));
    order = keys;
    place = outPlace;
  }
#else
  (void)flags, (void)numRows;
#endif
  const char *t = static_cast<const char *>(table);
  char *o = static_cast<char *>(out);
  unsigned grid = gridFor(n * kWarp);
  if (aligned(16))
    gatherRowsKernel<uint4><<<grid, kThreads, 0, S(st)>>>(t, rowBytes, order, place, n, o);
  else if (aligned(4))
    gatherRowsKernel<uint32_t><<<grid, kThreads, 0, S(st)>>>(t, rowBytes, order, place, n, o);
  else
    gatherRowsKernel<uint8_t><<<grid, kThreads, 0, S(st)>>>(t, rowBytes, order, place, n, o);
  if (scratch)
    (void)gpuFreeAsync(scratch, S(st));
  return launched("gather_rows");
}

__global__ void sgdKernel(float lr, float mu, int nesterov, float *p,
                          const float *g, float *buf, size_t n) {
  GRID_STRIDE(i, n) {
    float b = mu * buf[i] + g[i];
    buf[i] = b;
    p[i] -= lr * (nesterov ? g[i] + mu * b : b);
  }
}

loomrt_status unaryG(void *, void *st, loomrt_unary_op op, loomrt_dtype dt,
                     const void *x, void *y, size_t n) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    constexpr int W = Word<T>::W;
    if (n % W == 0 && wordAligned({x, y}))
      withActivation(op, [&](auto fixed) {
        unaryWordKernel<T, decltype(fixed)::value><<<gridFor(n / W), kThreads, 0, S(st)>>>(
            op, static_cast<const T *>(x), static_cast<T *>(y), n / W);
      });
    else
      unaryKernel<T><<<gridFor(n), kThreads, 0, S(st)>>>(
          op, static_cast<const T *>(x), static_cast<T *>(y), n);
  });
  return launched("unary");
}
loomrt_status dropoutG(void *, void *st, loomrt_dtype dt, const void *x, void *y, size_t n,
                       float ratio, uint64_t key, uint64_t offset) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    dropoutKernel<T><<<gridFor(n), kThreads, 0, S(st)>>>(
        static_cast<const T *>(x), static_cast<T *>(y), n, dropoutThreshold(ratio), 1.0f / (1.0f - ratio), key,
        offset);
  });
  return launched("dropout");
}
loomrt_status onebitCompressG(void *, void *st, const float *x, float *error, uint8_t *packed,
                              float *scale, size_t n) {
  onebitZero<<<1, 1, 0, S(st)>>>(scale);
  bool words = wordAligned({x, error});
  if (words)
    onebitSumSquares4<<<gridFor(n / 4), kThreads, 0, S(st)>>>(
        reinterpret_cast<const float4 *>(x), reinterpret_cast<const float4 *>(error), scale, n / 4);
  else
    onebitSumSquares<<<gridFor(n), kThreads, 0, S(st)>>>(x, error, scale, n);
  onebitScale<<<1, 1, 0, S(st)>>>(scale, n);
  if (words)
    onebitSigns4<<<gridFor(n / 8), kThreads, 0, S(st)>>>(reinterpret_cast<const float4 *>(x),
                                                        reinterpret_cast<float4 *>(error), packed,
                                                        scale, n / 8);
  else
    onebitSigns<<<gridFor(n / 8), kThreads, 0, S(st)>>>(x, error, packed, scale, n / 8);
  return launched("onebit_compress");
}
loomrt_status onebitDecompressG(void *, void *st, const uint8_t *packed, const float *scales,
                                float *out, size_t chunks, size_t n) {
  if (wordAligned({out}))
    onebitDecompress8<<<gridFor(chunks * n / 8), kThreads, 0, S(st)>>>(
        packed, scales, reinterpret_cast<float4 *>(out), chunks * n / 8, n);
  else
    onebitDecompress<<<gridFor(chunks * n), kThreads, 0, S(st)>>>(packed, scales, out, chunks * n, n);
  return launched("onebit_decompress");
}
loomrt_status blockCompressG(void *, void *st, loomrt_block_codec codec, const float *x,
                             void *packed, size_t n, size_t block) {
  size_t blocks = n / block;
  blockCompressKernel<<<gridFor(blocks * kWarp), kThreads, 0, S(st)>>>(
      codec, x, static_cast<float *>(packed), static_cast<uint8_t *>(packed) + 4 * blocks, blocks,
      block);
  return launched("block_compress");
}
loomrt_status blockDecompressG(void *, void *st, loomrt_block_codec codec, const void *packed,
                               float *out, size_t n, size_t block) {
  blockDecompressKernel<<<gridFor(n), kThreads, 0, S(st)>>>(
      codec, static_cast<const float *>(packed),
      static_cast<const uint8_t *>(packed) + 4 * (n / block), out, n, block);
  return launched("block_decompress");
}
loomrt_status onebitAverageG(void *, void *st, const uint8_t *packed, const float *scales,
                             float *out, size_t world, size_t n) {
  if (wordAligned({out}))
    onebitAverage8<<<gridFor(n / 8), kThreads, 0, S(st)>>>(packed, scales,
                                                           reinterpret_cast<float4 *>(out), world, n);
  else
    onebitAverage<<<gridFor(n), kThreads, 0, S(st)>>>(packed, scales, out, world, n);
  return launched("onebit_average");
}
loomrt_status unaryGradG(void *, void *st, loomrt_unary_op op,
                         loomrt_dtype dt, const void *dy, const void *x,
                         void *dx, size_t n) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    constexpr int W = Word<T>::W;
    if (n % W == 0 && wordAligned({dy, x, dx}))
      withActivation(op, [&](auto fixed) {
        unaryGradWordKernel<T, decltype(fixed)::value><<<gridFor(n / W), kThreads, 0, S(st)>>>(
            op, static_cast<const T *>(dy), static_cast<const T *>(x), static_cast<T *>(dx),
            n / W);
      });
    else
      unaryGradKernel<T><<<gridFor(n), kThreads, 0, S(st)>>>(
          op, static_cast<const T *>(dy), static_cast<const T *>(x),
          static_cast<T *>(dx), n);
  });
  return launched("unary_grad");
}
loomrt_status binaryG(void *, void *st, loomrt_binary_op op, loomrt_dtype dt,
                      const uint8_t *cond, const int64_t *cShape,
                      const void *a, const int64_t *aShape, const void *b,
                      const int64_t *bShape, void *out, const int64_t *oShape,
                      int rank) {
  Shape shape{{}, rank};
  size_t n = 1;
  for (int d = 0; d < rank; ++d)
    n *= size_t(shape.d[d] = oShape[d]);
  // Size of an operand that is a suffix of the output (leading dims 1,
  // the rest equal), or 0 when it broadcasts any other way.
  auto suffixSize = [&](const int64_t *shp) -> size_t {
    size_t m = 1;
    bool leading = true;
    for (int d = 0; d < rank; ++d) {
      if (leading && shp[d] == 1)
        continue;
      leading = false;
      if (shp[d] != oShape[d])
        return 0;
      m *= size_t(shp[d]);
    }
    return m;
  };
  size_t ma = suffixSize(aShape), mb = suffixSize(bShape),
         mc = cond ? suffixSize(cShape) : 1;
  if (ma && mb && mc && n > 0 && dt != LOOMRT_I64) {
    withType(dt, [&](auto tag) {
      using T = decltype(tag);
      constexpr size_t W = Word<T>::W;
      auto fits = [&](size_t m, const void *p) {
        return m == 1 || (m % W == 0 && wordAligned({p}));
      };
      if (!cond && n % W == 0 && fits(ma, a) && fits(mb, b) && wordAligned({out})) {
        binaryWordKernel<T><<<gridFor(n / W), kThreads, 0, S(st)>>>(
            op, static_cast<const T *>(a), static_cast<const T *>(b), static_cast<T *>(out),
            ma, mb, n);
        return;
      }
      auto go = [&](auto idx) {
        using I = decltype(idx);
        binaryFlatKernel<T, I><<<gridFor(n), kThreads, 0, S(st)>>>(
            op, cond, static_cast<const T *>(a), static_cast<const T *>(b),
            static_cast<T *>(out), I(ma), I(mb), I(mc), I(n));
      };
      if (n < (size_t(1) << 31))
        go(uint32_t{});
      else
        go(size_t{});
    });
    return launched("binary");
  }
  Strides sa = broadcastStrides(aShape, oShape, rank);
  Strides sb = broadcastStrides(bShape, oShape, rank);
  Strides sc = cond ? broadcastStrides(cShape, oShape, rank) : Strides{};
  if (dt == LOOMRT_I64) {
    binaryIntKernel<<<gridFor(n), kThreads, 0, S(st)>>>(
        op, cond, static_cast<const int64_t *>(a), static_cast<const int64_t *>(b),
        static_cast<int64_t *>(out), shape, sa, sb, sc, n);
    return launched("binary");
  }
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    binaryKernel<T><<<gridFor(n), kThreads, 0, S(st)>>>(
        op, cond, static_cast<const T *>(a), static_cast<const T *>(b),
        static_cast<T *>(out), shape, sa, sb, sc, n);
  });
  return launched("binary");
}
loomrt_status castG(void *, void *st, loomrt_dtype from, const void *x,
                    loomrt_dtype to, void *y, size_t n) {
  if (from == LOOMRT_I64 && to == LOOMRT_I64)
    return gpuCheck(gpuMemcpyAsync(y, x, n * 8, S(st)), "cast");
  if (from == LOOMRT_I64 || to == LOOMRT_I64) {
    withType(from == LOOMRT_I64 ? to : from, [&](auto tag) {
      using T = decltype(tag);
      if (from == LOOMRT_I64)
        castFromIntKernel<T><<<gridFor(n), kThreads, 0, S(st)>>>(
            static_cast<const int64_t *>(x), static_cast<T *>(y), n);
      else
        castToIntKernel<T><<<gridFor(n), kThreads, 0, S(st)>>>(
            static_cast<const T *>(x), static_cast<int64_t *>(y), n);
    });
    return launched("cast");
  }
  withType(from, [&](auto f) {
    withType(to, [&](auto t) {
      using F = decltype(f);
      using T = decltype(t);
      castKernel<F, T><<<gridFor(n), kThreads, 0, S(st)>>>(
          static_cast<const F *>(x), static_cast<T *>(y), n);
    });
  });
  return launched("cast");
}
loomrt_status lerpG(void *, void *st, loomrt_dtype dt, const void *a, const void *b, void *y,
                    size_t n, float w) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    constexpr int W = Word<T>::W;
    if (n % W == 0 && wordAligned({a, b, y}))
      lerpWordKernel<T><<<gridFor(n / W), kThreads, 0, S(st)>>>(
          static_cast<const T *>(a), static_cast<const T *>(b), static_cast<T *>(y), n / W, w);
    else
      lerpKernel<T><<<gridFor(n), kThreads, 0, S(st)>>>(
          static_cast<const T *>(a), static_cast<const T *>(b), static_cast<T *>(y), n, w);
  });
  return launched("lerp");
}
loomrt_status cumsumG(void *, void *st, loomrt_dtype dt, const void *x, void *y,
                      int64_t outer, int64_t len, int64_t inner, int exclusive, int reverse) {
  size_t cols = size_t(outer * inner);
  if (dt == LOOMRT_I64)
    cumsumKernel<int64_t, int64_t><<<gridFor(cols), kThreads, 0, S(st)>>>(
        static_cast<const int64_t *>(x), static_cast<int64_t *>(y), outer, len, inner,
        exclusive, reverse);
  else
    withType(dt, [&](auto tag) {
      using T = decltype(tag);
      cumsumKernel<T, float><<<gridFor(cols), kThreads, 0, S(st)>>>(
          static_cast<const T *>(x), static_cast<T *>(y), outer, len, inner, exclusive,
          reverse);
    });
  return launched("cumsum");
}
loomrt_status fillG(void *, void *st, loomrt_dtype dt, void *x, float v,
                    size_t n) {
  if (dt == LOOMRT_I64) {
    fillKernel<int64_t><<<gridFor(n), kThreads, 0, S(st)>>>(static_cast<int64_t *>(x),
                                                            floatToInt64(v), n);
    return launched("fill");
  }
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    fillKernel<T><<<gridFor(n), kThreads, 0, S(st)>>>(static_cast<T *>(x),
                                                      store<T>(v), n);
  });
  return launched("fill");
}
loomrt_status copyStridedG(void *, void *st, size_t elem, const void *src,
                           const int64_t *ss, void *dst, const int64_t *ds,
                           const int64_t *shp, int rank) {
  // Normalise: drop size-1 dims, merge a dim into the one before it when
  // both sides are contiguous across the pair.
  int64_t sh[LOOMRT_MAX_RANK], a[LOOMRT_MAX_RANK], b[LOOMRT_MAX_RANK];
  int r = 0;
  size_t n = 1;
  for (int d = 0; d < rank; ++d) {
    n *= size_t(shp[d]);
    if (shp[d] == 1)
      continue;
    if (r > 0 && a[r - 1] == ss[d] * shp[d] && b[r - 1] == ds[d] * shp[d]) {
      sh[r - 1] *= shp[d];
      a[r - 1] = ss[d];
      b[r - 1] = ds[d];
      continue;
    }
    sh[r] = shp[d];
    a[r] = ss[d];
    b[r] = ds[d];
    ++r;
  }
  if (n == 0)
    return LOOMRT_OK;
  if (r == 0) {
    sh[0] = 1;
    a[0] = b[0] = 1;
    r = 1;
  }
  // Widen: a unit-stride inner run on both sides moves as 16/8/4-byte words
  // when sizes, strides and addresses all allow it.
  for (size_t w : {size_t(16), size_t(8), size_t(4)}) {
    if (w <= elem || w % elem || a[r - 1] != 1 || b[r - 1] != 1)
      continue;
    int64_t v = int64_t(w / elem);
    bool ok = sh[r - 1] % v == 0 && uintptr_t(src) % w == 0 && uintptr_t(dst) % w == 0;
    for (int d = 0; d + 1 < r; ++d)
      ok = ok && a[d] % v == 0 && b[d] % v == 0;
    if (!ok)
      continue;
    sh[r - 1] /= v;
    for (int d = 0; d + 1 < r; ++d) {
      a[d] /= v;
      b[d] /= v;
    }
    n /= size_t(v);
    elem = w;
    break;
  }
  if (r <= 2 && a[r - 1] == 1 && b[r - 1] == 1) {
    int64_t rows = r == 2 ? sh[0] : 1, cols = sh[r - 1];
    int64_t lds = r == 2 ? a[0] : 0, ldd = r == 2 ? b[0] : 0;
    // Threads a row: enough for four elements each, a power of two up to
    // the block; the block's other threads take the next rows.
    int rowThreads = 1;
    while (rowThreads < kThreads && int64_t(rowThreads) * 4 < cols)
      rowThreads *= 2;
    int64_t rowsPerBlock = kThreads / rowThreads;
    dim3 grid(unsigned(std::min<int64_t>((cols + 4 * rowThreads - 1) / (4 * rowThreads), 1024)),
              unsigned(std::min<int64_t>((rows + rowsPerBlock - 1) / rowsPerBlock, 65535)));
    withElem(elem, [&](auto tag) {
      using E = decltype(tag);
      copyRowsKernel<E><<<grid, kThreads, 0, S(st)>>>(static_cast<const E *>(src),
                                                      static_cast<E *>(dst), rows, cols, lds, ldd,
                                                      rowThreads);
    });
    return launched("copy_strided");
  }
  bool negative = false;
  int64_t reach = 0; // the largest offset on either side, per dim summed
  for (int d = 0; d < r; ++d) {
    negative = negative || a[d] < 0 || b[d] < 0;
    reach += (sh[d] - 1) * std::max(a[d], b[d]);
  }
  auto launch = [&](auto idx) {
    using I = decltype(idx);
    CopyDims<I> dims{};
    dims.rank = r;
    for (int d = 0; d < r; ++d) {
      dims.shape[d] = I(sh[d]);
      dims.ss[d] = I(a[d]);
      dims.ds[d] = I(b[d]);
      if constexpr (sizeof(I) == 4)
        divMagic(uint32_t(sh[d]), dims.magic[d], dims.shift[d]);
    }
    withElem(elem, [&](auto tag) {
      using E = decltype(tag);
      copyStridedKernel<E, I><<<gridFor((n + kCopyUnroll - 1) / kCopyUnroll), kThreads, 0, S(st)>>>(
          static_cast<const E *>(src), static_cast<E *>(dst), dims, I(n));
    });
  };
  if (!negative && reach < (int64_t(1) << 30) && n < (size_t(1) << 30))
    launch(int32_t{});
  else
    launch(int64_t{});
  return launched("copy_strided");
}
loomrt_status reduceG(void *, void *st, loomrt_reduce_op op, loomrt_dtype dt,
                      const void *x, void *y, int64_t outer, int64_t len,
                      int64_t inner) {
  int64_t chunks = (len + kReduceChunk - 1) / kReduceChunk;
  if (loomrt::reduceInChunks(outer, len, inner)) {
    int64_t tiles = (inner + kColTile - 1) / kColTile;
    float *part;
    if (loomrt_status e = gpuCheck(
            gpuMallocAsync((void **)&part, size_t(outer * chunks * inner) * 4, S(st)),
            "reduce scratch"))
      return e;
    withType(dt, [&](auto tag) {
      using T = decltype(tag);
      reducePartialKernel<T><<<dim3(unsigned(outer * tiles), unsigned(chunks)),
                               dim3(kColTile, kRowLanes), 0, S(st)>>>(
          op, static_cast<const T *>(x), part, len, inner, tiles);
      reduceFinishKernel<T><<<gridFor(size_t(outer * inner)), kThreads, 0, S(st)>>>(
          op, part, static_cast<T *>(y), outer, chunks, len, inner);
    });
    loomrt_status e = launched("reduce");
    (void)gpuFreeAsync(part, S(st));
    return e;
  }
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    reduceKernel<T><<<gridFor(size_t(outer * inner)), kThreads, 0, S(st)>>>(
        op, static_cast<const T *>(x), static_cast<T *>(y), outer, len, inner);
  });
  return launched("reduce");
}
loomrt_status sgdG(void *, void *st, float lr, float mu, int nesterov,
                   float *p, const float *g, float *buf, size_t n) {
  sgdKernel<<<gridFor(n), kThreads, 0, S(st)>>>(lr, mu, nesterov, p, g, buf, n);
  return launched("sgd");
}

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
        e = copyStridedG(nullptr, st, size_t(o->es), o->p, from, o->padded, to, shape, 3);
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
    result = copyStridedG(nullptr, st, size_t(C.es), C.padded, from, c, to, shape, 3);
  }
  release();
  return result;
}

/// loomrt_matmul_bias through the vendor's bias epilogue, where it applies:
/// one batch, or a batch of contiguous, untransposed A and contiguous C over
/// one shared B (a linear layer over [batch, m] rows, folded into batch*m
/// rows), every dimension a multiple of 8 (else loomrt_matmul's padding
/// path, then the add). Unsupported otherwise, with no error recorded.
loomrt_status matmulBiasG(void *state, void *st, const loomrt_gemm *g, const void *a,
                          const void *b, const void *bias, void *c) {
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
  return vendorGemmBias(static_cast<GpuState *>(state), S(st), call, bias);
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

//===----------------------------------------------------------------------===//
// Row ops: one block per row
//===----------------------------------------------------------------------===//


template <typename T>
__global__ void softmaxKernel(const T *x, T *y, int64_t d, float scale,
                              int log, int64_t causalBlock) {
  const T *xr = x + blockIdx.x * d;
  T *yr = y + blockIdx.x * d;
  int64_t vis = causalBlock ? (blockIdx.x % causalBlock) + (d - causalBlock) + 1
                            : d;
  float mx = -FLT_MAX;
  for (int64_t j = threadIdx.x; j < vis; j += blockDim.x)
    mx = fmaxf(mx, scale * load(xr[j]));
  mx = blockReduce<true>(mx);
  float sum = 0;
  for (int64_t j = threadIdx.x; j < vis; j += blockDim.x)
    sum += expf(scale * load(xr[j]) - mx);
  sum = blockReduce<false>(sum);
  float lse = logf(sum);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    float z = scale * load(xr[j]) - mx;
    float v = j < vis ? (log ? z - lse : expf(z - lse))
                      : (log ? -INFINITY : 0.0f);
    yr[j] = store<T>(v);
  }
}

template <typename T>
__global__ void softmaxGradKernel(const T *dy, const T *y, T *dx, int64_t d,
                                  float scale, int log) {
  const T *g = dy + blockIdx.x * d, *yr = y + blockIdx.x * d;
  float acc = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
    acc += log ? load(g[j]) : load(g[j]) * load(yr[j]);
  acc = blockReduce<false>(acc);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    float yv = load(yr[j]), gv = load(g[j]);
    float v = log ? gv - expf(yv) * acc : yv * (gv - acc);
    dx[blockIdx.x * d + j] = store<T>(scale * v);
  }
}

/// A row of d <= kWarp*N elements in one warp's registers. When the row is
/// exactly kWarp*N elements of whole 16-byte words (bf16 x 8 or fp32 x 4, rows
/// 16-byte aligned), lane l holds words l, l+kWarp, ...: each access is 16
/// bytes. Otherwise lane l holds elements l, l+kWarp, ... and the padding
/// lanes read 0. rowIndex gives the column of register i either way.
template <typename T, int N> constexpr int kWordElems = 16 / int(sizeof(T));
/// Whether rows of d elements at these bases move as 16-byte words.
template <typename T, int N>
__device__ bool rowVectorised(int d, std::initializer_list<const void *> bases) {
  bool ok = N % kWordElems<T, N> == 0 && d == kWarp * N;
  for (const void *b : bases)
    ok = ok && uintptr_t(b) % 16 == 0;
  return ok;
}
template <typename T, int N> __device__ int rowIndex(bool vec, int lane, int i) {
  constexpr int W = kWordElems<T, N>;
  return vec ? (i / W * kWarp + lane) * W + i % W : lane + kWarp * i;
}
template <typename T, int N>
__device__ void loadRow(bool vec, const T *r, int d, int lane, float (&v)[N]) {
  constexpr int W = kWordElems<T, N>;
  if constexpr (N % W == 0) {
    if (vec) {
#pragma unroll
      for (int w = 0; w < N / W; ++w) {
        uint4 word = reinterpret_cast<const uint4 *>(r)[w * kWarp + lane];
        const T *e = reinterpret_cast<const T *>(&word);
#pragma unroll
        for (int k = 0; k < W; ++k)
          v[w * W + k] = load(e[k]);
      }
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < N; ++i)
    v[i] = lane + kWarp * i < d ? load(r[lane + kWarp * i]) : 0.0f;
}
template <typename T, int N>
__device__ void storeRow(bool vec, T *r, int d, int lane, const float (&v)[N]) {
  constexpr int W = kWordElems<T, N>;
  if constexpr (N % W == 0) {
    if (vec) {
#pragma unroll
      for (int w = 0; w < N / W; ++w) {
        uint4 word;
        T *e = reinterpret_cast<T *>(&word);
#pragma unroll
        for (int k = 0; k < W; ++k)
          e[k] = store<T>(v[w * W + k]);
        reinterpret_cast<uint4 *>(r)[w * kWarp + lane] = word;
      }
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (lane + kWarp * i < d)
      r[lane + kWarp * i] = store<T>(v[i]);
}

/// Rows of at most kWarp*N elements (attention scores: one row per query, 1024
/// keys for GPT-2): one warp per row holding it in registers, so the row is
/// read once and written once instead of read three times by a block.
template <typename T, int N>
__global__ void softmaxWarpKernel(const T *x, T *y, int64_t rows, int d,
                                  float scale, int log, int64_t causalBlock) {
  int64_t row = int64_t(blockIdx.x) * (blockDim.x / kWarp) + warpId();
  int lane = laneId();
  if (row >= rows)
    return;
  const T *xr = x + row * d;
  int vis = causalBlock ? int(row % causalBlock) + (d - int(causalBlock)) + 1 : d;
  float v[N];
  float mx = -FLT_MAX;
  bool vec = rowVectorised<T, N>(d, {x, y});
  loadRow<T, N>(vec, xr, d, lane, v);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    v[i] = rowIndex<T, N>(vec, lane, i) < vis ? scale * v[i] : -FLT_MAX;
    mx = fmaxf(mx, v[i]);
  }
  mx = warpMax(mx);
  float sum = 0;
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (rowIndex<T, N>(vec, lane, i) < vis)
      sum += expf(v[i] - mx);
  float lse = logf(warpSum(sum));
#pragma unroll
  for (int i = 0; i < N; ++i)
    v[i] = rowIndex<T, N>(vec, lane, i) < vis
               ? (log ? v[i] - mx - lse : expf(v[i] - mx - lse))
               : (log ? -INFINITY : 0.0f);
  storeRow<T, N>(vec, y + row * d, d, lane, v);
}
template <typename T, int N>
__global__ void softmaxGradWarpKernel(const T *dy, const T *y, T *dx,
                                      int64_t rows, int d, float scale,
                                      int log) {
  int64_t row = int64_t(blockIdx.x) * (blockDim.x / kWarp) + warpId();
  int lane = laneId();
  if (row >= rows)
    return;
  float gv[N], yv[N], acc = 0;
  bool vec = rowVectorised<T, N>(d, {dy, y, dx});
  loadRow<T, N>(vec, dy + row * d, d, lane, gv);
  loadRow<T, N>(vec, y + row * d, d, lane, yv);
#pragma unroll
  for (int i = 0; i < N; ++i)
    acc += log ? gv[i] : gv[i] * yv[i];
  acc = warpSum(acc);
#pragma unroll
  for (int i = 0; i < N; ++i)
    gv[i] = scale * (log ? gv[i] - expf(yv[i]) * acc : yv[i] * (gv[i] - acc));
  storeRow<T, N>(vec, dx + row * d, d, lane, gv);
}
/// Calls f with the register count (elements per lane) that fits a row of d,
/// or returns false for rows longer than kMaxRowRegisters warps' width.
constexpr int kMaxRowRegisters = 32;
template <typename F> bool withRowRegisters(int64_t d, F &&f) {
  if (d <= kWarp) f(std::integral_constant<int, 1>{});
  else if (d <= 4 * kWarp) f(std::integral_constant<int, 4>{});
  else if (d <= 8 * kWarp) f(std::integral_constant<int, 8>{});
  else if (d <= 16 * kWarp) f(std::integral_constant<int, 16>{});
  else if (d <= kMaxRowRegisters * kWarp) f(std::integral_constant<int, kMaxRowRegisters>{});
  else return false;
  return true;
}
constexpr int kRowsPerBlock = kThreads / kWarp;

loomrt_status softmaxG(void *, void *st, loomrt_dtype dt, const void *x,
                       void *y, int64_t rows, int64_t d, float scale, int log,
                       int64_t causalBlock) {
  unsigned blocks = unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    if (withRowRegisters(d, [&](auto n) {
          softmaxWarpKernel<T, decltype(n)::value><<<blocks, kThreads, 0, S(st)>>>(
              static_cast<const T *>(x), static_cast<T *>(y), rows, int(d), scale,
              log, causalBlock);
        }))
      return;
    softmaxKernel<T><<<unsigned(rows), kThreads, 0, S(st)>>>(
        static_cast<const T *>(x), static_cast<T *>(y), d, scale, log,
        causalBlock);
  });
  return launched("softmax");
}

loomrt_status softmaxGradG(void *, void *st, loomrt_dtype dt, const void *dy,
                           const void *y, void *dx, int64_t rows, int64_t d,
                           float scale, int log) {
  unsigned blocks = unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    if (withRowRegisters(d, [&](auto n) {
          softmaxGradWarpKernel<T, decltype(n)::value><<<blocks, kThreads, 0, S(st)>>>(
              static_cast<const T *>(dy), static_cast<const T *>(y),
              static_cast<T *>(dx), rows, int(d), scale, log);
        }))
      return;
    softmaxGradKernel<T><<<unsigned(rows), kThreads, 0, S(st)>>>(
        static_cast<const T *>(dy), static_cast<const T *>(y),
        static_cast<T *>(dx), d, scale, log);
  });
  return launched("softmax_grad");
}

template <typename T>
__device__ void rowStats(const T *x, int64_t d, float eps, bool rms,
                         float &mean, float &rstd) {
  float s = 0;
  if (!rms) {
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
      s += load(x[j]);
    s = blockReduce<false>(s);
  }
  mean = s / float(d);
  float v = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    float c = load(x[j]) - mean;
    v += c * c;
  }
  v = blockReduce<false>(v);
  rstd = rsqrtf(v / float(d) + eps);
}

template <typename T>
__global__ void layerNormKernel(const T *x, const T *w, const T *b, T *y,
                                int64_t d, float eps, bool rms) {
  const T *xr = x + blockIdx.x * d;
  float mean, rstd;
  rowStats(xr, d, eps, rms, mean, rstd);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    float v = (load(xr[j]) - mean) * rstd * load(w[j]);
    y[blockIdx.x * d + j] = store<T>(b ? v + load(b[j]) : v);
  }
}

/// dx per row; the row's mean and rstd are saved for the dw/db kernel.
template <typename T>
__global__ void layerNormGradKernel(const T *dy, const T *x, const T *w, T *dx,
                                    float2 *stats, int64_t d, float eps,
                                    bool rms) {
  const T *xr = x + blockIdx.x * d, *gr = dy + blockIdx.x * d;
  float mean, rstd;
  rowStats(xr, d, eps, rms, mean, rstd);
  float sg = 0, sgx = 0;
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    float xh = (load(xr[j]) - mean) * rstd, g = load(gr[j]) * load(w[j]);
    sg += g;
    sgx += g * xh;
  }
  sg = blockReduce<false>(sg);
  sgx = blockReduce<false>(sgx);
  float mg = rms ? 0.0f : sg / float(d), mgx = sgx / float(d);
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
    float xh = (load(xr[j]) - mean) * rstd, g = load(gr[j]) * load(w[j]);
    dx[blockIdx.x * d + j] = store<T>(rstd * (g - mg - xh * mgx));
  }
  if (threadIdx.x == 0)
    stats[blockIdx.x] = make_float2(mean, rstd);
}

/// dw[j] = sum_r dy[r,j] xhat[r,j], db[j] = sum_r dy[r,j], in two
/// deterministic stages: blocks of kColTile columns x kRowLanes row lanes sum one chunk of
/// `per` rows (>= kLnChunk, more when there are over 1024 chunks, to bound
/// the scratch) each into partials[chunk][j] (coalesced across the warp's
/// columns); then one thread per column adds the chunks in order. One thread
/// per column walking all rows left the GPU idle: 2.8 ms per call at GPT-2
/// 124M batch 8 (14% of the step, ncu on an H200).
constexpr int64_t kLnChunk = 64;
template <typename T>
__global__ void layerNormWeightGradPartialKernel(const T *dy, const T *x,
                                                 const float2 *stats, float *pw,
                                                 float *pb, int64_t rows, int64_t d,
                                                 int64_t per) {
  __shared__ float sw[kRowLanes][kColTile + 1], sb[kRowLanes][kColTile + 1];
  int64_t j = int64_t(blockIdx.x) * kColTile + threadIdx.x;
  int64_t r0 = int64_t(blockIdx.y) * per, r1 = min(rows, r0 + per);
  float aw = 0, ab = 0;
  if (j < d)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      float g = load(dy[r * d + j]);
      float2 st = stats[r];
      aw += g * (load(x[r * d + j]) - st.x) * st.y;
      ab += g;
    }
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y == 0 && j < d) {
    for (int k = 1; k < kRowLanes; ++k) {
      aw += sw[k][threadIdx.x];
      ab += sb[k][threadIdx.x];
    }
    pw[blockIdx.y * d + j] = aw;
    pb[blockIdx.y * d + j] = ab;
  }
}
template <typename T>
__global__ void layerNormWeightGradKernel(const float *pw, const float *pb, T *dw,
                                          T *db, int64_t chunks, int64_t d) {
  GRID_STRIDE(j, size_t(d)) {
    float aw = 0, ab = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      aw += pw[c * d + j];
      ab += pb[c * d + j];
    }
    dw[j] = store<T>(aw);
    if (db)
      db[j] = store<T>(ab);
  }
}

/// Layer and RMS norms of rows that fit one warp's registers as whole
/// 16-byte words (d = kWarp * N, N a multiple of a word's elements: GPT-2's
/// 768 is 24 bf16 a lane): each row is read once and written once, in
/// 16-byte accesses, where the block kernels above read it three times, two
/// bytes at a time, with two block-wide reductions (5.6 ms of GPT-2's bf16
/// step on an H100, ncu). Rows of other widths that fit take the same
/// kernels with one element a lane an access.
template <typename T, int N>
__device__ void normStats(const float (&v)[N], bool vec, int lane, int d, float eps,
                          bool rms, float &mean, float &rstd) {
  float s = 0;
  if (!rms) {
#pragma unroll
    for (int i = 0; i < N; ++i)
      s += v[i]; // padding reads 0
    s = warpSum(s);
  }
  mean = s / float(d);
  float q = 0;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    float c = rowIndex<T, N>(vec, lane, i) < d ? v[i] - mean : 0.0f;
    q += c * c;
  }
  rstd = rsqrtf(warpSum(q) / float(d) + eps);
}

template <typename T, int N>
__global__ void layerNormWarpKernel(const T *x, const T *w, const T *b, T *y, int64_t rows,
                                    int d, float eps, bool rms) {
  int64_t row = int64_t(blockIdx.x) * (blockDim.x / kWarp) + warpId();
  int lane = laneId();
  if (row >= rows)
    return;
  bool vec = rowVectorised<T, N>(d, {x, w, y}) && (!b || uintptr_t(b) % 16 == 0);
  float v[N], wv[N], bv[N];
  loadRow<T, N>(vec, x + row * d, d, lane, v);
  loadRow<T, N>(vec, w, d, lane, wv);
  if (b)
    loadRow<T, N>(vec, b, d, lane, bv);
  float mean, rstd;
  normStats<T, N>(v, vec, lane, d, eps, rms, mean, rstd);
#pragma unroll
  for (int i = 0; i < N; ++i)
    v[i] = (v[i] - mean) * rstd * wv[i] + (b ? bv[i] : 0.0f);
  storeRow<T, N>(vec, y + row * d, d, lane, v);
}

/// The gradient: a block takes a chunk of `per` rows, each warp one row at
/// a time (dx as the block kernel computes it), and every lane keeps its
/// columns' sums of dy * xhat and dy in registers; the block's warps then
/// add theirs in order through shared memory into the chunk's partial row
/// (pw, pb), which layerNormWeightGradKernel sums over chunks in order:
/// deterministic, and dy and x are read once instead of twice.
template <typename T, int N>
__global__ void layerNormGradWarpKernel(const T *dy, const T *x, const T *w, T *dx, float *pw,
                                        float *pb, int64_t rows, int d, float eps, bool rms,
                                        int64_t per) {
  extern __shared__ float part[]; // [warps][d]
  int lane = laneId(), warp = warpId(), warps = int(blockDim.x) / kWarp;
  int64_t r0 = int64_t(blockIdx.x) * per, r1 = min(rows, r0 + per);
  bool vec = rowVectorised<T, N>(d, {dy, x, w, dx});
  float wv[N], aw[N], ab[N];
  loadRow<T, N>(vec, w, d, lane, wv);
#pragma unroll
  for (int i = 0; i < N; ++i)
    aw[i] = ab[i] = 0;
  for (int64_t r = r0 + warp; r < r1; r += warps) {
    float xv[N], gv[N];
    loadRow<T, N>(vec, x + r * d, d, lane, xv);
    loadRow<T, N>(vec, dy + r * d, d, lane, gv);
    float mean, rstd;
    normStats<T, N>(xv, vec, lane, d, eps, rms, mean, rstd);
    float sg = 0, sgx = 0;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      float xh = (xv[i] - mean) * rstd, g = gv[i] * wv[i]; // padding: gv 0
      aw[i] += gv[i] * xh;
      ab[i] += gv[i];
      sg += g;
      sgx += g * xh;
      xv[i] = xh;
    }
    sg = warpSum(sg);
    sgx = warpSum(sgx);
    float mg = rms ? 0.0f : sg / float(d), mgx = sgx / float(d);
#pragma unroll
    for (int i = 0; i < N; ++i)
      gv[i] = rstd * (gv[i] * wv[i] - mg - xv[i] * mgx);
    storeRow<T, N>(vec, dx + r * d, d, lane, gv);
  }
  // The chunk's column sums: dy * xhat, then dy.
  for (int pass = 0; pass < 2; ++pass) {
    float *acc = pass ? ab : aw, *out = pass ? pb : pw;
#pragma unroll
    for (int i = 0; i < N; ++i)
      if (int j = rowIndex<T, N>(vec, lane, i); j < d)
        part[warp * d + j] = acc[i];
    __syncthreads();
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
      float t = 0;
      for (int k = 0; k < warps; ++k)
        t += part[k * d + j];
      out[int64_t(blockIdx.x) * d + j] = t;
    }
    __syncthreads();
  }
}

/// Calls f with the elements a lane holds for rows of d that one warp keeps
/// in registers, at most Most; false where d does not fit. Whole 16-byte
/// words a lane first (GPT-2's 768 and 1024; 2048 forward), then the
/// softmax's register counts, one element a lane an access.
template <int Most, typename F> bool withNormRegisters(int64_t d, F &&f) {
  bool done = false;
  auto exact = [&](auto n) {
    if constexpr (decltype(n)::value <= Most)
      if (!done && d == int64_t(kWarp) * decltype(n)::value) {
        f(n);
        done = true;
      }
  };
  // Elements a lane: 1 to 8 whole 16-byte bf16 words (not the warp width).
  constexpr int kWords[] = {8, 16, 24, 32, 48, 64};
  exact(std::integral_constant<int, kWords[0]>{});
  exact(std::integral_constant<int, kWords[1]>{});
  exact(std::integral_constant<int, kWords[2]>{});
  exact(std::integral_constant<int, kWords[3]>{});
  exact(std::integral_constant<int, kWords[4]>{});
  exact(std::integral_constant<int, kWords[5]>{});
  if (done)
    return true;
  if (d > int64_t(kWarp) * std::min(Most, kMaxRowRegisters))
    return false;
  return withRowRegisters(d, f);
}
/// The gradient's warp kernel keeps three rows of registers more than the
/// forward's: at most 32 elements a lane.
constexpr int kNormRegisters = 64, kNormGradRegisters = 32;

loomrt_status layerNormG(void *, void *st, loomrt_dtype dt, const void *x,
                         const void *w, const void *b, void *y, int64_t rows,
                         int64_t d, float eps, bool rms) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    unsigned blocks = unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock);
    if (rows && withNormRegisters<kNormRegisters>(d, [&](auto n) {
          layerNormWarpKernel<T, decltype(n)::value><<<blocks, kThreads, 0, S(st)>>>(
              static_cast<const T *>(x), static_cast<const T *>(w), static_cast<const T *>(b),
              static_cast<T *>(y), rows, int(d), eps, rms);
        }))
      return;
    if (rows)
      layerNormKernel<T><<<unsigned(rows), kThreads, 0, S(st)>>>(
          static_cast<const T *>(x), static_cast<const T *>(w),
          static_cast<const T *>(b), static_cast<T *>(y), d, eps, rms);
  });
  return launched("layer_norm");
}

loomrt_status layerNormGradG(void *, void *st, loomrt_dtype dt, const void *dy,
                             const void *x, const void *w, void *dx, void *dw,
                             void *db, int64_t rows, int64_t d, float eps,
                             bool rms) {
  // Rows a warp holds: chunks of whole blocks' rows, about 256 of them (the
  // partial rows stay a few MB); else the block kernels' row statistics
  // and their chunks of kLnChunk rows or more.
  bool warp = rows && withNormRegisters<kNormGradRegisters>(d, [](auto) {});
  int64_t per = warp ? (std::max<int64_t>(kRowsPerBlock, (rows + 255) / 256) + kRowsPerBlock - 1) /
                           kRowsPerBlock * kRowsPerBlock
                     : std::max(kLnChunk, (rows + 1023) / 1024);
  int64_t chunks = rows ? (rows + per - 1) / per : 0;
  size_t statsBytes = warp ? 0 : size_t(rows) * sizeof(float2);
  void *scratch = nullptr;
  if (rows)
    if (loomrt_status e = gpuCheck(
            gpuMallocAsync(&scratch, statsBytes + 2 * chunks * d * sizeof(float), S(st)),
            "layer_norm_grad scratch"))
      return e;
  auto *stats = static_cast<float2 *>(scratch);
  float *pw = reinterpret_cast<float *>(static_cast<char *>(scratch) + statsBytes),
        *pb = pw + chunks * d;
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    if (warp)
      withNormRegisters<kNormGradRegisters>(d, [&](auto n) {
        layerNormGradWarpKernel<T, decltype(n)::value>
            <<<unsigned(chunks), kThreads, size_t(kRowsPerBlock) * size_t(d) * sizeof(float),
               S(st)>>>(static_cast<const T *>(dy), static_cast<const T *>(x),
                        static_cast<const T *>(w), static_cast<T *>(dx), pw, pb, rows, int(d),
                        eps, rms, per);
      });
    else if (rows) {
      layerNormGradKernel<T><<<unsigned(rows), kThreads, 0, S(st)>>>(
          static_cast<const T *>(dy), static_cast<const T *>(x),
          static_cast<const T *>(w), static_cast<T *>(dx), stats, d, eps, rms);
      layerNormWeightGradPartialKernel<T>
          <<<dim3(unsigned((d + kColTile - 1) / kColTile), unsigned(chunks)),
             dim3(kColTile, kRowLanes), 0, S(st)>>>(
              static_cast<const T *>(dy), static_cast<const T *>(x), stats, pw, pb, rows, d, per);
    }
    layerNormWeightGradKernel<T><<<gridFor(size_t(d)), kThreads, 0, S(st)>>>(
        pw, pb, static_cast<T *>(dw), static_cast<T *>(db), chunks, d);
  });
  loomrt_status s = launched("layer_norm_grad");
  if (scratch)
    (void)gpuFreeAsync(scratch, S(st));
  return s;
}

//===----------------------------------------------------------------------===//
// Embedding, cross-entropy, sparse aggregation
//===----------------------------------------------------------------------===//

template <typename T>
__global__ void embeddingKernel(const T *table, const int64_t *idx, T *out,
                                int64_t n, int64_t d, int64_t vocab) {
  GRID_STRIDE(t, size_t(n * d)) {
    int64_t i = int64_t(t) / d, j = int64_t(t) % d, row = idx[i];
    out[t] = (row >= 0 && row < vocab) ? table[row * d + j] : store<T>(0.0f);
  }
}
#if LOOMRT_GPU_HAS_RADIX_SORT
/// The sort keys of embeddingGradSortedKernel: the token, or `vocab` for one
/// out of range (its own segment, skipped), so every key fits the sort's bits.
__global__ void embeddingKeysKernel(const int64_t *idx, int64_t *keys, int64_t *pos, int64_t n,
                                    int64_t vocab) {
  GRID_STRIDE(i, size_t(n)) {
    int64_t row = idx[i];
    keys[i] = row >= 0 && row < vocab ? row : vocab;
    pos[i] = int64_t(i);
  }
}
/// dtable from the positions sorted by token (stable: each token's
/// positions ascending): the thread of a segment's first position and
/// column j sums the segment in that order and writes the row's element
/// once. The CPU backend's order of additions, so the same bits on every
/// run and on both backends; atomics made the sum's order the scheduler's.
template <typename T>
__global__ void embeddingGradSortedKernel(const T *dy, const int64_t *keys, const int64_t *pos,
                                          float *dtable, int64_t n, int64_t d, int64_t vocab) {
  GRID_STRIDE(t, size_t(n * d)) {
    int64_t i = int64_t(t) / d, j = int64_t(t) % d, row = keys[i];
    if (row >= vocab || (i > 0 && keys[i - 1] == row))
      continue;
    float acc = 0.0f;
    for (int64_t e = i; e < n && keys[e] == row; ++e)
      acc += load(dy[pos[e] * d + j]);
    dtable[row * d + j] = acc;
  }
}
#endif
/// Without a device sort (HIP: no hipCUB in Debian): atomics, the order of
/// additions to a repeated token's row left to the scheduler.
template <typename T>
__global__ void embeddingGradKernel(const T *dy, const int64_t *idx,
                                    float *dtable, int64_t n, int64_t d,
                                    int64_t vocab) {
  GRID_STRIDE(t, size_t(n * d)) {
    int64_t i = int64_t(t) / d, j = int64_t(t) % d, row = idx[i];
    if (row >= 0 && row < vocab)
      atomicAdd(dtable + row * d + j, load(dy[t]));
  }
}

/// Folds values into one thread's running max m and sum s of exp(x - m)
/// (the online softmax of Milakov & Gimelshein 2018): one rescale per call
/// when the max grows, none per element, so a word of eight logits costs
/// eight exponentials and no divergent branch. A NaN logit makes s NaN.
template <int N> __device__ __forceinline__ void foldOnline(float &m, float &s, const float (&v)[N]) {
  float wm = v[0];
#pragma unroll
  for (int i = 1; i < N; ++i)
    wm = fmaxf(wm, v[i]);
  if (wm > m) {
    s *= expf(m - wm);
    m = wm;
  }
#pragma unroll
  for (int i = 0; i < N; ++i)
    s += expf(v[i] - m);
}
template <typename T, int W>
__device__ __forceinline__ void unpackWord(const uint4 &word, float (&v)[W]) {
  const T *e = reinterpret_cast<const T *>(&word);
#pragma unroll
  for (int k = 0; k < W; ++k)
    v[k] = load(e[k]);
}

/// Whether a cross-entropy's rows start on 16-byte words (every row: the
/// row length in bytes is a whole number of words) in all of `bases`.
template <typename T> bool rowsInWords(int64_t classes, std::initializer_list<const void *> bases) {
  return (size_t(classes) * sizeof(T)) % 16 == 0 && wordAligned(bases);
}

/// Block-wide max and sum of exp(x - max) of one row (stable log-sum-exp),
/// shared by the loss and its gradient, in one pass over the row. Rows of
/// whole 16-byte words (`vec`: GPT-2's 50304 bf16 logits are 6288 words)
/// are read a word at a time, two words in flight a thread: one 2-byte load
/// a thread an iteration, behind a branch, kept too few bytes in flight to
/// reach memory bandwidth (GPT-2's loss and its gradient took 5 ms of the
/// bf16 step on an H100 for ~5 GB of traffic).
template <typename T>
__device__ void rowMaxSumExp(const T *row, int64_t n, bool vec, float &mx, float &sum) {
  float m = -FLT_MAX, s = 0;
  if (vec) {
    constexpr int W = 16 / int(sizeof(T));
    const uint4 *words = reinterpret_cast<const uint4 *>(row);
    int64_t nw = n / W, j = threadIdx.x;
    for (; j + blockDim.x < nw; j += 2 * blockDim.x) {
      uint4 a = words[j], b = words[j + blockDim.x];
      float va[W], vb[W];
      unpackWord<T, W>(a, va);
      unpackWord<T, W>(b, vb);
      foldOnline(m, s, va);
      foldOnline(m, s, vb);
    }
    if (j < nw) {
      float va[W];
      unpackWord<T, W>(words[j], va);
      foldOnline(m, s, va);
    }
  } else {
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      float v[1] = {load(row[j])};
      foldOnline(m, s, v);
    }
  }
  mx = blockReduce<true>(m);
  sum = blockReduce<false>(s * expf(m - mx)); // a thread with no elements adds 0
}

/// Per-row loss; a label out of range yields NaN (visible in the loss).
template <typename T>
__global__ void crossEntropyRowKernel(const T *logits, const int64_t *labels,
                                      float *rowLoss, int64_t classes, bool vec) {
  const T *lr = logits + blockIdx.x * classes;
  float mx, sum;
  rowMaxSumExp(lr, classes, vec, mx, sum);
  if (threadIdx.x == 0) {
    int64_t lab = labels[blockIdx.x];
    rowLoss[blockIdx.x] = (lab >= 0 && lab < classes)
                              ? logf(sum) + mx - load(lr[lab])
                              : NAN;
  }
}
__global__ void meanKernel(const float *x, float *out, int64_t n) {
  float s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    s += x[i];
  s = blockReduce<false>(s);
  if (threadIdx.x == 0)
    *out = s / float(n);
}
template <typename T>
__global__ void crossEntropyGradKernel(const T *logits, const int64_t *labels,
                                       const float *dloss, T *dlogits,
                                       int64_t rows, int64_t classes, bool vec) {
  const T *lr = logits + blockIdx.x * classes;
  T *gr = dlogits + blockIdx.x * classes;
  float mx, sum;
  rowMaxSumExp(lr, classes, vec, mx, sum);
  float scale = *dloss / float(rows), inv = 1.0f / sum;
  int64_t lab = labels[blockIdx.x];
  if (vec) {
    constexpr int W = 16 / int(sizeof(T));
    const uint4 *in = reinterpret_cast<const uint4 *>(lr);
    uint4 *out = reinterpret_cast<uint4 *>(gr);
    for (int64_t j = threadIdx.x; j < classes / W; j += blockDim.x) {
      float v[W];
      unpackWord<T, W>(in[j], v);
      uint4 word;
      T *e = reinterpret_cast<T *>(&word);
#pragma unroll
      for (int k = 0; k < W; ++k)
        e[k] = store<T>((expf(v[k] - mx) * inv - (j * W + k == lab)) * scale);
      out[j] = word;
    }
    return;
  }
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
    float p = expf(load(lr[j]) - mx) * inv;
    gr[j] = store<T>((p - (j == lab)) * scale);
  }
}

loomrt_status embeddingG(void *, void *st, loomrt_dtype dt, const void *table,
                         const int64_t *idx, void *out, int64_t n, int64_t d,
                         int64_t vocab) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    embeddingKernel<T><<<gridFor(size_t(n * d)), kThreads, 0, S(st)>>>(
        static_cast<const T *>(table), idx, static_cast<T *>(out), n, d, vocab);
  });
  return launched("embedding");
}
loomrt_status embeddingGradG(void *, void *st, loomrt_dtype dt, const void *dy,
                             const int64_t *idx, float *dtable, int64_t n,
                             int64_t d, int64_t vocab) {
  if (loomrt_status s = gpuCheck(
          gpuMemsetAsync(dtable, 0, size_t(vocab * d) * 4, S(st)),
          "embedding_grad zero"))
    return s;
  if (n * d == 0)
    return LOOMRT_OK;
#if LOOMRT_GPU_HAS_RADIX_SORT
  int bits = 1;
  while (bits < 63 && (int64_t(1) << bits) <= vocab)
    ++bits;
  size_t temp = 0;
  sortPairs(nullptr, temp, nullptr, nullptr, nullptr, nullptr, size_t(n), bits, S(st));
  void *scratch = nullptr;
  if (loomrt_status e = gpuCheck(gpuMallocAsync(&scratch, 4 * size_t(n) * 8 + temp, S(st)),
                                 "embedding_grad sort scratch"))
    return e;
  auto *keys = static_cast<int64_t *>(scratch), *pos = keys + n, *sortedKeys = pos + n,
       *sortedPos = sortedKeys + n;
  embeddingKeysKernel<<<gridFor(size_t(n)), kThreads, 0, S(st)>>>(idx, keys, pos, n, vocab);
  sortPairs(sortedPos + n, temp, keys, sortedKeys, pos, sortedPos, size_t(n), bits, S(st));
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    embeddingGradSortedKernel<T><<<gridFor(size_t(n * d)), kThreads, 0, S(st)>>>(
        static_cast<const T *>(dy), sortedKeys, sortedPos, dtable, n, d, vocab);
  });
  (void)gpuFreeAsync(scratch, S(st));
#else
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    embeddingGradKernel<T><<<gridFor(size_t(n * d)), kThreads, 0, S(st)>>>(
        static_cast<const T *>(dy), idx, dtable, n, d, vocab);
  });
#endif
  return launched("embedding_grad");
}
loomrt_status crossEntropyG(void *, void *st, loomrt_dtype dt,
                            const void *logits, const int64_t *labels,
                            float *loss, int64_t rows, int64_t classes) {
  float *rowLoss;
  if (loomrt_status s = gpuCheck(
          gpuMallocAsync((void **)&rowLoss, rows * sizeof(float), S(st)),
          "cross_entropy scratch"))
    return s;
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    crossEntropyRowKernel<T><<<unsigned(rows), kThreads, 0, S(st)>>>(
        static_cast<const T *>(logits), labels, rowLoss, classes,
        rowsInWords<T>(classes, {logits}));
  });
  meanKernel<<<1, 1024, 0, S(st)>>>(rowLoss, loss, rows);
  loomrt_status s = launched("cross_entropy");
  (void)gpuFreeAsync(rowLoss, S(st));
  return s;
}
loomrt_status crossEntropyGradG(void *, void *st, loomrt_dtype dt,
                                const void *logits, const int64_t *labels,
                                const float *dloss, void *dlogits,
                                int64_t rows, int64_t classes) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    crossEntropyGradKernel<T><<<unsigned(rows), kThreads, 0, S(st)>>>(
        static_cast<const T *>(logits), labels, dloss,
        static_cast<T *>(dlogits), rows, classes,
        rowsInWords<T>(classes, {logits, dlogits}));
  });
  return launched("cross_entropy_grad");
}

template <typename T>
__global__ void spmmKernel(const int64_t *rowPtr, const int64_t *colIdx,
                           const T *vals, const T *x, T *y, int64_t f) {
  int64_t r = blockIdx.x;
  for (int64_t c = threadIdx.x; c < f; c += blockDim.x) {
    float acc = 0;
    for (int64_t j = rowPtr[r]; j < rowPtr[r + 1]; ++j)
      acc += load(vals[j]) * load(x[colIdx[j] * f + c]);
    y[r * f + c] = store<T>(acc);
  }
}
loomrt_status spmmG(void *, void *st, loomrt_dtype dt, const int64_t *rowPtr,
                    const int64_t *colIdx, const void *vals, const void *x,
                    void *y, int64_t rows, int64_t f) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    spmmKernel<T><<<unsigned(rows), f < kThreads ? kWarp * ((f + kWarp - 1) / kWarp) : kThreads,
                    0, S(st)>>>(rowPtr, colIdx, static_cast<const T *>(vals),
                                static_cast<const T *>(x), static_cast<T *>(y),
                                f);
  });
  return launched("spmm");
}

} // namespace
loomrt_status flashAttentionG(void *, void *, loomrt_dtype, int64_t, int64_t, int64_t, int64_t,
                              float, int, const void *, const void *, const void *, void *,
                              void *, float *);
loomrt_status flashAttentionGradG(void *, void *, loomrt_dtype, int64_t, int64_t, int64_t,
                                  int64_t, float, int, const void *, const void *,
                                  const void *, const void *, void *, void *, void *, void *,
                                  const void *, const float *);
namespace {

const KernelOps kGpuKernels = {
    unaryG,        unaryGradG,        binaryG,  castG,       lerpG,      cumsumG,    fillG,
    copyStridedG,  reduceG,           matmulG,  layerNormG,  layerNormGradG,
    softmaxG,      softmaxGradG,      embeddingG, embeddingGradG,
    crossEntropyG, crossEntropyGradG, spmmG,    sgdG,
#if !defined(LOOMRT_GPU_HIP)
    flashAttentionG, flashAttentionGradG, // cuda/flash_attention.cu (mma.sync)
#else // the composed path (common/attention.cpp): GEMMs and softmax
    nullptr,       nullptr,
#endif
    onebitCompressG, onebitDecompressG, onebitAverageG,
    blockCompressG, blockDecompressG,
    dropoutG,       gatherRowsG,
    matmulBiasG,    fusedG,
};

} // namespace

const KernelOps *gpuKernels() { return &kGpuKernels; }

} // namespace loomrt
