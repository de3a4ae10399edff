// adam_multi_test.cpp: loomrt_adam_multi against the per-tensor calls on
// every backend, bit for bit: 60 tensors (more than one GPU launch's
// LOOMRT_ADAM_MULTI_BATCH), odd sizes and pointers off 16-byte alignment
// (the kernel's scalar path), fp32 and bf16 gradients, bf16 copies for some
// tensors and not others, three steps; and the refusals.
#include "backends.h"

#include <cstring>
#include <random>

namespace {

using AdamMulti = BufferTest;

/// One set of the 60 tensors' buffers (param, grad, m, v, bf16 copy).
struct Set {
  std::vector<float *> p, m, v;
  std::vector<void *> g;
  std::vector<uint16_t *> out;
};

TEST_P(AdamMulti, EqualsPerTensorCallsBitForBit) {
  const size_t sizes[] = {1, 3, 4, 13, 768, 4096, 4097, 2304, 100001, 65536};
  for (loomrt_dtype gdt : {LOOMRT_F32, LOOMRT_BF16}) {
    SCOPED_TRACE(gdt == LOOMRT_BF16 ? "bf16 gradients" : "fp32 gradients");
    std::mt19937 rng(7);
    std::normal_distribution<float> N(0.f, 1.f);
    const size_t count = 60;
    std::vector<size_t> n(count), off(count);
    for (size_t i = 0; i < count; ++i)
      n[i] = sizes[i % 10], off[i] = i % 3 == 2 ? 1 : 0; // every third tensor misaligned
    Set a, b;
    std::vector<std::vector<float>> hp(count), hg(count);
    for (size_t i = 0; i < count; ++i) {
      hp[i].resize(n[i] + off[i]);
      for (float &x : hp[i])
        x = N(rng);
    }
    for (Set *s : {&a, &b})
      for (size_t i = 0; i < count; ++i) {
        size_t len = n[i] + off[i];
        s->p.push_back(dev<float>(len) + off[i]);
        s->m.push_back(dev<float>(len) + off[i]);
        s->v.push_back(dev<float>(len) + off[i]);
        s->g.push_back(dev<float>(len) + off[i]); // bf16 gradients use the first half
        bool copy = gdt == LOOMRT_BF16 && i % 2 == 0;
        s->out.push_back(copy ? dev<uint16_t>(len) + off[i] : nullptr);
        put(s->p[i] - off[i], hp[i]);
        put(s->m[i] - off[i], std::vector<float>(len, 0.f));
        put(s->v[i] - off[i], std::vector<float>(len, 0.f));
      }
    loomrt_adam_config cfg{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 0};
    for (int step = 1; step <= 3; ++step) {
      cfg.step = step;
      std::vector<loomrt_adam_tensor> ts;
      for (size_t i = 0; i < count; ++i) {
        std::vector<float> g(n[i]);
        for (float &x : g)
          x = 0.1f * N(rng);
        if (gdt == LOOMRT_BF16) {
          std::vector<uint16_t> h(n[i]);
          for (size_t j = 0; j < n[i]; ++j) { // truncate: any bf16 bits will do
            uint32_t u;
            std::memcpy(&u, &g[j], 4);
            h[j] = uint16_t(u >> 16);
          }
          put(static_cast<uint16_t *>(a.g[i]), h);
          put(static_cast<uint16_t *>(b.g[i]), h);
          LOOMRT_ASSERT_OK(loomrt_adam_bf16grad(stream, &cfg, a.p[i],
                                                static_cast<const uint16_t *>(a.g[i]), a.m[i],
                                                a.v[i], a.out[i], n[i]));
        } else {
          put(static_cast<float *>(a.g[i]), g);
          put(static_cast<float *>(b.g[i]), g);
          LOOMRT_ASSERT_OK(loomrt_adam_f32(stream, &cfg, a.p[i],
                                           static_cast<const float *>(a.g[i]), a.m[i], a.v[i],
                                           n[i]));
        }
        ts.push_back({b.p[i], b.g[i], b.m[i], b.v[i], b.out[i], n[i]});
      }
      LOOMRT_ASSERT_OK(loomrt_adam_multi(stream, &cfg, gdt, ts.data(), ts.size()));
    }
    for (size_t i = 0; i < count; ++i) {
      SCOPED_TRACE("tensor " + std::to_string(i) + " of " + std::to_string(n[i]));
      EXPECT_EQ(get(a.p[i], n[i]), get(b.p[i], n[i]));
      EXPECT_EQ(get(a.m[i], n[i]), get(b.m[i], n[i]));
      EXPECT_EQ(get(a.v[i], n[i]), get(b.v[i], n[i]));
      if (a.out[i])
        EXPECT_EQ(get(a.out[i], n[i]), get(b.out[i], n[i]));
    }
  }
}

TEST_P(AdamMulti, RefusesBadTensors) {
  float *x = dev<float>(4);
  loomrt_adam_config cfg{1e-3f, 0.9f, 0.999f, 1e-8f, 0.f, 1, 1};
  loomrt_adam_tensor t{x, x, x, nullptr, nullptr, 4};
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_adam_multi(stream, &cfg, LOOMRT_F32, &t, 1));
  EXPECT_NE(std::string(loomrt_last_error()).find("null buffer in tensor 0"), std::string::npos);
  uint16_t *h = dev<uint16_t>(4);
  t = {x, x, x, x, h, 4};
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_adam_multi(stream, &cfg, LOOMRT_F32, &t, 1));
  EXPECT_NE(std::string(loomrt_last_error()).find("bf16 copy needs BF16"), std::string::npos);
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_adam_multi(stream, &cfg, LOOMRT_I64, &t, 1));
  cfg.step = 0;
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_adam_multi(stream, &cfg, LOOMRT_BF16, &t, 1));
  cfg.step = 1;
  EXPECT_EQ(LOOMRT_OK, loomrt_adam_multi(stream, &cfg, LOOMRT_BF16, &t, 0));
}

LOOMRT_INSTANTIATE_BACKENDS(AdamMulti);

} // namespace
