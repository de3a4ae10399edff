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
//     its event is waited (one liveness analysis, loom-insert-frees);
//   * streams and events: kernels on the compute stream, work on host
//     memory on the host stream, copies on the copy stream of their
//     direction and collectives on the comm stream, each after an event of
//     the compute stream and followed by its own event (the op's token);
//   * updates: Adam/SGD in place on the global's buffers when the update
//     reads each state symbol and stores it straight back, on the streamed
//     copy when that copy is scratch, else on fresh copies; a bf16 cast of
//     Adam's new weights is fused into the update (loomrt_adam_bf16grad).
//
// The analysis half (`Plan`, Plan.cpp) decides from the loom IR before
// anything is rewritten; the patterns (one per op, in a file per family:
// *Patterns.cpp) only build what it decided, with MLIR's dialect
// conversion. Unsupported IR is refused up front by `checkSupported`
// (Checks.cpp), with a message naming the op. The releases (`loomrt.free`)
// and the host tasks are loomrt passes that follow this one
// (loom-insert-frees, loom-form-host-tasks; the lowering pipeline,
// LoweringPipeline.cpp, runs them).
//
//===----------------------------------------------------------------------===//
#include "passes/LoomToLoomRT/Lowering.h"
#include "loomrt/train.h"

#include "mlir/Dialect/Func/Transforms/FuncConversions.h"
#include "mlir/IR/AsmState.h"
#include "llvm/ADT/TypeSwitch.h"

#include <functional>

namespace mlir::loom {
#define GEN_PASS_DEF_LOWERTORUNTIME
#include "passes/LoomToLoomRT/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;
using namespace mlir::loom::lowering;

namespace {

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

  /// The functions `step` reaches and the program's other entries (1-bit
  /// Adam's frozen step and its entry, DiLoCo's start and outer steps),
  /// callees first; the others are not part of the program and go.
  FailureOr<SmallVector<func::FuncOp>> reachableFunctions(func::FuncOp step) {
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
    auto enter = module.lookupSymbol<func::FuncOp>(LoomDialect::kEnterFrozen);
    if (frozen && enter && entry == LoomDialect::kTrainStep)
      visit(enter);
    // Streaming DiLoCo's start and outer steps (loom-diloco): entries too.
    if (entry == LoomDialect::kTrainStep)
      for (auto fn : module.getOps<func::FuncOp>())
        if (fn.getName() == LoomDialect::kDilocoStart ||
            fn->hasAttr(LoomDialect::DilocoAttrHelper::getNameStr()))
          visit(fn);
    if (bad)
      return failure();
    for (auto fn : llvm::make_early_inc_range(module.getOps<func::FuncOp>()))
      if (!seen.contains(fn))
        fn.erase();

    return order;
  }

  /// Annotates `fn` before its conversion: each op the text of itself as
  /// a comment (one AsmState per function, so printing stays linear; their
  /// SSA numbers are the loom function's), the end of the backward where
  /// `marksBackward` (the training steps), and the function's streams.
  void annotate(func::FuncOp fn, bool marksBackward, Plan &plan) {
    MLIRContext *ctx = fn.getContext();
    OpBuilder b(ctx);
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
      if (marksBackward && isBackwardWork(&op))
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
    FunctionStreams &f = plan.funcs[fn.getSymNameAttr()];
    f.compute = streamOf(rt::StreamRole::compute);
    f.world = rt::CommOp::create(b, loc, rt::CommType::get(ctx), DenseI64ArrayAttr(),
                                 DenseI64ArrayAttr());
    f.collectives = streamOf(rt::StreamRole::comm);
    f.host = streamOf(rt::StreamRole::host);
    f.h2d = streamOf(rt::StreamRole::h2d);
    f.d2h = streamOf(rt::StreamRole::d2h);
  }

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
    FailureOr<SmallVector<func::FuncOp>> reached = reachableFunctions(step);
    if (failed(reached))
      return failure();
    SmallVector<func::FuncOp> &order = *reached;
    auto frozen = module.lookupSymbol<func::FuncOp>(LoomDialect::kTrainStepFrozen);

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
    populateElementwisePatterns(patterns, tc, plan);
    populateComputePatterns(patterns, tc, plan);
    populateMemoryPatterns(patterns, tc, plan);
    populateTransferPatterns(patterns, tc, plan);
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

    // Decide, then annotate.
    for (func::FuncOp fn : order) {
      plan.analyse(fn);
      annotate(fn, fn == frozen || (fn == step && fn.getName() == LoomDialect::kTrainStep),
               plan);
    }

    if (failed(applyFullConversion(module, target, std::move(patterns))))
      return failure();

    // Streams and the communicator nobody uses go (loom-form-host-tasks
    // makes the compute stream again where a task needs it).
    for (func::FuncOp fn : order)
      for (Operation &op : llvm::make_early_inc_range(fn.getBody().front()))
        if (isa<rt::StreamOp, rt::CommOp>(op) && op.use_empty())
          op.erase();
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
    // Tensor parallelism over the whole world: no data parallelism (with
    // it, data parallelism's world is the whole one).
    if (auto tp = module->getAttrOfType<IntegerAttr>(
            LoomDialect::TensorParallelAttrHelper::getNameStr());
        tp && !getDataParallel(step))
      world = tp.getInt();
    // A pipeline stage's program runs on every rank of the world (its
    // stage's among them): the driver picks the program by the rank.
    if (module->hasAttr(LoomDialect::PipelineAttrHelper::getNameStr()))
      for (TopologyOp topo : module.getOps<TopologyOp>()) {
        world = topo.getWorldSize();
        break;
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
              ArrayRef<NamedAttribute>{
                  b.getNamedAttr("freeze_step", b.getI64IntegerAttr(freezeStep)),
                  b.getNamedAttr("variance_refresh",
                                 b.getI64IntegerAttr(varianceRefreshOf(module, step)))})));
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

  /// An integer attribute `name` of 1-bit Adam's @train_step_frozen (0:
  /// none, or a frozen step whose signature is not @train_step's).
  static int64_t frozenStepInt(ModuleOp module, func::FuncOp step, StringRef name) {
    auto frozen = module.lookupSymbol<func::FuncOp>(LoomDialect::kTrainStepFrozen);
    auto at = frozen ? frozen->getAttrOfType<IntegerAttr>(name) : IntegerAttr();
    if (!at || frozen.getFunctionType() != step.getFunctionType())
      return 0;
    return at.getInt();
  }

  /// 1-bit Adam's variance refresh interval (0: frozen for good).
  static int64_t varianceRefreshOf(ModuleOp module, func::FuncOp step) {
    return frozenStepInt(module, step, LoomDialect::VarianceRefreshAttrHelper::getNameStr());
  }

  static int64_t freezeStepOf(ModuleOp module, func::FuncOp step) {
    return frozenStepInt(module, step, LoomDialect::FreezeStepAttrHelper::getNameStr());
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

