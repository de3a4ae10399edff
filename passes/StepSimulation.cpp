//===- StepSimulation.cpp - one training step on the cost model ----------===//
//
// Predicts a step by replaying what the generated code does (docs/codegen.md)
// on the cost model's clock: the host walks @train_step in order, issuing
// GPU work to the compute stream (in order, asynchronous), copies to the
// h2d / d2h copy streams (each starting after the compute work issued
// before it, as the generated code records an event first), and running
// host-memory updates itself (blocking); a wait on a copy into host memory
// blocks the host, any other wait makes the compute stream wait. Op times
// are the cost model's rooflines; the memory timeline follows the step
// arena's allocation and release points (a buffer is released after its
// last use, a copy's input after the copy's wait) through the arena's own
// placement policy (the runtime's loomrt_arena_model), so fragmentation
// counts.
//
// The host issues to the compute stream through the driver's launch queue:
// at most gpu_launch_queue commands (kernels, the event a copy records
// first, stream waits) ahead of the GPU; the next issue blocks until the
// oldest starts. So host work placed after the backward (the CPU updates)
// starts only once the GPU is within that many commands of the end, not
// when the host could have issued everything (measured on the H100 host:
// 5B interleaved, CPU updates ~65 ms later than without the queue).
//
// Known simplifications (each shows up as a gap between --timeline and the
// binary's --trace): PCIe directions run at their one-way rates even when
// both are busy; every GPU kernel reaches the same fraction of its roofline
// (gpu_kernel_efficiency) and the CPU updates the same fraction of the
// measured Adam rate (cpu_update_efficiency) whatever else runs; both are
// fitted on one measured step (docs/cost-model.md).
//
//===----------------------------------------------------------------------===//
#include "passes/Offload.h"
#include "passes/Passes.h"
#include "loomrt/loomrt.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <map>

using namespace mlir;
using namespace mlir::loom;
namespace cost = ::loom::cost;

namespace {

/// Host time to issue one GPU operation, and the shortest kernel: a launch
/// costs a few microseconds of CPU time and a kernel at least that long on
/// the device (measured order of magnitude on the H100 host).
constexpr double kLaunch = 4e-6;

double bytesOf(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t ? double(t.getNumElements()) * double(storageBytes(t.getElementType())) : 0;
}
bool anyHost(Operation *op) {
  return llvm::any_of(op->getOperandTypes(), isHostMemory) || llvm::any_of(op->getResultTypes(), isHostMemory);
}

/// An attention op's query and key types (the forward's first two
/// operands; the gradient's second and third, after the output gradient).
std::pair<RankedTensorType, RankedTensorType> attentionQK(Operation *op) {
  unsigned q = isa<AttentionOp>(op) ? 0 : 1;
  return {cast<RankedTensorType>(op->getOperand(q).getType()),
          cast<RankedTensorType>(op->getOperand(q + 1).getType())};
}

/// Commands an op issues to the compute stream on a GPU (kernels and
/// stream-ordered scratch allocations); they fill the launch queue
/// (Hardware::gpuLaunchQueue). Attention and reductions ask the runtime
/// (loomrt_gpu_*_commands: whether the fused attention takes the op, which
/// reductions go through scratch, per reduced dimension); a layer (or RMS)
/// norm's gradient allocates scratch, runs three kernels and frees it;
/// cross entropy takes a kernel per row block and a mean; a concatenation a
/// strided copy per input. Everything else is one kernel.
int commandsOf(Operation *op) {
  if (isa<AttentionOp, AttentionGradOp>(op)) {
    auto [qt, kt] = attentionQK(op);
    return loomrt_gpu_attention_commands(qt.getElementType().isBF16() ? LOOMRT_BF16 : LOOMRT_F32,
                                         qt.getDimSize(2), kt.getDimSize(2), qt.getDimSize(3),
                                         isa<AttentionGradOp>(op) ? 1 : 0);
  }
  if (isa<LayerNormGradOp, RmsNormGradOp>(op))
    return 5;
  if (auto r = dyn_cast<ReduceOp>(op)) {
    int n = 0;
    for (const ReduceStep &st : reduceSteps(r))
      n += loomrt_gpu_reduce_commands(st.outer, st.len, st.inner);
    return std::max(n, 1);
  }
  if (isa<CrossEntropyOp>(op))
    return 2;
  if (isa<ConcatOp>(op)) // a strided copy per input
    return std::max<int>(1, op->getNumOperands());
  return 1;
}

/// Arithmetic of an op: the matrix products dominate; everything else is
/// memory-bound and counted as bytes.
double flopsOf(Operation *op) {
  if (auto m = dyn_cast<MatmulOp>(op)) {
    auto a = cast<RankedTensorType>(m.getLhs().getType());
    int64_t k = m.getTransposeLhs() ? a.getShape()[a.getRank() - 2] : a.getShape().back();
    return 2.0 * double(cast<RankedTensorType>(m.getType()).getNumElements()) * double(k);
  }
  auto attn = [](Value q, Value k, bool causal, double passes) {
    auto qt = cast<RankedTensorType>(q.getType()), kt = cast<RankedTensorType>(k.getType());
    double bhtd = double(qt.getNumElements()), s = double(kt.getShape()[kt.getRank() - 2]);
    // q·kᵀ and p·v: 2 products of 2·B·H·T·S·D flops; causal skips half.
    return passes * 2.0 * 2.0 * bhtd * s * (causal ? 0.5 : 1.0);
  };
  if (auto a = dyn_cast<AttentionOp>(op))
    return attn(a.getQuery(), a.getKey(), a.getCausal(), 1.0);
  // The backward recomputes the scores and forms four more products
  // (FlashAttention-2 §3.1.2): 2.5x the forward's.
  if (auto a = dyn_cast<AttentionGradOp>(op))
    return attn(a.getQuery(), a.getKey(), a.getCausal(), 2.5);
  return 0;
}

bool isLowPrecision(Operation *op) {
  for (Value v : op->getOperands())
    if (auto t = dyn_cast<RankedTensorType>(v.getType()))
      if (t.getElementType().isBF16())
        return true;
  return false;
}

/// A bf16 cast of an update's result that the update writes itself
/// (code generation fuses it: loomrt_adam_bf16grad).
bool fusedRefresh(Operation *op) {
  auto c = dyn_cast<CastOp>(op);
  auto adam = c ? c.getInput().getDefiningOp<AdamOp>() : AdamOp();
  return adam && fusedRefreshCast(adam) == c;
}

/// Values code generation writes straight into a global's buffer (stored
/// whole, once) and updates done in place take no step memory.
bool landsInGlobal(Value v) {
  if (!v.hasOneUse())
    return false;
  return isa<StoreOp>(*v.getUsers().begin()) &&
         (v.getDefiningOp<CopyOp>() || (v.getDefiningOp() && fusedRefresh(v.getDefiningOp())));
}
bool allocates(Operation *op, Value r) {
  if (!isa<RankedTensorType>(r.getType()) || isHostMemory(r.getType()))
    return false;
  if (isa<LoadOp, ReshapeOp>(op) || landsInGlobal(r))
    return false;
  if (auto adam = dyn_cast<AdamOp>(op))
    return !adam.getParam().getDefiningOp<LoadOp>();
  return true;
}

struct Simulator {
  Simulator(const cost::Hardware &hw, bool keep) : hw(hw), keep(keep) {}
  const cost::Hardware &hw;
  bool keep;
  StepPrediction p;
  double host = 0, gpu = 0, h2d = 0, d2h = 0, comm = 0, lastBackward = 0;
  llvm::DenseMap<Value, double> done; // token -> completion
  // Memory timeline.
  llvm::DenseMap<Value, Value> rootOf;
  llvm::DenseMap<Value, Operation *> lastUse; // per root
  llvm::DenseMap<Operation *, SmallVector<Value>> freeAt;
  // The driver's step arena: the same placement policy, without memory
  // (the runtime's public model of it).
  std::unique_ptr<loomrt_arena_model_t, void (*)(loomrt_arena_model)> arena{
      loomrt_arena_model_create(), loomrt_arena_model_destroy};
  // Host-memory traffic of CPU updates and DMA, and when it starts.
  double hostBytes = 0, hostFrom = -1;
  void hostTraffic(double bytes, double at) {
    hostBytes += bytes;
    if (hostFrom < 0 || at < hostFrom)
      hostFrom = at;
  }

  void span(const char *lane, Operation *op, double s, double e) {
    if (keep)
      p.spans.push_back({lane, op->getName().stripDialect().str(), s, e});
  }
  Value root(Value v) {
    auto it = rootOf.find(v);
    return it == rootOf.end() ? v : it->second;
  }

  void planMemory(Block &blk) {
    for (Operation &op : blk) {
      if (auto r = dyn_cast<ReshapeOp>(op))
        rootOf[r.getResult()] = root(r.getInput());
      for (Value v : op.getOperands())
        lastUse[root(v)] = &op;
    }
    // A copy's (or collective's) input is read until its wait.
    for (Operation &op : blk) {
      auto async = dyn_cast<AsyncOpInterface>(op);
      if (!async)
        continue;
      for (Operation *w : async.getAsyncToken().getUsers())
        for (Value v : op.getOperands()) {
          Operation *&last = lastUse[root(v)];
          if (last && last->getBlock() == w->getBlock() && last->isBeforeInBlock(w))
            last = w;
        }
    }
    for (auto &[v, op] : lastUse)
      freeAt[op].push_back(v);
  }

  /// Issuing work to a GPU costs the host a launch; on a CPU-only machine
  /// the work is a function call.
  double launch() const { return hw.hasGpu ? kLaunch : 0; }
  double cpuAdamRate() const {
    return (hw.cpuAdamParamsPerSec > 0 ? hw.cpuAdamParamsPerSec
                                       : hw.dramCopyBandwidth / cost::kCpuAdamBytesPerParam) *
           hw.cpuUpdateEfficiency;
  }

  // When each command issued to the compute stream starts (issue order).
  std::vector<double> computeStarts;
  /// Issue one command to the compute stream: blocks the host while the
  /// launch queue is full, then costs a launch. Returns when the host has
  /// issued it.
  void issueCompute() {
    size_t q = hw.hasGpu ? size_t(hw.gpuLaunchQueue) : 0;
    if (q && computeStarts.size() >= q)
      host = std::max(host, computeStarts[computeStarts.size() - q]);
    host += launch();
  }

  /// A command that only orders the compute stream (an event record, a
  /// stream wait): it starts when the stream reaches it.
  void issueMarker() {
    issueCompute();
    computeStarts.push_back(std::max(gpu, host));
  }
  /// The device's memory bandwidth: HBM, or host memory on the CPU target.
  double deviceBandwidth() const { return hw.hasGpu ? hw.hbmBandwidth : hw.dramCopyBandwidth; }

  /// GPU work issued as `commands` commands (commandsOf).
  void gpuOp(Operation *op, double seconds, int commands = 1) {
    double s = 0;
    for (int k = 0; k < commands; ++k) {
      issueCompute();
      if (k == 0)
        s = std::max(gpu, host);
      // The op's kernels start one after the other across its time.
      computeStarts.push_back(std::max(s + seconds * k / commands, host));
    }
    gpu = std::max(s + std::max(launch(), seconds), host);
    span("gpu", op, s, gpu);
    // Without a GPU the device's work runs on the host, in order, when it
    // is issued (the CPU backend's streams are synchronous).
    if (!hw.hasGpu)
      host = gpu;
  }

  LogicalResult run(Block &blk) {
    planMemory(blk);
    llvm::DenseMap<Value, int64_t> allocated; // placements in the arena model
    for (Operation &op : blk) {
      if (failed(visit(&op)))
        return failure();
      for (Value r : op.getResults())
        if (allocates(&op, r))
          allocated[r] = loomrt_arena_model_alloc(arena.get(), size_t(bytesOf(r)));
      // Attention's scratch, taken after its results and given back right
      // after it (code generation's order), at the runtime's own size.
      if (isa<AttentionOp, AttentionGradOp>(op) && !anyHost(&op)) {
        size_t ws = attentionWorkspaceBytes(&op);
        loomrt_arena_model_release(arena.get(), loomrt_arena_model_alloc(arena.get(), ws));
      }
      auto release = [&](Value v) {
        auto it = allocated.find(v);
        if (it != allocated.end()) {
          loomrt_arena_model_release(arena.get(), it->second);
          allocated.erase(it);
        }
      };
      if (auto it = freeAt.find(&op); it != freeAt.end())
        for (Value v : it->second)
          release(v);
      for (Value r : op.getResults()) // never used: freed at once
        if (r.use_empty())
          release(r);
    }
    p.peakStepBytes = double(loomrt_arena_model_reserved(arena.get()));
    p.stepSeconds = std::max({host, gpu, h2d, d2h, comm});
    // One host-memory budget for the CPU updates and the copies (Deep
    // Optimizer States §3): from the first of them on, the step lasts at
    // least their bytes over what host memory serves. A measured CPU Adam
    // rate shows the memory sustains 28 bytes per parameter at that rate.
    if (hostFrom >= 0) {
      double bw = std::max(hw.dramCopyBandwidth, hw.cpuAdamParamsPerSec * cost::kCpuAdamBytesPerParam);
      p.stepSeconds = std::max(p.stepSeconds, hostFrom + hostBytes / bw);
    }
    p.backwardSeconds = lastBackward;
    p.updateSeconds = p.stepSeconds - p.backwardSeconds;
    return success();
  }

  LogicalResult visit(Operation *op) {
    // A tensor constant in device memory is a fill kernel each step.
    if (auto c = dyn_cast<arith::ConstantOp>(op))
      if (auto t = dyn_cast<RankedTensorType>(c.getType()); t && !isHostMemory(t)) {
        double b = bytesOf(c.getResult());
        gpuOp(op, b / deviceBandwidth());
        return success();
      }
    // The step counter's increment is read back to the host (code
    // generation): the host waits for the compute stream.
    if (isa<arith::AddIOp>(op) && isa<RankedTensorType>(op->getResult(0).getType())) {
      host = std::max(host, gpu);
      return success();
    }
    if (isa<LoadOp, ReshapeOp, func::ReturnOp>(op) ||
        (op->getDialect() && op->getDialect()->getNamespace() == "arith"))
      return success();
    if (auto st = dyn_cast<StoreOp>(op)) {
      Operation *d = st.getValue().getDefiningOp();
      if (!d || isa<AdamOp, SgdOp, CopyOp>(d) || fusedRefresh(d))
        return success(); // in place, or landed there directly
      double b = 2 * bytesOf(st.getValue());
      if (isHostMemory(st.getValue().getType()))
        host += b / hw.dramCopyBandwidth;
      else
        gpuOp(op, b / deviceBandwidth());
      return success();
    }
    if (auto c = dyn_cast<CopyOp>(op)) {
      bool up = c.getStream().getKind() == StreamKind::h2d;
      double &lane = up ? h2d : d2h;
      // Without a GPU the "device" is a second arena of host memory (the CPU
      // target): a copy is a host memcpy.
      double rate = !hw.hasGpu ? hw.dramCopyBandwidth / 2 : up ? hw.h2dPinned : hw.d2hPinned;
      // The event the copy waits for is recorded on the compute stream.
      issueMarker();
      double s = std::max({lane, gpu, host});
      lane = s + bytesOf(c.getResult()) / rate;
      hostTraffic(bytesOf(c.getResult()), s);
      if (!hw.hasGpu)
        host = gpu = lane;
      (up ? p.h2dSeconds : p.d2hSeconds) += lane - s;
      done[c.getToken()] = lane;
      span(up ? "h2d" : "d2h", op, s, lane);
      return success();
    }
    if (auto w = dyn_cast<WaitOp>(op)) {
      for (Value t : w.getTokens()) {
        double d = done.lookup(t);
        auto c = t.getDefiningOp<CopyOp>();
        if (c && isHostMemory(c.getResult().getType())) {
          host = std::max(host, d);
        } else { // a stream wait, issued to the compute stream
          issueMarker();
          gpu = std::max(gpu, d);
        }
      }
      return success();
    }
    if (fusedRefresh(op))
      return success();
    if (auto adam = dyn_cast<AdamOp>(op)) {
      double n = double(cast<RankedTensorType>(adam.getParam().getType()).getNumElements());
      if (anyHost(op)) {
        double rate = cpuAdamRate();
        double s = host = std::max(host, hw.hasGpu ? host : gpu);
        host += n / rate;
        if (!hw.hasGpu)
          gpu = host;
        hostTraffic(n * cost::kCpuAdamBytesPerParam, s);
        p.cpuUpdateSeconds += host - s;
        span("cpu", op, s, host);
        return success();
      }
      double rate = !hw.hasGpu ? cpuAdamRate()
                    : hw.gpuAdamParamsPerSec > 0
                        ? hw.gpuAdamParamsPerSec
                        : hw.hbmBandwidth / cost::kCpuAdamBytesPerParam;
      double before = gpu;
      gpuOp(op, n / rate);
      p.gpuUpdateSeconds += gpu - std::max(before, host);
      return success();
    }
    if (isa<AllReduceOp, ReduceScatterOp, AllGatherOp, AllToAllOp, BroadcastCommOp>(op)) {
      double bw = !hw.links.empty() ? hw.links.front().bandwidth : deviceBandwidth();
      host += launch();
      double s = std::max({comm, gpu, host});
      comm = s + bytesOf(op->getOperand(0)) / bw;
      if (auto async = dyn_cast<AsyncOpInterface>(op))
        done[async.getAsyncToken()] = comm;
      span("comm", op, s, comm);
      return success();
    }
    if (isa<func::CallOp>(op))
      return op->emitError("step simulation: calls must be inlined first");
    // Compute.
    double bytes = 0;
    for (Value v : op->getOperands())
      bytes += bytesOf(v);
    for (Value v : op->getResults())
      bytes += bytesOf(v);
    double flops = flopsOf(op);
    if (anyHost(op)) {
      double s = host;
      host += cost::opTime(hw, cost::Device::CPU, cost::DType::F32, flops, bytes, bytes);
      span("cpu", op, s, host);
      return success();
    }
    // The device's compute: the GPU's roofline, or on a CPU-only machine
    // (the CPU target) the CPU's.
    gpuOp(op, cost::opTime(hw, hw.hasGpu ? cost::Device::GPU : cost::Device::CPU,
                           isLowPrecision(op) ? cost::DType::BF16 : cost::DType::F32, flops,
                           bytes, bytes) /
                  hw.gpuKernelEfficiency,
          commandsOf(op));
    if (isBackwardWork(op))
      lastBackward = gpu;
    return success();
  }
};

} // namespace

namespace mlir::loom {

double usableDeviceBytes(const cost::Hardware &hw) {
  // The CUDA context, cuBLAS's workspace and the arena's rounding: 3% and
  // 1.5 GiB held back (the H100 host: 79.1 GiB reported free of 80).
  return hw.gpuMemoryBytes * 0.97 - 1.5 * double(1ull << 30);
}

std::optional<cost::Hardware> loadHardware(llvm::StringRef nameOrFile, std::string &error) {
  if (std::optional<cost::Hardware> hw = cost::preset(nameOrFile))
    return hw;
  auto buf = llvm::MemoryBuffer::getFile(nameOrFile);
  if (!buf) {
    error = "hardware '" + nameOrFile.str() + "' is neither a preset (" + cost::presetNames() +
            ") nor a readable file";
    return std::nullopt;
  }
  std::string err;
  std::optional<cost::Hardware> hw = cost::parseHardware((*buf)->getBuffer(), err);
  if (!hw)
    error = "hardware file '" + nameOrFile.str() + "': " + err;
  return hw;
}

FailureOr<StepPrediction> simulateStep(ModuleOp module, const cost::Hardware &hw, bool keepSpans) {
  // On a copy, with @forward_backward's body in place of its call (the
  // offload schedules have inlined it already).
  OwningOpRef<ModuleOp> copy = module.clone();
  auto step = copy->lookupSymbol<func::FuncOp>("train_step");
  if (!step)
    return module.emitError("step simulation needs @train_step"), failure();
  Block &blk = step.getBody().front();
  for (auto call : llvm::make_early_inc_range(blk.getOps<func::CallOp>())) {
    auto callee = copy->lookupSymbol<func::FuncOp>(call.getCallee());
    if (!callee || callee.getBody().empty())
      return call.emitError("step simulation: unknown callee"), failure();
    inlineCall(call, callee);
  }
  Simulator sim(hw, keepSpans);
  for (Operation &op : copy->getBody()->getOperations()) {
    Type t;
    if (auto p = dyn_cast<ParamOp>(op))
      t = p.getType();
    else if (auto s = dyn_cast<StateOp>(op))
      t = s.getType();
    auto rt = dyn_cast_or_null<RankedTensorType>(t);
    if (rt && !isHostMemory(rt))
      sim.p.persistentDeviceBytes += double(rt.getNumElements()) * double(storageBytes(rt.getElementType()));
  }
  if (failed(sim.run(blk)))
    return failure();
  return sim.p;
}

std::string chromeTrace(const StepPrediction &p, llvm::StringRef title) {
  const char *lanes[] = {"gpu", "h2d", "d2h", "cpu", "comm"};
  llvm::json::Array events;
  for (int i = 0; i < 5; ++i)
    events.push_back(llvm::json::Object{
        {"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", i},
        {"args", llvm::json::Object{{"name", std::string("predicted ") + lanes[i]}}}});
  events.push_back(llvm::json::Object{{"name", "process_name"}, {"ph", "M"}, {"pid", 0},
                                      {"args", llvm::json::Object{{"name", title.str()}}}});
  for (const SimSpan &s : p.spans) {
    int tid = int(std::find(std::begin(lanes), std::end(lanes), s.lane) - std::begin(lanes));
    events.push_back(llvm::json::Object{{"name", s.name},
                                        {"ph", "X"},
                                        {"pid", 0},
                                        {"tid", tid},
                                        {"ts", s.start * 1e6},
                                        {"dur", (s.end - s.start) * 1e6}});
  }
  llvm::json::Object o{{"traceEvents", std::move(events)},
                       {"loom_prediction",
                        llvm::json::Object{{"step_s", p.stepSeconds},
                                           {"backward_s", p.backwardSeconds},
                                           {"update_s", p.updateSeconds},
                                           {"peak_device_bytes", p.peakDeviceBytes()},
                                           {"persistent_device_bytes", p.persistentDeviceBytes},
                                           {"step_arena_bytes", p.peakStepBytes}}}};
  std::string out;
  llvm::raw_string_ostream os(out);
  os << llvm::json::Value(std::move(o)) << "\n";
  return out;
}

} // namespace mlir::loom
