// The codec error model the cost model uses (CodecFidelity.h, issue 53),
// against Monte Carlo draws quantised by the runtime's own codec (the
// per-element code and value of runtime/common/kernel_math.h, scaled by the
// block's largest magnitude as loomrt_block_compress does), and the rules
// that turn measured loss gaps into what loomc and --plan=auto may use.
#include "loom/CodecFidelity.h"

#include "common/kernel_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

using namespace loom::cost;

namespace {

/// The RMS error of quantising N(0, 1) draws in blocks, as the runtime
/// codes them, relative to the draws' RMS.
double measuredError(loomrt_block_codec codec, int64_t block, int64_t blocks) {
  std::mt19937_64 rng(53);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(block));
  double err = 0, sum = 0;
  const float top = loomrt::blockCodecMax(codec);
  for (int64_t b = 0; b < blocks; ++b) {
    float amax = 0;
    for (float &v : x) {
      v = normal(rng);
      amax = std::max(amax, std::fabs(v));
    }
    float scale = amax > 0 ? amax / top : 1.0f;
    for (float v : x) {
      float back = loomrt::blockValue(codec, loomrt::blockCode(codec, v / scale)) * scale;
      err += double(back - v) * double(back - v);
      sum += double(v) * double(v);
    }
  }
  return std::sqrt(err / sum);
}

TEST(CodecFidelity, ExpectedBlockMaximumMatchesDraws) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> normal;
  for (int64_t n : {128, 2048}) {
    double m = 0, m2 = 0;
    const int reps = 4000;
    for (int r = 0; r < reps; ++r) {
      double mx = 0;
      for (int64_t i = 0; i < n; ++i)
        mx = std::max(mx, std::fabs(normal(rng)));
      m += mx / reps;
      m2 += mx * mx / reps;
    }
    EXPECT_NEAR(expectedMaxAbsNormal(n), m, 0.01 * m) << n;
    EXPECT_NEAR(expectedMaxSquareNormal(n), m2, 0.02 * m2) << n;
  }
}

TEST(CodecFidelity, ErrorModelMatchesTheRuntimesCodec) {
  struct Case {
    BlockCodec model;
    loomrt_block_codec runtime;
    int64_t block;
    double tolerance; // relative; int4's uniform-rounding assumption is coarse
  };
  for (Case c : {Case{BlockCodec::int8, LOOMRT_CODEC_INT8, 2048, 0.05},
                 Case{BlockCodec::int8, LOOMRT_CODEC_INT8, 128, 0.05},
                 Case{BlockCodec::int4, LOOMRT_CODEC_INT4, 128, 0.10},
                 Case{BlockCodec::int4, LOOMRT_CODEC_INT4, 512, 0.10},
                 Case{BlockCodec::fp8e4m3, LOOMRT_CODEC_FP8_E4M3, 128, 0.10}}) {
    double model = blockCodecRelativeError(c.model, c.block);
    double got = measuredError(c.runtime, c.block, 200000 / c.block + 50);
    EXPECT_NEAR(model, got, c.tolerance * got)
        << "codec " << int(c.runtime) << " block " << c.block << ": model " << model
        << ", the runtime's codec " << got;
  }
  // Finer blocks err less; int4 errs about 18x int8.
  EXPECT_LT(blockCodecRelativeError(BlockCodec::int4, 64),
            blockCodecRelativeError(BlockCodec::int4, 128));
  EXPECT_NEAR(blockCodecRelativeError(BlockCodec::int4, 128) /
                  blockCodecRelativeError(BlockCodec::int8, 128),
              127.0 / 7, 1e-9);
}

TEST(CodecFidelity, MeasuredGapsAndTheirBounds) {
  CompressionSetting none;
  EXPECT_TRUE(lossGap(none).known);
  EXPECT_EQ(lossGap(none).gap, 0);

  CompressionSetting zpp;
  zpp.qwzBlock = 2048;
  zpp.qgzBlock = 128;
  LossGap g = lossGap(zpp);
  ASSERT_TRUE(g.known);
  EXPECT_NEAR(g.gap, 0.0034, 1e-12);
  EXPECT_LE(g.gap, 0.01); // within the default --max-loss-gap
  // Finer blocks: bounded by the measured setting; coarser: not known.
  zpp.qgzBlock = 64;
  EXPECT_TRUE(lossGap(zpp).known);
  EXPECT_NE(lossGap(zpp).why.find("a bound"), std::string::npos);
  zpp.qgzBlock = 512;
  EXPECT_FALSE(lossGap(zpp).known);

  CompressionSetting onebit;
  onebit.onebit = true;
  EXPECT_GT(lossGap(onebit).gap, 0.01); // frozen for good: +10.2%
  onebit.varianceRefresh = 10;
  EXPECT_LE(lossGap(onebit).gap, 0.01);
  onebit.varianceRefresh = 25;
  EXPECT_TRUE(std::isinf(lossGap(onebit).gap)); // diverged
  onebit.varianceRefresh = 40;
  EXPECT_FALSE(lossGap(onebit).known);

  CompressionSetting diloco;
  diloco.diloco = "fp4";
  EXPECT_LE(lossGap(diloco).gap, 0.01);
  diloco.diloco = "fp32";
  EXPECT_EQ(describe(diloco), "");
}

} // namespace
