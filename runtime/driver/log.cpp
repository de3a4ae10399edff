// log.cpp: the --log-json record of a finished step (log.h).
#include "driver/log.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <vector>

namespace loomrt::driver {

/// One line of --log-json for a finished step.
void logStep(std::FILE *log, long step, float loss, double ms, double tps, const char *unit,
             float backwardMs, const loomrt_step_ctx_t &ctx, long long commBytes,
             const std::string &byGroup, double dataWaitMs, double deviceMiB,
             double cardUsedMiB, double cpuAdamRate, double plannedCpuAdamRate, double lr,
             double gradNorm, const std::string &metrics) {
  // JSON has no NaN or infinity: a non-finite loss is logged as null.
  char lossText[32] = "null";
  if (std::isfinite(loss))
    std::snprintf(lossText, sizeof lossText, "%.8g", loss);
  char phases[512] = "";
  int n = 0;
  if (backwardMs >= 0)
    n = std::snprintf(phases, sizeof phases, ", \"backward_ms\": %.4f, \"update_ms\": %.4f",
                      backwardMs, ms - backwardMs);
  if (ctx.hostFirstMs >= 0)
    n += std::snprintf(phases + n, sizeof phases - size_t(n),
                       ", \"cpu_update_start_ms\": %.4f, \"cpu_update_ms\": %.4f",
                       ctx.hostFirstMs, ctx.hostTotalMs);
  // Data-parallel runs: the bytes this rank sent in the step's collectives
  // (loomrt_comm_bytes_sent's accounting).
  if (commBytes >= 0)
    n += std::snprintf(phases + n, sizeof phases - size_t(n), ", \"comm_bytes\": %lld", commBytes);
  // Graph models: how long the step waited for its sampled batch (the
  // sampler runs one step ahead; step_ms starts after the wait).
  if (dataWaitMs >= 0)
    n += std::snprintf(phases + n, sizeof phases - size_t(n), ", \"data_wait_ms\": %.4f",
                       dataWaitMs);
  // What this rank holds on the device: the step arena's high-water mark
  // (gathered parameters and recomputed activations included) and the
  // parameters and state that live there (loomc predicts the sum).
  n += std::snprintf(phases + n, sizeof phases - size_t(n), ", \"device_mib\": %.1f", deviceMiB);
  // GPU binaries: what the card reports in use after the step (the
  // context, libraries and pools included; --device-memory's ballast not),
  // the figure a --device-memory cap bounds.
  if (cardUsedMiB >= 0)
    n += std::snprintf(phases + n, sizeof phases - size_t(n), ", \"card_used_mib\": %.1f",
                       cardUsedMiB);
  // Offloaded optimizers, once (the third step): the CPU Adam rate measured
  // and the one the plan assumed.
  if (cpuAdamRate > 0)
    n += std::snprintf(phases + n, sizeof phases - size_t(n),
                  ", \"cpu_adam_params_per_s\": %.4g, \"planned_cpu_adam_params_per_s\": %.4g",
                  cpuAdamRate, plannedCpuAdamRate);
  // The rate the step's Adam used (the schedule's, --lr's or the compiled
  // one).
  if (lr >= 0)
    n += std::snprintf(phases + n, sizeof phases - size_t(n), ", \"lr\": %.9g", lr);
  // loomc --clip-grad: the gradients' global 2-norm before clipping.
  if (gradNorm >= 0)
    n += std::snprintf(phases + n, sizeof phases - size_t(n), ", \"grad_norm\": %.9g", gradNorm);
  // When the step ended, in Unix seconds (runs on several hosts line up).
  double now = std::chrono::duration<double>(
                   std::chrono::system_clock::now().time_since_epoch()).count();
  std::fprintf(log,
               "{\"step\": %ld, \"loss\": %s, \"step_ms\": %.4f, \"%s_per_s\": %.1f, "
               "\"time\": %.3f%s%s%s%s%s%s%s}\n",
               step, lossText, ms, unit, tps, now, phases,
               byGroup.empty() ? "" : ", \"comm_bytes_by_group\": {", byGroup.c_str(),
               byGroup.empty() ? "" : "}", metrics.empty() ? "" : ", \"metrics\": {",
               metrics.c_str(), metrics.empty() ? "" : "}");
  std::fflush(log);
}

/// What the step recorded in its f32 states named metrics.NAME (a
/// mixture's expert token counts and load-balancing loss), as JSON members
/// "NAME": value or [values]; this rank's values.
std::string metricsJson(const loomrt_program *p, void *const *G, loomrt_stream s) {
  // Every copy first, then one wait (a 32-layer mixture has 33 of them).
  struct Metric {
    const char *name;
    bool vector;
    std::vector<float> values;
  };
  std::vector<Metric> read;
  for (size_t i = 0; i < p->num_globals; ++i) {
    const loomrt_global_desc &g = p->globals[i];
    if (std::strncmp(g.name, "metrics.", 8) != 0 || g.dtype != LOOMRT_F32 || g.rank > 1)
      continue;
    std::vector<float> v(size_t(g.rank ? g.shape[0] : 1));
    if (loomrt_memcpy_async(s, v.data(), G[i], v.size() * sizeof(float)) != LOOMRT_OK)
      continue;
    read.push_back({g.name + 8, g.rank == 1, std::move(v)});
  }
  if (read.empty() || loomrt_stream_synchronize(s) != LOOMRT_OK)
    return "";
  std::string out;
  for (const Metric &m : read) {
    std::string vals;
    char buf[32];
    for (float x : m.values) {
      std::snprintf(buf, sizeof buf, std::isfinite(x) ? "%.8g" : "null", double(x));
      vals += (vals.empty() ? "" : ", ") + std::string(buf);
    }
    out += (out.empty() ? "\"" : ", \"") + std::string(m.name) + "\": " +
           (m.vector ? "[" + vals + "]" : vals);
  }
  return out;
}

} // namespace loomrt::driver
