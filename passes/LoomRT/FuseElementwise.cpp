//===- FuseElementwise.cpp - loom-fuse ------------------------------------===//
//
// Chains of elementwise calls in the lowered step become one
// `loomrt.fused_elementwise` each: a straight-line program over the chain's
// elements, which the runtime runs as one generated kernel (NVRTC on CUDA)
// or interprets (CPU, HIP). Each intermediate buffer of the chain is gone:
// no pass over memory writes it or reads it back, and its arena allocation
// is dropped.
//
// A chain is a run of adjacent calls (comments, allocations and frees
// between them aside) on one stream over the same number of elements:
// `loomrt.unary`, `loomrt.unary_grad`, `loomrt.cast` between f32 and bf16,
// and `loomrt.binary` whose operands and result have one shape (no
// broadcasting), where each call after the first reads a buffer an earlier
// one wrote. Every buffer they touch must be a step-arena allocation (a
// distinct range of memory while live: no views or globals, which could
// alias). The fused call takes the chain's last call's place; the frees
// met on the way move after it. Per element, the program loads every
// buffer the chain reads before the chain writes it, computes in fp32, and
// stores the last value written to each buffer read after the chain (or
// never freed); a buffer first written inside the chain and only used
// there is an intermediate and has no memory at all.
//
// Rounding: a region gives the unfused calls' bits. Each call computes in
// fp32, and where the unfused call would have written bf16 (a bf16 unary,
// binary or gradient, a cast to bf16) the value is rounded to bf16 before
// anything else reads it (LOOMRT_FUSED_ROUND; a bf16 output rounds anyway).
// Fusion is then only a speed decision: which calls fuse depends on what is
// read after a chain, so it changes with the schedule (an offloaded
// gradient is read by a copy, a resident one by Adam), and a region that
// kept bf16 intermediates in fp32 made a step's numbers depend on where
// the optimizer ran (issue 44: an interleaved plan's losses left the CPU
// plan's at the second step).
//
//===----------------------------------------------------------------------===//
#include "dialects/LoomRT/LoomRTDialect.h"
#include "loom/Passes/LoomRT.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

namespace mlir::loom {
#define GEN_PASS_DEF_FUSEELEMENTWISE
#include "passes/LoomRT/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
namespace rt = mlir::loomrt;

namespace {

bool storable(rt::DType t) { return t == rt::DType::f32 || t == rt::DType::bf16; }

/// A call a region may hold: its element count, stream, the buffers it
/// reads (in operand order) and the one it writes.
struct Elementwise {
  int64_t n = 0;
  Value stream, out;
  SmallVector<Value, 2> in;
};

std::optional<Elementwise> asElementwise(Operation *op) {
  Elementwise e;
  if (auto u = dyn_cast<rt::UnaryOp>(op)) {
    if (!storable(u.getDtype()))
      return std::nullopt;
    e = {int64_t(u.getN()), u.getStream(), u.getY(), {u.getX()}};
  } else if (auto g = dyn_cast<rt::UnaryGradOp>(op)) {
    if (!storable(g.getDtype()))
      return std::nullopt;
    e = {int64_t(g.getN()), g.getStream(), g.getDx(), {g.getDy(), g.getX()}};
  } else if (auto c = dyn_cast<rt::CastOp>(op)) {
    if (!storable(c.getFrom()) || !storable(c.getTo()))
      return std::nullopt;
    e = {int64_t(c.getN()), c.getStream(), c.getY(), {c.getX()}};
  } else if (auto b = dyn_cast<rt::BinaryOp>(op)) {
    if (!storable(b.getDtype()) || b.getAShape() != b.getOutShape() ||
        b.getBShape() != b.getOutShape())
      return std::nullopt;
    int64_t n = 1;
    for (int64_t d : b.getOutShape())
      n *= d;
    e = {n, b.getStream(), b.getOut(), {b.getA(), b.getB()}};
  } else {
    return std::nullopt;
  }
  if (e.n <= 0)
    return std::nullopt;
  // Written buffers are step-arena allocations: memory of their own while
  // live, which no global, argument or other allocation shares (views of
  // them are checked against the chain's reads: rootOf).
  if (!e.out.getDefiningOp<rt::AllocOp>())
    return std::nullopt;
  return e;
}

Value rootOf(Value v) { return rt::bufferRoot(v); }

/// The element type a call reads `v` as, and writes its result as.
rt::DType readType(Operation *op) {
  if (auto c = dyn_cast<rt::CastOp>(op))
    return c.getFrom();
  return cast<rt::WorkOpInterface>(op).getWorkDType();
}
rt::DType writeType(Operation *op) {
  if (auto c = dyn_cast<rt::CastOp>(op))
    return c.getTo();
  return cast<rt::WorkOpInterface>(op).getWorkDType();
}

/// Builds the region of `chain` (two calls or more) and replaces it.
void fuse(ArrayRef<Operation *> chain, ArrayRef<rt::FreeOp> frees, int64_t n, StringRef name) {
  llvm::DenseSet<Operation *> inChain(chain.begin(), chain.end());
  // The program: loads first (every buffer read before the chain writes it),
  // then one instruction a call.
  SmallVector<int32_t> program;
  SmallVector<Value> inputs, outputs;
  SmallVector<int32_t> inTypes, outTypes;
  llvm::DenseMap<Value, int32_t> reg; // a buffer's current value
  llvm::DenseSet<Value> written;
  auto emit = [&](int32_t op, int32_t kind, int32_t a, int32_t b) {
    program.append({op, kind, a, b});
    return int32_t(program.size() / 4 - 1);
  };
  SmallVector<Elementwise> calls;
  for (Operation *op : chain)
    calls.push_back(*asElementwise(op));
  for (auto [op, e] : llvm::zip(chain, calls)) {
    for (Value v : e.in)
      if (!written.contains(v) && !reg.count(v)) {
        reg[v] = emit(LOOMRT_FUSED_LOAD, 0, int32_t(inputs.size()), 0);
        inputs.push_back(v);
        inTypes.push_back(int32_t(readType(op)));
      }
    written.insert(e.out);
  }
  llvm::DenseMap<Value, rt::DType> outType;
  for (auto [op, e] : llvm::zip(chain, calls)) {
    int32_t r;
    if (auto u = dyn_cast<rt::UnaryOp>(op))
      r = emit(LOOMRT_FUSED_UNARY, int32_t(u.getKind()), reg[e.in[0]], 0);
    else if (auto g = dyn_cast<rt::UnaryGradOp>(op))
      r = emit(LOOMRT_FUSED_UNARY_GRAD, int32_t(g.getKind()), reg[e.in[0]], reg[e.in[1]]);
    else if (auto b = dyn_cast<rt::BinaryOp>(op))
      r = emit(LOOMRT_FUSED_BINARY, int32_t(b.getKind()), reg[e.in[0]], reg[e.in[1]]);
    else // a cast: the value as it is (fp32 inside the region)
      r = reg[e.in[0]];
    // What the unfused call would have stored: bf16 is rounded (a cast to
    // fp32 is exact; an fp32 result stays).
    if (writeType(op) == rt::DType::bf16)
      r = emit(LOOMRT_FUSED_ROUND, 0, r, 0);
    reg[e.out] = r;
    outType[e.out] = writeType(op);
  }
  // Stored: what is read after the chain or never freed. An intermediate
  // (first written in the chain, used only by it and its frees) is dropped.
  llvm::SetVector<Value> kept;
  SmallVector<Value> dropped;
  for (const Elementwise &e : calls) {
    Value out = e.out;
    if (kept.contains(out) || llvm::is_contained(dropped, out))
      continue;
    bool inner = !llvm::is_contained(inputs, out) &&
                 llvm::all_of(out.getUsers(), [&](Operation *u) {
                   return inChain.contains(u) || isa<rt::FreeOp>(u);
                 }) &&
                 llvm::any_of(out.getUsers(), [](Operation *u) { return isa<rt::FreeOp>(u); });
    if (inner)
      dropped.push_back(out);
    else
      kept.insert(out);
  }
  for (Value out : kept) {
    emit(LOOMRT_FUSED_STORE, 0, int32_t(outputs.size()), reg[out]);
    outputs.push_back(out);
    outTypes.push_back(int32_t(outType[out]));
  }
  Operation *last = chain.back();
  OpBuilder b(last);
  Value stream = calls.back().stream;
  auto fused = rt::FusedElementwiseOp::create(
      b, last->getLoc(), stream, b.getStringAttr(name), inputs, outputs,
      b.getDenseI32ArrayAttr(inTypes), b.getDenseI32ArrayAttr(outTypes),
      b.getDenseI32ArrayAttr(program), b.getI64IntegerAttr(n));
  for (rt::FreeOp f : frees)
    if (!llvm::is_contained(dropped, f.getBuffer()))
      f->moveAfter(fused);
  for (Operation *op : llvm::reverse(chain))
    op->erase();
  for (Value v : dropped) {
    Operation *alloc = v.getDefiningOp();
    for (Operation *u : llvm::make_early_inc_range(v.getUsers()))
      u->erase(); // its frees
    alloc->erase();
  }
}

/// A region's name: its calls' op names (silu_mul), then a number that
/// keeps it unique in the module; the kernel is loom_fused_<name>.
std::string regionName(ArrayRef<Operation *> chain, int64_t number) {
  std::string name;
  for (Operation *op : chain) {
    std::string part;
    if (auto u = dyn_cast<rt::UnaryOp>(op))
      part = rt::stringifyUnaryKind(u.getKind()).str();
    else if (auto g = dyn_cast<rt::UnaryGradOp>(op))
      part = rt::stringifyUnaryKind(g.getKind()).str() + "_grad";
    else if (auto b = dyn_cast<rt::BinaryOp>(op))
      part = rt::stringifyBinaryKind(b.getKind()).str();
    else
      part = "cast";
    if (name.size() + part.size() > 40)
      break;
    name += (name.empty() ? "" : "_") + part;
  }
  return name + "_" + std::to_string(number);
}

/// Calls a chain may go on past (see above).
constexpr int kSkip = 4;

struct FuseElementwise : public mlir::loom::impl::FuseElementwiseBase<FuseElementwise> {
  using Base::Base;
  void runOnOperation() override { fused += mlir::loom::fuseElementwise(getOperation()); }
};

} // namespace

int64_t mlir::loom::fuseElementwise(ModuleOp module) {
  int64_t count = 0;
  module.walk([&](rt::FusedElementwiseOp) { ++count; }); // names stay unique
  int64_t made = 0;
  SmallVector<Block *> blocks;
  module.walk([&](Block *b) { blocks.push_back(b); });
  for (Block *block : blocks) {
    SmallVector<Operation *> chain;
    // Frees before the chain's last call (moved after the region) and
    // those met since (they stay: later calls may still read their buffers).
    SmallVector<rt::FreeOp> frees, pendingFrees;
    llvm::DenseSet<Value> written, touched, touchedRoots;
    int skipped = 0;
    int64_t n = 0;
    Value stream;
    auto flush = [&]() {
      if (chain.size() >= 2) {
        fuse(chain, frees, n, regionName(chain, count++));
        ++made;
      }
      chain.clear();
      frees.clear();
      pendingFrees.clear();
      written.clear();
      touched.clear();
      touchedRoots.clear();
      skipped = 0;
    };
    for (Operation *op = block->empty() ? nullptr : &block->front(); op;) {
      Operation *next = op->getNextNode();
      // Declarations (comments, allocations, globals, views) do no work.
      if (isa<rt::CommentOp, rt::AllocOp, rt::GlobalOp, rt::ViewOp, rt::RankViewOp>(op)) {
        op = next;
        continue;
      }
      if (auto f = dyn_cast<rt::FreeOp>(op)) {
        if (!chain.empty())
          pendingFrees.push_back(f);
        op = next;
        continue;
      }
      std::optional<Elementwise> e = asElementwise(op);
      // A call of the same stream that touches none of the chain's buffers
      // may stay where it is while the chain goes on past it (the region
      // runs after it): a SwiGLU's up projection between its silu and its
      // product. At most kSkip such calls a chain.
      if (!chain.empty() && skipped < kSkip && isa<rt::WorkOpInterface>(op) &&
          op->getNumOperands() && op->getOperand(0) == stream &&
          !(e && e->n == n && llvm::any_of(e->in, [&](Value v) { return written.contains(v); }))) {
        bool independent = llvm::none_of(op->getOperands(), [&](Value v) {
          return isa<rt::BufferType>(v.getType()) && touchedRoots.contains(rootOf(v));
        });
        if (independent) {
          ++skipped;
          op = next;
          continue;
        }
      }
      bool joins = e && !chain.empty() && e->n == n && e->stream == stream &&
                   llvm::any_of(e->in, [&](Value v) { return written.contains(v); });
      // A view read by the chain of a buffer the chain writes would see the
      // write out of order: such a call ends the chain.
      if (joins) {
        for (Value v : e->in)
          if (v != rootOf(v) && written.contains(rootOf(v)))
            joins = false;
        for (Value v : touched)
          if (v != rootOf(v) && rootOf(v) == e->out)
            joins = false;
      }
      if (joins) {
        // The program's limits (loomrt.h): inputs, outputs, instructions.
        llvm::DenseSet<Value> all = touched;
        for (Value v : e->in)
          all.insert(v);
        all.insert(e->out);
        // (A load and a store a buffer at most, a call and its rounding
        // each.)
        if (all.size() > LOOMRT_FUSED_MAX_IO || 2 * all.size() + 2 * (chain.size() + 1) >
                                                    LOOMRT_FUSED_MAX_INSTS)
          joins = false;
      }
      if (!joins) {
        flush();
        if (e) {
          n = e->n;
          stream = e->stream;
        }
      }
      if (e) {
        chain.push_back(op);
        frees.append(pendingFrees.begin(), pendingFrees.end());
        pendingFrees.clear();
        for (Value v : llvm::concat<const Value>(e->in, ArrayRef<Value>(e->out))) {
          touched.insert(v);
          touchedRoots.insert(rootOf(v));
        }
        written.insert(e->out);
      } else {
        flush();
      }
      op = next;
    }
    flush();
  }
  return made;
}
