// The planning interface loomc's step simulation prices a step with: the
// commands the GPU backend issues and the step arena's placement model.
#include "loomrt/loomrt.h"

#include <gtest/gtest.h>

namespace {

TEST(Plan, ReductionsThroughScratchWhenFewOutputsOverALongDimension) {
  // 4 chunks of 256 or more, fewer than 2^18 outputs: scratch + 2 kernels + free.
  EXPECT_EQ(loomrt_gpu_reduce_commands(1, 1024, 1), 4);
  EXPECT_EQ(loomrt_gpu_reduce_commands(16, 4096, 768), 4);
  EXPECT_EQ(loomrt_gpu_reduce_commands(1, 768, 1), 1);        // 3 chunks
  EXPECT_EQ(loomrt_gpu_reduce_commands(1, 2048, 16384), 4);   // a wide bias gradient
  EXPECT_EQ(loomrt_gpu_reduce_commands(512, 1024, 512), 1);   // 2^18 outputs
}

TEST(Plan, FusedAttentionForBf16SelfAttentionAtHeadSizes64And128) {
  EXPECT_EQ(loomrt_gpu_attention_commands(LOOMRT_BF16, 1024, 1024, 64, 0), 1);
  EXPECT_EQ(loomrt_gpu_attention_commands(LOOMRT_BF16, 1024, 1024, 64, 1), 3);
  EXPECT_EQ(loomrt_gpu_attention_commands(LOOMRT_BF16, 2048, 2048, 128, 0), 1);
  EXPECT_EQ(loomrt_gpu_attention_commands(LOOMRT_BF16, 2048, 2048, 128, 2), 2);
  EXPECT_EQ(loomrt_gpu_attention_commands(LOOMRT_BF16, 1024, 1024, 96, 0), 3);
  EXPECT_EQ(loomrt_gpu_attention_commands(LOOMRT_BF16, 1024, 1024, 256, 0), 3);
  EXPECT_EQ(loomrt_gpu_attention_commands(LOOMRT_F32, 1024, 1024, 64, 1), 7);
  EXPECT_EQ(loomrt_gpu_attention_commands(LOOMRT_BF16, 1000, 1000, 64, 0), 3);
  EXPECT_EQ(loomrt_gpu_attention_commands(LOOMRT_BF16, 64, 128, 64, 0), 3);
}

TEST(Plan, ArenaModelReusesReleasedRangesAndCountsFragmentation) {
  loomrt_arena_model m = loomrt_arena_model_create();
  int64_t a = loomrt_arena_model_alloc(m, 40u << 20);
  int64_t b = loomrt_arena_model_alloc(m, 20u << 20);
  EXPECT_EQ(loomrt_arena_model_reserved(m), size_t(64) << 20); // one block
  loomrt_arena_model_release(m, a);
  loomrt_arena_model_alloc(m, 30u << 20); // fits where a was
  EXPECT_EQ(loomrt_arena_model_reserved(m), size_t(64) << 20);
  loomrt_arena_model_alloc(m, 30u << 20); // does not fit beside b: a new block
  EXPECT_EQ(loomrt_arena_model_reserved(m), size_t(128) << 20);
  loomrt_arena_model_release(m, b);
  loomrt_arena_model_release(m, 12345); // unknown placements are ignored
  loomrt_arena_model_destroy(m);
}

} // namespace
