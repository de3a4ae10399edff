//===- Loomc.cpp - the loomc driver ---------------------------------------===//
//
// Reads a model (MODEL.onnx, a --model generator spec, or a .mlir file of
// loom IR), runs the phases up to --compile-to (import; mixed precision and
// autodiff; the optimizer and its offload; data parallelism; the schedule
// report) and writes the IR, the generated C++ or a training binary.
// Errors are one-line messages or MLIR diagnostics and a non-zero exit.
//
//===----------------------------------------------------------------------===//
#include "loom/Codegen.h"
#include "loom/Import.h"
#include "loom/InitAll.h"
#include "loom/Pipelines.h"
#include "loom/PipelineTimeline.h"
#include "Flags.h"
#include "Help.h"
#include "LoomcOptions.h"
#include "Planning.h"
#include "loom/Passes/Loom.h"
#include "loom/Passes/LoomRT.h"
#include "loom/Passes/LoomToLoomRT.h"
#include "loom/FeaturePlacement.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "loom/Support/Files.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>

using namespace mlir;
namespace cost = ::loom::cost;
namespace cl = llvm::cl;

namespace loom {

static constexpr llvm::StringLiteral kPhaseNames[] = {
    "import", "autodiff", "optimizer", "distribute",
    "schedule", "lowered", "cpp", "binary"};

std::optional<Phase> parsePhase(llvm::StringRef name) {
  for (auto [i, n] : llvm::enumerate(kPhaseNames))
    if (name == n)
      return Phase(i);
  return std::nullopt;
}

llvm::StringRef phaseName(Phase p) { return kPhaseNames[int(p)]; }

int loomcError(const llvm::Twine &msg) {
  llvm::errs() << "loomc: error: " << msg << "\n";
  return 1;
}

/// What --prediction-json writes: the predicted step (a pipeline's: its
/// schedule over the stages), the largest device memory of a rank, what a
/// device may hold, and the model's parameters and tokens a step; and a
/// lower bound on the step of any plan with this one's layout and more
/// ZeRO, micro-batches or recompute (--plan=auto's pruning): the compute
/// roofs of the forward and backward's kernels, or the tensor-parallel
/// collectives' link time where longer (the two may overlap), on the
/// busiest stage of a pipeline.
struct PredictionSummary {
  double step = 0, deviceBytes = 0, usableBytes = 0, params = 0, tokens = 0, bound = 0;
  /// The largest rank's parameters and optimizer state in device memory:
  /// what more micro-batches or recompute cannot shrink.
  double persistentBytes = 0;
  /// The step simulation's key of the tensor-parallel communicator (the
  /// innermost level, "0"), empty without tensor parallelism.
  std::string tensorParallelKey;
};
static PredictionSummary summary;

static int writePredictionJson(const std::string &path) {
  if (path.empty())
    return 0;
  std::string err;
  std::unique_ptr<llvm::raw_fd_ostream> f = ::loom::openOutputNoFollow(path, err);
  if (!f)
    return loomcError(err);
  *f << llvm::formatv("{{\"step_s\": {0:e}, \"device_bytes\": {1:e}, \"usable_bytes\": {2:e}, "
                      "\"params\": {3:e}, \"tokens\": {4:e}, \"bound_s\": {5:e}, "
                      "\"persistent_bytes\": {6:e}}\n",
                      summary.step, summary.deviceBytes, summary.usableBytes, summary.params,
                      summary.tokens, summary.bound, summary.persistentBytes);
  return 0;
}

/// The cost model's prediction of the step (stderr) and, with `timeline`,
/// the whole predicted schedule as a Chrome trace. Returns the exit code;
/// the prediction in `out` where given (a pipeline stage's work).
static int reportPrediction(ModuleOp module, const cost::Hardware &hw,
                            const std::string &timeline,
                            const mlir::loom::LoweringOptions &lowering, double &peakDevice,
                            const std::string &what = "step",
                            mlir::loom::StepPrediction *out = nullptr) {
  FailureOr<mlir::loom::StepPrediction> pred =
      mlir::loom::simulateStep(module, hw, !timeline.empty(), lowering);
  if (failed(pred))
    return 1;
  if (out)
    *out = *pred;
  peakDevice = pred->peakDeviceBytes();
  // (With Streaming DiLoCo the step --plan=auto compares is the mean over
  // the outer period.)
  double mean = predictDiloco(module, hw, lowering, pred->stepSeconds);
  if (mean < 0)
    return 1;
  summary.step = mean;
  {
    auto tp = summary.tensorParallelKey.empty() ? pred->comm.end()
                                                : pred->comm.find(summary.tensorParallelKey);
    summary.bound = std::max({summary.bound, pred->computeRoofSecondsToBackward,
                              tp != pred->comm.end() ? tp->second.seconds : 0});
  }
  summary.deviceBytes = std::max(summary.deviceBytes, peakDevice);
  summary.persistentBytes = std::max(summary.persistentBytes, pred->persistentDeviceBytes);
  summary.usableBytes = hw.hasGpu ? mlir::loom::usableDeviceBytes(hw) : 0;
  constexpr double GiB = double(1ull << 30);
  llvm::errs() << llvm::formatv(
      "loomc: predicted {5} on '{0}': {1:F3} s (last gradient at {2:F3} s, update "
      "{3:F3} s); device memory {4:F1} GiB",
      hw.name, pred->stepSeconds, pred->backwardSeconds, pred->updateSeconds,
      pred->peakDeviceBytes() / GiB, what);
  if (hw.hasGpu)
    llvm::errs() << llvm::formatv(" of {0:F1} usable", mlir::loom::usableDeviceBytes(hw) / GiB);
  llvm::errs() << "\n";
  if (!pred->comm.empty())
    llvm::errs() << "loomc: predicted bytes this rank sends a step, per communicator:"
                 << commSummary(*pred) << "\n";
  // 1-bit Adam: the step after the freeze is another function.
  if (module.lookupSymbol(mlir::loom::LoomDialect::kTrainStepFrozen)) {
    FailureOr<mlir::loom::StepPrediction> frozen =
        mlir::loom::simulateStep(module, hw, false, lowering,
                                 mlir::loom::LoomDialect::kTrainStepFrozen);
    if (failed(frozen))
      return 1;
    llvm::errs() << llvm::formatv("loomc: predicted step after the freeze (1-bit Adam) on "
                                  "'{0}': {1:F3} s\n",
                                  hw.name, frozen->stepSeconds);
  }
  if (mlir::loom::OffloadPlanAttr plan = mlir::loom::getOffloadPlan(module))
    llvm::errs() << llvm::formatv("loomc: offload plan: {0} subgroups resident on the GPU, "
                                  "{1} streamed, {2} on the CPU\n",
                                  plan.getGpu(), plan.getStream(), plan.getCpu());
  if (hw.hasGpu && pred->peakDeviceBytes() > mlir::loom::usableDeviceBytes(hw))
    llvm::errs() << "loomc: warning: the step is predicted not to fit in device memory; "
                    "try --optimizer-offload=interleaved\n";
  if (!timeline.empty()) {
    std::string terr;
    std::unique_ptr<llvm::raw_fd_ostream> tf = ::loom::openOutputNoFollow(timeline, terr);
    if (!tf)
      return loomcError(terr);
    *tf << mlir::loom::chromeTrace(*pred, "loomc --timeline (" + hw.name + ")");
  }
  return 0;
}

/// The module of a generator spec; null after printing why.
static OwningOpRef<ModuleOp> generate(MLIRContext &ctx, const std::string &spec) {
  std::string err;
  OwningOpRef<ModuleOp> module = generateModel(ctx, spec, err);
  if (!module)
    loomcError(err);
  return module;
}

/// The module of an input file: an ONNX import, or parsed IR; null after
/// printing why (the parser's diagnostics, or one line).
static OwningOpRef<ModuleOp> loadModule(MLIRContext &ctx, llvm::StringRef path,
                                        const OnnxImportOptions &onnx) {
  std::string err;
  if (path.ends_with(".onnx")) {
    OwningOpRef<ModuleOp> module = importOnnx(ctx, path, onnx, err);
    if (!module)
      loomcError(err);
    return module;
  }
  std::unique_ptr<llvm::MemoryBuffer> buf = openInputFile(path, &err);
  if (!buf) {
    loomcError(err);
    return nullptr;
  }
  llvm::SourceMgr sm;
  sm.AddNewSourceBuffer(std::move(buf), llvm::SMLoc());
  SourceMgrDiagnosticHandler handler(sm, &ctx);
  return parseSourceFile<ModuleOp>(sm, &ctx);
}



/// What is known of the compression setting's cost in loss (issue 53): one
/// line when the flags compress anything, a warning above --max-loss-gap.
static void noteLossGap(const LoomcOptions &o, const FlagDecisions &d) {
  cost::CompressionSetting s = compressionOf(o, d);
  std::string name = cost::describe(s);
  if (name.empty())
    return;
  cost::LossGap g = cost::lossGap(s);
  std::string bound = llvm::formatv("--max-loss-gap {0:P}", double(o.maxLossGap)).str();
  if (!g.known) {
    llvm::errs() << "loomc: note: loss fidelity of " << name << " is not known (" << g.why
                 << "): " << bound << " cannot be checked\n";
    return;
  }
  bool over = g.gap > o.maxLossGap;
  llvm::errs() << "loomc: " << (over ? "warning: " : "") << "loss fidelity of " << name << ": "
               << g.why << (over ? "; over " : "; within ") << bound << "\n";
}

/// loomc --help: its flags by topic (lib/Pipelines/Help.cpp). A flag of
/// loomc's category that no topic lists still shows, under "Other".
static void printLoomcHelp(const LoomcOptions &o) {
  auto it = [](const auto &opt, std::string def = "\x01") {
    // (std::addressof: cl::list overloads & to give its vector.)
    return HelpItem{static_cast<const cl::Option *>(std::addressof(opt)),
                    def == "\x01" ? helpDefault(opt) : def};
  };
  std::vector<HelpSection> s = {
      {"Input and model",
       {it(o.model), it(o.task), it(o.frozen), it(o.dropout), it(o.init),
        it(o.listOnnxOperators), it(o.precision)}},
      {"Optimizer",
       {it(o.optimizer), it(o.lr), it(o.weightDecay), it(o.beta1), it(o.beta2), it(o.eps),
        it(o.momentum), it(o.clipGrad, "off"), it(o.freezeStep, ""), it(o.onebitBucketSize), it(o.onebitVariance),
        it(o.varianceRefresh, "0: never")}},
      {"Parallelism and compression",
       {it(o.topologyFlag), it(o.zeroStage, "none: one rank, or stage 0 with --topology"),
        it(o.tensorParallel, "1: none"), it(o.sequenceParallel), it(o.microBatches, "1: none"),
        it(o.pipelineParallel, "1: none"), it(o.pipelineSchedule), it(o.expertParallel, "1: none"),
        it(o.zeropp), it(o.hierarchy, "auto for ZeRO-3 over several levels"),
        it(o.bucketSize), it(o.reduceDtype), it(o.prefetch), it(o.diloco)}},
      {"Memory and offload",
       {it(o.offload), it(o.replan), it(o.hostThread), it(o.subGroupSize), it(o.recompute),
        it(o.memoryBudget, ""), it(o.deviceMemory, ""), it(o.arena), it(o.graphFeatures)}},
      {"Cost model",
       {it(o.hardware, ""), it(o.whatIf), it(o.timeline), it(o.plan, "off"), it(o.planReport),
        it(o.planExhaustive), it(o.predictionJson), it(o.planChosen), it(o.maxLossGap)}},
      {"Output and code generation",
       {it(o.compileTo), it(o.output), it(o.target), it(o.emitDir), it(o.runtimeDir),
        it(o.noFuse), it(o.noGraphs), it(o.noWorkingCopies)}},
  };
  llvm::SmallPtrSet<const cl::Option *, 32> listed = {&o.input}; // (the usage line)
  for (const HelpSection &sec : s)
    for (const HelpItem &i : sec.items)
      listed.insert(i.opt);
  HelpSection other{"Other", {}};
  for (auto &[name, opt] : cl::getRegisteredOptions())
    if (llvm::is_contained(opt->Categories, &o.cat) && !listed.contains(opt))
      other.items.push_back({opt, ""});
  s.push_back(other);
  printHelp(llvm::outs(),
            "loomc: compile a model into a training binary\n\n"
            "USAGE: loomc [options] [MODEL.onnx | MODEL.mlir]\n\n"
            "  loomc --model gpt:layers=2,d_model=64 -o train    # a training binary\n"
            "  loomc model.onnx --compile-to=import -o out.mlir   # the imported IR\n"
            "  --version: Loom's version and commit; docs/cli.md: every flag in full",
            s);
}

/// Registers MLIR's options beside loomc's (hiding libLLVM's hundreds of
/// backend options) and parses the command line.
static bool parseCommandLine(int argc, char **argv, LoomcOptions &o) {
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  registerPassManagerCLOptions();
  registerDefaultTimingManagerCLOptions();
  // Show only loomc's own and MLIR's (--mlir-print-ir-after-all,
  // --mlir-timing, ...).
  for (auto &[name, opt] : cl::getRegisteredOptions()) {
    bool ours = llvm::is_contained(opt->Categories, &o.cat);
    if (!ours && !name.starts_with("mlir-") && name != "help" && name != "version" &&
        name != "help-hidden")
      opt->setHiddenFlag(cl::ReallyHidden);
    else if (name.starts_with("mlir-"))
      opt->setHiddenFlag(cl::Hidden); // --help-hidden lists them
  }
  // --help (and -h): loomc's own printer; --help-hidden stays LLVM's,
  // with MLIR's options.
  for (int i = 1; i < argc; ++i) {
    StringRef a(argv[i]);
    if (a == "--help" || a == "-help" || a == "-h" || a == "--h") {
      printLoomcHelp(o);
      std::exit(0);
    }
  }
  cl::SetVersionPrinter([](llvm::raw_ostream &os) { printVersion(os); });
  return cl::ParseCommandLineOptions(argc, argv,
                                     "loomc: compile a model into a training binary\n\n"
                                     "  loomc --model gpt:layers=2,d_model=64 --compile-to=import\n"
                                     "  loomc step.mlir --compile-to=import -o out.mlir\n");
}


/// The data-parallel world as `loom.topology @world` (levels innermost
/// first).
static int addTopology(ModuleOp module, const FlagDecisions &d) {
  if (module.lookupSymbol("world"))
    return loomcError("the input already defines a symbol @world; --topology adds "
                      "loom.topology @world");
  OpBuilder tb(module.getContext());
  tb.setInsertionPointToStart(module.getBody());
  SmallVector<llvm::StringRef> names;
  SmallVector<int64_t> sizes;
  for (auto &l : d.levels) {
    names.push_back(l.first);
    sizes.push_back(l.second);
  }
  mlir::loom::TopologyOp::create(tb, module.getLoc(), tb.getStringAttr("world"),
                                 tb.getStrArrayAttr(names), tb.getDenseI64ArrayAttr(sizes));
  return 0;
}

/// A CPU target planned and predicted on a GPU machine's description (the
/// default --hardware where the plan is a GPU host's): the figures are that
/// machine's, not this binary's.
static void noteForeignDescription(const LoomcOptions &o, const cost::Hardware &hw) {
  if (hw.hasGpu && o.target == "cpu" && !o.hardware.getNumOccurrences())
    llvm::errs() << "loomc: note: the prediction and plan above are for '" << hw.name
                 << "' (the default --hardware where the plan places work on a GPU), not for "
                    "this CPU binary: give --hardware=cpu-host or a loom-calibrate file to "
                    "predict the CPU\n";
}

/// The rate the plan charged one rank's CPU updates: its share of the host
/// it shares with the other ranks on it (the step simulation's), which the
/// binary compares with what it measures.
static double plannedCpuAdamRate(ModuleOp module, const cost::Hardware &hw) {
  int64_t world = 1;
  if (Operation *step = module.lookupSymbol(mlir::loom::LoomDialect::kTrainStep))
    if (mlir::loom::DataParallelAttr dp = mlir::loom::getDataParallel(step))
      world = dp.getWorld();
  return mlir::loom::cpuAdamRate(cost::rankShare(hw, cost::ranksPerHost(hw, world)));
}

/// --hardware, or when it is not given: an MI250X GCD (frontier) for
/// --target=hip, the H100 for cuda, and for a CPU binary the 2-core CPU
/// host (cpu-host), so that its prediction is of the machine it runs on.
/// A CPU binary whose plan only a GPU host has (the optimizer offloaded,
/// --device-memory, the hpZ hierarchy, --plan) keeps the H100: those plans
/// are dry runs of a GPU host's step, and loomc says so.
static std::string hardwareName(const LoomcOptions &o, const FlagDecisions &d) {
  if (o.hardware.getNumOccurrences())
    return o.hardware;
  if (o.target == "hip")
    return "frontier";
  bool gpuPlan = o.offload != "none" || o.deviceMemory > 0 || d.planHpz ||
                 !d.hpzLevels.empty() || !o.plan.empty();
  return o.target == "cpu" && !gpuPlan ? "cpu-host" : "h100";
}

/// The machine the cost model plans and predicts for (--hardware, scaled
/// by each --what-if), read before any work; none where nothing needs it.
static std::optional<std::string> readHardware(const LoomcOptions &o, const FlagDecisions &d,
                                               std::optional<cost::Hardware> &hw) {
  if (o.offload == "none" && o.timeline.empty() && o.whatIf.empty() && !d.planHpz &&
      o.hardware.getNumOccurrences() == 0 && o.deviceMemory == 0)
    return std::nullopt;
  std::string herr;
  hw = mlir::loom::loadHardware(hardwareName(o, d), herr);
  if (!hw)
    return herr;
  // --device-memory: the card the plan is for has this much memory (an
  // H200 planned as an 80 GB card); the binary holds the rest back.
  if (o.deviceMemory > 0) {
    if (!hw->hasGpu)
      return "--device-memory: hardware '" + hw->name + "' has no GPU";
    double cap = o.deviceMemory * double(1ull << 30);
    if (hw->gpuMemoryBytes > 0 && cap > hw->gpuMemoryBytes)
      return llvm::formatv("--device-memory={0} is more than the {1:F1} GiB of hardware '{2}'",
                           o.deviceMemory.getValue(), hw->gpuMemoryBytes / double(1ull << 30),
                           hw->name)
          .str();
    hw->gpuMemoryBytes = cap;
  }
  // What-if: the same plan and prediction on a machine that differs in one
  // resource (the high-frequency-cores paper's question).
  for (const std::string &w : o.whatIf) {
    auto [resource, factorText] = llvm::StringRef(w).split('=');
    double factor = 0;
    if (factorText.getAsDouble(factor))
      return "bad --what-if '" + w + "': expected RESOURCE=FACTOR (e.g. cpu-clock=4)";
    hw = cost::scaled(*hw, resource, factor, herr);
    if (!hw)
      return "--what-if: " + herr;
  }
  return std::nullopt;
}

/// The pipeline's options from the flags (and the hardware loomc read).
static PipelineOptions pipelineOptions(const LoomcOptions &o, const FlagDecisions &d,
                                       const std::optional<cost::Hardware> &hw) {
  PipelineOptions po;
  // The host thread: the offload passes and the lowering read it from the
  // pipeline's options, and so do the planners' candidates (recompute,
  // prefetch, hierarchy) and the prediction's lowered copies (loweringOf).
  // (Set after the planners until 2026-11-29: their offload candidates
  // ran every CPU update after the step, 0.94 s where the binary's plan
  // predicts 0.55 s.)
  po.hostThread = o.hostThread == "on" || (o.hostThread == "auto" && o.target != "cpu");
  po.reinitParams = o.init == "random";
  po.precision = o.precision;
  if (o.recompute == "full" || o.recompute.empty())
    po.recompute = mlir::loom::RecomputeKind::full;
  else if (o.recompute == "selective")
    po.recompute = mlir::loom::RecomputeKind::selective;
  po.fuse = !o.noFuse;
  po.planArena = o.arena == "planned";
  po.graphs = !o.noGraphs;
  po.workingCopies = !o.noWorkingCopies;
  // 1-bit Adam is AdamW until its freeze step (decoupled weight decay, as
  // DeepSpeed's OnebitAdam), then loom-onebit-adam's frozen step.
  po.optimizer.optimizer = o.optimizer == "sgd"    ? mlir::loom::OptimizerKind::sgd
                           : o.optimizer == "adam" ? mlir::loom::OptimizerKind::adam
                                                   : mlir::loom::OptimizerKind::adamw;
  po.onebitFreezeStep = d.onebit ? o.freezeStep : 0;
  po.onebitBucketSize = o.onebitBucketSize;
  po.onebitVarianceRefresh = o.varianceRefresh;
  po.clipGrad = o.clipGrad;
  po.onebitVariance = o.onebitVariance == "replicated" ? mlir::loom::FrozenVariance::replicated
                                                       : mlir::loom::FrozenVariance::sharded;
  po.diloco = d.diloco;
  po.optimizer.lr = o.lr;
  po.optimizer.weightDecay = o.weightDecay;
  po.optimizer.beta1 = o.beta1;
  po.optimizer.beta2 = o.beta2;
  po.optimizer.eps = o.eps;
  po.optimizer.momentum = o.momentum;
  po.offload = o.offload;
  po.subGroupSize = o.subGroupSize;
  // The description loomc read (and --what-if scaled), not the file again.
  po.hardware = hw ? &*hw : nullptr;
  po.dataParallel = d.dataParallel;
  po.tensorParallel = o.tensorParallel;
  po.microBatches = o.microBatches;
  po.pipelineSchedule = o.pipelineSchedule;
  po.pipelineParallel = o.pipelineParallel;
  po.pipelineChunks = d.pipelineChunks;
  // (loom-pipeline-cut prices the stages on the description loomc reads.)
  if (o.pipelineParallel > 1)
    po.hardwareName = hardwareName(o, d);
  po.pipelineLevel = d.pipelineLevel;
  po.deviceMemoryGiB = o.deviceMemory;
  po.sequenceParallel = o.sequenceParallel;
  if (o.tensorParallel > 1)
    po.tensorParallelLevel = d.levels.front().first;
  po.expertParallel = o.expertParallel;
  if (o.expertParallel > 1)
    po.expertLevel = d.levels.front().first;
  po.zeroStage = std::max(0, int(o.zeroStage));
  po.bucketSize = o.bucketSize;
  po.prefetch = o.prefetch == "auto" ? 1 : std::stoll(o.prefetch);
  po.reduceBf16 = o.reduceDtype == "bf16";
  po.hpzLevels = d.hpzLevels;
  po.qwzBlock = d.qwzBlock;
  po.qgzBlock = d.qgzBlock;
  return po;
}

/// A graph model's feature table: planned here to print the decision (on
/// --hardware, the H100 preset by default; a CPU target has no GPU, so auto
/// keeps the table in the host's memory), applied by the pipeline.
static int planFeatures(ModuleOp module, const LoomcOptions &o, const FlagDecisions &d,
                        const std::optional<cost::Hardware> &hw, PipelineOptions &po) {
  std::string herr;
  std::optional<cost::Hardware> placeHw =
      hw ? hw
         : mlir::loom::loadHardware(o.target == "cpu" && !o.hardware.getNumOccurrences()
                                        ? std::string("cpu-host")
                                        : hardwareName(o, d),
                                    herr);
  if (!placeHw)
    return loomcError(herr);
  if (o.target == "cpu")
    placeHw->hasGpu = false;
  FailureOr<mlir::loom::FeaturePlacementPlan> plan =
      mlir::loom::planFeaturePlacement(module, *placeHw, o.graphFeatures);
  if (failed(plan))
    return 1;
  if (plan->any) {
    std::printf("%s\n", plan->describe().c_str());
    po.graphFeatures = cost::placementName(plan->chosen);
  } else if (o.graphFeatures.getNumOccurrences()) {
    return loomcError("--graph-features is for graph models (--model sage or gcn)");
  }
  return 0;
}

/// What the binary records beside the step: the device-memory cap and the
/// predicted peak, the CPU Adam rate the plan assumed, the target, the
/// runtime, and what was compiled: the generator's spec or the model file
/// (IR that loomc or loom-opt wrote from a model says which, its
/// loom.model, so a binary built from it resumes the model's checkpoints).
static CodegenOptions codegenOptions(ModuleOp module, const LoomcOptions &o,
                                     const FlagDecisions &d,
                                     const std::optional<cost::Hardware> &hw,
                                     double peakDevice) {
  CodegenOptions cg;
  cg.deviceMemoryBytes = int64_t(o.deviceMemory * double(1ull << 30));
  cg.predictedDeviceBytes = hw && hw->hasGpu ? int64_t(peakDevice) : 0;
  if (hw && o.offload != "none")
    cg.plannedCpuAdamRate = plannedCpuAdamRate(module, *hw);
  cg.target = o.target;
  cg.runtimeDir = d.runtimeDir;
  auto recorded =
      module->getAttrOfType<StringAttr>(mlir::loom::LoomDialect::ModelAttrHelper::getNameStr());
  cg.model = !o.model.empty() ? o.model.getValue()
             : recorded && StringRef(o.input).ends_with(".mlir") ? recorded.getValue().str()
                                                                 : o.input.getValue();
  return cg;
}

/// A pipeline stage's predicted work: its forward and backward, its update,
/// and the time its GPU computes (the step simulation's kernel time).
struct StageWork {
  double backward = 0, update = 0, busy = 0;
};

/// The pipeline's step and each stage's bubble. The schedule's order on
/// every stage (cost::pipelineOrder: 1F1B, GPipe, ZB-H1, interleaved) is
/// timed with each stage's predicted forward and backward split evenly
/// over its micro-batches and chunks, a forward a third of it (ZB-H1: the
/// backward's input and weight gradients a third each); each stage's
/// update follows its last backward and the step ends with the last. For
/// balanced 1F1B stages that is (M + P - 1) / M times a stage's forward
/// and backward (Narayanan et al. 2021, §2.2). A stage's bubble is the
/// step's time its GPU does not compute (as bench/run-pipeline-gpu.sh
/// measures it: 1 - its kernels' time / the step). Transfers between
/// stages are not priced (one activation a hop: 8 MiB over NVLink is
/// about 50 us).
static void reportPipelineStep(const std::vector<StageWork> &work, const PipelineOptions &po,
                               const std::optional<cost::Hardware> &hw) {
  if (work.empty() || !hw || int64_t(work.size()) != po.pipelineParallel)
    return;
  int64_t p = po.pipelineParallel, v = po.pipelineChunks, m = po.microBatches;
  cost::PipelineShape shape{p, v, m, v > 1 ? "interleaved" : po.pipelineSchedule};
  if (cost::checkPipelineShape(shape))
    return;
  bool zb = shape.schedule == "zb-h1";
  std::vector<std::vector<cost::PipeUnit>> order = cost::pipelineOrder(shape);
  std::optional<double> end = cost::timePipeline(
      order, p,
      [&](const cost::PipeUnit &u) {
        double unit = work[size_t(u.chunk % p)].backward / double(m * v);
        return u.work == cost::PipeWork::Backward && !zb ? 2 * unit / 3 : unit / 3;
      },
      0);
  if (!end)
    return;
  double step = 0;
  for (auto [s, units] : llvm::enumerate(order))
    step = std::max(step, (units.empty() ? 0 : units.back().end) + work[s].update);
  summary.step = step;
  if (!hw->hasGpu) {
    llvm::errs() << llvm::formatv("loomc: predicted pipeline step on '{0}': {1:F3} s\n", hw->name,
                                  step);
    return;
  }
  std::string bubbles;
  for (auto [s, w] : llvm::enumerate(work))
    bubbles += llvm::formatv("{0}stage {1} {2:F1}%", s ? ", " : "", s,
                             100 * std::max(0.0, 1 - w.busy / step))
                   .str();
  llvm::errs() << llvm::formatv("loomc: predicted pipeline step on '{0}': {1:F3} s ({2} "
                                "micro-batches over {3} stages{4}, {5}); each stage's GPU idle "
                                "over the step (the bubble, and communication not hidden): "
                                "{6}\n",
                                hw->name, step, m, p,
                                v > 1 ? llvm::formatv(" x {0} chunks", v).str() : "",
                                v > 1 ? std::string("interleaved") : po.pipelineSchedule, bubbles);
}

/// --pipeline-parallel and --expert-parallel: the phases run once for
/// each stage (or expert rank) on a copy of the module (loom-pipeline-split
/// or loom-expert-parallel keeps that rank's part), each one's prediction
/// printed, and the programs written together (the driver runs the rank's).
static int compileStages(ModuleOp module, Phase reached, Phase phase, PipelineOptions po,
                         const LoomcOptions &o, FlagDecisions &d,
                         const std::optional<cost::Hardware> &hw) {
  const bool experts = o.expertParallel > 1;
  const char *what = experts ? "--expert-parallel splits the experts" : "--pipeline-parallel "
                                                                        "cuts the forward into "
                                                                        "stages";
  if (reached >= Phase::Autodiff)
    return loomcError(llvm::Twine(what) + ": give the model before autodiff (a forward, not "
                                          "@forward_backward)");
  if (failed(verify(module)))
    return 1;
  std::vector<OwningOpRef<ModuleOp>> stages;
  std::vector<int64_t> peaks;
  std::vector<StageWork> work;
  const int64_t programs = experts ? o.expertParallel : o.pipelineParallel;
  for (int64_t s = 0; s < programs; ++s) {
    OwningOpRef<ModuleOp> m = module.clone();
    (experts ? po.expertRank : po.pipelineStage) = s;
    po.printPipelineCut = s == 0;
    PassManager pm(module.getContext());
    if (failed(applyPassManagerCLOptions(pm)))
      return 1;
    buildPipeline(pm, reached, phase, po);
    applyDefaultTimingPassManagerCLOptions(pm);
    if (failed(pm.run(*m)))
      return 1;
    double stagePeak = 0;
    bool predicted = hw && phase >= Phase::Optimizer &&
                     (*m).lookupSymbol(mlir::loom::LoomDialect::kTrainStep);
    // Its GPU's busy time and its forward and backward, for the bubble
    // (its kernels' time: the gaps between them are idle, as CUPTI sees a
    // step). One simulation serves the report and the bubble.
    if (predicted) {
      mlir::loom::StepPrediction pred;
      std::string label = experts ? "expert rank " + std::to_string(s) + "'s step"
                                  : "stage " + std::to_string(s) +
                                        "'s step (its work, without waits)";
      if (reportPrediction(*m, *hw, "", loweringOf(po), stagePeak, label, &pred))
        return 1;
      work.push_back({pred.backwardSeconds, pred.updateSeconds, pred.gpuKernelSeconds});
    }
    peaks.push_back(hw && hw->hasGpu ? int64_t(stagePeak) : 0);
    stages.push_back(std::move(m));
  }
  if (!experts)
    reportPipelineStep(work, po, hw);
  std::vector<ModuleOp> views;
  for (auto &m : stages)
    views.push_back(*m);
  CodegenOptions cg = codegenOptions(views.front(), o, d, hw, 0);
  if (int rc = writePredictionJson(o.predictionJson))
    return rc;
  return writeStagesOutput(views, peaks, phase, o.output, o.emitDir, cg);
}

/// --plan: the search compiles each candidate, then the chosen plan, with
/// loomc again (PlanSearch.cpp); here only what it reads: the machine.
static int runPlan(int argc, char **argv, const LoomcOptions &o, const FlagDecisions &d) {
  std::string herr;
  std::optional<cost::Hardware> phw = mlir::loom::loadHardware(hardwareName(o, d), herr);
  if (!phw)
    return loomcError(herr);
  // MFU as the project reports it: over 989 TFLOP/s a GPU in bf16 (the
  // H100's and H200's dense peak), else the description's fp32 rate.
  double peak = !phw->hasGpu ? 0 : o.precision == "bf16" ? 989e12 : phw->gpuFlopsF32;
  return planMain(argc, argv, o, d.levels, hardwareName(o, d), peak);
}

/// What --prediction-json reports beside the step: the model's size and
/// its tokens a step, and which communicator is tensor-parallel (each rank's rows of the first integer input, times
/// the micro-batches and the data-parallel replicas).
static void noteModelSize(ModuleOp module, const LoomcOptions &o, const FlagDecisions &d) {
  if (o.tensorParallel > 1) // (the innermost level, the simulation's key "0")
    summary.tensorParallelKey = "0";
  for (auto p : module.getOps<mlir::loom::ParamOp>())
    summary.params += double(cast<mlir::ShapedType>(p.getType()).getNumElements());
  if (auto fwd = module.lookupSymbol<mlir::func::FuncOp>(mlir::loom::LoomDialect::kForward))
    for (mlir::Type t : fwd.getArgumentTypes())
      if (auto tt = dyn_cast<mlir::RankedTensorType>(t);
          tt && tt.getElementType().isInteger() && tt.hasStaticShape()) {
        summary.tokens = double(tt.getNumElements()) * double(o.microBatches) *
                         double(d.world / o.tensorParallel / o.pipelineParallel);
        return;
      }
}

int loomcMain(int argc, char **argv) {
  llvm::InitLLVM initLLVM(argc, argv);
  installCrashMessage();
  static LoomcOptions o;
  if (!parseCommandLine(argc, argv, o))
    return 1;
  auto error = loomcError;
  if (o.listOnnxOperators) {
    llvm::outs() << onnxOperatorTable();
    return 0;
  }
  FlagDecisions d;
  if (std::optional<std::string> err = checkFlags(o, d))
    return error(*err);
  const Phase phase = d.phase;
  if (!o.plan.empty())
    return runPlan(argc, argv, o, d);
  noteLossGap(o, d);

  DialectRegistry registry;
  registerAllDialects(registry);
  MLIRContext ctx(registry);
  OnnxImportOptions onnx;
  onnx.task = o.task;
  onnx.frozen.assign(o.frozen.begin(), o.frozen.end());
  onnx.dropoutOff = o.dropout == "off";
  onnx.weightValues = o.init != "random";
  OwningOpRef<ModuleOp> module =
      o.model.empty() ? loadModule(ctx, o.input, onnx) : generate(ctx, d.modelSpec);
  if (!module)
    return 1;
  if (!o.planChosen.empty())
    recordPlan(*module, o.planChosen);
  noteModelSize(*module, o, d);

  // The streams are assigned by the passes that create asynchronous work
  // (data parallelism, offload), so the schedule phase prints the order of
  // work per stream (loom-print-schedule, on stderr) and writes the IR;
  // `lowered` writes the loomrt IR of runtime calls (loom-lower-to-runtime)
  // that `cpp` translates to C++ (docs/codegen.md).
  if (d.dataParallel)
    if (int rc = addTopology(*module, d))
      return rc;
  if (phase == Phase::Binary && o.output == "-")
    return error("--compile-to=binary writes an executable: give -o FILE");

  if (o.precision == "bf16" && module->lookupSymbol(mlir::loom::LoomDialect::kForwardBackward))
    return error("--precision=bf16 rewrites the forward before autodiff; this "
                 "input already has @forward_backward (give the forward only)");
  if (o.subGroupSize < 1)
    return error("--sub-group-size must be positive");
  if (o.graphFeatures != "auto" && !cost::parsePlacement(o.graphFeatures))
    return error("unknown --graph-features '" + o.graphFeatures +
                 "': expected auto, device, zero-copy or host-gather");
  if (!o.timeline.empty() && phase < Phase::Optimizer)
    return error("--timeline predicts a training step: use --compile-to=optimizer or a later "
                 "phase");
  d.planHpz = d.planHpz && phase >= Phase::Distribute;
  std::optional<cost::Hardware> hw;
  if (std::optional<std::string> err = readHardware(o, d, hw))
    return error(*err);

  // The phases from what the input holds up to the schedule; the lowering
  // runs after the step simulation below (it reads the loom IR).
  PipelineOptions po = pipelineOptions(o, d, hw);
  Phase reached = reachedPhase(*module);
  if (reached < Phase::Autodiff && phase >= Phase::Autodiff)
    if (int rc = planFeatures(*module, o, d, hw, po))
      return rc;
  // loomrt IR names raw buffers and byte offsets whose bounds no verifier
  // can check (a buffer's size is not in its type), so a hand-edited
  // lowering could make a binary write out of bounds: loomc builds from
  // loom IR only. (Sized buffer types would lift this: docs/codegen.md.)
  if (reached >= Phase::Lowered)
    return error("the input is already lowered (loomrt IR): loomc builds binaries from loom IR, "
                 "whose every access it can check; give the module before --compile-to=lowered");
  // What --recompute=auto and --prefetch=auto plan for.
  const double budget = !hw                 ? 0
                        : o.memoryBudget > 0 ? o.memoryBudget * double(1ull << 30)
                                             : 0.9 * mlir::loom::usableDeviceBytes(*hw);
  if (o.recompute == "auto" && hw && hw->hasGpu && phase >= Phase::Optimizer &&
      reached < Phase::Autodiff && o.pipelineParallel == 1) {
    if (failed(verify(*module)))
      return 1;
    if (!planRecompute(*module, reached, po, *hw, budget))
      return 1;
  }
  if (o.prefetch == "auto" && hw && hw->hasGpu && phase >= Phase::Distribute &&
      d.dataParallel && o.zeroStage == 3 && reached < Phase::Distribute &&
      o.pipelineParallel == 1) {
    if (failed(verify(*module)))
      return 1;
    if (!planPrefetch(*module, reached, po, *hw, budget))
      return 1;
  }
  if (d.planHpz) {
    if (failed(verify(*module)))
      return 1;
    std::optional<HierarchyCandidate> chosen = planHierarchy(*module, reached, po, *hw, d.levels);
    if (!chosen)
      return 1;
    po.hpzLevels = chosen->secondary;
    po.qgzInner = chosen->qgzInner;
  }
  if (o.pipelineParallel > 1 || o.expertParallel > 1)
    return compileStages(*module, reached, phase, po, o, d, hw);
  PassManager pm(&ctx);
  if (failed(applyPassManagerCLOptions(pm)))
    return 1;
  buildPipeline(pm, reached, phase, po);
  applyDefaultTimingPassManagerCLOptions(pm);
  // --replan compiles the same input again for other host rates (only
  // the interleaved plan changes with them).
  OwningOpRef<ModuleOp> input =
      d.replan && hw && o.offload == "interleaved" ? module->clone() : OwningOpRef<ModuleOp>();
  if (failed(verify(*module)) || failed(pm.run(*module)))
    return 1;
  // The cost model's view of the step: one line whenever the optimizer is
  // offloaded, and the whole predicted schedule with --timeline. It prices
  // the lowered step (a lowered copy before --compile-to=lowered).
  double peakDevice = 0;
  if (hw && phase >= Phase::Optimizer &&
      module->lookupSymbol(mlir::loom::LoomDialect::kTrainStep) &&
      reportPrediction(*module, *hw, o.timeline, loweringOf(po), peakDevice))
    return 1;
  if (hw && phase >= Phase::Optimizer && module->lookupSymbol(mlir::loom::LoomDialect::kTrainStep))
    noteForeignDescription(o, *hw);

  CodegenOptions cg = codegenOptions(*module, o, d, hw, peakDevice);
  std::optional<ReplanPlans> replan;
  if (d.replan && hw) {
    replan.emplace();
    if (!planReplan(input ? *input : ModuleOp(), *module, reached, phase, po, *hw, d.replan,
                    *replan))
      return 1;
    replan->table.nominalCpuAdamRate = cg.plannedCpuAdamRate;
    // One plan for every rate: still built with its predictions, so the
    // binary says what it predicts at the rate it measures.
    if (replan->table.namespaces.size() == 1)
      llvm::errs() << "loomc: replan: the plan is the same from 0.25x to 4x the host's CPU "
                      "Adam rate; the binary keeps it and reports its prediction at the "
                      "rate it measures\n";
  }
  if (int rc = writePredictionJson(o.predictionJson))
    return rc;
  return writeOutput(*module, phase, o.output, o.emitDir, cg, replan ? &*replan : nullptr);
}

} // namespace loom
