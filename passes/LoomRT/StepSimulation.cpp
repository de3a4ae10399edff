//===- StepSimulation.cpp - one training step on the cost model ----------===//
//
// Predicts a step by replaying its lowered form (loomrt IR: exactly the
// calls the generated code makes, docs/codegen.md) on the cost model's
// clock. The host walks @train_step in order: a call on the compute stream
// is issued (in order, asynchronous) and runs on the device; a copy on the
// h2d / d2h stream runs on that copy engine; a collective on the comm
// stream on the link; a call on the host stream runs on the host itself
// (blocking). `loomrt.record` gives an event the time its stream has
// reached, `loomrt.wait` makes a stream wait for it and `loomrt.sync` the
// host. Calls are priced from what they declare (loomrt::WorkOpInterface:
// bytes and flops) with the cost model's rooflines; the memory timeline is
// the lowering's own `loomrt.alloc` / `loomrt.free` sequence placed by the
// step arena's policy (the runtime's loomrt_arena_model), so fragmentation
// counts and there is one liveness analysis in Loom, not two.
//
// The host issues to the compute stream through the driver's launch queue:
// at most gpu_launch_queue commands (kernels, event records, stream waits)
// ahead of the GPU; the next issue blocks until the oldest starts. So host
// work placed after the backward (the CPU updates) starts only once the GPU
// is within that many commands of the end, not when the host could have
// issued everything (measured on the H100 host: 5B interleaved, CPU updates
// ~65 ms later than without the queue).
//
// Known simplifications (each shows up as a gap between --timeline and the
// binary's --trace): PCIe directions run at their one-way rates even when
// both are busy; every memory-bound GPU kernel reaches the same fraction of
// HBM (gpu_kernel_efficiency) and every product the same fraction of its
// measured rate (gpu_flops_efficiency) and the CPU updates the same fraction of the
// measured Adam rate (cpu_update_efficiency) whatever else runs; both are
// fitted on one measured step (docs/cost-model.md). A collective runs at
// the first link level's bus bandwidth.
//
//===----------------------------------------------------------------------===//
#include "loom/StepSimulation.h"
#include "loom/Support/Files.h"

#include "dialects/Loom/LoomDialect.h"
#include "dialects/Loom/LoomOps.h"
#include "dialects/LoomRT/LoomRTDialect.h"
#include "loomrt/loomrt.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <optional>
#include <memory>

using namespace mlir;
using namespace mlir::loom;
namespace rt = mlir::loomrt;
namespace cost = ::loom::cost;

namespace {

/// Host time to issue one GPU operation, and the shortest kernel: a launch
/// costs a few microseconds of CPU time and a kernel at least that long on
/// the device (measured order of magnitude on the H100 host).
constexpr double kLaunch = 4e-6;

loomrt_dtype runtimeDType(rt::DType t) { return loomrt_dtype(int(t)); }

/// Commands a call issues to the compute stream on a GPU (kernels and
/// stream-ordered scratch allocations); they fill the launch queue
/// (Hardware::gpuLaunchQueue). Attention and reductions ask the runtime
/// (loomrt_gpu_*_commands: whether the fused attention takes the call,
/// whether a reduction goes through scratch); a layer (or RMS) norm's
/// gradient allocates scratch, runs three kernels and frees it; cross
/// entropy takes a kernel per row block and a mean. Everything else is one.
/// An attention call: its shape and which pass it is, the forward (0), the
/// gradient (1, running the forward again) or the gradient from the saved
/// statistics (2).
struct AttentionCall {
  loomrt_dtype dtype;
  int64_t t, s, dh;
  int backward;
};
std::optional<AttentionCall> attentionCall(Operation *op) {
  auto call = [](auto a, int backward) {
    return AttentionCall{runtimeDType(a.getDtype()), int64_t(a.getT()), int64_t(a.getS()),
                         int64_t(a.getDh()), backward};
  };
  if (auto a = dyn_cast<rt::AttentionOp>(op))
    return call(a, 0);
  if (auto a = dyn_cast<rt::AttentionSaveOp>(op))
    return call(a, 0);
  if (auto a = dyn_cast<rt::AttentionGradOp>(op))
    return call(a, 1);
  if (auto a = dyn_cast<rt::AttentionGradSavedOp>(op))
    return call(a, 2);
  return std::nullopt;
}

int commandsOf(Operation *op) {
  if (std::optional<AttentionCall> a = attentionCall(op))
    return loomrt_gpu_attention_commands(a->dtype, a->t, a->s, a->dh, a->backward);
  if (auto r = dyn_cast<rt::ReduceOp>(op))
    return loomrt_gpu_reduce_commands(r.getOuter(), r.getLen(), r.getInner());
  if (isa<rt::LayerNormGradOp, rt::RmsNormGradOp>(op))
    return 5;
  if (isa<rt::CrossEntropyOp>(op))
    return 2;
  // cuBLASLt sums BGRADB's bias gradient in a kernel of its own (CUPTI on
  // an H200, bench/RESULTS.md 2026-12-01).
  if (isa<rt::MatmulBgradOp>(op))
    return 2;
  if (auto a = dyn_cast<rt::AdamMultiOp>(op))
    return int((a.getSizes().size() + LOOMRT_ADAM_MULTI_BATCH - 1) / LOOMRT_ADAM_MULTI_BATCH);
  return 1;
}

/// Where a lane is: the host, or one of the step's streams.
enum class Lane { host, compute, comm, h2d, d2h };

struct Simulator {
  Simulator(const cost::Hardware &hw, bool keep, int64_t world)
      : hw(hw), keep(keep), world(std::max<int64_t>(1, world)) {}
  const cost::Hardware &hw;
  bool keep;
  int64_t world;
  /// The size of each level of the module's topology, innermost first
  /// (their names: p.levels).
  std::vector<int64_t> levelSizes;
  StepPrediction p;
  double host = 0, gpu = 0, h2d = 0, d2h = 0, comm = 0, lastBackward = 0;
  // The step's host thread (loomrt.host_task): when it has run every task
  // issued so far. While a task's body is priced, `host` is that thread's
  // clock and the issuing thread's is kept aside.
  double worker = 0;
  llvm::DenseMap<Value, Lane> lanes;     // stream -> its lane
  llvm::DenseMap<Value, double> events;  // event -> when its stream reached it
  llvm::DenseMap<Value, Value> aliases;  // a callee's argument or a call's result -> buffer
  llvm::DenseMap<Value, int64_t> placed; // step-arena buffer -> its placement
  double plannedBytes = 0; // loom-plan-arena's region (the largest run)
  // The driver's step arena: the same placement policy, without memory
  // (the runtime's public model of it).
  std::unique_ptr<loomrt_arena_model_t, void (*)(loomrt_arena_model)> arena{
      loomrt_arena_model_create(), loomrt_arena_model_destroy};
  // Host-memory traffic of CPU updates and DMA, and when it starts.
  double hostBytes = 0, hostFrom = -1;
  // The collectives issued so far that may still run beside a kernel:
  // [start, end) each (gpu_comm_overlap_slowdown).
  std::vector<std::pair<double, double>> commBusy;
  // The compute roofs of the kernels issued so far (p's
  // computeRoofSecondsToBackward is this at loomrt.backward_done).
  double computeRoof = 0;
  // When each command issued to the compute stream starts (issue order).
  std::vector<double> computeStarts;
  // Inside a function replayed as a graph (loomrt.graph): its calls cost
  // the host nothing.
  bool replaying = false;

  void hostTraffic(double bytes, double at) {
    hostBytes += bytes;
    if (hostFrom < 0 || at < hostFrom)
      hostFrom = at;
  }
  /// The loom op a call came from (the lowering's NameLoc "loom.matmul"),
  /// without its dialect, for spans; else the call's own name.
  static std::string spanName(Operation *op) {
    if (auto n = dyn_cast<NameLoc>(op->getLoc())) {
      auto [dialect, name] = n.getName().strref().split('.');
      return (name.empty() ? dialect : name).str();
    }
    return op->getName().stripDialect().str();
  }
  void span(const char *lane, Operation *op, double s, double e) {
    if (keep)
      p.spans.push_back({lane, spanName(op), s, e});
  }
  Value resolve(Value v) {
    for (auto it = aliases.find(v); it != aliases.end(); it = aliases.find(v))
      v = it->second;
    return v;
  }
  Lane laneOf(Value stream) { return lanes.lookup(resolve(stream)); }
  double &clock(Lane l) {
    switch (l) {
    case Lane::host:
      return host;
    case Lane::compute:
      return gpu;
    case Lane::comm:
      return comm;
    case Lane::h2d:
      return h2d;
    case Lane::d2h:
      return d2h;
    }
    llvm_unreachable("lane");
  }

  /// Issuing work to a GPU costs the host a launch; on a CPU-only machine
  /// the work is a function call.
  double launch() const { return hw.hasGpu ? kLaunch : 0; }
  double cpuAdamRate() const { return mlir::loom::cpuAdamRate(hw); }
  /// The device's memory bandwidth: HBM, or host memory on the CPU target.
  double deviceBandwidth() const { return hw.hasGpu ? hw.hbmBandwidth : hw.dramCopyBandwidth; }

  /// Issue one command to the compute stream: blocks the host while the
  /// launch queue is full, then costs a launch. Inside a replayed graph the
  /// command is the graph's: the host issued the graph once.
  void issueCompute() {
    if (replaying)
      return;
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
  /// Device work issued as `commands` commands (commandsOf).
  void gpuOp(Operation *op, double seconds, int commands = 1) {
    // A collective running beside it slows it (gpu_comm_overlap_slowdown):
    // by the overlap with the collectives issued so far (those issued
    // later are not known yet; the common case, a bucket's reduction
    // beside the next layers' backward, is issued first).
    if (hw.hasGpu && hw.gpuCommOverlapSlowdown > 0 && !commBusy.empty()) {
      double from = std::max(gpu, host), to = from + seconds, overlap = 0;
      for (size_t i = 0; i < commBusy.size();) {
        auto [cs, ce] = commBusy[i];
        if (ce <= from) { // over before any later kernel starts
          commBusy[i] = commBusy.back();
          commBusy.pop_back();
          continue;
        }
        overlap += std::max(0.0, std::min(ce, to) - std::max(cs, from));
        ++i;
      }
      seconds += hw.gpuCommOverlapSlowdown * std::min(overlap, seconds);
    }
    // Each command leaves the stream idle for the kernel gap after it
    // (a graph's own, where the description measured one).
    p.gpuKernelSeconds += seconds;
    if (hw.hasGpu)
      seconds += commands * (replaying && hw.gpuGraphKernelGapSeconds > 0
                                 ? hw.gpuGraphKernelGapSeconds
                                 : hw.gpuKernelGapSeconds);
    double s = 0;
    for (int k = 0; k < commands; ++k) {
      issueCompute();
      if (k == 0)
        s = std::max(gpu, host);
      // The call's kernels start one after the other across its time (a
      // graph's are one entry of the launch queue: its launch).
      if (!replaying)
        computeStarts.push_back(std::max(s + seconds * k / commands, host));
    }
    // A launch from the host lasts at least the launch's time on the GPU;
    // a replayed kernel its own time and gap.
    gpu = std::max(s + std::max(replaying ? 0.0 : launch(), seconds), host);
    span("gpu", op, s, gpu);
    // Without a GPU the device's work runs on the host, in order, when it
    // is issued (the CPU backend's streams are synchronous).
    if (!hw.hasGpu)
      host = gpu;
  }
  void hostOp(Operation *op, double seconds) {
    double s = host;
    host += seconds;
    span("cpu", op, s, host);
  }

  LogicalResult run(func::FuncOp fn, ModuleOp module) {
    // loom-plan-arena's region, reserved whole (the driver's
    // loomrt_step_arena), beside the online arena's blocks.
    if (auto a = fn->getAttrOfType<IntegerAttr>(rt::kArenaAttr))
      plannedBytes = std::max(plannedBytes, double(a.getInt()));
    // A function loom-capture-graphs marked is one graph launch (the
    // steady state: the runtime captures it on its second call).
    bool graph = hw.hasGpu && !replaying && fn->hasAttr(rt::kGraphAttr);
    if (graph) {
      issueCompute();
      computeStarts.push_back(std::max(gpu, host));
      replaying = true;
    }
    for (Operation &op : fn.getBody().front())
      if (failed(visit(&op, module)))
        return failure();
    if (graph)
      replaying = false;
    return success();
  }

  void finish() {
    p.peakStepBytes = double(loomrt_arena_model_reserved(arena.get())) + plannedBytes;
    p.stepSeconds = std::max({host, worker, gpu, h2d, d2h, comm});
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
  }

  LogicalResult visitCall(func::CallOp call, ModuleOp module) {
    auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
    if (!callee || callee.getBody().empty())
      return call.emitError("step simulation: unknown callee @") << call.getCallee();
    for (auto [arg, v] : llvm::zip(callee.getArguments(), call.getOperands()))
      aliases[arg] = v;
    if (failed(run(callee, module)))
      return failure();
    // The callee hands its results over: the caller frees them.
    auto ret = cast<func::ReturnOp>(callee.getBody().front().getTerminator());
    for (auto [r, v] : llvm::zip(call.getResults(), ret.getOperands()))
      aliases[r] = v;
    return success();
  }

  LogicalResult visit(Operation *op, ModuleOp module) {
    return llvm::TypeSwitch<Operation *, LogicalResult>(op)
        .Case([&](rt::StreamOp s) {
          Lane l = Lane::compute;
          switch (s.getRole()) {
          case rt::StreamRole::compute:
            l = Lane::compute;
            break;
          case rt::StreamRole::comm:
            l = Lane::comm;
            break;
          case rt::StreamRole::host:
            l = Lane::host;
            break;
          case rt::StreamRole::h2d:
            l = Lane::h2d;
            break;
          case rt::StreamRole::d2h:
            l = Lane::d2h;
            break;
          }
          lanes[s.getResult()] = l;
          return success();
        })
        .Case([&](rt::AllocOp a) {
          if (!a.getHost() && !a.getOffset())
            placed[a.getResult()] = loomrt_arena_model_alloc(arena.get(), size_t(a.getBytes()));
          return success();
        })
        .Case([&](rt::FreeOp f) {
          auto it = placed.find(resolve(f.getBuffer()));
          if (it != placed.end()) {
            loomrt_arena_model_release(arena.get(), it->second);
            placed.erase(it);
          }
          return success();
        })
        .Case([&](rt::BackwardDoneOp) {
          lastBackward = gpu;
          p.computeRoofSecondsToBackward = computeRoof;
          return success();
        })
        .Case([&](rt::RecordOp r) {
          Lane l = laneOf(r.getStream());
          if (l == Lane::compute) // an event record on the compute stream
            issueMarker();
          events[r.getEvent()] = l == Lane::compute ? std::max(gpu, host) : clock(l);
          return success();
        })
        .Case([&](rt::WaitOp w) {
          Lane l = laneOf(w.getStream());
          if (l == Lane::compute)
            issueMarker();
          double &c = clock(l);
          c = std::max(c, events.lookup(w.getEvent()));
          return success();
        })
        // A host task starts when it is issued and the host thread has run
        // the ones before it; the issuing thread only queues it.
        .Case([&](rt::HostTaskOp t) -> LogicalResult {
          double issuer = host;
          host = std::max(worker, host);
          for (Operation &in : t.getBody().front())
            if (failed(visit(&in, module)))
              return failure();
          worker = host;
          host = issuer + kLaunch;
          return success();
        })
        .Case([&](rt::JoinOp) {
          host = std::max(host, worker);
          return success();
        })
        .Case([&](rt::SyncOp s) {
          host = std::max(host, events.lookup(s.getEvent()));
          return success();
        })
        // The step counter: read back to the host, which waits for the
        // compute stream.
        .Case<rt::AddI64Op, rt::ReadI64Op>([&](Operation *) {
          host = std::max(host, gpu);
          return success();
        })
        .Case([&](rt::MemcpyOp c) { return copy(c); })
        .Case([&](rt::AdamOp a) { return adam(a); })
        .Case<rt::AllReduceOp, rt::ReduceScatterOp, rt::AllGatherOp, rt::AllToAllOp,
              rt::AllGatherBytesOp, rt::SendRecvOp, rt::P2POp>(
            [&](Operation *c) { return collective(c); })
        .Case([&](func::CallOp c) { return visitCall(c, module); })
        .Case([&](rt::WorkOpInterface w) { return work(w); })
        .Default([&](Operation *other) -> LogicalResult {
          // Declarations, views and the host's dropout keys (a hash)
          // cost nothing; anything else is a call this simulation does not
          // know how to price.
          if (isa<rt::GlobalOp, rt::ViewOp, rt::RankViewOp, rt::CommentOp, rt::CommOp,
                  rt::RandomKeyOp, rt::YieldOp, func::ReturnOp>(other))
            return success();
          return other->emitError("step simulation: no cost for '")
                 << other->getName() << "' (is the module lowered to loomrt?)";
        });
  }

  /// A call that computes: the roofline of its bytes and flops on the
  /// device its stream runs on.
  LogicalResult work(rt::WorkOpInterface w) {
    Operation *op = w;
    Lane l = laneOf(op->getOperand(0));
    double flops = w.getFlops(), bytes = w.getBytesMoved();
    cost::DType dt = w.getWorkDType() == rt::DType::bf16 ? cost::DType::BF16 : cost::DType::F32;
    // Constants and fills are copies: bytes over bandwidth.
    bool isFill = isa<rt::WriteConstOp, rt::FillOp>(op);
    // Row gathers of a graph's features from host memory: the fitted rates
    // (docs/cost-model.md, "Row gathers"), not the roofline of HBM or DRAM.
    if (auto g = dyn_cast<rt::GatherRowsOp>(op); g && g.getZeroCopy() && l == Lane::compute) {
      gpuOp(op, cost::gatherTime(hw, hw.hasGpu ? cost::GatherPlacement::ZeroCopy
                                               : cost::GatherPlacement::Device,
                                 double(g.getN()), double(g.getRowBytes())),
            commandsOf(op));
      return success();
    }
    if (auto e = dyn_cast<rt::EmbeddingOp>(op); e && l == Lane::host) {
      hostOp(op, cost::hostGatherCpuTime(hw, double(e.getN()),
                                         double(e.getD()) * rt::dtypeBytes(e.getDtype())));
      return success();
    }
    if (l == Lane::host) {
      if (!isFill) // host constants are written when the program starts
        hostOp(op, cost::opTime(hw, cost::Device::CPU, cost::DType::F32, flops, bytes, bytes));
      return success();
    }
    if (l != Lane::compute)
      return op->emitError("step simulation: a computation on a copy or comm stream");
    if (isFill) {
      gpuOp(op, bytes / deviceBandwidth());
      return success();
    }
    // The fused attention kernels at their measured rate (FlashAttention's
    // flop count over gpu_attention_bf16_flops, which already is what they
    // reach: no kernel efficiency on top); the gradient that recomputes
    // the forward runs it first (1 + 2.5 forwards).
    if (std::optional<AttentionCall> a = attentionCall(op);
        a && hw.hasGpu && hw.gpuAttentionBf16Rate > 0 &&
        loomrt_attention_fused(a->dtype, a->t, a->s, a->dh)) {
      double passes = a->backward == 1 ? 3.5 / 2.5 : 1.0;
      computeRoof += passes * flops / hw.gpuAttentionBf16Rate;
      gpuOp(op, passes * flops / hw.gpuAttentionBf16Rate, commandsOf(op));
      return success();
    }
    // The device's compute: the GPU's roofline, or on a CPU-only machine
    // (the CPU target) the CPU's.
    if (flops > 0)
      computeRoof += hw.hasGpu ? cost::gpuKernelTime(hw, dt, flops, 0)
                                        : cost::opTime(hw, cost::Device::CPU, dt, flops, 0, 0) /
                                              hw.gpuKernelEfficiency;
    gpuOp(op,
          hw.hasGpu ? cost::gpuKernelTime(hw, dt, flops, bytes)
                    : cost::opTime(hw, cost::Device::CPU, dt, flops, bytes, bytes) /
                          hw.gpuKernelEfficiency,
          commandsOf(op));
    return success();
  }

  LogicalResult copy(rt::MemcpyOp c) {
    Lane l = laneOf(c.getStream());
    double bytes = double(c.getBytes());
    if (l == Lane::compute) { // within device memory: read and write
      gpuOp(c, 2 * bytes / deviceBandwidth());
      return success();
    }
    if (l == Lane::host) {
      hostOp(c, 2 * bytes / hw.dramCopyBandwidth);
      return success();
    }
    if (l != Lane::h2d && l != Lane::d2h)
      return c.emitError("step simulation: a copy on the comm stream");
    bool up = l == Lane::h2d;
    double &lane = clock(l);
    // Without a GPU the "device" is a second arena of host memory (the CPU
    // target): a copy is a host memcpy.
    double rate = !hw.hasGpu ? hw.dramCopyBandwidth / 2 : up ? hw.h2dPinned : hw.d2hPinned;
    double s = std::max(lane, host);
    lane = s + bytes / rate;
    hostTraffic(bytes, s);
    if (!hw.hasGpu)
      host = gpu = lane;
    (up ? p.h2dSeconds : p.d2hSeconds) += lane - s;
    span(up ? "h2d" : "d2h", c, s, lane);
    return success();
  }

  LogicalResult adam(rt::AdamOp a) {
    double n = double(a.getN());
    if (laneOf(a.getStream()) == Lane::host) {
      double s = host = std::max(host, hw.hasGpu ? host : gpu);
      host += n / cpuAdamRate();
      if (!hw.hasGpu)
        gpu = host;
      hostTraffic(n * cost::kCpuAdamBytesPerParam, s);
      p.cpuUpdateSeconds += host - s;
      span("cpu", a, s, host);
      return success();
    }
    double rate = !hw.hasGpu                 ? cpuAdamRate()
                  : hw.gpuAdamParamsPerSec > 0 ? hw.gpuAdamParamsPerSec
                                               : hw.hbmBandwidth / cost::kCpuAdamBytesPerParam;
    double before = gpu;
    gpuOp(a, n / rate);
    p.gpuUpdateSeconds += gpu - std::max(before, host);
    return success();
  }

  /// A collective: the bytes this rank sends (loomrt_collective_bytes_sent,
  /// the runtime's own count) over the group's slowest link, plus one
  /// latency per ring step (docs/cost-model.md, "Collectives").
  LogicalResult collective(Operation *op) {
    uint64_t bytes = 0;
    loomrt_collective_kind kind = LOOMRT_COLL_ALL_GATHER;
    if (auto c = dyn_cast<rt::AllReduceOp>(op))
      kind = LOOMRT_COLL_ALL_REDUCE, bytes = uint64_t(c.getN()) * rt::dtypeBytes(c.getDtype());
    else if (auto c = dyn_cast<rt::ReduceScatterOp>(op))
      kind = LOOMRT_COLL_REDUCE_SCATTER, bytes = uint64_t(c.getN()) * rt::dtypeBytes(c.getDtype());
    else if (auto c = dyn_cast<rt::AllGatherOp>(op))
      bytes = uint64_t(c.getN()) * rt::dtypeBytes(c.getDtype());
    else if (auto c = dyn_cast<rt::AllToAllOp>(op))
      kind = LOOMRT_COLL_ALL_TO_ALL, bytes = uint64_t(c.getBytes());
    else if (auto c = dyn_cast<rt::AllGatherBytesOp>(op))
      bytes = uint64_t(c.getBytes());
    else if (auto c = dyn_cast<rt::SendRecvOp>(op))
      kind = LOOMRT_COLL_SEND_RECV, bytes = uint64_t(c.getBytes());
    // A pipeline transfer takes its bytes' time on the link whichever way
    // they go (the wait for the peer, the bubble, is not priced here).
    else if (auto c = dyn_cast<rt::P2POp>(op))
      kind = LOOMRT_COLL_SEND_RECV, bytes = uint64_t(c.getBytes());
    // The group: a communicator over some levels, or the world.
    SmallVector<int64_t> levels;
    auto commOp = op->getOperand(0).getDefiningOp<rt::CommOp>();
    if (commOp && commOp.getLevels())
      levels.assign(commOp.getLevels()->begin(), commOp.getLevels()->end());
    else
      for (int64_t i = 0; i < int64_t(levelSizes.size()); ++i)
        levels.push_back(i);
    int64_t ranks = 1;
    for (int64_t l : levels)
      ranks *= l < int64_t(levelSizes.size()) ? levelSizes[l] : 1;
    if (levelSizes.empty())
      ranks = world;
    double sent = double(loomrt_collective_bytes_sent(kind, bytes, int(ranks)));
    // (A receive alone sends nothing, as the runtime counts it; its bytes
    // still cross the link.)
    double moved = sent;
    if (auto c = dyn_cast<rt::P2POp>(op); c && !c.getInput())
      sent = 0;
    cost::GroupLink link = groupLink(levels);
    std::string key;
    if (commOp && commOp.getLevels())
      for (auto [i, l] : llvm::enumerate(levels))
        key += (i ? "," : "") + std::to_string(l);
    p.commBytes += sent;
    Lane l = laneOf(op->getOperand(1));
    double &lane = clock(l);
    host += launch();
    double s = std::max(lane, host);
    // A point-to-point exchange is one hop (its two directions at once);
    // a collective ranks - 1 of them.
    double hops = kind == LOOMRT_COLL_SEND_RECV ? 1 : double(ranks - 1);
    double seconds = ranks > 1 ? hops * link.latency + moved / link.bandwidth : 0;
    lane = s + seconds;
    if (seconds > 0)
      commBusy.push_back({s, lane});
    p.comm[key].bytes += sent;
    p.comm[key].seconds += seconds;
    span("comm", op, s, lane);
    return success();
  }

  /// The slowest link among a group's levels that have more than one rank
  /// (by the levels' names in the description, else by position); without
  /// links, the device's copy bandwidth.
  cost::GroupLink groupLink(ArrayRef<int64_t> levels) {
    std::vector<std::string> names;
    for (int64_t l : levels)
      if (l < int64_t(levelSizes.size()) && levelSizes[l] > 1)
        names.push_back(p.levels[l]);
    cost::GroupLink g = cost::groupLink(hw, p.levels, names);
    if (g.bandwidth <= 0)
      g.bandwidth = deviceBandwidth();
    return g;
  }
};

} // namespace

namespace mlir::loom {

double cpuAdamRate(const cost::Hardware &hw) {
  return (hw.cpuAdamParamsPerSec > 0 ? hw.cpuAdamParamsPerSec
                                     : hw.dramCopyBandwidth / cost::kCpuAdamBytesPerParam) *
         hw.cpuUpdateEfficiency;
}

double usableDeviceBytes(const cost::Hardware &hw) {
  // The CUDA context, cuBLAS's workspace and the arena's rounding: 3% and
  // 1.5 GiB held back (the H100 host: 79.1 GiB reported free of 80).
  return hw.gpuMemoryBytes * 0.97 - 1.5 * double(1ull << 30);
}

std::optional<cost::Hardware> loadHardware(llvm::StringRef nameOrFile, std::string &error) {
  if (std::optional<cost::Hardware> hw = cost::preset(nameOrFile))
    return hw;
  if (!llvm::sys::fs::exists(nameOrFile)) {
    error = "hardware '" + nameOrFile.str() + "' is neither a preset (" + cost::presetNames() +
            ") nor a readable file";
    return std::nullopt;
  }
  // A description is a few kilobytes; 1 MiB is generous.
  std::string text, err;
  if (!::loom::readRegularFile(nameOrFile.str(), 1 << 20, "hardware file", text, err)) {
    error = err;
    return std::nullopt;
  }
  std::optional<cost::Hardware> hw = cost::parseHardware(text, err);
  if (!hw)
    error = "hardware file '" + nameOrFile.str() + "': " + err;
  return hw;
}

std::string StepPrediction::groupName(llvm::StringRef key) const {
  if (key.empty())
    return "world";
  SmallVector<llvm::StringRef> idx;
  key.split(idx, ',');
  std::string name;
  for (llvm::StringRef i : idx) {
    unsigned k = 0;
    if (i.getAsInteger(10, k) || k >= levels.size())
      return key.str();
    name += (name.empty() ? "" : "+") + levels[k];
  }
  return name;
}

FailureOr<StepPrediction> simulateLoweredStep(ModuleOp module, const cost::Hardware &hw,
                                              bool keepSpans, StringRef function) {
  auto main = module.lookupSymbol<func::FuncOp>(LoomDialect::kTrainStep);
  auto step = module.lookupSymbol<func::FuncOp>(function);
  if (!main || main.getBody().empty() || !step || step.getBody().empty())
    return module.emitError("step simulation needs @train_step and @") << function, failure();
  // The ranks a reduce-scatter's input is spread over (the data-parallel
  // decision stays on the lowered @train_step).
  int64_t world = 1;
  if (DataParallelAttr dp = getDataParallel(main))
    world = dp.getWorld();
  // A rank's share of the host it shares with the other GPUs on it (the
  // CPU updates and copies of all of them compete for its DRAM).
  const cost::Hardware share = cost::rankShare(hw, cost::ranksPerHost(hw, world));
  Simulator sim(share, keepSpans, world);
  for (TopologyOp t : module.getOps<TopologyOp>()) {
    for (auto [name, size] : llvm::zip(t.getLevels(), t.getSizes())) {
      sim.p.levels.push_back(cast<StringAttr>(name).str());
      sim.levelSizes.push_back(size);
    }
    break;
  }
  // Parameters and state in device memory stay for the whole run (not the
  // parameters a ZeRO-3 shard holds a block of: they exist only as the
  // shards).
  for (Operation &op : module.getBody()->getOperations()) {
    if (op.hasAttr(LoomDialect::ShardedIntoAttrHelper::getNameStr()))
      continue;
    Type t;
    if (auto p = dyn_cast<ParamOp>(op))
      t = p.getType();
    else if (auto s = dyn_cast<StateOp>(op))
      t = s.getType();
    auto rt = dyn_cast_or_null<RankedTensorType>(t);
    if (rt && !isHostMemory(rt))
      sim.p.persistentDeviceBytes += double(rt.getNumElements()) * double(storageBytes(rt.getElementType()));
  }
  if (failed(sim.run(step, module)))
    return failure();
  sim.finish();
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
