// cpu_ops.cpp: the CPU backend's compute kernels (fp32 arithmetic, fp32 or
// bf16 storage), parallel over rows or elements with OpenMP; GEMM through
// OpenBLAS. They are the reference the GPU kernels are tested against, so
// they favour the plain formula (two-pass statistics, max-subtracted
// softmax) over tricks.
#include "common/backend.h"
#include "common/fused_eval.h"
#include "common/kernel_math.h"

#ifdef LOOMRT_HAVE_OPENBLAS
#include <cblas.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace loomrt {
namespace {

template <typename F> void withType(loomrt_dtype dt, F &&f) {
  if (dt == LOOMRT_BF16)
    f(uint16_t{});
  else
    f(float{});
}

/// y[i] = f(x[i], i) in fp32 over the storage type, on every core.
template <typename F>
loomrt_status elementwise(loomrt_dtype dt, const void *x, void *y, size_t n, F f) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const T *in = static_cast<const T *>(x);
    T *out = static_cast<T *>(y);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; ++i)
      out[i] = store<T>(f(load(in[i]), i));
  });
  return LOOMRT_OK;
}

loomrt_status unary(void *, void *, loomrt_unary_op op, loomrt_dtype dt,
                    const void *x, void *y, size_t n) {
  return elementwise(dt, x, y, n, [op](float v, size_t) { return unaryOp(op, v); });
}

loomrt_status unaryGradK(void *, void *, loomrt_unary_op op, loomrt_dtype dt,
                         const void *dy, const void *x, void *dx, size_t n) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const T *g = static_cast<const T *>(dy), *in = static_cast<const T *>(x);
    T *out = static_cast<T *>(dx);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; ++i)
      out[i] = store<T>(unaryGrad(op, load(g[i]), load(in[i])));
  });
  return LOOMRT_OK;
}

loomrt_status binary(void *, void *, loomrt_binary_op op, loomrt_dtype dt,
                     const uint8_t *cond, const int64_t *cShape, const void *a,
                     const int64_t *aShape, const void *b,
                     const int64_t *bShape, void *out, const int64_t *oShape,
                     int rank) {
  Shape shape{{}, rank};
  int64_t n = 1;
  for (int d = 0; d < rank; ++d)
    n *= (shape.d[d] = oShape[d]);
  Strides sa = broadcastStrides(aShape, oShape, rank);
  Strides sb = broadcastStrides(bShape, oShape, rank);
  Strides sc = cond ? broadcastStrides(cShape, oShape, rank) : Strides{};
  if (dt == LOOMRT_I64) {
    const int64_t *A = static_cast<const int64_t *>(a), *B = static_cast<const int64_t *>(b);
    int64_t *O = static_cast<int64_t *>(out);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      int64_t oa, ob, oc;
      stridedOffsets(shape, i, sa, sb, sc, oa, ob, oc);
      O[i] = cond ? (cond[oc] ? A[oa] : B[ob]) : binaryOpInt(op, A[oa], B[ob]);
    }
    return LOOMRT_OK;
  }
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const T *A = static_cast<const T *>(a), *B = static_cast<const T *>(b);
    T *O = static_cast<T *>(out);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) {
      int64_t oa, ob, oc;
      stridedOffsets(shape, i, sa, sb, sc, oa, ob, oc);
      if (cond)
        O[i] = cond[oc] ? A[oa] : B[ob];
      else
        O[i] = store<T>(binaryOp(op, load(A[oa]), load(B[ob])));
    }
  });
  return LOOMRT_OK;
}

loomrt_status castK(void *, void *, loomrt_dtype from, const void *x,
                    loomrt_dtype to, void *y, size_t n) {
  if (from == LOOMRT_I64 && to == LOOMRT_I64) {
    std::memcpy(y, x, n * 8);
    return LOOMRT_OK;
  }
  if (from == LOOMRT_I64 || to == LOOMRT_I64) {
    withType(from == LOOMRT_I64 ? to : from, [&](auto tag) {
      using T = decltype(tag);
      if (from == LOOMRT_I64) {
        const int64_t *in = static_cast<const int64_t *>(x);
        T *o = static_cast<T *>(y);
#pragma omp parallel for schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; ++i)
          o[i] = store<T>(float(in[i]));
      } else {
        const T *in = static_cast<const T *>(x);
        int64_t *o = static_cast<int64_t *>(y);
#pragma omp parallel for schedule(static) if (n > 65536)
        for (size_t i = 0; i < n; ++i)
          o[i] = floatToInt64(load(in[i]));
      }
    });
    return LOOMRT_OK;
  }
  withType(from, [&](auto fromTag) {
    withType(to, [&](auto toTag) {
      using F = decltype(fromTag);
      using T = decltype(toTag);
      const F *in = static_cast<const F *>(x);
      T *o = static_cast<T *>(y);
#pragma omp parallel for schedule(static) if (n > 65536)
      for (size_t i = 0; i < n; ++i)
        o[i] = store<T>(load(in[i]));
    });
  });
  return LOOMRT_OK;
}

loomrt_status fillK(void *, void *, loomrt_dtype dt, void *x, float value,
                    size_t n) {
  if (dt == LOOMRT_I64) {
    std::fill_n(static_cast<int64_t *>(x), n, floatToInt64(value));
    return LOOMRT_OK;
  }
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    std::fill_n(static_cast<T *>(x), n, store<T>(value));
  });
  return LOOMRT_OK;
}

loomrt_status copyStrided(void *, void *, size_t elem, const void *src,
                          const int64_t *ss, void *dst, const int64_t *ds,
                          const int64_t *shp, int rank) {
  Shape shape{{}, rank};
  Strides sa{}, sb{}, none{};
  int64_t n = 1;
  for (int d = 0; d < rank; ++d) {
    n *= (shape.d[d] = shp[d]);
    sa.s[d] = ss[d];
    sb.s[d] = ds[d];
  }
  const char *S = static_cast<const char *>(src);
  char *D = static_cast<char *>(dst);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    int64_t os, od, unused;
    stridedOffsets(shape, i, sa, sb, none, os, od, unused);
    std::memcpy(D + od * int64_t(elem), S + os * int64_t(elem), elem);
  }
  return LOOMRT_OK;
}

loomrt_status rotaryK(void *, void *, loomrt_dtype dt, const void *x, const void *cos,
                      const void *sin, void *y, size_t rows, size_t period, size_t d,
                      bool backward) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const T *X = static_cast<const T *>(x), *C = static_cast<const T *>(cos),
            *S = static_cast<const T *>(sin);
    T *Y = static_cast<T *>(y);
    size_t h = d / 2;
#pragma omp parallel for schedule(static) if (rows * d > 65536)
    for (size_t r = 0; r < rows; ++r) {
      const T *xr = X + r * d, *cr = C + (r % period) * d, *sr = S + (r % period) * d;
      T *yr = Y + r * d;
      for (size_t j = 0; j < h; ++j) {
        float ya, yb;
        rotaryPair(load(xr[j]), load(xr[j + h]), load(cr[j]), load(cr[j + h]), load(sr[j]),
                   load(sr[j + h]), backward, ya, yb);
        yr[j] = store<T>(ya);
        yr[j + h] = store<T>(yb);
      }
    }
  });
  return LOOMRT_OK;
}

loomrt_status lerpK(void *, void *, loomrt_dtype dt, const void *a, const void *b, void *y,
                    size_t n, float w) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const T *A = static_cast<const T *>(a), *B = static_cast<const T *>(b);
    T *Y = static_cast<T *>(y);
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; ++i)
      Y[i] = store<T>(lerpOp(load(A[i]), load(B[i]), w));
  });
  return LOOMRT_OK;
}

/// One sequential scan per (outer, inner) column, columns in parallel.
loomrt_status cumsumK(void *, void *, loomrt_dtype dt, const void *x, void *y,
                      int64_t outer, int64_t len, int64_t inner, int exclusive,
                      int reverse) {
  auto scan = [&](auto tag, auto zero) {
    using T = decltype(tag);
    using A = decltype(zero); // the accumulator: int64_t or float
    const T *in = static_cast<const T *>(x);
    T *out = static_cast<T *>(y);
#pragma omp parallel for schedule(static) if (outer * len * inner > 65536)
    for (int64_t c = 0; c < outer * inner; ++c) {
      int64_t base = (c / inner) * len * inner + c % inner;
      A acc = zero;
      for (int64_t k = 0; k < len; ++k) {
        int64_t at = base + (reverse ? len - 1 - k : k) * inner;
        A v;
        if constexpr (std::is_same_v<A, int64_t>)
          v = in[at];
        else
          v = load(in[at]);
        A next;
        if constexpr (std::is_same_v<A, int64_t>)
          next = binaryOpInt(LOOMRT_ADD, acc, v);
        else
          next = acc + v;
        A put = exclusive ? acc : next;
        if constexpr (std::is_same_v<A, int64_t>)
          out[at] = put;
        else
          out[at] = store<T>(put);
        acc = next;
      }
    }
  };
  if (dt == LOOMRT_I64)
    scan(int64_t{}, int64_t{0});
  else
    withType(dt, [&](auto tag) { scan(tag, 0.0f); });
  return LOOMRT_OK;
}

loomrt_status reduceK(void *, void *, loomrt_reduce_op op, loomrt_dtype dt,
                      const void *x, void *y, int64_t outer, int64_t len,
                      int64_t inner) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const T *X = static_cast<const T *>(x);
    T *Y = static_cast<T *>(y);
#pragma omp parallel for collapse(2) schedule(static) if (outer * inner > 4096)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        const T *p = X + o * len * inner + i;
        double acc = load(p[0]);
        for (int64_t r = 1; r < len; ++r) {
          double v = load(p[r * inner]);
          if (op == LOOMRT_REDUCE_MAX)
            acc = std::max(acc, v);
          else if (op == LOOMRT_REDUCE_MIN)
            acc = std::min(acc, v);
          else
            acc += v;
        }
        if (op == LOOMRT_REDUCE_MEAN)
          acc /= double(len);
        Y[o * inner + i] = store<T>(float(acc));
      }
  });
  return LOOMRT_OK;
}

/// A bf16 operand widened to a temporary fp32 copy for OpenBLAS.
const float *asF32(loomrt_dtype dt, const void *p, size_t n,
                   std::vector<float> &tmp) {
  if (dt == LOOMRT_F32)
    return static_cast<const float *>(p);
  tmp.resize(n);
  const uint16_t *h = static_cast<const uint16_t *>(p);
  for (size_t i = 0; i < n; ++i)
    tmp[i] = bf16ToFloat(h[i]);
  return tmp.data();
}

/// Row-major C = alpha op(A) op(B) + beta C.
void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
           const float *A, const float *B, float beta, float *C) {
#ifdef LOOMRT_HAVE_OPENBLAS
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
              tb ? CblasTrans : CblasNoTrans, int(M), int(N), int(K), alpha, A,
              int(ta ? M : K), B, int(tb ? K : N), beta, C, int(N));
#else
  // The fallback: correct, parallel over rows, not tuned.
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < M; ++i) {
    std::vector<float> acc(N, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      float a = ta ? A[k * M + i] : A[i * K + k];
      for (int64_t j = 0; j < N; ++j)
        acc[j] += a * (tb ? B[j * K + k] : B[k * N + j]);
    }
    for (int64_t j = 0; j < N; ++j)
      C[i * N + j] = alpha * acc[j] + (beta != 0.0f ? beta * C[i * N + j] : 0.0f);
  }
#endif
}

loomrt_status matmulK(void *, void *, const loomrt_gemm *g, const void *a,
                      const void *b, void *c) {
  const int64_t M = g->m, N = g->n, K = g->k;
  // Extent of each operand over all batches (strides may be 0: broadcast).
  size_t extA = size_t(g->stride_a * (g->batch - 1) + M * K);
  size_t extB = size_t(g->stride_b * (g->batch - 1) + K * N);
  std::vector<float> ta, tb, tc;
  const float *A = asF32(g->in, a, extA, ta);
  const float *B = asF32(g->in, b, extB, tb);
  float *C = static_cast<float *>(c);
  size_t extC = size_t(g->stride_c * (g->batch - 1) + M * N);
  if (g->out == LOOMRT_BF16) {
    tc.resize(extC);
    const uint16_t *h = static_cast<const uint16_t *>(c);
    if (g->beta != 0.0f)
      for (size_t i = 0; i < extC; ++i)
        tc[i] = bf16ToFloat(h[i]);
    C = tc.data();
  }
  for (int64_t bi = 0; bi < g->batch; ++bi)
    sgemm(g->trans_a, g->trans_b, M, N, K, g->alpha, A + bi * g->stride_a,
          B + bi * g->stride_b, g->beta, C + bi * g->stride_c);
  if (g->out == LOOMRT_BF16) {
    uint16_t *h = static_cast<uint16_t *>(c);
    for (int64_t bi = 0; bi < g->batch; ++bi)
      for (int64_t i = 0; i < M * N; ++i)
        h[bi * g->stride_c + i] = floatToBf16(tc[bi * g->stride_c + i]);
  }
  return LOOMRT_OK;
}

/// Row statistics in double: mean and 1/sqrt(var + eps) (layer norm) or
/// 1/sqrt(mean(x^2) + eps) (RMS norm, mean = 0).
template <typename T>
void rowStats(const T *x, int64_t d, float eps, bool rms, double &mean,
              double &rstd) {
  mean = 0;
  if (!rms) {
    for (int64_t j = 0; j < d; ++j)
      mean += load(x[j]);
    mean /= double(d);
  }
  double var = 0;
  for (int64_t j = 0; j < d; ++j) {
    double c = load(x[j]) - mean;
    var += c * c;
  }
  rstd = 1.0 / std::sqrt(var / double(d) + eps);
}

loomrt_status layerNorm(void *, void *, loomrt_dtype dt, const void *x,
                        const void *w, const void *b, void *y, int64_t rows,
                        int64_t d, float eps, bool rms) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const T *X = static_cast<const T *>(x), *W = static_cast<const T *>(w),
            *Bi = static_cast<const T *>(b);
    T *Y = static_cast<T *>(y);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = X + r * d;
      double mean, rstd;
      rowStats(xr, d, eps, rms, mean, rstd);
      for (int64_t j = 0; j < d; ++j) {
        float v = float((load(xr[j]) - mean) * rstd) * load(W[j]);
        Y[r * d + j] = store<T>(Bi ? v + load(Bi[j]) : v);
      }
    }
  });
  return LOOMRT_OK;
}

loomrt_status layerNormGrad(void *, void *, loomrt_dtype dt, const void *dy,
                            const void *x, const void *w, void *dx, void *dw,
                            void *db, int64_t rows, int64_t d, float eps,
                            bool rms) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const T *DY = static_cast<const T *>(dy), *X = static_cast<const T *>(x),
            *W = static_cast<const T *>(w);
    T *DX = static_cast<T *>(dx);
    std::vector<double> gw(d, 0.0), gb(d, 0.0);
#pragma omp parallel
    {
      std::vector<double> lw(d, 0.0), lb(d, 0.0);
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) {
        const T *xr = X + r * d, *gr = DY + r * d;
        double mean, rstd;
        rowStats(xr, d, eps, rms, mean, rstd);
        // xhat = (x - mean) rstd; g = dy * w;
        // dx = rstd (g - mean(g) - xhat mean(g xhat))   (layer norm)
        // dx = rstd (g - xhat mean(g xhat))             (RMS norm)
        double sg = 0, sgx = 0;
        for (int64_t j = 0; j < d; ++j) {
          double xh = (load(xr[j]) - mean) * rstd;
          double g = double(load(gr[j])) * load(W[j]);
          sg += g;
          sgx += g * xh;
          lw[j] += double(load(gr[j])) * xh;
          lb[j] += load(gr[j]);
        }
        double mg = rms ? 0.0 : sg / double(d), mgx = sgx / double(d);
        for (int64_t j = 0; j < d; ++j) {
          double xh = (load(xr[j]) - mean) * rstd;
          double g = double(load(gr[j])) * load(W[j]);
          DX[r * d + j] = store<T>(float(rstd * (g - mg - xh * mgx)));
        }
      }
#pragma omp critical
      for (int64_t j = 0; j < d; ++j) {
        gw[j] += lw[j];
        gb[j] += lb[j];
      }
    }
    T *DW = static_cast<T *>(dw), *DB = static_cast<T *>(db);
    for (int64_t j = 0; j < d; ++j) {
      DW[j] = store<T>(float(gw[j]));
      if (DB)
        DB[j] = store<T>(float(gb[j]));
    }
  });
  return LOOMRT_OK;
}

/// Columns row r may see: all, or with a causal block of t rows over d
/// columns, those <= (r mod t) + (d - t).
int64_t visible(int64_t r, int64_t d, int64_t causalBlock) {
  return causalBlock ? (r % causalBlock) + (d - causalBlock) + 1 : d;
}

loomrt_status softmaxK(void *, void *, loomrt_dtype dt, const void *x, void *y,
                       int64_t rows, int64_t d, float scale, int log,
                       int64_t causalBlock) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const T *X = static_cast<const T *>(x);
    T *Y = static_cast<T *>(y);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T *xr = X + r * d;
      T *yr = Y + r * d;
      int64_t vis = visible(r, d, causalBlock);
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < vis; ++j)
        mx = std::max(mx, scale * load(xr[j]));
      double sum = 0;
      for (int64_t j = 0; j < vis; ++j)
        sum += std::exp(double(scale * load(xr[j]) - mx));
      double lse = std::log(sum);
      for (int64_t j = 0; j < d; ++j) {
        float z = scale * load(xr[j]) - mx;
        float v = j < vis ? (log ? float(z - lse) : float(std::exp(z - lse)))
                          : (log ? -std::numeric_limits<float>::infinity()
                                 : 0.0f);
        yr[j] = store<T>(v);
      }
    }
  });
  return LOOMRT_OK;
}

loomrt_status softmaxGrad(void *, void *, loomrt_dtype dt, const void *dy,
                          const void *y, void *dx, int64_t rows, int64_t d,
                          float scale, int log) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const T *DY = static_cast<const T *>(dy), *Yv = static_cast<const T *>(y);
    T *DX = static_cast<T *>(dx);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T *g = DY + r * d, *yr = Yv + r * d;
      double acc = 0;
      for (int64_t j = 0; j < d; ++j)
        acc += log ? double(load(g[j])) : double(load(g[j])) * load(yr[j]);
      for (int64_t j = 0; j < d; ++j) {
        float yv = load(yr[j]), gv = load(g[j]);
        float v = log ? gv - std::exp(yv) * float(acc)
                      : yv * (gv - float(acc));
        DX[r * d + j] = store<T>(scale * v);
      }
    }
  });
  return LOOMRT_OK;
}

/// Row gather of `rowBytes`-byte rows, out[i] = table[idx[i]], after
/// checking every index against [0, limit) (an error "WHAT: NOUN i at k is
/// outside [0, limit)" for the first bad one): loomrt_embedding's forward
/// and loomrt_gather_rows.
loomrt_status gatherRows(const char *what, const char *noun, const void *table,
                         const int64_t *idx, int64_t n, int64_t limit, size_t rowBytes,
                         void *out) {
  for (int64_t i = 0; i < n; ++i)
    if (idx[i] < 0 || idx[i] >= limit)
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  std::string(what) + ": " + noun + " " + std::to_string(idx[i]) + " at " +
                      std::to_string(i) + " is outside [0, " + std::to_string(limit) + ")");
  const char *T = static_cast<const char *>(table);
  char *O = static_cast<char *>(out);
#pragma omp parallel for schedule(static) if (size_t(n) * rowBytes > 262144)
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(O + size_t(i) * rowBytes, T + size_t(idx[i]) * rowBytes, rowBytes);
  return LOOMRT_OK;
}

loomrt_status embeddingK(void *, void *, loomrt_dtype dt, const void *table,
                         const int64_t *idx, void *out, int64_t n, int64_t d,
                         int64_t vocab) {
  return gatherRows("embedding", "index", table, idx, n, vocab, size_t(d) * (dt == LOOMRT_BF16 ? 2 : 4),
                    out);
}

loomrt_status embeddingGrad(void *, void *, loomrt_dtype dt, const void *dy,
                            const int64_t *idx, float *dtable, int64_t n,
                            int64_t d, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i)
    if (idx[i] < 0 || idx[i] >= vocab)
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  "embedding_grad: index " + std::to_string(idx[i]) +
                      " is outside [0, " + std::to_string(vocab) + ")");
  std::fill_n(dtable, vocab * d, 0.0f);
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const T *G = static_cast<const T *>(dy);
    // Serial over indices (repeated tokens accumulate into one row), parallel
    // over the features of a row.
    for (int64_t i = 0; i < n; ++i) {
      float *row = dtable + idx[i] * d;
      const T *g = G + i * d;
#pragma omp parallel for schedule(static) if (d > 65536)
      for (int64_t j = 0; j < d; ++j)
        row[j] += load(g[j]);
    }
  });
  return LOOMRT_OK;
}

/// Max and sum of exp(x - max) of one row: the pieces of a stable
/// log-sum-exp, shared by the loss and its gradient.
template <typename T>
void rowMaxSumExp(const T *row, int64_t n, float &mx, double &sum) {
  mx = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j)
    mx = std::max(mx, load(row[j]));
  sum = 0;
  for (int64_t j = 0; j < n; ++j)
    sum += std::exp(double(load(row[j]) - mx));
}

/// The first label outside [0, classes), as an error naming it.
loomrt_status checkLabels(const char *fn, const int64_t *labels, int64_t rows,
                          int64_t classes) {
  for (int64_t r = 0; r < rows; ++r)
    if (labels[r] < 0 || labels[r] >= classes)
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  std::string(fn) + ": label " + std::to_string(labels[r]) +
                      " of row " + std::to_string(r) + " is outside [0, " +
                      std::to_string(classes) + ")");
  return LOOMRT_OK;
}

loomrt_status crossEntropy(void *, void *, loomrt_dtype dt, const void *logits,
                           const int64_t *labels, float *loss, int64_t rows,
                           int64_t classes) {
  if (loomrt_status s = checkLabels("cross_entropy", labels, rows, classes))
    return s;
  double total = 0;
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const T *L = static_cast<const T *>(logits);
#pragma omp parallel for schedule(static) reduction(+ : total)
    for (int64_t r = 0; r < rows; ++r) {
      const T *lr = L + r * classes;
      float mx;
      double sum;
      rowMaxSumExp(lr, classes, mx, sum);
      total += std::log(sum) + mx - load(lr[labels[r]]);
    }
  });
  *loss = float(total / double(rows));
  return LOOMRT_OK;
}

loomrt_status crossEntropyGrad(void *, void *, loomrt_dtype dt,
                               const void *logits, const int64_t *labels,
                               const float *dloss, void *dlogits,
                               int64_t rows, int64_t classes) {
  if (loomrt_status s =
          checkLabels("cross_entropy_grad", labels, rows, classes))
    return s;
  const float scale = *dloss / float(rows);
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const T *L = static_cast<const T *>(logits);
    T *D = static_cast<T *>(dlogits);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T *lr = L + r * classes;
      float mx;
      double sum;
      rowMaxSumExp(lr, classes, mx, sum);
      for (int64_t j = 0; j < classes; ++j) {
        float p = float(std::exp(double(load(lr[j]) - mx)) / sum);
        D[r * classes + j] = store<T>((p - (j == labels[r])) * scale);
      }
    }
  });
  return LOOMRT_OK;
}

loomrt_status spmmK(void *, void *, loomrt_dtype dt, const int64_t *rowPtr,
                    const int64_t *colIdx, const void *vals, const void *x,
                    void *y, int64_t rows, int64_t f) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const T *V = static_cast<const T *>(vals), *X = static_cast<const T *>(x);
    T *Y = static_cast<T *>(y);
#pragma omp parallel for schedule(dynamic, 64)
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> acc(f, 0.0f);
      for (int64_t j = rowPtr[r]; j < rowPtr[r + 1]; ++j) {
        float v = load(V[j]);
        const T *xr = X + colIdx[j] * f;
        for (int64_t c = 0; c < f; ++c)
          acc[c] += v * load(xr[c]);
      }
      for (int64_t c = 0; c < f; ++c)
        Y[r * f + c] = store<T>(acc[c]);
    }
  });
  return LOOMRT_OK;
}

loomrt_status sgdK(void *, void *, float lr, float mu, int nesterov, float *p,
                   const float *g, float *buf, size_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i)
    sgdElement(lr, mu, nesterov, p[i], g[i], buf[i]);
  return LOOMRT_OK;
}

loomrt_status dropoutK(void *, void *, loomrt_dtype dt, const void *x, void *y, size_t n,
                       float ratio, uint64_t key, uint64_t offset) {
  const float scale = 1.0f / (1.0f - ratio);
  const uint64_t threshold = dropoutThreshold(ratio);
  return elementwise(dt, x, y, n, [=](float v, size_t i) {
    return dropoutKeep(key, offset + i, threshold) ? v * scale : 0.0f;
  });
}

// 1-bit compression (loomrt.h). The norm is summed in double: the CUDA
// kernel sums fp32 partials in another order, and both stay within
// rounding of the float64 reference (runtime/tests/onebit_test.cpp).
loomrt_status onebitCompressK(void *, void *, const float *x, float *error, uint8_t *packed,
                              float *scale, size_t n) {
  double sq = 0;
#pragma omp parallel for reduction(+ : sq) schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) {
    double c = double(x[i] + error[i]);
    sq += c * c;
  }
  const float s = float(std::sqrt(sq / double(n)));
  *scale = s;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t j = 0; j < n / 8; ++j)
    packed[j] = onebitPackByte(x, error, j, s);
  return LOOMRT_OK;
}

loomrt_status onebitDecompressK(void *, void *, const uint8_t *packed, const float *scales,
                                float *out, size_t chunks, size_t n) {
#pragma omp parallel for schedule(static) if (chunks * n > 65536)
  for (size_t i = 0; i < chunks * n; ++i)
    out[i] = scales[i / n] * onebitSign(packed, i);
  return LOOMRT_OK;
}

loomrt_status onebitAverageK(void *, void *, const uint8_t *packed, const float *scales,
                             float *out, size_t world, size_t n) {
  const float inv = 1.0f / float(world);
#pragma omp parallel for schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) {
    float acc = 0;
    for (size_t w = 0; w < world; ++w)
      acc += scales[w] * onebitSign(packed + w * (n / 8), i);
    out[i] = acc * inv;
  }
  return LOOMRT_OK;
}

// Block-scaled codecs: one block a task; the codes from kernel_math.h,
// shared with the CUDA kernels.
loomrt_status blockCompressK(void *, void *, loomrt_block_codec codec, const float *x,
                             void *packed, size_t n, size_t block) {
  auto *scales = static_cast<float *>(packed);
  uint8_t *codes = static_cast<uint8_t *>(packed) + 4 * (n / block);
  const float top = blockCodecMax(codec);
  const bool nibbles = blockCodecNibbles(codec);
  const int64_t blocks = int64_t(n / block);
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const float *xb = x + size_t(b) * block;
    float amax = 0.0f;
    for (size_t i = 0; i < block; ++i)
      amax = std::max(amax, std::fabs(xb[i]));
    float scale = amax > 0.0f ? amax / top : 1.0f;
    scales[b] = scale;
    size_t base = size_t(b) * block;
    if (!nibbles) {
      for (size_t i = 0; i < block; ++i)
        codes[base + i] = blockCode(codec, xb[i] / scale);
    } else {
      for (size_t i = 0; i < block; i += 2)
        codes[(base + i) / 2] = uint8_t(blockCode(codec, xb[i] / scale) |
                                        blockCode(codec, xb[i + 1] / scale) << 4);
    }
  }
  return LOOMRT_OK;
}
loomrt_status blockDecompressK(void *, void *, loomrt_block_codec codec, const void *packed,
                               float *out, size_t n, size_t block) {
  const auto *scales = static_cast<const float *>(packed);
  const uint8_t *codes = static_cast<const uint8_t *>(packed) + 4 * (n / block);
  const int64_t total = int64_t(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < total; ++i)
    out[i] = blockElement(codec, codes, size_t(i)) * scales[size_t(i) / block];
  return LOOMRT_OK;
}

// The order of the reads does not matter on the host (flags ignored).
loomrt_status gatherRowsK(void *, void *, const void *table, size_t numRows, size_t rowBytes,
                          const int64_t *rows, size_t n, void *out, int) {
  return gatherRows("gather_rows", "row index", table, rows, int64_t(n), int64_t(numRows),
                    rowBytes, out);
}

// A fused region's program, interpreted element by element on every core.
loomrt_status fusedK(void *, void *, const FusedProgram *p, const loomrt_fused_program *,
                     const FusedBuffers *b, size_t n) {
#pragma omp parallel for schedule(static) if (n > 16384)
  for (size_t i = 0; i < n; ++i)
    fusedElement(*p, *b, i);
  return LOOMRT_OK;
}

//--- Mixture of experts ---------------------------------------------------//

loomrt_status topKK(void *, void *, loomrt_dtype dt, const void *x, void *values,
                    int64_t *indices, int64_t rows, int64_t n, int64_t k) {
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const T *X = static_cast<const T *>(x);
    T *V = static_cast<T *>(values);
#pragma omp parallel for schedule(static) if (rows * n > 65536)
    for (int64_t r = 0; r < rows; ++r) {
      // Selection by k passes over the row: k is small (the experts a token
      // goes to). A NaN sorts below every number.
      const T *xr = X + r * n;
      std::vector<char> taken(size_t(n), 0);
      for (int64_t j = 0; j < k; ++j) {
        int64_t best = -1;
        float bv = 0;
        for (int64_t c = 0; c < n; ++c) {
          float v = load(xr[c]);
          if (taken[size_t(c)])
            continue;
          if (best < 0 || v > bv || (std::isnan(bv) && !std::isnan(v))) {
            best = c;
            bv = v;
          }
        }
        taken[size_t(best)] = 1;
        V[r * k + j] = xr[best];
        indices[r * k + j] = best;
      }
    }
  });
  return LOOMRT_OK;
}

/// The first index outside [lo, hi) of table[0, n) as an error.
loomrt_status checkIndices(const char *what, const int64_t *table, int64_t n, int64_t lo,
                           int64_t hi) {
  for (int64_t i = 0; i < n; ++i)
    if (table[i] < lo || table[i] >= hi)
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  std::string(what) + ": entry " + std::to_string(table[i]) + " at " +
                      std::to_string(i) + " is outside [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + ")");
  return LOOMRT_OK;
}

loomrt_status topKGradK(void *, void *, loomrt_dtype dt, const void *dv, const int64_t *indices,
                        void *dx, int64_t rows, int64_t n, int64_t k) {
  if (loomrt_status st = checkIndices("top_k_grad", indices, rows * k, 0, n))
    return st;
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const T *G = static_cast<const T *>(dv);
    T *DX = static_cast<T *>(dx);
    std::fill_n(DX, rows * n, store<T>(0.0f));
    for (int64_t i = 0; i < rows * k; ++i)
      DX[(i / k) * n + indices[i]] = G[i];
  });
  return LOOMRT_OK;
}

loomrt_status moeSlotsK(void *, void *, const int64_t *experts, int64_t *slots, float *counts,
                        int64_t n, int64_t k, int64_t numExperts, int64_t capacity) {
  if (loomrt_status st = checkIndices("moe_slots", experts, n * k, 0, numExperts))
    return st;
  // Choices in the order (j, t): every first choice before any second.
  std::vector<int64_t> used(size_t(numExperts), 0);
  for (int64_t j = 0; j < k; ++j)
    for (int64_t t = 0; t < n; ++t) {
      int64_t e = experts[t * k + j], p = used[size_t(e)]++;
      slots[t * k + j] = p < capacity ? e * capacity + p : -1;
    }
  for (int64_t e = 0; e < numExperts; ++e)
    counts[e] = float(used[size_t(e)]);
  return LOOMRT_OK;
}

loomrt_status moeMoveK(void *, void *, loomrt_dtype dt, bool combine, const void *x,
                       const int64_t *slots, const void *weights, void *out, int64_t n, int64_t k,
                       int64_t d, int64_t rows) {
  if (loomrt_status st = checkIndices(combine ? "moe_combine" : "moe_dispatch", slots, n * k, -1,
                                      rows))
    return st;
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const T *X = static_cast<const T *>(x), *W = static_cast<const T *>(weights);
    T *O = static_cast<T *>(out);
    if (!combine) {
      std::fill_n(O, rows * d, store<T>(0.0f));
#pragma omp parallel for schedule(static) if (n * k * d > 65536)
      for (int64_t i = 0; i < n * k; ++i) {
        int64_t row = slots[i];
        if (row < 0)
          continue;
        float w = W ? load(W[i]) : 1.0f;
        const T *src = X + (i / k) * d;
        T *dst = O + row * d;
        for (int64_t c = 0; c < d; ++c)
          dst[c] = W ? store<T>(load(src[c]) * w) : src[c];
      }
      return;
    }
#pragma omp parallel for schedule(static) if (n * k * d > 65536)
    for (int64_t t = 0; t < n; ++t) {
      std::vector<float> acc(size_t(d), 0.0f);
      for (int64_t j = 0; j < k; ++j) {
        int64_t row = slots[t * k + j];
        if (row < 0)
          continue;
        float w = W ? load(W[t * k + j]) : 1.0f;
        for (int64_t c = 0; c < d; ++c)
          acc[size_t(c)] += w * load(X[row * d + c]);
      }
      for (int64_t c = 0; c < d; ++c)
        O[t * d + c] = store<T>(acc[size_t(c)]);
    }
  });
  return LOOMRT_OK;
}

loomrt_status moeSlotDotK(void *, void *, loomrt_dtype dt, const void *a, const void *b,
                          const int64_t *slots, void *out, int64_t n, int64_t k, int64_t d,
                          int64_t rows) {
  if (loomrt_status st = checkIndices("moe_slot_dot", slots, n * k, -1, rows))
    return st;
  withType(dt, [&](auto tag) {
    using T = decltype(tag);
    const T *A = static_cast<const T *>(a), *B = static_cast<const T *>(b);
    T *O = static_cast<T *>(out);
#pragma omp parallel for schedule(static) if (n * k * d > 65536)
    for (int64_t i = 0; i < n * k; ++i) {
      int64_t row = slots[i];
      double acc = 0;
      if (row >= 0)
        for (int64_t c = 0; c < d; ++c)
          acc += double(load(A[(i / k) * d + c])) * double(load(B[row * d + c]));
      O[i] = store<T>(float(acc));
    }
  });
  return LOOMRT_OK;
}

/// The CPU's kernels by field name; attention (common/attention.cpp
/// composes it from GEMMs and softmax), matmul_bias (the matmul, then
/// the add) and the activation epilogues (then the unary call) are left
/// empty: the runtime composes them.
KernelOps makeCpuKernels() {
  KernelOps k{};
  k.unary = unary;
  k.unary_grad = unaryGradK;
  k.binary = binary;
  k.cast = castK;
  k.lerp = lerpK;
  k.rotary = rotaryK;
  k.cumsum = cumsumK;
  k.fill = fillK;
  k.copy_strided = copyStrided;
  k.reduce = reduceK;
  k.matmul = matmulK;
  k.layer_norm = layerNorm;
  k.layer_norm_grad = layerNormGrad;
  k.softmax = softmaxK;
  k.softmax_grad = softmaxGrad;
  k.embedding = embeddingK;
  k.embedding_grad = embeddingGrad;
  k.cross_entropy = crossEntropy;
  k.cross_entropy_grad = crossEntropyGrad;
  k.spmm = spmmK;
  k.top_k = topKK;
  k.top_k_grad = topKGradK;
  k.moe_slots = moeSlotsK;
  k.moe_move = moeMoveK;
  k.moe_slot_dot = moeSlotDotK;
  k.sgd = sgdK;
  k.onebit_compress = onebitCompressK;
  k.onebit_decompress = onebitDecompressK;
  k.onebit_average = onebitAverageK;
  k.block_compress = blockCompressK;
  k.block_decompress = blockDecompressK;
  k.dropout = dropoutK;
  k.gather_rows = gatherRowsK;
  k.fused = fusedK;
  return k;
}

} // namespace

const KernelOps *cpuKernels() {
  static const KernelOps kCpuKernels = makeCpuKernels();
  return &kCpuKernels;
}

} // namespace loomrt
