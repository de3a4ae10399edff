//===- LoomcOptions.h - loomc's flags ---------------------------------------===//
//
// loomc's command-line flags as one struct (lib/Pipelines/Loomc.cpp reads
// them; docs/cli.md documents each). Apart from the driver so that adding
// a flag does not grow the driver past the size limit.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_PIPELINES_LOOMCOPTIONS_H
#define LOOM_PIPELINES_LOOMCOPTIONS_H

#include "loom/Import.h"

#include "llvm/Support/CommandLine.h"

#include <string>

namespace loom {
namespace cl = llvm::cl;

/// loomc's flags (docs/cli.md), registered when loomcMain first runs.
struct LoomcOptions {
  cl::OptionCategory cat{"loomc options"};
  cl::opt<std::string> input{cl::Positional, cl::init(""),
                                    cl::desc("[MODEL.onnx | MODEL.mlir]"),
                                    cl::cat(cat)};
  std::string modelHelp = "Build a model instead of reading one; families and their keys with "
                          "defaults:\n" +
                          ::loom::modelSpecHelp();
  cl::opt<std::string> model{"model", cl::init(""),
                                    cl::value_desc("family:key=value,..."),
                                    cl::desc(modelHelp), cl::cat(cat)};
  cl::opt<std::string> compileTo{
      "compile-to", cl::init("binary"), cl::value_desc("phase"),
      cl::desc("Stop after this phase and write its IR: import, autodiff, "
               "optimizer, distribute, schedule, lowered, cpp, binary"),
      cl::cat(cat)};
  cl::opt<std::string> output{"o", cl::init("-"),
                                     cl::value_desc("file"),
                                     cl::desc("Output file ('-' for stdout)"),
                                     cl::cat(cat)};
  cl::opt<std::string> target{
      "target", cl::init("cpu"), cl::value_desc("cpu|cuda|hip"),
      cl::desc("Device the training binary runs on (hip: AMD GPUs, linked against a HIP "
               "build of the runtime, see --runtime-dir)"),
      cl::cat(cat)};
  cl::opt<std::string> optimizer{
      "optimizer", cl::init("adamw"), cl::value_desc("adamw|adam|sgd|onebit-adam"),
      cl::desc("Optimizer attached in the optimizer phase; onebit-adam: 1-bit Adam with "
               "--topology (AdamW with averaged gradients for --freeze-step steps, then "
               "the variance frozen and momenta averaged 1-bit compressed; "
               "docs/compression.md)"),
      cl::cat(cat)};
  cl::opt<int64_t> freezeStep{
      "freeze-step", cl::init(0), cl::value_desc("N"),
      cl::desc("--optimizer=onebit-adam: steps of plain Adam before the variance is frozen "
               "and communication becomes 1-bit (DeepSpeed's freeze_step)"),
      cl::cat(cat)};
  cl::opt<int64_t> onebitBucketSize{
      "onebit-bucket-size", cl::init(0), cl::value_desc("elements"),
      cl::desc("--optimizer=onebit-adam: 0 (default) compresses each parameter alone, with "
               "its own scale (DeepSpeed OnebitAdam's numerics); N lets consecutive "
               "parameters up to N elements share one compressed all-reduce and one scale "
               "(fewer, larger collectives; 16777216 is the fast choice on GPUs, "
               "docs/compression.md)"),
      cl::cat(cat)};
  cl::opt<int64_t> varianceRefresh{
      "variance-refresh", cl::init(0), cl::value_desc("K"),
      cl::desc("--optimizer=onebit-adam: refresh the frozen variance K, 2K, 4K, ... steps "
               "after the freeze: those steps run the warm-up's full-precision step, its "
               "variance standing for every step since the last refresh (0/1 Adam's "
               "adaptive freezing, Lu et al. 2022). 0 (default): frozen for good, as "
               "DeepSpeed's OnebitAdam. ZeRO stage 0 only (docs/compression.md)"),
      cl::cat(cat)};
  cl::opt<std::string> diloco{
      "diloco", cl::init(""),
      cl::value_desc("inner-steps=H,fragments=P,overlap=T,alpha=A,outer-lr=LR,"
                     "outer-momentum=MU,quant=fp32|bf16|fp8|fp4,quant-block=B,elastic=0|1"),
      cl::desc("Streaming DiLoCo over --topology=replica=M,...: each replica trains alone "
               "(its own AdamW) and every H steps a fragment's pseudo-gradient is averaged "
               "across replicas, stepped by outer Nesterov SGD into a global copy and merged "
               "back with lerp(global, local, alpha). Defaults: H 100, P 1, overlap 0, alpha "
               "0.5, outer-lr 0.7, outer-momentum 0.9, quant fp4 with a scale every 128 "
               "elements (docs/diloco.md)"),
      cl::cat(cat)};
  cl::opt<std::string> onebitVariance{
      "onebit-variance", cl::init("sharded"), cl::value_desc("sharded|replicated"),
      cl::desc("--optimizer=onebit-adam with --zero-stage 1 or 2, after the freeze: "
               "'sharded' (default) keeps ZeRO's partition of the frozen variance, each rank "
               "steps its shard and the fp32 parameters are all-gathered; 'replicated' "
               "gathers the variance once at the freeze, so every rank updates every "
               "parameter and only the 1-bit momenta cross the link (stage 0's memory). "
               "Both give stage 0's losses (docs/compression.md)"),
      cl::cat(cat)};
  cl::opt<double> lr{"lr", cl::init(1e-3), cl::desc("Learning rate"),
                            cl::cat(cat)};
  cl::opt<double> weightDecay{"weight-decay", cl::init(0.01),
                                     cl::desc("Weight decay"), cl::cat(cat)};
  cl::opt<double> beta1{"beta1", cl::init(0.9), cl::desc("Adam beta1"),
                               cl::cat(cat)};
  cl::opt<double> beta2{"beta2", cl::init(0.999),
                               cl::desc("Adam beta2"), cl::cat(cat)};
  cl::opt<double> eps{"eps", cl::init(1e-8),
                             cl::desc("Adam epsilon"), cl::cat(cat)};
  cl::opt<double> clipGrad{
      "clip-grad", cl::init(0), cl::value_desc("max-norm"),
      cl::desc("Clip the gradients Adam reads to this global 2-norm, as "
               "torch.nn.utils.clip_grad_norm_ (loom-clip-gradients; under ZeRO the norm is "
               "the whole model's); 0: off. The binary logs grad_norm"),
      cl::cat(cat)};
  cl::opt<double> momentum{"momentum", cl::init(0.9),
                                  cl::desc("SGD momentum"), cl::cat(cat)};
  cl::opt<std::string> task{
      "task", cl::init(""), cl::value_desc("lm|classify"),
      cl::desc("The loss an imported model gets: next-token cross-entropy "
               "(lm) or cross-entropy against labels (classify); inferred "
               "from the input when not given"),
      cl::cat(cat)};
  cl::list<std::string> frozen{
      "frozen", cl::CommaSeparated, cl::value_desc("name,..."),
      cl::desc("ONNX initializers that are buffers, not parameters (PyTorch "
               "register_buffer: rotary tables, masks): imported as "
               "constants, never trained"),
      cl::cat(cat)};
  cl::opt<bool> listOnnxOperators{
      "list-onnx-operators", cl::init(false),
      cl::desc("Print the ONNX operators the importer takes (a Markdown table) and exit"),
      cl::cat(cat)};
  cl::opt<std::string> dropout{
      "dropout", cl::init("on"), cl::value_desc("on|off"),
      cl::desc("ONNX Dropout in training mode: on (the default: loom.dropout, a fresh "
               "mask each step drawn from the binary's --seed and the step, the same on "
               "CPU and GPU and after a resume) or off (imported as the identity: trains "
               "as an eval-mode export would, to compare with references)"),
      cl::cat(cat)};
  cl::opt<std::string> init{
      "init", cl::init("model"), cl::value_desc("model|random"),
      cl::desc("Initial weights: the model's own (imported values or "
               "generator initialisers), or random for benchmark runs "
               "(loom-reinit-params; ONNX weights in external data are then not read)"),
      cl::cat(cat)};
  cl::opt<bool> noFuse{
      "no-fuse", cl::init(false),
      cl::desc("Leave the lowered step unfused: no composed copies (loom-compose-copies), no "
               "GEMM epilogues (loom-fuse-epilogues) and no elementwise regions (loom-fuse), "
               "so fused and unfused binaries can be compared"),
      cl::cat(cat)};
  cl::opt<bool> noWorkingCopies{
      "no-working-copies", cl::init(false),
      cl::desc("With --precision=bf16: cast each fp32 weight to bf16 where the step reads it, "
               "instead of reading a bf16 working copy its update refreshes "
               "(loom-working-copies), to measure one against the other"),
      cl::cat(cat)};
  cl::opt<bool> noGraphs{
      "no-graphs", cl::init(false),
      cl::desc("Issue every call of the step from the host: no function is marked for capture "
               "as a CUDA graph or hipGraph (loom-capture-graphs), to measure graphs against "
               "launches (the binary's LOOMRT_GRAPHS=off does the same at run time)"),
      cl::cat(cat)};
  cl::opt<std::string> arena{
      "arena", cl::init("planned"), cl::value_desc("planned|online"),
      cl::desc("Where the step's device buffers live: planned (offsets decided by loomc, "
               "loom-plan-arena: one region of the size the step needs) or online (the "
               "runtime's best-fit arena places them as the step runs)"),
      cl::cat(cat)};
  cl::opt<std::string> recompute{
      "recompute", cl::init("auto"), cl::ValueOptional, cl::value_desc("none|full|selective|auto"),
      cl::desc("Activation checkpointing per transformer block (loom-autodiff recompute=): "
               "none; full (keep each block's input, run the block again in its backward; "
               "the bare --recompute); selective (recompute norms and elementwise, keep "
               "products and attention); auto (the default: none when the step fits "
               "--memory-budget, else the fastest choice of mode and number of blocks the "
               "cost model predicts to fit; with --optimizer-offload=interleaved the fastest "
               "of none, selective and full; none without a GPU --hardware)"),
      cl::cat(cat)};
  cl::opt<double> maxLossGap{
      "max-loss-gap", cl::init(0.01), cl::value_desc("F"),
      cl::desc("The loss a compression setting may cost, as a fraction of the uncompressed "
               "run's (default 0.01: 1%). loomc prints what is known of its setting's gap "
               "(measured at 1.1B parameters over 500 steps, docs/compression.md) and warns "
               "above F; --plan=auto tries ZeRO++ (qwZ + qgZ) only where its gap is within F"),
      cl::cat(cat)};
  cl::opt<double> memoryBudget{
      "memory-budget", cl::init(0), cl::value_desc("GiB"),
      cl::desc("Device memory --recompute=auto plans for (default: 90% of the usable "
               "memory of --hardware, leaving a tenth for the allocator and libraries)"),
      cl::cat(cat)};
  cl::opt<double> deviceMemory{
      "device-memory", cl::init(0), cl::value_desc("GiB"),
      cl::desc("Plan for a card of this much device memory instead of --hardware's (the "
               "offload, recompute and prefetch planners and the prediction), and build a "
               "binary that holds the rest of a larger card back so the step runs within it "
               "(an 80 GB card's plan on an H200: --device-memory=80). 0: --hardware's; "
               "GPU targets only; the binary's --device-memory overrides it"),
      cl::cat(cat)};
  cl::opt<std::string> precision{
      "precision", cl::init("fp32"), cl::value_desc("fp32|bf16"),
      cl::desc("Compute precision: fp32 throughout, or bf16 activations and "
               "GEMMs with fp32 master weights and optimizer state "
               "(loom-mixed-precision)"),
      cl::cat(cat)};
  cl::opt<std::string> topologyFlag{
      "topology", cl::init(""), cl::value_desc("level=N,...|FILE"),
      cl::desc("The machine the binary trains on, outermost level first "
               "(node=2,gpu=4), or a file holding that line: data parallelism "
               "over every rank (loom-data-parallel). A --model's batch is the "
               "global batch and is divided over the ranks; an ONNX model's "
               "exported batch is the per-rank batch"),
      cl::cat(cat)};
  cl::opt<int> zeroStage{
      "zero-stage", cl::init(-1), cl::value_desc("0|1|2|3"),
      cl::desc("ZeRO stage of the data parallelism (default 0 with "
               "--topology): 0 all-reduces gradients, 1 partitions optimizer "
               "state, 2 also reduce-scatters gradients, 3 also partitions "
               "parameters"),
      cl::cat(cat)};
  cl::opt<int> tensorParallel{
      "tensor-parallel", cl::init(1), cl::value_desc("N"),
      cl::desc("Megatron-style tensor parallelism over the innermost level of --topology, "
               "which must have N ranks: each block's attention heads and MLP units split "
               "over them (loom-tensor-parallel; docs/tensor-parallel.md); data parallelism "
               "runs over the other levels"),
      cl::cat(cat)};
  cl::opt<bool> sequenceParallel{
      "sequence-parallel",
      cl::desc("With --tensor-parallel: the embeddings, norms, residual adds, LM head and "
               "loss run on each rank's 1/N of the step's tokens (Megatron's sequence "
               "parallelism: the branches' all-reduces become reduce-scatters and all-gathers)"),
      cl::cat(cat)};
  cl::opt<int> microBatches{
      "micro-batches", cl::init(1), cl::value_desc("M"),
      cl::desc("Each rank's batch as M micro-batches, their gradients summed before one update "
               "(loom-micro-batches): a --model's per-rank batch divides by M; an ONNX model's "
               "exported batch is one micro-batch (each rank reads M times it)"),
      cl::cat(cat)};
  cl::opt<int> pipelineParallel{
      "pipeline-parallel", cl::init(1), cl::value_desc("P"),
      cl::desc("Cut the model into P stages on the outermost level of --topology (or on P "
               "ranks, --topology=stage=P, without one), where the cost model balances "
               "their predicted times (loom-pipeline-cut); each rank runs its stage's "
               "program, passing activations and their gradients to its neighbours. Give "
               "--micro-batches=M to fill the pipeline; data parallelism spans the other "
               "levels"),
      cl::cat(cat)};
  cl::opt<int> expertParallel{
      "expert-parallel", cl::init(1), cl::value_desc("N"),
      cl::desc("Split each mixture-of-experts layer's experts (--model moe:) over the N ranks "
               "of the innermost level of --topology (or over N ranks, --topology=gpu=N, "
               "without one): each rank holds E/N experts and the tokens reach them and come "
               "back by two all-to-alls (loom-expert-parallel); every rank reads its own rows, "
               "data parallelism spans every level and the experts' gradients are averaged "
               "over the ranks holding the same experts"),
      cl::cat(cat)};
  cl::opt<std::string> pipelineSchedule{
      "pipeline-schedule", cl::init("1f1b"), cl::value_desc("gpipe|1f1b|zb-h1|interleaved:V"),
      cl::desc("The micro-batches' order: 1f1b runs each backward right after its forward "
               "(one micro-batch's activations live at a time), gpipe every forward first, "
               "zb-h1 as 1f1b with each backward's weight gradients after the gradient it "
               "sends back (Zero Bubble's ZB-H1: the cool-down's deferred to its end), "
               "interleaved:V 1F1B over V model chunks a stage (Megatron-LM's virtual "
               "stages: the bubble divided by V; M a multiple of the stages)"),
      cl::cat(cat)};
  cl::opt<std::string> zeropp{
      "zeropp", cl::init(""), cl::value_desc("qwz[:BLOCK],hpz,qgz[:BLOCK]"),
      cl::desc("ZeRO++ (Wang et al. 2023): qwz gathers ZeRO-3's parameter shards as int8 "
               "blocks (default 2048 elements a scale); hpz keeps a secondary partition of "
               "the parameters inside the levels below the outermost (a node) so that the "
               "backward's all-gathers stay there; qgz reduces gradients (ZeRO 2-3) by int4 "
               "all-to-alls inside the node, then across (default 128 elements a scale)"),
      cl::cat(cat)};
  cl::opt<std::string> hierarchy{
      "hierarchy", cl::init(""), cl::value_desc("auto|flat"),
      cl::desc("ZeRO-3 over a topology of several levels: auto (the default there) lets the "
               "cost model choose hpZ's secondary partition (none, or the innermost levels) "
               "by the predicted step on --hardware, printing the plan with bytes and time "
               "per communicator; flat keeps every collective over the world unless "
               "--zeropp=hpz asks"),
      cl::cat(cat)};
  cl::opt<int64_t> bucketSize{
      "bucket-size", cl::init(16777216), cl::value_desc("elements"),
      cl::desc("Most elements per gradient communication bucket (ZeRO-3 on a model with "
               "numbered blocks: one bucket per block instead)"),
      cl::cat(cat)};
  cl::opt<std::string> reduceDtype{
      "reduce-dtype", cl::init("fp32"), cl::value_desc("fp32|bf16"),
      cl::desc("Data parallelism: the type gradients are reduced in (bf16: half the bytes, "
               "FSDP's reduce_dtype=bfloat16; the reduced shard is cast to fp32 for the "
               "optimizer)"),
      cl::cat(cat)};
  cl::opt<std::string> prefetch{
      "prefetch", cl::init("auto"), cl::value_desc("auto|N"),
      cl::desc("ZeRO-3: issue each block's all-gather N gathers ahead of its use, in the "
               "forward and in the backward (0: at its use); auto (the default): the "
               "fastest of 0-3 the cost model predicts to fit --memory-budget with a GPU "
               "--hardware, else 1"),
      cl::cat(cat)};
  cl::opt<std::string> offload{
      "optimizer-offload", cl::init("none"),
      cl::value_desc("none|cpu|static:R|interleaved"),
      cl::desc("Where the optimizer runs: none (on the device), cpu (master "
               "weights and Adam state in pinned host memory, updated by the "
               "CPU; gradients and weights copied each step: the ZeRO-Offload "
               "schedule), or static:R (parameters holding a fraction R of the "
               "elements keep their state on the device, the rest as cpu), or "
               "interleaved (per optimizer subgroup, state resident on the "
               "device, streamed to it or updated by the CPU, as the cost "
               "model plans for --hardware: loom-interleave-offload)"),
      cl::cat(cat)};
  cl::opt<std::string> replan{
      "replan", cl::init("auto"), cl::value_desc("auto|off|once|continuous"),
      cl::desc("--optimizer-offload=interleaved: also compile the plans the cost model makes "
               "for the host's CPU Adam rate from 0.25x to 4x the description's, with each "
               "plan's predicted step at each rate, into the binary; after three steps it "
               "measures the rate and continues under the plan predicted fastest (a "
               "checkpoint moves the run). once: that decision; continuous: again every "
               "20 steps; auto: once for GPU targets, off for the CPU (whose measured rate "
               "says nothing about the GPU host the plan is for)"),
      cl::cat(cat)};
  cl::opt<std::string> hostThread{
      "host-thread", cl::init("auto"), cl::value_desc("auto|on|off"),
      cl::desc("Run the CPU's optimizer updates (--optimizer-offload) on the step's host "
               "thread, each as soon as its gradient has landed, while the step's own thread "
               "goes on issuing GPU work (loomrt.host_task). auto: on for GPU targets, off "
               "for cpu (where the host thread would share the cores the step computes on)"),
      cl::cat(cat)};
  cl::opt<std::string> graphFeatures{
      "graph-features", cl::init("auto"),
      cl::value_desc("auto|device|zero-copy|host-gather"),
      cl::desc("Graph models: where the feature table lives. auto: on the GPU when it fits, "
               "else in pinned host memory read by zero-copy or gathered by the CPU, "
               "whichever the cost model predicts faster on --hardware (loom-place-features)"),
      cl::cat(cat)};
  cl::opt<std::string> hardware{
      "hardware", cl::init("h100"), cl::value_desc("preset|FILE"),
      cl::desc("The machine the cost model plans for: a preset (h100, cpu-host, frontier) "
               "or a loom-calibrate description (default: cpu-host for a CPU binary whose plan "
               "puts nothing on a GPU, frontier for --target=hip, else h100)"),
      cl::cat(cat)};
  cl::opt<int64_t> subGroupSize{
      "sub-group-size", cl::init(100000000), cl::value_desc("elements"),
      cl::desc("--optimizer-offload=interleaved: close an optimizer subgroup "
               "(the unit the schedule places) when it reaches this many "
               "elements"),
      cl::cat(cat)};
  cl::opt<std::string> timeline{
      "timeline", cl::init(""), cl::value_desc("FILE"),
      cl::desc("Write the cost model's predicted training step as Chrome "
               "trace JSON (the binary's --trace writes the measured one)"),
      cl::cat(cat)};
  cl::list<std::string> whatIf{
      "what-if", cl::value_desc("RESOURCE=FACTOR"),
      cl::desc("Plan and predict for --hardware with one resource scaled "
               "(cpu-clock, cpu-cores, dram, cache, pcie, hbm, gpu-flops, "
               "network), e.g. --what-if=cpu-clock=4; repeatable"),
      cl::cat(cat)};
  cl::opt<std::string> plan{
      "plan", cl::init(""), cl::value_desc("auto|FILE"),
      cl::desc("auto: search the parallel plans the passes build (data, tensor and pipeline "
               "degrees on --topology's levels, ZeRO stage, micro-batches, schedule, "
               "recompute; DiLoCo's fragments and overlap where --diloco is given), predict each on --hardware, print the ranked table and compile "
               "the fastest that fits; flags given explicitly are kept. FILE: replay the "
               "plan a --plan-report chose (docs/plan.md)"),
      cl::cat(cat)};
  cl::opt<std::string> planReport{
      "plan-report", cl::init(""), cl::value_desc("FILE"),
      cl::desc("With --plan=auto: write every candidate's flags and predictions and the "
               "chosen one as JSON"),
      cl::cat(cat)};
  cl::opt<bool> planExhaustive{
      "plan-exhaustive", cl::init(false),
      cl::desc("With --plan=auto: compile every candidate, none ruled out by the kernels of a "
               "plan it adds to (to check the pruning; slower)"),
      cl::cat(cat)};
  cl::opt<std::string> predictionJson{
      "prediction-json", cl::init(""), cl::value_desc("FILE"),
      cl::desc("Write the predicted step as JSON (step_s, device_bytes, usable_bytes, "
               "params, tokens, bound_s, persistent_bytes): what --plan=auto reads from each "
               "candidate"),
      cl::cat(cat)};
  cl::opt<std::string> planChosen{
      "plan-chosen", cl::init(""), cl::value_desc("FLAGS"), cl::Hidden,
      cl::desc("(--plan=auto's final compile) the chosen plan's flags, recorded on the "
               "module as loom.plan"),
      cl::cat(cat)};
  cl::opt<std::string> emitDir{
      "emit-dir", cl::init(""), cl::value_desc("dir"),
      cl::desc("Keep the generated C++ of --compile-to=binary in this folder"),
      cl::cat(cat)};
  cl::opt<std::string> runtimeDir{
      "runtime-dir", cl::init(""), cl::value_desc("dir"),
      cl::desc("Folder with the libloomrt.so a binary links (default: this build's runtime; "
               "for --target=hip, this build's runtime-hip, which scripts/build-hip.sh makes)"),
      cl::cat(cat)};
};

} // namespace loom

#endif // LOOM_PIPELINES_LOOMCOPTIONS_H
