// Unit tests of a pipeline schedule's order and times (PipelineTimeline.h):
// 1F1B's and GPipe's step is (M + P - 1) units of balanced stages
// (Narayanan et al., SC 2021, §2.2), interleaving V chunks divides the
// bubble by about V, ZB-H1's deferred weight gradients fill the cool-down,
// the interleaved order is Megatron-LM's, and an order that waits on
// itself is found. Expected values are worked out by hand.
#include "loom/PipelineTimeline.h"

#include <gtest/gtest.h>

using namespace loom::cost;

namespace {

double makespan(PipelineShape shape, double f, double b, double w = 0) {
  auto order = pipelineOrder(shape);
  auto t = timePipeline(
      order, shape.stages,
      [&](const PipeUnit &u) {
        return u.work == PipeWork::Forward ? f / shape.chunks
               : u.work == PipeWork::Backward ? b / shape.chunks
                                              : w / shape.chunks;
      },
      0);
  EXPECT_TRUE(t.has_value());
  return t.value_or(-1);
}

TEST(PipelineTimeline, OneFOneBAndGPipeTakeMPlusPMinusOneUnits) {
  // P = 4, M = 8, a forward 1 and a backward 2: (8 + 3) x 3 = 33.
  EXPECT_DOUBLE_EQ(makespan({4, 1, 8, "1f1b"}, 1, 2), 33);
  EXPECT_DOUBLE_EQ(makespan({4, 1, 8, "gpipe"}, 1, 2), 33);
  EXPECT_DOUBLE_EQ(makespan({2, 1, 8, "1f1b"}, 1, 2), 27);
}

TEST(PipelineTimeline, OneFOneBWarmsUpWithPMinusSMinusOneForwards) {
  auto order = pipelineOrder({4, 1, 8, "1f1b"});
  ASSERT_EQ(order.size(), 4u);
  for (int64_t s = 0; s < 4; ++s) {
    ASSERT_EQ(order[s].size(), 16u);
    for (int64_t k = 0; k < 3 - s; ++k)
      EXPECT_EQ(order[s][k].work, PipeWork::Forward) << "stage " << s << " unit " << k;
    EXPECT_EQ(order[s][3 - s + 1].work, PipeWork::Backward) << "stage " << s;
  }
}

TEST(PipelineTimeline, InterleavingDividesTheBubble) {
  // The same work a stage (forward 1, backward 2 a micro-batch, split
  // over V chunks): 1F1B's bubble is (P - 1) x 3 = 9 over the 24 of work
  // (P = 4, M = 8); V = 2 about halves it (Narayanan et al., SC 2021:
  // (P - 1) / (V M)).
  double one = makespan({4, 1, 8, "1f1b"}, 1, 2);
  double two = makespan({4, 2, 8, "interleaved"}, 1, 2);
  EXPECT_DOUBLE_EQ(one - 24, 9);
  EXPECT_LT(two - 24, 9.0 * 0.6);
  EXPECT_GE(two - 24, 4.5);
}

TEST(PipelineTimeline, InterleavedOrderIsMegatrons) {
  // P = 2, V = 2, M = 4, stage 0: 2 (P - 1) + (V - 1) P = 4 warm-up
  // forwards (micro-batches 0, 1 on chunk 0, then on chunk 2), then a
  // forward and a backward in turn, the backwards on the chunks in reverse.
  auto order = pipelineOrder({2, 2, 4, "interleaved"});
  std::vector<std::tuple<int64_t, int64_t, PipeWork>> want = {
      {0, 0, PipeWork::Forward},  {1, 0, PipeWork::Forward},  {0, 2, PipeWork::Forward},
      {1, 2, PipeWork::Forward},  {2, 0, PipeWork::Forward},  {0, 2, PipeWork::Backward},
      {3, 0, PipeWork::Forward},  {1, 2, PipeWork::Backward}, {2, 2, PipeWork::Forward},
      {0, 0, PipeWork::Backward}, {3, 2, PipeWork::Forward},  {1, 0, PipeWork::Backward},
      {2, 2, PipeWork::Backward}, {3, 2, PipeWork::Backward}, {2, 0, PipeWork::Backward},
      {3, 0, PipeWork::Backward}};
  ASSERT_EQ(order[0].size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(order[0][i].microBatch, std::get<0>(want[i])) << i;
    EXPECT_EQ(order[0][i].chunk, std::get<1>(want[i])) << i;
    EXPECT_EQ(order[0][i].work, std::get<2>(want[i])) << i;
  }
}

TEST(PipelineTimeline, ZeroBubbleFillsTheCoolDown) {
  // A backward split into B = 1 and W = 1: ZB-H1 defers the cool-down's W,
  // so the step is shorter than 1F1B's with B + W = 2 in one piece.
  double whole = makespan({4, 1, 8, "1f1b"}, 1, 2);
  double split = makespan({4, 1, 8, "zb-h1"}, 1, 1, 1);
  EXPECT_LT(split, whole);
  EXPECT_GE(split, 24); // never less than the work
}

TEST(PipelineTimeline, TransfersAddToTheCriticalPath) {
  auto order = pipelineOrder({2, 1, 1, "1f1b"});
  auto t = timePipeline(
      order, 2, [](const PipeUnit &u) { return u.work == PipeWork::Forward ? 1.0 : 2.0; }, 0.5);
  // F0 [0,1], F1 [1.5,2.5], B1 [2.5,4.5], B0 [5,7].
  ASSERT_TRUE(t);
  EXPECT_DOUBLE_EQ(*t, 7);
}

TEST(PipelineTimeline, AnOrderThatWaitsOnItselfIsFound) {
  auto order = pipelineOrder({2, 1, 2, "1f1b"});
  // Stage 1 asked for micro-batch 1's backward before its forward ran.
  std::swap(order[1][0], order[1][1]);
  EXPECT_FALSE(timePipeline(order, 2, [](const PipeUnit &) { return 1.0; }, 0));
}

TEST(PipelineTimeline, ShapesAreChecked) {
  EXPECT_FALSE(checkPipelineShape({2, 2, 4, "interleaved"}));
  EXPECT_TRUE(checkPipelineShape({2, 2, 3, "interleaved"}));
  EXPECT_TRUE(checkPipelineShape({2, 1, 4, "interleaved"}));
  EXPECT_TRUE(checkPipelineShape({2, 2, 4, "1f1b"}));
  EXPECT_TRUE(checkPipelineShape({2, 1, 4, "zb-h2"}));
}

} // namespace
