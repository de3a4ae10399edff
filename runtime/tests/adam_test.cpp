// adam_test.cpp: the Adam/AdamW update on every backend against a float64
// reference of torch.optim.Adam(W)'s formula, over several steps.
//
// Tolerance: each step is a handful of fp32 operations per element, so the
// float32 result stays within a few ulps of the float64 one per step; over 5
// steps we allow a relative error of 2e-5 on parameters (measured: ~1e-7) and
// on the moments. CpuGpuAdam.SameBits checks the CPU and GPU backends
// against each other bit for bit (no fused multiply-adds on either).
#include "backends.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace {

struct Ref {
  std::vector<double> p, m, v;
};

/// With freeze_step F (1-bit Adam after its freeze, loomrt.h): m takes g,
/// v stays, v's bias correction stays at step F.
void adamRef(Ref &r, const std::vector<float> &g, const loomrt_adam_config &c) {
  double bc1 = 1.0 - std::pow((double)c.beta1, (double)c.step);
  bool frozen = c.freeze_step > 0;
  double bc2 = 1.0 - std::pow((double)c.beta2,
                              (double)(frozen ? std::min(c.step, c.freeze_step) : c.step));
  for (size_t i = 0; i < r.p.size(); ++i) {
    double gi = g[i];
    if (frozen) {
      r.p[i] *= 1.0 - (double)c.lr * c.weight_decay;
      r.m[i] = gi;
      r.p[i] -= (double)c.lr / bc1 * r.m[i] / (std::sqrt(r.v[i]) / std::sqrt(bc2) + c.eps);
      continue;
    }
    if (c.decoupled_weight_decay)
      r.p[i] *= 1.0 - (double)c.lr * c.weight_decay;
    else
      gi += (double)c.weight_decay * r.p[i];
    r.m[i] = c.beta1 * r.m[i] + (1.0 - c.beta1) * gi;
    r.v[i] = c.beta2 * r.v[i] + (1.0 - c.beta2) * gi * gi;
    double denom = std::sqrt(r.v[i]) / std::sqrt(bc2) + c.eps;
    r.p[i] -= (double)c.lr / bc1 * r.m[i] / denom;
  }
}

double relErr(const std::vector<float> &a, const std::vector<double> &ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - ref[i]) * (a[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / (den > 0 ? den : 1));
}

using Adam = BackendTest;

void runCase(loomrt_device dev, loomrt_stream stream, size_t n, size_t offset,
             bool decoupled, float wd, int64_t freezeAfter = 0) {
  std::mt19937 rng(1234 + n + offset);
  std::normal_distribution<float> N(0.f, 1.f);
  std::vector<float> p(n), m(n, 0.f), v(n, 0.f), g(n);
  for (auto &x : p)
    x = N(rng);
  Ref ref{std::vector<double>(p.begin(), p.end()), std::vector<double>(n, 0.0),
          std::vector<double>(n, 0.0)};
  // Device buffers with `offset` floats of slack in front to test unaligned
  // pointers (the GPU kernel's scalar path).
  float *buf[4];
  for (auto &b : buf) {
    void *raw;
    LOOMRT_ASSERT_OK(
        loomrt_alloc(dev, LOOMRT_MEM_DEVICE, (n + offset) * 4, &raw));
    b = static_cast<float *>(raw) + offset;
  }
  float *dp = buf[0], *dg = buf[1], *dm = buf[2], *dv = buf[3];
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, dp, p.data(), n * 4));
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, dm, m.data(), n * 4));
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, dv, v.data(), n * 4));
  loomrt_adam_config cfg{1e-3f, 0.9f, 0.999f, 1e-8f, wd, decoupled ? 1 : 0, 0};
  for (int step = 1; step <= 5; ++step) {
    for (auto &x : g)
      x = N(rng) * 0.1f;
    cfg.step = step;
    // 1-bit Adam: plain Adam up to freezeAfter, the frozen update after.
    cfg.freeze_step = freezeAfter && step > freezeAfter ? freezeAfter : 0;
    adamRef(ref, g, cfg);
    LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, dg, g.data(), n * 4));
    LOOMRT_ASSERT_OK(loomrt_adam_f32(stream, &cfg, dp, dg, dm, dv, n));
  }
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, p.data(), dp, n * 4));
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, m.data(), dm, n * 4));
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, v.data(), dv, n * 4));
  LOOMRT_ASSERT_OK(loomrt_stream_synchronize(stream));
  EXPECT_LT(relErr(p, ref.p), 2e-5) << "n=" << n << " offset=" << offset;
  EXPECT_LT(relErr(m, ref.m), 2e-5);
  EXPECT_LT(relErr(v, ref.v), 2e-5);
  for (auto b : buf)
    loomrt_free(dev, LOOMRT_MEM_DEVICE, b - offset);
}

TEST_P(Adam, AdamWMatchesFloat64Reference) {
  runCase(dev, stream, 1 << 16, 0, true, 0.01f);
}
TEST_P(Adam, AdamWithL2MatchesFloat64Reference) {
  runCase(dev, stream, 4099, 0, false, 0.1f);
}
TEST_P(Adam, UnalignedAndOddSizes) {
  runCase(dev, stream, 13, 1, true, 0.0f);
  runCase(dev, stream, 100001, 3, true, 0.01f);
}

TEST_P(Adam, OnebitFrozenUpdateMatchesFloat64Reference) {
  runCase(dev, stream, 1 << 16, 0, true, 0.01f, 2);
  runCase(dev, stream, 1001, 1, true, 0.0f, 3);
}

TEST_P(Adam, RejectsBadConfig) {
  float x = 0;
  loomrt_adam_config cfg{1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 1, 0};
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_adam_f32(stream, &cfg, &x, &x, &x, &x, 1));
  cfg.step = 1;
  cfg.beta2 = 1.0f;
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_adam_f32(stream, &cfg, &x, &x, &x, &x, 1));
  // 1-bit Adam's frozen update decays decoupled only.
  cfg.beta2 = 0.999f;
  cfg.freeze_step = 1;
  cfg.decoupled_weight_decay = 0;
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_adam_f32(stream, &cfg, &x, &x, &x, &x, 1));
}

LOOMRT_INSTANTIATE_BACKENDS(Adam);

} // namespace

// Each vector path of the CPU kernel (scalar, AVX2, AVX-512 where the host
// has them), with and without streaming stores (> 32 MiB of state), at an
// unaligned offset, against the float64 reference.
#include "cpu/cpu_kernels.h"

namespace {
class CpuAdamIsa : public ::testing::TestWithParam<const char *> {};

TEST_P(CpuAdamIsa, MatchesFloat64Reference) {
  const char *isa = GetParam();
  if (std::string(loomrt::cpuAdamIsa(isa)) != isa)
    GTEST_SKIP() << isa << " not supported on this host";
  for (size_t n : {size_t(1000), size_t(3) << 20}) {
    for (size_t off : {size_t(0), size_t(5)}) {
      std::mt19937 rng(n + off);
      std::normal_distribution<float> N(0.f, 1.f);
      std::vector<float> buf(4 * (n + off + 16));
      float *p = buf.data() + off, *g = p + n + 16, *m = g + n + 16,
            *v = m + n + 16;
      Ref ref{std::vector<double>(n), std::vector<double>(n, 0.0),
              std::vector<double>(n, 0.0)};
      std::vector<float> gv(n);
      for (size_t i = 0; i < n; ++i) {
        p[i] = N(rng);
        ref.p[i] = p[i];
        m[i] = v[i] = 0.f;
      }
      loomrt_adam_config cfg{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 0};
      for (int step = 1; step <= 3; ++step) {
        for (size_t i = 0; i < n; ++i)
          g[i] = gv[i] = 0.1f * N(rng);
        cfg.step = step;
        adamRef(ref, gv, cfg);
        loomrt::cpuAdamF32(cfg, p, g, m, v, n, isa);
      }
      std::vector<float> pv(p, p + n), mv(m, m + n), vv(v, v + n);
      EXPECT_LT(relErr(pv, ref.p), 2e-5) << isa << " n=" << n << " off=" << off;
      EXPECT_LT(relErr(mv, ref.m), 2e-5);
      EXPECT_LT(relErr(vv, ref.v), 2e-5);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, CpuAdamIsa,
                         ::testing::Values("scalar", "avx2", "avx512"),
                         [](const auto &info) {
                           return std::string(info.param);
                         });
} // namespace

// The mixed-precision step: bf16 gradient in, bf16 weights out, on every
// backend and (on the CPU) every vector path.
#include "common/adam_math.h"

namespace {

TEST(Bf16, RoundsToNearestEven) {
  auto bits = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return loomrt::floatToBf16(f);
  };
  EXPECT_EQ(bits(0x3f800000u), 0x3f80);   // 1.0 exactly
  EXPECT_EQ(bits(0x3f808000u), 0x3f80);   // tie, even below
  EXPECT_EQ(bits(0x3f818000u), 0x3f82);   // tie, even above
  EXPECT_EQ(bits(0x3f808001u), 0x3f81);   // above the tie
  EXPECT_EQ(bits(0x7f800000u), 0x7f80);   // inf stays inf
  EXPECT_EQ(bits(0x7f7fffffu), 0x7f80);   // max float rounds to inf
  uint16_t nan = bits(0x7f800001u);       // a NaN stays a NaN
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x007f, 0);
  EXPECT_EQ(loomrt::bf16ToFloat(0xc040), -3.0f);
}

/// Runs `steps` mixed-precision steps through `update` and checks the fp32
/// state against the float64 reference and the bf16 output bit for bit.
template <typename Update>
void checkMixed(size_t n, Update update) {
  std::mt19937 rng(n);
  std::normal_distribution<float> N(0.f, 1.f);
  std::vector<float> p(n), m(n, 0.f), v(n, 0.f), gf(n);
  std::vector<uint16_t> g(n), out(n, 0xffff);
  for (auto &x : p)
    x = N(rng);
  Ref ref{std::vector<double>(p.begin(), p.end()), std::vector<double>(n, 0.0),
          std::vector<double>(n, 0.0)};
  loomrt_adam_config cfg{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 0};
  for (int step = 1; step <= 3; ++step) {
    for (size_t i = 0; i < n; ++i) {
      g[i] = loomrt::floatToBf16(0.1f * N(rng));
      gf[i] = loomrt::bf16ToFloat(g[i]);
    }
    cfg.step = step;
    adamRef(ref, gf, cfg);
    update(cfg, p, g, m, v, out);
  }
  EXPECT_LT(relErr(p, ref.p), 2e-5) << "n=" << n;
  EXPECT_LT(relErr(m, ref.m), 2e-5);
  EXPECT_LT(relErr(v, ref.v), 2e-5);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i)
    wrong += out[i] != loomrt::floatToBf16(p[i]);
  EXPECT_EQ(wrong, 0u) << "bf16 copies that are not round(p)";
}

using AdamMixed = BackendTest;

TEST_P(AdamMixed, Bf16GradientAndWeightsMatchReference) {
  for (size_t n : {size_t(37), size_t(100003)}) {
    float *dp, *dm, *dv;
    uint16_t *dg, *dout;
    void *raw;
    LOOMRT_ASSERT_OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, n * 4, &raw));
    dp = static_cast<float *>(raw);
    LOOMRT_ASSERT_OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, n * 4, &raw));
    dm = static_cast<float *>(raw);
    LOOMRT_ASSERT_OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, n * 4, &raw));
    dv = static_cast<float *>(raw);
    LOOMRT_ASSERT_OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, n * 2, &raw));
    dg = static_cast<uint16_t *>(raw);
    LOOMRT_ASSERT_OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, n * 2, &raw));
    dout = static_cast<uint16_t *>(raw);
    bool first = true;
    checkMixed(n, [&](const loomrt_adam_config &cfg, std::vector<float> &p,
                      std::vector<uint16_t> &g, std::vector<float> &m,
                      std::vector<float> &v, std::vector<uint16_t> &out) {
      if (first) {
        ASSERT_EQ(LOOMRT_OK, loomrt_memcpy_async(stream, dp, p.data(), n * 4));
        ASSERT_EQ(LOOMRT_OK, loomrt_memcpy_async(stream, dm, m.data(), n * 4));
        ASSERT_EQ(LOOMRT_OK, loomrt_memcpy_async(stream, dv, v.data(), n * 4));
        first = false;
      }
      ASSERT_EQ(LOOMRT_OK, loomrt_memcpy_async(stream, dg, g.data(), n * 2));
      ASSERT_EQ(LOOMRT_OK,
                loomrt_adam_bf16grad(stream, &cfg, dp, dg, dm, dv, dout, n))
          << loomrt_last_error();
      ASSERT_EQ(LOOMRT_OK, loomrt_memcpy_async(stream, p.data(), dp, n * 4));
      ASSERT_EQ(LOOMRT_OK, loomrt_memcpy_async(stream, m.data(), dm, n * 4));
      ASSERT_EQ(LOOMRT_OK, loomrt_memcpy_async(stream, v.data(), dv, n * 4));
      ASSERT_EQ(LOOMRT_OK, loomrt_memcpy_async(stream, out.data(), dout, n * 2));
      ASSERT_EQ(LOOMRT_OK, loomrt_stream_synchronize(stream));
    });
    for (void *b : {(void *)dp, (void *)dm, (void *)dv, (void *)dg, (void *)dout})
      loomrt_free(dev, LOOMRT_MEM_DEVICE, b);
  }
}

TEST_P(AdamMixed, OutputIsOptional) {
  float p = 1.f, m = 0.f, v = 0.f;
  uint16_t g = loomrt::floatToBf16(0.5f);
  loomrt_adam_config cfg{1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 1, 1};
  float *dp;
  void *raw;
  LOOMRT_ASSERT_OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, 64, &raw));
  dp = static_cast<float *>(raw);
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, dp, &p, 4));
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, dp + 1, &m, 4));
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, dp + 2, &v, 4));
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, dp + 3, &g, 2));
  LOOMRT_ASSERT_OK(loomrt_adam_bf16grad(
      stream, &cfg, dp, reinterpret_cast<uint16_t *>(dp + 3), dp + 1, dp + 2,
      nullptr, 1));
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, &p, dp, 4));
  LOOMRT_ASSERT_OK(loomrt_stream_synchronize(stream));
  EXPECT_NEAR(p, 1.f - 1e-3f, 1e-6f); // first Adam step moves by lr
  loomrt_free(dev, LOOMRT_MEM_DEVICE, dp);
}

LOOMRT_INSTANTIATE_BACKENDS(AdamMixed);

class CpuAdamMixedIsa : public ::testing::TestWithParam<const char *> {};

TEST_P(CpuAdamMixedIsa, MatchesReference) {
  const char *isa = GetParam();
  if (std::string(loomrt::cpuAdamIsa(isa)) != isa)
    GTEST_SKIP() << isa << " not supported on this host";
  for (size_t n : {size_t(1001), size_t(3) << 20})
    checkMixed(n, [&](const loomrt_adam_config &cfg, std::vector<float> &p,
                      std::vector<uint16_t> &g, std::vector<float> &m,
                      std::vector<float> &v, std::vector<uint16_t> &out) {
      loomrt::cpuAdamBf16Grad(cfg, p.data(), g.data(), m.data(), v.data(),
                              out.data(), p.size(), isa);
    });
}

INSTANTIATE_TEST_SUITE_P(Isa, CpuAdamMixedIsa,
                         ::testing::Values("scalar", "avx2", "avx512"),
                         [](const auto &info) {
                           return std::string(info.param);
                         });

} // namespace

// The CPU's and the GPU's Adam give the same bits (issue 44: an offloaded
// plan updates a streamed subgroup on the GPU and the rest on the CPU; the
// streamed parameters must train as the CPU would have trained them). fp32
// and bf16 gradients (with the bf16 weights written), AdamW and Adam with
// L2, 1-bit Adam's frozen update, 4 steps, odd sizes; both backends' whole
// paths (the CPU's SIMD loops and tails, the GPU's vector and scalar ones).
TEST(CpuGpuAdam, SameBits) {
  loomrt_backend gpu = loomrt_backend_available(LOOMRT_BACKEND_CUDA)  ? LOOMRT_BACKEND_CUDA
                       : loomrt_backend_available(LOOMRT_BACKEND_HIP) ? LOOMRT_BACKEND_HIP
                                                                      : LOOMRT_BACKEND_CPU;
  if (gpu == LOOMRT_BACKEND_CPU)
    GTEST_SKIP() << "no GPU backend with a device";
  const size_t n = 100003;
  for (int bf16 = 0; bf16 < 2; ++bf16)
    for (int decoupled = 0; decoupled < 2; ++decoupled) {
      std::vector<std::vector<float>> outP, outM, outV;
      std::vector<std::vector<uint16_t>> outW;
      for (loomrt_backend be : {LOOMRT_BACKEND_CPU, gpu}) {
        loomrt_device dev;
        loomrt_stream st;
        LOOMRT_ASSERT_OK(loomrt_device_open(be, 0, &dev));
        LOOMRT_ASSERT_OK(loomrt_stream_create(dev, &st));
        std::mt19937 rng(77);
        std::normal_distribution<float> N(0.f, 1.f);
        std::vector<float> p(n), zeros(n, 0.f), g(n);
        std::vector<uint16_t> gb(n), w(n);
        for (auto &x : p)
          x = N(rng);
        void *dp, *dm, *dv, *dg, *dw;
        for (void **b : {&dp, &dm, &dv, &dg, &dw})
          LOOMRT_ASSERT_OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, n * 4, b));
        LOOMRT_ASSERT_OK(loomrt_memcpy_async(st, dp, p.data(), n * 4));
        LOOMRT_ASSERT_OK(loomrt_memcpy_async(st, dm, zeros.data(), n * 4));
        LOOMRT_ASSERT_OK(loomrt_memcpy_async(st, dv, zeros.data(), n * 4));
        loomrt_adam_config cfg{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, decoupled, 0};
        for (int step = 1; step <= 4; ++step) {
          for (size_t i = 0; i < n; ++i) {
            g[i] = N(rng) * 0.1f;
            gb[i] = loomrt::floatToBf16(g[i]);
          }
          cfg.step = step;
          cfg.freeze_step = decoupled && step == 4 ? 3 : 0; // 1-bit Adam's frozen step
          if (bf16) {
            LOOMRT_ASSERT_OK(loomrt_memcpy_async(st, dg, gb.data(), n * 2));
            LOOMRT_ASSERT_OK(loomrt_adam_bf16grad(st, &cfg, static_cast<float *>(dp),
                                                  static_cast<uint16_t *>(dg),
                                                  static_cast<float *>(dm),
                                                  static_cast<float *>(dv),
                                                  static_cast<uint16_t *>(dw), n));
          } else {
            LOOMRT_ASSERT_OK(loomrt_memcpy_async(st, dg, g.data(), n * 4));
            LOOMRT_ASSERT_OK(loomrt_adam_f32(st, &cfg, static_cast<float *>(dp),
                                             static_cast<float *>(dg), static_cast<float *>(dm),
                                             static_cast<float *>(dv), n));
          }
        }
        std::vector<float> m(n), v(n);
        LOOMRT_ASSERT_OK(loomrt_memcpy_async(st, p.data(), dp, n * 4));
        LOOMRT_ASSERT_OK(loomrt_memcpy_async(st, m.data(), dm, n * 4));
        LOOMRT_ASSERT_OK(loomrt_memcpy_async(st, v.data(), dv, n * 4));
        if (bf16)
          LOOMRT_ASSERT_OK(loomrt_memcpy_async(st, w.data(), dw, n * 2));
        LOOMRT_ASSERT_OK(loomrt_stream_synchronize(st));
        outP.push_back(p);
        outM.push_back(m);
        outV.push_back(v);
        outW.push_back(w);
        for (void *b : {dp, dm, dv, dg, dw})
          loomrt_free(dev, LOOMRT_MEM_DEVICE, b);
        loomrt_stream_destroy(st);
        loomrt_device_close(dev);
      }
      auto differing = [](const auto &a, const auto &b) {
        size_t d = 0;
        for (size_t i = 0; i < a.size(); ++i)
          d += std::memcmp(&a[i], &b[i], sizeof a[i]) != 0;
        return d;
      };
      SCOPED_TRACE(std::string(bf16 ? "bf16" : "fp32") + " gradients, " +
                   (decoupled ? "AdamW and 1-bit Adam's frozen step" : "Adam with L2"));
      EXPECT_EQ(differing(outP[0], outP[1]), 0u) << "parameters";
      EXPECT_EQ(differing(outM[0], outM[1]), 0u) << "first moments";
      EXPECT_EQ(differing(outV[0], outV[1]), 0u) << "second moments";
      EXPECT_EQ(differing(outW[0], outW[1]), 0u) << "bf16 weights";
    }
}

// A refresh's update of v stands for k steps: v = b2^k v + (1 - b2^k) g^2,
// with the bias correction of b2 itself at the step (not of b2^k).
TEST(AdamScalars, VarianceStepsRaiseTheEmaFactorOnly) {
  loomrt_adam_config one{1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 1, 50, 0, 0};
  loomrt_adam_config k{1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 1, 50, 0, 30};
  loomrt::AdamScalars a = loomrt::adamScalars(one), b = loomrt::adamScalars(k);
  EXPECT_FLOAT_EQ(a.beta2, 0.999f);
  const double b30 = std::pow(double(0.999f), 30); // of the float beta2, as the runtime
  EXPECT_FLOAT_EQ(b.beta2, float(b30));
  EXPECT_EQ(a.invBc2Sqrt, b.invBc2Sqrt);
  EXPECT_EQ(a.stepSize, b.stepSize);
  float p = 1.f, m = 0.f, v = 0.5f;
  loomrt::adamElement(b, p, 2.f, m, v);
  EXPECT_NEAR(v, b30 * 0.5 + (1 - b30) * 4.0, 1e-6);
}
