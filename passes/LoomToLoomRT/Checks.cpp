//===- Checks.cpp - what the runtime cannot run --------------------------===//
//
// Refused before anything is rewritten, with a message naming the op.
//
//===----------------------------------------------------------------------===//
#include "passes/LoomToLoomRT/Lowering.h"

#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::loom;

namespace mlir::loom::lowering {

static LogicalResult checkTypes(Operation *op) {
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

namespace {

LogicalResult refuseOp(Operation *op, const Twine &what) {
  return op->emitError("code generation " + what), failure();
}

/// A group of the module's topology: the world, or the ranks of some of
/// its levels (a communicator split from the world's, loomrt.comm levels).
LogicalResult checkGroup(Operation *op, ModuleOp module, GroupAttr g) {
  auto topo = module.lookupSymbol<TopologyOp>(g.getTopology());
  if (!topo || groupSize(module, g) < 1 || topo.getLevels().size() > 16)
    return refuseOp(op, "needs each collective's group on a loom.topology of the module (at "
                        "most 16 levels)");
  return success();
}

/// A compression op the runtime has kernels for.
LogicalResult checkCodec(Operation *o) {
  auto refuse = [&](const Twine &what) { return refuseOp(o, what); };
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
}

/// A packed all-to-all or all-gather the runtime can exchange.
LogicalResult checkPackedCollective(Operation *o, ModuleOp module) {
  auto refuse = [&](const Twine &what) { return refuseOp(o, what); };
  auto knownGroup = [&](GroupAttr g) { return checkGroup(o, module, g); };
  if (failed(knownGroup(isa<AllToAllOp>(o) ? llvm::cast<AllToAllOp>(o).getGroup()
                                           : llvm::cast<AllGatherOp>(o).getGroup())))
    return failure();
  auto in = dyn_cast<PackedType>(o->getOperand(0).getType());
  if (!in)
    return success(); // a tensor: its chunks as bytes
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
}

} // namespace

/// `lowered`: the ops the conversion has a pattern for (read from the
/// pattern set, so this check and the patterns cannot drift apart).
LogicalResult checkSupported(Operation *op, ModuleOp module,
                             const llvm::DenseSet<OperationName> &lowered) {
  if (isa<func::ReturnOp, func::CallOp>(op))
    return success();
  if (failed(checkTypes(op)))
    return failure();
  auto refuse = [&](const Twine &what) { return refuseOp(op, what); };
  bool onHost = llvm::any_of(op->getOperandTypes(), isHostMemory);
  // Adam writes the bf16 refresh of its new weights itself.
  auto cast = dyn_cast<CastOp>(op);
  auto adam = cast ? cast.getInput().getDefiningOp<AdamOp>() : AdamOp();
  bool fused = adam && fusedRefreshCast(adam) == cast;
  // (Streaming DiLoCo's outer step with offloaded master weights:
  // subtraction, lerp and SGD on the host, over views of host buffers.)
  if (onHost && !fused &&
      !isa<AdamOp, SgdOp, CopyOp, LoadOp, StoreOp, WaitOp, EmbeddingOp, ZeroCopyOp, CastOp, SubOp,
           LerpOp, ReshapeOp, SliceOp, ConcatOp>(op))
    return refuse("runs only optimizer updates, subtraction, lerp, casts, views, row gathers "
                  "and copies on host memory");
  // A zero-sized tensor has no rows to normalise or multiply: the sizes
  // divide by its dimensions (found by fuzz-onnx-proto).
  if (RankedTensorType t = zeroSizedTensor(op))
    return op->emitError() << "code generation: zero-sized tensors are not supported (" << t << ")";
  auto isLastDim = [](int64_t dim, Value v) { return dim == tt(v).getRank() - 1 || dim == -1; };
  auto knownGroup = [&](GroupAttr g) { return checkGroup(op, module, g); };
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
      .Case<CompressOp, DecompressOp>([&](Operation *o) { return checkCodec(o); })
      .Case<AllToAllOp, AllGatherOp>(
          [&](Operation *o) { return checkPackedCollective(o, module); })
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
      // Activations and their gradients: the receiving side starts as
      // zeros of a float dtype (a rank with no sender keeps them).
      .Case([&](SendRecvOp o) -> LogicalResult {
        auto t = dyn_cast<RankedTensorType>(o.getInput().getType());
        if (!t || !isa<FloatType>(t.getElementType()) || !dtypeOf(t.getElementType()))
          return refuse("passes f32 and bf16 tensors between ranks (activations and their "
                        "gradients), not integer tensors or packed payloads");
        return knownGroup(o.getGroup());
      })
      .Case([&](P2POp o) -> LogicalResult {
        if (o.getInput() && o.getResult() && o.getInput().getType() != o.getResult().getType())
          return refuse("sends and receives one type in one transfer (each boundary of a "
                        "pipeline passes one activation and its gradient)");
        for (Value v : {o.getInput(), o.getResult()})
          if (v && !dtypeOf(llvm::cast<RankedTensorType>(v.getType()).getElementType()))
            return refuse("passes f32 and bf16 tensors between stages");
        return knownGroup(o.getGroup());
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


} // namespace mlir::loom::lowering
