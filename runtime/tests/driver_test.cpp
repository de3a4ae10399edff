// The training driver refuses a program whose layout differs from the
// runtime's (a binary generated against an older train.h, still linking the
// rebuilt libloomrt.so) with a one-line error, before reading any other field.
#include "loomrt/train.h"

#include <gtest/gtest.h>

namespace {
/// `train --help` on a program the driver must refuse: its exit code and
/// what it wrote on stderr.
std::pair<int, std::string> refusal(const loomrt_program &p) {
  char arg0[] = "train", arg1[] = "--help";
  char *argv[] = {arg0, arg1, nullptr};
  testing::internal::CaptureStderr();
  int rc = loomrt_train_main(2, argv, &p);
  return {rc, testing::internal::GetCapturedStderr()};
}
} // namespace

TEST(Driver, RefusesAProgramOfAnotherLayout) {
  loomrt_program p{};
  p.abi = LOOMRT_TRAIN_ABI + 1;
  p.model = "test";
  auto [rc, err] = refusal(p);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("generated for another version of the runtime"), std::string::npos) << err;
}

// A variance refresh without a frozen step (a hand-built or loom-opt
// program; loomc refuses the flags) is refused in one line, not run.
TEST(Driver, RefusesAVarianceRefreshWithoutAFrozenStep) {
  loomrt_program p{};
  p.abi = LOOMRT_TRAIN_ABI;
  p.model = "test";
  p.variance_refresh = 3;
  auto [rc, err] = refusal(p);
  EXPECT_EQ(rc, 1);
  EXPECT_NE(err.find("variance refresh needs ZeRO stage 0"), std::string::npos) << err;
}

// The shared feature table (issue 41's probe: a /dev/shm object planted by
// another user under a computable name reached training). A rank that is
// not its host's rank 0 opens only the object local rank 0 names through
// the rendezvous, and only when fstat says it is this user's, private and
// of the expected size: a planted object (another owner, mode 0666, or the
// wrong size) is refused with a message and never mapped.
#include "driver/graph.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <vector>

namespace {
struct Card { // graph.cpp's ShareCard, as it travels
  char host[64];
  int32_t localRank, ok;
  char name[64]; // "/loomrt-features-" and 32 hex digits
};

std::string planted(const char *tag, size_t bytes, mode_t mode, bool otherOwner) {
  std::string name = "/loomrt-features-test-" + std::string(tag) + std::to_string(getpid());
  shm_unlink(name.c_str());
  int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(0, ftruncate(fd, off_t(bytes)));
  EXPECT_EQ(0, fchmod(fd, mode));
  if (otherOwner && geteuid() == 0)
    EXPECT_EQ(0, fchown(fd, 65534, 65534)); // nobody
  close(fd);
  return name;
}

bool refusedAsRank1(const std::string &name, std::string &err) {
  loomrt_input_desc table{};
  table.name = "features";
  table.dtype = LOOMRT_F32;
  table.rank = 2;
  table.shape[0] = 16;
  table.shape[1] = 4;
  loomrt::AllGather gather{2, [&](const void *mine, size_t n, void *all) {
    EXPECT_EQ(n, sizeof(Card));
    Card lead{};
    gethostname(lead.host, sizeof lead.host - 1);
    lead.localRank = 0;
    lead.ok = 1;
    std::snprintf(lead.name, sizeof lead.name, "%s", name.c_str());
    std::memcpy(all, &lead, n);
    std::memcpy(static_cast<char *>(all) + n, mine, n);
    return true;
  }};
  loomrt::SharedTable out;
  bool ok = loomrt::loadSharedFeatures("/nonexistent", table, 1, gather, out, err, 1);
  return !ok && out.map == nullptr;
}
} // namespace

TEST(SharedTable, PlantedObjectIsNeverMapped) {
  const size_t bytes = 4096 + 16 * 4 * 4; // header page + the table
  std::string err;
  std::string other = planted("owner", bytes, 0666, /*otherOwner=*/true);
  EXPECT_TRUE(refusedAsRank1(other, err));
  EXPECT_NE(err.find("not this user's own, private and of"), std::string::npos) << err;
  shm_unlink(other.c_str());
  std::string open = planted("mode", bytes, 0666, false);
  EXPECT_TRUE(refusedAsRank1(open, err));
  EXPECT_NE(err.find("not this user's own"), std::string::npos) << err;
  shm_unlink(open.c_str());
  std::string size = planted("size", bytes + 4096, 0600, false);
  EXPECT_TRUE(refusedAsRank1(size, err));
  EXPECT_NE(err.find("not this user's own"), std::string::npos) << err;
  shm_unlink(size.c_str());
  // The name the rendezvous gave does not exist (a stale message).
  EXPECT_TRUE(refusedAsRank1("/loomrt-features-never-made", err));
  EXPECT_NE(err.find("shm_open"), std::string::npos) << err;
}

#include "driver/replan.h"

#include <cmath>

// --replan's decision: predictions interpolated in log f between the
// table's factors (the end values beyond them), and a switch only to a plan
// predicted faster than the current one by more than the margin.
TEST(Replan, InterpolatesInLogRateAndKeepsCloseCalls) {
  const double factors[] = {0.5, 1.0, 2.0};
  // Plan 0 gains little from a faster CPU, plan 1 much: they cross at f=1.
  const double predicted[] = {2.0, 1.5, 1.25,   // plan 0
                              3.0, 1.5, 0.75};  // plan 1
  const char *plans[] = {"a", "b"};
  loomrt_replan r{1, 2, nullptr, plans, 3, factors, predicted, 1e9};
  std::vector<double> at = loomrt::driver::predictedAt(r, std::sqrt(2.0));
  EXPECT_NEAR(at[0], 1.375, 1e-12); // halfway between 1 and 2 on a log scale
  EXPECT_NEAR(at[1], 1.125, 1e-12);
  EXPECT_DOUBLE_EQ(loomrt::driver::predictedAt(r, 0.1)[1], 3.0); // clamped
  EXPECT_DOUBLE_EQ(loomrt::driver::predictedAt(r, 9.0)[0], 1.25);
  EXPECT_EQ(loomrt::driver::chooseCandidate(r, 0.5, 1), 0u); // the split moves to plan 0
  EXPECT_EQ(loomrt::driver::chooseCandidate(r, 2.0, 0), 1u); // and to plan 1
  EXPECT_EQ(loomrt::driver::chooseCandidate(r, 1.0, 0), 0u); // a tie keeps the plan
  EXPECT_EQ(loomrt::driver::chooseCandidate(r, 1.01, 0), 0u); // within 2%: kept
  std::string e = loomrt::driver::replanEvent(r, 3, 2e9, 2.0, 0, 1);
  EXPECT_EQ(e, "{\"event\": \"replan\", \"step\": 3, \"cpu_adam_params_per_s\": 2e+09, "
               "\"factor\": 2, \"from\": 0, \"to\": 1, \"plans\": [\"a\", \"b\"], "
               "\"predicted_step_s\": [1.25, 0.75]}");
}

// Tensor parallelism's initialisation: each rank's slice of a parameter is
// the full tensor's draw at the slice's places (a fused QKV of 3 groups
// split by rows, and a row-parallel weight split by columns), and the
// stream then stands where drawing the whole tensor leaves it.
#include "loomrt/loomrt.h"

TEST(Rng, FillSliceIsTheFullDrawsSlice) {
  const int64_t full[2] = {12, 5}; // 3 groups of 4 rows
  std::vector<float> whole(60), after(7);
  loomrt_rng r = loomrt_rng_create(7);
  ASSERT_EQ(loomrt_rng_fill(r, 2, 0.0, 1.0, whole.data(), whole.size()), LOOMRT_OK);
  ASSERT_EQ(loomrt_rng_fill(r, 2, 0.0, 1.0, after.data(), after.size()), LOOMRT_OK);
  loomrt_rng_destroy(r);
  for (int part = 0; part < 2; ++part) {
    // Rows: group g's rows [g*4 + part*2, +2).
    std::vector<float> mine(30), next(7);
    loomrt_rng s = loomrt_rng_create(7);
    ASSERT_EQ(loomrt_rng_fill_slice(s, 2, 0.0, 1.0, mine.data(), full, 2, 0, 3, 2, part, 0, 30),
              LOOMRT_OK);
    ASSERT_EQ(loomrt_rng_fill(s, 2, 0.0, 1.0, next.data(), next.size()), LOOMRT_OK);
    loomrt_rng_destroy(s);
    for (int lr = 0; lr < 6; ++lr) {
      int row = (lr / 2) * 4 + part * 2 + lr % 2;
      for (int c = 0; c < 5; ++c)
        EXPECT_EQ(mine[lr * 5 + c], whole[row * 5 + c]) << "part " << part << " row " << lr;
    }
    EXPECT_EQ(next, after);
    // Columns of a [5, 12] tensor, one group: elements [3, 3 + 20) of the slice.
    const int64_t wide[2] = {5, 12};
    std::vector<float> cols(20);
    loomrt_rng t = loomrt_rng_create(7);
    ASSERT_EQ(loomrt_rng_fill_slice(t, 2, 0.0, 1.0, cols.data(), wide, 2, 1, 1, 2, part, 3, 20),
              LOOMRT_OK);
    loomrt_rng_destroy(t);
    for (int i = 0; i < 20; ++i) {
      int li = 3 + i, row = li / 6, col = part * 6 + li % 6;
      EXPECT_EQ(cols[i], whole[row * 12 + col]) << "part " << part << " element " << li;
    }
  }
  loomrt_rng u = loomrt_rng_create(7);
  float x[4];
  EXPECT_NE(loomrt_rng_fill_slice(u, 2, 0.0, 1.0, x, full, 2, 0, 5, 2, 0, 0, 4), LOOMRT_OK)
      << "12 rows do not divide into 5 groups of 2 parts";
  loomrt_rng_destroy(u);
}

// 1-bit Adam's variance refresh (--variance-refresh=K after freeze step T):
// optimizer steps T + K, T + 3K, T + 7K, ... refresh; every other frozen
// step's bias correction stops at the last refresh (or T).
#include "driver/flags.h"

TEST(Driver, VarianceRefreshDoublesItsInterval) {
  using loomrt::driver::varianceRefresh;
  std::vector<int64_t> refreshes;
  for (int64_t t = 5; t <= 80; ++t)
    if (varianceRefresh(t, 4, 2).refresh)
      refreshes.push_back(t);
  EXPECT_EQ(refreshes, (std::vector<int64_t>{6, 10, 18, 34, 66}));
  EXPECT_EQ(varianceRefresh(5, 4, 2).last, 4);
  EXPECT_EQ(varianceRefresh(6, 4, 2).last, 4);  // the refresh itself: v last at 4
  EXPECT_EQ(varianceRefresh(7, 4, 2).last, 6);
  EXPECT_EQ(varianceRefresh(10, 4, 2).last, 6);
  EXPECT_EQ(varianceRefresh(11, 4, 2).last, 10);
  // Far steps end the walk without overflow.
  {
    auto r = varianceRefresh((int64_t(1) << 62) + 5, 1, 1);
    EXPECT_FALSE(r.refresh);
    EXPECT_GT(r.last, int64_t(1) << 60);
  }
}
