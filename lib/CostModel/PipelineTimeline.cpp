//===- PipelineTimeline.cpp - a pipeline schedule's order and times --------===//
#include "loom/PipelineTimeline.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace loom::cost {

std::optional<std::string> checkPipelineShape(const PipelineShape &s) {
  const std::string &k = s.schedule;
  if (k != "gpipe" && k != "1f1b" && k != "zb-h1" && k != "interleaved")
    return "unknown pipeline schedule '" + k + "': expected gpipe, 1f1b, zb-h1 or interleaved:V";
  if (s.stages < 1 || s.chunks < 1 || s.microBatches < 1)
    return std::string("stages, chunks and micro-batches must be positive");
  if ((k == "interleaved") != (s.chunks > 1))
    return std::string("model chunks a stage (virtual stages) go with the interleaved "
                       "schedule only, and it needs at least 2");
  // Megatron-LM's interleaved schedule runs the micro-batches in groups of
  // P on each chunk (Narayanan et al., SC 2021, §2.2).
  if (k == "interleaved" && s.microBatches % s.stages != 0)
    return "the interleaved schedule runs micro-batches in groups of the " +
           std::to_string(s.stages) + " stages: --micro-batches=" +
           std::to_string(s.microBatches) + " is not a multiple of " + std::to_string(s.stages);
  return std::nullopt;
}

namespace {

/// 1F1B on stage s (PipeDream-Flush, Narayanan et al., ICML 2021;
/// Megatron-LM's non-interleaved schedule): min(P - s - 1, M) forwards,
/// then a forward and a backward in turn, then the backwards left. ZB-H1
/// (Qi et al., ICLR 2024): each backward's weight part right after it in
/// the steady state, the cool-down's all at the end.
std::vector<PipeUnit> oneFOneB(int64_t s, int64_t p, int64_t m, bool zb) {
  std::vector<PipeUnit> u;
  int64_t w = std::min(p - s - 1, m);
  auto f = [&](int64_t i) { u.push_back({i, s, PipeWork::Forward}); };
  auto b = [&](int64_t i) { u.push_back({i, s, PipeWork::Backward}); };
  auto wt = [&](int64_t i) {
    if (zb)
      u.push_back({i, s, PipeWork::Weight});
  };
  for (int64_t i = 0; i < w; ++i)
    f(i);
  for (int64_t i = 0; i < m - w; ++i) {
    f(w + i);
    b(i);
    wt(i);
  }
  for (int64_t i = m - w; i < m; ++i)
    b(i);
  for (int64_t i = m - w; i < m; ++i)
    wt(i);
  return u;
}

/// Interleaved 1F1B on stage s (Narayanan et al., SC 2021, §2.2; Megatron-
/// LM's forward_backward_pipelining_with_interleaving): the k-th forward
/// runs micro-batch (k / PV) P + k mod P on local chunk (k mod PV) / P,
/// the k-th backward the same micro-batch on the chunks in reverse; the
/// warm-up is 2 (P - s - 1) + (V - 1) P forwards (all of them when M = P).
std::vector<PipeUnit> interleaved(int64_t s, int64_t p, int64_t v, int64_t m) {
  int64_t total = m * v;
  int64_t warmup = m == p ? total : std::min(2 * (p - s - 1) + (v - 1) * p, total);
  auto unit = [&](int64_t k, bool forward) {
    int64_t group = k % (p * v), local = group / p;
    if (!forward)
      local = v - 1 - local;
    return PipeUnit{(k / (p * v)) * p + k % p, local * p + s,
                    forward ? PipeWork::Forward : PipeWork::Backward};
  };
  std::vector<PipeUnit> u;
  for (int64_t k = 0; k < warmup; ++k)
    u.push_back(unit(k, true));
  for (int64_t k = 0; k < total - warmup; ++k) {
    u.push_back(unit(warmup + k, true));
    u.push_back(unit(k, false));
  }
  for (int64_t k = total - warmup; k < total; ++k)
    u.push_back(unit(k, false));
  return u;
}

} // namespace

std::vector<std::vector<PipeUnit>> pipelineOrder(const PipelineShape &shape) {
  std::vector<std::vector<PipeUnit>> order;
  int64_t p = shape.stages, m = shape.microBatches;
  for (int64_t s = 0; s < p; ++s) {
    if (shape.schedule == "interleaved") {
      order.push_back(interleaved(s, p, shape.chunks, m));
    } else if (shape.schedule == "gpipe") {
      std::vector<PipeUnit> u;
      for (int64_t i = 0; i < m; ++i)
        u.push_back({i, s, PipeWork::Forward});
      for (int64_t i = 0; i < m; ++i)
        u.push_back({i, s, PipeWork::Backward});
      order.push_back(std::move(u));
    } else {
      order.push_back(oneFOneB(s, p, m, shape.schedule == "zb-h1"));
    }
  }
  return order;
}

std::optional<double>
timePipeline(std::vector<std::vector<PipeUnit>> &order, int64_t stages,
             const std::function<double(const PipeUnit &)> &seconds, double transfer) {
  // When each (micro-batch, chunk, work) ends, once it has run.
  std::map<std::tuple<int64_t, int64_t, PipeWork>, double> done;
  int64_t lastChunk = 0;
  for (auto &units : order)
    for (PipeUnit &u : units)
      lastChunk = std::max(lastChunk, u.chunk);
  auto ready = [&](const PipeUnit &u, double &at) {
    auto need = [&](int64_t mb, int64_t c, PipeWork w, double extra) {
      auto it = done.find({mb, c, w});
      if (it == done.end())
        return false;
      at = std::max(at, it->second + extra);
      return true;
    };
    double hop = stages > 1 ? transfer : 0;
    switch (u.work) {
    case PipeWork::Forward:
      return u.chunk == 0 || need(u.microBatch, u.chunk - 1, PipeWork::Forward, hop);
    case PipeWork::Backward:
      return need(u.microBatch, u.chunk, PipeWork::Forward, 0) &&
             (u.chunk == lastChunk ||
              need(u.microBatch, u.chunk + 1, PipeWork::Backward, hop));
    case PipeWork::Weight:
      return need(u.microBatch, u.chunk, PipeWork::Backward, 0);
    }
    return false;
  };
  std::vector<size_t> next(order.size(), 0);
  std::vector<double> free(order.size(), 0);
  double end = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t s = 0; s < order.size(); ++s)
      while (next[s] < order[s].size()) {
        PipeUnit &u = order[s][next[s]];
        double at = free[s];
        if (!ready(u, at))
          break;
        u.start = at;
        u.end = free[s] = at + seconds(u);
        done[{u.microBatch, u.chunk, u.work}] = u.end;
        end = std::max(end, u.end);
        ++next[s];
        progress = true;
      }
  }
  for (size_t s = 0; s < order.size(); ++s)
    if (next[s] < order[s].size())
      return std::nullopt;
  return end;
}

} // namespace loom::cost
