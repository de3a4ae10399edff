// arena_policy.h: where the step arena places each buffer. Header-only and
// free of any runtime type, so that the driver (runtime/driver/train_main.cpp,
// real memory), loomc's step simulation (passes/LoomRT/StepSimulation.cpp, a
// model of device memory for the offload planner) and loom-plan-arena
// (passes/LoomRT/PlanArena.cpp) run the very same policy: what the planner
// predicts is what the binary reserves. A public runtime header on purpose:
// this is the one piece of the runtime the compiler must share, not copy.
//
// Memory comes in blocks of at least 64 MiB; inside them, free ranges are
// handed out best fit (the smallest range that holds the request, lowest
// block and offset among equals), split (the rest stays free) and merged with
// free neighbours when released. A step is the same straight-line code every
// time, so placements are deterministic. Sizes are rounded to 256 bytes.
#ifndef LOOMRT_ARENA_POLICY_H
#define LOOMRT_ARENA_POLICY_H

#include <cstddef>
#include <iterator>
#include <map>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

namespace loomrt {

class ArenaPolicy {
public:
  static constexpr size_t kAlign = 256;
  static constexpr size_t kMinBlock = size_t(64) << 20;

  struct Place {
    size_t block = 0, offset = 0;
  };

  /// Places `bytes`; when no free range holds them, asks `newBlock(size)`
  /// for a block of `size` bytes (false: out of memory, and so is this).
  template <typename NewBlock> bool alloc(size_t bytes, Place &out, NewBlock newBlock) {
    bytes = round(bytes);
    auto it = bySize_.lower_bound(Range{bytes, 0, 0});
    if (it == bySize_.end()) {
      size_t size = bytes > kMinBlock ? bytes : kMinBlock;
      if (!newBlock(size))
        return false;
      blocks_.push_back(size);
      free_.emplace_back();
      insertFree(blocks_.size() - 1, 0, size);
      it = bySize_.lower_bound(Range{bytes, 0, 0});
    }
    auto [size, block, offset] = *it;
    eraseFree(block, offset, size);
    if (size > bytes)
      insertFree(block, offset + bytes, size - bytes);
    used_[{block, offset}] = bytes;
    out = {block, offset};
    return true;
  }

  /// Releases a placement; false when it is not one of this arena's.
  bool release(Place p) {
    auto u = used_.find({p.block, p.offset});
    if (u == used_.end())
      return false;
    size_t offset = p.offset, size = u->second;
    used_.erase(u);
    auto &ranges = free_[p.block];
    auto next = ranges.lower_bound(offset);
    if (next != ranges.end() && offset + size == next->first) {
      size_t n = next->second;
      eraseFree(p.block, next->first, n);
      size += n;
    }
    auto after = ranges.lower_bound(offset);
    if (after != ranges.begin()) {
      auto prev = std::prev(after);
      if (prev->first + prev->second == offset) {
        size_t po = prev->first, ps = prev->second;
        eraseFree(p.block, po, ps);
        offset = po;
        size += ps;
      }
    }
    insertFree(p.block, offset, size);
    return true;
  }

  /// Every block free again (the blocks stay).
  void reset() {
    used_.clear();
    bySize_.clear();
    for (size_t b = 0; b < blocks_.size(); ++b) {
      free_[b].clear();
      insertFree(b, 0, blocks_[b]);
    }
  }
  /// Forgets the blocks too (their memory is the caller's to release).
  void clear() {
    used_.clear();
    bySize_.clear();
    free_.clear();
    blocks_.clear();
  }

  size_t reserved() const {
    size_t n = 0;
    for (size_t b : blocks_)
      n += b;
    return n;
  }
  size_t numBlocks() const { return blocks_.size(); }

  /// The bytes a request of `bytes` takes (loom-plan-arena rounds alike).
  static size_t round(size_t bytes) {
    return (bytes + kAlign - 1) / kAlign * kAlign + (bytes == 0 ? kAlign : 0);
  }

private:
  using Range = std::tuple<size_t, size_t, size_t>; // size, block, offset
  void insertFree(size_t block, size_t offset, size_t size) {
    free_[block][offset] = size;
    bySize_.insert(Range{size, block, offset});
  }
  void eraseFree(size_t block, size_t offset, size_t size) {
    free_[block].erase(offset);
    bySize_.erase(Range{size, block, offset});
  }

  std::vector<size_t> blocks_;                  // block sizes
  std::vector<std::map<size_t, size_t>> free_;  // per block: offset -> size
  std::set<Range> bySize_;                      // every free range, best fit first
  std::map<std::pair<size_t, size_t>, size_t> used_; // (block, offset) -> size
};

} // namespace loomrt

#endif // LOOMRT_ARENA_POLICY_H
