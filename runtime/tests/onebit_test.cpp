// onebit_test.cpp: the 1-bit compressed all-reduce of 1-bit Adam (Tang et
// al. 2021, Algorithm 1; DeepSpeed's compressed_allreduce) built from the
// runtime's kernels, against a float64 reference of the algorithm written
// here from its definition, on every backend. The collectives are emulated
// by copies between the ranks' buffers in one process (the kernels are
// what is tested; the transport has its own tests):
//   worker r: c = m_r + e_r (padded with zeros to P elements),
//             scale_r = ||c|| / sqrt(P), signs, e_r = c - scale_r sign(c);
//   all-to-all: server k gets chunk k (P/W elements) of every worker's
//             signs, all-gather of the worker scales;
//   server k: a = (1/W) sum_r scale_r sign_r,k; c = a + s_k;
//             sscale_k = ||c|| / sqrt(P/W), signs, s_k = c - sscale_k sign(c);
//   all-gather: every rank decompresses sscale_k sign_k for every k.
// P is the size padded to a multiple of W * lcm(W, 8) (DeepSpeed's rule),
// so every chunk is whole bytes. Three rounds, so both error buffers carry
// over. Bound: relative L2 error 1e-5 (fp32 sums against float64; a sign
// decision differs only for |c| below fp32 rounding, not met by these
// draws).
#include "backends.h"

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

namespace {

using D = std::vector<double>;

/// Relative L2 error; `floor` (per element) keeps a buffer that should be
/// about 0 (a server error with one rank, which is exactly 0 in exact
/// arithmetic) from dividing rounding by nothing: errors are then measured
/// against values of size sqrt(floor), the momentum's.
double relErr(const std::vector<float> &got, const D &want, double floor = 0) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  den = std::max(den, floor * double(got.size()));
  return std::sqrt(num / (den > 0 ? den : 1));
}

/// The reference's compress: returns the scale, fills signs, updates err.
double refCompress(const D &x, D &err, std::vector<int> &sign) {
  size_t n = x.size();
  D c(n);
  double sq = 0;
  for (size_t i = 0; i < n; ++i) {
    c[i] = x[i] + err[i];
    sq += c[i] * c[i];
  }
  double scale = std::sqrt(sq / double(n));
  sign.resize(n);
  for (size_t i = 0; i < n; ++i) {
    sign[i] = c[i] >= 0 ? 1 : -1;
    err[i] = c[i] - scale * sign[i];
  }
  return scale;
}

class OneBit : public BufferTest {};

TEST_P(OneBit, CompressPacksSignsAndKeepsTheError) {
  const size_t n = 8 * 1237;
  std::mt19937 rng(3);
  std::normal_distribution<float> N(0.f, 1.f);
  std::vector<float> x(n), e(n);
  for (size_t i = 0; i < n; ++i)
    x[i] = N(rng), e[i] = 0.1f * N(rng);
  x[5] = -e[5]; // c = 0 exactly: sign(0) is +1
  float *dx = dev<float>(n), *de = dev<float>(n), *ds = dev<float>(1);
  uint8_t *dp = dev<uint8_t>(n / 8);
  put(dx, x);
  put(de, e);
  ASSERT_EQ(LOOMRT_OK, loomrt_onebit_compress(stream, dx, de, dp, ds, n));
  D rx(x.begin(), x.end()), re(e.begin(), e.end());
  std::vector<int> sign;
  double scale = refCompress(rx, re, sign);
  std::vector<uint8_t> packed = get(dp, n / 8);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i)
    wrong += ((packed[i / 8] >> (7 - i % 8)) & 1) != (sign[i] > 0);
  EXPECT_EQ(wrong, 0u);
  EXPECT_TRUE((packed[0] >> 2) & 1) << "sign(0) must be +1 (element 5)";
  EXPECT_NEAR(get(ds, 1)[0], scale, 1e-6 * scale);
  EXPECT_LT(relErr(get(de, n), re), 1e-5);
  // Decompress gives back scale * sign.
  float *dout = dev<float>(n);
  ASSERT_EQ(LOOMRT_OK, loomrt_onebit_decompress(stream, dp, ds, dout, 1, n));
  std::vector<float> out = get(dout, n);
  D want(n);
  for (size_t i = 0; i < n; ++i)
    want[i] = scale * sign[i];
  EXPECT_LT(relErr(out, want), 1e-6);
}

// The scale is the same bits on every call with the same inputs (issue
// 44: the GPU's block sums were added by atomicAdd, in the order the
// blocks finished, so two runs of one 1-bit Adam binary differed from the
// first frozen step). Large enough for hundreds of blocks.
TEST_P(OneBit, CompressIsDeterministic) {
  const size_t n = size_t(1) << 22;
  std::mt19937 rng(5);
  std::normal_distribution<float> N(0.f, 1.f);
  std::vector<float> x(n), e(n);
  for (size_t i = 0; i < n; ++i)
    x[i] = N(rng), e[i] = 0.1f * N(rng);
  float *dx = dev<float>(n), *de = dev<float>(n), *ds = dev<float>(1);
  uint8_t *dp = dev<uint8_t>(n / 8);
  put(dx, x);
  float first = 0;
  for (int run = 0; run < 20; ++run) {
    put(de, e);
    ASSERT_EQ(LOOMRT_OK, loomrt_onebit_compress(stream, dx, de, dp, ds, n));
    float scale = get(ds, 1)[0];
    if (run == 0)
      first = scale;
    ASSERT_EQ(std::memcmp(&scale, &first, sizeof scale), 0)
        << "run " << run << ": scale " << scale << " after " << first;
  }
}

TEST_P(OneBit, CompressedAllReduceMatchesFloat64Reference) {
  for (size_t world : {1, 2, 3, 4, 8})
    for (size_t n : {1001, 4099}) {
      SCOPED_TRACE("world " + std::to_string(world) + ", n " + std::to_string(n));
      size_t unit = world * std::lcm(world, size_t(8));
      size_t P = (n + unit - 1) / unit * unit, chunk = P / world;
      std::mt19937 rng(unsigned(world * 7919 + n));
      std::normal_distribution<float> N(0.f, 1.f);
      // Device state per rank: momentum (padded), worker error, server error.
      std::vector<float *> m(world), e(world), s(world), out(world);
      std::vector<uint8_t *> packed(world), spacked(world);
      std::vector<float *> scale(world), sscale(world);
      uint8_t *recv = dev<uint8_t>(P / 8);     // server k's received signs [W][chunk/8]
      float *recvScale = dev<float>(world);    // the worker scales, all-gathered
      uint8_t *gathered = dev<uint8_t>(P / 8); // every server's signs [W][chunk/8]
      float *gatheredScale = dev<float>(world), *avg = dev<float>(chunk);
      std::vector<D> rm(world, D(P, 0.0)), re(world, D(P, 0.0)), rs(world, D(chunk, 0.0));
      for (size_t r = 0; r < world; ++r) {
        m[r] = dev<float>(P), e[r] = dev<float>(P), s[r] = dev<float>(chunk);
        out[r] = dev<float>(P), scale[r] = dev<float>(1), sscale[r] = dev<float>(1);
        packed[r] = dev<uint8_t>(P / 8), spacked[r] = dev<uint8_t>(chunk / 8);
        put(e[r], std::vector<float>(P, 0.f));
        put(s[r], std::vector<float>(chunk, 0.f));
      }
      for (int round = 0; round < 3; ++round) {
        // Each rank's momentum: n values, zeros after them.
        for (size_t r = 0; r < world; ++r) {
          std::vector<float> h(P, 0.f);
          for (size_t i = 0; i < n; ++i)
            h[i] = N(rng);
          put(m[r], h);
          for (size_t i = 0; i < P; ++i)
            rm[r][i] = h[i];
        }
        // Workers.
        for (size_t r = 0; r < world; ++r)
          ASSERT_EQ(LOOMRT_OK, loomrt_onebit_compress(stream, m[r], e[r], packed[r], scale[r], P));
        std::vector<std::vector<int>> wsign(world);
        D wscale(world);
        for (size_t r = 0; r < world; ++r)
          wscale[r] = refCompress(rm[r], re[r], wsign[r]);
        // Servers: all-to-all of the chunks, all-gather of the scales.
        for (size_t k = 0; k < world; ++k) {
          for (size_t r = 0; r < world; ++r) {
            ASSERT_EQ(LOOMRT_OK, loomrt_memcpy_async(stream, recv + r * chunk / 8,
                                                     packed[r] + k * chunk / 8, chunk / 8));
            ASSERT_EQ(LOOMRT_OK, loomrt_memcpy_async(stream, recvScale + r, scale[r], 4));
          }
          ASSERT_EQ(LOOMRT_OK, loomrt_onebit_average(stream, recv, recvScale, avg, world, chunk));
          ASSERT_EQ(LOOMRT_OK,
                    loomrt_onebit_compress(stream, avg, s[k], spacked[k], sscale[k], chunk));
        }
        std::vector<std::vector<int>> ssign(world);
        D sscaleRef(world);
        for (size_t k = 0; k < world; ++k) {
          D a(chunk, 0.0);
          for (size_t i = 0; i < chunk; ++i) {
            for (size_t r = 0; r < world; ++r)
              a[i] += wscale[r] * wsign[r][k * chunk + i];
            a[i] /= double(world);
          }
          sscaleRef[k] = refCompress(a, rs[k], ssign[k]);
        }
        // All-gather of the servers' signs and scales; every rank decompresses.
        for (size_t k = 0; k < world; ++k) {
          ASSERT_EQ(LOOMRT_OK, loomrt_memcpy_async(stream, gathered + k * chunk / 8, spacked[k],
                                                   chunk / 8));
          ASSERT_EQ(LOOMRT_OK, loomrt_memcpy_async(stream, gatheredScale + k, sscale[k], 4));
        }
        D want(P);
        for (size_t k = 0; k < world; ++k)
          for (size_t i = 0; i < chunk; ++i)
            want[k * chunk + i] = sscaleRef[k] * ssign[k][i];
        for (size_t r = 0; r < world; ++r) {
          ASSERT_EQ(LOOMRT_OK,
                    loomrt_onebit_decompress(stream, gathered, gatheredScale, out[r], world, chunk));
          std::vector<float> got = get(out[r], P);
          EXPECT_LT(relErr(got, want), 1e-5) << "round " << round << ", rank " << r;
          EXPECT_LT(relErr(get(e[r], P), re[r], 1.0), 1e-5) << "worker error, round " << round;
          EXPECT_LT(relErr(get(s[r], chunk), rs[r], 1.0), 1e-5) << "server error, round " << round;
        }
      }
    }
}

TEST_P(OneBit, BadArgumentsAreErrors) {
  float *x = dev<float>(16), *e = dev<float>(16), *sc = dev<float>(1);
  uint8_t *p = dev<uint8_t>(2);
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_onebit_compress(stream, x, e, p, sc, 12));
  EXPECT_NE(std::string(loomrt_last_error()).find("multiple of 8"), std::string::npos);
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_onebit_compress(stream, x, nullptr, p, sc, 16));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_onebit_average(stream, p, sc, x, 0, 16));
}

} // namespace

LOOMRT_INSTANTIATE_BACKENDS(OneBit);
