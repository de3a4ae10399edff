//===- Pipeline.cpp - loomc's phases as one builder -----------------------===//
//
// One place that says which passes make each phase, used by loomc and, as
// `--loom-pipeline`, by loom-opt (docs/cli.md).
//
//===----------------------------------------------------------------------===//
#include <numeric>
#include "loom/Pipelines.h"


#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace loom {

namespace {
/// Where each update runs (loom-offload-optimizer), planned by the cost
/// model for `interleaved`. With data parallelism this runs after
/// loom-data-parallel: each rank offloads what it updates, and the subgroups
/// are made of its shards.
void addOffload(OpPassManager &pm, const PipelineOptions &o) {
  mlir::loom::OffloadOptimizerOptions oo;
  oo.mode = o.offload;
  oo.hostThread = o.hostThread;
  if (o.offload == "interleaved") {
    mlir::loom::OptimizerSubgroupsOptions so;
    so.subGroupSize = o.subGroupSize;
    pm.addPass(mlir::loom::createOptimizerSubgroups(so));
    mlir::loom::InterleaveOffloadOptions io;
    io.hardware = o.hardwareName;
    io.hostThread = o.hostThread;
    io.fuse = o.fuse;
    io.planArena = o.planArena;
    io.graphs = o.graphs;
    pm.addPass(o.hardware ? mlir::loom::createInterleaveOffloadFor(*o.hardware, io)
                          : mlir::loom::createInterleaveOffload(io));
    oo.mode = "subgroups";
  }
  pm.addPass(mlir::loom::createOffloadOptimizer(oo));
}
/// The optimizer phase: the update, and on one rank its clipping,
/// offload and working copies (with data parallelism they follow
/// loom-data-parallel: buildPipeline).
void addOptimizer(OpPassManager &pm, const PipelineOptions &o) {
  pm.addPass(mlir::loom::createAttachOptimizer(o.optimizer));
  if (o.pipelineParallel > 1)
    pm.addPass(mlir::loom::createPipelineJoin());
  // With data parallelism clipping reads the averaged gradients and each
  // rank offloads what it updates: both run after loom-data-parallel.
  if (o.clipGrad > 0 && !o.dataParallel)
    pm.addPass(mlir::loom::createClipGradients({o.clipGrad}));
  if (o.offload != "none" && !o.dataParallel)
    addOffload(pm, o);
  // bf16 working copies the updates refresh, where the lowering folds the
  // refresh into the update (loom-batch-updates, with fusion); the offload
  // makes its own, and data parallelism's gathers and shards read the
  // master weights.
  if (o.workingCopies && o.precision == "bf16" && o.fuse && o.offload == "none" &&
      !o.dataParallel && o.pipelineParallel <= 1)
    pm.addPass(mlir::loom::createWorkingCopies());
}
} // namespace

void buildPipeline(OpPassManager &pm, Phase from, Phase to, const PipelineOptions &o) {
  auto runs = [&](Phase p) { return from < p && p <= to; };
  if (o.reinitParams)
    pm.addPass(mlir::loom::createReinitParams());
  if (runs(Phase::Autodiff)) {
    // Attention, RMS norm and SiLU as exporters write them, before
    // anything else sees the composed form (the backward of a recognised
    // op is its own fused rule).
    pm.addPass(mlir::loom::createRecognizeOps());
    // Expert parallelism on the generator's layers as they are (before
    // any pass rewrites them): the all-to-alls are differentiated too.
    if (o.expertParallel > 1)
      pm.addPass(mlir::loom::createExpertParallel({o.expertRank, o.expertLevel}));
    // Tensor parallelism on the forward: autodiff then differentiates the
    // split graph and its collectives.
    if (o.tensorParallel > 1)
      pm.addPass(mlir::loom::createTensorParallel({o.tensorParallel, "", /*vocabParallel=*/true, o.sequenceParallel}));
    // The feature table's placement first: mixed precision then casts the
    // gathered rows wherever they land.
    if (!o.graphFeatures.empty()) {
      mlir::loom::PlaceFeaturesOptions pf;
      pf.placement = o.graphFeatures;
      pf.hardware = o.hardwareName;
      pm.addPass(mlir::loom::createPlaceFeatures(pf));
    }
    if (o.precision == "bf16")
      pm.addPass(mlir::loom::createMixedPrecision());
    // The pipeline's stage: cut where the cost model says, this module
    // keeping its stage's part (the cut is the same in every stage's
    // module).
    if (o.pipelineParallel > 1) {
      mlir::loom::PipelineCutOptions cut;
      // Interleaved, the cut makes P x V chunks; each must fit in 1/V of
      // the device, as a stage holds V of them.
      cut.stages = o.pipelineParallel * o.pipelineChunks;
      cut.microBatches = o.microBatches;
      cut.hardware = o.hardwareName;
      cut.deviceMemory = o.deviceMemoryGiB / double(o.pipelineChunks);
      cut.chunks = o.pipelineChunks;
      cut.quiet = !o.printPipelineCut;
      pm.addPass(mlir::loom::createPipelineCut(cut));
      mlir::loom::PipelineSplitOptions split;
      split.stage = o.pipelineStage;
      split.stages = o.pipelineParallel;
      split.level = o.pipelineLevel;
      split.chunks = o.pipelineChunks;
      pm.addPass(mlir::loom::createPipelineSplit(split));
    }
    // Micro-batches last: every pass above rewrote the one-micro-batch
    // forward that is copied.
    if (o.microBatches > 1)
      pm.addPass(mlir::loom::createMicroBatches({o.microBatches}));
    mlir::loom::AutodiffOptions ad;
    ad.recompute = o.recompute;
    ad.recomputeUnits = o.recomputeUnits;
    pm.addPass(mlir::loom::createAutodiff(ad));
    // (A stage's transfers are paired here whatever M is.)
    if (o.microBatches > 1 || o.pipelineParallel > 1)
      pm.addPass(mlir::loom::createPipelineSchedule({o.pipelineSchedule}));
  }
  if (runs(Phase::Optimizer))
    addOptimizer(pm, o);
  if (runs(Phase::Distribute) && o.dataParallel && o.onebitFreezeStep > 0) {
    mlir::loom::OnebitAdamOptions ob;
    ob.freezeStep = o.onebitFreezeStep;
    ob.bucketSize = o.onebitBucketSize;
    ob.varianceRefresh = o.onebitVarianceRefresh;
    pm.addPass(mlir::loom::createOnebitAdam(ob));
  }
  if (runs(Phase::Distribute) && o.dataParallel && o.diloco) {
    // Data parallelism inside each replica (nothing when a replica is one
    // rank), then the outer steps across them.
    mlir::loom::DataParallelOptions inner;
    inner.zeroStage = o.zeroStage;
    inner.bucketSize = o.bucketSize;
    inner.exclude = "replica";
    pm.addPass(mlir::loom::createDataParallel(inner));
    mlir::loom::DilocoOptions d;
    d.innerSteps = o.diloco->innerSteps;
    d.fragments = o.diloco->fragments;
    d.overlap = o.diloco->overlap;
    d.alpha = o.diloco->alpha;
    d.outerLr = o.diloco->outerLr;
    d.outerMomentum = o.diloco->outerMomentum;
    d.quant = o.diloco->quant;
    d.quantBlock = o.diloco->quantBlock;
    d.elastic = o.diloco->elastic;
    pm.addPass(mlir::loom::createDiloco(d));
    // Each replica offloads its inner updates; the outer step's state goes
    // where the master weights do (loom-offload-optimizer).
    if (o.offload != "none")
      addOffload(pm, o);
  } else if (runs(Phase::Distribute) && o.dataParallel) {
    mlir::loom::DataParallelOptions dp;
    dp.zeroStage = o.zeroStage;
    // Over the levels tensor and pipeline parallelism leave (nothing when
    // they span the world).
    dp.exclude = o.tensorParallelLevel;
    if (o.pipelineParallel > 1)
      dp.exclude += (dp.exclude.empty() ? "" : ",") + o.pipelineLevel;
    dp.bucketSize = o.bucketSize;
    dp.frozenVariance = o.onebitVariance;
    dp.secondary = o.hpzLevels;
    // qwZ and qgZ quantise whole blocks of each shard, and no block spans
    // two tensors.
    dp.shardMultiple = std::lcm(std::max<int64_t>(o.qwzBlock, 1), std::max<int64_t>(o.qgzBlock, 1));
    dp.memberAlign = dp.shardMultiple;
    // bf16 gathers where the forward casts; qwZ quantises the fp32 shard
    // and the offloaded shards live in host memory, so those keep fp32.
    dp.computeGathers = o.qwzBlock == 0 && o.offload == "none";
    dp.prefetch = o.prefetch;
    dp.reduceBf16 = o.reduceBf16;
    // Stages 1 and 2 offload each rank's master shard: a symbol of its own.
    dp.masterShards = o.offload != "none" && (o.zeroStage == 1 || o.zeroStage == 2);
    pm.addPass(mlir::loom::createDataParallel(dp));
    // ZeRO++'s codecs rewrite the collectives before the offload moves the
    // updates: they then quantise what every rank sends whether its update
    // runs on the GPU or the CPU (after the offload they would no longer
    // find the collectives they rewrite).
    if (o.qwzBlock > 0)
      pm.addPass(mlir::loom::createQuantizeWeights({o.qwzBlock}));
    if (o.qgzBlock > 0) {
      mlir::loom::QuantizeGradientsOptions q;
      q.block = o.qgzBlock;
      q.innerLevels = o.qgzInner;
      pm.addPass(mlir::loom::createQuantizeGradients(q));
    }
    if (o.clipGrad > 0)
      pm.addPass(mlir::loom::createClipGradients({o.clipGrad}));
    if (o.offload != "none")
      addOffload(pm, o);
  }
  if (to == Phase::Schedule && runs(Phase::Schedule))
    pm.addPass(mlir::loom::createPrintSchedule());
  if (runs(Phase::Lowered)) {
    mlir::loom::buildLoweringPipeline(pm, loweringOf(o));
  }
}

mlir::loom::LoweringOptions loweringOf(const PipelineOptions &o) {
  return mlir::loom::LoweringOptions::ofStep(o.hostThread, o.fuse, o.planArena, o.graphs);
}

Phase reachedPhase(ModuleOp module) {
  if (module.lookupSymbol(mlir::loom::LoomDialect::kTrainStep))
    return mlir::loom::isLoweredToRuntime(module) ? Phase::Lowered : Phase::Optimizer;
  if (module.lookupSymbol(mlir::loom::LoomDialect::kForwardBackward))
    return Phase::Autodiff;
  return Phase::Import;
}

namespace {
struct PipelineCLOptions : public PassPipelineOptions<PipelineCLOptions> {
  Option<std::string> from{*this, "from",
                           llvm::cl::desc("The phase the input has reached (import: a forward; "
                                          "autodiff: it has @forward_backward; optimizer: "
                                          "@train_step)"),
                           llvm::cl::init("import")};
  Option<std::string> to{*this, "to",
                         llvm::cl::desc("The last phase to run: autodiff, optimizer, "
                                        "distribute, schedule or lowered"),
                         llvm::cl::init("lowered")};
  Option<bool> initRandom{*this, "init-random",
                          llvm::cl::desc("Initialisers for imported values (loomc --init=random)"),
                          llvm::cl::init(false)};
  Option<std::string> precision{*this, "precision", llvm::cl::desc("fp32 or bf16"),
                                llvm::cl::init("fp32")};
  Option<mlir::loom::RecomputeKind> recompute{
      *this, "recompute", llvm::cl::desc("Activation checkpointing per unit (loom-autodiff)"),
      llvm::cl::init(mlir::loom::RecomputeKind::none),
      llvm::cl::values(clEnumValN(mlir::loom::RecomputeKind::none, "none", "keep every activation"),
                       clEnumValN(mlir::loom::RecomputeKind::full, "full", "recompute each unit"),
                       clEnumValN(mlir::loom::RecomputeKind::selective, "selective",
                                  "recompute all but products and attention"))};
  Option<int64_t> recomputeUnits{*this, "recompute-units",
                                 llvm::cl::desc("Units, from the first, that recompute (-1: all)"),
                                 llvm::cl::init(-1)};
  Option<bool> fuse{*this, "fuse",
                    llvm::cl::desc("loom-compose-copies, loom-fuse-epilogues and loom-fuse after the lowering (loomc --no-fuse: off)"),
                    llvm::cl::init(true)};
  Option<bool> workingCopies{*this, "working-copies",
                             llvm::cl::desc("loom-working-copies in a bf16 step on one rank without "
                                            "offload (loomc --no-working-copies: off)"),
                             llvm::cl::init(true)};
  Option<bool> graphs{*this, "graphs",
                      llvm::cl::desc("loom-capture-graphs after the arena plan (loomc --no-graphs: off)"),
                      llvm::cl::init(true)};
  Option<bool> planArena{*this, "plan-arena",
                         llvm::cl::desc("loom-plan-arena after the lowering (loomc --arena=online: off)"),
                         llvm::cl::init(true)};
  Option<mlir::loom::OptimizerKind> optimizer{
      *this, "optimizer", llvm::cl::desc("The update"),
      llvm::cl::init(mlir::loom::OptimizerKind::adamw),
      llvm::cl::values(clEnumValN(mlir::loom::OptimizerKind::adamw, "adamw", "AdamW"),
                       clEnumValN(mlir::loom::OptimizerKind::adam, "adam", "Adam"),
                       clEnumValN(mlir::loom::OptimizerKind::sgd, "sgd", "SGD with momentum"))};
  Option<double> lr{*this, "lr", llvm::cl::desc("Learning rate"), llvm::cl::init(1e-3)};
  Option<double> weightDecay{*this, "weight-decay", llvm::cl::desc("Weight decay"),
                             llvm::cl::init(0.01)};
  Option<std::string> offload{*this, "offload",
                              llvm::cl::desc("none, cpu, static:R or interleaved"),
                              llvm::cl::init("none")};
  Option<int64_t> subGroupSize{*this, "sub-group-size",
                               llvm::cl::desc("Elements per optimizer subgroup"),
                               llvm::cl::init(1000000000)};
  Option<std::string> hardware{*this, "hardware",
                               llvm::cl::desc("Preset or JSON file the interleaved offload plans for"),
                               llvm::cl::init("h100")};
  Option<bool> dataParallel{*this, "data-parallel",
                            llvm::cl::desc("Distribute over the module's loom.topology @world"),
                            llvm::cl::init(false)};
  Option<int64_t> zeroStage{*this, "zero-stage", llvm::cl::desc("ZeRO stage 0-3"),
                            llvm::cl::init(0)};
  Option<int64_t> bucketSize{*this, "bucket-size",
                             llvm::cl::desc("Elements per gradient bucket"),
                             llvm::cl::init(16777216)};
  Option<double> clipGrad{*this, "clip-grad",
                          llvm::cl::desc("> 0: clip the gradients' global 2-norm to this"),
                          llvm::cl::init(0.0)};
  Option<int64_t> freezeStep{*this, "freeze-step",
                             llvm::cl::desc("1-bit Adam (loom-onebit-adam before data "
                                            "parallelism) with this freeze step; 0: none"),
                             llvm::cl::init(0)};
  Option<int64_t> onebitBucketSize{*this, "onebit-bucket-size",
                                   llvm::cl::desc("1-bit Adam: elements a compressed bucket "
                                                  "(0: one parameter each)"),
                                   llvm::cl::init(0)};
  Option<int64_t> varianceRefresh{*this, "variance-refresh",
                                  llvm::cl::desc("1-bit Adam: refresh the frozen variance "
                                                 "K, 2K, 4K, ... steps after the freeze (0: never)"),
                                  llvm::cl::init(0)};
  Option<mlir::loom::FrozenVariance> onebitVariance{
      *this, "onebit-variance",
      llvm::cl::desc("1-bit Adam at ZeRO 1-2 after the freeze"),
      llvm::cl::init(mlir::loom::FrozenVariance::sharded),
      llvm::cl::values(clEnumValN(mlir::loom::FrozenVariance::sharded, "sharded",
                                  "each rank keeps its shard of the frozen variance"),
                       clEnumValN(mlir::loom::FrozenVariance::replicated, "replicated",
                                  "the variance gathered once at the freeze"))};
};
} // namespace

void registerLoomPipeline() {
  registerPassPipeline(
      "loom-pipeline",
      "loomc's phases after `from` up to `to`, with loomc's options",
      [](OpPassManager &pm, StringRef text, function_ref<LogicalResult(const Twine &)> error) {
        PipelineCLOptions cl;
        if (failed(cl.parseFromString(text)))
          return failure();
        std::optional<Phase> from = parsePhase(cl.from), to = parsePhase(cl.to);
        if (!from || !to || *to > Phase::Lowered || *from > *to)
          return error("loom-pipeline: 'from' and 'to' must be phases (import, autodiff, "
                       "optimizer, distribute, schedule, lowered) with from <= to; got from=" +
                       cl.from + " to=" + cl.to);
        if (cl.precision != "fp32" && cl.precision != "bf16")
          return error("loom-pipeline: precision must be fp32 or bf16, got '" + cl.precision + "'");
        PipelineOptions o;
        o.reinitParams = cl.initRandom;
        o.precision = cl.precision;
        o.recompute = cl.recompute;
        o.recomputeUnits = cl.recomputeUnits;
        o.fuse = cl.fuse;
        o.planArena = cl.planArena;
        o.graphs = cl.graphs;
        o.workingCopies = cl.workingCopies;
        o.optimizer.optimizer = cl.optimizer;
        o.optimizer.lr = cl.lr;
        o.optimizer.weightDecay = cl.weightDecay;
        o.offload = cl.offload;
        o.subGroupSize = cl.subGroupSize;
        o.hardwareName = cl.hardware;
        o.dataParallel = cl.dataParallel;
        o.zeroStage = cl.zeroStage;
        o.bucketSize = cl.bucketSize;
        o.clipGrad = cl.clipGrad;
        o.onebitFreezeStep = cl.freezeStep;
        o.onebitBucketSize = cl.onebitBucketSize;
        o.onebitVarianceRefresh = cl.varianceRefresh;
        o.onebitVariance = cl.onebitVariance;
        buildPipeline(pm, *from, *to, o);
        return success();
      },
      [](function_ref<void(const detail::PassOptions &)> handler) { handler(PipelineCLOptions()); });
}

} // namespace loom
