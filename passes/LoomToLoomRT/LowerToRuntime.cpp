//===- LowerToRuntime.cpp - loom ops to loomrt runtime calls --------------===//
//
// The last decisions before C++ (docs/codegen.md, "Lowering"): every tensor
// becomes a buffer, every op the runtime calls that compute it, and
//
//   * memory: each result gets a step-arena buffer (`loomrt.alloc`), except
//     aliases (reshape, a ZeRO shard's block, a reduction's last step),
//     loads (the global's buffer) and values stored whole into a global
//     once (written there directly); `loomrt.free` follows the last use of
//     every buffer the function owns, a transfer's input being in use until
//     its event is waited (one liveness analysis, `insertFrees`);
//   * streams and events: kernels on the compute stream, work on host
//     memory on the host stream, copies on the copy stream of their
//     direction and collectives on the comm stream, each after an event of
//     the compute stream and followed by its own event (the op's token);
//   * updates: Adam/SGD in place on the global's buffers when the update
//     reads each state symbol and stores it straight back, on the streamed
//     copy when that copy is scratch, else on fresh copies; a bf16 cast of
//     Adam's new weights is fused into the update (loomrt_adam_bf16grad).
//
// The analysis half (`Plan`) decides from the loom IR before anything is
// rewritten; the patterns (one per op, grouped by family below) only build
// what it decided, with MLIR's dialect conversion. Unsupported IR is refused
// up front by `checkSupported`, with a message naming the op.
//
//===----------------------------------------------------------------------===//
#include "dialects/LoomRT/LoomRTDialect.h"
#include "loomrt/loomrt.h"
#include "loomrt/train.h"
#include "loom/Passes/LoomRT.h"
#include "loom/Passes/LoomToLoomRT.h"
#include "mlir/Dialect/Arith/IR/Arith.h"

#include "mlir/Dialect/Func/Transforms/FuncConversions.h"
#include "mlir/IR/AsmState.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

#include <functional>

namespace mlir::loom {
#define GEN_PASS_DEF_LOWERTORUNTIME
#include "passes/LoomToLoomRT/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;
namespace rt = mlir::loomrt;

namespace {

//===----------------------------------------------------------------------===//
// Types and sizes
//===----------------------------------------------------------------------===//

RankedTensorType tt(Value v) { return cast<RankedTensorType>(v.getType()); }
int64_t numel(Value v) { return tt(v).getNumElements(); }
int64_t bytesOf(Value v) { return numel(v) * int64_t(storageBytes(tt(v).getElementType())); }
using rt::dtypeOf;
rt::DType dt(Value v) { return *dtypeOf(tt(v).getElementType()); }
APFloat f64(const APFloat &x) { return APFloat(x.convertToDouble()); }
/// A matmul operand's batch: the product of its leading dimensions.
int64_t batchOf(RankedTensorType t) {
  int64_t b = 1;
  for (int64_t i = 0; i + 2 < t.getRank(); ++i)
    b *= t.getDimSize(i);
  return b;
}
rt::ReduceKind reduceOf(ReduceKind k) {
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
bool isBlockCodec(PackedType p) {
  CodecKind k = p.getCodec().getKind();
  return k == CodecKind::fp8_e4m3 || k == CodecKind::fp4_e2m1 || k == CodecKind::int8 ||
         k == CodecKind::int4;
}
rt::BlockCodec blockCodecOf(PackedType p) {
  switch (p.getCodec().getKind()) {
  case CodecKind::fp8_e4m3: return rt::BlockCodec::fp8_e4m3;
  case CodecKind::fp4_e2m1: return rt::BlockCodec::fp4_e2m1;
  case CodecKind::int8: return rt::BlockCodec::int8;
  default: return rt::BlockCodec::int4;
  }
}
/// The ranks of a group (the product of its levels' sizes), or 0 when its
/// topology is not in the module.
int64_t groupSize(ModuleOp module, GroupAttr g) {
  auto topo = module.lookupSymbol<TopologyOp>(g.getTopology());
  if (!topo)
    return 0;
  int64_t n = 1;
  for (Attribute level : g.getLevels())
    n *= topo.getLevelSize(cast<StringAttr>(level).getValue());
  return n;
}
/// The ranks an all-to-all exchanges with.
int64_t chunksOf(AllToAllOp o) {
  return groupSize(o->getParentOfType<ModuleOp>(), o.getGroup());
}

//===----------------------------------------------------------------------===//
// The plan: decisions taken on the loom IR before it is rewritten
//===----------------------------------------------------------------------===//

/// The load of a symbol that `op` may update in place, if `v` is one: `op`
/// is its last user, and any other reads it earlier on the compute stream
/// (1-bit Adam's frozen step reads the momentum for the local momentum,
/// then updates it). An op with a stream of its own (a collective, a copy)
/// could still be reading when `op` writes, and one that may alias its
/// input (a reshape, slice, shard or reduction step) would be read later.
std::optional<StringRef> soleLoad(Value v, Operation *op) {
  auto load = v.getDefiningOp<LoadOp>();
  if (!load)
    return std::nullopt;
  for (Operation *u : v.getUsers())
    if (u != op && (u->getBlock() != op->getBlock() || !u->isBeforeInBlock(op) ||
                    u->hasAttr("stream") || isa<ReshapeOp, SliceOp, ShardOp, ReduceOp>(u)))
      return std::nullopt;
  return load.getName();
}
/// The store of `v` to @sym, if it is `v`'s only store (other users read
/// the updated value, which stays in @sym's buffer: the offload schedules
/// copy it to the device working copy).
StoreOp soleStore(Value v, StringRef sym) {
  StoreOp found;
  for (Operation *u : v.getUsers())
    if (auto st = dyn_cast<StoreOp>(u)) {
      if (found || st.getName() != sym)
        return {};
      found = st;
    }
  return found;
}
/// The store that writes `r` whole, when it is `r`'s only use: `r` can be
/// computed in the global's buffer directly.
StoreOp storedWhole(Value r) {
  if (!r.hasOneUse())
    return {};
  auto store = dyn_cast<StoreOp>(*r.getUsers().begin());
  return store && store.getValue() == r ? store : StoreOp();
}

/// How an optimizer update gets the buffers it writes.
enum class UpdateIn { place, scratch, copies };

/// The streams and communicator of one function, made at its entry.
struct FuncCtx {
  Value s, cs, hs, xs, ys, comm;
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
  llvm::DenseMap<Operation *, FuncCtx> funcs;
  /// The buffer of a loom.attention's saved row statistics, for its
  /// gradient (lower(AttentionGradOp)).
  llvm::DenseMap<Operation *, Value> attentionSaved;

  FuncCtx &ctx(Operation *op) { return funcs[op->getParentOfType<func::FuncOp>()]; }

  /// An op's input that only it reads, made by an op of this function into
  /// a buffer the function allocates (a copy's result, say): the update
  /// may overwrite it.
  static bool scratch(Value v, Operation *op) {
    Operation *d = v.getDefiningOp();
    return v.hasOneUse() && *v.getUsers().begin() == op && d &&
           !isa<LoadOp, ReshapeOp, ShardOp, SliceOp, func::CallOp>(d) && !storedWhole(v);
  }

  void decideUpdate(Operation *o, ArrayRef<Value> ins, ArrayRef<Value> outs) {
    bool inPlace = true, inScratch = true;
    SmallVector<StoreOp> stores;
    for (auto [in, out] : llvm::zip(ins, outs)) {
      auto sym = soleLoad(in, o);
      stores.push_back(sym ? soleStore(out, *sym) : StoreOp());
      inPlace = inPlace && stores.back();
      inScratch = inScratch && scratch(in, o);
    }
    update[o] = inPlace ? UpdateIn::place : inScratch ? UpdateIn::scratch : UpdateIn::copies;
    if (inPlace)
      for (StoreOp st : stores)
        elided.insert(st);
  }

  static Operation *averagedDecompress(ReduceOp r) {
    if (r.getKind() != ReduceKind::mean || r.getDims().size() != 1 || r.getDims()[0] != 0)
      return nullptr;
    auto rows = r.getInput().getDefiningOp<ReshapeOp>();
    auto d = rows ? rows.getInput().getDefiningOp<DecompressOp>() : DecompressOp();
    if (!d || !rows.getResult().hasOneUse() || !d.getResult().hasOneUse() ||
        d.getInput().getType().getCodec().getKind() != CodecKind::sign_scale)
      return nullptr;
    auto t = cast<RankedTensorType>(rows.getType());
    int64_t block = d.getInput().getType().getCodec().getBlock();
    if (t.getRank() != 2 || block != t.getDimSize(1) || block % 8 != 0 ||
        cast<RankedTensorType>(r.getType()).getNumElements() != block)
      return nullptr;
    return d;
  }

  /// The inputs of a concatenation their producers can write in place: the
  /// dimensions before the concatenated one are of size 1, so each input is
  /// one contiguous range; the input (or the reshape it goes through) is
  /// read by the concatenation alone and made by an op of the block that
  /// allocates its result (not a load, call, view, constant or concat).
  void planConcat(ConcatOp c) {
    auto out = cast<RankedTensorType>(c.getType());
    int64_t dim = int64_t(c.getDim()) < 0 ? int64_t(c.getDim()) + out.getRank() : c.getDim();
    if (isHostMemory(out))
      return;
    int64_t inner = 1;
    for (int64_t d = 0; d < out.getRank(); ++d) {
      if (d < dim && out.getDimSize(d) != 1)
        return;
      if (d > dim)
        inner *= out.getDimSize(d);
    }
    int64_t es = int64_t(storageBytes(out.getElementType())), off = 0;
    for (Value in : c.getInputs()) {
      Value src = in;
      if (auto rs = in.getDefiningOp<ReshapeOp>(); rs && in.hasOneUse())
        src = rs.getInput();
      Operation *d = src.getDefiningOp();
      if (d && src.hasOneUse() && in.hasOneUse() && d->getBlock() == c->getBlock() &&
          !isa<LoadOp, func::CallOp, ReshapeOp, SliceOp, ShardOp, ConcatOp, arith::ConstantOp>(d) &&
          !isHostMemory(src.getType()))
        intoConcat[src] = {c, off * es};
      off += cast<RankedTensorType>(in.getType()).getDimSize(dim) * inner;
    }
  }

  void analyse(func::FuncOp fn) {
    for (Operation &op : fn.getBody().front()) {
      if (auto adam = dyn_cast<AdamOp>(op)) {
        decideUpdate(adam, {adam.getParam(), adam.getExpAvg(), adam.getExpAvgSq()},
                     {adam.getNewParam(), adam.getNewExpAvg(), adam.getNewExpAvgSq()});
        if (CastOp refresh = fusedRefreshCast(adam)) {
          elided.insert(refresh);
          if (StoreOp st = storedWhole(refresh.getResult()))
            elided.insert(st);
        }
      } else if (auto c = dyn_cast<CompressOp>(op); c && c.getError()) {
        // Error feedback updates its buffer: in place when it is a state's
        // (1-bit Adam's worker and server errors), else a copy.
        decideUpdate(c, {c.getError()}, {c.getNewError()});
      } else if (auto sgd = dyn_cast<SgdOp>(op)) {
        decideUpdate(sgd, {sgd.getParam(), sgd.getMomentumBuf()},
                     {sgd.getNewParam(), sgd.getNewMomentumBuf()});
      } else if (auto copy = dyn_cast<CopyOp>(op)) {
        if (StoreOp st = storedWhole(copy.getResult()))
          elided.insert(st);
      } else if (auto r = dyn_cast<ReduceOp>(op)) {
        if (Operation *d = averagedDecompress(r)) {
          average[r] = d;
          averaged.insert(d);
        }
      } else if (auto c = dyn_cast<ConcatOp>(op)) {
        planConcat(c);
      }
    }
  }
};

//===----------------------------------------------------------------------===//
// What the runtime cannot run, refused before anything is rewritten
//===----------------------------------------------------------------------===//

LogicalResult checkTypes(Operation *op) {
  for (Type t : llvm::concat<Type>(op->getOperandTypes(), op->getResultTypes())) {
    auto r = dyn_cast<RankedTensorType>(t);
    if (!r)
      continue;
    Type e = r.getElementType();
    if (!dtypeOf(e) && !e.isInteger(1))
      return op->emitError() << "lowering to the runtime: element type " << e
                             << " is not supported (f32, bf16, i64, i1)";
    if (r.getRank() > LOOMRT_MAX_RANK)
      return op->emitError() << "lowering to the runtime: rank " << r.getRank()
                             << " is above the runtime's " << LOOMRT_MAX_RANK;
  }
  return success();
}

/// `lowered`: the ops the conversion has a pattern for (read from the
/// pattern set, so this check and the patterns cannot drift apart).
LogicalResult checkSupported(Operation *op, ModuleOp module,
                             const llvm::DenseSet<OperationName> &lowered) {
  if (isa<func::ReturnOp, func::CallOp>(op))
    return success();
  if (failed(checkTypes(op)))
    return failure();
  auto refuse = [&](const Twine &what) {
    return op->emitError("code generation " + what), failure();
  };
  bool onHost = llvm::any_of(op->getOperandTypes(), isHostMemory);
  // Adam writes the bf16 refresh of its new weights itself.
  auto cast = dyn_cast<CastOp>(op);
  auto adam = cast ? cast.getInput().getDefiningOp<AdamOp>() : AdamOp();
  bool fused = adam && fusedRefreshCast(adam) == cast;
  if (onHost && !fused &&
      !isa<AdamOp, SgdOp, CopyOp, LoadOp, StoreOp, WaitOp, EmbeddingOp, ZeroCopyOp, CastOp>(op))
    return refuse("runs only loom.adam, casts, row gathers and copies on host memory");
  // A zero-sized tensor has no rows to normalise or multiply: the sizes
  // divide by its dimensions (found by fuzz-onnx-proto).
  if (RankedTensorType t = zeroSizedTensor(op))
    return op->emitError() << "code generation: zero-sized tensors are not supported (" << t << ")";
  auto isLastDim = [](int64_t dim, Value v) { return dim == tt(v).getRank() - 1 || dim == -1; };
  // A group of the module's topology: the world, or the ranks of some of
  // its levels (a communicator split from the world's, loomrt.comm levels).
  auto knownGroup = [&](GroupAttr g) -> LogicalResult {
    auto topo = module.lookupSymbol<TopologyOp>(g.getTopology());
    if (!topo || groupSize(module, g) < 1 || topo.getLevels().size() > 16)
      return refuse("needs each collective's group on a loom.topology of the module (at "
                    "most 16 levels)");
    return success();
  };
  return llvm::TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](arith::ConstantOp o) -> LogicalResult {
        if (!isa<DenseElementsAttr>(o.getValue()) || !isa<RankedTensorType>(o.getType()))
          return refuse("supports dense tensor constants only");
        return success();
      })
      .Case([&](arith::AddIOp o) -> LogicalResult {
        auto t = dyn_cast<RankedTensorType>(o.getType());
        if (!t || t.getRank() != 0 || !t.getElementType().isInteger(64))
          return refuse("supports arith.addi on i64 scalars only");
        return success();
      })
      // Integer tensors computed at run time (position ids from a mask's
      // cumulative sum) are int64 on the device: the runtime's int64
      // kernels add, subtract, multiply, take max and min and compare.
      .Case<AddOp, SubOp, MulOp, MaxOp, MinOp, EqOp, NeOp, LtOp, LeOp>([&](Operation *o) {
        Type e = tt(o->getResult(0)).getElementType();
        std::string name;
        llvm::raw_string_ostream(name) << e;
        return isa<FloatType>(e) || e.isInteger(64)
                   ? success()
                   : refuse("computes elementwise on f32, bf16 or i64 tensors, not " + name);
      })
      .Case<DivOp, PowOp, NegOp>([&](Operation *o) {
        return isa<FloatType>(tt(o->getResult(0)).getElementType())
                   ? success()
                   : refuse("divides, raises and negates floating-point tensors only (the "
                            "runtime's int64 kernels add, subtract, multiply, take max and "
                            "min and compare)");
      })
      .Case([&](CastOp o) {
        bool bit = tt(o.getInput()).getElementType().isInteger(1) ||
                   tt(o.getResult()).getElementType().isInteger(1);
        return bit ? refuse("casts between f32, bf16 and i64; an i1 tensor computed at run "
                            "time has no runtime dtype")
                   : success();
      })
      .Case([&](SoftmaxOp o) {
        return isLastDim(int64_t(o.getDim()), o.getInput())
                   ? success()
                   : refuse("supports softmax over the last dimension");
      })
      .Case([&](SoftmaxGradOp o) {
        return isLastDim(int64_t(o.getDim()), o.getOutput())
                   ? success()
                   : refuse("supports softmax over the last dimension");
      })
      .Case([&](EmbeddingGradOp o) {
        return tt(o.getResult()).getElementType().isF32()
                   ? success()
                   : refuse("supports f32 embedding gradients");
      })
      .Case([&](CrossEntropyGradOp o) {
        return tt(o.getGrad()).getElementType().isF32() ? success()
                                                        : refuse("needs an f32 loss gradient");
      })
      .Case<CompressOp, DecompressOp>([&](Operation *o) -> LogicalResult {
        // The runtime has 1-bit kernels so far: sign_scale, fp32, one scale
        // for the whole tensor, whole bytes of signs.
        PackedType p = isa<CompressOp>(o) ? llvm::cast<CompressOp>(o).getResult().getType()
                                          : llvm::cast<DecompressOp>(o).getInput().getType();
        RankedTensorType t = p.getLogical();
        int64_t n = t.getNumElements(), block = p.getCodec().getBlock();
        if (isBlockCodec(p)) {
          if (!t.getElementType().isF32() || block <= 0 || block % 2 || n % block)
            return refuse(": block codecs (fp8_e4m3, fp4_e2m1, int8, int4) take f32 tensors in "
                          "blocks (an even block "
                          "size that divides the element count), got " + llvm::Twine(n) +
                          " elements, block " + llvm::Twine(block));
          if (isa<CompressOp>(o) && llvm::cast<CompressOp>(o).getError())
            return refuse(": block codecs have no error feedback");
          return success();
        }
        if (p.getCodec().getKind() != CodecKind::sign_scale)
          return refuse(": the runtime has kernels for sign_scale, fp8_e4m3, fp4_e2m1, int8 and "
                        "int4 only");
        if (!t.getElementType().isF32())
          return refuse(": sign_scale has runtime kernels for f32 tensors only");
        // Decompression also takes the chunks a packed all_to_all or
        // all_gather gives, one scale each.
        bool chunked = isa<DecompressOp>(o) && block > 0 && n % block == 0 && block % 8 == 0;
        if (((block != 0 && block != n) || n % 8) && !chunked)
          return refuse(": sign_scale needs one scale for the whole tensor (block 0) and a "
                        "multiple of 8 elements (pad first), got " + llvm::Twine(n) +
                        " elements, block " + llvm::Twine(block));
        return success();
      })
      .Case<AllToAllOp, AllGatherOp>([&](Operation *o) -> LogicalResult {
        if (failed(knownGroup(isa<AllToAllOp>(o) ? llvm::cast<AllToAllOp>(o).getGroup()
                                                 : llvm::cast<AllGatherOp>(o).getGroup())))
          return failure();
        auto in = dyn_cast<PackedType>(o->getOperand(0).getType());
        if (!in) {
          if (isa<AllGatherOp>(o))
            return success();
          return refuse(": all_to_all exchanges packed 1-bit payloads only");
        }
        auto out = llvm::cast<PackedType>(o->getResult(0).getType());
        int64_t chunk = out.getCodec().getBlock();
        // Block codecs: every chunk (an all-to-all's, or the gathered
        // payload) whole blocks, so scales and codes split per rank.
        if (isBlockCodec(in)) {
          // (knownGroup above: the group has at least one rank.)
          int64_t n = in.getLogical().getNumElements();
          int64_t part = isa<AllToAllOp>(o) ? n / chunksOf(llvm::cast<AllToAllOp>(o)) : n;
          if (in.getCodec() != out.getCodec() || part % in.getCodec().getBlock() != 0)
            return refuse(": packed block-codec collectives exchange whole blocks of one codec");
          return success();
        }
        if (in.getCodec().getKind() != CodecKind::sign_scale || in.getCodec().getBlock() != 0 ||
            !in.getLogical().getElementType().isF32() || chunk <= 0 || chunk % 8)
          return refuse(": packed collectives take f32 sign_scale payloads with one scale, in "
                        "chunks of a multiple of 8 elements");
        return success();
      })
      .Case([&](MatmulOp o) -> LogicalResult {
        int64_t batch = batchOf(tt(o.getResult()));
        int64_t ba = batchOf(tt(o.getLhs())), bb = batchOf(tt(o.getRhs()));
        if ((ba != batch && ba != 1) || (bb != batch && bb != 1))
          return refuse(": matmul with partially broadcast batch dimensions");
        return success();
      })
      .Case([&](AdamOp o) -> LogicalResult {
        Type gt = tt(o.getGrad()).getElementType();
        if (!tt(o.getParam()).getElementType().isF32() || !(gt.isF32() || gt.isBF16()))
          return refuse("updates f32 parameters with f32 or bf16 gradients");
        return success();
      })
      .Case([&](SgdOp o) -> LogicalResult {
        if (!tt(o.getParam()).getElementType().isF32() || !tt(o.getGrad()).getElementType().isF32())
          return refuse("updates f32 parameters with f32 gradients");
        return success();
      })
      .Case([&](CopyOp o) -> LogicalResult {
        if (!isa<RankedTensorType>(o.getInput().getType()))
          return refuse("copies tensors only (not packed payloads)");
        return success();
      })
      .Case([&](AllReduceOp o) { return knownGroup(o.getGroup()); })
      .Case([&](ReduceScatterOp o) { return knownGroup(o.getGroup()); })
      .Case([&](ShardOp o) { return knownGroup(o.getGroup()); })
      .Default([&](Operation *other) -> LogicalResult {
        if (lowered.contains(other->getName()))
          return success();
        return other->emitError() << "'" << other->getName()
                                  << "' is not supported by code generation yet";
      });
}

/// Stores copy into the global's buffer and loads alias it, so a loaded
/// value must not be used after a store to the same symbol (one pass: the
/// latest store of each symbol, by position).
LogicalResult checkLoadsBeforeStores(func::FuncOp fn) {
  llvm::DenseMap<Operation *, unsigned> index;
  llvm::StringMap<unsigned> lastStore;
  unsigned i = 0;
  for (Operation &op : fn.getBody().front()) {
    index[&op] = i;
    for (Value v : op.getOperands())
      if (auto load = v.getDefiningOp<LoadOp>()) {
        auto it = lastStore.find(load.getName());
        if (it != lastStore.end() && it->second > index.lookup(load))
          return op.emitError() << "code generation: reads @" << load.getName()
                                << " after a store replaced it";
      }
    if (auto st = dyn_cast<StoreOp>(op))
      lastStore[st.getName()] = i;
    ++i;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Patterns: one per op, grouped by family
//===----------------------------------------------------------------------===//

/// What every pattern needs: the rewriter at the op, the function's
/// streams, and the plan.
struct Emit {
  Plan &plan;
  ConversionPatternRewriter &rw;
  Operation *op;
  Location loc;
  FuncCtx &f;

  /// The calls an op becomes carry its name in their location, so a
  /// failing call reports the loom op it implements.
  Emit(Plan &plan, ConversionPatternRewriter &rw, Operation *op)
      : plan(plan), rw(rw), op(op),
        loc(NameLoc::get(rw.getStringAttr(op->getName().getStringRef()), op->getLoc())),
        f(plan.ctx(op)) {}

  /// The communicator of a group: the world's when it spans every rank,
  /// else one over its levels, made at the function's start.
  Value comm(GroupAttr g) {
    auto module = f.comm.getDefiningOp()->getParentOfType<ModuleOp>();
    auto topo = module.lookupSymbol<TopologyOp>(g.getTopology());
    if (!topo || groupSize(module, g) == topo.getWorldSize())
      return f.comm;
    Value &slot = f.groups[g];
    if (slot)
      return slot;
    SmallVector<int64_t> levels;
    ArrayAttr names = topo.getLevels();
    for (auto [i, name] : llvm::enumerate(names))
      if (llvm::is_contained(g.getLevels(), name))
        levels.push_back(int64_t(i));
    OpBuilder::InsertionGuard guard(rw);
    rw.setInsertionPointAfter(f.comm.getDefiningOp());
    slot = rt::CommOp::create(rw, f.comm.getLoc(), rw.getType<rt::CommType>(),
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
  Value stream() { return llvm::any_of(op->getOperandTypes(), isHostMemory) ? f.hs : f.s; }
  /// The stream an asynchronous op runs on: a copy's direction (the two on
  /// their own streams, so they overlap: PCIe is full duplex), else the
  /// comm stream (collectives).
  Value asyncStream() {
    if (auto copy = dyn_cast<CopyOp>(op))
      return copy.getStream().getKind() == StreamKind::d2h ? f.ys : f.xs;
    return f.cs;
  }
  /// `stream` waits for the compute stream, `call` runs on it, and the
  /// returned event (the op's token) marks its end.
  Value async(Value stream, llvm::function_ref<void()> call) {
    Value ready = rt::RecordOp::create(rw, loc, rt::EventType::get(rw.getContext()), f.s);
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

//--- Elementwise -----------------------------------------------------------//

template <typename OpT> constexpr rt::UnaryKind unaryKind() {
  if constexpr (std::is_same_v<OpT, NegOp>)
    return rt::UnaryKind::neg;
  else if constexpr (std::is_same_v<OpT, ExpOp>)
    return rt::UnaryKind::exp;
  else if constexpr (std::is_same_v<OpT, LogOp>)
    return rt::UnaryKind::log;
  else if constexpr (std::is_same_v<OpT, SqrtOp>)
    return rt::UnaryKind::sqrt;
  else if constexpr (std::is_same_v<OpT, RsqrtOp>)
    return rt::UnaryKind::rsqrt;
  else if constexpr (std::is_same_v<OpT, TanhOp>)
    return rt::UnaryKind::tanh;
  else if constexpr (std::is_same_v<OpT, ErfOp>)
    return rt::UnaryKind::erf;
  else if constexpr (std::is_same_v<OpT, SinOp>)
    return rt::UnaryKind::sin;
  else if constexpr (std::is_same_v<OpT, CosOp>)
    return rt::UnaryKind::cos;
  else if constexpr (std::is_same_v<OpT, SigmoidOp>)
    return rt::UnaryKind::sigmoid;
  else if constexpr (std::is_same_v<OpT, ReluOp> || std::is_same_v<OpT, ReluGradOp>)
    return rt::UnaryKind::relu;
  else
    return rt::UnaryKind::silu; // SiluOp, SiluGradOp
}
template <typename OpT> rt::UnaryKind unaryKindOf(OpT o) {
  if constexpr (std::is_same_v<OpT, GeluOp> || std::is_same_v<OpT, GeluGradOp>)
    return o.getApproximate() ? rt::UnaryKind::gelu_tanh : rt::UnaryKind::gelu;
  else
    return unaryKind<OpT>();
}

template <typename OpT> LogicalResult lowerUnary(OpT o, Value x, Emit &e) {
  Value y = e.alloc(o.getResult());
  rt::UnaryOp::create(e.rw, e.loc, e.f.s, unaryKindOf(o), dt(o.getInput()), x, y,
                      numel(o.getInput()));
  return e.done(y);
}
template <typename OpT> LogicalResult lowerUnaryGrad(OpT o, Value dy, Value x, Emit &e) {
  Value dx = e.alloc(o.getResult());
  rt::UnaryGradOp::create(e.rw, e.loc, e.f.s, unaryKindOf(o), dt(o.getInput()), dy, x, dx,
                          numel(o.getInput()));
  return e.done(dx);
}
template <typename OpT>
LogicalResult lowerBinary(OpT o, rt::BinaryKind k, Value a, Value b, Emit &e) {
  int rank = tt(o.getResult()).getRank();
  Value out = e.alloc(o.getResult());
  rt::BinaryOp::create(e.rw, e.loc, e.f.s, k, dt(o.getResult()), a, alignedShape(o.getLhs(), rank),
                       b, alignedShape(o.getRhs(), rank), out, alignedShape(o.getResult(), rank));
  return e.done(out);
}

/// The mask's key comes from the driver (the run's seed and the step); the
/// element offset from the rank (a data-parallel rank's rows of the batch).
LogicalResult lower(DropoutOp o, DropoutOp::Adaptor a, Emit &e) {
  Value y = e.alloc(o.getResult());
  Value key = rt::RandomKeyOp::create(e.rw, e.loc, e.rw.getI64Type(), o.getKey());
  rt::DropoutOp::create(e.rw, e.loc, e.f.s, dt(o.getInput()), a.getInput(), y, key, e.f.comm,
                        f64(o.getRatio()), numel(o.getInput()));
  return e.done(y);
}

//--- Compression -------------------------------------------------------------//

/// sign_scale (1-bit Adam): the payload's fp32 scale, then its signs. The
/// kernel updates the error in place: in the incoming error's own buffer
/// where the plan allows (a state loaded and stored back, or a value only
/// the compression reads), else in a copy of it (updateBuffers); without
/// feedback it starts from zeros (a scratch buffer).
SmallVector<Value> updateBuffers(Emit &e, ValueRange ins, ArrayRef<Value> outs);

LogicalResult lower(CompressOp o, CompressOp::Adaptor a, Emit &e) {
  Value packed = e.alloc(o.getResult());
  int64_t n = numel(o.getInput());
  if (isBlockCodec(o.getResult().getType())) {
    rt::BlockCompressOp::create(e.rw, e.loc, e.f.s, blockCodecOf(o.getResult().getType()),
                                a.getInput(), packed, n, o.getResult().getType().getCodec().getBlock());
    return e.done(packed);
  }
  Value err;
  if (o.getError()) {
    err = updateBuffers(e, {a.getError()}, {o.getNewError()})[0];
  } else {
    err = e.allocBytes(n * 4);
    rt::FillOp::create(e.rw, e.loc, e.f.s, rt::DType::f32, err, APFloat(0.0), n);
  }
  rt::OnebitCompressOp::create(e.rw, e.loc, e.f.s, a.getInput(), err, packed, n);
  if (o.getError())
    return e.done({packed, err});
  return e.done(packed);
}
LogicalResult lower(DecompressOp o, DecompressOp::Adaptor a, Emit &e) {
  // Averaged where it is read (Plan::average): the payload passes through.
  if (e.plan.averaged.contains(o))
    return e.done(a.getInput());
  if (isBlockCodec(o.getInput().getType())) {
    Value out = e.alloc(o.getResult());
    rt::BlockDecompressOp::create(e.rw, e.loc, e.f.s, blockCodecOf(o.getInput().getType()),
                                  a.getInput(), out, numel(o.getResult()),
                                  o.getInput().getType().getCodec().getBlock());
    return e.done(out);
  }
  Value out = e.alloc(o.getResult());
  int64_t n = numel(o.getResult()), block = o.getInput().getType().getCodec().getBlock();
  int64_t chunk = block > 0 ? block : n;
  auto d = rt::OnebitDecompressOp::create(e.rw, e.loc, e.f.s, a.getInput(), out, chunk);
  d.setChunks(n / chunk);
  return e.done(out);
}

// clang-format off
#define LOOM_UNARY(OP)                                                                             \
  LogicalResult lower(OP o, OP::Adaptor a, Emit &e) { return lowerUnary(o, a.getInput(), e); }
LOOM_UNARY(NegOp)
LOOM_UNARY(ExpOp)
LOOM_UNARY(LogOp)
LOOM_UNARY(SqrtOp)
LOOM_UNARY(RsqrtOp)
LOOM_UNARY(TanhOp)
LOOM_UNARY(ErfOp)
LOOM_UNARY(SinOp)
LOOM_UNARY(CosOp)
LOOM_UNARY(SigmoidOp)
LOOM_UNARY(ReluOp)
LOOM_UNARY(SiluOp)
LOOM_UNARY(GeluOp)
#undef LOOM_UNARY
#define LOOM_UNARY_GRAD(OP)                                                                        \
  LogicalResult lower(OP o, OP::Adaptor a, Emit &e) {                                              \
    return lowerUnaryGrad(o, a.getGrad(), a.getInput(), e);                                        \
  }
LOOM_UNARY_GRAD(ReluGradOp)
LOOM_UNARY_GRAD(SiluGradOp)
LOOM_UNARY_GRAD(GeluGradOp)
#undef LOOM_UNARY_GRAD
#define LOOM_BINARY(OP, KIND)                                                                      \
  LogicalResult lower(OP o, OP::Adaptor a, Emit &e) {                                              \
    return lowerBinary(o, rt::BinaryKind::KIND, a.getLhs(), a.getRhs(), e);                        \
  }
LOOM_BINARY(AddOp, add)
LOOM_BINARY(SubOp, sub)
LOOM_BINARY(MulOp, mul)
LOOM_BINARY(DivOp, div)
LOOM_BINARY(PowOp, pow)
LOOM_BINARY(MaxOp, max)
LOOM_BINARY(MinOp, min)
LOOM_BINARY(EqOp, eq)
LOOM_BINARY(NeOp, ne)
LOOM_BINARY(LtOp, lt)
LOOM_BINARY(LeOp, le)
#undef LOOM_BINARY
// clang-format on

LogicalResult lower(LerpOp o, LerpOp::Adaptor a, Emit &e) {
  Value y = e.alloc(o.getResult());
  rt::LerpOp::create(e.rw, e.loc, e.f.s, dt(o.getResult()), a.getLhs(), a.getRhs(), y,
                     numel(o.getResult()), f64(o.getWeight()));
  return e.done(y);
}

LogicalResult lower(SelectOp o, SelectOp::Adaptor a, Emit &e) {
  int rank = tt(o.getResult()).getRank();
  Value out = e.alloc(o.getResult());
  rt::SelectOp::create(e.rw, e.loc, e.f.s, dt(o.getResult()), a.getCond(),
                       alignedShape(o.getCond(), rank), a.getLhs(), alignedShape(o.getLhs(), rank),
                       a.getRhs(), alignedShape(o.getRhs(), rank), out,
                       alignedShape(o.getResult(), rank));
  return e.done(out);
}

LogicalResult lower(CastOp o, CastOp::Adaptor a, Emit &e) {
  // Adam writes a fused refresh cast's result itself.
  if (e.plan.elided.contains(o))
    return e.done(e.plan.refreshBuffer.lookup(o));
  Value y = e.alloc(o.getResult());
  // On host memory (the bf16 refresh of an offloaded update whose gradient
  // arrives in fp32, data parallelism's reduced buckets) the CPU casts.
  rt::CastOp::create(e.rw, e.loc, e.stream(), dt(o.getInput()), a.getInput(), dt(o.getResult()), y,
                     numel(o.getInput()));
  return e.done(y);
}

LogicalResult lower(arith::ConstantOp o, arith::ConstantOp::Adaptor, Emit &e) {
  auto elems = cast<DenseElementsAttr>(o.getValue());
  Type elt = elems.getElementType();
  Value y = e.alloc(o.getResult());
  if (elems.isSplat() && (elt.isF32() || elt.isBF16()))
    rt::FillOp::create(e.rw, e.loc, e.f.s, *dtypeOf(elt), y, f64(elems.getSplatValue<APFloat>()),
                       elems.getNumElements());
  else
    rt::WriteConstOp::create(e.rw, e.loc, e.f.s, y, elems);
  return e.done(y);
}

//--- Rows: norms, softmax, embeddings, cross entropy, attention ------------//

int64_t rowsOf(Value v) { return numel(v) / tt(v).getShape().back(); }
int64_t lastDim(Value v) { return tt(v).getShape().back(); }

LogicalResult lower(LayerNormOp o, LayerNormOp::Adaptor a, Emit &e) {
  Value y = e.alloc(o.getResult());
  rt::LayerNormOp::create(e.rw, e.loc, e.f.s, dt(o.getInput()), a.getInput(), a.getWeight(),
                          a.getBias(), y, rowsOf(o.getInput()), lastDim(o.getInput()),
                          f64(o.getEps()));
  return e.done(y);
}
LogicalResult lower(LayerNormGradOp o, LayerNormGradOp::Adaptor a, Emit &e) {
  Value dx = e.alloc(o.getGradInput()), dw = e.alloc(o.getGradWeight()),
        db = e.alloc(o.getGradBias());
  rt::LayerNormGradOp::create(e.rw, e.loc, e.f.s, dt(o.getInput()), a.getGrad(), a.getInput(),
                              a.getWeight(), dx, dw, db, rowsOf(o.getInput()),
                              lastDim(o.getInput()), f64(o.getEps()));
  return e.done({dx, dw, db});
}
LogicalResult lower(RmsNormOp o, RmsNormOp::Adaptor a, Emit &e) {
  Value y = e.alloc(o.getResult());
  rt::RmsNormOp::create(e.rw, e.loc, e.f.s, dt(o.getInput()), a.getInput(), a.getWeight(), y,
                        rowsOf(o.getInput()), lastDim(o.getInput()), f64(o.getEps()));
  return e.done(y);
}
LogicalResult lower(RmsNormGradOp o, RmsNormGradOp::Adaptor a, Emit &e) {
  Value dx = e.alloc(o.getGradInput()), dw = e.alloc(o.getGradWeight());
  rt::RmsNormGradOp::create(e.rw, e.loc, e.f.s, dt(o.getInput()), a.getGrad(), a.getInput(),
                            a.getWeight(), dx, dw, rowsOf(o.getInput()), lastDim(o.getInput()),
                            f64(o.getEps()));
  return e.done({dx, dw});
}
LogicalResult lower(SoftmaxOp o, SoftmaxOp::Adaptor a, Emit &e) {
  Value y = e.alloc(o.getResult());
  rt::SoftmaxOp::create(e.rw, e.loc, e.f.s, dt(o.getInput()), a.getInput(), y, rowsOf(o.getInput()),
                        lastDim(o.getInput()), o.getLog());
  return e.done(y);
}
LogicalResult lower(SoftmaxGradOp o, SoftmaxGradOp::Adaptor a, Emit &e) {
  Value dx = e.alloc(o.getResult());
  rt::SoftmaxGradOp::create(e.rw, e.loc, e.f.s, dt(o.getOutput()), a.getGrad(), a.getOutput(), dx,
                            rowsOf(o.getOutput()), lastDim(o.getOutput()), o.getLog());
  return e.done(dx);
}
/// A gather: from a table the GPU reads in pinned host memory (a mapped
/// table, loom-place-features' zero-copy) the runtime's row gather, its
/// indices sorted on the GPU first (the sort costs less than the address
/// translation misses it saves at every row size measured,
/// bench/RESULTS.md); from host memory on the host stream (the CPU's
/// gather); else the embedding kernel.
LogicalResult lower(EmbeddingOp o, EmbeddingOp::Adaptor a, Emit &e) {
  auto t = tt(o.getTable());
  Value y = e.alloc(o.getResult());
  if (getMemSpace(t) == MemSpace::mapped && t.getElementType().isF32()) {
    rt::GatherRowsOp::create(e.rw, e.loc, e.f.s, a.getTable(), a.getIndices(), y,
                             t.getDimSize(0), t.getDimSize(1) * 4, numel(o.getIndices()),
                             /*sorted=*/true, /*zero_copy=*/true);
    return e.done(y);
  }
  rt::EmbeddingOp::create(e.rw, e.loc, e.stream(), dt(o.getTable()), a.getTable(), a.getIndices(),
                          y, numel(o.getIndices()), t.getDimSize(1), t.getDimSize(0));
  return e.done(y);
}
/// A view: the GPU reads the pinned buffer through the same address (the
/// runtime allocates pinned memory mapped and portable).
LogicalResult lower(ZeroCopyOp, ZeroCopyOp::Adaptor a, Emit &e) { return e.done(a.getInput()); }
LogicalResult lower(EmbeddingGradOp o, EmbeddingGradOp::Adaptor a, Emit &e) {
  auto t = tt(o.getResult());
  Value y = e.alloc(o.getResult());
  rt::EmbeddingGradOp::create(e.rw, e.loc, e.f.s, dt(o.getGrad()), a.getGrad(), a.getIndices(), y,
                              numel(o.getIndices()), t.getDimSize(1), t.getDimSize(0));
  return e.done(y);
}
LogicalResult lower(CrossEntropyOp o, CrossEntropyOp::Adaptor a, Emit &e) {
  Value y = e.alloc(o.getLoss());
  rt::CrossEntropyOp::create(e.rw, e.loc, e.f.s, dt(o.getLogits()), a.getLogits(), a.getLabels(), y,
                             numel(o.getLabels()), lastDim(o.getLogits()));
  return e.done(y);
}
LogicalResult lower(CrossEntropyGradOp o, CrossEntropyGradOp::Adaptor a, Emit &e) {
  Value y = e.alloc(o.getResult());
  rt::CrossEntropyGradOp::create(e.rw, e.loc, e.f.s, dt(o.getLogits()), a.getLogits(),
                                 a.getLabels(), a.getGrad(), y, numel(o.getLabels()),
                                 lastDim(o.getLogits()));
  return e.done(y);
}
/// Attention's scratch, at the size the runtime asks for
/// (loomrt_attention_workspace_bytes), taken after the results and given
/// back right after the call: the backward recomputes.
Value attentionWorkspace(Emit &e) {
  // The query and key: the forward's first operands, the gradient's second
  // and third (after the output gradient).
  Operation *op = e.op;
  unsigned q = isa<AttentionOp>(op) ? 0 : 1;
  auto qt = tt(op->getOperand(q)), kt = tt(op->getOperand(q + 1));
  size_t bytes = loomrt_attention_workspace_bytes(
      loomrt_dtype(*dtypeOf(qt.getElementType())), qt.getDimSize(0) * qt.getDimSize(1),
      qt.getDimSize(2), kt.getDimSize(2), isa<AttentionGradOp>(op) ? 1 : 0);
  return e.allocBytes(int64_t(bytes));
}
/// The loom.attention whose gradient `grad` is: the one of the same block
/// over the same query, key and value, scale and mask, before it (loom-
/// autodiff's forward; with recomputation, the recomputed one). Its output
/// and row statistics are kept for the gradient (loomrt.attention_save and
/// loomrt.attention_grad_saved) instead of the gradient running the forward
/// again, where the GPU's fused kernels take the shape (elsewhere the
/// composed gradient recomputes the probabilities anyway, and keeping the
/// output would only hold memory); null where there is none.
AttentionOp forwardOf(AttentionGradOp grad) {
  auto q = tt(grad.getQuery()), k = tt(grad.getKey());
  std::optional<rt::DType> dtype = dtypeOf(q.getElementType());
  if (!dtype || !loomrt_attention_fused(loomrt_dtype(int(*dtype)), q.getDimSize(2), k.getDimSize(2),
                                        q.getDimSize(3)))
    return AttentionOp();
  AttentionOp found;
  for (Operation *u : grad.getQuery().getUsers()) {
    auto fwd = dyn_cast<AttentionOp>(u);
    if (fwd && fwd->getBlock() == grad->getBlock() && fwd->isBeforeInBlock(grad) &&
        fwd.getKey() == grad.getKey() && fwd.getValue() == grad.getValue() &&
        fwd.getScale() == grad.getScale() && fwd.getCausal() == grad.getCausal() &&
        (!found || found->isBeforeInBlock(fwd)))
      found = fwd;
  }
  return found;
}
/// The gradient that reads `fwd`'s saved statistics, if any.
AttentionGradOp gradOf(AttentionOp fwd) {
  for (Operation *u : fwd.getQuery().getUsers())
    if (auto grad = dyn_cast<AttentionGradOp>(u); grad && forwardOf(grad) == fwd)
      return grad;
  return AttentionGradOp();
}

LogicalResult lower(AttentionOp o, AttentionOp::Adaptor a, Emit &e) {
  auto q = tt(o.getQuery()), k = tt(o.getKey());
  Value out = e.alloc(o.getResult());
  Value ws = attentionWorkspace(e);
  int64_t bh = q.getDimSize(0) * q.getDimSize(1);
  if (gradOf(o)) {
    Value saved =
        e.allocBytes(int64_t(loomrt_attention_saved_bytes(bh, q.getDimSize(2))));
    e.plan.attentionSaved[o] = saved;
    rt::AttentionSaveOp::create(e.rw, e.loc, e.f.s, dt(o.getQuery()), a.getQuery(), a.getKey(),
                                a.getValue(), out, saved, ws, bh, q.getDimSize(2),
                                k.getDimSize(2), q.getDimSize(3), f64(o.getScale()),
                                o.getCausal());
    return e.done(out);
  }
  rt::AttentionOp::create(e.rw, e.loc, e.f.s, dt(o.getQuery()), a.getQuery(), a.getKey(),
                          a.getValue(), out, ws, bh, q.getDimSize(2), k.getDimSize(2),
                          q.getDimSize(3), f64(o.getScale()), o.getCausal());
  return e.done(out);
}
LogicalResult lower(AttentionGradOp o, AttentionGradOp::Adaptor a, Emit &e) {
  auto q = tt(o.getQuery()), k = tt(o.getKey());
  Value dq = e.alloc(o.getGradQuery()), dk = e.alloc(o.getGradKey()),
        dv = e.alloc(o.getGradValue());
  Value ws = attentionWorkspace(e);
  int64_t bh = q.getDimSize(0) * q.getDimSize(1);
  AttentionOp fwd = forwardOf(o);
  Value saved = fwd ? e.plan.attentionSaved.lookup(fwd) : Value();
  Value out = saved ? e.rw.getRemappedValue(fwd.getResult()) : Value();
  if (saved && out) {
    rt::AttentionGradSavedOp::create(e.rw, e.loc, e.f.s, dt(o.getQuery()), a.getQuery(),
                                     a.getKey(), a.getValue(), out, saved, a.getGrad(), dq, dk,
                                     dv, ws, bh, q.getDimSize(2), k.getDimSize(2),
                                     q.getDimSize(3), f64(o.getScale()), o.getCausal());
    return e.done({dq, dk, dv});
  }
  rt::AttentionGradOp::create(e.rw, e.loc, e.f.s, dt(o.getQuery()), a.getQuery(), a.getKey(),
                              a.getValue(), a.getGrad(), dq, dk, dv, ws, bh, q.getDimSize(2),
                              k.getDimSize(2), q.getDimSize(3), f64(o.getScale()),
                              o.getCausal());
  return e.done({dq, dk, dv});
}

//--- Products and reductions -----------------------------------------------//

LogicalResult lower(MatmulOp o, MatmulOp::Adaptor a, Emit &e) {
  auto at = tt(o.getLhs()), c = tt(o.getResult());
  int64_t ra = at.getRank(), rc = c.getRank();
  bool ta = o.getTransposeLhs(), tb = o.getTransposeRhs();
  int64_t m = c.getDimSize(rc - 2), n = c.getDimSize(rc - 1);
  int64_t k = at.getDimSize(ta ? ra - 2 : ra - 1);
  int64_t batch = batchOf(c);
  // Each operand's batch is the result's or broadcast whole (stride 0).
  int64_t ba = batchOf(at), bb = batchOf(tt(o.getRhs()));
  Value out = e.alloc(o.getResult());
  rt::MatmulOp::create(e.rw, e.loc, e.f.s, a.getLhs(), a.getRhs(), out, ta, tb, batch, m, n, k,
                       ba == 1 ? 0 : m * k, bb == 1 ? 0 : k * n, m * n, dt(o.getLhs()),
                       dt(o.getResult()));
  return e.done(out);
}

/// A prefix sum along one dimension: the input viewed as [outer, len, inner].
LogicalResult lower(CumsumOp o, CumsumOp::Adaptor a, Emit &e) {
  auto [outer, len, inner] = axisView(tt(o.getInput()).getShape(), o.getDim(), o.getDim());
  Value y = e.alloc(o.getResult());
  rt::CumsumOp::create(e.rw, e.loc, e.f.s, dt(o.getInput()), a.getInput(), y, outer, len, inner,
                       o.getExclusive(), o.getReverse());
  return e.done(y);
}

/// One single-dimension reduction per reduced dimension (reduceSteps); the
/// last step's buffer is the result.
LogicalResult lower(ReduceOp o, ReduceOp::Adaptor a, Emit &e) {
  if (e.plan.average.count(o)) {
    auto rows = tt(o.getInput());
    Value out = e.alloc(o.getResult());
    rt::OnebitAverageOp::create(e.rw, e.loc, e.f.s, a.getInput(), out, rows.getDimSize(1),
                                rows.getDimSize(0));
    return e.done(out);
  }
  Value cur = a.getInput();
  int64_t es = int64_t(storageBytes(tt(o.getInput()).getElementType()));
  for (const ReduceStep &st : reduceSteps(o)) {
    Value next = e.allocBytes(st.outer * st.inner * es);
    rt::ReduceOp::create(e.rw, e.loc, e.f.s, reduceOf(o.getKind()), dt(o.getInput()), cur, next,
                         st.outer, st.len, st.inner);
    cur = next;
  }
  return e.done(cur);
}

//--- Shapes: aliases and strided copies ------------------------------------//

LogicalResult lower(ReshapeOp, ReshapeOp::Adaptor a, Emit &e) { return e.done(a.getInput()); }

Value strided(Emit &e, Value result, Value src, ArrayRef<int64_t> ss) {
  Value out = e.alloc(result);
  auto shape = tt(result).getShape();
  rt::CopyStridedOp::create(e.rw, e.loc, e.f.s, src, out, storageBytes(tt(result).getElementType()),
                            ss, rowMajorStrides(shape), shape);
  return out;
}
LogicalResult lower(TransposeOp o, TransposeOp::Adaptor a, Emit &e) {
  auto st = rowMajorStrides(tt(o.getInput()).getShape());
  std::vector<int64_t> ss;
  for (int64_t p : o.getPerm())
    ss.push_back(st[p]);
  return e.done(strided(e, o.getResult(), a.getInput(), ss));
}
/// A slice that is one contiguous range of its input: steps of 1, every
/// dimension before the first it keeps more than one of taken at one
/// index, every one after it whole. Not when the function returns it (the
/// caller would hold a view of a buffer the callee frees).
bool contiguousSlice(SliceOp o) {
  ArrayRef<int64_t> in = tt(o.getInput()).getShape(), out = tt(o.getResult()).getShape();
  size_t d = 0;
  while (d < out.size() && out[d] == 1)
    ++d;
  if (d < out.size() && o.getStep()[d] != 1)
    return false;
  for (size_t k = d + 1; k < out.size(); ++k)
    if (out[k] != in[k])
      return false;
  return llvm::none_of(o->getUsers(), [](Operation *u) { return isa<func::ReturnOp>(u); });
}
LogicalResult lower(SliceOp o, SliceOp::Adaptor a, Emit &e) {
  auto st = rowMajorStrides(tt(o.getInput()).getShape());
  int64_t offset = 0;
  std::vector<int64_t> ss;
  for (size_t d = 0; d < st.size(); ++d) {
    offset += o.getStart()[d] * st[d];
    ss.push_back(st[d] * o.getStep()[d]);
  }
  Value src = a.getInput();
  if (offset)
    src = rt::ViewOp::create(e.rw, e.loc, e.rw.getType<rt::BufferType>(), src,
                             offset * int64_t(storageBytes(tt(o.getInput()).getElementType())));
  // A contiguous range is read where it is (no update writes a slice in
  // place: Plan::scratch).
  if (contiguousSlice(o))
    return e.done(src);
  return e.done(strided(e, o.getResult(), src, ss));
}
LogicalResult lower(ConcatOp o, ConcatOp::Adaptor a, Emit &e) {
  auto outType = tt(o.getResult());
  int64_t dim = int64_t(o.getDim());
  if (dim < 0)
    dim += outType.getRank();
  auto ds = rowMajorStrides(outType.getShape());
  // The buffer its producers wrote into (Plan::intoConcat), if any did.
  Value out = e.plan.concatBuffer.lookup(o);
  if (!out)
    out = e.alloc(o.getResult());
  int64_t es = int64_t(storageBytes(outType.getElementType())), offset = 0;
  for (auto [orig, in] : llvm::zip(o.getInputs(), a.getInputs())) {
    auto sh = tt(orig).getShape();
    Value src = orig;
    if (auto rs = orig.getDefiningOp<ReshapeOp>())
      src = rs.getInput();
    if (Value view = e.plan.concatView.lookup(src); view && view == in) {
      offset += sh[dim];
      continue;
    }
    Value dst = offset ? rt::ViewOp::create(e.rw, e.loc, e.rw.getType<rt::BufferType>(), out,
                                            offset * ds[dim] * es)
                       : out;
    rt::CopyStridedOp::create(e.rw, e.loc, e.f.s, in, dst, es, rowMajorStrides(sh), ds, sh);
    offset += sh[dim];
  }
  return e.done(out);
}
LogicalResult lower(BroadcastOp o, BroadcastOp::Adaptor a, Emit &e) {
  return e.done(strided(e, o.getResult(), a.getInput(), broadcastInputStrides(o)));
}

//--- Globals and the step counter ------------------------------------------//

LogicalResult lower(LoadOp o, LoadOp::Adaptor, Emit &e) {
  return e.done(
      rt::GlobalOp::create(e.rw, e.loc, e.rw.getType<rt::BufferType>(), o.getName()).getResult());
}
LogicalResult lower(StoreOp o, StoreOp::Adaptor a, Emit &e) {
  if (!e.plan.elided.contains(o)) {
    Value g = rt::GlobalOp::create(e.rw, e.loc, e.rw.getType<rt::BufferType>(), o.getName());
    rt::MemcpyOp::create(e.rw, e.loc, e.f.s, g, a.getValue(), bytesOf(o.getValue()));
  }
  e.rw.eraseOp(o);
  return success();
}
/// The step counter: its host copy serves every Adam update of the step, so
/// they need no read-back (one sync per step, not one per parameter).
LogicalResult lower(arith::AddIOp o, arith::AddIOp::Adaptor a, Emit &e) {
  Value out = e.alloc(o.getResult());
  auto add =
      rt::AddI64Op::create(e.rw, e.loc, e.rw.getI64Type(), e.f.s, a.getLhs(), a.getRhs(), out);
  e.plan.hostScalar[o.getResult()] = add.getSum();
  return e.done(out);
}

//--- Optimizer updates -----------------------------------------------------//

/// The buffers an update writes, as the plan decided: the inputs' own
/// (in place, or scratch a copy made), else fresh copies of them.
SmallVector<Value> updateBuffers(Emit &e, ValueRange ins, ArrayRef<Value> outs) {
  UpdateIn how = e.plan.update.lookup(e.op);
  SmallVector<Value> buf;
  for (auto [in, out] : llvm::zip(ins, outs)) {
    if (how != UpdateIn::copies) {
      buf.push_back(in);
      continue;
    }
    buf.push_back(e.alloc(out));
    rt::MemcpyOp::create(e.rw, e.loc, e.stream(), buf.back(), in, bytesOf(out));
  }
  return buf;
}

LogicalResult lower(AdamOp o, AdamOp::Adaptor a, Emit &e) {
  Value refresh;
  if (CastOp c = fusedRefreshCast(o); c && e.plan.elided.contains(c)) {
    refresh = e.allocOrGlobal(c.getResult());
    e.plan.refreshBuffer[c] = refresh;
  }
  SmallVector<Value> buf = updateBuffers(e, {a.getParam(), a.getExpAvg(), a.getExpAvgSq()},
                                         {o.getNewParam(), o.getNewExpAvg(), o.getNewExpAvgSq()});
  Value step = e.plan.hostScalar.lookup(o.getStep());
  if (!step)
    step = rt::ReadI64Op::create(e.rw, e.loc, e.rw.getI64Type(), e.f.s, a.getStep());
  Value st = e.stream();
  // An update the host runs itself is timed for the driver (the JSON log's
  // cpu_update_*, --trace's cpu lane).
  rt::AdamOp::create(e.rw, e.loc, st, buf[0], a.getGrad(), buf[1], buf[2], step, refresh,
                     dt(o.getGrad()), f64(o.getLr()), f64(o.getBeta1()), f64(o.getBeta2()),
                     f64(o.getEps()), f64(o.getWeightDecay()), o.getDecoupled(), st == e.f.hs,
                     numel(o.getParam()), o.getFreezeStep().value_or(0));
  return e.done(buf);
}

/// torch.optim.SGD with momentum (dampening 0).
LogicalResult lower(SgdOp o, SgdOp::Adaptor a, Emit &e) {
  SmallVector<Value> buf = updateBuffers(e, {a.getParam(), a.getMomentumBuf()},
                                         {o.getNewParam(), o.getNewMomentumBuf()});
  rt::SgdOp::create(e.rw, e.loc, e.stream(), buf[0], a.getGrad(), buf[1], f64(o.getLr()),
                    f64(o.getMomentum()), o.getNesterov(), numel(o.getParam()));
  return e.done(buf);
}

//--- Transfers: copies and collectives, and their waits --------------------//

LogicalResult lower(CopyOp o, CopyOp::Adaptor a, Emit &e) {
  // A copy whose only use stores it to a global lands in the global's
  // buffer directly (the offload schedules' state coming back to host
  // memory): no second copy.
  Value st = e.asyncStream();
  Value out = e.allocOrGlobal(o.getResult());
  Value token = e.async(st, [&] {
    rt::MemcpyOp::create(e.rw, e.loc, st, out, a.getInput(), bytesOf(o.getResult()));
  });
  // Rows the CPU gathered (loom-place-features' host-gather): the host
  // stream runs as it is issued, so they are there before the copy is
  // queued; the host then waits for the upload, since the gather's pinned
  // buffer goes back to the host arena and the next gather may reuse it.
  auto gather = o.getInput().getDefiningOp<EmbeddingOp>();
  if (gather && isHostMemory(gather.getType()))
    rt::SyncOp::create(e.rw, e.loc, token);
  return e.done({out, token});
}
/// A reduction over the communicator: `n` elements of the input
/// (all-reduce) or of each rank's output (reduce-scatter).
template <typename RtOp, typename OpT>
LogicalResult lowerReduction(OpT o, Value in, int64_t n, Emit &e) {
  Value out = e.alloc(o.getResult());
  Value token = e.async(e.f.cs, [&] {
    RtOp::create(e.rw, e.loc, e.comm(o.getGroup()), e.f.cs, dt(o.getInput()), in, out, n,
                 reduceOf(o.getReduce()));
  });
  return e.done({out, token});
}
LogicalResult lower(AllReduceOp o, AllReduceOp::Adaptor a, Emit &e) {
  return lowerReduction<rt::AllReduceOp>(o, a.getInput(), numel(o.getInput()), e);
}
LogicalResult lower(ReduceScatterOp o, ReduceScatterOp::Adaptor a, Emit &e) {
  return lowerReduction<rt::ReduceScatterOp>(o, a.getInput(), numel(o.getResult()), e);
}
/// The packed collectives of 1-bit Adam (a sign_scale payload with one
/// scale in, the same tensor with one scale per chunk out): the scales
/// (first in the payload) and the sign bytes (after them) travel as two
/// byte collectives on the comm stream.
Value packedView(Emit &e, Value buf, int64_t offset) {
  return rt::ViewOp::create(e.rw, e.loc, e.rw.getType<rt::BufferType>(), buf, offset);
}
/// A block-codec payload of n elements (the scales, then the codes) sent as
/// `world` parts, each part's scales and codes: the all-to-all sends part j
/// of both regions to rank j, the all-gather puts rank j's part j; either
/// way the result is the payload of world parts laid out as one.
Value blockCollective(Emit &e, Value comm, Value in, Value out, PackedType whole, int64_t world,
                      bool gather) {
  int64_t n = whole.getLogical().getNumElements(), block = whole.getCodec().getBlock();
  int64_t part = n / world, bits = whole.getCodec().getBitsPerElement();
  int64_t scaleBytes = 4 * (part / block), codeBytes = part * bits / 8;
  int64_t inScales = gather ? 4 * (part / block) : 4 * (n / block);
  return e.async(e.f.cs, [&] {
    if (gather) {
      rt::AllGatherBytesOp::create(e.rw, e.loc, comm, e.f.cs, in, out, scaleBytes);
      rt::AllGatherBytesOp::create(e.rw, e.loc, comm, e.f.cs, packedView(e, in, inScales),
                                   packedView(e, out, 4 * (n / block)), codeBytes);
    } else {
      rt::AllToAllOp::create(e.rw, e.loc, comm, e.f.cs, in, out, scaleBytes);
      rt::AllToAllOp::create(e.rw, e.loc, comm, e.f.cs, packedView(e, in, inScales),
                             packedView(e, out, 4 * (n / block)), codeBytes);
    }
  });
}
LogicalResult lower(AllToAllOp o, AllToAllOp::Adaptor a, Emit &e) {
  if (auto in = cast<PackedType>(o.getInput().getType()); isBlockCodec(in)) {
    Value buf = e.alloc(o.getResult());
    return e.done({buf, blockCollective(e, e.comm(o.getGroup()), a.getInput(), buf, in, chunksOf(o), false)});
  }
  auto out = cast<PackedType>(o.getResult().getType());
  int64_t n = out.getLogical().getNumElements(), chunk = out.getCodec().getBlock();
  int64_t world = n / chunk;
  Value buf = e.alloc(o.getResult());
  Value token = e.async(e.f.cs, [&] {
    rt::AllToAllOp::create(e.rw, e.loc, e.comm(o.getGroup()), e.f.cs, packedView(e, a.getInput(), 4),
                           packedView(e, buf, 4 * world), chunk / 8);
    rt::AllGatherBytesOp::create(e.rw, e.loc, e.comm(o.getGroup()), e.f.cs, a.getInput(), buf, 4);
  });
  return e.done({buf, token});
}
LogicalResult lower(AllGatherOp o, AllGatherOp::Adaptor a, Emit &e) {
  if (auto in = dyn_cast<PackedType>(o.getInput().getType()); in && isBlockCodec(in)) {
    auto whole = cast<PackedType>(o.getResult().getType());
    Value buf = e.alloc(o.getResult());
    int64_t world = whole.getLogical().getNumElements() / in.getLogical().getNumElements();
    return e.done({buf, blockCollective(e, e.comm(o.getGroup()), a.getInput(), buf, whole, world, true)});
  }
  if (auto in = dyn_cast<PackedType>(o.getInput().getType())) {
    int64_t chunk = in.getLogical().getNumElements();
    int64_t world = cast<PackedType>(o.getResult().getType()).getLogical().getNumElements() / chunk;
    Value buf = e.alloc(o.getResult());
    Value token = e.async(e.f.cs, [&] {
      rt::AllGatherBytesOp::create(e.rw, e.loc, e.comm(o.getGroup()), e.f.cs, a.getInput(), buf, 4);
      rt::AllGatherBytesOp::create(e.rw, e.loc, e.comm(o.getGroup()), e.f.cs, packedView(e, a.getInput(), 4),
                                   packedView(e, buf, 4 * world), chunk / 8);
    });
    return e.done({buf, token});
  }
  Value out = e.alloc(o.getResult());
  Value token = e.async(e.f.cs, [&] {
    rt::AllGatherOp::create(e.rw, e.loc, e.comm(o.getGroup()), e.f.cs, dt(o.getInput()), a.getInput(), out,
                            numel(o.getInput()));
  });
  return e.done({out, token});
}
/// A view: this rank's block of the input.
LogicalResult lower(ShardOp o, ShardOp::Adaptor a, Emit &e) {
  return e.done(rt::RankViewOp::create(e.rw, e.loc, e.rw.getType<rt::BufferType>(), a.getInput(),
                                       e.comm(o.getGroup()), bytesOf(o.getResult()))
                    .getResult());
}
/// A copy into host memory is waited by the host (the CPU reads it next);
/// everything else by the compute stream.
LogicalResult lower(WaitOp o, WaitOp::Adaptor a, Emit &e) {
  for (auto [orig, token] : llvm::zip(o.getTokens(), a.getTokens())) {
    auto copy = orig.getDefiningOp<CopyOp>();
    if (copy && isHostMemory(copy.getResult().getType()))
      rt::SyncOp::create(e.rw, e.loc, token);
    else
      rt::WaitOp::create(e.rw, e.loc, e.f.s, token);
  }
  e.rw.eraseOp(o);
  return success();
}

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

//===----------------------------------------------------------------------===//
// Release points: one liveness analysis over the lowered function
//===----------------------------------------------------------------------===//

Value rootOf(Value v) { return rt::bufferRoot(v); }

/// Which results of each function hand their buffer to the caller: an
/// allocation of the callee, returned once.
using Transfers = llvm::DenseMap<Operation *, SmallVector<bool>>;

/// Inserts `loomrt.free` after the last use of every buffer `fn` owns (its
/// allocations and the buffers its callees hand over), except those it
/// returns. A transfer (memcpy or collective, then `loomrt.record` on its
/// stream) reads its buffers until that event is waited or synchronised.
void insertFrees(func::FuncOp fn, ModuleOp module, Transfers &transfers) {
  Block &blk = fn.getBody().front();
  llvm::SetVector<Value> owned;
  llvm::DenseMap<Value, Operation *> last;
  auto use = [&](Value v, Operation *at) {
    Value r = rootOf(v);
    Operation *&l = last[r];
    if (!l || l->isBeforeInBlock(at))
      l = at;
  };
  for (Operation &op : blk) {
    if (auto alloc = dyn_cast<rt::AllocOp>(op))
      owned.insert(alloc.getResult());
    if (auto call = dyn_cast<func::CallOp>(op)) {
      auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
      const SmallVector<bool> &moved = transfers[callee];
      for (auto [i, r] : llvm::enumerate(call.getResults()))
        if (i < moved.size() && moved[i])
          owned.insert(r);
    }
    for (Value v : op.getOperands())
      if (isa<rt::BufferType>(v.getType()))
        use(v, &op);
    for (Value r : op.getResults()) // defined here: live from here
      if (isa<rt::BufferType>(r.getType()) && !last.count(rootOf(r)))
        last[rootOf(r)] = &op;
  }
  // A transfer's buffers stay in use until its event (the next record on
  // its stream) is waited.
  llvm::DenseMap<Value, Operation *> pending; // stream -> last transfer
  for (Operation &op : blk) {
    Value stream;
    if (auto m = dyn_cast<rt::MemcpyOp>(op))
      stream = m.getStream();
    else if (isa<rt::AllReduceOp, rt::ReduceScatterOp, rt::AllGatherOp, rt::AllToAllOp,
                 rt::AllGatherBytesOp>(op))
      stream = op.getOperand(1);
    auto role = stream ? stream.getDefiningOp<rt::StreamOp>() : rt::StreamOp();
    if (role && role.getRole() != rt::StreamRole::compute &&
        role.getRole() != rt::StreamRole::host) {
      pending[stream] = &op;
      continue;
    }
    auto rec = dyn_cast<rt::RecordOp>(op);
    if (!rec || !pending.count(rec.getStream()))
      continue;
    Operation *transfer = pending.lookup(rec.getStream());
    pending.erase(rec.getStream());
    for (Operation *w : rec.getEvent().getUsers())
      for (Value v : transfer->getOperands())
        if (isa<rt::BufferType>(v.getType()))
          use(v, w);
  }
  // Results handed to the caller: owned, returned once. Nothing returned
  // is freed here.
  llvm::DenseMap<Value, int> count;
  auto ret = cast<func::ReturnOp>(blk.getTerminator());
  for (Value v : ret.getOperands())
    ++count[rootOf(v)];
  SmallVector<bool> &moved = transfers[fn];
  for (Value v : ret.getOperands())
    moved.push_back(owned.contains(rootOf(v)) && count[rootOf(v)] == 1);
  OpBuilder b(fn.getContext());
  for (Value r : owned) {
    if (count.count(r))
      continue;
    Operation *at = last.lookup(r);
    b.setInsertionPointAfter(at);
    rt::FreeOp::create(b, at->getLoc(), r);
  }
}

//===----------------------------------------------------------------------===//
// Host tasks: the CPU's work on the step's host thread
//===----------------------------------------------------------------------===//

/// The role of the stream an op runs on (its stream operand), if any.
std::optional<rt::StreamRole> roleOf(Operation *op) {
  for (Value v : op->getOperands())
    if (isa<rt::StreamType>(v.getType()))
      if (auto s = v.getDefiningOp<rt::StreamOp>())
        return s.getRole();
  return std::nullopt;
}

/// What a host task wrote, for the question "does this op touch it": the
/// globals by symbol (each use takes a fresh `loomrt.global`), the other
/// buffers by their root.
struct Written {
  llvm::DenseSet<Attribute> globals;
  llvm::DenseSet<Value> roots;
  void add(Value v) {
    Value r = rootOf(v);
    if (auto g = r.getDefiningOp<rt::GlobalOp>())
      globals.insert(g.getNameAttr());
    else
      roots.insert(r);
  }
  /// Every buffer `op` and the ops inside it take.
  void addBuffersOf(Operation *op) {
    op->walk([&](Operation *in) {
      for (Value v : in->getOperands())
        if (isa<rt::BufferType>(v.getType()))
          add(v);
    });
  }
  bool touches(Operation *op) const {
    return llvm::any_of(op->getOperands(), [&](Value v) {
      if (!isa<rt::BufferType>(v.getType()))
        return false;
      Value r = rootOf(v);
      if (auto g = r.getDefiningOp<rt::GlobalOp>())
        return globals.contains(g.getNameAttr());
      return roots.contains(r);
    });
  }
};

/// How many host tasks after its own the compute stream waits for an
/// offloaded gradient's copy inside the backward, and releases the
/// gradient, in an interleaved plan (the planner sees the memory this
/// frees and fills it with resident state): enough that the copy is
/// mostly done by then, few enough that the memory serves the rest of the
/// backward. Other modes keep offloaded gradients to the backward's end:
/// their step has the memory, and when every gradient is copied PCIe is
/// slower than the backward, so an earlier wait would stall it (6.7B Llama
/// on the H100 description: the last gradient 0.21 s -> 0.31 s).
constexpr size_t kReleaseWindow = 4;

/// Ops that only name things or order the issuing thread's own work: a
/// host task may be issued after them without changing what either does.
bool neutral(Operation *op) {
  return isa<rt::CommentOp, rt::AllocOp, rt::GlobalOp, rt::ViewOp, rt::RankViewOp, rt::FreeOp,
             rt::StreamOp, rt::CommOp, rt::RecordOp, rt::WaitOp>(op);
}

/// Moves the CPU's work of `fn` to host tasks (`loomrt.host_task`), so the
/// thread that issues the step never blocks on a gradient's copy or runs an
/// update itself: each run of host-stream calls, with the host's waits for
/// the copies they read and the copies of what they wrote (the refreshed
/// weights, with their stream's wait before and event after), becomes one
/// task, issued where its last op was. The issuing thread keeps what orders
/// its own work: a device buffer that waited for a moved sync is released
/// after the compute stream waits for the same event; a host buffer a task
/// uses goes back after the next `loomrt.join`, which precedes the first
/// use of a task's event outside tasks, anything else that touches what a
/// task wrote, and the return.
void formHostTasks(func::FuncOp fn) {
  Block &blk = fn.getBody().front();
  SmallVector<Operation *> ops;
  for (Operation &op : blk)
    ops.push_back(&op);
  // The optimizer's work on the host: updates and the casts of their
  // refreshed weights. (A graph's row gathers on the host stay where they
  // are: the step waits for each one's upload at once.)
  auto isHostCall = [](Operation *op) {
    return isa<rt::AdamOp, rt::SgdOp, rt::CastOp>(op) && roleOf(op) == rt::StreamRole::host;
  };
  llvm::DenseSet<Operation *> bound;
  Written written;
  for (auto [i, op] : llvm::enumerate(ops)) {
    if (isHostCall(op)) {
      bound.insert(op);
      written.addBuffersOf(op);
      continue;
    }
    // The host waits for a copy the CPU reads next: the task waits instead.
    if (isa<rt::SyncOp>(op)) {
      for (size_t j = i + 1; j < ops.size(); ++j) {
        if (isHostCall(ops[j])) {
          bound.insert(op);
          break;
        }
        if (!neutral(ops[j]) && !isa<rt::SyncOp>(ops[j]))
          break;
      }
      continue;
    }
    // A copy of what a task wrote (the refreshed weights to the device):
    // issued by the task, with its stream's wait before and event after.
    auto copy = dyn_cast<rt::MemcpyOp>(op);
    if (!copy || !written.touches(copy))
      continue;
    bound.insert(op);
    if (i > 0)
      if (auto w = dyn_cast<rt::WaitOp>(ops[i - 1]); w && w.getStream() == copy.getStream())
        bound.insert(w);
    if (i + 1 < ops.size())
      if (auto r = dyn_cast<rt::RecordOp>(ops[i + 1]); r && r.getStream() == copy.getStream())
        bound.insert(r);
  }
  if (bound.empty())
    return;

  // Runs of bound ops with neutral ops between them, one update each (a
  // wait for the next gradient starts the next run), so each is queued as
  // soon as the issuing thread has passed it.
  SmallVector<SmallVector<Operation *>> runs(1);
  for (Operation *op : ops) {
    if (bound.contains(op)) {
      if (isa<rt::SyncOp>(op) && llvm::any_of(runs.back(), isHostCall))
        runs.emplace_back();
      runs.back().push_back(op);
    } else if (!neutral(op) && !runs.back().empty()) {
      runs.emplace_back();
    }
  }
  if (runs.back().empty())
    runs.pop_back();

  MLIRContext *ctx = fn.getContext();
  OpBuilder b(ctx);
  // Positions before anything moves (isBeforeInBlock after moves would
  // walk the block each time: the planner lowers hundreds of candidates).
  llvm::DenseMap<Operation *, size_t> pos;
  Operation *backwardDone = nullptr;
  for (Operation *op : ops) {
    pos[op] = pos.size();
    if (isa<rt::BackwardDoneOp>(op))
      backwardDone = op;
  }
  auto inBackward = [&](Operation *op) {
    return backwardDone && pos.lookup(op) < pos.lookup(backwardDone);
  };
  Value compute;
  for (Operation *op : ops)
    if (auto s = dyn_cast<rt::StreamOp>(op); s && s.getRole() == rt::StreamRole::compute)
      compute = s;
  llvm::DenseSet<Value> taskResults;
  auto computeStream = [&]() -> Value {
    if (!compute) {
      b.setInsertionPointToStart(&blk);
      compute = rt::StreamOp::create(b, fn.getLoc(), rt::StreamType::get(ctx),
                                     rt::StreamRole::compute);
    }
    return compute;
  };
  struct Release {
    Value event;
    Location loc;
    SmallVector<rt::FreeOp> frees;
    size_t task; // the task whose sync it was (its index in `tasks`)
  };
  SmallVector<Release> releases;
  SmallVector<rt::HostTaskOp> tasks;
  SmallVector<Operation *> taskEnds;
  for (SmallVector<Operation *> &r : runs) {
    // What leaves the run must be an event (a record the issuing thread
    // waits for); anything else stays where it is, run by the issuing
    // thread as before.
    llvm::DenseSet<Operation *> inRun(r.begin(), r.end());
    SmallVector<Value> escaping;
    for (Operation *op : r)
      for (Value v : op->getResults())
        if (llvm::any_of(v.getUsers(), [&](Operation *u) { return !inRun.contains(u); }))
          escaping.push_back(v);
    if (llvm::any_of(escaping, [](Value v) { return !isa<rt::EventType>(v.getType()); }))
      continue;
    // The compute stream waits for a moved sync's event, so the device
    // buffers released after it (the gradient the copy read) are not
    // reused before the copy has read them. Inside the backward the wait
    // comes kReleaseWindow tasks later (placed below): waiting at once
    // would stall the backward behind the copies, which PCIe makes slower
    // than the backward makes gradients; waiting at the backward's end
    // would keep every offloaded gradient on the device until then.
    for (Operation *op : r)
      if (auto sync = dyn_cast<rt::SyncOp>(op)) {
        Release rel{sync.getEvent(), sync.getLoc(), {}, tasks.size()};
        // The releases right after the sync: what waited for it.
        for (Operation *o = sync->getNextNode(); o && isa<rt::FreeOp, rt::CommentOp>(o);
             o = o->getNextNode())
          if (auto f = dyn_cast<rt::FreeOp>(o)) {
            auto alloc = rootOf(f.getBuffer()).getDefiningOp<rt::AllocOp>();
            if (alloc && !alloc.getHost())
              rel.frees.push_back(f);
          }
        if (inBackward(sync)) {
          releases.push_back(std::move(rel));
          continue;
        }
        b.setInsertionPoint(sync);
        rt::WaitOp::create(b, sync.getLoc(), computeStream(), sync.getEvent());
        for (rt::FreeOp f : rel.frees)
          f->moveBefore(sync);
      }
    Operation *last = r.back();
    b.setInsertionPointAfter(last);
    auto task = rt::HostTaskOp::create(
        b, last->getLoc(), SmallVector<Type>(escaping.size(), rt::EventType::get(ctx)));
    Block *body = b.createBlock(&task.getBody());
    for (Operation *op : r)
      op->moveBefore(body, body->end());
    b.setInsertionPointToEnd(body);
    rt::YieldOp::create(b, last->getLoc(), escaping);
    for (auto [v, res] : llvm::zip(escaping, task.getResults())) {
      v.replaceUsesWithIf(res, [&](OpOperand &u) { return u.getOwner()->getParentOp() != task; });
      taskResults.insert(res);
    }
    tasks.push_back(task);
    taskEnds.push_back(last); // where the task is: after its run's last op
  }
  // The releases inside the backward: before the task kReleaseWindow after
  // theirs, if it too is inside the backward, else at the backward's end.
  auto mode = fn->getAttrOfType<OptimizerOffloadAttr>(
      LoomDialect::OptimizerOffloadAttrHelper::getNameStr());
  size_t window = mode && mode.getMode() == OffloadMode::subgroups ? kReleaseWindow : tasks.size();
  for (Release &rel : releases) {
    size_t k = rel.task + window;
    Operation *at = k < tasks.size() && inBackward(taskEnds[k]) ? tasks[k].getOperation()
                                                                 : backwardDone->getNextNode();
    b.setInsertionPoint(at);
    rt::WaitOp::create(b, rel.loc, computeStream(), rel.event);
    for (rt::FreeOp f : rel.frees)
      f->moveBefore(at);
  }

  // Joins, and the host buffers the tasks use released after the join that
  // follows the last task using them (a release may sit before that task:
  // the run moved past it).
  llvm::DenseMap<Value, Operation *> lastTask;
  for (Operation &op : blk)
    if (auto t = dyn_cast<rt::HostTaskOp>(op))
      t.walk([&](Operation *in) {
        for (Value v : in->getOperands())
          if (isa<rt::BufferType>(v.getType()))
            lastTask[rootOf(v)] = t;
      });
  llvm::DenseSet<Operation *> seen, joined; // tasks issued; those joined
  bool pending = false;
  SmallVector<std::pair<rt::FreeOp, Operation *>> deferred;
  Written unjoined; // what the tasks issued since the last join use
  for (Operation &op : llvm::make_early_inc_range(blk)) {
    if (isa<rt::HostTaskOp>(op)) {
      pending = true;
      seen.insert(&op);
      unjoined.addBuffersOf(&op);
      continue;
    }
    if (auto f = dyn_cast<rt::FreeOp>(op)) {
      Value r = rootOf(f.getBuffer());
      auto alloc = r.getDefiningOp<rt::AllocOp>();
      Operation *t = lastTask.lookup(r);
      if (t && !joined.contains(t) && (!alloc || alloc.getHost()))
        deferred.push_back({f, t});
      continue;
    }
    if (!pending)
      continue;
    bool needs = isa<func::ReturnOp>(op) ||
                 llvm::any_of(op.getOperands(), [&](Value v) { return taskResults.contains(v); }) ||
                 (!neutral(&op) && unjoined.touches(&op));
    if (!needs)
      continue;
    b.setInsertionPoint(&op);
    rt::JoinOp::create(b, op.getLoc());
    pending = false;
    unjoined = Written();
    joined.insert(seen.begin(), seen.end());
    SmallVector<std::pair<rt::FreeOp, Operation *>> later;
    for (auto [f, t] : deferred)
      if (seen.contains(t))
        f->moveBefore(&op);
      else
        later.push_back({f, t});
    deferred = std::move(later);
  }
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

/// The vocabulary: rows of the embedding tables looked up with a function
/// argument (the tokens; positions are constants). 0 when there is none.
int64_t vocabOf(ModuleOp module) {
  int64_t v = 0;
  module.walk([&](EmbeddingOp e) {
    if (isa<BlockArgument>(e.getIndices()))
      v = std::max(v, tt(e.getTable()).getDimSize(0));
  });
  return v;
}

/// The lowering of `module` from @`entry` (loom-lower-to-runtime's work,
/// also run on copies by the step simulation).
struct Lowering {
  ModuleOp module;
  StringRef entry;
  bool comments;

  LogicalResult run() {
    MLIRContext *ctx = module.getContext();
    auto step = module.lookupSymbol<func::FuncOp>(entry);
    if (!step) {
      if (entry == LoomDialect::kTrainStep)
        module.emitError() << "code generation needs @train_step: compile with "
                              "--compile-to=optimizer first (or run loom-attach-optimizer)";
      else
        module.emitError() << "lowering to the runtime: no function @" << entry;
      return failure();
    }
    // Lowered already (a module loomc --compile-to=lowered wrote): nothing
    // to do, so the pass can run on its own output.
    if (isLoweredToRuntime(module))
      return success();
    // The functions @train_step reaches, callees first; the others are not
    // part of the program and go.
    SmallVector<func::FuncOp> order;
    llvm::DenseSet<Operation *> seen;
    bool bad = false;
    std::function<void(func::FuncOp)> visit = [&](func::FuncOp fn) {
      if (!seen.insert(fn).second)
        return;
      if (fn.isExternal() || !fn.getBody().hasOneBlock()) {
        fn.emitError("code generation needs functions with a body of one block");
        bad = true;
        return;
      }
      fn.walk([&](func::CallOp call) {
        if (auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee()))
          visit(callee);
      });
      order.push_back(fn);
    };
    visit(step);
    // 1-bit Adam's step after its freeze is the program's second entry.
    auto frozen = module.lookupSymbol<func::FuncOp>(LoomDialect::kTrainStepFrozen);
    if (frozen && entry == LoomDialect::kTrainStep)
      visit(frozen);
    // With ZeRO 1 and 2, the once-only entry that gathers the momentum
    // before the first frozen step.
    auto enter = module.lookupSymbol<func::FuncOp>("enter_frozen");
    if (frozen && enter && entry == LoomDialect::kTrainStep)
      visit(enter);
    // Streaming DiLoCo's start and outer steps (loom-diloco): entries too.
    if (entry == LoomDialect::kTrainStep)
      for (auto fn : module.getOps<func::FuncOp>())
        if (fn.getName() == "diloco_start" ||
            fn->hasAttr(LoomDialect::DilocoAttrHelper::getNameStr()))
          visit(fn);
    if (bad)
      return failure();
    for (auto fn : llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
      if (!seen.contains(fn))
        fn.erase();

    // The conversion's patterns (they read the plan, decided below).
    Plan plan;
    TypeConverter tc;
    tc.addConversion([](Type t) { return t; });
    tc.addConversion([ctx](RankedTensorType) -> Type { return rt::BufferType::get(ctx); });
    tc.addConversion([ctx](TokenType) -> Type { return rt::EventType::get(ctx); });
    tc.addConversion([ctx](PackedType) -> Type { return rt::BufferType::get(ctx); });
    ConversionTarget target(*ctx);
    target.addLegalDialect<rt::LoomRTDialect>();
    // Module-level declarations (parameters, state, topologies, subgroups)
    // stay: the program's globals are read from them.
    target.addLegalOp<ModuleOp>();
    target.addDynamicallyLegalDialect<LoomDialect>(
        [](Operation *op) { return isa_and_nonnull<ModuleOp>(op->getParentOp()); });
    target.addDynamicallyLegalOp<func::FuncOp>(
        [&](func::FuncOp fn) { return tc.isSignatureLegal(fn.getFunctionType()); });
    target.addDynamicallyLegalOp<func::CallOp, func::ReturnOp>(
        [&](Operation *op) { return tc.isLegal(op); });
    RewritePatternSet patterns(ctx);
    populateFunctionOpInterfaceTypeConversionPattern<func::FuncOp>(patterns, tc);
    populateCallOpTypeConversionPattern(patterns, tc);
    populateReturnOpTypeConversionPattern(patterns, tc);
    addPatterns<NegOp, ExpOp, LogOp, SqrtOp, RsqrtOp, TanhOp, ErfOp, SinOp, CosOp, SigmoidOp,
                ReluOp, SiluOp, GeluOp, DropoutOp, CompressOp, DecompressOp, ReluGradOp, SiluGradOp, GeluGradOp, AddOp, SubOp, MulOp,
                DivOp, PowOp, MaxOp, MinOp, EqOp, NeOp, LtOp, LeOp, SelectOp, CastOp,
                arith::ConstantOp>(patterns, tc, plan);
    addPatterns<LayerNormOp, LayerNormGradOp, RmsNormOp, RmsNormGradOp, SoftmaxOp, SoftmaxGradOp,
                EmbeddingOp, EmbeddingGradOp, CrossEntropyOp, CrossEntropyGradOp, AttentionOp,
                AttentionGradOp, MatmulOp, ReduceOp, CumsumOp, LerpOp>(patterns, tc, plan);
    addPatterns<ReshapeOp, TransposeOp, SliceOp, ConcatOp, BroadcastOp, LoadOp, StoreOp,
                arith::AddIOp, AdamOp, SgdOp, CopyOp, AllReduceOp, ReduceScatterOp, AllGatherOp,
                AllToAllOp,
                ShardOp, WaitOp, ZeroCopyOp>(patterns, tc, plan);
    llvm::DenseSet<OperationName> lowered;
    for (const std::unique_ptr<RewritePattern> &p : patterns.getNativePatterns())
      if (std::optional<OperationName> root = p->getRootKind())
        lowered.insert(*root);

    // Refuse what the runtime cannot run, before changing anything.
    for (func::FuncOp fn : order) {
      if (failed(checkLoadsBeforeStores(fn)))
        return failure();
      for (Operation &op : fn.getBody().front())
        if (failed(checkSupported(&op, module, lowered)))
          return failure();
    }
    auto program = programOf(module, step);

    // Decide, then annotate: each op gets the text of itself as a comment
    // (one AsmState per function, so printing stays linear), @train_step
    // the end of its backward, each function its streams.
    OpBuilder b(ctx);
    for (func::FuncOp fn : order) {
      plan.analyse(fn);
      Block &blk = fn.getBody().front();
      // The comments first: their SSA numbers are the loom function's.
      OpPrintingFlags flags;
      flags.elideLargeElementsAttrs(8);
      std::optional<AsmState> state;
      if (comments)
        state.emplace(fn, flags);
      SmallVector<std::pair<Operation *, std::string>> texts;
      Operation *backwardEnd = nullptr;
      for (Operation &op : blk) {
        if (((fn == step && fn.getName() == LoomDialect::kTrainStep) || fn == frozen) &&
            isBackwardWork(&op))
          backwardEnd = &op;
        if (!comments || isa<func::ReturnOp>(op) || plan.elided.contains(&op))
          continue;
        std::string s;
        llvm::raw_string_ostream os(s);
        op.print(os, *state);
        if (s.size() > 160)
          s = s.substr(0, 157) + "...";
        texts.emplace_back(&op, std::move(s));
      }
      for (auto &[op, text] : texts) {
        b.setInsertionPoint(op);
        rt::CommentOp::create(b, op->getLoc(), text);
      }
      if (backwardEnd) {
        b.setInsertionPointAfter(backwardEnd);
        rt::BackwardDoneOp::create(b, backwardEnd->getLoc());
      }
      b.setInsertionPointToStart(&blk);
      Location loc = fn.getLoc();
      auto streamOf = [&](rt::StreamRole r) {
        return rt::StreamOp::create(b, loc, rt::StreamType::get(ctx), r).getResult();
      };
      FuncCtx &f = plan.funcs[fn];
      f.s = streamOf(rt::StreamRole::compute);
      f.comm = rt::CommOp::create(b, loc, rt::CommType::get(ctx), DenseI64ArrayAttr(), DenseI64ArrayAttr());
      f.cs = streamOf(rt::StreamRole::comm);
      f.hs = streamOf(rt::StreamRole::host);
      f.xs = streamOf(rt::StreamRole::h2d);
      f.ys = streamOf(rt::StreamRole::d2h);
    }

    if (failed(applyFullConversion(module, target, std::move(patterns))))
      return failure();

    Transfers transfers;
    bool hostThread = module->hasAttr(LoomDialect::HostThreadAttrHelper::getNameStr());
    for (func::FuncOp fn : order) {
      insertFrees(fn, module, transfers);
      if (hostThread)
        formHostTasks(fn);
      // Streams and the communicator nobody uses go.
      for (Operation &op : llvm::make_early_inc_range(fn.getBody().front()))
        if (isa<rt::StreamOp, rt::CommOp>(op) && op.use_empty())
          op.erase();
    }
    if (program && step.getName() == LoomDialect::kTrainStep)
      step->setAttr(rt::kProgramAttr, *program);
    return success();
  }

  /// The driver's description of the program (train.h, loomrt_program):
  /// a language model trained from token files, @train_step(tokens,
  /// targets) both [B, T] i64 (task 0), or any step whose arguments are
  /// f32 or i64 tensors sharing their leading (batch) dimension, read from
  /// arrays (task 1: classifiers, graph models), returning the loss. Other
  /// programs lower too, and code generation says what it needs.
  std::optional<DictionaryAttr> programOf(ModuleOp module, func::FuncOp step) {
    auto ty = step.getFunctionType();
    if (ty.getNumInputs() == 0 || ty.getNumResults() != 1)
      return std::nullopt;
    // A graph model's inputs differ in their leading dimension (the tree's
    // depths); each has a role named by its input name.
    auto graph = module->getAttrOfType<GraphAttr>(LoomDialect::GraphAttrHelper::getNameStr());
    SmallVector<RankedTensorType> ins;
    for (Type t : ty.getInputs()) {
      auto r = dyn_cast<RankedTensorType>(t);
      if (!r || r.getRank() < 1 || r.getRank() > LOOMRT_MAX_RANK ||
          !(r.getElementType().isF32() || r.getElementType().isInteger(64)) ||
          (!graph && r.getDimSize(0) != cast<RankedTensorType>(ty.getInput(0)).getDimSize(0)))
        return std::nullopt;
      ins.push_back(r);
    }
    bool tokens = ins.size() == 2 && ins[0] == ins[1] && ins[0].getRank() == 2 &&
                  ins[0].getElementType().isInteger(64);
    int64_t world = 1, zeroStage = -1;
    if (DataParallelAttr dp = getDataParallel(step)) {
      world = dp.getWorld();
      zeroStage = dp.getZeroStage();
    }
    auto names = module->getAttrOfType<ArrayAttr>(LoomDialect::InputNamesAttrHelper::getNameStr());
    if (names && names.size() != ins.size())
      names = nullptr;
    Builder b(module.getContext());
    int64_t freezeStep = freezeStepOf(module, step);
    SmallVector<Attribute> inputs;
    int64_t batch = ins[0].getDimSize(0);
    for (auto [i, r] : llvm::enumerate(ins)) {
      std::string name = names ? cast<StringAttr>(names[i]).str() : "input" + std::to_string(i);
      int64_t limit = r.getElementType().isInteger(64) ? indexLimit(step.getArgument(i)) : 0;
      SmallVector<NamedAttribute> fields{
          b.getNamedAttr("name", b.getStringAttr(name)),
          b.getNamedAttr("dtype", b.getI64IntegerAttr(int64_t(dt(step.getArgument(i))))),
          b.getNamedAttr("shape", b.getDenseI64ArrayAttr(r.getShape())),
          b.getNamedAttr("limit", b.getI64IntegerAttr(limit))};
      if (graph) {
        std::optional<std::pair<int64_t, int64_t>> role = graphRole(name);
        if (!role)
          return std::nullopt;
        if (role->first == LOOMRT_INPUT_NODE_LABELS)
          batch = r.getDimSize(0);
        std::optional<MemSpace> space = getMemSpace(r);
        fields.push_back(b.getNamedAttr("role", b.getI64IntegerAttr(role->first)));
        fields.push_back(b.getNamedAttr("depth", b.getI64IntegerAttr(role->second)));
        fields.push_back(b.getNamedAttr(
            "space", b.getI64IntegerAttr(space == MemSpace::pinned ? LOOMRT_MEM_PINNED
                                                                   : LOOMRT_MEM_DEVICE)));
      }
      inputs.push_back(b.getDictionaryAttr(fields));
    }
    DictionaryAttr program = b.getDictionaryAttr(
        {b.getNamedAttr("task", b.getI64IntegerAttr(graph ? LOOMRT_TASK_GRAPH
                                                    : tokens ? LOOMRT_TASK_TOKENS
                                                             : LOOMRT_TASK_ARRAYS)),
         b.getNamedAttr("batch", b.getI64IntegerAttr(batch)),
         b.getNamedAttr("seq", b.getI64IntegerAttr(tokens ? ins[0].getDimSize(1) : 0)),
         b.getNamedAttr("vocab", b.getI64IntegerAttr(tokens ? vocabOf(module) : 0)),
         b.getNamedAttr("world", b.getI64IntegerAttr(world)),
         b.getNamedAttr("zero_stage", b.getI64IntegerAttr(zeroStage)),
         b.getNamedAttr("elastic", b.getI64IntegerAttr(elasticProgram(module, zeroStage,
                                                                       freezeStep))),
         b.getNamedAttr("inputs", b.getArrayAttr(inputs))});
    // 1-bit Adam's second entry, named only where there is one.
    if (freezeStep)
      program = DictionaryAttr::get(
          module.getContext(),
          llvm::to_vector(llvm::concat<const NamedAttribute>(
              program.getValue(),
              ArrayRef<NamedAttribute>{b.getNamedAttr("freeze_step",
                                                      b.getI64IntegerAttr(freezeStep))})));
    if (graph)
      program = DictionaryAttr::get(
          module.getContext(),
          llvm::to_vector(llvm::concat<const NamedAttribute>(
              program.getValue(),
              ArrayRef<NamedAttribute>{
                  b.getNamedAttr("fanouts", b.getDenseI64ArrayAttr(graph.getFanouts())),
                  b.getNamedAttr("norm", b.getI64IntegerAttr(graph.getNorm() == GraphNorm::gcn
                                                                 ? LOOMRT_GRAPH_GCN
                                                                 : LOOMRT_GRAPH_MEAN))})));
    // Streaming DiLoCo's outer steps, each with its period and offset.
    SmallVector<Attribute> outer;
    for (auto fn : module.getOps<func::FuncOp>())
      if (auto d = fn->getAttrOfType<DilocoAttr>(LoomDialect::DilocoAttrHelper::getNameStr()))
        outer.push_back(
            b.getDictionaryAttr({b.getNamedAttr("name", fn.getSymNameAttr()),
                                 b.getNamedAttr("every", b.getI64IntegerAttr(d.getEvery())),
                                 b.getNamedAttr("offset", b.getI64IntegerAttr(d.getOffset())),
                                 b.getNamedAttr("async", b.getBoolAttr(d.getAsync()))}));
    if (!outer.empty())
      program = DictionaryAttr::get(
          module.getContext(),
          llvm::to_vector(llvm::concat<const NamedAttribute>(
              program.getValue(),
              ArrayRef<NamedAttribute>{b.getNamedAttr("outer", b.getArrayAttr(outer))})));
    return program;
  }

  /// A graph model's input role (train.h, loomrt_input_role) and depth from
  /// its name: features, nodes<d>, weights<d>, self<d>, labels.
  static std::optional<std::pair<int64_t, int64_t>> graphRole(StringRef name) {
    if (name == "features")
      return std::pair<int64_t, int64_t>{LOOMRT_INPUT_NODE_TABLE, 0};
    if (name == "labels")
      return std::pair<int64_t, int64_t>{LOOMRT_INPUT_NODE_LABELS, 0};
    for (auto [prefix, role] : {std::pair<StringRef, int64_t>{"nodes", LOOMRT_INPUT_NODES},
                                {"weights", LOOMRT_INPUT_SLOT_WEIGHTS},
                                {"self", LOOMRT_INPUT_SELF_WEIGHTS}}) {
      int64_t depth;
      if (name.starts_with(prefix) && !name.drop_front(prefix.size()).getAsInteger(10, depth) &&
          depth >= 0 && depth < 64)
        return std::pair<int64_t, int64_t>{role, depth};
    }
    return std::nullopt;
  }

  /// 1-bit Adam's freeze step: @train_step_frozen, with the arguments of
  /// @train_step, runs from it (0: no such step).
  /// 1 when the ranks that remain may train on after one is lost: every
  /// rank holds the whole state (ZeRO stage 0 without 1-bit Adam, whose
  /// compressed all-reduce scatters the momentum's error feedback), or the
  /// program is DiLoCo whose exchanges were compiled elastic. A DiLoCo
  /// program that is not elastic exchanges by all-to-all, where a lost
  /// replica's block would read as zeros.
  static int64_t elasticProgram(ModuleOp module, int64_t zeroStage, int64_t freezeStep) {
    bool diloco = false, elastic = true;
    for (func::FuncOp fn : module.getOps<func::FuncOp>())
      if (auto d = fn->getAttrOfType<DilocoAttr>(LoomDialect::DilocoAttrHelper::getNameStr())) {
        diloco = true;
        elastic &= d.getElastic();
      }
    if (diloco)
      return elastic ? 1 : 0;
    return zeroStage == 0 && freezeStep == 0 ? 1 : 0;
  }

  static int64_t freezeStepOf(ModuleOp module, func::FuncOp step) {
    auto frozen = module.lookupSymbol<func::FuncOp>(LoomDialect::kTrainStepFrozen);
    auto at = frozen ? frozen->getAttrOfType<IntegerAttr>(
                           LoomDialect::FreezeStepAttrHelper::getNameStr())
                     : IntegerAttr();
    if (!at || frozen.getFunctionType() != step.getFunctionType())
      return 0;
    return at.getInt();
  }

  /// The rows of the table an integer argument indexes: the classes of the
  /// cross-entropy it labels, the rows of the embedding it looks up, through
  /// calls; the smallest where it does several (0: none known, unchecked).
  static int64_t indexLimit(Value arg) {
    int64_t limit = 0;
    auto tighten = [&](int64_t l) { limit = limit ? std::min(limit, l) : l; };
    for (OpOperand &use : arg.getUses()) {
      Operation *user = use.getOwner();
      if (auto ce = dyn_cast<CrossEntropyOp>(user); ce && use.get() == ce.getLabels())
        tighten(tt(ce.getLogits()).getShape().back());
      else if (auto ce = dyn_cast<CrossEntropyGradOp>(user); ce && use.get() == ce.getLabels())
        tighten(tt(ce.getLogits()).getShape().back());
      else if (auto e = dyn_cast<EmbeddingOp>(user); e && use.get() == e.getIndices())
        tighten(tt(e.getTable()).getDimSize(0));
      else if (auto call = dyn_cast<func::CallOp>(user)) {
        auto callee = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(call, call.getCalleeAttr());
        if (callee && !callee.isExternal())
          if (int64_t l = indexLimit(callee.getArgument(use.getOperandNumber())))
            tighten(l);
      }
    }
    return limit;
  }
};

struct LowerToRuntimePass : mlir::loom::impl::LowerToRuntimeBase<LowerToRuntimePass> {
  using LowerToRuntimeBase::LowerToRuntimeBase;
  void getDependentDialects(DialectRegistry &registry) const override {
    registry.insert<rt::LoomRTDialect>();
  }
  void runOnOperation() override {
    if (failed(lowerToRuntime(getOperation(), entry, comments)))
      signalPassFailure();
  }
};

} // namespace

LogicalResult mlir::loom::lowerToRuntime(ModuleOp module, StringRef entry, bool comments) {
  module.getContext()->getOrLoadDialect<rt::LoomRTDialect>();
  return Lowering{module, entry, comments}.run();
}

