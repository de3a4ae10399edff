// kernels_harness.h: what the kernel tests share (kernels_test.cpp:
// elementwise, copies, reductions, GEMMs; kernels_rows_test.cpp: row ops,
// embeddings, losses, sparse, optimizers, dropout, attention). Every compute kernel on every backend against a float64
// reference written here (not shared with the kernels), for fp32 and bf16
// storage; on the GPU each kernel is also compared with the CPU kernel.
//
// Error measure: ||out - ref||_2 / ||ref||_2 over the whole output.
// Bounds: fp32 storage 1e-5 (exp/erf/tanh in fp32 land near 1e-7; row
// reductions in fp32 on the GPU near 1e-6); bf16 storage 1e-2 (one bf16
// rounding of the output is 2^-9 = 2e-3 relative; inputs are rounded to
// bf16 before the reference sees them). GEMM in fp32 is held to 1e-5 too:
// cuBLAS must not use TF32 for CUBLAS_COMPUTE_32F.
#ifndef LOOMRT_TESTS_KERNELS_HARNESS_H
#define LOOMRT_TESTS_KERNELS_HARNESS_H

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

inline std::string paramName(const ::testing::TestParamInfo<Param> &info) {
  return std::string(loomrt_backend_name(info.param.backend)) +
         (info.param.dt == LOOMRT_BF16 ? "_bf16" : "_f32");
}

/// The backends and storage types every kernel test runs on.
#define LOOMRT_KERNEL_PARAMS                                                   \
  ::testing::Values(Param{LOOMRT_BACKEND_CPU, LOOMRT_F32},                    \
                    Param{LOOMRT_BACKEND_CPU, LOOMRT_BF16},                   \
                    Param{LOOMRT_BACKEND_CUDA, LOOMRT_F32},                   \
                    Param{LOOMRT_BACKEND_CUDA, LOOMRT_BF16})

} // namespace

#endif // LOOMRT_TESTS_KERNELS_HARNESS_H
