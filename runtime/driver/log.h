// log.h: the --log-json record of a finished step (private to
// runtime/driver).
#ifndef LOOMRT_DRIVER_LOG_H
#define LOOMRT_DRIVER_LOG_H

#include "driver/step_ctx.h"

#include <cstdio>
#include <string>

namespace loomrt::driver {

/// One line of --log-json for a finished step.
void logStep(std::FILE *log, long step, float loss, double ms, double tps, const char *unit,
             float backwardMs, const loomrt_step_ctx_t &ctx, long long commBytes,
             const std::string &byGroup, double dataWaitMs, double deviceMiB,
             double cardUsedMiB, double cpuAdamRate, double plannedCpuAdamRate,
             double lr = -1, double gradNorm = -1, const std::string &metrics = "");

/// What the step recorded in its f32 states named metrics.NAME (a
/// mixture's expert token counts and load-balancing loss), as JSON members
/// "NAME": value or [values] for logStep's `metrics`; G: the globals'
/// buffers in the program's order.
std::string metricsJson(const loomrt_program *p, void *const *G, loomrt_stream s);

} // namespace loomrt::driver

#endif // LOOMRT_DRIVER_LOG_H
