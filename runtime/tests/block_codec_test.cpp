// block_codec_test.cpp: the block-scaled codecs of loomrt_block_compress
// (OCP FP8 E4M3, MX FP4 E2M1, symmetric int8 and int4) against references
// written here from the formats' definitions, by another method than the
// runtime's: every code's value from its fields, and the code of a value
// by searching all codes for the nearest (ties to the even code, beyond
// the largest value the largest), on every backend.
#include "backends.h"

#include "common/kernel_math.h"

#include <cmath>
#include <random>
#include <vector>

namespace {

/// A code's value from the format's definition (sign, exponent field,
/// mantissa field, bias): E4M3 bias 7, 3 mantissa bits; E2M1 bias 1, 1 bit.
/// Integers: two's complement in 8 or 4 bits.
double defined(loomrt_block_codec c, unsigned code) {
  if (c == LOOMRT_CODEC_INT8)
    return double(code >= 128 ? int(code) - 256 : int(code));
  if (c == LOOMRT_CODEC_INT4)
    return double(code >= 8 ? int(code) - 16 : int(code));
  int mbits = c == LOOMRT_CODEC_FP8_E4M3 ? 3 : 1, ebits = c == LOOMRT_CODEC_FP8_E4M3 ? 4 : 2;
  int bias = c == LOOMRT_CODEC_FP8_E4M3 ? 7 : 1;
  unsigned m = code & ((1u << mbits) - 1), e = (code >> mbits) & ((1u << ebits) - 1);
  bool neg = (code >> (mbits + ebits)) & 1;
  double mag = e == 0 ? std::ldexp(double(m), 1 - bias - mbits)
                      : std::ldexp(1.0 + double(m) / double(1 << mbits), int(e) - bias);
  return neg ? -mag : mag;
}

unsigned codes(loomrt_block_codec c) {
  return c == LOOMRT_CODEC_FP8_E4M3 || c == LOOMRT_CODEC_INT8 ? 256 : 16;
}
/// The largest magnitude of each codec.
double top(loomrt_block_codec c) {
  return c == LOOMRT_CODEC_FP8_E4M3 ? 448.0 : c == LOOMRT_CODEC_FP4_E2M1 ? 6.0
       : c == LOOMRT_CODEC_INT8     ? 127.0 : 7.0;
}
bool isNaNCode(loomrt_block_codec c, unsigned code) {
  return c == LOOMRT_CODEC_FP8_E4M3 && (code & 0x7F) == 0x7F;
}

/// The nearest code by search: ties to the even code (mantissa bit 0, or
/// an even integer); zero has one code (0). Code codes/2 is negative zero
/// for the floats and -128 / -8 for the integers, outside the symmetric
/// range: never produced.
unsigned nearest(loomrt_block_codec c, double v) {
  unsigned best = 0;
  double bestErr = std::fabs(v);
  for (unsigned code = 1; code < codes(c); ++code) {
    if (isNaNCode(c, code) || code == codes(c) / 2) // NaN, negative zero
      continue;
    double err = std::fabs(v - defined(c, code));
    if (err < bestErr || (err == bestErr && (code & 1) == 0 && (best & 1) == 1)) {
      best = code;
      bestErr = err;
    }
  }
  return best;
}

const loomrt_block_codec kCodecs[] = {LOOMRT_CODEC_FP8_E4M3, LOOMRT_CODEC_FP4_E2M1,
                                       LOOMRT_CODEC_INT8, LOOMRT_CODEC_INT4};

TEST(BlockCodec, CodeValuesAreTheFormatsDefinitions) {
  using namespace loomrt;
  for (loomrt_block_codec c : kCodecs)
    for (unsigned code = 0; code < codes(c); ++code)
      if (!isNaNCode(c, code) && code != codes(c) / 2)
        EXPECT_EQ(double(blockValue(c, uint8_t(code))), defined(c, code))
            << "codec " << int(c) << ", code " << code;
  EXPECT_EQ(e4m3Value(0x7E), 448.0f);
  EXPECT_EQ(e4m3Value(0x01), 0x1p-9f);
  EXPECT_EQ(e2m1Value(0x7), 6.0f);
  EXPECT_EQ(blockValue(LOOMRT_CODEC_INT8, 0x81), -127.0f);
  EXPECT_EQ(blockValue(LOOMRT_CODEC_INT4, 0x9), -7.0f);
}

TEST(BlockCodec, EncodingIsTheNearestCodeTiesToEven) {
  using namespace loomrt;
  std::vector<float> values = {0.0f, -0.0f, 1e-30f, 0x1p-10f, 3 * 0x1p-10f, 0x1p-6f,
                               448.0f, 460.0f, 464.0f, 1e6f, -1e6f, 0.25f, 0.75f, 1.25f,
                               1.75f, 2.5f, 3.5f, 5.0f, 7.0f, 7.5f, 126.5f, 127.5f, 200.0f};
  // Every midpoint between neighbouring codes, and points just beside it.
  for (loomrt_block_codec c : kCodecs)
    for (unsigned code = 0; code + 1 < codes(c) / 2; ++code) {
      if (isNaNCode(c, code + 1))
        continue;
      float mid = float((defined(c, code) + defined(c, code + 1)) / 2);
      for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)})
        values.push_back(v), values.push_back(-v);
    }
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> U(-500.f, 500.f);
  std::normal_distribution<float> N(0.f, 1.f);
  for (int i = 0; i < 20000; ++i)
    values.push_back(U(rng)), values.push_back(N(rng)), values.push_back(N(rng) * 0.01f);
  for (loomrt_block_codec c : kCodecs) {
    size_t bad = 0;
    for (float v : values) {
      unsigned want = nearest(c, v), got = blockCode(c, v);
      bad += got != want;
      if (got != want && bad < 5)
        ADD_FAILURE() << "codec " << int(c) << ": code(" << v << ") = " << got << ", nearest "
                      << want;
    }
    EXPECT_EQ(bad, 0u) << "codec " << int(c);
  }
}

class BlockCodecs : public BufferTest {};

TEST_P(BlockCodecs, CompressDecompressMatchTheReference) {
  for (loomrt_block_codec c : kCodecs)
    for (size_t block : {size_t(32), size_t(128)}) {
      SCOPED_TRACE("codec " + std::to_string(int(c)) + ", block " + std::to_string(block));
      const size_t n = block * 37;
      std::mt19937 rng(unsigned(block) + 17 * unsigned(c));
      std::normal_distribution<float> N(0.f, 1.f);
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i)
        x[i] = N(rng) * float(1 + i / block); // a different range each block
      for (size_t i = 0; i < block; ++i)
        x[3 * block + i] = 0.0f; // a block of zeros: scale 1, codes 0
      size_t bytes = loomrt_block_packed_bytes(c, n, block);
      ASSERT_EQ(bytes, 4 * (n / block) + (codes(c) == 256 ? n : n / 2));
      float *dx = dev<float>(n), *dout = dev<float>(n);
      uint8_t *dp = dev<uint8_t>(bytes);
      put(dx, x);
      ASSERT_EQ(LOOMRT_OK, loomrt_block_compress(stream, c, dx, dp, n, block));
      ASSERT_EQ(LOOMRT_OK, loomrt_block_decompress(stream, c, dp, dout, n, block));
      std::vector<uint8_t> packed = get(dp, bytes);
      std::vector<float> out = get(dout, n);
      const float *scales = reinterpret_cast<const float *>(packed.data());
      size_t wrong = 0;
      for (size_t b = 0; b < n / block; ++b) {
        float amax = 0;
        for (size_t i = 0; i < block; ++i)
          amax = std::max(amax, std::fabs(x[b * block + i]));
        float scale = amax > 0 ? float(amax / top(c)) : 1.0f;
        EXPECT_EQ(scales[b], scale) << "block " << b;
        for (size_t i = b * block; i < (b + 1) * block; ++i) {
          unsigned code = nearest(c, double(x[i] / scale));
          float want = float(defined(c, code)) * scale;
          wrong += out[i] != want;
        }
      }
      EXPECT_EQ(wrong, 0u);
      // The quantisation error: at most half a step of the codec at the
      // block's top (relative to the block's largest value: 1/16 for E4M3's
      // top binade, 1/6 for E2M1's, half an integer step for int8 and int4).
      double worst = 0;
      for (size_t i = 0; i < n; ++i) {
        size_t b = i / block;
        float amax = 0;
        for (size_t j = 0; j < block; ++j)
          amax = std::max(amax, std::fabs(x[b * block + j]));
        if (amax > 0)
          worst = std::max(worst, std::fabs(double(out[i]) - x[i]) / amax);
      }
      const double bound = c == LOOMRT_CODEC_FP8_E4M3   ? 1.0 / 28
                           : c == LOOMRT_CODEC_FP4_E2M1 ? 1.0 / 6
                                                        : 0.5 / top(c);
      EXPECT_LE(worst, bound + 1e-6);
    }
}

TEST_P(BlockCodecs, RefusesBadShapes) {
  float *x = dev<float>(64);
  uint8_t *p = dev<uint8_t>(512);
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_block_compress(stream, LOOMRT_CODEC_FP8_E4M3, x, p, 60, 32));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_block_compress(stream, LOOMRT_CODEC_FP4_E2M1, x, p, 63, 21));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_block_decompress(stream, loomrt_block_codec(7), p, x, 64, 32));
}

LOOMRT_INSTANTIATE_BACKENDS(BlockCodecs);

} // namespace
