//===- PlanSearch.cpp - loomc --plan=auto ----------------------------------===//
//
// The parallel plan chosen by the cost model (issue 49, first part): the
// plans the passes build on --topology's levels are enumerated (data,
// tensor and pipeline degrees, ZeRO stage, micro-batches and the pipeline's
// schedule, recompute), each is compiled as far as the step simulation
// needs by a loomc of its own (two at a time: loomc's flags are process
// globals, so one process is one pass-pipeline configuration), and its
// predicted step and device memory are read back (--prediction-json). The
// fastest that fits is compiled as the user asked, its flags recorded on
// the module (`loom.plan`). Flags the user gave are kept in every
// candidate. Pruning by bounds: more micro-batches (without a pipeline)
// and recompute only add work, so they are tried only where the plan
// without them does not fit; and a plan is not compiled where the products
// of a plan it only adds to (same layout, less ZeRO, fewer micro-batches,
// no recompute) already take longer, at their compute roof, than 1.1x the
// fastest plan that fits.
//
//===----------------------------------------------------------------------===//
#include "Planning.h"
#include "LoomcOptions.h"
#include "loom/CodecFidelity.h"
#include "loom/Support/Files.h"

#include "dialects/Loom/LoomDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <thread>
#include <tuple>

namespace loom {
namespace {

/// One plan: the flags it adds to the user's, and what loomc predicted.
struct Candidate {
  std::vector<std::string> flags;
  bool ok = false, fits = false;
  double step = 0, deviceBytes = 0, usableBytes = 0, params = 0, tokens = 0;
  /// A lower bound on the step of any plan that adds ZeRO, micro-batches
  /// or recompute to this one (its forward and backward's products at
  /// their compute roof, or its tensor-parallel collectives).
  double bound = 0;
  /// Its parameters and optimizer state on the device (the largest rank's).
  double persistentBytes = 0;
  /// The candidate this one adds to (-1: none), whose bound is its own.
  int base = -1;
  /// A plan that compresses (ZeRO++): its loss gap (CodecFidelity.h).
  std::optional<double> lossGap;
  std::string error, pruned;
  /// 6 x parameters x tokens/s over the GPUs' peak (0 without one).
  double mfu(double peakFlops, int64_t world) const {
    return peakFlops > 0 ? 6 * params * tokens / step / (peakFlops * double(world)) : 0;
  }
  std::string text() const {
    std::string s;
    for (const std::string &f : flags)
      s += (s.empty() ? "" : " ") + f;
    return s.empty() ? "(the flags given)" : s;
  }
};

/// `arg` names flag `name` (-name, --name, -name=V, --name=V): 1 when its
/// value is the next argument, 2 when inline, 0 when it is another flag.
int flagForm(llvm::StringRef arg, llvm::StringRef name) {
  if (!arg.consume_front("-"))
    return 0;
  arg.consume_front("-");
  if (arg == name)
    return 1;
  return arg.starts_with((name + "=").str()) ? 2 : 0;
}

/// The user's arguments without the flags named in `drop`.
std::vector<std::string> keptArgs(int argc, char **argv, llvm::ArrayRef<llvm::StringRef> drop) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    int form = 0;
    for (llvm::StringRef name : drop)
      if ((form = flagForm(argv[i], name)))
        break;
    if (form == 1)
      ++i; // its value too
    else if (form == 0)
      out.push_back(argv[i]);
  }
  return out;
}

/// Runs loomc with `args`, its output to `log`; returns the exit code.
int runLoomc(const std::string &exe, const std::vector<std::string> &args,
             const std::string &log, bool wait, llvm::sys::ProcessInfo *started) {
  std::vector<llvm::StringRef> argv = {exe};
  for (const std::string &a : args)
    argv.push_back(a);
  std::optional<llvm::StringRef> redirects[] = {llvm::StringRef(""), llvm::StringRef(log),
                                                llvm::StringRef(log)};
  std::string err;
  if (!wait) {
    *started = llvm::sys::ExecuteNoWait(exe, argv, std::nullopt,
                                        log.empty() ? llvm::ArrayRef<std::optional<llvm::StringRef>>{}
                                                    : redirects,
                                        0, &err);
    return started->Pid > 0 ? 0 : -1;
  }
  return llvm::sys::ExecuteAndWait(exe, argv, std::nullopt,
                                   log.empty() ? llvm::ArrayRef<std::optional<llvm::StringRef>>{}
                                               : redirects,
                                   0, 0, &err);
}

/// The integer `key` of the --model generator spec ("family:k=v,..."), or
/// `fallback` where the spec does not give it.
int64_t modelKey(const LoomcOptions &o, llvm::StringRef key, int64_t fallback) {
  for (llvm::StringRef kv : llvm::split(llvm::StringRef(o.model).split(':').second, ',')) {
    auto [k, v] = kv.split('=');
    if (k.trim() == key)
      (void)v.trim().getAsInteger(10, fallback);
  }
  return fallback;
}

/// The experts a layer of a `--model moe:` has (8 by default); 0 for any
/// other model.
int64_t moeExperts(const LoomcOptions &o) {
  return llvm::StringRef(o.model).split(':').first == "moe" ? modelKey(o, "experts", 8) : 0;
}

/// The plans on `levels` (outermost first), honouring what the user forced.
std::vector<Candidate> enumerate(const LoomcOptions &o,
                                 llvm::ArrayRef<std::pair<std::string, int64_t>> innerFirst,
                                 int64_t batch) {
  int64_t world = 1;
  for (auto &l : innerFirst)
    world *= l.second;
  int64_t inner = innerFirst.empty() ? 1 : innerFirst.front().second;
  int64_t outer = innerFirst.empty() ? 1 : innerFirst.back().second;
  bool oneLevel = innerFirst.size() < 2;
  auto forced = [](const auto &opt) { return opt.getNumOccurrences() > 0; };
  // ZeRO++ (qwZ + qgZ with their default blocks, the measured ones) beside
  // each ZeRO-3 plan of data parallelism alone, where its loss gap is known
  // to be within --max-loss-gap (issue 53) and the user's flags leave it to
  // the search (it composes with plain ZeRO: no 1-bit Adam, DiLoCo or offload).
  cost::CompressionSetting zpp;
  zpp.qwzBlock = cost::kQwzDefaultBlock;
  zpp.qgzBlock = cost::kQgzDefaultBlock;
  cost::LossGap zgap = cost::lossGap(zpp);
  bool zppAllowed = o.zeropp.empty() && o.diloco.empty() && o.optimizer != "onebit-adam" &&
                    o.offload == "none" && world > 1;
  bool tryZpp = zppAllowed && zgap.known && zgap.gap <= o.maxLossGap;
  if (zppAllowed && !tryZpp)
    llvm::errs() << "loomc: --plan=auto: ZeRO++ (" << cost::describe(zpp) << ") not tried: "
                 << zgap.why << "; over --max-loss-gap "
                 << llvm::formatv("{0:P}", double(o.maxLossGap)) << "\n";
  std::vector<int64_t> tps = {1}, pps = {1};
  if (inner > 1)
    tps.push_back(inner);
  if (outer > 1)
    pps.push_back(outer);
  if (forced(o.tensorParallel))
    tps = {int64_t(o.tensorParallel)};
  if (forced(o.pipelineParallel))
    pps = {int64_t(o.pipelineParallel)};
  // Streaming DiLoCo, where the user asked for it: its fragments and
  // overlap, where not given, chosen with the rest (its inner steps and
  // codec stay the user's: they change what is trained, not only how
  // fast). Each variant is the user's --diloco with the two keys set.
  std::vector<std::string> dilocos = {""};
  if (!o.diloco.empty()) {
    std::string kept;
    int64_t h = 100, givenP = 0, givenT = -1;
    for (llvm::StringRef kv : llvm::split(llvm::StringRef(o.diloco), ',')) {
      auto [k, v] = kv.split('=');
      int64_t n = 0;
      if (k.trim() == "fragments" && !v.getAsInteger(10, n))
        givenP = n;
      else if (k.trim() == "overlap" && !v.getAsInteger(10, n))
        givenT = n;
      else {
        if (k.trim() == "inner-steps")
          (void)v.getAsInteger(10, h);
        kept += (kept.empty() ? "" : ",") + kv.str();
      }
    }
    dilocos.clear();
    for (int64_t p : givenP ? std::vector<int64_t>{givenP} : std::vector<int64_t>{1, 2, 3, 4}) {
      if (p > h)
        continue;
      std::vector<int64_t> taus = {givenT};
      if (givenT < 0) {
        taus.clear();
        // (Overlaps up to 20 steps: a longer one merges older work, which
        // the step prediction does not weigh; give overlap= to go further.)
        for (int64_t t : {0, 1, 2, 5, 10, 15, 20})
          if (t * p < h)
            taus.push_back(t);
      }
      for (int64_t t : taus)
        dilocos.push_back("--diloco=" + kept + (kept.empty() ? "" : ",") +
                          "fragments=" + std::to_string(p) + ",overlap=" + std::to_string(t));
    }
  }
  // Expert parallelism, for a mixture of experts: its experts split over
  // the innermost level (as --expert-parallel places them) where that level
  // divides them; built without tensor or pipeline parallelism and without
  // Streaming DiLoCo, so only beside those plans.
  std::vector<int64_t> eps = {1};
  if (int64_t experts = moeExperts(o); experts > 0 && inner > 1 && experts % inner == 0 &&
                                       o.diloco.empty())
    eps.push_back(inner);
  if (forced(o.expertParallel))
    eps = {int64_t(o.expertParallel)};
  std::vector<Candidate> out;
  for (int64_t ep : eps)
  for (int64_t tp : tps)
    for (int64_t pp : pps) {
      if (tp * pp > world || world % (tp * pp) || (oneLevel && tp > 1 && pp > 1))
        continue;
      if (ep > 1 && !forced(o.expertParallel) && (tp > 1 || pp > 1))
        continue;
      int64_t dp = world / tp / pp;
      // With Streaming DiLoCo the outermost level holds the replicas (no
      // pipeline over it) and ZeRO spans only the ranks inside a replica
      // (-1: no --zero-stage at all, replicas of one rank).
      int64_t inReplica = o.diloco.empty() ? dp : dp / std::max<int64_t>(outer, 1);
      if (!o.diloco.empty() && pp > 1)
        continue;
      std::vector<int64_t> zeros = inReplica > 1 ? std::vector<int64_t>{0, 1, 2, 3}
                                                 : std::vector<int64_t>{o.diloco.empty() ? 0 : -1};
      if (forced(o.zeroStage))
        zeros = {int64_t(o.zeroStage)};
      // Each plan at a higher ZeRO stage adds to the same plan at the
      // lowest: its index, by micro-batches and schedule.
      std::map<std::tuple<int64_t, std::string, std::string>, int> lowest;
      // Without a pipeline, one micro-batch (more only where it does not
      // fit: the pass after this one); a pipeline wants several.
      std::vector<int64_t> ms = pp > 1 ? std::vector<int64_t>{pp, 2 * pp, 4 * pp}
                                       : std::vector<int64_t>{1};
      if (forced(o.microBatches))
        ms = {int64_t(o.microBatches)};
      for (int64_t z : zeros)
        for (int64_t m : ms) {
          if (batch > 0 && (batch % dp || (batch / dp) % m))
            continue;
          std::vector<std::string> scheds = {""};
          if (pp > 1 && !forced(o.pipelineSchedule)) {
            scheds = {"1f1b", "zb-h1"};
            if (m % pp == 0)
              scheds.push_back("interleaved:2");
          }
          for (const std::string &sched : scheds)
          for (const std::string &dl : dilocos) {
            Candidate c;
            auto add = [&](bool isForced, const std::string &flag) {
              if (!isForced)
                c.flags.push_back(flag);
            };
            add(forced(o.expertParallel) || ep == 1, "--expert-parallel=" + std::to_string(ep));
            add(forced(o.tensorParallel) || tp == 1, "--tensor-parallel=" + std::to_string(tp));
            add(forced(o.pipelineParallel) || pp == 1, "--pipeline-parallel=" + std::to_string(pp));
            add(forced(o.zeroStage) || z < 0, "--zero-stage=" + std::to_string(z));
            add(forced(o.microBatches) || m == 1, "--micro-batches=" + std::to_string(m));
            add(sched.empty(), "--pipeline-schedule=" + sched);
            add(dl.empty(), dl);
            auto [it, first] = lowest.insert({{m, sched, dl}, int(out.size())});
            if (!first)
              c.base = it->second;
            out.push_back(c);
            if (tryZpp && z == 3 && tp == 1 && pp == 1 && ep == 1 && m == 1 && dl.empty() &&
                inReplica > 1) {
              Candidate q = c;
              q.flags.push_back("--zeropp=qwz,qgz");
              q.base = it->second;
              q.lossGap = zgap.gap;
              out.push_back(q);
            }
          }
        }
    }
  return out;
}

/// Reads a candidate's --prediction-json.
void readPrediction(const std::string &path, Candidate &c) {
  auto buf = llvm::MemoryBuffer::getFile(path);
  if (!buf)
    return;
  llvm::Expected<llvm::json::Value> v = llvm::json::parse((*buf)->getBuffer());
  if (!v) {
    llvm::consumeError(v.takeError());
    return;
  }
  const llvm::json::Object *obj = v->getAsObject();
  if (!obj)
    return;
  auto num = [&](llvm::StringRef k) { return obj->getNumber(k).value_or(0); };
  c.step = num("step_s"), c.deviceBytes = num("device_bytes"), c.usableBytes = num("usable_bytes");
  c.params = num("params"), c.tokens = num("tokens"), c.bound = num("bound_s");
  c.persistentBytes = num("persistent_bytes");
  c.ok = c.step > 0;
  c.fits = c.ok && (c.usableBytes <= 0 || c.deviceBytes <= c.usableBytes);
}

/// Reads back a finished candidate's prediction, or loomc's message.
void collect(Candidate &c, const std::string &stem) {
  readPrediction(stem + ".json", c);
  if (c.ok)
    return;
  // loomc's own message: the last line of its output.
  auto buf = llvm::MemoryBuffer::getFile(stem + ".log");
  llvm::StringRef text = buf ? (*buf)->getBuffer().trim() : "";
  c.error = text.rsplit('\n').second.empty() ? text.str() : text.rsplit('\n').second.str();
  if (c.error.empty())
    c.error = "no prediction";
}

/// Compiles the candidates `which` of `cands` for their predictions, two
/// at a time (a new one starts as soon as one ends).
void evaluate(std::vector<Candidate> &cands, const std::vector<size_t> &which,
              const std::string &exe, const std::vector<std::string> &base,
              const std::string &dir) {
  const size_t jobs = 2;
  auto stem = [&](size_t k) { return dir + "/c" + std::to_string(k); };
  std::vector<std::pair<size_t, llvm::sys::ProcessInfo>> running;
  size_t next = 0, done = 0;
  while (done < which.size()) {
    while (running.size() < jobs && next < which.size()) {
      size_t k = which[next++];
      std::vector<std::string> args = base;
      args.insert(args.end(), cands[k].flags.begin(), cands[k].flags.end());
      args.push_back("--prediction-json=" + stem(k) + ".json");
      llvm::sys::ProcessInfo pi;
      if (runLoomc(exe, args, stem(k) + ".log", false, &pi) == 0) {
        running.push_back({k, pi});
      } else {
        cands[k].error = "could not start loomc";
        ++done;
      }
    }
    bool any = false;
    for (size_t r = 0; r < running.size();) {
      llvm::sys::ProcessInfo res = llvm::sys::Wait(running[r].second, 0u);
      if (res.Pid == 0) { // still running
        ++r;
        continue;
      }
      collect(cands[running[r].first], stem(running[r].first));
      running.erase(running.begin() + r);
      any = true;
      if (++done % 10 == 0 || done == which.size())
        llvm::errs() << llvm::formatv("loomc: --plan=auto: {0}/{1} candidates predicted\n",
                                      done, which.size());
    }
    if (!any && !running.empty())
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

/// The last refusal's message, for when every plan was refused.
std::string lastError(const std::vector<Candidate> &cands) {
  for (auto it = cands.rbegin(); it != cands.rend(); ++it)
    if (!it->error.empty())
      return it->error;
  return "none tried";
}

/// The fastest candidate that fits, or null.
const Candidate *fastestFitting(const std::vector<Candidate> &cands) {
  const Candidate *best = nullptr;
  for (const Candidate &c : cands)
    if (c.fits && (!best || c.step < best->step))
      best = &c;
  return best;
}

/// How much slower than the fastest plan a base's bound must be before the
/// plans that add to it are not compiled.
constexpr double kBoundMargin = 1.1;

/// Keeps the candidates of `which` that may beat `best` (those whose base's
/// bound is not already slower); marks the others pruned.
std::vector<size_t> unpruned(std::vector<Candidate> &cands, const std::vector<size_t> &which,
                             const Candidate *best, bool exhaustive) {
  if (exhaustive)
    return which;
  std::vector<size_t> keep;
  for (size_t k : which) {
    Candidate &c = cands[k];
    const Candidate *b = c.base >= 0 ? &cands[size_t(c.base)] : nullptr;
    // (With a margin: the products of plans at different ZeRO stages or
    // micro-batches are not quite the same set; on the 13B Llama the
    // bound of ZeRO-0 came 2.5% above ZeRO-3's own.)
    if (best && b && b->ok && b->bound >= kBoundMargin * best->step) {
      c.pruned = llvm::formatv("the products of `{0}` alone take at least {1:F4} s, more than the {2:F4} s "
                               "step of `{3}`",
                               b->text(), b->bound, best->step, best->text())
                     .str();
      continue;
    }
    keep.push_back(k);
  }
  return keep;
}

/// Micro-batches (without a pipeline) and recompute (where loomc's own
/// --recompute=auto does not plan it: pipelines, CPU descriptions) only add
/// work, so they are tried only for plans that do not fit: appended to `cands`,
/// each with the plan it adds to as its base. Where the parameters and
/// optimizer state alone exceed the device, neither can make it fit; the
/// optimizer's offload can (ZeRO-Offload's case: the interleaved planner
/// keeps on the device what fits and updates the rest on the CPU), so on a
/// GPU description it is tried for every plan that does not fit and that it
/// composes with (neither tensor nor pipeline parallelism, not 1-bit Adam
/// or Streaming DiLoCo beyond ZeRO-0, as loomc's flag checks say).
void deriveUnfitting(std::vector<Candidate> &cands, const LoomcOptions &o, int64_t batch) {
  auto has = [](const Candidate &c, llvm::StringRef p) {
    return llvm::any_of(c.flags, [&](const std::string &f) { return llvm::StringRef(f).starts_with(p); });
  };
  // (A plan's flags name only degrees above 1; a forced one is the user's.)
  auto parallel = [&](const Candidate &c) {
    return has(c, "--tensor-parallel") || has(c, "--pipeline-parallel") ||
           has(c, "--expert-parallel") || o.tensorParallel > 1 || o.pipelineParallel > 1 ||
           o.expertParallel > 1;
  };
  size_t tried = cands.size();
  for (size_t k = 0; k < tried; ++k) {
    if (!cands[k].ok || cands[k].fits)
      continue;
    auto derive = [&](const std::string &flag) {
      Candidate d;
      d.flags = cands[k].flags;
      d.flags.push_back(flag);
      d.base = int(k);
      cands.push_back(d);
    };
    bool stage0 = has(cands[k], "--zero-stage=0") ||
                  (!has(cands[k], "--zero-stage=") && o.zeroStage <= 0);
    if (cands[k].usableBytes > 0 && o.offload == "none" && !parallel(cands[k]) &&
        (o.optimizer != "onebit-adam" || stage0) && (o.diloco.empty() || stage0))
      derive("--optimizer-offload=interleaved");
    if (!o.planExhaustive && cands[k].usableBytes > 0 &&
        cands[k].persistentBytes > cands[k].usableBytes)
      continue;
    if (!has(cands[k], "--pipeline-parallel") && !o.microBatches.getNumOccurrences())
      for (int64_t m : {2, 4, 8})
        if (batch <= 0 || batch % m == 0)
          derive("--micro-batches=" + std::to_string(m));
    // (Without a pipeline, on a GPU description, the default
    // --recompute=auto already recomputed what it had to: full recompute
    // would be the same plan again.)
    bool autoRecomputed = cands[k].usableBytes > 0 && !has(cands[k], "--pipeline-parallel");
    if (!o.recompute.getNumOccurrences() && !autoRecomputed)
      derive("--recompute=full");
  }
}

llvm::json::Value candidateJson(const Candidate &c, double peakFlops, int64_t world) {
  llvm::json::Array flags;
  for (const std::string &f : c.flags)
    flags.push_back(f);
  llvm::json::Object o{{"flags", std::move(flags)}, {"ok", c.ok}};
  if (c.lossGap)
    o["loss_gap"] = *c.lossGap;
  if (!c.pruned.empty()) {
    o["pruned"] = c.pruned;
  } else if (c.ok) {
    if (c.bound > 0)
      o["bound_s"] = c.bound;
    o["step_s"] = c.step;
    o["tokens_per_s"] = c.tokens / c.step;
    if (peakFlops > 0)
      o["mfu"] = c.mfu(peakFlops, world);
    o["device_bytes"] = c.deviceBytes;
    o["fits"] = c.fits;
  } else {
    o["error"] = c.error;
  }
  return llvm::json::Value(std::move(o));
}

/// The plan table, fastest first (plans that fit before those that do not).
void printTable(const std::vector<const Candidate *> &ranked, double peakFlops, int64_t world,
                size_t refused, size_t pruned) {
  constexpr double GiB = double(1ull << 30);
  llvm::errs() << "loomc: --plan=auto: " << ranked.size() << " plans predicted ("
               << refused << " refused by loomc, " << pruned
               << " not compiled: bounded by a slower plan's kernels):\n"
               << "  rank  step s    tokens/s     MFU     GiB/GPU  fits  plan\n";
  for (size_t i = 0; i < ranked.size() && i < 12; ++i) {
    const Candidate &c = *ranked[i];
    std::string mfu = peakFlops > 0
                          ? llvm::formatv("{0,6:F1}%", 100 * c.mfu(peakFlops, world)).str()
                          : "     - ";
    llvm::errs() << llvm::formatv("  {0,4}  {1,8:F4}  {2,10:F0}  {3}  {4,8:F2}  {5,4}  {6}\n",
                                  i + 1, c.step, c.tokens / c.step, mfu, c.deviceBytes / GiB,
                                  c.fits ? "yes" : "no", c.text());
  }
}

} // namespace

int planMain(int argc, char **argv, const LoomcOptions &o,
             llvm::ArrayRef<std::pair<std::string, int64_t>> levels, const std::string &hwName,
             double peakFlops) {
  std::string exe = llvm::sys::fs::getMainExecutable(argv[0], (void *)&planMain);
  // (A searched --diloco replaces the user's: the chosen plan carries it.)
  std::vector<llvm::StringRef> own = {"plan", "plan-report", "plan-chosen", "plan-exhaustive"};
  if (!o.diloco.empty() && o.plan == "auto")
    own.push_back("diloco");
  std::vector<std::string> finalArgs = keptArgs(argc, argv, own);
  std::vector<std::string> chosenFlags;
  double chosenStep = 0;
  if (o.plan != "auto") {
    // --plan=FILE: a report's chosen plan.
    auto buf = llvm::MemoryBuffer::getFile(o.plan);
    if (!buf)
      return loomcError("--plan=" + o.plan + ": cannot read it (expected auto or a "
                        "--plan-report file)");
    llvm::Expected<llvm::json::Value> v = llvm::json::parse((*buf)->getBuffer());
    const llvm::json::Object *chosen =
        v && v->getAsObject() ? v->getAsObject()->getObject("chosen") : nullptr;
    const llvm::json::Array *flags = chosen ? chosen->getArray("flags") : nullptr;
    if (!v)
      llvm::consumeError(v.takeError());
    if (!flags)
      return loomcError("--plan=" + o.plan + ": not a --plan-report (expected JSON with "
                        "\"chosen\": {\"flags\": [...]})");
    for (const llvm::json::Value &f : *flags)
      if (auto s = f.getAsString(); s && s->starts_with("--"))
        chosenFlags.push_back(s->str());
      else
        return loomcError("--plan=" + o.plan + ": a flag of the chosen plan is not a "
                          "string starting with --");
    chosenStep = chosen->getNumber("step_s").value_or(0);
  } else {
    if (levels.empty())
      return loomcError("--plan=auto plans over the ranks of --topology: give it (e.g. "
                        "--topology=node=2,gpu=8)");
    int64_t world = 1;
    for (auto &l : levels)
      world *= l.second;
    // The global batch, when the generator spec says it (plans that do
    // not divide it are not tried).
    int64_t batch = modelKey(o, "batch", 0);
    llvm::SmallString<128> dir;
    if (std::error_code ec = llvm::sys::fs::createUniqueDirectory("loomc-plan", dir))
      return loomcError("--plan=auto: cannot make a temporary folder: " + ec.message());
    std::vector<llvm::StringRef> drop = {"plan",     "plan-report", "plan-chosen",
                                         "plan-exhaustive", "o", "compile-to",
                                         "emit-dir", "timeline",    "prediction-json"};
    if (!o.diloco.empty())
      drop.push_back("diloco");
    std::vector<std::string> base = keptArgs(argc, argv, drop);
    // (The prediction is made once data parallelism is applied, in the
    // distribute phase; the schedule phase only prints the streams.)
    base.push_back("--compile-to=distribute");
    base.push_back("-o");
    base.push_back("/dev/null");
    if (!o.hardware.getNumOccurrences())
      base.push_back("--hardware=" + hwName);
    std::vector<Candidate> cands = enumerate(o, levels, batch);
    llvm::errs() << llvm::formatv("loomc: --plan=auto: {0} plans on {1} ranks, each predicted "
                                  "on '{2}' by a loomc of its own, two at a time\n",
                                  cands.size(), world, hwName);
    // First each layout at its lowest ZeRO stage (the bases), then the
    // higher stages that their bases' kernels do not already rule out.
    std::vector<size_t> bases, rest;
    for (size_t k = 0; k < cands.size(); ++k)
      (cands[k].base < 0 ? bases : rest).push_back(k);
    evaluate(cands, bases, exe, base, std::string(dir));
    rest = unpruned(cands, rest, fastestFitting(cands), o.planExhaustive);
    evaluate(cands, rest, exe, base, std::string(dir));
    // Bounds: micro-batches without a pipeline, and recompute, only add
    // work; where a plan does not fit, try them.
    size_t tried = cands.size();
    deriveUnfitting(cands, o, batch);
    if (cands.size() > tried) {
      std::vector<size_t> more;
      for (size_t k = tried; k < cands.size(); ++k)
        more.push_back(k);
      size_t derived = more.size();
      more = unpruned(cands, more, fastestFitting(cands), o.planExhaustive);
      llvm::errs() << "loomc: --plan=auto: " << derived
                   << " more with micro-batches, recompute or the optimizer offloaded, where a plan did not fit ("
                   << derived - more.size() << " bounded out)\n";
      evaluate(cands, more, exe, base, std::string(dir));
    }
    std::vector<const Candidate *> ranked;
    size_t refused = 0, pruned = 0;
    for (const Candidate &c : cands)
      !c.pruned.empty() ? (void)++pruned : c.ok ? ranked.push_back(&c) : (void)++refused;
    std::stable_sort(ranked.begin(), ranked.end(), [](const Candidate *a, const Candidate *b) {
      return a->fits != b->fits ? a->fits : a->step < b->step;
    });
    printTable(ranked, peakFlops, world, refused, pruned);
    llvm::json::Array all;
    for (const Candidate &c : cands)
      all.push_back(candidateJson(c, peakFlops, world));
    llvm::json::Object report{{"ranks", world}, {"hardware", hwName},
                              {"candidates", std::move(all)}};
    if (!ranked.empty() && ranked.front()->fits)
      report["chosen"] = candidateJson(*ranked.front(), peakFlops, world);
    if (!o.planReport.empty()) {
      // (The project's one way to write a user's path: no symlink followed.)
      std::string err;
      std::unique_ptr<llvm::raw_fd_ostream> f = ::loom::openOutputNoFollow(o.planReport, err);
      if (!f)
        return loomcError("--plan-report: " + err);
      *f << llvm::formatv("{0:2}", llvm::json::Value(std::move(report))) << "\n";
    }
    llvm::sys::fs::remove_directories(dir);
    if (ranked.empty() || !ranked.front()->fits)
      return loomcError(ranked.empty()
                            ? "--plan=auto: loomc refused every plan (the last one said: " +
                                  lastError(cands) + ")"
                            : "--plan=auto: no plan fits the device's memory (the smallest "
                              "needs more; see the table)");
    chosenFlags = ranked.front()->flags;
    chosenStep = ranked.front()->step;
    llvm::errs() << "loomc: --plan=auto chose: " << ranked.front()->text() << "\n";
  }
  // The chosen plan, compiled as the user asked, recorded on the module.
  std::vector<std::string> args = finalArgs;
  args.insert(args.end(), chosenFlags.begin(), chosenFlags.end());
  std::string record = llvm::formatv("{0:e}", chosenStep).str();
  for (const std::string &f : chosenFlags)
    record += " " + f;
  args.push_back("--plan-chosen=" + record);
  return runLoomc(exe, args, "", true, nullptr);
}

void recordPlan(mlir::ModuleOp module, llvm::StringRef chosen) {
  auto [step, flags] = chosen.split(' ');
  double s = 0;
  (void)step.getAsDouble(s);
  mlir::Builder b(module.getContext());
  module->setAttr(mlir::loom::LoomDialect::PlanAttrHelper::getNameStr(),
                  b.getDictionaryAttr({b.getNamedAttr("flags", b.getStringAttr(flags.trim())),
                                       b.getNamedAttr("predicted_step_s", b.getF64FloatAttr(s))}));
}

} // namespace loom
