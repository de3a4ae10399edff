// adam_test.cpp: the Adam/AdamW update on every backend against a float64
// reference of torch.optim.Adam(W)'s formula, over several steps.
//
// Tolerance: each step is a handful of fp32 operations per element, so the
// float32 result stays within a few ulps of the float64 one per step; over 5
// steps we allow a relative error of 2e-5 on parameters (measured: ~1e-7) and
// on the moments. The GPU may contract a*b+c into FMAs, which is why the bound
// is not bitwise.
#include "backends.h"

#include <cmath>
#include <random>
#include <vector>

namespace {

struct Ref {
  std::vector<double> p, m, v;
};

void adamRef(Ref &r, const std::vector<float> &g, const loomrt_adam_config &c) {
  double bc1 = 1.0 - std::pow((double)c.beta1, (double)c.step);
  double bc2 = 1.0 - std::pow((double)c.beta2, (double)c.step);
  for (size_t i = 0; i < r.p.size(); ++i) {
    double gi = g[i];
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
             bool decoupled, float wd) {
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

TEST_P(Adam, RejectsBadConfig) {
  float x = 0;
  loomrt_adam_config cfg{1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 1, 0};
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_adam_f32(stream, &cfg, &x, &x, &x, &x, 1));
  cfg.step = 1;
  cfg.beta2 = 1.0f;
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_adam_f32(stream, &cfg, &x, &x, &x, &x, 1));
}

LOOMRT_INSTANTIATE_BACKENDS(Adam);

} // namespace
