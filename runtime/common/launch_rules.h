// launch_rules.h: the GPU backend's choices that decide how many commands
// (kernel launches, stream-ordered scratch allocations) an op issues. The
// kernels (gpu/gpu_ops.cu, cuda/flash_attention.cu) decide with these, and the
// public loomrt_gpu_*_commands (common/plan.cpp) answer loomc's step
// simulation with them, so the compiler never copies a threshold.
#ifndef LOOMRT_COMMON_LAUNCH_RULES_H
#define LOOMRT_COMMON_LAUNCH_RULES_H

#include "loomrt/loomrt.h"

#include <cstdint>

namespace loomrt {

/// A reduction reads its reduced dimension in chunks of this many.
constexpr int64_t kReduceChunk = 256;
/// Fewer outputs than a GPU holds threads (132 SMs x 2048 on an H100 or
/// H200) over a long dimension: partial sums per chunk into scratch, then a
/// second kernel (more parallelism than one thread per output). The bound
/// was 16384 outputs until the bias gradients of a 6.25B GPT ([2048,
/// 16384] summed over rows) took 607 us each with one thread per column:
/// 19 ms of a 250 ms step (bench/RESULTS.md, 2026-11-29).
inline bool reduceInChunks(int64_t outer, int64_t len, int64_t inner) {
  int64_t chunks = (len + kReduceChunk - 1) / kReduceChunk;
  return outer * inner < (int64_t(1) << 18) && chunks >= 4;
}

/// The fused (flash) attention's tile rows (a block's queries or keys).
constexpr int64_t kFlashTile = 64;
/// Whether the fused attention kernels take an op (self-attention in bf16
/// at head size 64 or 128, a whole number of tiles); else the composed path
/// runs.
inline bool flashCovers(loomrt_dtype dt, int64_t t, int64_t s, int64_t dh) {
  return dt == LOOMRT_BF16 && (dh == 64 || dh == 128) && t == s && t % kFlashTile == 0 && t > 0 &&
         t <= (int64_t(1) << 24);
}

} // namespace loomrt

#endif // LOOMRT_COMMON_LAUNCH_RULES_H
