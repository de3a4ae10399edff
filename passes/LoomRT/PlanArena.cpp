//===- PlanArena.cpp - loom-plan-arena ------------------------------------===//
//
// The step's device buffers placed at offsets decided by the compiler. The
// lowered step is straight-line: each buffer's lifetime is an interval of
// positions (its loomrt.alloc to its loomrt.free, in the order the issuing
// thread reaches them), known in full before the binary runs. Packing such
// intervals into the least memory is dynamic storage allocation (NP-hard in
// general); greedy by size, largest first, each at the lowest offset free
// over its whole lifetime, is the heuristic TensorFlow Lite's arena planner
// and XLA's buffer assignment use, and lands within a few percent of the
// most bytes alive at once on our steps (Passes.td has the numbers).
//
// Why it is safe: the runtime's online arena already lets any allocation
// issued after a free take the freed bytes (the stream runs in order, and
// the lowering frees a buffer only once every stream that reads it is
// ordered before its next user). A planned offset shares bytes only between
// buffers whose intervals are disjoint, so it never lets a buffer reuse
// memory earlier than the online arena could.
//
//===----------------------------------------------------------------------===//
#include "dialects/LoomRT/LoomRTDialect.h"
#include "dialects/Loom/LoomDialect.h"
#include "loom/Passes/LoomRT.h"
#include "loomrt/arena_policy.h"

#include "llvm/ADT/DenseMap.h"

#include <algorithm>
#include <limits>
#include <map>
#include <vector>
#include <numeric>
#include <tuple>

namespace mlir::loom {
#define GEN_PASS_DEF_PLANARENA
#include "passes/LoomRT/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using mlir::loom::ArenaInterval;
namespace rt = mlir::loomrt;

int64_t mlir::loom::planArenaOffsets(ArrayRef<ArenaInterval> bufs,
                                     SmallVectorImpl<int64_t> &offsets) {
  // Each buffer's bytes as the runtime's arena rounds a request.
  SmallVector<int64_t> size(bufs.size());
  for (auto [s, b] : llvm::zip(size, bufs))
    s = int64_t(::loomrt::ArenaPolicy::round(size_t(b.bytes)));
  SmallVector<size_t> order(bufs.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first; among equals the earlier one, so plans are deterministic.
  llvm::sort(order, [&](size_t a, size_t b) {
    return std::tie(size[b], bufs[a].start, a) < std::tie(size[a], bufs[b].start, b);
  });
  offsets.assign(bufs.size(), -1);
  // The buffers placed so far that overlap the next one in time, found
  // without scanning every placed one (an 80-block stage has ~17k buffers:
  // the scan was quadratic, a quarter of a pipeline plan's compile). Those
  // that start no later than it does and are alive at its start: a segment
  // tree over the buffers' starts, each placed buffer listed on the nodes
  // that cover its lifetime; those that start later, while it is alive: the
  // placed buffers ordered by start. The same candidates as the scan, so
  // the same plan.
  SmallVector<int64_t> points;
  for (const ArenaInterval &b : bufs)
    points.push_back(b.start);
  llvm::sort(points);
  points.erase(std::unique(points.begin(), points.end()), points.end());
  auto leaf = [&](int64_t t) {
    return size_t(std::lower_bound(points.begin(), points.end(), t) - points.begin());
  };
  size_t width = 1;
  while (width < points.size())
    width *= 2;
  std::vector<SmallVector<size_t, 2>> cover(2 * width);
  std::multimap<int64_t, size_t> byStart;
  SmallVector<std::pair<int64_t, int64_t>> taken; // [offset, end) alive with the one placed
  int64_t top = 0;
  for (size_t i : order) {
    const ArenaInterval &b = bufs[i];
    taken.clear();
    auto take = [&](size_t j) {
      if (bufs[j].start < b.end && b.start < bufs[j].end)
        taken.push_back({offsets[j], offsets[j] + size[j]});
    };
    for (size_t n = leaf(b.start) + width; n >= 1; n /= 2)
      for (size_t j : cover[n])
        take(j);
    if (b.end > b.start) // (an empty lifetime has no later start inside it)
      for (auto it = byStart.upper_bound(b.start), e = byStart.lower_bound(b.end); it != e; ++it)
        take(it->second);
    llvm::sort(taken);
    int64_t at = 0;
    for (auto [lo, hi] : taken) {
      if (at + size[i] <= lo)
        break;
      at = std::max(at, hi);
    }
    offsets[i] = at;
    top = std::max(top, at + size[i]);
    // List it on the nodes covering leaves [leaf(start), leaf(end)).
    for (size_t lo = leaf(b.start) + width, hi = leaf(b.end) + width; lo < hi;
         lo /= 2, hi /= 2) {
      if (lo & 1)
        cover[lo++].push_back(i);
      if (hi & 1)
        cover[--hi].push_back(i);
    }
    byStart.insert({b.start, i});
  }
  return top;
}

namespace {

/// The buffers of one planned function and of the functions it calls, in
/// the order the issuing thread reaches them: a callee's body runs where it
/// is called, its arguments and results standing for the caller's values.
struct Lifetimes {
  explicit Lifetimes(ModuleOp module) : module(module) {}
  ModuleOp module;
  llvm::DenseMap<StringRef, int64_t> callSites;
  llvm::DenseMap<Value, Value> alias; // callee argument or call result -> what it stands for
  llvm::DenseMap<Value, size_t> index;
  SmallVector<rt::AllocOp> allocs;
  SmallVector<ArenaInterval> bufs;
  SmallVector<func::FuncOp> functions;
  int64_t pos = 0;
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

  Value resolve(Value v) const {
    for (auto it = alias.find(v); it != alias.end(); it = alias.find(v))
      v = it->second;
    return v;
  }

  /// False where the plan cannot be made: a callee called from elsewhere
  /// too (its offsets would have to suit every caller), or already planned.
  bool add(func::FuncOp fn) {
    if (fn.isExternal() || fn->hasAttr(rt::kArenaAttr) || llvm::is_contained(functions, fn))
      return false;
    functions.push_back(fn);
    WalkResult r = fn.walk<WalkOrder::PreOrder>([&](Operation *op) {
      ++pos;
      if (auto a = dyn_cast<rt::AllocOp>(op)) {
        if (a.getHost() || a.getOffset())
          return WalkResult::advance();
        index[a.getResult()] = bufs.size();
        allocs.push_back(a);
        bufs.push_back({int64_t(a.getBytes()), pos, kNever});
      } else if (auto f = dyn_cast<rt::FreeOp>(op)) {
        auto it = index.find(resolve(f.getBuffer()));
        // A task frees on the host thread, later than its place here: the
        // bytes stay the buffer's to the end.
        if (it != index.end() && !f->getParentOfType<rt::HostTaskOp>())
          bufs[it->second].end = std::min(bufs[it->second].end, pos);
      } else if (auto call = dyn_cast<func::CallOp>(op)) {
        auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
        if (!callee || callee.isExternal() || callSites.lookup(call.getCallee()) != 1)
          return WalkResult::interrupt();
        for (auto [arg, v] : llvm::zip(callee.getArguments(), call.getOperands()))
          alias[arg] = resolve(v);
        if (!add(callee))
          return WalkResult::interrupt();
        auto ret = cast<func::ReturnOp>(callee.getBody().back().getTerminator());
        for (auto [res, v] : llvm::zip(call.getResults(), ret.getOperands()))
          alias[res] = resolve(v);
      }
      return WalkResult::advance();
    });
    return !r.wasInterrupted();
  }
};

/// Plans `fn`'s device allocations with those of the functions it calls;
/// returns how many it placed (0 and nothing changed where there is nothing
/// to plan or it cannot be planned).
int64_t planFunction(ModuleOp module, func::FuncOp fn) {
  Lifetimes l(module);
  module.walk([&](func::CallOp c) { ++l.callSites[c.getCallee()]; });
  if (!l.add(fn) || l.bufs.empty())
    return 0;
  SmallVector<int64_t> offsets;
  int64_t size = planArenaOffsets(l.bufs, offsets);
  Builder b(fn.getContext());
  for (auto [a, at] : llvm::zip(l.allocs, offsets))
    a.setOffsetAttr(b.getI64IntegerAttr(at));
  // Each function of the tree asks for the whole region (the driver grows
  // it only at the first, where nothing planned is in use).
  for (func::FuncOp f : l.functions)
    f->setAttr(rt::kArenaAttr, b.getI64IntegerAttr(size));
  return int64_t(l.allocs.size());
}

struct PlanArena : public mlir::loom::impl::PlanArenaBase<PlanArena> {
  using Base::Base;
  void runOnOperation() override {
    SmallVector<std::string> names(functions.begin(), functions.end());
    planned = mlir::loom::planArena(getOperation(), names);
  }
};

} // namespace

int64_t mlir::loom::planArena(ModuleOp module, ArrayRef<std::string> functions) {
  SmallVector<std::string> names(functions.begin(), functions.end());
  if (names.empty())
    names = {LoomDialect::kTrainStep.str(), LoomDialect::kTrainStepFrozen.str()};
  int64_t n = 0;
  for (const std::string &name : names)
    if (auto fn = module.lookupSymbol<func::FuncOp>(name))
      n += planFunction(module, fn);
  return n;
}
