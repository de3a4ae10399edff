// flags.cpp: the training binary's command line (flags.h).
#include "driver/flags.h"
#include "driver/arrays.h"
#include "driver/graph.h"
#include "common/cli.h"

#include <algorithm>
#include <cmath>

#include <cstdio>
#include <cstdlib>
#include <limits>

namespace loomrt::driver {

std::string fmt(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

int die(const std::string &msg) {
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  return 1;
}

/// "--input x=FILE.npy --input labels=FILE.npy" for the program's inputs.
std::string inputFlags(const loomrt_program *p) {
  std::string s;
  for (size_t i = 0; i < p->num_inputs; ++i)
    s += std::string(i ? " " : "") + "--input " + p->inputs[i].name + "=FILE.npy";
  return s;
}

std::string fanoutText(const loomrt_program *p) {
  std::string s;
  for (size_t i = 0; i < p->num_fanouts; ++i)
    s += (i ? "-" : "") + std::to_string(p->fanouts[i]);
  return s;
}

std::string inputShape(const loomrt_input_desc &in) {
  std::string s = std::string(in.dtype == LOOMRT_I64 ? "int" : "float") + " [N";
  for (int d = 1; d < in.rank; ++d)
    s += ", " + std::to_string(in.shape[d]);
  return s + "]";
}

void usage(const char *argv0, const loomrt_program *p) {
  bool arrays = p->task == LOOMRT_TASK_ARRAYS, graph = p->task == LOOMRT_TASK_GRAPH;
  const loomrt_input_desc *table = loomrt::inputWithRole(*p, LOOMRT_INPUT_NODE_TABLE);
  std::string inputsHelp;
  for (size_t i = 0; arrays && i < p->num_inputs; ++i)
    inputsHelp += "                         " + std::string(p->inputs[i].name) + ": " +
                  inputShape(p->inputs[i]) +
                  (p->inputs[i].index_limit
                       ? ", values in [0, " + std::to_string(p->inputs[i].index_limit) + ")"
                       : std::string()) +
                  "\n";
  std::printf(
      "usage: %s %s [--steps N] [--lr LR] [--seed S]\n"
      "          [--init model|random] [--weights FILE]\n"
      "          [--log-json FILE] [--checkpoint-dir DIR --checkpoint-every K]\n"
      "          [--resume] [--trace FILE] [--comm-timeout S] [--sample sequential|random]\n"
      "          [--replan off|once|continuous]\n\n"
      "Trains %s (batch %lld%s) on %s.\n\n"
      "%s"
      "  --steps N              steps to run (default 10)\n"
      "  --sample MODE          sequential (default): step s reads the batch's rows\n"
      "                         one after the other at s x batch x seq; random: each\n"
      "                         row at its own offset, drawn from --seed, the step and\n"
      "                         the row (resume with the same --seed: the same rows)\n"
      "  --lr LR                learning rate (default: the compiled one)\n"
      "  --lr-schedule KIND     constant (default), linear or cosine: Adam's rate warms up\n"
      "                         linearly over --warmup-steps N (from 0), then decays to 0\n"
      "                         (linear) or to --min-lr-ratio R of it (cosine) at step\n"
      "                         --decay-steps T, as Hugging Face's get_*_schedule_with_warmup\n"
      "  --seed S               seed of the initial weights (default 0)\n"
      "  --init model|random    start from the model's weights (default) or draw\n"
      "                         every parameter from its initialiser and --seed\n"
      "  --weights FILE         the imported weights (default: %s)\n"
      "  --log-json FILE        one JSON object per step: step, loss, step_ms, tokens_per_s,\n"
      "                         time (Unix seconds) and more (docs/codegen.md); an existing\n"
      "                         non-empty FILE is refused unless --log-append or --resume\n"
      "  --log-append           add to an existing --log-json file\n"
      "  --checkpoint-dir DIR   where checkpoints go: each rank's part in\n"
      "                         DIR/step-S.rankR-of-W.safetensors, the step committed\n"
      "                         in DIR/checkpoint.json (docs/codegen.md)\n"
      "  --checkpoint-every K   save every K steps (and after the last)\n"
      "  --resume               continue from the step DIR/checkpoint.json names\n"
      "  --trace FILE           Chrome trace JSON of the steps (opens in Perfetto)\n"
      "  --device-memory GiB    GPU binaries: use at most this much of the card's memory\n"
      "                         (the rest is held back before anything is allocated, so\n"
      "                         an 80 GB card's plan runs on a larger card within 80 GB);\n"
      "                         0: the whole card (default: %s)\n"
      "%s"
      "  --comm-timeout S       data-parallel runs: a collective that has not finished\n"
      "                         after S seconds (a rank died or hangs) ends the run\n"
      "                         with an error (default 300, or LOOMRT_COMM_TIMEOUT)\n"
      "%s",
      argv0, graph ? "--graph DIR" : arrays ? inputFlags(p).c_str() : "--data FILE", p->model,
      (long long)p->batch,
      graph ? " seed nodes" : arrays ? " rows" : (" x " + std::to_string(p->seq) + " tokens").c_str(),
      loomrt_backend_name(p->backend),
      graph && table
          ? ("  --graph DIR            the graph: DIR/indptr.npy and indices.npy (CSR),\n"
               "                         features.npy [" + std::to_string(table->shape[0]) +
               ", " + std::to_string(table->shape[1]) + "] floats, labels.npy (a class\n"
               "                         or -1 a node), optional train.npy (the seed nodes);\n"
               "                         see docs/graphs.md. Each step samples fan-outs " +
               fanoutText(p) + "\n"
               "                         around its seeds, drawn from --seed and the step\n"
               "  --dump-samples DIR     also write each step's sampled node ids (padding -1)\n"
               "                         to DIR/step<S>_nodes<D>.npy (rank R: rank<R>_step...)\n")
                  .c_str()
      : arrays ? ("  --input NAME=FILE      each input's data: a NumPy .npy file (numpy.save) of\n"
                "                         N rows; step s reads rows (s*batch + r) mod N\n" +
                inputsHelp)
                   .c_str()
             : "  --data FILE            token ids: raw little-endian uint16 (nanoGPT's train.bin),\n"
               "                         or a Loom token file of uint32 ids (a LOOMTOKS header;\n"
               "                         examples/tokenize.py writes both from text)\n",
      p->weights ? p->weights : "none, the model has initialisers",
      p->device_memory_bytes > 0
          ? ("loomc's --device-memory, " + fmt(double(p->device_memory_bytes) / (1ull << 30)) +
             " GiB")
                .c_str()
          : "the whole card",
      p->replan
          ? ("  --replan MODE          off, once or continuous (default " +
             std::string(p->replan->mode == 2 ? "continuous" : p->replan->mode ? "once" : "off") +
             "): after --replan-after\n"
             "                         steps, take the CPU's Adam rate and continue under the\n"
             "                         fastest of the " +
             std::to_string(p->replan->num_candidates) +
             " plans compiled in (continuous: again\n"
             "                         every 20 steps)\n"
             "  --replan-cpu-adam-rate R  decide as if the CPU's Adam updated R parameters\n"
             "                         a second (tests, what-ifs)\n"
             "  --replan-after N       decide after step N (default 5), at the median CPU\n"
             "                         Adam rate of steps 2 to N (the first passes over\n"
             "                         freshly pinned state run slower)\n")
                .c_str()
          : "",
      p->world > 1 ? ("\nCompiled for " + std::to_string(p->world) +
                      " data-parallel ranks (ZeRO stage " + std::to_string(p->zero_stage) +
                      "): start it with mpirun -np " + std::to_string(p->world) +
                      " (CPU) or torchrun-style RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/"
                      "MASTER_PORT variables (GPU).\n")
                         .c_str()
                   : "");
}

/// The data flags against the program's task: a graph folder, one --input
/// per array input, or a token file.
bool checkData(const loomrt_program *p, const Flags &f, std::string &err) {
  if (p->task == LOOMRT_TASK_GRAPH) {
    if (!f.data.empty() || !f.inputs.empty())
      return err = "this graph model reads a graph folder: give --graph DIR instead of " +
                   std::string(f.data.empty() ? "--input" : "--data") + " (see --help)",
             false;
    if (f.graph.empty())
      return err = "no graph: give --graph DIR (indptr.npy, indices.npy, features.npy, "
                   "labels.npy; see --help)",
             false;
    if (f.sample != "sequential")
      return err = "--sample is for array and token data; a graph model's seeds are "
                   "shuffled every epoch from --seed",
             false;
  } else if (!f.graph.empty() || !f.dumpSamples.empty()) {
    return err = "--graph and --dump-samples are for graph models (loomc --model sage or gcn)",
           false;
  } else if (p->task == LOOMRT_TASK_ARRAYS) {
    if (!f.data.empty())
      return err = "this model takes arrays, not a token file: give " + inputFlags(p) +
                   " instead of --data (see --help)",
             false;
    for (auto &[name, file] : f.inputs) {
      bool known = false;
      for (size_t i = 0; i < p->num_inputs; ++i)
        known |= name == p->inputs[i].name;
      if (!known)
        return err = "--input " + name + "=...: the model has no input '" + name +
                     "' (it takes " + inputFlags(p) + ")",
               false;
    }
    for (size_t i = 0; i < p->num_inputs; ++i) {
      size_t given = 0;
      for (auto &in : f.inputs)
        given += in.first == p->inputs[i].name;
      if (given != 1)
        return err = std::string(given ? "more than one" : "no") + " --input for '" +
                     p->inputs[i].name + "' (the model takes " + inputFlags(p) + ")",
               false;
    }
  } else if (!f.inputs.empty()) {
    return err = "--input is for models that take arrays; this language model reads "
                 "--data FILE (see --help)",
           false;
  } else if (f.data.empty()) {
    return err = "no training data: give --data FILE (see --help)", false;
  }
  return true;
}

/// --lr-schedule's flags together (after parsing).
bool checkSchedule(const Flags &f, std::string &err) {
  if (f.lrSchedule && !f.decaySteps)
    return err = "--lr-schedule linear and cosine need --decay-steps T (the step the rate "
                 "reaches its end; the same T when a run resumes)", false;
  if (!f.lrSchedule && (f.warmupSteps || f.decaySteps || f.minLrRatio > 0))
    return err = "--warmup-steps, --decay-steps and --min-lr-ratio shape --lr-schedule linear "
                 "or cosine", false;
  if (f.lrSchedule && f.warmupSteps >= f.decaySteps)
    return err = "--warmup-steps must be below --decay-steps", false;
  if (f.lrSchedule == 1 && f.minLrRatio > 0)
    return err = "--min-lr-ratio is the cosine schedule's floor (linear decays to 0)", false;
  return true;
}

/// --lr-schedule's factor for the optimizer step that follows `done` steps
/// (0-based: the first step's is at 0), as Hugging Face's
/// get_linear_schedule_with_warmup and get_cosine_with_min_lr_schedule_
/// with_warmup compute it (a LambdaLR stepped after each optimizer step):
/// done/W during the warm-up, then linear to 0 or a half cosine from 1 to
/// the floor at step T, which it keeps after T.
double lrFactor(const Flags &f, long done) {
  if (!f.lrSchedule)
    return 1.0;
  double w = double(f.warmupSteps), t = double(f.decaySteps), s = double(done);
  if (s < w)
    return s / std::max(1.0, w);
  double progress = std::min(1.0, (s - w) / std::max(1.0, t - w));
  if (f.lrSchedule == 1)
    return std::max(0.0, 1.0 - progress);
  double c = 0.5 * (1.0 + std::cos(M_PI * progress));
  return f.minLrRatio + (1.0 - f.minLrRatio) * c;
}

VarianceRefresh varianceRefresh(int64_t t, int64_t freezeStep, int64_t interval) {
  int64_t last = freezeStep, next = freezeStep + interval;
  // Doubling intervals: under 63 turns for any t, and no overflow (a next
  // refresh past t ends the walk before it is added up).
  while (next < t) {
    last = next;
    if (interval > (t - next) / 2)
      return {false, last};
    interval *= 2;
    next += interval;
  }
  return {next == t, last};
}

bool refreshStep(const loomrt_program *p, int64_t step, int64_t &last, int64_t &steps) {
  last = 0;
  steps = 1;
  if (p->variance_refresh <= 0 || !p->train_step_frozen || step < p->freeze_step)
    return false;
  VarianceRefresh r = varianceRefresh(step + 1, p->freeze_step, p->variance_refresh);
  if (r.refresh)
    steps = step + 1 - r.last;
  else
    last = r.last;
  return r.refresh;
}

bool parse(int argc, char **argv, const loomrt_program *p, Flags &f,
           std::string &err) {
  f.argv0 = argc > 0 && argv[0] ? argv[0] : "./train";
  cli::Flags c; // --flag value and --flag=value alike (common/cli.h)
  for (const char *n : {"data", "graph", "dump-samples", "input", "log-json", "checkpoint-dir",
                        "trace", "weights", "init", "sample", "lr-schedule", "replan", "steps",
                        "checkpoint-every", "warmup-steps", "decay-steps", "seed", "replan-after",
                        "lr", "min-lr-ratio", "device-memory", "replan-cpu-adam-rate",
                        "comm-timeout"})
    c.add(n, std::string(n) == "input" ? cli::Flags::List : cli::Flags::Value);
  for (const char *n : {"resume", "log-append", "h,help"})
    c.add(n, cli::Flags::Bool);
  if (!c.parse(argc, argv, err))
    return false;
  if (c.on("help")) {
    usage(argv[0], p);
    std::exit(0);
  }
  // Finite numbers only: --lr=inf or --steps=1e30 are typos, not requests
  // (a step count past the range of a long trained 0 steps).
  struct Real {
    const char *flag;
    double *to, min, max;
  } reals[] = {{"lr", &f.lr, 1e-12, 1e6},
               {"min-lr-ratio", &f.minLrRatio, 0, 1},
               {"device-memory", &f.deviceMemory, 0, 1e6},
               {"replan-cpu-adam-rate", &f.replanCpuAdamRate, 1, 1e15},
               {"comm-timeout", &f.commTimeout, 1e-3, 1e7}};
  for (const Real &r : reals)
    if (!cli::number(c, r.flag, r.min, r.max, *r.to, err))
      return false;
  struct Whole {
    const char *flag;
    long *to, min, max;
  } wholes[] = {{"steps", &f.steps, 1, 1000000000000L},
                {"checkpoint-every", &f.ckptEvery, 1, 1000000000000L},
                {"warmup-steps", &f.warmupSteps, 0, 1000000000000L},
                {"decay-steps", &f.decaySteps, 1, 1000000000000L},
                {"replan-after", &f.replanAfter, 2, 1000000}};
  for (const Whole &w : wholes) {
    long long x = *w.to;
    if (!cli::integer(c, w.flag, w.min, w.max, x, err))
      return false;
    *w.to = long(x);
  }
  long long seed = 0;
  if (!cli::integer(c, "seed", 0, std::numeric_limits<long>::max(), seed, err))
    return false;
  f.seed = (unsigned long long)seed;
  struct Text {
    const char *flag;
    std::string *to;
  } texts[] = {{"data", &f.data},         {"graph", &f.graph},
               {"dump-samples", &f.dumpSamples}, {"log-json", &f.logJson},
               {"checkpoint-dir", &f.ckptDir}, {"trace", &f.trace},
               {"weights", &f.weights}};
  for (const Text &t : texts)
    if (c.has(t.flag))
      *t.to = c.value(t.flag);
  std::string schedule, replan;
  if (!cli::choice(c, "init", {"model", "random"}, f.init, err) ||
      !cli::choice(c, "sample", {"sequential", "random"}, f.sample, err) ||
      !cli::choice(c, "lr-schedule", {"constant", "linear", "cosine"}, schedule, err) ||
      !cli::choice(c, "replan", {"off", "once", "continuous"}, replan, err))
    return false;
  if (!schedule.empty())
    f.lrSchedule = schedule == "linear" ? 1 : schedule == "cosine" ? 2 : 0;
  if (!replan.empty()) {
    if (replan != "off" && !p->replan)
      return err = "--replan " + replan + ": this binary holds one plan (compile with loomc "
                   "--optimizer-offload=interleaved --replan=" + replan + ")", false;
    f.replan = replan == "off" ? 0 : replan == "once" ? 1 : 2;
  }
  f.resume = c.on("resume");
  f.logAppend = c.on("log-append");
  for (const std::string &v : c.list("input")) {
    size_t eq = v.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
      return err = "--input expects NAME=FILE.npy, got '" + v + "'", false;
    f.inputs.push_back({v.substr(0, eq), v.substr(eq + 1)});
  }
  if (!checkData(p, f, err))
    return false;
  if ((f.resume || f.ckptEvery) && f.ckptDir.empty())
    return err = "--resume and --checkpoint-every need --checkpoint-dir", false;
  return checkSchedule(f, err);
}

/// A relative file name resolved against the executable's folder, so a

} // namespace loomrt::driver
