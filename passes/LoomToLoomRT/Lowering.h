//===- Lowering.h - the conversion to loomrt, shared by its parts -*- C++ -*- ---===//
//
// Private to passes/LoomToLoomRT. loom-lower-to-runtime is one pass in
// several files, one decision each: the plan (Plan.cpp: where each result
// lives, which updates run in place), what the runtime cannot run
// (Checks.cpp), the patterns by op family (*Patterns.cpp, each with its
// populate...Patterns) and the driver (LowerToRuntime.cpp). Liveness and
// host tasks are loomrt passes of their own (passes/LoomRT/InsertFrees.cpp,
// FormHostTasks.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_PASSES_LOOMTOLOOMRT_LOWERING_H
#define LOOM_PASSES_LOOMTOLOOMRT_LOWERING_H

#include "dialects/LoomRT/LoomRTDialect.h"
#include "loom/Passes/LoomRT.h"
#include "loom/Passes/LoomToLoomRT.h"
#include "loomrt/loomrt.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/DenseSet.h"

namespace mlir::loom::lowering {

namespace rt = mlir::loomrt;

//===----------------------------------------------------------------------===//
// Types and sizes
//===----------------------------------------------------------------------===//

inline RankedTensorType tt(Value v) { return cast<RankedTensorType>(v.getType()); }
inline int64_t numel(Value v) { return tt(v).getNumElements(); }
inline int64_t bytesOf(Value v) { return numel(v) * int64_t(storageBytes(tt(v).getElementType())); }
using rt::dtypeOf;
inline rt::DType dt(Value v) { return *dtypeOf(tt(v).getElementType()); }
inline APFloat f64(const APFloat &x) { return APFloat(x.convertToDouble()); }
/// A matmul operand's batch: the product of its leading dimensions.
inline int64_t batchOf(RankedTensorType t) {
  int64_t b = 1;
  for (int64_t i = 0; i + 2 < t.getRank(); ++i)
    b *= t.getDimSize(i);
  return b;
}
inline rt::ReduceKind reduceOf(ReduceKind k) {
  switch (k) {
  case ReduceKind::mean:
    return rt::ReduceKind::mean;
  case ReduceKind::max:
    return rt::ReduceKind::max;
  case ReduceKind::min:
    return rt::ReduceKind::min;
  default:
    return rt::ReduceKind::sum;
  }
}

/// fp8_e4m3, fp4_e2m1, int8 and int4: block-scaled codecs with runtime
/// kernels.
inline bool isBlockCodec(PackedType p) {
  CodecKind k = p.getCodec().getKind();
  return k == CodecKind::fp8_e4m3 || k == CodecKind::fp4_e2m1 || k == CodecKind::int8 ||
         k == CodecKind::int4;
}
inline rt::BlockCodec blockCodecOf(PackedType p) {
  switch (p.getCodec().getKind()) {
  case CodecKind::fp8_e4m3: return rt::BlockCodec::fp8_e4m3;
  case CodecKind::fp4_e2m1: return rt::BlockCodec::fp4_e2m1;
  case CodecKind::int8: return rt::BlockCodec::int8;
  default: return rt::BlockCodec::int4;
  }
}
/// The ranks of a group (the product of its levels' sizes), or 0 when its
/// topology is not in the module.
inline int64_t groupSize(ModuleOp module, GroupAttr g) {
  auto topo = module.lookupSymbol<TopologyOp>(g.getTopology());
  if (!topo)
    return 0;
  int64_t n = 1;
  for (Attribute level : g.getLevels())
    n *= topo.getLevelSize(cast<StringAttr>(level).getValue());
  return n;
}
/// The ranks an all-to-all exchanges with.
inline int64_t chunksOf(AllToAllOp o) {
  return groupSize(o->getParentOfType<ModuleOp>(), o.getGroup());
}


//===----------------------------------------------------------------------===//
// The plan: decisions taken on the loom IR before it is rewritten (Plan.cpp)
//===----------------------------------------------------------------------===//

/// The store that writes `r` whole, when it is `r`'s only use: `r` can be
/// computed in the global's buffer directly.
StoreOp storedWhole(Value r);

/// How an optimizer update gets the buffers it writes.
enum class UpdateIn { place, scratch, copies };

/// The streams and communicator of one function, made at its entry.
struct FunctionStreams {
  /// The streams by role (kernels; collectives; the CPU's work on host
  /// memory; copies to and from the device) and the world's communicator.
  Value compute, collectives, host, h2d, d2h, world;
  /// The communicators of groups smaller than the world, made once a
  /// function (loomrt.comm levels [...]).
  llvm::DenseMap<Attribute, Value> groups;
};

struct Plan {
  /// Ops that become nothing: stores the producer wrote through, and the
  /// bf16 casts Adam writes itself.
  llvm::DenseSet<Operation *> elided;
  /// Where each update writes (adam, sgd).
  llvm::DenseMap<Operation *, UpdateIn> update;
  /// The fused refresh cast's buffer, made by the Adam pattern, taken by
  /// the cast's.
  llvm::DenseMap<Operation *, Value> refreshBuffer;
  /// 1-bit Adam's server step: a reduce (mean over the first dimension)
  /// of the [W, C] reshape of a decompressed payload of W chunks of C is
  /// one loomrt.onebit_average on the payload; the decompress passes the
  /// payload through. The reduce -> its decompress.
  llvm::DenseMap<Operation *, Operation *> average;
  llvm::DenseSet<Operation *> averaged;
  /// Values written straight into their concatenation's buffer, a
  /// contiguous range of it: value -> (concat, byte offset); the buffer of
  /// each such concat, made at its first producer; the view each producer
  /// was given (the concat copies an input only where it is not that view).
  llvm::DenseMap<Value, std::pair<Operation *, int64_t>> intoConcat;
  llvm::DenseMap<Operation *, Value> concatBuffer;
  llvm::DenseMap<Value, Value> concatView;
  /// Host copies of i64 scalars (the step counter's increment).
  llvm::DenseMap<Value, Value> hostScalar;
  /// By function name: the conversion may rebuild a function op (its
  /// signature's new types) before it reaches the ops inside, so the op's
  /// address is not a key (fuzz-mlir found a cast that met a fresh, empty
  /// entry and null streams: test/Fuzz/regressions/mlir/).
  llvm::DenseMap<Attribute, FunctionStreams> funcs;
  /// The buffer of a loom.attention's saved row statistics, for its
  /// gradient (lower(AttentionGradOp)).
  llvm::DenseMap<Operation *, Value> attentionSaved;

  FunctionStreams &ctx(Operation *op) {
    return funcs[op->getParentOfType<func::FuncOp>().getSymNameAttr()];
  }

  /// An op's input that only it reads, made by an op of this function into
  /// a buffer the function allocates (a copy's result, say): the update
  /// may overwrite it.
  static bool scratch(Value v, Operation *op);

  void decideUpdate(Operation *o, ArrayRef<Value> ins, ArrayRef<Value> outs);

  static Operation *averagedDecompress(ReduceOp r);

  /// The inputs of a concatenation their producers can write in place: the
  /// dimensions before the concatenated one are of size 1, so each input is
  /// one contiguous range; the input (or the reshape it goes through) is
  /// read by the concatenation alone and made by an op of the block that
  /// allocates its result (not a load, call, view, constant or concat).
  void planConcat(ConcatOp c);

  void analyse(func::FuncOp fn);
};


//===----------------------------------------------------------------------===//
// What the runtime cannot run (Checks.cpp)
//===----------------------------------------------------------------------===//

/// Refuses `op` when the runtime cannot run it. `lowered`: the ops the
/// conversion has a pattern for (read from the pattern set, so this check
/// and the patterns cannot drift apart).
LogicalResult checkSupported(Operation *op, ModuleOp module,
                             const llvm::DenseSet<OperationName> &lowered);
/// Stores copy into the global's buffer and loads alias it, so a loaded
/// value must not be used after a store to the same symbol.
LogicalResult checkLoadsBeforeStores(func::FuncOp fn);

//===----------------------------------------------------------------------===//
// Patterns: one per op, grouped by family (*Patterns.cpp)
//===----------------------------------------------------------------------===//

/// What every pattern needs: the rewriter at the op, the function's
/// streams, and the plan.
struct Emit {
  Plan &plan;
  ConversionPatternRewriter &rw;
  Operation *op;
  Location loc;
  FunctionStreams &f;

  /// The calls an op becomes carry its name in their location, so a
  /// failing call reports the loom op it implements.
  Emit(Plan &plan, ConversionPatternRewriter &rw, Operation *op)
      : plan(plan), rw(rw), op(op),
        loc(NameLoc::get(rw.getStringAttr(op->getName().getStringRef()), op->getLoc())),
        f(plan.ctx(op)) {}

  /// The communicator of a group: the world's when it spans every rank,
  /// else one over its levels, made at the function's start.
  Value comm(GroupAttr g) {
    auto module = f.world.getDefiningOp()->getParentOfType<ModuleOp>();
    auto topo = module.lookupSymbol<TopologyOp>(g.getTopology());
    if (!topo || groupSize(module, g) == topo.getWorldSize())
      return f.world;
    Value &slot = f.groups[g];
    if (slot)
      return slot;
    SmallVector<int64_t> levels;
    ArrayAttr names = topo.getLevels();
    for (auto [i, name] : llvm::enumerate(names))
      if (llvm::is_contained(g.getLevels(), name))
        levels.push_back(int64_t(i));
    OpBuilder::InsertionGuard guard(rw);
    rw.setInsertionPointAfter(f.world.getDefiningOp());
    slot = rt::CommOp::create(rw, f.world.getLoc(), rw.getType<rt::CommType>(),
                              rw.getDenseI64ArrayAttr(levels), topo.getSizesAttr());
    return slot;
  }

  /// A fresh buffer for `v` (pinned host memory from the host arena).
  Value alloc(Value v) {
    // A concatenation's input: a view of its range of the concatenation.
    if (auto it = plan.intoConcat.find(v); it != plan.intoConcat.end()) {
      auto [concat, offset] = it->second;
      Value &buf = plan.concatBuffer[concat];
      if (!buf)
        buf = rt::AllocOp::create(rw, loc, rw.getType<rt::BufferType>(),
                                  bytesOf(concat->getResult(0)), false);
      Value view = offset ? rt::ViewOp::create(rw, loc, rw.getType<rt::BufferType>(), buf, offset)
                                .getResult()
                          : buf;
      plan.concatView[v] = view;
      return view;
    }
    if (auto packed = dyn_cast<PackedType>(v.getType()))
      return rt::AllocOp::create(rw, loc, rw.getType<rt::BufferType>(), packed.getStorageBytes(),
                                 isHostMemory(packed.getLogical()));
    return rt::AllocOp::create(rw, loc, rw.getType<rt::BufferType>(), bytesOf(v),
                               isHostMemory(v.getType()));
  }
  Value allocBytes(int64_t bytes) {
    return rt::AllocOp::create(rw, loc, rw.getType<rt::BufferType>(), bytes, false);
  }
  /// Where a value stored whole into a global is computed: that global's
  /// buffer (its store is elided); else a fresh buffer.
  Value allocOrGlobal(Value r) {
    if (StoreOp st = storedWhole(r); st && plan.elided.contains(st))
      return rt::GlobalOp::create(rw, loc, rw.getType<rt::BufferType>(), st.getName());
    return alloc(r);
  }
  /// Ops on host memory run on the host stream (the CPU).
  Value stream() { return llvm::any_of(op->getOperandTypes(), isHostMemory) ? f.host : f.compute; }
  /// The stream an asynchronous op runs on: a copy's direction (the two on
  /// their own streams, so they overlap: PCIe is full duplex), else the
  /// comm stream (collectives).
  Value asyncStream() {
    if (auto copy = dyn_cast<CopyOp>(op))
      return copy.getStream().getKind() == StreamKind::d2h ? f.d2h : f.h2d;
    return f.collectives;
  }
  /// `stream` waits for the compute stream, `call` runs on it, and the
  /// returned event (the op's token) marks its end.
  Value async(Value stream, llvm::function_ref<void()> call) {
    Value ready = rt::RecordOp::create(rw, loc, rt::EventType::get(rw.getContext()), f.compute);
    rt::WaitOp::create(rw, loc, stream, ready);
    call();
    return rt::RecordOp::create(rw, loc, rt::EventType::get(rw.getContext()), stream);
  }
  LogicalResult done(ValueRange results) {
    rw.replaceOp(op, results);
    return success();
  }
};

/// The pattern of each op: `lower(op, adaptor, emit)`, overloaded below.
template <typename OpT> struct Lower : OpConversionPattern<OpT> {
  Lower(const TypeConverter &tc, MLIRContext *ctx, Plan &plan)
      : OpConversionPattern<OpT>(tc, ctx), plan(plan) {}
  LogicalResult matchAndRewrite(OpT op, typename OpT::Adaptor a,
                                ConversionPatternRewriter &rw) const override;
  Plan &plan;
};


template <typename OpT>
LogicalResult Lower<OpT>::matchAndRewrite(OpT op, typename OpT::Adaptor a,
                                          ConversionPatternRewriter &rw) const {
  Emit e(plan, rw, op);
  // An asynchronous op's `after [tokens]` are waited by the stream it runs
  // on, not only the compute stream's work issued before it (a gradient
  // shard copied to the host once its reduce-scatter, on the comm stream,
  // is done).
  if (isa<AsyncOpInterface>(op.getOperation()))
    for (auto [orig, dep] : llvm::zip(op->getOperands(), a.getOperands()))
      if (isa<TokenType>(orig.getType()))
        rt::WaitOp::create(rw, op.getLoc(), e.asyncStream(), dep);
  return lower(op, a, e);
}

template <typename... OpTs>
void addPatterns(RewritePatternSet &patterns, const TypeConverter &tc, Plan &plan) {
  (patterns.add<Lower<OpTs>>(tc, patterns.getContext(), plan), ...);
}


/// The patterns of each family.
void populateElementwisePatterns(RewritePatternSet &patterns, const TypeConverter &tc, Plan &plan);
void populateComputePatterns(RewritePatternSet &patterns, const TypeConverter &tc, Plan &plan);
void populateMemoryPatterns(RewritePatternSet &patterns, const TypeConverter &tc, Plan &plan);
void populateTransferPatterns(RewritePatternSet &patterns, const TypeConverter &tc, Plan &plan);

} // namespace mlir::loom::lowering

#endif // LOOM_PASSES_LOOMTOLOOMRT_LOWERING_H
