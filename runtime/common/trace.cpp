// trace.cpp: per-stream spans timed with events, written as Chrome trace
// JSON ({"traceEvents": [...]} with complete "X" events, one thread per
// lane), which Perfetto and chrome://tracing open.
#include "common/backend.h"
#include "common/file_util.h"
#include "common/json.h"

#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

struct loomrt_trace_t {
  using Clock = std::chrono::steady_clock;
  loomrt_device dev;
  loomrt_event origin;
  Clock::time_point hostOrigin; // the host's time when the origin passed
  struct Span {
    std::string lane, name;
    loomrt_event begin = nullptr, end = nullptr;
    // Host spans: milliseconds after hostOrigin (end < 0: still open).
    bool host = false;
    double hostBegin = 0, hostEnd = -1;
  };
  // Spans are added by the issuing thread and by the step's host thread
  // (its CPU updates): one lock around the list.
  std::mutex m;
  std::vector<Span> spans;
  double hostMs() const {
    return std::chrono::duration<double, std::milli>(Clock::now() - hostOrigin).count();
  }
};

using loomrt::fail;

extern "C" {

loomrt_status loomrt_trace_create(loomrt_stream s, loomrt_trace *out) {
  if (!s || !out)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "trace_create: null argument");
  auto *t = new loomrt_trace_t{s->dev, nullptr, {}, {}, {}};
  if (loomrt_status st = loomrt_event_create(s->dev, &t->origin)) {
    delete t;
    return st;
  }
  // Host spans are set against the origin: wait for it, then read the clock.
  loomrt_status st = loomrt_event_record(t->origin, s);
  if (!st)
    st = loomrt_event_synchronize(t->origin);
  if (st) {
    loomrt_trace_destroy(t);
    return st;
  }
  t->hostOrigin = loomrt_trace_t::Clock::now();
  *out = t;
  return LOOMRT_OK;
}

loomrt_status loomrt_trace_host_begin(loomrt_trace t, const char *lane,
                                      const char *name, int64_t *span) {
  if (!t || !lane || !name || !span)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "trace_host_begin: null argument");
  loomrt_trace_t::Span sp{lane, name};
  sp.host = true;
  sp.hostBegin = t->hostMs();
  std::lock_guard<std::mutex> l(t->m);
  t->spans.push_back(sp);
  *span = int64_t(t->spans.size()) - 1;
  return LOOMRT_OK;
}

loomrt_status loomrt_trace_host_end(loomrt_trace t, int64_t span) {
  if (!t)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "trace_host_end: null argument");
  std::lock_guard<std::mutex> l(t->m);
  if (span < 0 || span >= int64_t(t->spans.size()) || !t->spans[span].host ||
      t->spans[span].hostEnd >= 0)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "trace_host_end: unknown, device or already ended span " +
                    std::to_string(span));
  t->spans[span].hostEnd = t->hostMs();
  return LOOMRT_OK;
}

loomrt_status loomrt_trace_begin(loomrt_trace t, loomrt_stream s,
                                 const char *lane, const char *name,
                                 int64_t *span) {
  if (!t || !s || !lane || !name || !span)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "trace_begin: null argument");
  if (s->dev != t->dev)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "trace_begin: stream of another device");
  loomrt_trace_t::Span sp{lane, name};
  if (loomrt_status st = loomrt_event_create(t->dev, &sp.begin))
    return st;
  std::lock_guard<std::mutex> l(t->m);
  t->spans.push_back(sp);
  *span = int64_t(t->spans.size()) - 1;
  return loomrt_event_record(sp.begin, s);
}

loomrt_status loomrt_trace_end(loomrt_trace t, loomrt_stream s, int64_t span) {
  if (!t || !s)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "trace_end: null argument");
  std::lock_guard<std::mutex> l(t->m);
  if (span < 0 || span >= int64_t(t->spans.size()) || t->spans[span].end)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "trace_end: unknown or already ended span " +
                    std::to_string(span));
  auto &sp = t->spans[span];
  if (sp.host)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "trace_end: span " + std::to_string(span) +
                    " is a host span (loomrt_trace_host_end)");
  if (loomrt_status st = loomrt_event_create(t->dev, &sp.end))
    return st;
  return loomrt_event_record(sp.end, s);
}

loomrt_status loomrt_trace_write(loomrt_trace t, const char *path) {
  if (!t || !path)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "trace_write: null argument");
  std::lock_guard<std::mutex> l(t->m);
  std::map<std::string, int> lanes;
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  bool first = true;
  auto emit = [&](const std::string &ev) {
    out += (first ? "\n" : ",\n") + ev;
    first = false;
  };
  for (auto &sp : t->spans) {
    if (sp.host ? sp.hostEnd < 0 : !sp.end)
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  "trace_write: span '" + sp.name + "' on lane '" + sp.lane +
                      "' was never ended");
    double startMs = sp.hostBegin, endMs = sp.hostEnd;
    if (!sp.host) {
      float b, e;
      if (loomrt_status st = loomrt_event_synchronize(sp.end))
        return st;
      if (loomrt_status st = loomrt_event_elapsed_ms(t->origin, sp.begin, &b))
        return st;
      if (loomrt_status st = loomrt_event_elapsed_ms(t->origin, sp.end, &e))
        return st;
      startMs = b;
      endMs = e;
    }
    auto [it, fresh] = lanes.emplace(sp.lane, int(lanes.size()) + 1);
    if (fresh)
      emit("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":1,\"tid\":" +
           std::to_string(it->second) + ",\"args\":{\"name\":" +
           loomrt::json::quote(sp.lane) + "}}");
    char num[64];
    std::snprintf(num, sizeof num, "%.3f,\"dur\":%.3f", startMs * 1e3,
                  (endMs - startMs) * 1e3);
    emit("{\"ph\":\"X\",\"pid\":1,\"tid\":" + std::to_string(it->second) +
         ",\"name\":" + loomrt::json::quote(sp.name) + ",\"ts\":" + num + "}");
  }
  out += "\n]}\n";
  return loomrt::writeFileAtomic(path, {{out.data(), out.size()}});
}

void loomrt_trace_destroy(loomrt_trace t) {
  if (!t)
    return;
  for (auto &sp : t->spans) {
    loomrt_event_destroy(sp.begin);
    loomrt_event_destroy(sp.end);
  }
  loomrt_event_destroy(t->origin);
  delete t;
}

} // extern "C"
