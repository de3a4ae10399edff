// gpu_rows.cu: the GPU backend's row ops (norms, softmax): one block per row (single
// source for CUDA and HIP; gpu_kernels.h has what the kernel files share).
#include "gpu/gpu_kernels.h"

namespace loomrt {
namespace {

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
/// columns); then layerNormWeightGradKernel adds the chunks, again by
/// column tiles and row lanes. One thread per column walking all rows left
/// the GPU idle: 2.8 ms per call at GPT-2 124M batch 8 (14% of the step,
/// ncu on an H200).
constexpr int64_t kLnChunk = 64;

/// The last step of both stages: each row lane's sums (aw, ab) of a block's
/// kColTile columns added in lane order through shared memory
/// (deterministic); true in lane 0, whose aw and ab are then the totals.
__device__ bool sumRowLanes(float &aw, float &ab) {
  __shared__ float sw[kRowLanes][kColTile + 1], sb[kRowLanes][kColTile + 1];
  sw[threadIdx.y][threadIdx.x] = aw;
  sb[threadIdx.y][threadIdx.x] = ab;
  __syncthreads();
  if (threadIdx.y != 0)
    return false;
  for (int k = 1; k < kRowLanes; ++k) {
    aw += sw[k][threadIdx.x];
    ab += sb[k][threadIdx.x];
  }
  return true;
}
template <typename T>
__global__ void layerNormWeightGradPartialKernel(const T *dy, const T *x,
                                                 const float2 *stats, float *pw,
                                                 float *pb, int64_t rows, int64_t d,
                                                 int64_t per) {
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
  if (sumRowLanes(aw, ab) && j < d) {
    pw[blockIdx.y * d + j] = aw;
    pb[blockIdx.y * d + j] = ab;
  }
}
/// The partial rows' column sums: a block of kColTile columns, its
/// kRowLanes rows of threads each summing every kRowLanes-th chunk, then
/// the lanes in order through shared memory (deterministic). One thread a
/// column over every chunk ran 3 blocks at GPT-2's d = 768: 32 us a call
/// on an H200 to read 1.5 MB (CUPTI, bench/RESULTS.md 2026-12-01).
template <typename T>
__global__ void layerNormWeightGradKernel(const float *pw, const float *pb, T *dw,
                                          T *db, int64_t chunks, int64_t d) {
  const int64_t j = int64_t(blockIdx.x) * kColTile + threadIdx.x;
  float aw = 0, ab = 0;
  if (j < d)
    for (int64_t c = threadIdx.y; c < chunks; c += kRowLanes) {
      aw += pw[c * d + j];
      ab += pb[c * d + j];
    }
  if (sumRowLanes(aw, ab) && j < d) {
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
constexpr int kNormGradWarps = 4;

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
  // Rows a warp holds: blocks of kNormGradWarps warps, chunks of whole
  // blocks' rows, about 512 of them (the partial rows stay a few MB); else
  // the block kernels' row statistics and their chunks of kLnChunk rows or
  // more. Four warps a block, not eight: the kernel's registers (168 a
  // thread at d = 768) fit three 4-warp blocks an SM where one 8-warp
  // block fit, 12 warps in flight instead of 8 (ncu: 12% occupancy, 24% of
  // DRAM's bandwidth). Measured on an H200 it made the kernel no faster
  // (1.43 -> 1.44 ms a GPT-2 step, bench/RESULTS.md 2026-12-01): the
  // latency is not the warps' count; the rows' statistics and the two
  // warp sums a row are the next suspects.
  bool warp = rows && withNormRegisters<kNormGradRegisters>(d, [](auto) {});
  int64_t per = warp ? (std::max<int64_t>(kNormGradWarps, (rows + 511) / 512) + kNormGradWarps - 1) /
                           kNormGradWarps * kNormGradWarps
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
            <<<unsigned(chunks), kNormGradWarps * kWarp,
               size_t(kNormGradWarps) * size_t(d) * sizeof(float), S(st)>>>(static_cast<const T *>(dy), static_cast<const T *>(x),
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
    layerNormWeightGradKernel<T><<<unsigned((d + kColTile - 1) / kColTile),
                                   dim3(kColTile, kRowLanes), 0, S(st)>>>(
        pw, pb, static_cast<T *>(dw), static_cast<T *>(db), chunks, d);
  });
  loomrt_status s = launched("layer_norm_grad");
  if (scratch)
    (void)gpuFreeAsync(scratch, S(st));
  return s;
}


} // namespace

void gpu::addRowKernels(KernelOps &k) {
  k.layer_norm = layerNormG;
  k.layer_norm_grad = layerNormGradG;
  k.softmax = softmaxG;
  k.softmax_grad = softmaxGradG;
}

} // namespace loomrt
