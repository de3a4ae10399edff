// Unit tests of loom-plan-arena's placement (planArenaOffsets): on random
// lifetimes, no two buffers alive at once share a byte, every offset is
// aligned, and the region is at least the most bytes alive at once (a lower
// bound no placement beats) and close to it; worked cases by hand.
#include "loom/Passes/LoomRT.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <tuple>

using mlir::loom::ArenaInterval;
using mlir::loom::planArenaOffsets;

namespace {

int64_t rounded(int64_t b) { return std::max<int64_t>((b + 255) / 256 * 256, 256); }

/// The most rounded bytes alive at any position.
int64_t peakAlive(const std::vector<ArenaInterval> &bufs) {
  std::vector<std::pair<int64_t, int64_t>> ev; // position, +/- bytes (frees first)
  for (const ArenaInterval &b : bufs) {
    ev.push_back({b.start, rounded(b.bytes)});
    ev.push_back({b.end, -rounded(b.bytes)});
  }
  std::sort(ev.begin(), ev.end());
  int64_t cur = 0, peak = 0;
  for (auto [p, d] : ev)
    peak = std::max(peak, cur += d);
  return peak;
}

TEST(PlanArena, WorkedByHand) {
  // %a 4096 [1, 4), %b 2048 [2, 6), %c 1000 [5, 7), %d 100 [6, 9).
  std::vector<ArenaInterval> bufs = {{4096, 1, 4}, {2048, 2, 6}, {1000, 5, 7}, {100, 6, 9}};
  llvm::SmallVector<int64_t> off;
  EXPECT_EQ(planArenaOffsets(bufs, off), 6144);
  EXPECT_EQ(off[0], 0);
  EXPECT_EQ(off[1], 4096);
  EXPECT_EQ(off[2], 0);   // %a's bytes, once %a is freed
  EXPECT_EQ(off[3], 1024); // beside %c, under %b
  // Nothing, and one empty buffer (256 bytes, as the runtime rounds it).
  EXPECT_EQ(planArenaOffsets({}, off), 0);
  EXPECT_EQ(planArenaOffsets({{0, 1, 2}}, off), 256);
}

TEST(PlanArena, RandomLifetimesNeverOverlap) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 200; ++round) {
    int n = 1 + int(rng() % 300);
    std::vector<ArenaInterval> bufs;
    for (int i = 0; i < n; ++i) {
      int64_t start = int64_t(rng() % 1000);
      // Mostly short lifetimes (activations), some to the end (results).
      int64_t end = rng() % 10 == 0 ? INT64_MAX : start + 1 + int64_t(rng() % 100);
      int64_t bytes = rng() % 4 == 0 ? int64_t(rng() % (64 << 20)) : int64_t(rng() % 100000);
      bufs.push_back({bytes, start, end});
    }
    llvm::SmallVector<int64_t> off;
    int64_t size = planArenaOffsets(bufs, off);
    ASSERT_EQ(off.size(), bufs.size());
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(off[i] % 256, 0);
      EXPECT_LE(off[i] + rounded(bufs[i].bytes), size);
      for (int j = i + 1; j < n; ++j) {
        bool together = bufs[i].start < bufs[j].end && bufs[j].start < bufs[i].end;
        bool apart = off[i] + rounded(bufs[i].bytes) <= off[j] ||
                     off[j] + rounded(bufs[j].bytes) <= off[i];
        ASSERT_TRUE(!together || apart) << "round " << round << ": buffers " << i << " and " << j;
      }
    }
    int64_t peak = peakAlive(bufs);
    EXPECT_GE(size, peak);
    // Greedy by size is a heuristic; on these it stays within 1.5x of the
    // bound (the runtime's online arena is 1.7x on the 6.7B Llama step).
    EXPECT_LE(size, peak * 3 / 2) << "round " << round;
  }
}

/// The placement as loom-plan-arena made it before its overlap query was a
/// segment tree: every placed buffer scanned for each new one.
std::vector<int64_t> quadraticPlacement(const std::vector<ArenaInterval> &bufs) {
  std::vector<size_t> order(bufs.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return std::make_tuple(rounded(bufs[b].bytes), bufs[a].start, a) <
           std::make_tuple(rounded(bufs[a].bytes), bufs[b].start, b);
  });
  std::vector<int64_t> off(bufs.size(), -1);
  std::vector<size_t> placed;
  for (size_t i : order) {
    std::vector<std::pair<int64_t, int64_t>> taken;
    for (size_t j : placed)
      if (bufs[j].start < bufs[i].end && bufs[i].start < bufs[j].end)
        taken.push_back({off[j], off[j] + rounded(bufs[j].bytes)});
    std::sort(taken.begin(), taken.end());
    int64_t at = 0;
    for (auto [lo, hi] : taken) {
      if (at + rounded(bufs[i].bytes) <= lo)
        break;
      at = std::max(at, hi);
    }
    off[i] = at;
    placed.push_back(i);
  }
  return off;
}

TEST(PlanArena, SameAsTheQuadraticScan) {
  // Equal starts, empty lifetimes (start == end) and lifetimes to the end
  // included: the segment tree must find exactly the scan's overlaps.
  std::mt19937_64 rng(11);
  for (int round = 0; round < 100; ++round) {
    int n = 1 + int(rng() % 400);
    std::vector<ArenaInterval> bufs;
    for (int i = 0; i < n; ++i) {
      int64_t start = int64_t(rng() % 200);
      int64_t len = rng() % 8 == 0 ? 0 : int64_t(rng() % 60);
      int64_t end = rng() % 10 == 0 ? INT64_MAX : start + len;
      bufs.push_back({int64_t(rng() % 5000), start, end});
    }
    llvm::SmallVector<int64_t> off;
    planArenaOffsets(bufs, off);
    std::vector<int64_t> want = quadraticPlacement(bufs);
    for (int i = 0; i < n; ++i)
      ASSERT_EQ(off[i], want[i]) << "round " << round << ": buffer " << i;
  }
}

} // namespace
