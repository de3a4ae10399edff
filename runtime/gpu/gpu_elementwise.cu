// gpu_elementwise.cu: the GPU backend's elementwise kernels, copies, reductions, dropout, compression, gathers, SGD (single
// source for CUDA and HIP; gpu_kernels.h has what the kernel files share).
#include "gpu/gpu_kernels.h"

namespace loomrt {
namespace {

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//


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
/// Eight elements a thread, read and written as 16-byte words (an fp32 ->
/// bf16 cast reads two and writes one); the same conversion per element.
/// The scalar kernel above reached under 1 TB/s on the H200's 4.8 on the
/// 80-GiB offload rows' master-weight casts (bench/RESULTS.md, 2026-11-29).
template <typename F, typename T>
__global__ void castWordKernel(const F *x, T *y, size_t groups) {
  static_assert(sizeof(F) * 8 % 16 == 0 && sizeof(T) * 8 % 16 == 0, "whole words");
  GRID_STRIDE(g, groups) {
    alignas(16) F in[8];
    alignas(16) T out[8];
#pragma unroll
    for (int k = 0; k < int(sizeof(in) / 16); ++k)
      reinterpret_cast<uint4 *>(in)[k] = reinterpret_cast<const uint4 *>(x + g * 8)[k];
#pragma unroll
    for (int k = 0; k < 8; ++k)
      out[k] = store<T>(load(in[k]));
#pragma unroll
    for (int k = 0; k < int(sizeof(out) / 16); ++k)
      reinterpret_cast<uint4 *>(y + g * 8)[k] = reinterpret_cast<const uint4 *>(out)[k];
  }
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
/// One thread a pair (j, j + d/2) of a row: the rotary tables are read
/// once per pair; consecutive threads take consecutive j, so loads and
/// stores of each half coalesce.
template <typename T>
__global__ void rotaryKernel(const T *x, const T *cos, const T *sin, T *y, size_t rows,
                             size_t period, size_t h, bool backward) {
  GRID_STRIDE(i, rows * h) {
    size_t r = i / h, j = i % h;
    const T *xr = x + r * 2 * h, *cr = cos + (r % period) * 2 * h, *sr = sin + (r % period) * 2 * h;
    float ya, yb;
    rotaryPair(load(xr[j]), load(xr[j + h]), load(cr[j]), load(cr[j + h]), load(sr[j]),
               load(sr[j + h]), backward, ya, yb);
    y[r * 2 * h + j] = store<T>(ya);
    y[r * 2 * h + j + h] = store<T>(yb);
  }
}
/// The same a 16-byte word of each half at a time (W pairs a thread), with
/// 32-bit index arithmetic: one scalar pair a thread with 64-bit divisions
/// ran the Llama 1B's tensors at 0.9 TB/s on an H200 (CUPTI).
template <typename T>
__global__ void rotaryWordKernel(const T *x, const T *cos, const T *sin, T *y, uint32_t rows,
                                 uint32_t period, uint32_t hw, bool backward) {
  constexpr int W = Word<T>::W;
  uint32_t h = hw * W;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < rows * hw;
       i += gridDim.x * blockDim.x) {
    uint32_t r = i / hw, j = (i - r * hw) * W, t = r % period;
    size_t row = size_t(r) * 2 * h, tab = size_t(t) * 2 * h;
    Word<T> xa = loadWord(x + row + j), xb = loadWord(x + row + h + j);
    Word<T> ca = loadWord(cos + tab + j), cb = loadWord(cos + tab + h + j);
    Word<T> sa = loadWord(sin + tab + j), sb = loadWord(sin + tab + h + j);
    Word<T> ya, yb;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      float fa, fb;
      rotaryPair(load(xa.v[k]), load(xb.v[k]), load(ca.v[k]), load(cb.v[k]), load(sa.v[k]),
                 load(sb.v[k]), backward, fa, fb);
      ya.v[k] = store<T>(fa);
      yb.v[k] = store<T>(fb);
    }
    storeWord(y + row + j, ya);
    storeWord(y + row + h + j, yb);
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
// 1-bit compression (loomrt.h: loomrt_onebit_*). The norm: each block's
// sum of (x + error)^2 into partial[block] (a fixed grid of at most
// kOnebitBlocks), then one block adds the partials in a fixed order and
// writes ||c|| / sqrt(n); the signs and new error read it from device
// memory. No atomics: the same inputs give the same scale on every run
// (block sums added by atomicAdd land in the order the blocks finish, so
// 1-bit Adam's steps differed between two runs of one binary, issue 44).
constexpr unsigned kOnebitBlocks = 1024;
__global__ void onebitSumSquares(const float *x, const float *error, float *partial, size_t n) {
  float acc = 0.0f;
  GRID_STRIDE(i, n) {
    float c = x[i] + error[i];
    acc += c * c;
  }
  acc = blockReduce<false>(acc);
  if (threadIdx.x == 0)
    partial[blockIdx.x] = acc;
}
// The same over float4 words (x and error 16-byte aligned, n a multiple
// of 8: every 1-bit payload is).
__global__ void onebitSumSquares4(const float4 *x, const float4 *error, float *partial,
                                  size_t words) {
  float acc = 0.0f;
  GRID_STRIDE(i, words) {
    float4 a = x[i], e = error[i];
    float c0 = a.x + e.x, c1 = a.y + e.y, c2 = a.z + e.z, c3 = a.w + e.w;
    acc += c0 * c0 + c1 * c1 + c2 * c2 + c3 * c3;
  }
  acc = blockReduce<false>(acc);
  if (threadIdx.x == 0)
    partial[blockIdx.x] = acc;
}
__global__ void onebitScale(const float *partial, unsigned blocks, float *scale, size_t n) {
  float acc = 0.0f;
  for (unsigned b = threadIdx.x; b < blocks; b += blockDim.x)
    acc += partial[b];
  acc = blockReduce<false>(acc);
  if (threadIdx.x == 0)
    *scale = sqrtf(acc / float(n));
}
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
  GRID_STRIDE(i, n) sgdElement(lr, mu, nesterov, p[i], g[i], buf[i]);
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
  bool words = wordAligned({x, error});
  unsigned blocks = std::min(gridFor(words ? n / 4 : n), kOnebitBlocks);
  float *partial;
  if (loomrt_status e = gpuCheck(gpuMallocAsync((void **)&partial, blocks * sizeof(float), S(st)),
                                 "onebit_compress scratch"))
    return e;
  if (words)
    onebitSumSquares4<<<blocks, kThreads, 0, S(st)>>>(
        reinterpret_cast<const float4 *>(x), reinterpret_cast<const float4 *>(error), partial,
        n / 4);
  else
    onebitSumSquares<<<blocks, kThreads, 0, S(st)>>>(x, error, partial, n);
  onebitScale<<<1, kThreads, 0, S(st)>>>(partial, blocks, scale, n);
  (void)gpuFreeAsync(partial, S(st));
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
      if (n % 8 == 0 && wordAligned({x, y}))
        castWordKernel<F, T><<<gridFor(n / 8), kThreads, 0, S(st)>>>(
            static_cast<const F *>(x), static_cast<T *>(y), n / 8);
      else
        castKernel<F, T><<<gridFor(n), kThreads, 0, S(st)>>>(
            static_cast<const F *>(x), static_cast<T *>(y), n);
    });
  });
  return launched("cast");
}
loomrt_status rotaryG(void *, void *st, loomrt_dtype dt, const void *x, const void *cos,
                      const void *sin, void *y, size_t rows, size_t period, size_t d,
                      bool backward) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    constexpr int W = Word<T>::W;
    size_t h = d / 2;
    if (h % W == 0 && rows * (h / W) < (size_t(1) << 31) && period < (size_t(1) << 31) &&
        wordAligned({x, cos, sin, y})) {
      rotaryWordKernel<T><<<gridFor(rows * (h / W)), kThreads, 0, S(st)>>>(
          static_cast<const T *>(x), static_cast<const T *>(cos), static_cast<const T *>(sin),
          static_cast<T *>(y), uint32_t(rows), uint32_t(period), uint32_t(h / W), backward);
      return;
    }
    rotaryKernel<T><<<gridFor(rows * (d / 2)), kThreads, 0, S(st)>>>(
        static_cast<const T *>(x), static_cast<const T *>(cos), static_cast<const T *>(sin),
        static_cast<T *>(y), rows, period, d / 2, backward);
  });
  return launched("rotary");
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


} // namespace

loomrt_status gpu::copyStrided(void *state, void *stream, size_t elem, const void *src,
                               const int64_t *srcStrides, void *dst, const int64_t *dstStrides,
                               const int64_t *shape, int rank) {
  return copyStridedG(state, stream, elem, src, srcStrides, dst, dstStrides, shape, rank);
}

void gpu::addElementwiseKernels(KernelOps &k) {
  k.unary = unaryG;
  k.unary_grad = unaryGradG;
  k.binary = binaryG;
  k.cast = castG;
  k.lerp = lerpG;
  k.rotary = rotaryG;
  k.cumsum = cumsumG;
  k.fill = fillG;
  k.copy_strided = copyStridedG;
  k.reduce = reduceG;
  k.sgd = sgdG;
  k.onebit_compress = onebitCompressG;
  k.onebit_decompress = onebitDecompressG;
  k.onebit_average = onebitAverageG;
  k.block_compress = blockCompressG;
  k.block_decompress = blockDecompressG;
  k.dropout = dropoutG;
  k.gather_rows = gatherRowsG;
}

} // namespace loomrt
