// train_main.cpp: the driver of generated training binaries (see train.h).
// Data order, language models: step s reads B*T+1 tokens at offset (s*B*T)
// mod (N - B*T - 1); inputs are the first B*T tokens as [B, T], targets the
// next-token shift - the order PyTorch reference runs use, so losses
// compare step by step. Array inputs (classifiers, graph models): step s
// reads rows (s*B + r) mod N of every input's file, r < B (the whole world's
// batch; rank k takes rows [k*B, (k+1)*B) of it).
#include "driver/flags.h"
#include "driver/globals.h"
#include "driver/log.h"
#include "driver/replan.h"
#include "driver/step_ctx.h"

#include <algorithm>
#include <cerrno>
#include <omp.h>
#include <sys/stat.h>
#include <filesystem>

using namespace loomrt::driver;

namespace {

using loomrt::dtypeBytes;

/// The bytes of the globals that live in device memory.
size_t deviceGlobalBytes(const loomrt_program *p, const std::vector<HostView> &host) {
  size_t onDevice = 0;
  for (size_t i = 0; i < p->num_globals; ++i)
    if (p->globals[i].space != LOOMRT_MEM_PINNED)
      onDevice += host[i].size();
  return onDevice;
}

/// What the run held: device memory (what loomc's prediction counts) apart
/// from pinned host memory (offloaded state, the host step arena).
void reportMemory(const loomrt_program *p, const std::vector<HostView> &host,
                  loomrt_step_ctx_t &ctx, int world) {
  size_t onDevice = deviceGlobalBytes(p, host), pinned = 0;
  for (size_t i = 0; i < p->num_globals; ++i)
    if (p->globals[i].space == LOOMRT_MEM_PINNED)
      pinned += host[i].size();
  std::printf("step memory: %.1f MiB of activations and workspace, %.1f MiB of "
              "parameters and optimizer state%s\n",
              double(ctx.reserved()) / (1 << 20), double(onDevice) / (1 << 20),
              world > 1 ? " (this rank's)" : "");
  if (pinned || ctx.host.reserved())
    std::printf("pinned host memory: %.1f MiB of parameters and optimizer state, %.1f MiB "
                "of step buffers\n",
                double(pinned) / (1 << 20), double(ctx.host.reserved()) / (1 << 20));
}

/// One training run of a generated program: loomrt_train_main sets it up
/// phase by phase (each a member returning 0 or die()'s exit code), steps it
/// and tears it down. Members that other threads write through (the DiLoCo
/// exchange in flight, the sampler one step ahead) are joined before the
/// buffers they use go: the exchange in the destructor, the sampler's
/// future by being the last member.
class TrainRun {
public:
  TrainRun(const loomrt_program *p, const Flags &f, const loomrt_replan *rp = nullptr,
           size_t cand = 0, int replanMode = 0)
      : p(p), f(f), rp(rp), cand(cand), replanMode(replanMode) {}
  TrainRun(const TrainRun &) = delete;
  TrainRun &operator=(const TrainRun &) = delete;
  ~TrainRun() {
    if (inflight.joinable())
      inflight.join();
  }

  int loadData();
  int joinWorld();
  int openContexts();
  int setupGlobals();
  int uploadGlobals();
  void releaseHostCopies();
  int setupInputs();
  int train();
  void finish();
  /// After train(): the candidate the run stopped to continue under (its
  /// checkpoint saved), or null; and how many steps it ran.
  const loomrt_program *next() const { return switchTo; }
  size_t nextCandidate() const { return switchCand; }
  long stepsRun() const { return ranSteps; }

private:
  int fillBatch(long step, double &dataWaitMs);
  int runOuterSteps(long step, uint64_t &sideBytes);
  int joinSide();
  int capDeviceMemory();
  double cardUsedMiB() const;
  int saveCheckpoint(long stepDone);
  std::vector<loomrt_tensor_ref> refs() const;
  double gradNorm();
  int64_t draw(long step, int64_t row, uint64_t range) const;
  void decideReplan(long step);
  int report(long step, float loss, double ms, double dataWaitMs, uint64_t sentBefore,
             uint64_t sideBytes, const std::map<uint64_t, uint64_t> &groupBefore);

  const loomrt_program *p;
  const Flags &f;
  std::string err;

  // The data: tokens for the whole world's batch, or every input's rows.
  bool arrays = false, graphTask = false;
  loomrt::TokenFile tokens;
  std::vector<loomrt::ArrayInput> data;
  loomrt::Graph graph;

  // This rank's place in the world.
  int world = 1, rank = 0;
  bool lead = true;
  loomrt_device dev = nullptr;
  loomrt_comm comm = nullptr;
  // --device-memory's ballast: the card's memory beyond the cap, held.
  void *ballastPtr = nullptr;
  size_t ballastBytes = 0;
  // The CPU updates' times in steps 2 to --replan-after, and the rate their
  // median gives (report; -1 until then, or without CPU updates).
  std::vector<double> hostAdamMs;
  double measuredAdamRate = -1;
  // Re-planning (loomc --replan): the started program's table, which of its
  // candidates this run is, the mode (1 once, 2 continuous: again every
  // kReplanWindow steps, on the CPU updates' time over the window), and
  // the candidate a decision chose (train() then saves and stops).
  static constexpr long kReplanWindow = 20;
  const loomrt_replan *rp = nullptr;
  size_t cand = 0;
  int replanMode = 0;
  const loomrt_program *switchTo = nullptr;
  size_t switchCand = 0;
  long ranSteps = 0;
  double windowAdamMs = 0;
  // bt: what one rank's step takes (tokens, or rows of arrays); gbt the
  // world's; mine: this rank's first row of each global batch.
  int64_t bt = 0, n = 0, gbt = 0, mine = 0;
  const char *unit = "tokens";

  loomrt_step_ctx_t ctx;
  loomrt_stream s = nullptr;
  // Streaming DiLoCo's async exchanges run on a thread of their own with a
  // step context of their own (streams, events, arena) and a duplicate of
  // the communicator, beside the inner steps that follow them, where the
  // transport allows two threads at once (loomrt_comm_concurrent); else
  // between two steps, as the other outer entries.
  loomrt_step_ctx_t side;
  loomrt_comm sideComm = nullptr;
  std::thread inflight;
  loomrt_status inflightSt = LOOMRT_OK;
  std::string inflightWhat;
  uint64_t sideSent = 0;

  // Parameters and state. The host side of each global (initialisation,
  // checkpoints): its own buffer in pinned memory (the CPU reads it
  // directly: a 5B model's offloaded state is 60 GB, which the host should
  // hold once), else a copy.
  std::vector<void *> G;
  std::vector<HostView> host;
  std::vector<std::unique_ptr<uint8_t[]>> hostCopies;
  std::optional<loomrt::CheckpointSet> ckpt;
  long firstStep = 0;

  std::FILE *log = nullptr;
  loomrt_trace trace = nullptr;

  // One device buffer per input of the step, filled from host staging (a
  // graph model's: gSets); a graph's feature table is read once into the
  // memory the compiler placed it in and given to every step as it is.
  size_t nIn = 0;
  std::vector<std::vector<uint8_t>> hIn;
  // A graph model's staging is pinned (its uploads are asynchronous and run
  // at the copy engine's rate: 2 MB of ids and weights a step at batch
  // 1024, 15-10), one set the step reads and one the sampler writes.
  std::vector<uint8_t *> gSets[2];
  std::vector<void *> dIn;
  std::vector<loomrt_mem_space> dSpace;
  // A pinned feature table shared by this host's ranks (one copy in host
  // memory however many GPUs read it).
  std::vector<std::unique_ptr<loomrt::SharedTable>> shared;
  std::vector<size_t> inBytes;
  std::optional<loomrt::Sampler> sampler;
  std::vector<std::vector<int64_t>> padded[2];
  bool warnedNonFinite = false;
  std::chrono::steady_clock::time_point start;
  // The sampler runs one step ahead on a thread of its own: last, so that
  // it is joined before what it writes goes.
  std::future<void> nextSample;
};

int TrainRun::loadData() {
  // Outputs named on the command line are checked before any work: an
  // unwritable trace found after training loses the run's trace.
  if (!f.trace.empty()) {
    std::string dir = loomrt::folderOf(f.trace);
    if (int e = loomrt::folderWriteError(dir, "trace"))
      return die("cannot write the trace '" + f.trace + "': folder '" + dir + "': " +
                 std::strerror(e));
  }
  arrays = p->task == LOOMRT_TASK_ARRAYS;
  graphTask = p->task == LOOMRT_TASK_GRAPH;
  data.resize(arrays ? p->num_inputs : 0);
  if (graphTask && (p->num_fanouts < 1 || !p->fanouts))
    return die("this graph program has no fan-outs; compile it again with loomc");
  if (graphTask && !loomrt::loadGraph(f.graph, *p, graph, err))
    return die(err);
  if (graphTask && !f.dumpSamples.empty())
    if (int e = loomrt::folderWriteError(f.dumpSamples, "samples"))
      return die("cannot write samples to '" + f.dumpSamples + "': " + std::strerror(e));
  if (!arrays && !graphTask &&
      !loomrt::loadTokens(f.data, p->vocab, p->batch * dataReplicas(p),
                          p->seq, tokens,
                          err))
    return die(err);
  for (size_t i = 0; i < data.size(); ++i) {
    for (auto &[name, file] : f.inputs)
      if (name == p->inputs[i].name && !loomrt::loadNpy(file, p->inputs[i], data[i], err))
        return die(err);
    if (data[i].rows != data[0].rows)
      return die("inputs '" + std::string(p->inputs[0].name) + "' and '" + p->inputs[i].name +
                 "' have " + std::to_string(data[0].rows) + " and " +
                 std::to_string(data[i].rows) + " rows; every input needs one row per sample");
  }
  return 0;
}

/// Data parallelism: this rank's place in the world the step was compiled
/// for. The device is the rank's local GPU (LOCAL_RANK); CPU ranks share
/// the host.
int TrainRun::joinWorld() {
  if (f.commTimeout > 0)
    setenv("LOOMRT_COMM_TIMEOUT", std::to_string(f.commTimeout).c_str(), 1);
  world = p->world < 1 ? 1 : p->world;
  int ordinal = p->backend == LOOMRT_BACKEND_CPU ? 0 : loomrt_local_rank();
  TRY(loomrt_device_open(p->backend, ordinal, &dev), "opening the device");
  // Before the communicator's buffers and anything else: they count too.
  if (int rc = capDeviceMemory())
    return rc;
  TRY(loomrt_comm_init_from_env(dev, &comm), "joining the ranks");
  // Whether the ranks that remain may go on when one is lost: only where
  // every rank holds the whole state (the compiler says so).
  TRY(loomrt_comm_set_elastic(comm, p->elastic), "joining the ranks");
  SlowLink link = slowLink();
  if (link.invalid)
    return die(std::string("LOOMRT_SLOW_LINK='") + std::getenv("LOOMRT_SLOW_LINK") +
               "' is not RANKS:GBPS with 1 <= RANKS <= 1048576 and 1e-6 <= GBPS <= 1e4 "
               "(e.g. 2:12.5)");
  if (link.rate > 0 && loomrt_comm_size(comm) > link.ranksPerNode) {
    TRY(loomrt_comm_shape(comm, link.rate), "LOOMRT_SLOW_LINK");
    if (loomrt_comm_rank(comm) == 0)
      std::fprintf(stderr, "loomrt: nodes of %lld ranks joined by an emulated %.3g GB/s link "
                           "(LOOMRT_SLOW_LINK): collectives spanning nodes are held to it\n",
                   (long long)link.ranksPerNode, link.rate / 1e9);
  }
  rank = loomrt_comm_rank(comm);
  int ranks = loomrt_comm_size(comm);
  if (ranks != world)
    return die(world == 1
                   ? "this binary trains on one rank but was started on " +
                         std::to_string(ranks) +
                         "; compile it with loomc --topology (e.g. --topology gpu=" +
                         std::to_string(ranks) + ") to train data-parallel"
                   : "this binary was compiled for " + std::to_string(world) +
                         " data-parallel ranks (loomc --topology) but was started on " +
                         std::to_string(ranks) + ": start " + std::to_string(world) +
                         " processes, on CPUs with `mpirun -np " + std::to_string(world) + " " +
                         f.argv0 + " ...` (as root add --allow-run-as-root), on GPUs one per "
                         "GPU with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT "
                         "set (torchrun-style), or by `torchrun --nproc_per_node=" +
                         std::to_string(world) + " --no_python " + f.argv0 +
                         " ...` or `srun -n " + std::to_string(world) + " " + f.argv0 +
                         " ...` with MASTER_ADDR and MASTER_PORT exported (docs/data-parallel.md)");
  // A binary of several programs: a pipeline's stages (the outermost
  // level: rank r runs stage r / (world / P); every stage reports the
  // step's loss) or expert parallelism's ranks (the innermost level: rank r
  // runs the program holding the experts of place r mod N).
  if (p->pipeline_parallel > 1 || p->expert_parallel > 1) {
    const bool pipe = p->pipeline_parallel > 1;
    const int programs = pipe ? p->pipeline_parallel : p->expert_parallel;
    const char *what = pipe ? "pipeline" : "expert-parallel";
    if (!p->stage_programs || world % programs != 0)
      return die(std::string("this ") + what + " binary has no per-rank programs, or its " +
                 std::to_string(programs) + (pipe ? " stages" : "-rank groups") +
                 " do not divide its world of " + std::to_string(world) +
                 "; compile it again with loomc");
    const loomrt_program *mine =
        p->stage_programs[pipe ? rank / (world / programs) : rank % programs];
    if (!mine || mine->abi != LOOMRT_TRAIN_ABI || mine->world != p->world ||
        mine->batch != p->batch || mine->seq != p->seq || mine->task != p->task)
      return die(std::string("the ") + what + " programs of this binary disagree on their "
                 "world or data; compile it again with loomc");
    p = mine;
  }
  // Only rank 0 talks; every rank reports errors.
  lead = rank == 0;
  if (!lead && !std::freopen("/dev/null", "w", stdout))
    return die("cannot silence the output of rank " + std::to_string(rank));

  // Rank r trains on rows [r*batch, (r+1)*batch) of each global batch;
  // with tensor parallelism the T ranks of a group read the same rows, and
  // so do the stages of a pipeline (loomrt::dataRank).
  const int tp = std::max(p->tensor_parallel, 1);
  if (world % tp != 0)
    return die("this binary's tensor-parallel groups of " + std::to_string(tp) +
               " ranks do not divide its world of " + std::to_string(world));
  bt = arrays || graphTask ? p->batch : p->batch * p->seq;
  n = graphTask ? int64_t(graph.train.size()) : arrays ? data[0].rows : int64_t(tokens.size());
  gbt = bt * dataReplicas(p);
  mine = bt * dataRank(p, rank);
  unit = graphTask ? "seeds" : arrays ? "samples" : "tokens";
  return 0;
}

/// --device-memory (or loomc's): a card larger than the cap gets the rest
/// allocated and held for the whole run (the ballast), so the CUDA context,
/// the communicator's buffers, cuBLAS's workspaces, the arena and every
/// kernel's scratch share the cap as they would share a smaller card, and
/// going over it fails as it would there. Then the plan's predicted peak is
/// checked against what is left.
int TrainRun::capDeviceMemory() {
  double capGiB = f.deviceMemory >= 0 ? f.deviceMemory
                                      : double(p->device_memory_bytes) / double(1ull << 30);
  if (capGiB <= 0)
    return 0;
  if (p->backend == LOOMRT_BACKEND_CPU)
    return die("--device-memory caps a GPU's memory; this binary runs on the CPU");
  constexpr double GiB = double(1ull << 30);
  size_t freeBytes = 0, total = 0;
  TRY(loomrt_device_memory(dev, &freeBytes, &total), "--device-memory: reading the card's memory");
  double cap = capGiB * GiB;
  // What the context and other processes already hold counts against the
  // cap: the ballast is what is free beyond the cap's share of the card.
  double used = double(total) - double(freeBytes);
  double ballast = double(total) - cap > used ? double(total) - cap : 0;
  ballast = ballast > double(freeBytes) ? double(freeBytes) : ballast;
  if (ballast < double(64ull << 20)) {
    std::fprintf(stderr, "loomrt: --device-memory=%g GiB: the card has %.1f GiB, nothing to "
                         "hold back\n", capGiB, double(total) / GiB);
  } else {
    TRY(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, size_t(ballast), &ballastPtr),
        "--device-memory: holding back the card's memory beyond the cap");
    if (loomrt_local_rank() == 0)
      std::fprintf(stderr, "loomrt: device memory capped at %g GiB (--device-memory): %.1f of "
                           "the card's %.1f GiB held back\n",
                   capGiB, ballast / GiB, double(total) / GiB);
  }
  TRY(loomrt_device_memory(dev, &freeBytes, &total), "--device-memory: reading the card's memory");
  ballastBytes = size_t(ballast);
  // (Before the rank knows its stage: a pipeline's ranks all check its
  // largest stage, so they refuse together.)
  int64_t predicted = p->predicted_device_bytes;
  const int programs = std::max(p->pipeline_parallel, p->expert_parallel);
  if (programs > 1 && p->stage_programs)
    for (int s = 0; s < programs; ++s)
      if (p->stage_programs[s])
        predicted = std::max(predicted, p->stage_programs[s]->predicted_device_bytes);
  if (predicted > 0 && double(predicted) > double(freeBytes))
    return die("--device-memory=" + fmt(capGiB) + ": the plan needs " +
               fmt(std::round(double(predicted) / GiB * 10) / 10) +
               " GiB of device memory (loomc's prediction) and the cap leaves " +
               fmt(std::round(double(freeBytes) / GiB * 10) / 10) +
               " GiB free; compile for the cap (loomc --device-memory) or raise it");
  return 0;
}

/// What the card reports in use, less the ballast (-1 on the CPU).
double TrainRun::cardUsedMiB() const {
  size_t freeBytes = 0, total = 0;
  if (p->backend == LOOMRT_BACKEND_CPU || loomrt_device_memory(dev, &freeBytes, &total))
    return -1;
  return (double(total) - double(freeBytes) - double(ballastBytes)) / double(1 << 20);
}

/// The step's context (streams, events, arena) and, for DiLoCo's async
/// exchanges, the side context they run on.
int TrainRun::openContexts() {
  ctx.lrOverride = float(f.lr);
  // Host work runs on the CPU backend; on a CPU target that is this device.
  if (p->backend != LOOMRT_BACKEND_CPU)
    TRY(loomrt_device_open(LOOMRT_BACKEND_CPU, 0, &ctx.hostDev), "opening the host device");
  TRY(ctx.open(dev, comm), "creating the step's streams");
  s = ctx.stream;
  bool anyAsync = false;
  for (size_t k = 0; k < p->num_outer; ++k)
    anyAsync = anyAsync || p->outer[k].async;
  if (anyAsync && loomrt_comm_concurrent(comm)) {
    TRY(loomrt_comm_dup(comm, &sideComm), "DiLoCo: a second communicator for the exchanges");
    side.lrOverride = ctx.lrOverride;
    side.hostDev = ctx.hostDev;
    TRY(side.open(dev, sideComm), "DiLoCo: the exchanges' streams");
  } else if (anyAsync) {
    std::printf("DiLoCo: the outer exchanges run between inner steps (this transport cannot "
                "run two collectives at once: NCCL, or MPI without MPI_THREAD_MULTIPLE)\n");
  }
  TRY(loomrt_event_create(dev, &ctx.phaseStart), "creating an event");
  TRY(loomrt_event_create(dev, &ctx.backwardDone), "creating an event");
  return 0;
}

/// Waits for the exchange in flight; its bytes count from now.
int TrainRun::joinSide() {
  if (!inflight.joinable())
    return 0;
  inflight.join();
  if (inflightSt != LOOMRT_OK)
    return die(inflightWhat);
  return 0;
}

/// The gradients' global norm the step computed (loomc --clip-grad:
/// @optimizer.grad_norm), or -1.
double TrainRun::gradNorm() {
  for (size_t i = 0; i < p->num_globals; ++i)
    if (std::strcmp(p->globals[i].name, "optimizer.grad_norm") == 0 &&
        p->globals[i].dtype == LOOMRT_F32) {
      float v = -1;
      if (loomrt_memcpy_async(s, &v, G[i], sizeof v) != LOOMRT_OK ||
          loomrt_stream_synchronize(s) != LOOMRT_OK)
        return -1;
      return v;
    }
  return -1;
}

std::vector<loomrt_tensor_ref> TrainRun::refs() const {
  std::vector<loomrt_tensor_ref> r;
  for (size_t i = 0; i < p->num_globals; ++i) {
    const loomrt_global_desc &g = p->globals[i];
    if (g.mirror_of > 0)
      continue; // a working copy: its master's values (copyToWorkingCopies)
    loomrt_tensor_ref t{g.name, g.dtype, g.rank, {}, host[i].data()};
    for (int d = 0; d < g.rank; ++d)
      t.shape[d] = g.shape[d];
    r.push_back(t);
  }
  return r;
}

/// Parameters and state: allocated where the compiler placed them,
/// initialised in declaration order from --seed or restored from the
/// checkpoint, and uploaded; then the log and the trace.
int TrainRun::setupGlobals() {
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  G.assign(p->num_globals, nullptr);
  host.assign(p->num_globals, HostView{});
  hostCopies.clear();
  hostCopies.resize(p->num_globals);
  // Pinning tens of GiB takes the host a while (the kernel zeroes and locks
  // every page): say so before it starts.
  size_t pinnedBytes = 0;
  for (size_t i = 0; i < p->num_globals; ++i)
    if (p->globals[i].space == LOOMRT_MEM_PINNED)
      pinnedBytes += numel(p->globals[i]) * dtypeBytes(p->globals[i].dtype);
  if (pinnedBytes >= (size_t(4) << 30)) {
    std::printf("loomrt: pinning %.1f GiB of host memory for the offloaded parameters and "
                "optimizer state\n",
                double(pinnedBytes) / double(1 << 30));
    std::fflush(stdout);
  }
  Clock::time_point t0 = Clock::now();
  // What starts as zeros: every host copy (fp32 ones are drawn over, but a
  // ZeRO-3 bucket's padding stays zero) and pinned integer state.
  std::vector<std::pair<uint8_t *, size_t>> zeroed;
  for (size_t i = 0; i < p->num_globals; ++i) {
    const loomrt_global_desc &g = p->globals[i];
    size_t bytes = numel(g) * dtypeBytes(g.dtype);
    TRY(loomrt_alloc(dev, g.space, bytes ? bytes : 8, &G[i]), std::string("allocating ") + g.name);
    if (g.space == LOOMRT_MEM_PINNED) {
      host[i] = {static_cast<uint8_t *>(G[i]), bytes};
      if (g.dtype != LOOMRT_F32) // fp32 globals are all drawn below
        zeroed.push_back({host[i].data(), bytes});
    } else {
      hostCopies[i].reset(new (std::nothrow) uint8_t[std::max<size_t>(bytes, 1)]);
      if (!hostCopies[i])
        return die("allocating the host copy of " + std::string(g.name) + " (" +
                   std::to_string(bytes) + " bytes): out of host memory");
      host[i] = {hostCopies[i].get(), bytes};
      zeroed.push_back({host[i].data(), bytes});
    }
  }
  // On every core: a 7B model's host copies are ~70 GB, whose first touches
  // on one thread took most of a minute.
  zeroInParallel(zeroed);
  // Each rank saves its own part (ZeRO partitions state); a manifest
  // commits one step for all of them (driver/checkpoint_set.h).
  Clock::time_point t1 = Clock::now();
  ckpt.emplace(f.ckptDir, p->model, rank, world, p->zero_stage, dev, s, comm);
  ckpt->setLayout(loomrt::checkpointLayout(p));
  ckpt->setProgram(p);
  if (!f.ckptDir.empty())
    TRY(ckpt->open(!f.resume), "checkpoints");
  // The data offset (step * global batch tokens) must stay an int64.
  long maxStep = long(std::numeric_limits<int64_t>::max() / gbt) - f.steps;
  if (f.resume) {
    TRY(ckpt->resume(refs(), maxStep, firstStep), "resuming");
    if (int rc = copyToWorkingCopies(p, host))
      return rc;
    std::printf("resumed from %s at step %ld\n", ckpt->partPath(firstStep, rank).c_str(),
                firstStep);
  } else if (int rc = initialiseGlobals(p, f, rank, host)) {
    return rc;
  }
  Clock::time_point t2 = Clock::now();
  if (int rc = uploadGlobals())
    return rc;
  releaseHostCopies();
  Clock::time_point t3 = Clock::now();
  // Where a slow start went (a 7B offload run's took a minute and more).
  if (seconds(t0, t3) >= 5)
    std::printf("loomrt: parameters and state ready in %.1f s: allocating %.1f s, %s %.1f s "
                "(%d threads), uploading %.1f s\n",
                seconds(t0, t3), seconds(t0, t1), f.resume ? "resuming" : "initialising",
                seconds(t1, t2), omp_get_max_threads(), seconds(t2, t3));

  if (lead && !f.logJson.empty()) {
    // A second run's records after a first run's would read as one run:
    // an existing log is added to only when asked (or by a resumed run,
    // which continues the steps it has).
    struct stat st {};
    if (!f.logAppend && !f.resume && ::lstat(f.logJson.c_str(), &st) == 0 &&
        S_ISREG(st.st_mode) && st.st_size > 0)
      return die("--log-json file '" + f.logJson + "' exists and is not empty: give "
                 "--log-append to add this run's steps to it, or another file");
    // Appended to, never through a planted symbolic link, never a FIFO.
    std::string why;
    if (!(log = loomrt::fopenForAppend(f.logJson, "--log-json file", why)))
      return die(why);
  }
  if (lead && !f.trace.empty())
    TRY(loomrt_trace_create(s, &trace), "starting the trace");
  return 0;
}

/// The host copies to the device. From pageable memory a 7B run's ~70 GB
/// crossed at 6.4 GB/s on an H200 host (55 GB/s pinned: bench/RESULTS.md),
/// so tens of GiB go through two pinned chunks: one filled on every core
/// while the other crosses.
int TrainRun::uploadGlobals() {
  size_t pageable = 0;
  for (size_t i = 0; i < p->num_globals; ++i)
    if (host[i].data() != G[i])
      pageable += host[i].size();
  constexpr size_t kChunk = size_t(64) << 20;
  if (p->backend == LOOMRT_BACKEND_CPU || pageable < 4 * kChunk) {
    for (size_t i = 0; i < p->num_globals; ++i)
      if (host[i].data() != G[i])
        TRY(loomrt_memcpy_async(s, G[i], host[i].data(), host[i].size()), "upload");
    TRY(loomrt_stream_synchronize(s), "upload");
    return 0;
  }
  struct Staging {
    loomrt_device dev;
    void *buf[2] = {nullptr, nullptr};
    loomrt_event done[2] = {nullptr, nullptr};
    bool used[2] = {false, false};
    ~Staging() {
      for (int k = 0; k < 2; ++k) {
        if (done[k])
          loomrt_event_destroy(done[k]);
        if (buf[k])
          loomrt_free(dev, LOOMRT_MEM_PINNED, buf[k]);
      }
    }
  } st{dev};
  for (int k = 0; k < 2; ++k) {
    TRY(loomrt_alloc(dev, LOOMRT_MEM_PINNED, kChunk, &st.buf[k]), "the upload's staging");
    TRY(loomrt_event_create(dev, &st.done[k]), "the upload's staging");
  }
  int k = 0;
  for (size_t i = 0; i < p->num_globals; ++i) {
    if (host[i].data() == G[i])
      continue;
    for (size_t off = 0; off < host[i].size(); off += kChunk, k ^= 1) {
      size_t n = std::min(kChunk, host[i].size() - off);
      if (st.used[k]) // its previous chunk has crossed
        TRY(loomrt_event_synchronize(st.done[k]), "upload");
      const uint8_t *from = host[i].data() + off;
      uint8_t *to = static_cast<uint8_t *>(st.buf[k]);
#pragma omp parallel for schedule(static)
      for (size_t b = 0; b < n; b += (size_t(1) << 20))
        std::memcpy(to + b, from + b, std::min(size_t(1) << 20, n - b));
      TRY(loomrt_memcpy_async(s, static_cast<uint8_t *>(G[i]) + off, to, n), "upload");
      TRY(loomrt_event_record(st.done[k], s), "upload");
      st.used[k] = true;
    }
  }
  TRY(loomrt_stream_synchronize(s), "upload");
  return 0;
}

/// Host copies of device-resident state are needed only to start (above)
/// and while a checkpoint is written: between, their memory goes back to
/// the host (a 7B offload run's are 14-70 GB of a 128 GiB host, and the CPU
/// Adam beside them ran 25% slower when the host was short).
void TrainRun::releaseHostCopies() {
  for (size_t i = 0; i < hostCopies.size(); ++i)
    if (hostCopies[i]) {
      hostCopies[i].reset();
      host[i].ptr = nullptr;
    }
}

int TrainRun::saveCheckpoint(long stepDone) {
  if (int rc = joinSide())
    return rc;
  for (size_t i = 0; i < p->num_globals; ++i) {
    if (p->globals[i].space == LOOMRT_MEM_PINNED)
      continue; // the global is its own host view
    if (!host[i].data()) {
      hostCopies[i].reset(new (std::nothrow) uint8_t[std::max<size_t>(host[i].size(), 1)]);
      if (!hostCopies[i])
        return die("saving the checkpoint: no host memory for the copy of " +
                   std::string(p->globals[i].name));
      host[i].ptr = hostCopies[i].get();
    }
    TRY(loomrt_memcpy_async(s, host[i].data(), G[i], host[i].size()), "download");
  }
  TRY(loomrt_stream_synchronize(s), "download");
  TRY(ckpt->save(stepDone, refs()), "saving the checkpoint");
  releaseHostCopies();
  return 0;
}

/// The step's input buffers and their host staging; a graph model's
/// feature table, read once; the sampler.
int TrainRun::setupInputs() {
  nIn = p->num_inputs;
  hIn.assign(nIn, {});
  dIn.assign(nIn, nullptr);
  dSpace.assign(nIn, LOOMRT_MEM_DEVICE);
  shared.resize(nIn);
  inBytes.assign(nIn, 0);
  for (size_t i = 0; i < nIn; ++i) {
    const loomrt_input_desc &in = p->inputs[i];
    if (in.role == LOOMRT_INPUT_NODE_TABLE && in.space == LOOMRT_MEM_PINNED &&
        loomrt::localRanks() > 1) {
      int local = loomrt_local_rank(), locals = loomrt::localRanks();
      std::printf("%s %s/features.npy (%.3g GB) in host memory shared by the %d ranks of "
                  "this host\n",
                  local == 0 ? "reading" : "mapping", f.graph.c_str(),
                  double(in.shape[0]) * double(in.shape[1]) * 4 / 1e9, locals);
      std::fflush(stdout);
      shared[i] = std::make_unique<loomrt::SharedTable>();
      // The object's name goes from local rank 0 to the others through the
      // job's own collectives (device buffers: NCCL reads device memory).
      loomrt::AllGather gather{loomrt_comm_size(comm), [&](const void *mine, size_t n,
                                                          void *all) {
        size_t total = n * size_t(loomrt_comm_size(comm));
        void *d = nullptr;
        if (loomrt_alloc(dev, LOOMRT_MEM_DEVICE, total + n, &d) != LOOMRT_OK)
          return false;
        char *dm = static_cast<char *>(d) + total;
        bool ok = loomrt_memcpy_async(s, dm, mine, n) == LOOMRT_OK &&
                  loomrt_all_gather_bytes(comm, s, dm, d, n) == LOOMRT_OK &&
                  loomrt_memcpy_async(s, all, d, total) == LOOMRT_OK &&
                  loomrt_stream_synchronize(s) == LOOMRT_OK;
        loomrt_free(dev, LOOMRT_MEM_DEVICE, d);
        return ok;
      }};
      if (!loomrt::loadSharedFeatures(f.graph, in, local, gather, *shared[i], err))
        return die(err);
      TRY(loomrt_host_register(dev, shared[i]->data, shared[i]->bytes),
          "pinning the shared feature table");
      dIn[i] = shared[i]->data;
      continue;
    }
    if (in.role == LOOMRT_INPUT_NODE_TABLE) {
      dSpace[i] = in.space;
      std::printf("reading %s/features.npy (%.3g GB) into %s memory\n", f.graph.c_str(),
                  double(in.shape[0]) * double(in.shape[1]) * 4 / 1e9,
                  in.space == LOOMRT_MEM_PINNED ? "pinned host" : "device");
      std::fflush(stdout);
      // Pinned (and the CPU backend's) tables are read in place; a device
      // table through a host copy.
      bool direct = in.space == LOOMRT_MEM_PINNED || p->backend == LOOMRT_BACKEND_CPU;
      std::vector<uint8_t> staging;
      size_t tableBytes = 0;
      loomrt_status st = LOOMRT_OK;
      bool ok = loomrt::loadFeatures(
          f.graph, in,
          [&](size_t bytes) -> void * {
            tableBytes = bytes;
            st = loomrt_alloc(dev, in.space, std::max<size_t>(bytes, 8), &dIn[i]);
            if (st != LOOMRT_OK)
              return nullptr;
            if (direct)
              return dIn[i];
            staging.resize(bytes);
            return staging.data();
          },
          err);
      if (st != LOOMRT_OK)
        return die("allocating the feature table: " + std::string(loomrt_last_error()));
      if (!ok)
        return die(err);
      if (!direct) {
        TRY(loomrt_memcpy_async(s, dIn[i], staging.data(), tableBytes), "uploading the features");
        TRY(loomrt_stream_synchronize(s), "uploading the features");
      }
      continue;
    }
    size_t bytes = size_t(bt) * 8;
    if (arrays)
      bytes = size_t(p->batch) * data[i].rowBytes;
    if (graphTask) {
      bytes = in.dtype == LOOMRT_I64 ? 8 : 4;
      for (int d = 0; d < in.rank; ++d)
        bytes *= size_t(in.shape[d]);
      for (auto &g : gSets) {
        void *pinned = nullptr;
        TRY(loomrt_alloc(dev, LOOMRT_MEM_PINNED, std::max<size_t>(bytes, 8), &pinned),
            std::string("allocating the staging of input ") + in.name);
        g.resize(nIn, nullptr);
        g[i] = static_cast<uint8_t *>(pinned);
      }
    } else {
      hIn[i].resize(bytes);
    }
    inBytes[i] = bytes;
    // Pinned: node ids the CPU gathers features by (host-gather placement).
    dSpace[i] = in.space;
    TRY(loomrt_alloc(dev, in.space, std::max<size_t>(bytes, 8), &dIn[i]),
        std::string("allocating input ") + in.name);
  }
  if (graphTask)
    sampler.emplace(*p, graph, f.seed);
  return 0;
}

/// --sample random: a counter-based draw (splitmix64 of seed, step and the
/// row's place in the world's batch), so every rank and a resumed run agree
/// without state.
int64_t TrainRun::draw(long step, int64_t row, uint64_t range) const {
  uint64_t z = f.seed * 0x9E3779B97F4A7C15ull + uint64_t(step) * 0xBF58476D1CE4E5B9ull +
               uint64_t(row) * 0x94D049BB133111EBull + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return int64_t(z % range);
}

/// This rank's rows of step `step` into the host staging (a graph model:
/// the sample drawn one step ahead, and the next one started; the time
/// waited for it in `dataWaitMs`).
int TrainRun::fillBatch(long step, double &dataWaitMs) {
  long last = firstStep + f.steps;
  bool dump = !f.dumpSamples.empty();
  auto sampleInto = [this, dump](long at) {
    sampler->fill(at, rank, world, gSets[at & 1], dump ? &padded[at & 1] : nullptr);
  };
  if (graphTask) {
    auto w0 = std::chrono::steady_clock::now();
    if (nextSample.valid())
      nextSample.get();
    else
      sampleInto(step);
    dataWaitMs =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count();
    if (dump)
      for (size_t d = 0; d < padded[step & 1].size(); ++d) {
        std::string name = f.dumpSamples + "/" +
                           (world > 1 ? "rank" + std::to_string(rank) + "_" : "") + "step" +
                           std::to_string(step) + "_nodes" + std::to_string(d) + ".npy";
        if (!loomrt::writeNpyI64(name, padded[step & 1][d], err))
          return die(err);
      }
    if (step + 1 < last)
      nextSample = std::async(std::launch::async, sampleInto, step + 1);
  } else if (arrays) {
    for (int64_t r = 0; r < bt; ++r) {
      int64_t row = f.sample == "random" ? draw(step, mine + r, uint64_t(n))
                                         : (int64_t(step) * gbt + mine + r) % n;
      for (size_t i = 0; i < nIn; ++i)
        std::memcpy(hIn[i].data() + size_t(r) * data[i].rowBytes,
                    data[i].bytes.data() + size_t(row) * data[i].rowBytes, data[i].rowBytes);
    }
  } else {
    auto *hx = reinterpret_cast<int64_t *>(hIn[0].data());
    auto *hy = reinterpret_cast<int64_t *>(hIn[1].data());
    if (f.sample == "random") {
      // Each of this rank's rows at an offset of its own.
      int64_t seq = p->seq, rows = bt / seq;
      for (int64_t r = 0; r < rows; ++r) {
        int64_t off = draw(step, mine / seq + r, uint64_t(n - seq - 1));
        for (int64_t t = 0; t < seq; ++t) {
          hx[r * seq + t] = tokens[size_t(off + t)];
          hy[r * seq + t] = tokens[size_t(off + t + 1)];
        }
      }
    } else {
      int64_t off = (int64_t(step) * gbt) % (n - gbt - 1) + mine;
      for (int64_t i = 0; i < bt; ++i) {
        hx[i] = tokens[size_t(off + i)];
        hy[i] = tokens[size_t(off + i + 1)];
      }
    }
  }
  return 0;
}

/// Streaming DiLoCo's outer entries due after inner step `step`: run in
/// order, an async exchange on the side context's thread where it has one.
/// `sideBytes`: what the exchanges joined here sent.
int TrainRun::runOuterSteps(long step, uint64_t &sideBytes) {
  for (size_t k = 0; k < p->num_outer; ++k) {
    const loomrt_outer_desc &o = p->outer[k];
    if (step + 1 < o.offset || (step + 1 - o.offset) % o.every != 0)
      continue;
    if (!o.async || !sideComm) {
      if (!o.async) {
        // What it reads (an exchange's result) must be complete.
        if (int rc = joinSide())
          return rc;
        uint64_t now = sideComm ? side.sent() : 0;
        sideBytes += now - sideSent;
        sideSent = now;
      }
      TRY(o.fn(&ctx, G.data()), std::string("DiLoCo outer step ") + o.name);
      continue;
    }
    if (int rc = joinSide())
      return rc;
    // The exchange reads what the compute stream wrote (the snapshot).
    TRY(loomrt_stream_synchronize(s), "DiLoCo: the snapshot before an exchange");
    side.reset(std::chrono::steady_clock::now());
    side.seed = f.seed;
    side.step = step;
    inflightWhat = std::string("DiLoCo exchange ") + o.name;
    inflight = std::thread([this, fn = o.fn] {
      loomrt_status st = loomrt_device_bind(side.dev);
      if (st == LOOMRT_OK)
        st = fn(&side, G.data());
      if (st == LOOMRT_OK)
        st = loomrt_stream_synchronize(side.stream);
      if (st == LOOMRT_OK)
        st = loomrt_stream_synchronize(side.commStream);
      if (st != LOOMRT_OK)
        inflightWhat += std::string(": ") + loomrt_last_error();
      inflightSt = st;
    });
  }
  return 0;
}

/// The step's line on stdout, the divergence warning, and the --log-json
/// record.
int TrainRun::report(long step, float loss, double ms, double dataWaitMs, uint64_t sentBefore,
                     uint64_t sideBytes, const std::map<uint64_t, uint64_t> &groupBefore) {
  long last = firstStep + f.steps;
  // The backward's share, timed on the compute stream; the update phase is
  // the rest of the step.
  float backwardMs = -1;
  if (ctx.backwardMarked)
    TRY(loomrt_event_elapsed_ms(ctx.phaseStart, ctx.backwardDone, &backwardMs), "phase timing");
  double tps = double(gbt) / (ms * 1e-3); // the whole world's tokens (or samples)
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double eta = elapsed / double(step - firstStep + 1) * double(last - step - 1);
  std::printf("step %5ld/%ld  loss %.5f  %8.1f ms  %9.0f %s/s  eta %4.0fs\n", step + 1, last, loss,
              ms, tps, unit, eta);
  // Offloaded optimizers: the CPU's Adam rate over this run's steps 2 to
  // --replan-after (default 5; the first pays for first touches of the
  // pinned state), against the rate the plan was made with (loomc's
  // --hardware): the host the binary runs on is not always the one the
  // description measured (issue 44: two machines of one kind differed by
  // 10%). Its time is ctx.hostTotalMs, the driver's clock around each CPU
  // update.
  double cpuAdamRate = -1;
  long done = step - firstStep + 1;
  const double planned = p->planned_cpu_adam_params_per_s;
  const bool measures = p->cpu_update_params > 0 && planned > 0;
  // Their median: on an H200 host with 70-85 GB of pinned state, steps
  // 2-4 of one run took 1.70-1.97 s where steps 5-8 took 1.50-1.68 (a
  // decision after step 3 predicted the run 7-12% slow), and in another
  // run one of steps 2-5 was 8% faster than every later step (the fastest
  // of them predicted three of six rows 8-12% fast); the median of steps
  // 2-5 predicted five of those six rows within 4%.
  if (measures && done >= 2 && done <= f.replanAfter && ctx.hostTotalMs > 0)
    hostAdamMs.push_back(ctx.hostTotalMs);
  if (measures && done == f.replanAfter && !hostAdamMs.empty()) {
    std::sort(hostAdamMs.begin(), hostAdamMs.end());
    size_t k = hostAdamMs.size();
    double ms = k % 2 ? hostAdamMs[k / 2] : (hostAdamMs[k / 2 - 1] + hostAdamMs[k / 2]) / 2;
    cpuAdamRate = measuredAdamRate = double(p->cpu_update_params) / (ms / 1000);
    double ratio = cpuAdamRate / planned;
    std::printf("loomrt: the CPU's Adam updates %.3g G parameters a step at %.3g G/s; the plan "
                "assumed %.3g G/s (%.2fx)",
                double(p->cpu_update_params) / 1e9, cpuAdamRate / 1e9, planned / 1e9, ratio);
    if (ratio > 1.1 || ratio < 0.9)
      std::printf(": to plan for this host, compile again with loomc's --what-if=dram=%.2f (the "
                  "Adam rate follows the DRAM bandwidth) or a loom-calibrate file",
                  ratio);
    std::printf("\n");
  }
  std::fflush(stdout);
  if (lead && !std::isfinite(loss) && !warnedNonFinite) {
    std::fprintf(stderr,
                 "warning: the loss of step %ld is not finite: training "
                 "diverged (a lower --lr may help)\n",
                 step + 1);
    warnedNonFinite = true;
  }
  if (!log)
    return 0;
  // Bytes by group: the levels' indices (innermost 0) of each group smaller
  // than the world, e.g. {"0": ..., "0,1": ...}.
  std::string byGroup;
  for (auto &[mask, g] : ctx.groups) {
    std::string levels;
    for (int i = 0; i < 64; ++i)
      if (mask >> i & 1)
        levels += (levels.empty() ? "" : ",") + std::to_string(i);
    auto before = groupBefore.find(mask);
    byGroup += std::string(byGroup.empty() ? "" : ", ") + "\"" + levels + "\": " +
               std::to_string(loomrt_comm_bytes_sent(g, -1) -
                              (before == groupBefore.end() ? 0 : before->second));
  }
  logStep(log, step + 1, loss, ms, tps, unit, backwardMs, ctx,
          world > 1 ? (long long)(ctx.sent() - sentBefore + sideBytes) : -1, byGroup, dataWaitMs,
          double(ctx.reserved() + deviceGlobalBytes(p, host)) / (1 << 20), cardUsedMiB(),
          cpuAdamRate, planned, ctx.lastLr.load(), gradNorm(), metricsJson(p, G.data(), s));
  return 0;
}

/// At the decision points of --replan (after --replan-after steps, default
/// 5; continuous: every kReplanWindow steps after), the CPU Adam rate
/// (the median of steps 2 to --replan-after, the mean over the window, or
/// --replan-cpu-adam-rate) against the description's,
/// and the candidate predicted fastest at that factor (replan.h).
void TrainRun::decideReplan(long step) {
  long done = step - firstStep + 1;
  const long after = f.replanAfter;
  if (done > after)
    windowAdamMs += ctx.hostTotalMs;
  bool first = done == after,
       window = replanMode == 2 && done > after && (done - after) % kReplanWindow == 0;
  if (!first && !window)
    return;
  double rate = f.replanCpuAdamRate > 0 ? f.replanCpuAdamRate
                : first                 ? measuredAdamRate
                : p->cpu_update_params > 0 && windowAdamMs > 0
                    ? double(p->cpu_update_params) / (windowAdamMs / kReplanWindow / 1000)
                    : -1;
  windowAdamMs = 0;
  // The ranks decide together, at the slowest rank's rate: its CPU
  // updates pace every rank's step.
  if (world > 1) {
    int64_t lo = 0, hi = 0;
    if (ckpt->agree(int64_t(std::llround(rate)), lo, hi)) {
      std::printf("loomrt: replan: the ranks could not agree on a rate (%s): kept\n",
                  loomrt_last_error());
      return;
    }
    rate = double(lo);
  }
  if (rate <= 0 || rp->nominal_cpu_adam_params_per_s <= 0) {
    if (first)
      std::printf("loomrt: replan: this plan updates nothing on the CPU, so there is no CPU Adam "
                  "rate to measure (--replan-cpu-adam-rate gives one): kept\n");
    return;
  }
  double factor = rate / rp->nominal_cpu_adam_params_per_s;
  size_t to = chooseCandidate(*rp, factor, cand);
  std::vector<double> pred = predictedAt(*rp, factor);
  std::printf("loomrt: replan after step %ld: the CPU's Adam at %.3g G/s, %.2fx the description's; "
              "predicted step:",
              step + 1, rate / 1e9, factor);
  for (size_t c = 0; c < rp->num_candidates; ++c)
    std::printf("%s %.4g s (%s)%s", c ? "," : "", pred[c], rp->plans[c],
                c == to ? " *" : "");
  // Several ranks switch through a checkpoint that every rank reads: the
  // user's --checkpoint-dir (a folder of the binary's own is per node).
  bool canSwitch = world == 1 || !f.ckptDir.empty();
  std::printf("; %s\n", to == cand   ? "kept"
                        : canSwitch ? "continuing under the one marked *"
                                    : "kept: switching plans on several ranks needs a "
                                      "--checkpoint-dir every rank shares");
  if (to == cand || !canSwitch)
    return;
  switchTo = rp->candidates[to];
  switchCand = to;
  if (log) {
    std::fprintf(log, "%s\n", replanEvent(*rp, step + 1, rate, factor, cand, to).c_str());
    std::fflush(log);
  }
}

int TrainRun::train() {
  start = std::chrono::steady_clock::now();
  long last = firstStep + f.steps;
  for (long step = firstStep; step < last; ++step) {
    // The schedule is a function of the step number: a resumed run
    // continues it (given the same flags).
    ctx.lrScale = lrFactor(f, step);
    ctx.lastLr.store(-1.0f);
    double dataWaitMs = -1;
    if (int rc = fillBatch(step, dataWaitMs))
      return rc;
    auto t0 = std::chrono::steady_clock::now();
    // Device inputs are copied on the compute stream; pinned ones (read by
    // the CPU on the host stream, which does not wait for that copy) are
    // written here: the step before, which read them, has finished.
    for (size_t i = 0; i < nIn; ++i)
      if (p->inputs[i].role == LOOMRT_INPUT_NODE_TABLE)
        continue;
      else if (const uint8_t *src = graphTask ? gSets[step & 1][i] : hIn[i].data();
               dSpace[i] == LOOMRT_MEM_PINNED)
        std::memcpy(dIn[i], src, inBytes[i]);
      else
        TRY(loomrt_memcpy_async(s, dIn[i], src, inBytes[i]), p->inputs[i].name);
    int64_t span = 0;
    ctx.reset(t0); // the step's time (step_ms) counts from t0 too
    ctx.seed = f.seed;
    ctx.step = step;
    ctx.trace = trace;
    TRY(loomrt_event_record(ctx.phaseStart, s), "phase event");
    if (trace) {
      TRY(loomrt_trace_begin(trace, s, "compute", "train_step", &span), "trace");
      TRY(loomrt_trace_begin(trace, s, "compute", "forward_backward", &ctx.phaseSpan), "trace");
    }
    void *dLoss = nullptr;
    uint64_t sentBefore = ctx.sent();
    std::map<uint64_t, uint64_t> groupBefore;
    for (auto &[mask, g] : ctx.groups)
      groupBefore[mask] = loomrt_comm_bytes_sent(g, -1);
    bool frozen = p->train_step_frozen && step >= p->freeze_step;
    // 1-bit Adam's variance refresh: the warm-up's full-precision step.
    bool refresh = refreshStep(p, step, ctx.varianceStep, ctx.varianceSteps);
    if (frozen && step == p->freeze_step && p->enter_frozen)
      TRY(p->enter_frozen(&ctx, G.data()), "gathering the momentum for 1-bit Adam's frozen steps");
    if (step == 0 && p->outer_start)
      TRY(p->outer_start(&ctx, G.data()), "DiLoCo: the global copy of the parameters");
    TRY((frozen && !refresh ? p->train_step_frozen : p->train_step)(&ctx, G.data(), dIn.data(),
                                                                    &dLoss),
        refresh  ? "training step (1-bit Adam, a variance refresh)"
        : frozen ? "training step (1-bit Adam, after the freeze)"
                 : "training step");
    // Generated steps join their host tasks before returning; a hand-written
    // one may not.
    TRY(loomrt_step_host_join(&ctx), "the training step's host tasks");
    uint64_t sideBytes = 0;
    if (int rc = runOuterSteps(step, sideBytes))
      return rc;
    if (trace) {
      TRY(loomrt_trace_end(trace, s, ctx.phaseSpan), "trace");
      TRY(loomrt_trace_end(trace, s, span), "trace");
    }
    float loss;
    TRY(loomrt_memcpy_async(s, &loss, dLoss, 4), "loss");
    TRY(loomrt_stream_synchronize(s), "step");
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (int rc = report(step, loss, ms, dataWaitMs, sentBefore, sideBytes, groupBefore))
      return rc;
    if (rp && replanMode)
      decideReplan(step);
    bool saved = f.ckptEvery && ((step + 1 - firstStep) % f.ckptEvery == 0 || step + 1 == last);
    if (saved)
      if (int rc = saveCheckpoint(step + 1))
        return rc;
    ranSteps = step + 1 - firstStep;
    // A re-planning decision: the state saved, the run stops here and
    // loomrt_train_main resumes it under the chosen plan.
    if (switchTo && step + 1 < last) {
      if (!saved)
        if (int rc = saveCheckpoint(step + 1))
          return rc;
      break;
    }
    switchTo = nullptr; // the last step: nothing left to continue
  }
  if (int rc = joinSide())
    return rc;
  if (trace) {
    TRY(loomrt_trace_write(trace, f.trace.c_str()), "writing the trace");
    loomrt_trace_destroy(trace);
    trace = nullptr;
  }
  return 0;
}

/// What the run held, then everything released in the reverse order of
/// its making.
void TrainRun::finish() {
  if (log)
    std::fclose(log);
  log = nullptr;
  reportMemory(p, host, ctx, world);
  if (nextSample.valid())
    nextSample.get();
  for (size_t i = 0; i < nIn; ++i)
    if (shared[i])
      loomrt_host_unregister(dev, dIn[i]);
    else
      loomrt_free(dev, dSpace[i], dIn[i]);
  for (auto &g : gSets)
    for (uint8_t *b : g)
      if (b)
        loomrt_free(dev, LOOMRT_MEM_PINNED, b);
  auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < G.size(); ++i)
    loomrt_free(dev, p->globals[i].space, G[i]);
  double freeing = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (freeing >= 5)
    std::printf("loomrt: parameters and state released in %.1f s\n", freeing);
  if (ballastPtr)
    loomrt_free(dev, LOOMRT_MEM_DEVICE, ballastPtr);
  ctx.release();
  side.release();
  loomrt_comm_destroy(sideComm);
  loomrt_comm_destroy(comm);
  side.closeStreams();
  ctx.closeStreams();
  if (ctx.hostDev)
    loomrt_device_close(ctx.hostDev);
  loomrt_device_close(dev);
}

} // namespace

extern "C" int loomrt_train_main(int argc, char **argv, const loomrt_program *p) {
  // Before reading anything else of *p: its layout must be ours.
  if (p->abi != LOOMRT_TRAIN_ABI)
    return die("this binary was generated for another version of the runtime "
               "(libloomrt.so was rebuilt since); compile the model again with loomc");
  // A refresh runs the warm-up's step, whose ZeRO 1-2 momentum shards the
  // frozen steps (after @enter_frozen) no longer keep (loomc refuses it).
  if (p->variance_refresh < 0 || (p->variance_refresh > 0 && (!p->train_step_frozen ||
                                                               p->enter_frozen)))
    return die("the program's 1-bit Adam variance refresh needs ZeRO stage 0 and a frozen "
               "step (interval " + std::to_string(p->variance_refresh) + ")");
  for (size_t k = 0; k < p->num_outer; ++k)
    if (!p->outer || !p->outer[k].fn || p->outer[k].every < 1)
      return die("the program's DiLoCo outer step " + std::to_string(k) +
                 " has no function or a period below 1");
  // CPU binaries: OpenMP threads that spin after each kernel fight
  // OpenBLAS's threads for the cores (steps of 12 ms took 60-180 ms on the
  // 2-core CI machine). libgomp reads OMP_WAIT_POLICY only at start-up, so
  // set it and start again, unless the user chose a policy.
  if (p->backend == LOOMRT_BACKEND_CPU && !std::getenv("OMP_WAIT_POLICY") &&
      !std::getenv("LOOMRT_NO_REEXEC")) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    setenv("LOOMRT_NO_REEXEC", "1", 1);
    execv("/proc/self/exe", argv); // returns only on failure: carry on
  }
  Flags f;
  std::string err;
  if (!parse(argc, argv, p, f, err))
    return die(err);
  // Re-planning moves the run between the plans compiled in through a
  // checkpoint: the user's --checkpoint-dir, or a folder of its own.
  int mode = !p->replan ? 0 : f.replan >= 0 ? f.replan : p->replan->mode;
  std::string scratch;
  if (mode && p->world == 1 && f.ckptDir.empty()) {
    char dir[] = "/tmp/loomrt-replan-XXXXXX";
    if (!mkdtemp(dir))
      return die(std::string("--replan: cannot make a folder for the switch's checkpoint: ") +
                 std::strerror(errno));
    f.ckptDir = scratch = dir;
  }
  int rc = 0;
  const loomrt_program *cur = p;
  size_t cand = 0;
  Flags rf = f;
  while (rc == 0) {
    TrainRun run(cur, rf, mode ? p->replan : nullptr, cand, mode);
    for (int (TrainRun::*phase)() : {&TrainRun::loadData, &TrainRun::joinWorld,
                                     &TrainRun::openContexts, &TrainRun::setupGlobals,
                                     &TrainRun::setupInputs, &TrainRun::train})
      if ((rc = (run.*phase)()))
        break;
    if (rc)
      break;
    run.finish();
    if (!run.next())
      break;
    rf.resume = true;
    rf.steps -= run.stepsRun();
    cur = run.next();
    cand = run.nextCandidate();
    if (mode == 1)
      mode = 0; // once: decided
  }
  if (!scratch.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(scratch, ec);
  }
  return rc;
}

