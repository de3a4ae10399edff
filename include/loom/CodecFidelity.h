//===- CodecFidelity.h - what a compression setting does to the loss -*- C++ -*-===//
//
// The cost model prices a codec's bytes (CostModel.h); this prices its
// error, so that a plan is chosen for speed only among settings that keep
// the loss within the user's bound (loomc --max-loss-gap, issue 53). Two
// parts:
//
//  * an error model: the relative RMS error a block codec adds to Gaussian
//    data, from the expected largest magnitude of a block (exact order
//    statistics by numerical integration) and the codec's grid;
//  * the measured loss gaps (bench/RESULTS.md, 2026-11-30): each setting's
//    mean loss over the last 50 of 500 steps against the uncompressed run
//    at 1.1B parameters on 2 H200s.
//
// A setting that was not measured is known only when each of its codecs
// errs no more than in a measured setting of the same technique: then
// that setting's gap bounds it (a finer grid does not train worse). Else
// its gap is unknown, and --plan=auto does not choose it.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_CODECFIDELITY_H
#define LOOM_CODECFIDELITY_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>

namespace loom::cost {

/// The block codecs of loomrt_block_compress (symmetric int8 and int4 with
/// scale = block max / 127 or / 7; FP8 E4M3 scaled to 448).
enum class BlockCodec { int8, int4, fp8e4m3 };

/// E[max |x|] and E[max x^2] over n draws of N(0, 1), by integrating the
/// order statistic's tail, 1 - (2 Phi(x) - 1)^n.
double expectedMaxAbsNormal(int64_t n);
double expectedMaxSquareNormal(int64_t n);

/// The RMS error the codec adds to N(0, 1) data in blocks of `block`,
/// relative to the data's RMS (1). Integers: rounding to a grid of step
/// max/q (q = 127 or 7) is uniform, step^2 / 12 on average over blocks.
/// FP8 E4M3: 3 mantissa bits, 2^-3 * sqrt(E[1/m^2] / 12) = 0.0265 of each
/// value (m log-uniform in [1, 2)); the subnormals below 2^-6 of 448 are
/// left out (under 1e-3 of a Gaussian block's values).
double blockCodecRelativeError(BlockCodec c, int64_t block);

/// ZeRO++'s blocks when --zeropp names none (qwz, qgz): the ones measured.
constexpr int64_t kQwzDefaultBlock = 2048, kQgzDefaultBlock = 128;

/// One compression setting of a plan.
struct CompressionSetting {
  // ZeRO++ (--zeropp): the block of qwZ's int8 weights and of qgZ's int4
  // gradients (0: not used).
  int64_t qwzBlock = 0, qgzBlock = 0;
  // 1-bit Adam (--optimizer=onebit-adam) and its --variance-refresh.
  bool onebit = false;
  int64_t varianceRefresh = 0;
  // Streaming DiLoCo's exchange codec (--diloco quant=; "" when no DiLoCo).
  std::string diloco;
};

/// What is known of a setting's loss gap.
struct LossGap {
  bool known = false;
  /// The mean loss over the last 50 of 500 steps above the uncompressed
  /// run's, as a fraction (measured, or the measured gap that bounds it).
  double gap = 0;
  /// What was measured and where, or why nothing is known.
  std::string why;
};

/// The loss gap of `s` (a setting without compression: known, 0).
LossGap lossGap(const CompressionSetting &s);

/// A short name of the setting ("qwZ int8/2048 + qgZ int4/128"), "" when
/// it compresses nothing.
std::string describe(const CompressionSetting &s);

} // namespace loom::cost

#endif // LOOM_CODECFIDELITY_H
