// flags.h: the command line of generated training binaries (private to
// runtime/driver): what --help prints and what parse() accepts, checked
// against the program's inputs before anything is loaded.
#ifndef LOOMRT_DRIVER_FLAGS_H
#define LOOMRT_DRIVER_FLAGS_H

#include "loomrt/train.h"

#include <string>
#include <utility>
#include <vector>

namespace loomrt::driver {

struct Flags {
  std::string data, logJson, ckptDir, trace, weights, init = "model", sample = "sequential";
  std::string graph, dumpSamples; // graph models: --graph DIR, --dump-samples DIR
  long steps = 10, ckptEvery = 0;
  double commTimeout = 0; // seconds; 0: LOOMRT_COMM_TIMEOUT or the default
  double lr = -1;
  // --lr-schedule: 0 constant, 1 linear, 2 cosine; warm-up and decay in
  // optimizer steps, the cosine's floor as a fraction of the peak rate.
  int lrSchedule = 0;
  long warmupSteps = 0, decaySteps = 0;
  double minLrRatio = 0;
  double deviceMemory = -1; // GiB; -1: the compiled cap (loomc --device-memory), 0: none
  unsigned long long seed = 0;
  bool resume = false;
  bool logAppend = false; // --log-append: add to an existing --log-json file
  // Re-planning (a program compiled with loomc --replan): -1 the compiled
  // mode, else 0 off, 1 once, 2 continuous; and a CPU Adam rate
  // (parameters a second) to decide with instead of the measured one.
  int replan = -1;
  double replanCpuAdamRate = 0;
  // Steps before the CPU Adam rate is taken (the fastest of steps 2 to
  // this one) and the first re-planning decision made.
  long replanAfter = 5;
  std::vector<std::pair<std::string, std::string>> inputs; // --input NAME=FILE
  std::string argv0; // how the binary was started, for the launch hints
};

/// `x` as %g.
std::string fmt(double x);
/// Prints "error: MSG" and returns the exit status 1.
int die(const std::string &msg);
/// "--input x=FILE.npy --input labels=FILE.npy" for the program's inputs.
std::string inputFlags(const loomrt_program *p);
/// Prints --help for the program.
void usage(const char *argv0, const loomrt_program *p);
/// Reads the flags into `f`; false with `err` set on a bad one.
bool parse(int argc, char **argv, const loomrt_program *p, Flags &f, std::string &err);
/// --lr-schedule's factor of the peak rate for the optimizer step after
/// `done` steps (flags.cpp).
double lrFactor(const Flags &f, long done);

/// 1-bit Adam's variance refresh (loomrt_program.variance_refresh K after
/// freeze step T): for optimizer step t (from 1, t > T), whether t is a
/// refresh, T + K(2^(j+1) - 1) for some j >= 0, and the last update of v
/// before t (T or the refresh before it).
struct VarianceRefresh {
  bool refresh;
  int64_t last;
};
VarianceRefresh varianceRefresh(int64_t t, int64_t freezeStep, int64_t interval);
/// For run step `step` (from 0) of p: whether it refreshes the
/// variance, and the step hooks' values (loomrt_step_variance_*): the
/// update v stands for on a refresh (`steps`), else the step the frozen
/// update's bias correction stops at (`last`; 0: the compiled freeze step).
bool refreshStep(const loomrt_program *p, int64_t step, int64_t &last, int64_t &steps);

} // namespace loomrt::driver

#endif // LOOMRT_DRIVER_FLAGS_H
