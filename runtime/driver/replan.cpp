// replan.cpp: the re-planning decision (replan.h). The table is loomc's:
// each candidate's step simulated for the description with its CPU Adam
// rate (and the DRAM bandwidth it follows) scaled by each factor.
#include "driver/replan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace loomrt::driver {

std::vector<double> predictedAt(const loomrt_replan &r, double f) {
  std::vector<double> out(r.num_candidates, 0);
  if (r.num_factors == 0)
    return out;
  // The bracketing factors (clamped at the ends), and where f lies between
  // them on a log scale: step times follow rates multiplicatively.
  size_t hi = 0;
  while (hi < r.num_factors && r.factors[hi] < f)
    ++hi;
  size_t lo = hi == 0 ? 0 : hi - 1;
  hi = std::min(hi, r.num_factors - 1);
  double t = 0;
  if (hi != lo && f > r.factors[lo])
    t = std::log(f / r.factors[lo]) / std::log(r.factors[hi] / r.factors[lo]);
  for (size_t c = 0; c < r.num_candidates; ++c) {
    const double *row = r.predicted_s + c * r.num_factors;
    out[c] = row[lo] + t * (row[hi] - row[lo]);
  }
  return out;
}

size_t chooseCandidate(const loomrt_replan &r, double f, size_t current, double margin) {
  std::vector<double> pred = predictedAt(r, f);
  if (pred.empty() || current >= pred.size())
    return current;
  size_t best = size_t(std::min_element(pred.begin(), pred.end()) - pred.begin());
  return pred[best] < pred[current] * (1 - margin) ? best : current;
}

std::string replanEvent(const loomrt_replan &r, long step, double rate, double factor,
                        size_t from, size_t to) {
  std::vector<double> pred = predictedAt(r, factor);
  std::string plans, times;
  for (size_t c = 0; c < r.num_candidates; ++c) {
    std::string p = r.plans[c] ? r.plans[c] : "";
    // The plans are loomc's text ("12 resident, 2 streamed, 20 on the
    // CPU"): no quotes or backslashes to escape.
    p.erase(std::remove_if(p.begin(), p.end(), [](char ch) { return ch == '"' || ch == '\\'; }),
            p.end());
    char t[32];
    std::snprintf(t, sizeof t, "%.6g", pred[c]);
    plans += (c ? ", \"" : "\"") + p + "\"";
    times += (c ? ", " : "") + std::string(t);
  }
  char head[256];
  std::snprintf(head, sizeof head,
                "{\"event\": \"replan\", \"step\": %ld, \"cpu_adam_params_per_s\": %.6g, "
                "\"factor\": %.4g, \"from\": %zu, \"to\": %zu, ",
                step, rate, factor, from, to);
  return std::string(head) + "\"plans\": [" + plans + "], \"predicted_step_s\": [" + times +
         "]}";
}

} // namespace loomrt::driver
