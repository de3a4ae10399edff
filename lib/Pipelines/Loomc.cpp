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

/// --diloco's keys (key=value,...) over the defaults; an error names the
/// key and what it takes.
std::optional<std::string> parseDiloco(StringRef text,
                                       std::optional<PipelineOptions::Diloco> &out) {
  PipelineOptions::Diloco d;
  SmallVector<StringRef> items;
  text.split(items, ',', -1, false);
  for (StringRef item : items) {
    auto [key, value] = item.split('=');
    key = key.trim();
    value = value.trim();
    int64_t i = 0;
    double x = 0;
    auto integer = [&](int64_t &to, int64_t lo) -> std::optional<std::string> {
      if (value.getAsInteger(10, i) || i < lo)
        return ("--diloco: " + key + " takes an integer >= " + Twine(lo) + ", got '" + value +
                "'").str();
      to = i;
      return std::nullopt;
    };
    auto real = [&](double &to, double lo, double hi, StringRef range) -> std::optional<std::string> {
      if (value.getAsDouble(x) || !(x >= lo && x <= hi))
        return ("--diloco: " + key + " takes a number " + range + ", got '" + value + "'").str();
      to = x;
      return std::nullopt;
    };
    std::optional<std::string> err;
    if (key == "inner-steps")
      err = integer(d.innerSteps, 1);
    else if (key == "fragments")
      err = integer(d.fragments, 1);
    else if (key == "overlap")
      err = integer(d.overlap, 0);
    else if (key == "alpha")
      err = real(d.alpha, 0, 1, "in [0, 1]");
    else if (key == "outer-lr")
      err = real(d.outerLr, 1e-12, 1e6, "above 0");
    else if (key == "outer-momentum")
      err = real(d.outerMomentum, 0, 0.999999, "in [0, 1)");
    else if (key == "quant") {
      std::optional<mlir::loom::DilocoQuant> q =
          llvm::StringSwitch<std::optional<mlir::loom::DilocoQuant>>(value)
              .Case("fp32", mlir::loom::DilocoQuant::fp32)
              .Case("bf16", mlir::loom::DilocoQuant::bf16)
              .Case("fp8", mlir::loom::DilocoQuant::fp8)
              .Case("fp4", mlir::loom::DilocoQuant::fp4)
              .Default(std::nullopt);
      if (!q)
        return ("--diloco: quant=" + value + " is not a quantisation (fp32, bf16, fp8, fp4)")
            .str();
      d.quant = *q;
    }
    else if (key == "quant-block")
      err = integer(d.quantBlock, 2);
    else if (key == "elastic" && (value == "1" || value == "true" || value == "0" ||
                                  value == "false"))
      d.elastic = value == "1" || value == "true";
    else if (key == "elastic")
      err = ("--diloco: elastic takes true or false (1 or 0), got '" + value + "'").str();
    else
      err = ("--diloco: unknown key '" + key +
             "' (inner-steps, fragments, overlap, alpha, outer-lr, outer-momentum, quant, "
             "quant-block, elastic)")
                .str();
    if (err)
      return err;
  }
  if (d.fragments > d.innerSteps)
    return std::string("--diloco: fragments must not exceed inner-steps (each fragment "
                       "synchronises once every inner-steps steps)");
  if (d.quantBlock % 2)
    return std::string("--diloco: quant-block must be even (fp4 packs two elements a byte)");
  if (d.overlap * d.fragments >= d.innerSteps)
    return std::string("--diloco: overlap must be below inner-steps / fragments (a fragment's "
                       "exchange ends before its next one starts)");
  out = d;
  return std::nullopt;
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


/// What loomc's flags decide before any model is read: checked together,
/// so a bad flag costs no work.
struct FlagDecisions {
  Phase phase = Phase::Binary;
  // The folder of the libloomrt.so a binary links (--runtime-dir or the
  // target's default).
  std::string runtimeDir;
  // The topology: innermost level first (ranks number with it fastest).
  SmallVector<std::pair<std::string, int64_t>> levels;
  int64_t world = 1;
  bool dataParallel = false;
  std::string hpzLevels;
  int64_t qwzBlock = 0, qgzBlock = 0;
  bool onebit = false;
  std::optional<PipelineOptions::Diloco> diloco;
  int64_t pipelineChunks = 1; // --pipeline-schedule=interleaved:V's V
  // ZeRO-3 over several levels, no explicit hpz: plan the hierarchy.
  bool planHpz = false;
  // --pipeline-parallel: the level whose ranks are the stages (the
  // outermost).
  std::string pipelineLevel;
  // --model with its batch split over the data-parallel ranks.
  std::string modelSpec;
  // --replan: 0 off, 1 once, 2 continuous.
  int replan = 0;
};

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
        it(o.momentum), it(o.clipGrad, "off"), it(o.freezeStep, ""), it(o.onebitBucketSize), it(o.onebitVariance)}},
      {"Parallelism and compression",
       {it(o.topologyFlag), it(o.zeroStage, "none: one rank, or stage 0 with --topology"),
        it(o.tensorParallel, "1: none"), it(o.sequenceParallel), it(o.microBatches, "1: none"),
        it(o.pipelineParallel, "1: none"), it(o.pipelineSchedule),
        it(o.zeropp), it(o.hierarchy, "auto for ZeRO-3 over several levels"),
        it(o.bucketSize), it(o.reduceDtype), it(o.prefetch), it(o.diloco)}},
      {"Memory and offload",
       {it(o.offload), it(o.replan), it(o.hostThread), it(o.subGroupSize), it(o.recompute),
        it(o.memoryBudget, ""), it(o.deviceMemory, ""), it(o.arena), it(o.graphFeatures)}},
      {"Cost model",
       {it(o.hardware, ""), it(o.whatIf), it(o.timeline), it(o.plan, "off"), it(o.planReport),
        it(o.planExhaustive), it(o.predictionJson), it(o.planChosen)}},
      {"Output and code generation",
       {it(o.compileTo), it(o.output), it(o.target), it(o.emitDir), it(o.runtimeDir),
        it(o.noFuse)}},
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

/// --zeropp=qwz[:BLOCK],hpz,qgz[:BLOCK] into `d` (hpz: every level but the
/// outermost).
static std::optional<std::string> parseZeropp(const LoomcOptions &o, FlagDecisions &d) {
  SmallVector<StringRef> parts;
  StringRef(o.zeropp).split(parts, ',', -1, false);
  for (StringRef p : parts) {
    auto [name, blockText] = p.split(':');
    int64_t *block = name == "qwz" ? &d.qwzBlock : name == "qgz" ? &d.qgzBlock : nullptr;
    if (p == "hpz") {
      if (o.zeroStage != 3)
        return std::string("--zeropp=hpz partitions ZeRO-3's parameters: give --zero-stage=3");
      if (d.levels.size() < 2)
        return std::string("--zeropp=hpz needs a --topology of at least two levels (e.g. "
                           "node=2,gpu=4): its secondary partition spans all but the outermost");
      // Levels are innermost first: all but the last.
      d.hpzLevels.clear();
      for (size_t i = 0; i + 1 < d.levels.size(); ++i)
        d.hpzLevels += (i ? "," : "") + d.levels[i].first;
      continue;
    }
    if (!block)
      return "--zeropp: unknown technique '" + p.str() + "' (qwz[:BLOCK], hpz, qgz[:BLOCK])";
    *block = name == "qwz" ? 2048 : 128;
    if (p.contains(':') && (blockText.getAsInteger(10, *block) || *block < 2 || *block % 2 ||
                            *block > (int64_t(1) << 24)))
      return "--zeropp=" + p.str() +
             ": the block is an even number of elements from 2 to 16777216";
    if (name == "qwz" && o.zeroStage != 3)
      return std::string("--zeropp=qwz quantises ZeRO-3's parameter gathers: give "
                         "--zero-stage=3");
    if (name == "qgz" && o.zeroStage < 2)
      return std::string("--zeropp=qgz quantises the gradients' reduce-scatter: give "
                         "--zero-stage=2 or 3");
  }
  return std::nullopt;
}

/// The distributed optimizers' flags (1-bit Adam, Streaming DiLoCo, the
/// hierarchy) and how they compose, into `d`.
static std::optional<std::string> checkDistributedFlags(const LoomcOptions &o,
                                                        FlagDecisions &d) {
  d.onebit = o.optimizer == "onebit-adam";
  if (o.reduceDtype == "bf16" &&
      (!d.dataParallel || d.onebit || !o.diloco.empty() || o.offload != "none" ||
       llvm::StringRef(o.zeropp).contains("qgz")))
    return std::string("--reduce-dtype=bf16 reduces data parallelism's gradients: it needs "
                       "--topology, and is not built for 1-bit Adam, --diloco, "
                       "--optimizer-offload or qgZ (which quantise or move them themselves)");
  if (d.onebit && !d.dataParallel)
    return std::string("--optimizer=onebit-adam averages momenta across ranks: give --topology");
  if (d.onebit && o.freezeStep < 1)
    return std::string("--optimizer=onebit-adam needs --freeze-step=N (N >= 1 steps of plain "
                       "Adam first)");
  if (!d.onebit && (o.freezeStep != 0 || o.onebitBucketSize != 0))
    return std::string("--freeze-step and --onebit-bucket-size are options of "
                       "--optimizer=onebit-adam");
  if (o.onebitBucketSize < 0)
    return std::string("--onebit-bucket-size must be 0 (one parameter a bucket) or positive");
  if (o.onebitVariance != "sharded" && o.onebitVariance != "replicated")
    return "--onebit-variance must be sharded or replicated, not '" + o.onebitVariance + "'";
  if (o.onebitVariance != "sharded" && !(d.onebit && o.zeroStage >= 1))
    return std::string("--onebit-variance applies to --optimizer=onebit-adam with --zero-stage "
                       "1 or 2");
  if (!o.diloco.empty()) {
    if (std::optional<std::string> err = parseDiloco(o.diloco, d.diloco))
      return err;
    if (d.levels.empty() || d.levels.back().first != "replica")
      return std::string("--diloco needs --topology whose first (outermost) level is replica, "
                         "e.g. --topology=replica=2,gpu=1");
    if (d.levels.back().second < 2)
      return std::string("--diloco needs at least 2 replicas");
    if (d.onebit)
      return std::string("--diloco runs each replica's own AdamW: not with "
                         "--optimizer=onebit-adam");
    if (d.world == d.levels.back().second && o.zeroStage >= 0)
      return std::string("--diloco: --zero-stage applies to data parallelism inside a replica; "
                         "these replicas are one rank each");
    if (o.zeroStage > 2)
      return std::string("--diloco: ZeRO 0-2 inside a replica (stage 3 shards the parameters "
                         "that the outer step reads and merges)");
  }
  // --hierarchy: auto by default for ZeRO-3 over several levels (without
  // an explicit --zeropp=hpz).
  if (o.hierarchy != "" && o.hierarchy != "auto" && o.hierarchy != "flat")
    return "unknown --hierarchy '" + o.hierarchy + "': expected auto or flat";
  // (Tensor parallelism takes the innermost level: ZeRO spans the others.)
  bool multiLevel = llvm::count_if(llvm::drop_begin(d.levels, o.tensorParallel > 1 ? 1 : 0),
                                   [](auto &l) { return l.second > 1; }) >= 2;
  if (o.hierarchy == "auto" && (o.zeroStage != 3 || !multiLevel || d.diloco))
    return std::string("--hierarchy=auto plans ZeRO-3's partitions over a --topology of at "
                       "least two levels (give --zero-stage=3)");
  d.planHpz = o.hierarchy != "flat" && o.zeroStage == 3 && multiLevel && !d.diloco &&
              !d.onebit && d.hpzLevels.empty();
  if (!o.zeropp.empty() && (d.diloco || d.onebit))
    return std::string("--zeropp composes with plain ZeRO (AdamW or Adam) only, not yet with "
                       "--diloco or --optimizer=onebit-adam");
  if (d.onebit && o.zeroStage > 2)
    return std::string("--optimizer=onebit-adam composes with --zero-stage 0, 1 and 2 (stage "
                       "3's sharded parameters are not built for its frozen step)");
  // Offload with data parallelism: each rank keeps the master weights and
  // Adam state of what it updates in pinned host memory (ZeRO stage 0: all
  // of it; stages 1-3: its shard of each bucket), ZeRO++'s codecs included
  // (they rewrite the collectives before the offload), and 1-bit Adam's
  // frozen step (stages 1-2: its update of the rank's shard), and DiLoCo
  // (each replica's inner updates; the outer state in host memory with the
  // master weights; ZeRO 0 inside the replicas).
  if (o.clipGrad < 0 || !std::isfinite(o.clipGrad))
    return std::string("--clip-grad must be a positive norm (0: off)");
  if (o.clipGrad > 0 && (d.onebit || d.diloco || o.optimizer == "sgd"))
    return std::string("--clip-grad clips the gradients of Adam and AdamW; not built for "
                       "1-bit Adam, --diloco or SGD");
  if (o.offload != "none" && d.diloco && o.zeroStage > 0)
    return std::string("--optimizer-offload with --diloco is built for --zero-stage=0 inside "
                       "the replicas (the outer step merges into whole master weights)");
  if (o.offload != "none" && d.onebit && o.zeroStage > 0 && o.onebitVariance == "replicated")
    return "--optimizer-offload with 1-bit Adam at --zero-stage=" + std::to_string(o.zeroStage) +
           " needs --onebit-variance=sharded (replicated updates whole parameters on every rank "
           "after the freeze: nothing is left for host memory to hold)";
  return std::nullopt;
}

/// --pipeline-parallel's level: the outermost of --topology (which it adds,
/// as stage=P, when there is none).
static std::optional<std::string> checkPipelineLevel(const LoomcOptions &o, FlagDecisions &d) {
  if (o.pipelineParallel < 1 || o.pipelineParallel > 1024)
    return std::string("--pipeline-parallel must be a number of stages from 1 to 1024");
  if (o.pipelineParallel == 1)
    return std::nullopt;
  // The stages are the outermost level (the one crossing nodes is the
  // slowest: a pipeline sends least, Narayanan et al. 2021, §3.2).
  if (d.levels.empty())
    d.levels.push_back({"stage", o.pipelineParallel});
  if (d.levels.back().second != o.pipelineParallel)
    return "--pipeline-parallel=" + std::to_string(o.pipelineParallel) +
           " runs the stages on the outermost level of --topology, which must have that "
           "many ranks (e.g. --topology=stage=" + std::to_string(o.pipelineParallel) +
           ",gpu=2; without --topology: --topology=stage=" + std::to_string(o.pipelineParallel) +
           ")";
  d.pipelineLevel = d.levels.back().first;
  return std::nullopt;
}

/// What --pipeline-parallel composes with (after the distributed flags).
static std::optional<std::string> checkPipelineFlags(const LoomcOptions &o, FlagDecisions &d) {
  if (o.pipelineParallel == 1)
    return std::nullopt;
  if (o.offload != "none" || !o.zeropp.empty() || d.diloco || d.onebit ||
      (o.replan != "auto" && o.replan != "off") || !o.timeline.empty() || o.hierarchy == "auto")
    return std::string("--pipeline-parallel is built with data parallelism (ZeRO 0-3), "
                       "tensor parallelism, --micro-batches, --recompute full|selective, "
                       "--clip-grad and bf16; not yet with --optimizer-offload, --zeropp, "
                       "--hierarchy=auto, --diloco, 1-bit Adam, --replan or --timeline "
                       "(docs/pipeline-parallel.md)");
  if (o.model.empty() && o.init != "random")
    return std::string("--pipeline-parallel splits the model into stages: with an imported "
                       "model give --init=random (stages of imported values are not built)");
  if (d.pipelineChunks > 1)
    if (std::optional<std::string> err = cost::checkPipelineShape(
            {o.pipelineParallel, d.pipelineChunks, o.microBatches, "interleaved"}))
      return "--pipeline-schedule=" + o.pipelineSchedule + ": " + *err;
  // (The recompute, prefetch and hierarchy planners plan the whole model: a
  // stage keeps every activation unless --recompute says otherwise, the
  // flat partition and --prefetch's default of 1.)
  d.planHpz = false;
  return std::nullopt;
}

/// Every check of loomc's flags that needs no model, in the order the
/// user reads them: the input, the phase and single flags, the topology,
/// the distributed optimizers.
static std::optional<std::string> checkFlags(const LoomcOptions &o, FlagDecisions &d) {
  if (o.input.empty() == o.model.empty())
    return std::string(o.input.empty() ? "no model: give MODEL.onnx, MODEL.mlir or --model "
                                         "family:key=value,... (see --help)"
                                       : "give either a model file or --model, not both");
  std::optional<Phase> phase = parsePhase(o.compileTo);
  if (!phase)
    return "unknown phase '" + o.compileTo +
           "' for --compile-to: expected import, autodiff, optimizer, "
           "distribute, schedule, lowered, cpp or binary";
  d.phase = *phase;
  if (o.init != "model" && o.init != "random")
    return "unknown --init '" + o.init + "': expected model or random";
  if (o.arena != "planned" && o.arena != "online")
    return "unknown --arena '" + o.arena + "': expected planned or online";
  if (o.offload != "none" && o.offload != "cpu" && o.offload != "interleaved" &&
      !llvm::StringRef(o.offload).starts_with("static:"))
    return "unknown --optimizer-offload '" + o.offload +
           "': expected none, cpu, static:R or interleaved";
  if (o.replan != "auto" && o.replan != "off" && o.replan != "once" && o.replan != "continuous")
    return "unknown --replan '" + o.replan + "': expected auto, off, once or continuous";
  if (!o.recompute.empty() && o.recompute != "none" && o.recompute != "full" &&
      o.recompute != "selective" && o.recompute != "auto")
    return "unknown --recompute '" + o.recompute + "': expected none, full, selective or auto";
  if (o.reduceDtype != "fp32" && o.reduceDtype != "bf16")
    return "unknown --reduce-dtype '" + o.reduceDtype + "': expected fp32 or bf16";
  if (o.prefetch != "auto") {
    int64_t n = -1;
    if (llvm::StringRef(o.prefetch).getAsInteger(10, n) || n < 0 || n > 64)
      return "unknown --prefetch '" + o.prefetch + "': expected auto or a number of gathers "
             "from 0 to 64";
  }
  if (o.deviceMemory < 0 || !std::isfinite(o.deviceMemory) || o.deviceMemory > 1e6)
    return std::string("--device-memory must be a number of GiB from 0 (--hardware's) to 1e6");
  if (o.deviceMemory > 0 && o.target == "cpu")
    return std::string("--device-memory caps a GPU's memory: it needs --target=cuda or hip");
  if (o.memoryBudget < 0 || !std::isfinite(o.memoryBudget))
    return std::string("--memory-budget must be a non-negative number of GiB (0: the default)");
  if (o.precision != "fp32" && o.precision != "bf16")
    return "unknown --precision '" + o.precision + "': expected fp32 or bf16";
  if (o.target != "cpu" && o.target != "cuda" && o.target != "hip")
    return "unknown --target '" + o.target + "': expected cpu, cuda or hip";
  if (o.optimizer != "adamw" && o.optimizer != "adam" && o.optimizer != "sgd" &&
      o.optimizer != "onebit-adam")
    return "unknown --optimizer '" + o.optimizer + "': expected adamw, adam, sgd or onebit-adam";
  d.runtimeDir = o.runtimeDir.empty() ? defaultRuntimeDir(o.target) : o.runtimeDir.getValue();
  if (d.phase == Phase::Binary) {
    llvm::SmallString<256> lib(d.runtimeDir);
    llvm::sys::path::append(lib, "libloomrt.so");
    if (!llvm::sys::fs::exists(lib))
      return "no runtime library '" + lib.str().str() + "' for --target=" + o.target +
             (o.runtimeDir.empty() && o.target == "hip"
                  ? ": build the HIP runtime with scripts/build-hip.sh, or give --runtime-dir"
                  : std::string(": give --runtime-dir=DIR, a folder holding libloomrt.so"));
  }
  if (o.hostThread != "auto" && o.hostThread != "on" && o.hostThread != "off")
    return "unknown --host-thread '" + o.hostThread + "': expected auto, on or off";
  // The topology: levels outermost first on the command line, innermost
  // first in loom.topology.
  if (!o.topologyFlag.empty())
    if (std::optional<std::string> err = parseTopology(o.topologyFlag, d.levels))
      return err;
  if (std::optional<std::string> err = checkPipelineLevel(o, d))
    return err;
  for (auto &l : d.levels)
    if ((d.world *= l.second) > (1 << 20))
      return std::string("--topology has more than 1048576 ranks");
  if (o.zeroStage < -1 || o.zeroStage > 3)
    return std::string("--zero-stage must be 0, 1, 2 or 3");
  if (o.zeroStage >= 0 && d.levels.empty())
    return std::string("--zero-stage needs --topology (the ranks to partition over)");
  d.dataParallel = !d.levels.empty();
  {
    StringRef v = o.pipelineSchedule;
    if (v.consume_front("interleaved:")) {
      if (v.getAsInteger(10, d.pipelineChunks) || d.pipelineChunks < 2 || d.pipelineChunks > 64)
        return "--pipeline-schedule=" + o.pipelineSchedule +
               ": interleaved:V needs V, the model chunks each stage holds, in [2, 64]";
    } else if (v != "1f1b" && v != "gpipe" && v != "zb-h1") {
      return "unknown --pipeline-schedule '" + o.pipelineSchedule +
             "': expected gpipe, 1f1b, zb-h1 or interleaved:V";
    }
    if (d.pipelineChunks > 1 && o.pipelineParallel < 2)
      return std::string("--pipeline-schedule=interleaved:V orders a pipeline's stages: give "
                         "--pipeline-parallel=P with P > 1");
  }
  if (o.tensorParallel < 1 || o.microBatches < 1 || o.microBatches > 1024)
    return std::string("--tensor-parallel must be positive and --micro-batches in [1, 1024] "
                       "(each micro-batch is a copy of the forward in the IR)");
  if (o.sequenceParallel && o.tensorParallel < 2)
    return std::string("--sequence-parallel splits tokens over a tensor-parallel group: give "
                       "--tensor-parallel=N with N > 1");
  if (o.tensorParallel > 1) {
    if (d.levels.empty() || d.levels.front().second != o.tensorParallel)
      return "--tensor-parallel=" + std::to_string(o.tensorParallel) +
             " splits over the innermost level of --topology, which must have that many "
             "ranks (e.g. --topology=gpu=" + std::to_string(o.tensorParallel) + ")";
    if (o.model.empty() && o.init != "random")
      return std::string("--tensor-parallel splits the parameters: with an imported model give "
                         "--init=random (splitting imported values is not built)");
    if (o.offload != "none" || !o.zeropp.empty() || !o.diloco.empty() ||
        o.optimizer == "onebit-adam")
      return std::string("--tensor-parallel is not built with "
                         "--optimizer-offload, --zeropp, --diloco or 1-bit Adam yet "
                         "(docs/tensor-parallel.md)");
  }
  if (!o.zeropp.empty())
    if (std::optional<std::string> err = parseZeropp(o, d))
      return err;
  if (std::optional<std::string> err = checkDistributedFlags(o, d))
    return err;
  if (std::optional<std::string> err = checkPipelineFlags(o, d))
    return err;
  d.modelSpec = o.model;
  // (--plan: each plan's own loomc splits the batch its way.)
  if ((d.dataParallel || o.microBatches > 1) && !o.model.empty() && o.plan.empty()) {
    std::string err;
    // The ranks of a tensor-parallel group and a pipeline's stages share
    // their rows.
    if (!splitSpecBatch(d.modelSpec,
                        d.dataParallel ? d.world / o.tensorParallel / o.pipelineParallel : 1,
                        err, o.microBatches))
      return err;
  }
  if (o.dropout != "on" && o.dropout != "off")
    return "unknown --dropout '" + o.dropout + "': expected on or off";
  // --replan: plans for other host rates, built into the binary.
  bool explicitReplan = o.replan != "auto" && o.replan != "off";
  d.replan = o.replan == "once" ? 1 : o.replan == "continuous" ? 2 : 0;
  // cpu and static:R have one plan: built with its predictions at every
  // rate, so the binary says what it predicts at the rate it measures.
  if (o.replan == "auto")
    d.replan = o.offload != "none" && o.target != "cpu" && d.phase >= Phase::Cpp &&
                       !d.dataParallel
                   ? 1
                   : 0;
  if (explicitReplan && o.offload == "none")
    return "--replan=" + o.replan + " re-plans the optimizer's offload: give "
           "--optimizer-offload=interleaved (or cpu, static:R: one plan, its predictions)";
  if (explicitReplan && d.phase < Phase::Cpp)
    return "--replan=" + o.replan + " builds the plans into a binary: --compile-to=cpp or binary";
  if ((!o.task.empty() || !o.frozen.empty()) &&
      (!o.model.empty() || !llvm::StringRef(o.input).ends_with(".onnx")))
    return std::string("--task and --frozen apply to ONNX models (MODEL.onnx)");
  return std::nullopt;
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
/// default --hardware): the figures are that machine's, not this binary's.
static void noteForeignDescription(const LoomcOptions &o, const cost::Hardware &hw) {
  if (hw.hasGpu && o.target == "cpu" && !o.hardware.getNumOccurrences())
    llvm::errs() << "loomc: note: the prediction and plan above are for '" << hw.name
                 << "' (the default --hardware), a GPU host, not for this CPU binary: give "
                    "--hardware=cpu-host or a loom-calibrate file to predict the CPU\n";
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

/// --hardware, or when it is not given an MI250X GCD (frontier) for
/// --target=hip and the H100 otherwise.
static std::string hardwareName(const LoomcOptions &o) {
  if (o.hardware.getNumOccurrences())
    return o.hardware;
  return o.target == "hip" ? "frontier" : "h100";
}

/// The machine the cost model plans and predicts for (--hardware, scaled
/// by each --what-if), read before any work; none where nothing needs it.
static std::optional<std::string> readHardware(const LoomcOptions &o, const FlagDecisions &d,
                                               std::optional<cost::Hardware> &hw) {
  if (o.offload == "none" && o.timeline.empty() && o.whatIf.empty() && !d.planHpz &&
      o.hardware.getNumOccurrences() == 0 && o.deviceMemory == 0)
    return std::nullopt;
  std::string herr;
  hw = mlir::loom::loadHardware(hardwareName(o), herr);
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
  // 1-bit Adam is AdamW until its freeze step (decoupled weight decay, as
  // DeepSpeed's OnebitAdam), then loom-onebit-adam's frozen step.
  po.optimizer.optimizer = o.optimizer == "sgd"    ? mlir::loom::OptimizerKind::sgd
                           : o.optimizer == "adam" ? mlir::loom::OptimizerKind::adam
                                                   : mlir::loom::OptimizerKind::adamw;
  po.onebitFreezeStep = d.onebit ? o.freezeStep : 0;
  po.onebitBucketSize = o.onebitBucketSize;
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
    po.hardwareName = hardwareName(o);
  po.pipelineLevel = d.pipelineLevel;
  po.deviceMemoryGiB = o.deviceMemory;
  po.sequenceParallel = o.sequenceParallel;
  if (o.tensorParallel > 1)
    po.tensorParallelLevel = d.levels.front().first;
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
static int planFeatures(ModuleOp module, const LoomcOptions &o,
                        const std::optional<cost::Hardware> &hw, PipelineOptions &po) {
  std::string herr;
  std::optional<cost::Hardware> placeHw =
      hw ? hw
         : mlir::loom::loadHardware(o.target == "cpu" && !o.hardware.getNumOccurrences()
                                        ? std::string("cpu-host")
                                        : hardwareName(o),
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

/// --pipeline-parallel: the phases run once for each stage on a copy of
/// the module (loom-pipeline-split keeps that stage's part), each stage's
/// prediction printed, and the stages' programs written together.
static int compileStages(ModuleOp module, Phase reached, Phase phase, PipelineOptions po,
                         const LoomcOptions &o, FlagDecisions &d,
                         const std::optional<cost::Hardware> &hw) {
  if (reached >= Phase::Autodiff)
    return loomcError("--pipeline-parallel cuts the forward into stages: give the model "
                      "before autodiff (a forward, not @forward_backward)");
  if (failed(verify(module)))
    return 1;
  std::vector<OwningOpRef<ModuleOp>> stages;
  std::vector<int64_t> peaks;
  std::vector<StageWork> work;
  for (int64_t s = 0; s < o.pipelineParallel; ++s) {
    OwningOpRef<ModuleOp> m = module.clone();
    po.pipelineStage = s;
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
      if (reportPrediction(*m, *hw, "", loweringOf(po), stagePeak,
                           "stage " + std::to_string(s) + "'s step (its work, without waits)",
                           &pred))
        return 1;
      work.push_back({pred.backwardSeconds, pred.updateSeconds, pred.gpuKernelSeconds});
    }
    peaks.push_back(hw && hw->hasGpu ? int64_t(stagePeak) : 0);
    stages.push_back(std::move(m));
  }
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
  std::optional<cost::Hardware> phw = mlir::loom::loadHardware(hardwareName(o), herr);
  if (!phw)
    return loomcError(herr);
  // MFU as the project reports it: over 989 TFLOP/s a GPU in bf16 (the
  // H100's and H200's dense peak), else the description's fp32 rate.
  double peak = !phw->hasGpu ? 0 : o.precision == "bf16" ? 989e12 : phw->gpuFlopsF32;
  return planMain(argc, argv, o, d.levels, hardwareName(o), peak);
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
    if (int rc = planFeatures(*module, o, hw, po))
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
  if (o.pipelineParallel > 1)
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
