// gpu_sparse.cu: the GPU backend's embeddings, cross-entropy, sparse aggregation (single
// source for CUDA and HIP; gpu_kernels.h has what the kernel files share).
#include "gpu/gpu_kernels.h"

namespace loomrt {
namespace {

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

//===----------------------------------------------------------------------===//
// Mixture of experts: routing and the moves to and from expert slots
//===----------------------------------------------------------------------===//

/// One thread a row: the j-th choice is the largest entry after the
/// (j-1)-th in the order (value descending, position ascending), so equal
/// values come out in order of position, as on the CPU.
template <typename T>
__global__ void topKKernel(const T *x, T *values, int64_t *indices, int64_t rows, int64_t n,
                           int64_t k) {
  GRID_STRIDE(r, size_t(rows)) {
    const T *xr = x + r * n;
    float pv = 0;
    int64_t pi = -1;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      float bv = 0;
      for (int64_t c = 0; c < n; ++c) {
        float v = load(xr[c]);
        bool after = pi < 0 || v < pv || (v == pv && c > pi);
        if (after && (best < 0 || v > bv)) {
          best = c;
          bv = v;
        }
      }
      if (best < 0) // only NaNs left: a valid position all the same
        best = j;
      values[r * k + j] = xr[best];
      indices[r * k + j] = best;
      pv = bv;
      pi = best;
    }
  }
}
template <typename T>
__global__ void topKGradKernel(const T *dv, const int64_t *indices, T *dx, int64_t rows, int64_t n,
                               int64_t k) {
  GRID_STRIDE(i, size_t(rows * k)) {
    int64_t c = indices[i];
    if (c >= 0 && c < n)
      dx[(int64_t(i) / k) * n + c] = dv[i];
  }
}
/// One block an expert: the choices in the order (j, t) (every token's
/// first choice, then its second, ...) in chunks of the block's threads,
/// each chunk's matches numbered by a prefix sum in shared memory on top of
/// the matches before it. (It replaced one thread an expert walking all
/// n * k choices serially: 2.5 ms a layer at n = 8192, k = 2 on an H200,
/// a tenth of a 6.9B mixture's step; bench/RESULTS.md 2026-11-30.)
constexpr int kSlotThreads = 512;
__global__ void moeSlotsKernel(const int64_t *experts, int64_t *slots, float *counts, int64_t n,
                               int64_t k, int64_t numExperts, int64_t capacity) {
  __shared__ int scan[kSlotThreads];
  const int64_t e = blockIdx.x, total = n * k;
  const int tid = int(threadIdx.x);
  int64_t used = 0;
  for (int64_t base = 0; base < total; base += kSlotThreads) {
    int64_t i = base + tid, at = -1;
    int match = 0;
    if (i < total) {
      int64_t j = i / n, t = i - j * n;
      at = t * k + j;
      int64_t x = experts[at];
      match = x == e ? 1 : 0;
      if (e == 0 && (x < 0 || x >= numExperts))
        slots[at] = -1; // an expert that does not exist: dropped
    }
    scan[tid] = match;
    __syncthreads();
    for (int off = 1; off < kSlotThreads; off <<= 1) { // inclusive (Hillis-Steele)
      int v = tid >= off ? scan[tid - off] : 0;
      __syncthreads();
      scan[tid] += v;
      __syncthreads();
    }
    if (match) {
      int64_t p = used + scan[tid] - 1;
      slots[at] = p < capacity ? e * capacity + p : -1;
    }
    used += scan[kSlotThreads - 1];
    __syncthreads();
  }
  if (tid == 0)
    counts[e] = float(used);
}
template <typename T>
__global__ void moeDispatchKernel(const T *x, const int64_t *slots, const T *w, T *out, int64_t n,
                                  int64_t k, int64_t d, int64_t rows) {
  GRID_STRIDE(i, size_t(n * k * d)) {
    int64_t pair = int64_t(i) / d, c = int64_t(i) % d, row = slots[pair];
    if (row >= 0 && row < rows) {
      T v = x[(pair / k) * d + c];
      out[row * d + c] = w ? store<T>(load(v) * load(w[pair])) : v;
    }
  }
}
template <typename T>
__global__ void moeCombineKernel(const T *y, const int64_t *slots, const T *w, T *out, int64_t n,
                                 int64_t k, int64_t d, int64_t rows) {
  GRID_STRIDE(i, size_t(n * d)) {
    int64_t t = int64_t(i) / d, c = int64_t(i) % d;
    float acc = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t row = slots[t * k + j];
      if (row >= 0 && row < rows)
        acc += (w ? load(w[t * k + j]) : 1.0f) * load(y[row * d + c]);
    }
    out[i] = store<T>(acc);
  }
}
/// One warp a (token, choice) pair.
template <typename T>
__global__ void moeSlotDotKernel(const T *a, const T *b, const int64_t *slots, T *out, int64_t n,
                                 int64_t k, int64_t d, int64_t rows) {
  int64_t pair = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (pair >= n * k)
    return;
  int64_t row = slots[pair];
  float acc = 0;
  if (row >= 0 && row < rows)
    for (int64_t c = laneId(); c < d; c += kWarp)
      acc += load(a[(pair / k) * d + c]) * load(b[row * d + c]);
  acc = warpSum(acc);
  if (laneId() == 0)
    out[pair] = store<T>(acc);
}

loomrt_status topKG(void *, void *st, loomrt_dtype dt, const void *x, void *values,
                    int64_t *indices, int64_t rows, int64_t n, int64_t k) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    topKKernel<T><<<gridFor(size_t(rows)), kThreads, 0, S(st)>>>(
        static_cast<const T *>(x), static_cast<T *>(values), indices, rows, n, k);
  });
  return launched("top_k");
}
loomrt_status topKGradG(void *, void *st, loomrt_dtype dt, const void *dv, const int64_t *indices,
                        void *dx, int64_t rows, int64_t n, int64_t k) {
  size_t es = dt == LOOMRT_BF16 ? 2 : 4;
  if (loomrt_status s = gpuCheck(gpuMemsetAsync(dx, 0, size_t(rows * n) * es, S(st)),
                                 "top_k_grad zero"))
    return s;
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    topKGradKernel<T><<<gridFor(size_t(rows * k)), kThreads, 0, S(st)>>>(
        static_cast<const T *>(dv), indices, static_cast<T *>(dx), rows, n, k);
  });
  return launched("top_k_grad");
}
loomrt_status moeSlotsG(void *, void *st, const int64_t *experts, int64_t *slots, float *counts,
                        int64_t n, int64_t k, int64_t numExperts, int64_t capacity) {
  if (numExperts > 0)
    moeSlotsKernel<<<unsigned(numExperts), kSlotThreads, 0, S(st)>>>(experts, slots, counts, n, k,
                                                                     numExperts, capacity);
  return launched("moe_slots");
}
loomrt_status moeMoveG(void *, void *st, loomrt_dtype dt, bool combine, const void *x,
                       const int64_t *slots, const void *weights, void *out, int64_t n, int64_t k,
                       int64_t d, int64_t rows) {
  size_t es = dt == LOOMRT_BF16 ? 2 : 4;
  if (!combine)
    if (loomrt_status s = gpuCheck(gpuMemsetAsync(out, 0, size_t(rows * d) * es, S(st)),
                                   "moe_dispatch zero"))
      return s;
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    auto X = static_cast<const T *>(x);
    auto W = static_cast<const T *>(weights);
    auto O = static_cast<T *>(out);
    if (combine)
      moeCombineKernel<T><<<gridFor(size_t(n * d)), kThreads, 0, S(st)>>>(X, slots, W, O, n, k, d,
                                                                          rows);
    else if (n * k * d > 0)
      moeDispatchKernel<T><<<gridFor(size_t(n * k * d)), kThreads, 0, S(st)>>>(X, slots, W, O, n,
                                                                                k, d, rows);
  });
  return launched(combine ? "moe_combine" : "moe_dispatch");
}
loomrt_status moeSlotDotG(void *, void *st, loomrt_dtype dt, const void *a, const void *b,
                          const int64_t *slots, void *out, int64_t n, int64_t k, int64_t d,
                          int64_t rows) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    size_t threads = size_t(n * k) * kWarp;
    moeSlotDotKernel<T><<<unsigned((threads + kThreads - 1) / kThreads), kThreads, 0, S(st)>>>(
        static_cast<const T *>(a), static_cast<const T *>(b), slots, static_cast<T *>(out), n, k,
        d, rows);
  });
  return launched("moe_slot_dot");
}

} // namespace

void gpu::addSparseKernels(KernelOps &k) {
  k.top_k = topKG;
  k.top_k_grad = topKGradG;
  k.moe_slots = moeSlotsG;
  k.moe_move = moeMoveG;
  k.moe_slot_dot = moeSlotDotG;
  k.embedding = embeddingG;
  k.embedding_grad = embeddingGradG;
  k.cross_entropy = crossEntropyG;
  k.cross_entropy_grad = crossEntropyGradG;
  k.spmm = spmmG;
}

} // namespace loomrt
