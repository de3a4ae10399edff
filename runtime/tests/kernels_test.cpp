// kernels_test.cpp: every compute kernel on every backend against a float64
// reference written here (not shared with the kernels), for fp32 and bf16
// storage; on the GPU each kernel is also compared with the CPU kernel.
//
// Error measure: ||out - ref||_2 / ||ref||_2 over the whole output.
// Bounds: fp32 storage 1e-5 (exp/erf/tanh in fp32 land near 1e-7; row
// reductions in fp32 on the GPU near 1e-6); bf16 storage 1e-2 (one bf16
// rounding of the output is 2^-9 = 2e-3 relative; inputs are rounded to
// bf16 before the reference sees them). GEMM in fp32 is held to 1e-5 too:
// cuBLAS must not use TF32 for CUBLAS_COMPUTE_32F.
#include "backends.h"
#include "common/adam_math.h"
#include "common/backend.h"

#include <tuple>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

namespace {

using D = std::vector<double>;

/// max and sum of exp(scale * x - max) over a row's n values, in float64:
/// the references of the softmax and cross-entropy tests.
struct RowExp {
  double mx = -INFINITY, sum = 0;
};
RowExp rowExp(const float *x, int64_t n, double scale = 1.0) {
  RowExp e;
  for (int64_t j = 0; j < n; ++j)
    e.mx = std::max(e.mx, scale * x[j]);
  for (int64_t j = 0; j < n; ++j)
    e.sum += std::exp(scale * x[j] - e.mx);
  return e;
}

double relErr(const std::vector<float> &out, const D &ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::isnan(out[i]) != std::isnan(ref[i]))
      return INFINITY;
    if (std::isinf(ref[i]) && out[i] == ref[i])
      continue;
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

/// loomrt_binary's ops in double, or in int64 wrapping modulo 2^64 as the
/// runtime specifies (computed on uint64).
template <typename T> T binaryRef(int op, T x, T y) {
  auto wrap = [](uint64_t v) { return T(int64_t(v)); };
  constexpr bool I = std::is_integral_v<T>;
  switch (op) {
  case LOOMRT_ADD: if constexpr (I) return wrap(uint64_t(x) + uint64_t(y)); else return x + y;
  case LOOMRT_SUB: if constexpr (I) return wrap(uint64_t(x) - uint64_t(y)); else return x - y;
  case LOOMRT_MUL: if constexpr (I) return wrap(uint64_t(x) * uint64_t(y)); else return x * y;
  case LOOMRT_DIV: return x / y;
  case LOOMRT_POW: return T(std::pow(double(x), double(y)));
  case LOOMRT_MAX: return std::max(x, y);
  case LOOMRT_MIN: return std::min(x, y);
  case LOOMRT_EQ: return x == y;
  case LOOMRT_NE: return x != y;
  case LOOMRT_LT: return x < y;
  default: return x <= y;
  }
}

/// Device buffers of one test on one backend, freed at the end.
class Harness {
public:
  Harness(loomrt_device dev, loomrt_stream s, loomrt_dtype dt)
      : dev(dev), s(s), dt(dt) {}
  ~Harness() {
    for (void *p : owned)
      loomrt_free(dev, LOOMRT_MEM_DEVICE, p);
  }
  size_t esize() const { return dt == LOOMRT_BF16 ? 2 : 4; }
  /// Uploads `x` in the test's dtype; returns the device pointer.
  void *put(const std::vector<float> &x) {
    std::vector<uint8_t> bytes(x.size() * esize());
    for (size_t i = 0; i < x.size(); ++i) {
      if (dt == LOOMRT_BF16) {
        uint16_t h = loomrt::floatToBf16(x[i]);
        std::memcpy(&bytes[i * 2], &h, 2);
      } else {
        std::memcpy(&bytes[i * 4], &x[i], 4);
      }
    }
    return putRaw(bytes.data(), bytes.size());
  }
  void *putRaw(const void *data, size_t bytes) {
    void *p = alloc(bytes);
    EXPECT_EQ(LOOMRT_OK, loomrt_memcpy_async(s, p, data, bytes));
    return p;
  }
  template <typename T> T *putT(const std::vector<T> &x) {
    return static_cast<T *>(putRaw(x.data(), x.size() * sizeof(T)));
  }
  void *alloc(size_t bytes) {
    void *p = nullptr;
    EXPECT_EQ(LOOMRT_OK,
              loomrt_alloc(dev, LOOMRT_MEM_DEVICE, bytes ? bytes : 4, &p));
    owned.push_back(p);
    // Poison, so unwritten outputs are caught.
    std::vector<uint8_t> nan(bytes ? bytes : 4, 0xff);
    EXPECT_EQ(LOOMRT_OK, loomrt_memcpy_async(s, p, nan.data(), nan.size()));
    return p;
  }
  void *out(size_t n) { return alloc(n * esize()); }
  std::vector<float> get(const void *p, size_t n, loomrt_dtype as) {
    size_t es = as == LOOMRT_BF16 ? 2 : 4;
    std::vector<uint8_t> bytes(n * es);
    EXPECT_EQ(LOOMRT_OK, loomrt_memcpy_async(s, bytes.data(), p, bytes.size()));
    EXPECT_EQ(LOOMRT_OK, loomrt_stream_synchronize(s));
    std::vector<float> r(n);
    for (size_t i = 0; i < n; ++i) {
      if (as == LOOMRT_BF16) {
        uint16_t h;
        std::memcpy(&h, &bytes[i * 2], 2);
        r[i] = loomrt::bf16ToFloat(h);
      } else {
        std::memcpy(&r[i], &bytes[i * 4], 4);
      }
    }
    return r;
  }
  std::vector<float> get(const void *p, size_t n) { return get(p, n, dt); }
  /// The value the kernel saw: x rounded to the storage type.
  std::vector<float> seen(std::vector<float> x) const {
    if (dt == LOOMRT_BF16)
      for (auto &v : x)
        v = loomrt::bf16ToFloat(loomrt::floatToBf16(v));
    return x;
  }

  loomrt_device dev;
  loomrt_stream s;
  loomrt_dtype dt;

private:
  std::vector<void *> owned;
};

struct Param {
  loomrt_backend backend;
  loomrt_dtype dt;
};

class Kernels : public ::testing::TestWithParam<Param> {
protected:
  void SetUp() override {
    if (!loomrt_backend_available(GetParam().backend))
      GTEST_SKIP() << loomrt_backend_name(GetParam().backend)
                   << " backend not built or no device present";
    LOOMRT_ASSERT_OK(loomrt_device_open(GetParam().backend, 0, &dev));
    LOOMRT_ASSERT_OK(loomrt_stream_create(dev, &s));
    LOOMRT_ASSERT_OK(loomrt_device_open(LOOMRT_BACKEND_CPU, 0, &cpu));
    LOOMRT_ASSERT_OK(loomrt_stream_create(cpu, &cs));
  }
  void TearDown() override {
    loomrt_stream_destroy(s);
    loomrt_device_close(dev);
    loomrt_stream_destroy(cs);
    loomrt_device_close(cpu);
  }
  loomrt_dtype dt() const { return GetParam().dt; }
  loomrt_stream s_() const { return s; }
  double tol() const { return dt() == LOOMRT_BF16 ? 1e-2 : 1e-5; }
  std::vector<float> randn(size_t n, float scale = 1.0f, float shift = 0.0f) {
    std::normal_distribution<float> N(0.f, 1.f);
    std::vector<float> x(n);
    for (auto &v : x)
      v = shift + scale * N(rng);
    return x;
  }

  /// Runs `body` on the backend under test and, for a GPU, on the CPU too;
  /// checks each output against the reference and the GPU against the CPU.
  /// `body` returns the outputs as floats and fills `ref`.
  using Body = std::function<std::vector<std::vector<float>>(Harness &)>;
  void check(const std::vector<D> &ref, Body body, double bound = -1) {
    if (bound < 0)
      bound = tol();
    Harness h(dev, s, dt());
    auto outs = body(h);
    ASSERT_EQ(outs.size(), ref.size());
    for (size_t k = 0; k < outs.size(); ++k)
      EXPECT_LT(relErr(outs[k], ref[k]), bound)
          << "output " << k << " against the float64 reference";
    if (GetParam().backend != LOOMRT_BACKEND_CPU) {
      Harness hc(cpu, cs, dt());
      auto cpuOuts = body(hc);
      for (size_t k = 0; k < outs.size(); ++k) {
        D c(cpuOuts[k].begin(), cpuOuts[k].end());
        EXPECT_LT(relErr(outs[k], c), bound) << "output " << k
                                             << " against the CPU kernel";
      }
    }
  }

  std::mt19937 rng{42};
  loomrt_device dev = nullptr, cpu = nullptr;
  loomrt_stream s = nullptr, cs = nullptr;
};

TEST_P(Kernels, Unary) {
  const size_t n = 1000;
  for (int op = 0; op < LOOMRT_UNARY_OP_COUNT; ++op) {
    bool positive = op == LOOMRT_LOG || op == LOOMRT_SQRT || op == LOOMRT_RSQRT;
    std::vector<float> x = randn(n, 1.5f, positive ? 3.0f : 0.0f);
    for (auto &v : x)
      if (positive)
        v = std::fabs(v) + 0.1f;
    Harness probe(dev, s, dt());
    std::vector<float> xs = probe.seen(x);
    D ref(n);
    for (size_t i = 0; i < n; ++i) {
      double v = xs[i];
      switch (op) {
      case LOOMRT_NEG: ref[i] = -v; break;
      case LOOMRT_EXP: ref[i] = std::exp(v); break;
      case LOOMRT_LOG: ref[i] = std::log(v); break;
      case LOOMRT_SQRT: ref[i] = std::sqrt(v); break;
      case LOOMRT_RSQRT: ref[i] = 1 / std::sqrt(v); break;
      case LOOMRT_TANH: ref[i] = std::tanh(v); break;
      case LOOMRT_ERF: ref[i] = std::erf(v); break;
      case LOOMRT_SIN: ref[i] = std::sin(v); break;
      case LOOMRT_COS: ref[i] = std::cos(v); break;
      case LOOMRT_SIGMOID: ref[i] = 1 / (1 + std::exp(-v)); break;
      case LOOMRT_RELU: ref[i] = v > 0 ? v : 0; break;
      case LOOMRT_SILU: ref[i] = v / (1 + std::exp(-v)); break;
      case LOOMRT_GELU: ref[i] = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); break;
      case LOOMRT_GELU_TANH:
        ref[i] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
        break;
      }
    }
    SCOPED_TRACE("op " + std::to_string(op));
    check({ref}, [&](Harness &h) {
      void *y = h.out(n);
      EXPECT_EQ(LOOMRT_OK, loomrt_unary(h.s, loomrt_unary_op(op), h.dt,
                                        h.put(x), y, n));
      return std::vector<std::vector<float>>{h.get(y, n)};
    });
  }
}

// A fused elementwise region (loomrt_fused_elementwise, loomc's loom-fuse):
// out0 = gelu_tanh(x) * y + z in the call's dtype, out1 = out0 * silu'(x) in
// f32, intermediates in fp32. On CUDA the region's NVRTC-compiled kernel
// runs; LOOMRT_FUSED=interpret gives the interpreter kernel.
TEST_P(Kernels, FusedRegionAgainstFloat64) {
  const size_t n = 3001;
  std::vector<float> x = randn(n, 1.5f), y = randn(n), z = randn(n);
  Harness probe(dev, s, dt());
  std::vector<float> xs = probe.seen(x), ys = probe.seen(y);
  D r0(n), r1(n);
  for (size_t i = 0; i < n; ++i) {
    double v = xs[i], sg = 1 / (1 + std::exp(-v));
    double g = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    r0[i] = g * ys[i] + z[i];
    r1[i] = r0[i] * sg * (1 + v * (1 - sg));
  }
  const loomrt_dtype in[3] = {dt(), dt(), LOOMRT_F32}, out[2] = {dt(), LOOMRT_F32};
  const loomrt_fused_inst prog[] = {
      {LOOMRT_FUSED_LOAD, 0, 0, 0},       {LOOMRT_FUSED_LOAD, 0, 1, 0},
      {LOOMRT_FUSED_LOAD, 0, 2, 0},       {LOOMRT_FUSED_UNARY, LOOMRT_GELU_TANH, 0, 0},
      {LOOMRT_FUSED_BINARY, LOOMRT_MUL, 3, 1}, {LOOMRT_FUSED_BINARY, LOOMRT_ADD, 4, 2},
      {LOOMRT_FUSED_UNARY_GRAD, LOOMRT_SILU, 5, 0}, {LOOMRT_FUSED_STORE, 0, 0, 5},
      {LOOMRT_FUSED_STORE, 0, 1, 6}};
  const loomrt_fused_program p = {"test_region", 3, 2, 9, in, out, prog};
  check({r0, r1}, [&](Harness &h) {
    const void *ins[3] = {h.put(x), h.put(y), h.putT(z)};
    void *o0 = h.out(n), *o1 = h.alloc(n * 4);
    void *outs[2] = {o0, o1};
    EXPECT_EQ(LOOMRT_OK, loomrt_fused_elementwise(h.s, &p, ins, outs, n)) << loomrt_last_error();
    return std::vector<std::vector<float>>{h.get(o0, n), h.get(o1, n, LOOMRT_F32)};
  });
}

TEST_P(Kernels, UnaryGrad) {
  const size_t n = 1000;
  const loomrt_unary_op ops[] = {LOOMRT_RELU, LOOMRT_SILU, LOOMRT_GELU,
                                 LOOMRT_GELU_TANH, LOOMRT_SIGMOID, LOOMRT_TANH,
                                 LOOMRT_EXP};
  for (loomrt_unary_op op : ops) {
    std::vector<float> x = randn(n, 1.5f), dy = randn(n);
    Harness probe(dev, s, dt());
    std::vector<float> xs = probe.seen(x), gs = probe.seen(dy);
    D ref(n);
    for (size_t i = 0; i < n; ++i) {
      double v = xs[i], d;
      double sg = 1 / (1 + std::exp(-v));
      switch (op) {
      case LOOMRT_RELU: d = v > 0 ? 1 : 0; break;
      case LOOMRT_SILU: d = sg * (1 + v * (1 - sg)); break;
      case LOOMRT_GELU:
        d = 0.5 * (1 + std::erf(v / std::sqrt(2.0))) +
            v * std::exp(-0.5 * v * v) / std::sqrt(2 * M_PI);
        break;
      case LOOMRT_GELU_TANH: {
        double k = std::sqrt(2 / M_PI), u = k * (v + 0.044715 * v * v * v);
        double t = std::tanh(u);
        d = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v);
        break;
      }
      case LOOMRT_SIGMOID: d = sg * (1 - sg); break;
      case LOOMRT_TANH: d = 1 - std::tanh(v) * std::tanh(v); break;
      default: d = std::exp(v); break;
      }
      ref[i] = gs[i] * d;
    }
    SCOPED_TRACE("op " + std::to_string(op));
    check({ref}, [&](Harness &h) {
      void *dx = h.out(n);
      EXPECT_EQ(LOOMRT_OK,
                loomrt_unary_grad(h.s, op, h.dt, h.put(dy), h.put(x), dx, n));
      return std::vector<std::vector<float>>{h.get(dx, n)};
    });
  }
  float z = 0;
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_unary_grad(s, LOOMRT_SIN, dt(), &z, &z, &z, 1));
}

TEST_P(Kernels, BinaryBroadcasts) {
  // b's shapes reach every path of the GPU kernel: a middle-axis broadcast
  // (general strides), a bias row, a scalar and the same shape (the suffix
  // path), and a is broadcast once too.
  const int64_t os[3] = {2, 3, 4}, full[3] = {2, 3, 4};
  const int64_t bShapes[][3] = {{1, 3, 1}, {1, 1, 4}, {1, 1, 1}, {2, 3, 4}, {2, 1, 4}};
  for (const auto &bs : bShapes)
    for (int swap = 0; swap < 2; ++swap) {
      const int64_t *as = swap ? bs : full, *bsh = swap ? full : bs;
      int64_t na = as[0] * as[1] * as[2], nb = bsh[0] * bsh[1] * bsh[2];
      std::vector<float> a = randn(na), b = randn(nb, 0.5f, 2.0f);
      for (int op = 0; op < LOOMRT_BINARY_OP_COUNT; ++op) {
        std::vector<float> aa = a;
        if (op == LOOMRT_POW)
          for (auto &v : aa)
            v = std::fabs(v) + 0.5f;
        Harness probe(dev, s, dt());
        auto A = probe.seen(aa), B = probe.seen(b);
        auto at = [](const int64_t *sh, int i, int j, int k) {
          return ((sh[0] == 1 ? 0 : i) * sh[1] + (sh[1] == 1 ? 0 : j)) * sh[2] +
                 (sh[2] == 1 ? 0 : k);
        };
        D ref(24);
        for (int i = 0; i < 2; ++i)
          for (int j = 0; j < 3; ++j)
            for (int k = 0; k < 4; ++k) {
              ref[i * 12 + j * 4 + k] =
                  binaryRef(op, double(A[at(as, i, j, k)]), double(B[at(bsh, i, j, k)]));
            }
        SCOPED_TRACE("op " + std::to_string(op) + " b shape " + std::to_string(bs[0]) +
                     "x" + std::to_string(bs[1]) + "x" + std::to_string(bs[2]) +
                     (swap ? " (as a)" : ""));
        check({ref}, [&](Harness &h) {
          void *o = h.out(24);
          EXPECT_EQ(LOOMRT_OK, loomrt_binary(h.s, loomrt_binary_op(op), h.dt,
                                             h.put(aa), as, h.put(b), bsh, o, os, 3));
          return std::vector<std::vector<float>>{h.get(o, 24)};
        });
      }
    }
  const int64_t as[3] = {2, 3, 4};
  const int64_t bad[3] = {1, 2, 1};
  float z = 0;
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_binary(s, LOOMRT_ADD, dt(), &z, as, &z, bad, &z, os, 3));
  EXPECT_NE(std::string(loomrt_last_error()).find("does not broadcast"),
            std::string::npos);
}

TEST_P(Kernels, SelectBroadcasts) {
  // A causal mask [4, 4] selects between scores [2, 4, 4] and a scalar.
  const int64_t cs_[3] = {1, 4, 4}, as[3] = {2, 4, 4}, bs[3] = {1, 1, 1};
  std::vector<uint8_t> mask(16);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j)
      mask[i * 4 + j] = j <= i;
  std::vector<float> a = randn(32), b = {-1e4f};
  Harness probe(dev, s, dt());
  auto A = probe.seen(a), B = probe.seen(b);
  D ref(32);
  for (int i = 0; i < 32; ++i)
    ref[i] = mask[i % 16] ? A[i] : B[0];
  check({ref}, [&](Harness &h) {
    void *o = h.out(32);
    EXPECT_EQ(LOOMRT_OK, loomrt_select(h.s, h.dt, h.putT(mask), cs_, h.put(a),
                                       as, h.put(b), bs, o, as, 3));
    return std::vector<std::vector<float>>{h.get(o, 32)};
  });
}

TEST_P(Kernels, CastAndFill) {
  std::vector<float> x = randn(777);
  D ref(777), fill(777, 2.5);
  for (size_t i = 0; i < x.size(); ++i)
    ref[i] = loomrt::bf16ToFloat(loomrt::floatToBf16(x[i]));
  // f32 -> bf16 is exact rounding to nearest even: checked bit for bit.
  check({ref, fill}, [&](Harness &h) {
    void *src = h.alloc(777 * 4), *dst = h.alloc(777 * 2), *f = h.out(777);
    EXPECT_EQ(LOOMRT_OK, loomrt_memcpy_async(h.s, src, x.data(), 777 * 4));
    EXPECT_EQ(LOOMRT_OK, loomrt_cast(h.s, LOOMRT_F32, src, LOOMRT_BF16, dst, 777));
    EXPECT_EQ(LOOMRT_OK, loomrt_fill(h.s, h.dt, f, 2.5f, 777));
    return std::vector<std::vector<float>>{h.get(dst, 777, LOOMRT_BF16),
                                           h.get(f, 777)};
  }, 0.0 + 1e-12);
}

TEST_P(Kernels, LerpBothFormulas) {
  // Below 0.5 from a, from 0.5 on from b (torch.lerp's two branches).
  std::vector<float> a = randn(1000), b = randn(1000, 2.0f, 1.0f);
  Harness probe(dev, s, dt());
  auto A = probe.seen(a), B = probe.seen(b);
  for (float w : {0.1f, 0.5f, 0.9f}) {
    D ref(a.size());
    for (size_t i = 0; i < a.size(); ++i)
      ref[i] = A[i] + double(w) * (double(B[i]) - A[i]);
    SCOPED_TRACE("weight " + std::to_string(w));
    check({ref}, [&](Harness &h) {
      void *y = h.out(a.size());
      EXPECT_EQ(LOOMRT_OK, loomrt_lerp(h.s, h.dt, h.put(a), h.put(b), y, a.size(), w));
      return std::vector<std::vector<float>>{h.get(y, a.size())};
    });
  }
  float z = 0;
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_lerp(s, dt(), &z, &z, &z, 1, NAN));
}

TEST_P(Kernels, CumsumAllDirections) {
  // A short column and a long one, both flags each way.
  for (auto [outer, len, inner] : {std::tuple<int64_t, int64_t, int64_t>{2, 5, 3},
                                   {3, 700, 2}}) {
    std::vector<float> x = randn(outer * len * inner);
    Harness probe(dev, s, dt());
    auto X = probe.seen(x);
    for (int flags = 0; flags < 4; ++flags) {
      bool exclusive = flags & 1, reverse = flags & 2;
      D ref(x.size());
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          double acc = 0;
          for (int64_t k = 0; k < len; ++k) {
            int64_t at = (o * len + (reverse ? len - 1 - k : k)) * inner + i;
            ref[at] = exclusive ? acc : acc + X[at];
            acc += X[at];
          }
        }
      SCOPED_TRACE("cumsum " + std::to_string(outer) + "x" + std::to_string(len) + "x" +
                   std::to_string(inner) + (exclusive ? " exclusive" : "") +
                   (reverse ? " reverse" : ""));
      // A running fp32 sum of 700 terms drifts like sqrt(700) roundings.
      check({ref}, [&](Harness &h) {
        void *y = h.out(x.size());
        EXPECT_EQ(LOOMRT_OK, loomrt_cumsum(h.s, h.dt, h.put(x), y, outer, len, inner,
                                           exclusive, reverse));
        return std::vector<std::vector<float>>{h.get(y, x.size())};
      }, dt() == LOOMRT_BF16 ? 1e-2 : 1e-5);
    }
  }
}

/// Integer tensors computed on the device (position ids from a pad mask):
/// int64 binary ops with broadcasting and wrap-around, select, cumsum,
/// casts to and from the test's float type, fill; all exact.
TEST_P(Kernels, Int64ArithmeticIsExact) {
  Harness h(dev, s, dt());
  auto getI = [&](const void *p, size_t n) {
    std::vector<int64_t> r(n);
    EXPECT_EQ(LOOMRT_OK, loomrt_memcpy_async(h.s, r.data(), p, n * 8));
    EXPECT_EQ(LOOMRT_OK, loomrt_stream_synchronize(h.s));
    return r;
  };
  const int64_t big = std::numeric_limits<int64_t>::max();
  const int64_t os[3] = {2, 3, 4}, bs[3] = {1, 3, 1};
  std::vector<int64_t> a(24), b = {1, -7, big};
  for (int i = 0; i < 24; ++i)
    a[i] = (i % 5) - 2 + (i == 23 ? big - 1 : 0);
  const int64_t *A = h.putT(a), *B = h.putT(b);
  for (int op = 0; op < LOOMRT_BINARY_OP_COUNT; ++op) {
    void *o = h.alloc(24 * 8);
    if (op == LOOMRT_DIV || op == LOOMRT_POW) {
      EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
                loomrt_binary(h.s, loomrt_binary_op(op), LOOMRT_I64, A, os, B, bs, o, os, 3));
      continue;
    }
    ASSERT_EQ(LOOMRT_OK,
              loomrt_binary(h.s, loomrt_binary_op(op), LOOMRT_I64, A, os, B, bs, o, os, 3));
    std::vector<int64_t> got = getI(o, 24);
    for (int i = 0; i < 24; ++i) {
      EXPECT_EQ(got[i], binaryRef(op, a[i], b[(i / 4) % 3])) << "op " << op << " at " << i;
    }
  }
  // select on int64.
  std::vector<uint8_t> cond = {1, 0, 1};
  void *sel = h.alloc(24 * 8);
  ASSERT_EQ(LOOMRT_OK, loomrt_select(h.s, LOOMRT_I64, h.putT(cond), bs, A, os, B, bs, sel, os, 3));
  std::vector<int64_t> gotSel = getI(sel, 24);
  for (int i = 0; i < 24; ++i)
    EXPECT_EQ(gotSel[i], cond[(i / 4) % 3] ? a[i] : b[(i / 4) % 3]);
  // RoBERTa's position ids: cumsum(ids != pad) * (ids != pad) + pad, here
  // with the pad mask given; every direction of the scan.
  std::vector<int64_t> m = {1, 1, 0, 1, 1, 0, 0, 1, 1, 1};
  const int64_t *M = h.putT(m);
  for (int flags = 0; flags < 4; ++flags) {
    bool exclusive = flags & 1, reverse = flags & 2;
    void *c = h.alloc(10 * 8);
    ASSERT_EQ(LOOMRT_OK, loomrt_cumsum(h.s, LOOMRT_I64, M, c, 2, 5, 1, exclusive, reverse));
    std::vector<int64_t> got = getI(c, 10);
    for (int row = 0; row < 2; ++row) {
      int64_t acc = 0;
      for (int k = 0; k < 5; ++k) {
        int at = row * 5 + (reverse ? 4 - k : k);
        EXPECT_EQ(got[at], exclusive ? acc : acc + m[at]) << "flags " << flags << " at " << at;
        acc += m[at];
      }
    }
  }
  // Casts: toward zero, saturating, NaN to 0; and back to floats.
  std::vector<float> f = {2.7f, -2.7f, std::nanf(""), 1e30f, -1e30f, 1024.f};
  std::vector<int64_t> want = {2, -2, 0, big, std::numeric_limits<int64_t>::min(), 1024};
  void *fi = h.alloc(6 * 8), *back = h.out(6);
  ASSERT_EQ(LOOMRT_OK, loomrt_cast(h.s, h.dt, h.put(f), LOOMRT_I64, fi, 6));
  EXPECT_EQ(getI(fi, 6), want);
  std::vector<int64_t> small = {3, -5, 0, 255, 1 << 20, -1};
  ASSERT_EQ(LOOMRT_OK, loomrt_cast(h.s, LOOMRT_I64, h.putT(small), h.dt, back, 6));
  std::vector<float> gotBack = h.get(back, 6);
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(gotBack[i], float(small[i]));
  void *fill = h.alloc(5 * 8);
  ASSERT_EQ(LOOMRT_OK, loomrt_fill(h.s, LOOMRT_I64, fill, 7.0f, 5));
  EXPECT_EQ(getI(fill, 5), std::vector<int64_t>(5, 7));
  // Other kernels still refuse int64, by name.
  float z = 0;
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_unary(h.s, LOOMRT_EXP, LOOMRT_I64, &z, &z, 1));
  EXPECT_NE(std::string(loomrt_last_error()).find("int64"), std::string::npos);
}

TEST_P(Kernels, CopyStridedPermutesSlicesAndBroadcasts) {
  // Transpose [2, 3, 4] -> [4, 2, 3] (perm 2, 0, 1).
  std::vector<float> x = randn(24);
  Harness probe(dev, s, dt());
  auto X = probe.seen(x);
  D ref(24);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k)
        ref[k * 6 + i * 3 + j] = X[i * 12 + j * 4 + k];
  // Slice rows 1..3 step 2 of a [4, 5] matrix, columns 1..4.
  std::vector<float> m = randn(20);
  auto M = probe.seen(m);
  D sref;
  for (int r = 1; r < 4; r += 2)
    for (int c = 1; c < 4; ++c)
      sref.push_back(M[r * 5 + c]);
  // Broadcast a [3] row to [2, 3].
  std::vector<float> row = randn(3);
  auto R = probe.seen(row);
  D bref = {R[0], R[1], R[2], R[0], R[1], R[2]};
  check({ref, sref, bref}, [&](Harness &h) {
    size_t es = h.esize();
    void *y = h.out(24), *sl = h.out(6), *bc = h.out(6);
    const int64_t shape[3] = {4, 2, 3}, src[3] = {1, 12, 4}, dst[3] = {6, 3, 1};
    EXPECT_EQ(LOOMRT_OK, loomrt_copy_strided(h.s, es, h.put(x), src, y, dst, shape, 3));
    const int64_t sshape[2] = {2, 3}, ss[2] = {10, 1}, sd[2] = {3, 1};
    char *mp = static_cast<char *>(h.put(m)) + (5 + 1) * es;
    EXPECT_EQ(LOOMRT_OK, loomrt_copy_strided(h.s, es, mp, ss, sl, sd, sshape, 2));
    const int64_t bshape[2] = {2, 3}, bsrc[2] = {0, 1}, bdst[2] = {3, 1};
    EXPECT_EQ(LOOMRT_OK, loomrt_copy_strided(h.s, es, h.put(row), bsrc, bc, bdst, bshape, 2));
    return std::vector<std::vector<float>>{h.get(y, 24), h.get(sl, 6), h.get(bc, 6)};
  }, 1e-12);
}

// The attention head split: [B, T, H, D] -> [B, H, T, D], D = 16, from an
// aligned source (the GPU moves 16-byte words) and from one shifted by one
// element (element by element), plus a contiguous copy whose dims merge.
TEST_P(Kernels, CopyStridedHeadSplitWidensAndMerges) {
  const int64_t B = 2, T = 3, H = 4, Dh = 16, n = B * T * H * Dh;
  std::vector<float> x = randn(n + 1);
  Harness probe(dev, s, dt());
  auto X = probe.seen(x);
  for (int shift = 0; shift < 2; ++shift) {
    D ref(n), flat(n);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t d = 0; d < Dh; ++d)
            ref[((b * H + h) * T + t) * Dh + d] = X[shift + ((b * T + t) * H + h) * Dh + d];
    for (int64_t i = 0; i < n; ++i)
      flat[i] = X[shift + i];
    SCOPED_TRACE(shift ? "unaligned source" : "aligned source");
    check({ref, flat}, [&](Harness &h) {
      size_t es = h.esize();
      void *y = h.out(n), *z = h.out(n);
      const char *src = static_cast<const char *>(h.put(x)) + shift * es;
      const int64_t shape[4] = {B, H, T, Dh}, ss[4] = {T * H * Dh, Dh, H * Dh, 1},
                    ds[4] = {H * T * Dh, T * Dh, Dh, 1};
      EXPECT_EQ(LOOMRT_OK, loomrt_copy_strided(h.s, es, src, ss, y, ds, shape, 4));
      const int64_t cs[4] = {T * H * Dh, H * Dh, Dh, 1}, cshape[4] = {B, T, H, Dh};
      EXPECT_EQ(LOOMRT_OK, loomrt_copy_strided(h.s, es, src, cs, z, cs, cshape, 4));
      return std::vector<std::vector<float>>{h.get(y, n), h.get(z, n)};
    }, 1e-12);
  }
}

// Row copies of every width (the GPU's copyRowsKernel: one power-of-two
// group of threads a row, several rows a block when rows are narrow): from
// one element to more than a block's worth, one row to hundreds, strides
// that let the copy widen to 16-byte words (rows of 64 and 128 elements,
// Llama's rotary halves) and strides that do not.
TEST_P(Kernels, CopyStridedRowsOfEveryWidth) {
  struct Case {
    int64_t rows, cols, lds, ldd;
  };
  const Case cases[] = {{1, 1, 1, 1},       {7, 3, 5, 4},     {300, 8, 16, 8},
                        {513, 64, 128, 64}, {9, 40, 47, 41},  {130, 128, 256, 128},
                        {3, 1100, 1203, 1100}, {2, 257, 300, 257}};
  for (const Case &c : cases) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " cols " + std::to_string(c.cols) +
                 " lds " + std::to_string(c.lds) + " ldd " + std::to_string(c.ldd));
    const int64_t nsrc = c.rows * c.lds, ndst = c.rows * c.ldd;
    std::vector<float> x = randn(nsrc);
    Harness probe(dev, s, dt());
    auto X = probe.seen(x);
    D ref(ndst, 0.0);
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t k = 0; k < c.cols; ++k)
        ref[r * c.ldd + k] = X[r * c.lds + k];
    check({ref}, [&](Harness &h) {
      void *y = h.put(std::vector<float>(ndst, 0.0f)); // the gaps stay 0
      const int64_t shape[2] = {c.rows, c.cols}, ss[2] = {c.lds, 1}, ds[2] = {c.ldd, 1};
      EXPECT_EQ(LOOMRT_OK, loomrt_copy_strided(h.s, h.esize(), h.put(x), ss, y, ds, shape, 2));
      return std::vector<std::vector<float>>{h.get(y, ndst)};
    }, 1e-12);
  }
}

TEST_P(Kernels, ReduceMiddleAxis) {
  // A short axis (one pass per output) and a tall one with a ragged last
  // chunk (the GPU's two-stage reduction: bias gradients over B*T rows).
  for (auto [outer, len, inner] : {std::tuple<int64_t, int64_t, int64_t>{3, 50, 7},
                                   {2, 1300, 37}}) {
  SCOPED_TRACE("reduce " + std::to_string(outer) + "x" + std::to_string(len) + "x" +
               std::to_string(inner));
  std::vector<float> x = randn(outer * len * inner);
  Harness probe(dev, s, dt());
  auto X = probe.seen(x);
  for (int op = LOOMRT_REDUCE_SUM; op <= LOOMRT_REDUCE_MIN; ++op) {
    D ref(outer * inner);
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i) {
        double acc = X[o * len * inner + i];
        for (int64_t r = 1; r < len; ++r) {
          double v = X[(o * len + r) * inner + i];
          acc = op == LOOMRT_REDUCE_MAX   ? std::max(acc, v)
                : op == LOOMRT_REDUCE_MIN ? std::min(acc, v)
                                          : acc + v;
        }
        ref[o * inner + i] = op == LOOMRT_REDUCE_MEAN ? acc / len : acc;
      }
    SCOPED_TRACE("op " + std::to_string(op));
    check({ref}, [&](Harness &h) {
      void *y = h.out(outer * inner);
      EXPECT_EQ(LOOMRT_OK, loomrt_reduce(h.s, loomrt_reduce_op(op), h.dt,
                                         h.put(x), y, outer, len, inner));
      return std::vector<std::vector<float>>{h.get(y, outer * inner)};
    });
  }
  }
}

TEST_P(Kernels, MatmulAllTransposesBatchesAndBroadcast) {
  const int64_t B = 3, M = 5, N = 7, K = 9;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      std::vector<float> a = randn(B * M * K), b = randn(K * N), c0 = randn(B * M * N);
      Harness probe(dev, s, dt());
      auto Av = probe.seen(a), Bv = probe.seen(b);
      // C = 0.5 op(A_b) op(B) + 2 C0, B shared by every batch (stride 0),
      // C stored fp32.
      D ref(B * M * N);
      for (int64_t bi = 0; bi < B; ++bi)
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k) {
              double av = ta ? Av[bi * M * K + k * M + i] : Av[bi * M * K + i * K + k];
              double bv = tb ? Bv[j * K + k] : Bv[k * N + j];
              acc += av * bv;
            }
            ref[bi * M * N + i * N + j] = 0.5 * acc + 2.0 * c0[bi * M * N + i * N + j];
          }
      SCOPED_TRACE("trans " + std::to_string(ta) + std::to_string(tb));
      check({ref}, [&](Harness &h) {
        void *c = h.alloc(B * M * N * 4);
        EXPECT_EQ(LOOMRT_OK, loomrt_memcpy_async(h.s, c, c0.data(), c0.size() * 4));
        loomrt_gemm g{ta, tb, B, M, N, K, M * K, 0, M * N, 0.5f, 2.0f, h.dt, LOOMRT_F32};
        EXPECT_EQ(LOOMRT_OK, loomrt_matmul(h.s, &g, h.put(a), h.put(b), c))
            << loomrt_last_error();
        return std::vector<std::vector<float>>{h.get(c, B * M * N, LOOMRT_F32)};
      });
    }
  loomrt_gemm bad{0, 0, 2, 4, 4, 4, 16, 16, 8, 1.f, 0.f, LOOMRT_F32, LOOMRT_F32};
  float z = 0;
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_matmul(s, &bad, &z, &z, &z));
}

// Odd M, N and K (GPT-2's vocabulary is 50257) on a GEMM large enough that
// the GPU runs it on zero-padded scratch copies (multiples of 8); C is
// accumulated into (beta), so the padded copy of C must carry it.
TEST_P(Kernels, MatmulOddLeadingDimensions) {
  const int64_t B = 2, M = 257, N = 515, K = 521;
  for (auto [ta, tb] : {std::pair<int, int>{1, 0}, {0, 1}}) {
    std::vector<float> a = randn(B * M * K), b = randn(B * K * N), c0 = randn(B * M * N);
    Harness probe(dev, s, dt());
    auto Av = probe.seen(a), Bv = probe.seen(b), Cv = probe.seen(c0);
    D ref(B * M * N);
    for (int64_t bi = 0; bi < B; ++bi)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) {
          double acc = 0;
          for (int64_t k = 0; k < K; ++k)
            acc += (ta ? Av[bi * M * K + k * M + i] : Av[bi * M * K + i * K + k]) *
                   (tb ? Bv[bi * K * N + j * K + k] : Bv[bi * K * N + k * N + j]);
          ref[bi * M * N + i * N + j] = acc + 0.5 * Cv[bi * M * N + i * N + j];
        }
    SCOPED_TRACE("trans " + std::to_string(ta) + std::to_string(tb));
    check({ref}, [&](Harness &h) {
      void *c = h.put(c0);
      loomrt_gemm g{ta, tb, B, M, N, K, M * K, K * N, M * N, 1.0f, 0.5f, h.dt, h.dt};
      EXPECT_EQ(LOOMRT_OK, loomrt_matmul(h.s, &g, h.put(a), h.put(b), c))
          << loomrt_last_error();
      return std::vector<std::vector<float>>{h.get(c, B * M * N)};
    });
  }
}

// loomrt_matmul_bias: C_b = op(A_b) op(B) + bias. A linear layer's shape
// (batch of contiguous A rows over one weight, dims multiples of 8: the
// GPU's cuBLASLt epilogue), an odd N (the GPU pads and adds), and strided
// batches of C (the add per batch) all equal the float64 reference.
TEST_P(Kernels, MatmulBiasFusedAndComposed) {
  struct Case {
    int64_t B, M, N, K, strideC;
    int tb;
  };
  for (Case c : {Case{3, 16, 24, 32, 16 * 24, 1}, Case{3, 16, 24, 32, 16 * 24, 0},
                 Case{2, 9, 7, 5, 9 * 7, 1}, Case{2, 8, 16, 8, 8 * 16 + 40, 0}}) {
    SCOPED_TRACE("B" + std::to_string(c.B) + " M" + std::to_string(c.M) + " N" +
                 std::to_string(c.N) + " K" + std::to_string(c.K) + " tb" + std::to_string(c.tb));
    const int64_t cn = (c.B - 1) * c.strideC + c.M * c.N;
    std::vector<float> a = randn(c.B * c.M * c.K), b = randn(c.K * c.N), bias = randn(c.N);
    Harness probe(dev, s, dt());
    auto Av = probe.seen(a), Bv = probe.seen(b), Biasv = probe.seen(bias);
    D ref(cn, 0.0);
    for (int64_t z = 0; z < c.B; ++z)
      for (int64_t i = 0; i < c.M; ++i)
        for (int64_t j = 0; j < c.N; ++j) {
          double acc = Biasv[j];
          for (int64_t k = 0; k < c.K; ++k)
            acc += Av[(z * c.M + i) * c.K + k] * (c.tb ? Bv[j * c.K + k] : Bv[k * c.N + j]);
          ref[z * c.strideC + i * c.N + j] = acc;
        }
    check({ref}, [&](Harness &h) {
      void *out = h.put(std::vector<float>(cn, 0.0f));
      loomrt_gemm g{0, c.tb, c.B, c.M, c.N, c.K, c.M * c.K, 0, c.strideC, 1.0f, 0.0f, h.dt, h.dt};
      EXPECT_EQ(LOOMRT_OK, loomrt_matmul_bias(h.s, &g, h.put(a), h.put(b), h.put(bias), out))
          << loomrt_last_error();
      return std::vector<std::vector<float>>{h.get(out, cn)};
    });
  }
  loomrt_gemm beta{0, 0, 1, 8, 8, 8, 0, 0, 0, 1.f, 1.f, LOOMRT_F32, LOOMRT_F32};
  float z[64] = {};
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_matmul_bias(s, &beta, z, z, z, z));
  EXPECT_NE(std::string(loomrt_last_error()).find("beta must be 0"), std::string::npos);
  beta.beta = 0.f;
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_matmul_bias(s, &beta, z, z, nullptr, z));
}

/// float64 layer/RMS norm of one [rows, d] input.
void normRef(const std::vector<float> &x, const std::vector<float> &w,
             const std::vector<float> *b, int64_t rows, int64_t d, double eps,
             bool rms, D &y) {
  y.assign(rows * d, 0);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    if (!rms) {
      for (int64_t j = 0; j < d; ++j)
        mean += x[r * d + j];
      mean /= d;
    }
    for (int64_t j = 0; j < d; ++j)
      var += (x[r * d + j] - mean) * (x[r * d + j] - mean);
    double rstd = 1 / std::sqrt(var / d + eps);
    for (int64_t j = 0; j < d; ++j)
      y[r * d + j] = (x[r * d + j] - mean) * rstd * w[j] + (b ? (*b)[j] : 0.0);
  }
}

TEST_P(Kernels, NormsForwardAndBackward) {
  // Rows the GPU keeps in one warp's registers one element a lane an access
  // (300), as whole 16-byte words with the gradient's column sums over
  // several chunks of rows (20 x 256), and rows too long for registers,
  // which the block kernels take (1100).
  for (auto shape : {std::pair<int64_t, int64_t>{6, 300}, {20, 256}, {3, 1100}}) {
  const int64_t rows = shape.first, d = shape.second; // captured below (no C++17 binding)
  SCOPED_TRACE("rows " + std::to_string(rows) + " x " + std::to_string(d));
  const double eps = 1e-5;
  for (int rms = 0; rms < 2; ++rms) {
    std::vector<float> x = randn(rows * d, 2.0f, 1.0f), w = randn(d, 0.5f, 1.0f),
                       b = randn(d), dy = randn(rows * d);
    Harness probe(dev, s, dt());
    auto X = probe.seen(x), W = probe.seen(w), Bv = probe.seen(b), G = probe.seen(dy);
    D y;
    normRef(X, W, rms ? nullptr : &Bv, rows, d, eps, rms, y);
    // Backward by central differences of L = sum(dy * y) in float64: an
    // independent check of the analytic formulas in the kernels.
    auto loss = [&](const std::vector<double> &xx, const std::vector<double> &ww,
                    const std::vector<double> &bb) {
      double L = 0;
      for (int64_t r = 0; r < rows; ++r) {
        double mean = 0, var = 0;
        if (!rms) {
          for (int64_t j = 0; j < d; ++j)
            mean += xx[r * d + j];
          mean /= d;
        }
        for (int64_t j = 0; j < d; ++j)
          var += (xx[r * d + j] - mean) * (xx[r * d + j] - mean);
        double rstd = 1 / std::sqrt(var / d + eps);
        for (int64_t j = 0; j < d; ++j)
          L += G[r * d + j] * ((xx[r * d + j] - mean) * rstd * ww[j] + (rms ? 0 : bb[j]));
      }
      return L;
    };
    std::vector<double> xd(X.begin(), X.end()), wd(W.begin(), W.end()),
        bd(Bv.begin(), Bv.end());
    D dx(rows * d), dw(d), db(d);
    const double h = 1e-6;
    for (size_t i = 0; i < xd.size(); ++i) {
      double o = xd[i];
      xd[i] = o + h; double lp = loss(xd, wd, bd);
      xd[i] = o - h; double lm = loss(xd, wd, bd);
      xd[i] = o;
      dx[i] = (lp - lm) / (2 * h);
    }
    for (int64_t j = 0; j < d; ++j) {
      double o = wd[j];
      wd[j] = o + h; double lp = loss(xd, wd, bd);
      wd[j] = o - h; double lm = loss(xd, wd, bd);
      wd[j] = o;
      dw[j] = (lp - lm) / (2 * h);
      db[j] = 0;
      for (int64_t r = 0; r < rows; ++r)
        db[j] += G[r * d + j];
    }
    SCOPED_TRACE(rms ? "rms_norm" : "layer_norm");
    // Finite differences carry ~1e-8 of their own error: the fp32 bound
    // stays 1e-5 (bf16: 1e-2).
    std::vector<D> refs = {y, dx, dw};
    if (!rms)
      refs.push_back(db);
    check(refs, [&](Harness &hh) {
      void *yo = hh.out(rows * d), *dxo = hh.out(rows * d), *dwo = hh.out(d),
           *dbo = hh.out(d);
      void *xi = hh.put(x), *wi = hh.put(w), *gi = hh.put(dy);
      if (rms) {
        EXPECT_EQ(LOOMRT_OK, loomrt_rms_norm(hh.s, hh.dt, xi, wi, yo, rows, d, eps));
        EXPECT_EQ(LOOMRT_OK, loomrt_rms_norm_grad(hh.s, hh.dt, gi, xi, wi, dxo,
                                                  dwo, rows, d, eps));
        return std::vector<std::vector<float>>{hh.get(yo, rows * d),
                                               hh.get(dxo, rows * d), hh.get(dwo, d)};
      }
      EXPECT_EQ(LOOMRT_OK, loomrt_layer_norm(hh.s, hh.dt, xi, wi, hh.put(b), yo,
                                             rows, d, eps));
      EXPECT_EQ(LOOMRT_OK, loomrt_layer_norm_grad(hh.s, hh.dt, gi, xi, wi, dxo,
                                                  dwo, dbo, rows, d, eps));
      return std::vector<std::vector<float>>{hh.get(yo, rows * d),
                                             hh.get(dxo, rows * d), hh.get(dwo, d),
                                             hh.get(dbo, d)};
    });
  }
  }
}

TEST_P(Kernels, SoftmaxCausalScaledLogAndGrad) {
  // Two causal blocks of 4 query rows over 6 keys (the last 4 align with the
  // queries), scale 0.5; then rows the GPU keeps in registers: whole
  // 16-byte words per lane (256), a ragged end (300), and rows too long for
  // registers (1500).
  for (auto [rows, d, block] : {std::tuple<int64_t, int64_t, int64_t>{8, 6, 4},
                                {16, 256, 8}, {10, 300, 5}, {6, 1500, 3}}) {
  SCOPED_TRACE("rows " + std::to_string(rows) + " x " + std::to_string(d));
  const float scale = 0.5f;
  for (int log = 0; log < 2; ++log) {
    std::vector<float> x = randn(rows * d, 2.0f), dy = randn(rows * d);
    Harness probe(dev, s, dt());
    auto X = probe.seen(x);
    D y(rows * d);
    std::vector<double> yv(rows * d);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t vis = (r % block) + (d - block) + 1;
      auto [mx, sum] = rowExp(&X[r * d], vis, scale);
      for (int64_t j = 0; j < d; ++j) {
        double p = j < vis ? std::exp(scale * X[r * d + j] - mx) / sum : 0.0;
        y[r * d + j] = log ? (j < vis ? std::log(p) : -INFINITY) : p;
      }
    }
    SCOPED_TRACE(log ? "log_softmax" : "softmax");
    check({y}, [&](Harness &h) {
      void *yo = h.out(rows * d);
      EXPECT_EQ(LOOMRT_OK, loomrt_softmax(h.s, h.dt, h.put(x), yo, rows, d,
                                          scale, log, block));
      return std::vector<std::vector<float>>{h.get(yo, rows * d)};
    });
  }
  // Gradient given the (unmasked) output, with scale.
  std::vector<float> x = randn(rows * d), dy = randn(rows * d);
  for (int log = 0; log < 2; ++log) {
    Harness probe(dev, s, dt());
    auto X = probe.seen(x), G = probe.seen(dy);
    D dx(rows * d);
    std::vector<float> yin(rows * d);
    for (int64_t r = 0; r < rows; ++r) {
      auto [mx, sum] = rowExp(&X[r * d], d);
      for (int64_t j = 0; j < d; ++j) {
        double p = std::exp(X[r * d + j] - mx) / sum;
        yin[r * d + j] = float(log ? std::log(p) : p);
      }
    }
    auto Y = probe.seen(yin);
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t j = 0; j < d; ++j)
        acc += log ? G[r * d + j] : double(G[r * d + j]) * Y[r * d + j];
      for (int64_t j = 0; j < d; ++j)
        dx[r * d + j] = scale * (log ? G[r * d + j] - std::exp(double(Y[r * d + j])) * acc
                                     : Y[r * d + j] * (G[r * d + j] - acc));
    }
    SCOPED_TRACE(log ? "log_softmax_grad" : "softmax_grad");
    check({dx}, [&](Harness &h) {
      void *o = h.out(rows * d);
      EXPECT_EQ(LOOMRT_OK, loomrt_softmax_grad(h.s, h.dt, h.put(dy), h.put(yin),
                                               o, rows, d, scale, log));
      return std::vector<std::vector<float>>{h.get(o, rows * d)};
    });
  }
  }
}

TEST_P(Kernels, EmbeddingGathersAndScatterAdds) {
  const int64_t vocab = 11, d = 5, n = 9;
  std::vector<int64_t> idx = {3, 0, 10, 3, 3, 7, 0, 1, 9};
  std::vector<float> table = randn(vocab * d), dy = randn(n * d);
  Harness probe(dev, s, dt());
  auto T = probe.seen(table), G = probe.seen(dy);
  D out(n * d), grad(vocab * d, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      out[i * d + j] = T[idx[i] * d + j];
      grad[idx[i] * d + j] += G[i * d + j];
    }
  check({out, grad}, [&](Harness &h) {
    void *o = h.out(n * d);
    float *g = static_cast<float *>(h.alloc(vocab * d * 4));
    int64_t *ix = h.putT(idx);
    EXPECT_EQ(LOOMRT_OK, loomrt_embedding(h.s, h.dt, h.put(table), ix, o, n, d, vocab));
    EXPECT_EQ(LOOMRT_OK, loomrt_embedding_grad(h.s, h.dt, h.put(dy), ix, g, n, d, vocab));
    return std::vector<std::vector<float>>{h.get(o, n * d),
                                           h.get(g, vocab * d, LOOMRT_F32)};
  });
}

// The embedding gradient sums a repeated token's rows in position order on
// every backend (the GPU sorts the positions by token instead of adding
// atomically): the same bits on every run, and the CPU backend's bits.
TEST_P(Kernels, EmbeddingGradIsDeterministic) {
  const int64_t vocab = 7, d = 64, n = 4096;
  std::vector<int64_t> idx(n);
  for (int64_t i = 0; i < n; ++i)
    idx[i] = (i * 5 + i / 3) % vocab;
  std::vector<float> dy = randn(n * d);
  auto run = [&](loomrt_device device, loomrt_stream stream) {
    Harness h(device, stream, dt());
    float *g = static_cast<float *>(h.alloc(vocab * d * 4));
    EXPECT_EQ(LOOMRT_OK, loomrt_embedding_grad(h.s, h.dt, h.put(dy), h.putT(idx), g, n, d, vocab))
        << loomrt_last_error();
    return h.get(g, vocab * d, LOOMRT_F32);
  };
  std::vector<float> first = run(dev, s);
  for (int k = 0; k < 3; ++k)
    EXPECT_EQ(run(dev, s), first) << "run " << k + 2;
  loomrt_device cpu = nullptr;
  loomrt_stream cs = nullptr;
  ASSERT_EQ(LOOMRT_OK, loomrt_device_open(LOOMRT_BACKEND_CPU, 0, &cpu));
  ASSERT_EQ(LOOMRT_OK, loomrt_stream_create(cpu, &cs));
  EXPECT_EQ(run(cpu, cs), first) << "against the CPU backend";
  loomrt_stream_destroy(cs);
  loomrt_device_close(cpu);
}

TEST_P(Kernels, CrossEntropyAndGrad) {
  // Rows of whole 16-byte words in both dtypes (1000, and 4104: over two
  // words a thread of a 256-thread block, with a partial last round), rows
  // that are not (1001 classes: odd rows start off a word), and one row.
  const std::pair<int64_t, int64_t> shapes[] = {{12, 1000}, {5, 1001}, {3, 4104}, {1, 7}};
  for (auto [rows, classes] : shapes) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(classes));
    std::vector<float> logits = randn(rows * classes, 3.0f);
    std::vector<int64_t> labels(rows);
    for (int64_t r = 0; r < rows; ++r)
      labels[r] = (r * 379 + classes - 1) % classes; // the last class included
    std::vector<float> dloss = {0.75f};
    Harness probe(dev, s, dt());
    auto L = probe.seen(logits);
    double total = 0;
    D grad(rows * classes);
    for (int64_t r = 0; r < rows; ++r) {
      auto [mx, sum] = rowExp(&L[r * classes], classes);
      total += std::log(sum) + mx - L[r * classes + labels[r]];
      for (int64_t j = 0; j < classes; ++j)
        grad[r * classes + j] = (std::exp(L[r * classes + j] - mx) / sum -
                                 (j == labels[r])) * 0.75 / double(rows);
    }
    D loss = {total / double(rows)};
    // The loss is an fp32 scalar whatever the storage: fp32 bound for it.
    check({loss, grad}, [&, rows = rows, classes = classes](Harness &h) {
      float *lo = static_cast<float *>(h.alloc(4));
      void *g = h.out(rows * classes);
      void *li = h.put(logits);
      int64_t *lab = h.putT(labels);
      EXPECT_EQ(LOOMRT_OK, loomrt_cross_entropy(h.s, h.dt, li, lab, lo, rows, classes));
      EXPECT_EQ(LOOMRT_OK, loomrt_cross_entropy_grad(h.s, h.dt, li, lab, h.putT(dloss),
                                                     g, rows, classes));
      return std::vector<std::vector<float>>{h.get(lo, 1, LOOMRT_F32),
                                             h.get(g, rows * classes)};
    });
  }
}

TEST_P(Kernels, SpmmAggregatesNeighbours) {
  // A 5-node graph with a self loop on each node, in CSR.
  std::vector<int64_t> rp = {0, 2, 5, 6, 8, 10};
  std::vector<int64_t> ci = {0, 1, 0, 1, 2, 2, 1, 3, 4, 0};
  std::vector<float> vals = randn(10, 0.3f, 0.5f), x = randn(5 * 33);
  Harness probe(dev, s, dt());
  auto V = probe.seen(vals), X = probe.seen(x);
  D ref(5 * 33, 0.0);
  for (int r = 0; r < 5; ++r)
    for (int64_t j = rp[r]; j < rp[r + 1]; ++j)
      for (int c = 0; c < 33; ++c)
        ref[r * 33 + c] += double(V[j]) * X[ci[j] * 33 + c];
  check({ref}, [&](Harness &h) {
    void *y = h.out(5 * 33);
    EXPECT_EQ(LOOMRT_OK, loomrt_spmm(h.s, h.dt, h.putT(rp), h.putT(ci), h.put(vals),
                                     h.put(x), y, 5, 33));
    return std::vector<std::vector<float>>{h.get(y, 5 * 33)};
  });
}

TEST_P(Kernels, SgdWithNesterovMomentum) {
  if (dt() != LOOMRT_F32)
    GTEST_SKIP() << "SGD state is fp32 only";
  const size_t n = 4099;
  std::vector<float> p = randn(n), g = randn(n), buf = randn(n, 0.1f);
  for (int nesterov = 0; nesterov < 2; ++nesterov) {
    D rp(n), rb(n);
    for (size_t i = 0; i < n; ++i) {
      double b = 0.9 * buf[i] + g[i];
      rb[i] = b;
      rp[i] = p[i] - 0.7 * (nesterov ? g[i] + 0.9 * b : b);
    }
    check({rp, rb}, [&](Harness &h) {
      float *pp = static_cast<float *>(h.put(p)), *bb = static_cast<float *>(h.put(buf));
      EXPECT_EQ(LOOMRT_OK, loomrt_sgd_f32(h.s, 0.7f, 0.9f, nesterov, pp,
                                          static_cast<float *>(h.put(g)), bb, n));
      return std::vector<std::vector<float>>{h.get(pp, n), h.get(bb, n)};
    });
  }
}

/// The dropout mask as loomrt.h defines it, written again here: splitmix64
/// of the key and the element's counter, its top 53 bits as a draw in
/// (0, 1], kept above the ratio (in doubles; the kernels compare integers).
bool keptRef(uint64_t key, uint64_t i, double ratio) {
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  };
  return double((mix(key ^ mix(i)) >> 11) + 1) / 9007199254740992.0 > ratio;
}

TEST_P(Kernels, DropoutMaskIsCounterBased) {
  const size_t n = 100003; // odd: no vector-width assumption
  std::vector<float> x = randn(n);
  const uint64_t key = loomrt_random_key(7, 3, 1);
  for (float ratio : {0.0f, 0.1f, 0.5f}) {
    Harness probe(dev, s, dt());
    std::vector<float> xs = probe.seen(x);
    D ref(n);
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i)
      if (keptRef(key, 5 + i, ratio))
        ++kept, ref[i] = xs[i] / (1.0 - ratio);
    // The kept fraction is a binomial draw: within 5 standard deviations.
    double sd = std::sqrt(n * ratio * (1 - ratio));
    EXPECT_NEAR(double(kept), n * (1 - ratio), 5 * sd + 0.5) << "ratio " << ratio;
    SCOPED_TRACE("ratio " + std::to_string(ratio));
    check({ref}, [&](Harness &h) {
      void *y = h.out(n);
      EXPECT_EQ(LOOMRT_OK, loomrt_dropout(h.s, h.dt, h.put(x), y, n, ratio, key, 5));
      return std::vector<std::vector<float>>{h.get(y, n)};
    });
  }
  // The offset is the element's place in a longer stream: a call on the
  // tail equals the tail of a call on the whole (a data-parallel rank's
  // rows of the global batch), and another step's key draws another mask.
  Harness h(dev, s, dt());
  void *xin = h.put(x), *whole = h.out(n), *tail = h.out(n - 1000), *other = h.out(n);
  ASSERT_EQ(LOOMRT_OK, loomrt_dropout(s, dt(), xin, whole, n, 0.3f, key, 0));
  ASSERT_EQ(LOOMRT_OK, loomrt_dropout(s, dt(), static_cast<char *>(xin) + 1000 * h.esize(),
                                      tail, n - 1000, 0.3f, key, 1000));
  ASSERT_EQ(LOOMRT_OK,
            loomrt_dropout(s, dt(), xin, other, n, 0.3f, loomrt_random_key(7, 4, 1), 0));
  std::vector<float> w = h.get(whole, n), t = h.get(tail, n - 1000), o = h.get(other, n);
  EXPECT_TRUE(std::equal(t.begin(), t.end(), w.begin() + 1000));
  size_t same = 0;
  for (size_t i = 0; i < n; ++i)
    same += (w[i] == 0) == (o[i] == 0);
  EXPECT_LT(double(same) / n, 0.7); // independent masks agree on 0.58 of elements
  // Bad ratios are errors with a message.
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_dropout(s, dt(), xin, whole, n, 1.0f, key, 0));
  EXPECT_NE(std::string(loomrt_last_error()).find("ratio"), std::string::npos);
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_dropout(s, dt(), xin, whole, n, -0.1f, key, 0));
}

/// float64 attention: o = softmax(scale q k^T + mask) v per block.
D attentionRef(const std::vector<double> &q, const std::vector<double> &k,
               const std::vector<double> &v, int64_t bh, int64_t t, int64_t s,
               int64_t dh, double scale, bool causal) {
  D o(bh * t * dh, 0.0);
  for (int64_t b = 0; b < bh; ++b)
    for (int64_t i = 0; i < t; ++i) {
      int64_t vis = causal ? i + (s - t) + 1 : s;
      std::vector<double> sc(vis);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < vis; ++j) {
        double acc = 0;
        for (int64_t c = 0; c < dh; ++c)
          acc += q[(b * t + i) * dh + c] * k[(b * s + j) * dh + c];
        sc[j] = scale * acc;
        mx = std::max(mx, sc[j]);
      }
      for (int64_t j = 0; j < vis; ++j)
        sum += (sc[j] = std::exp(sc[j] - mx));
      for (int64_t j = 0; j < vis; ++j)
        for (int64_t c = 0; c < dh; ++c)
          o[(b * t + i) * dh + c] += sc[j] / sum * v[(b * s + j) * dh + c];
    }
  return o;
}

TEST_P(Kernels, AttentionAndGradAgainstFiniteDifferences) {
  // Fewer queries than keys, so the causal mask's alignment is exercised.
  const int64_t bh = 2, t = 3, s = 4, dh = 5;
  const float scale = 0.4f;
  // bf16 keeps the probabilities in bf16 between the two GEMMs: 3e-2.
  const double bound = dt() == LOOMRT_BF16 ? 3e-2 : 1e-5;
  for (int causal = 0; causal < 2; ++causal) {
    std::vector<float> q = randn(bh * t * dh), k = randn(bh * s * dh),
                       v = randn(bh * s * dh), dout = randn(bh * t * dh);
    Harness probe(dev, s_(), dt());
    auto Q = probe.seen(q), K = probe.seen(k), V = probe.seen(v), G = probe.seen(dout);
    std::vector<double> qd(Q.begin(), Q.end()), kd(K.begin(), K.end()),
        vd(V.begin(), V.end());
    D o = attentionRef(qd, kd, vd, bh, t, s, dh, scale, causal);
    auto loss = [&]() {
      D oo = attentionRef(qd, kd, vd, bh, t, s, dh, scale, causal);
      double L = 0;
      for (size_t i = 0; i < oo.size(); ++i)
        L += G[i] * oo[i];
      return L;
    };
    auto fd = [&](std::vector<double> &x) {
      D g(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        double o0 = x[i];
        x[i] = o0 + 1e-6; double lp = loss();
        x[i] = o0 - 1e-6; double lm = loss();
        x[i] = o0;
        g[i] = (lp - lm) / 2e-6;
      }
      return g;
    };
    D dq = fd(qd), dk = fd(kd), dv = fd(vd);
    SCOPED_TRACE(causal ? "causal" : "full");
    check({o, dq, dk, dv}, [&](Harness &h) {
      void *ws = h.alloc(loomrt_attention_workspace_bytes(h.dt, bh, t, s, 1));
      void *qi = h.put(q), *ki = h.put(k), *vi = h.put(v), *oo = h.out(bh * t * dh);
      void *gq = h.out(bh * t * dh), *gk = h.out(bh * s * dh), *gv = h.out(bh * s * dh);
      EXPECT_EQ(LOOMRT_OK, loomrt_attention(h.s, h.dt, bh, t, s, dh, scale, causal,
                                            qi, ki, vi, oo, ws)) << loomrt_last_error();
      EXPECT_EQ(LOOMRT_OK, loomrt_attention_grad(h.s, h.dt, bh, t, s, dh, scale, causal,
                                                 qi, ki, vi, h.put(dout), gq, gk, gv, ws))
          << loomrt_last_error();
      return std::vector<std::vector<float>>{h.get(oo, bh * t * dh), h.get(gq, bh * t * dh),
                                             h.get(gk, bh * s * dh), h.get(gv, bh * s * dh)};
    }, bound);
  }
  float z = 0;
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_attention(s_(), dt(), 1, 5, 4, 2, 1.f, 1, &z, &z, &z, &z, &z));
  // The saved statistics are a buffer like the others.
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_attention_save(s_(), dt(), 1, 4, 4, 2, 1.f, 1, &z, &z, &z, &z, nullptr, &z));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_attention_grad_saved(s_(), dt(), 1, 4, 4, 2, 1.f, 1, &z, &z, &z, &z, nullptr,
                                        &z, &z, &z, &z, &z));
  EXPECT_EQ(16u, loomrt_attention_saved_bytes(2, 2));
}

// The shapes the GPU's fused (flash) kernels cover: bf16, head dim 64 or
// 128, t == s a multiple of 64 (two 64-row tiles here, so the online
// softmax rescales and the causal mask cuts inside a tile). Held to a float64 reference of
// the forward and of the analytic gradient (dV = P^T dO; dS = scale * P *
// (dP - rowsum(dP * P)) with dP = dO V^T; dQ = dS K; dK = dS^T Q). On the
// CPU, and on the GPU in fp32, this exercises the composed path.
TEST_P(Kernels, AttentionTiledShapesAgainstFloat64) {
  const int64_t bh = 2, t = 128, s = 128;
  const double bound = dt() == LOOMRT_BF16 ? 3e-2 : 1e-5;
  // Head sizes 64 (GPT-2) and 128 (Llama): the fused kernels' two shapes.
  for (int64_t dh : {64, 128})
  for (int causal = 0; causal < 2; ++causal) {
    const float scale = 1.0f / std::sqrt(float(dh));
    std::vector<float> q = randn(bh * t * dh), k = randn(bh * s * dh),
                       v = randn(bh * s * dh), dout = randn(bh * t * dh);
    Harness probe(dev, s_(), dt());
    auto Q = probe.seen(q), K = probe.seen(k), V = probe.seen(v), G = probe.seen(dout);
    std::vector<double> qd(Q.begin(), Q.end()), kd(K.begin(), K.end()), vd(V.begin(), V.end());
    D o = attentionRef(qd, kd, vd, bh, t, s, dh, scale, causal);
    D dq(bh * t * dh, 0.0), dk(bh * s * dh, 0.0), dv(bh * s * dh, 0.0);
    for (int64_t b = 0; b < bh; ++b)
      for (int64_t i = 0; i < t; ++i) {
        int64_t vis = causal ? i + (s - t) + 1 : s;
        std::vector<double> p(vis), dp(vis);
        double mx = -INFINITY, sum = 0, dot = 0;
        for (int64_t j = 0; j < vis; ++j) {
          double acc = 0;
          for (int64_t c = 0; c < dh; ++c)
            acc += qd[(b * t + i) * dh + c] * kd[(b * s + j) * dh + c];
          p[j] = scale * acc;
          mx = std::max(mx, p[j]);
        }
        for (int64_t j = 0; j < vis; ++j)
          sum += (p[j] = std::exp(p[j] - mx));
        for (int64_t j = 0; j < vis; ++j) {
          p[j] /= sum;
          double acc = 0;
          for (int64_t c = 0; c < dh; ++c) {
            acc += G[(b * t + i) * dh + c] * vd[(b * s + j) * dh + c];
            dv[(b * s + j) * dh + c] += p[j] * G[(b * t + i) * dh + c];
          }
          dp[j] = acc;
          dot += acc * p[j];
        }
        for (int64_t j = 0; j < vis; ++j) {
          double ds = scale * p[j] * (dp[j] - dot);
          for (int64_t c = 0; c < dh; ++c) {
            dq[(b * t + i) * dh + c] += ds * kd[(b * s + j) * dh + c];
            dk[(b * s + j) * dh + c] += ds * qd[(b * t + i) * dh + c];
          }
        }
      }
    for (bool fused : {false, true})
    for (bool saved : {false, true}) {
    // Both the composed path and the backends' fused kernels; the gradient
    // recomputing the forward, and reading its saved output and row
    // statistics (loomrt_attention_save / _grad_saved).
    loomrt::setFusedAttention(fused);
    SCOPED_TRACE("head size " + std::to_string(dh) + (causal ? ", causal" : ", full") +
                 (fused ? ", fused kernels allowed" : "") +
                 (saved ? ", saved statistics" : ""));
    check({o, dq, dk, dv}, [&](Harness &h) {
      void *ws = h.alloc(loomrt_attention_workspace_bytes(h.dt, bh, t, s, 1));
      void *st = h.alloc(loomrt_attention_saved_bytes(bh, t));
      void *qi = h.put(q), *ki = h.put(k), *vi = h.put(v), *oo = h.out(bh * t * dh);
      void *gq = h.out(bh * t * dh), *gk = h.out(bh * s * dh), *gv = h.out(bh * s * dh);
      if (saved) {
        EXPECT_EQ(LOOMRT_OK, loomrt_attention_save(h.s, h.dt, bh, t, s, dh, scale, causal, qi,
                                                   ki, vi, oo, st, ws))
            << loomrt_last_error();
        EXPECT_EQ(LOOMRT_OK,
                  loomrt_attention_grad_saved(h.s, h.dt, bh, t, s, dh, scale, causal, qi, ki, vi,
                                              oo, st, h.put(dout), gq, gk, gv, ws))
            << loomrt_last_error();
      } else {
        EXPECT_EQ(LOOMRT_OK, loomrt_attention(h.s, h.dt, bh, t, s, dh, scale, causal, qi, ki, vi,
                                              oo, ws)) << loomrt_last_error();
        EXPECT_EQ(LOOMRT_OK, loomrt_attention_grad(h.s, h.dt, bh, t, s, dh, scale, causal, qi,
                                                   ki, vi, h.put(dout), gq, gk, gv, ws))
            << loomrt_last_error();
      }
      return std::vector<std::vector<float>>{h.get(oo, bh * t * dh), h.get(gq, bh * t * dh),
                                             h.get(gk, bh * s * dh), h.get(gv, bh * s * dh)};
    }, bound);
    }
    loomrt::setFusedAttention(true);
  }
}

TEST(KernelsCpu, BadIndicesAreErrorsNotCrashes) {
  loomrt_device dev;
  loomrt_stream s;
  LOOMRT_ASSERT_OK(loomrt_device_open(LOOMRT_BACKEND_CPU, 0, &dev));
  LOOMRT_ASSERT_OK(loomrt_stream_create(dev, &s));
  float table[4] = {1, 2, 3, 4}, out[2], loss;
  int64_t idx[2] = {1, 4};
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_embedding(s, LOOMRT_F32, table, idx, out, 2, 1, 4));
  EXPECT_NE(std::string(loomrt_last_error()).find("index 4"), std::string::npos);
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_cross_entropy(s, LOOMRT_F32, table, idx, &loss, 2, 2));
  EXPECT_NE(std::string(loomrt_last_error()).find("label"), std::string::npos);
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_softmax(s, LOOMRT_F32, table, out, 3, 1, 1.f, 0, 2));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_unary(s, LOOMRT_EXP, loomrt_dtype(7), table, out, 1));
  loomrt_stream_destroy(s);
  loomrt_device_close(dev);
}

std::string paramName(const ::testing::TestParamInfo<Param> &info) {
  return std::string(loomrt_backend_name(info.param.backend)) +
         (info.param.dt == LOOMRT_BF16 ? "_bf16" : "_f32");
}

INSTANTIATE_TEST_SUITE_P(
    AllBackends, Kernels,
    ::testing::Values(Param{LOOMRT_BACKEND_CPU, LOOMRT_F32},
                      Param{LOOMRT_BACKEND_CPU, LOOMRT_BF16},
                      Param{LOOMRT_BACKEND_CUDA, LOOMRT_F32},
                      Param{LOOMRT_BACKEND_CUDA, LOOMRT_BF16}),
    paramName);

} // namespace
