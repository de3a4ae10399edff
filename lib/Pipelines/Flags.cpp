//===- Flags.cpp - loomc's flag checks ------------------------------------===//
//
// Every check of loomc's flags that needs no model: a bad flag costs no
// work and gets one line saying what was expected.
//
//===----------------------------------------------------------------------===//
#include "Flags.h"

#include "LoomcOptions.h"
#include "Planning.h"
#include "loom/Codegen.h"
#include "loom/CostModel.h"
#include "loom/PipelineTimeline.h"
#include "loom/Import.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <cmath>

namespace cost = ::loom::cost;
using llvm::SmallVector;
using llvm::StringRef;
using llvm::Twine;

namespace loom {

/// --diloco's keys (key=value,...) over the defaults; an error names the
/// key and what it takes.
static std::optional<std::string> parseDiloco(StringRef text,
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
    *block = name == "qwz" ? cost::kQwzDefaultBlock : cost::kQgzDefaultBlock;
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
  if (o.varianceRefresh != 0 && !d.onebit)
    return std::string("--variance-refresh is an option of --optimizer=onebit-adam");
  if (o.varianceRefresh < 0)
    return std::string("--variance-refresh must be 0 (never) or a positive number of steps");
  if (o.varianceRefresh > 0 && o.zeroStage >= 1)
    return std::string("--variance-refresh needs --zero-stage 0: a refresh runs the warm-up's "
                       "step, whose ZeRO 1-2 momentum shards the frozen steps do not keep");
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
              !d.onebit && d.hpzLevels.empty() && o.expertParallel == 1;
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

/// --expert-parallel's level: the innermost of --topology (which it adds,
/// as gpu=N, when there is none), and what it composes with.
static std::optional<std::string> checkExpertParallel(const LoomcOptions &o, FlagDecisions &d) {
  if (o.expertParallel < 1 || o.expertParallel > 1024)
    return std::string("--expert-parallel must be a number of ranks from 1 to 1024");
  if (o.expertParallel == 1)
    return std::nullopt;
  if (!llvm::StringRef(o.model).starts_with("moe:"))
    return std::string("--expert-parallel splits the experts of a mixture-of-experts model: "
                       "give --model moe:... (docs/moe.md)");
  // The experts' all-to-alls on the innermost level (the fastest link:
  // the tokens cross it twice a layer, each way).
  if (d.levels.empty())
    d.levels.push_back({"gpu", o.expertParallel});
  if (d.levels.front().second != o.expertParallel)
    return "--expert-parallel=" + std::to_string(o.expertParallel) +
           " splits the experts over the innermost level of --topology, which must have that "
           "many ranks (e.g. --topology=gpu=" + std::to_string(o.expertParallel) +
           ", or node=2,gpu=" + std::to_string(o.expertParallel) + " with 2 replicas)";
  if (o.tensorParallel > 1 || o.pipelineParallel > 1 || o.offload != "none" ||
      !o.zeropp.empty() || !o.diloco.empty() || o.optimizer == "onebit-adam" ||
      o.hierarchy == "auto" || (o.replan != "auto" && o.replan != "off") || !o.timeline.empty())
    return std::string("--expert-parallel is built with data parallelism (ZeRO 0-3 over the "
                       "other parameters), --micro-batches, --recompute, --clip-grad and bf16; "
                       "not yet with --tensor-parallel, --pipeline-parallel, "
                       "--optimizer-offload, --zeropp, --hierarchy=auto, --diloco, 1-bit Adam, "
                       "--replan or --timeline (docs/moe.md)");
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
std::optional<std::string> checkFlags(const LoomcOptions &o, FlagDecisions &d) {
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
  if (o.maxLossGap < 0 || !std::isfinite(o.maxLossGap))
    return std::string("--max-loss-gap must be a fraction of at least 0 (0.01: 1%)");
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
  if (std::optional<std::string> err = checkExpertParallel(o, d))
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

cost::CompressionSetting compressionOf(const LoomcOptions &o, const FlagDecisions &d) {
  cost::CompressionSetting s;
  s.qwzBlock = d.qwzBlock;
  s.qgzBlock = d.qgzBlock;
  s.onebit = d.onebit;
  s.varianceRefresh = d.onebit ? int64_t(o.varianceRefresh) : 0;
  if (d.diloco)
    switch (d.diloco->quant) {
    case mlir::loom::DilocoQuant::fp32: s.diloco = "fp32"; break;
    case mlir::loom::DilocoQuant::bf16: s.diloco = "bf16"; break;
    case mlir::loom::DilocoQuant::fp8: s.diloco = "fp8"; break;
    case mlir::loom::DilocoQuant::fp4: s.diloco = "fp4"; break;
    }
  return s;
}

} // namespace loom
