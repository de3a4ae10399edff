// step_ctx.cpp: train.h's step functions (loomrt_step_*), which generated
// code calls inside each step, over the step context (step_ctx.h).
#include "driver/step_ctx.h"

using loomrt::driver::Arena;
using loomrt::driver::HostThread;
using loomrt::driver::SlowLink;
using loomrt::driver::slowLink;

SlowLink loomrt::driver::slowLink() {
  SlowLink l;
  const char *v = std::getenv("LOOMRT_SLOW_LINK");
  if (!v || !*v)
    return l;
  char *end = nullptr;
  long long ranks = std::strtoll(v, &end, 10);
  double gbps = end && *end == ':' ? std::strtod(end + 1, &end) : 0;
  // A link from 1 kB/s to 10 TB/s: slower would hold a collective past the
  // watchdog (1e-12 GB/s hung), a rate that rounds to 0 was ignored.
  if (ranks < 1 || ranks > (1 << 20) || !(gbps >= 1e-6 && gbps <= 1e4) || !end || *end) {
    l.invalid = true;
    return l;
  }
  l.ranksPerNode = ranks;
  l.rate = gbps * 1e9;
  return l;
}

extern "C" {
void *loomrt_step_alloc(loomrt_step_ctx c, size_t bytes) { return c->alloc(bytes); }
loomrt_status loomrt_step_arena(loomrt_step_ctx c, size_t bytes) {
  std::lock_guard<std::mutex> l(c->arenaMutex);
  return c->device.plan(bytes, c->stream);
}
void *loomrt_step_alloc_at(loomrt_step_ctx c, size_t offset, size_t bytes) {
  return c->device.at(offset, bytes);
}
void loomrt_step_free(loomrt_step_ctx c, void *p) { c->free(p); }
loomrt_stream loomrt_step_stream(loomrt_step_ctx c) { return c->stream; }
loomrt_comm loomrt_step_comm(loomrt_step_ctx c) { return c->comm; }
loomrt_comm loomrt_step_group(loomrt_step_ctx c, uint64_t levels, int numLevels,
                              const int64_t *sizes) {
  auto it = c->groups.find(levels);
  if (it != c->groups.end())
    return it->second;
  // LOOMRT_SLOW_LINK: a group whose ranks lie on several "nodes" crosses
  // the emulated link.
  SlowLink link = slowLink();
  loomrt_comm g = nullptr;
  int spans = 0;
  if (loomrt_comm_split_levels(c->comm, levels, numLevels, sizes, link.ranksPerNode,
                               &spans, &g) != LOOMRT_OK)
    return nullptr;
  if (link.rate > 0 && spans && loomrt_comm_shape(g, link.rate) != LOOMRT_OK)
    return nullptr;
  c->groups[levels] = g;
  return g;
}
loomrt_stream loomrt_step_comm_stream(loomrt_step_ctx c) { return c->commStream; }
loomrt_event loomrt_step_event(loomrt_step_ctx c) { return c->event(); }
void *loomrt_step_alloc_host(loomrt_step_ctx c, size_t bytes) { return c->allocHost(bytes); }
loomrt_status loomrt_step_host_task(loomrt_step_ctx c, loomrt_host_fn fn, void *arg,
                                    void (*release)(void *)) {
  if (!c || !fn)
    return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT, "step_host_task: null argument");
  c->hostThread->enqueue(fn, arg, release);
  return LOOMRT_OK;
}
loomrt_status loomrt_step_host_join(loomrt_step_ctx c) {
  if (!c)
    return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT, "step_host_join: null context");
  return c->hostThread->join();
}
loomrt_stream loomrt_step_host_stream(loomrt_step_ctx c) { return c->hostStream; }
loomrt_stream loomrt_step_copy_stream(loomrt_step_ctx c, int direction) {
  return c->copyStreams[direction == 1 ? 1 : 0];
}
uint64_t loomrt_step_random_key(loomrt_step_ctx c, uint64_t op) {
  return loomrt_random_key(c->seed, c->step, op);
}
float loomrt_step_lr(loomrt_step_ctx c, float compiled) {
  // (A factor of 1 gives the compiled or --lr value's bits exactly.)
  float lr = float(double(c->lrOverride > 0 ? c->lrOverride : compiled) * c->lrScale);
  c->lastLr.store(lr, std::memory_order_relaxed);
  return lr;
}
int64_t loomrt_step_variance_step(loomrt_step_ctx c, int64_t compiled) {
  return c->varianceStep > 0 ? c->varianceStep : compiled;
}
int64_t loomrt_step_variance_steps(loomrt_step_ctx c) { return c->varianceSteps; }
void loomrt_step_backward_done(loomrt_step_ctx c) {
  if (!c->backwardDone || c->backwardMarked)
    return;
  loomrt_event_record(c->backwardDone, c->stream);
  c->backwardMarked = true;
  if (c->trace && c->phaseSpan >= 0) {
    loomrt_trace_end(c->trace, c->stream, c->phaseSpan);
    loomrt_trace_begin(c->trace, c->stream, "compute", "update", &c->phaseSpan);
  }
}
void loomrt_step_host_begin(loomrt_step_ctx c, const char *name) {
  if (c->hostOpen)
    return; // not nested: the outer span counts
  c->hostOpen = true;
  c->hostBegin = std::chrono::steady_clock::now();
  if (c->hostFirstMs < 0)
    c->hostFirstMs =
        std::chrono::duration<double, std::milli>(c->hostBegin - c->stepStart).count();
  if (c->trace && loomrt_trace_host_begin(c->trace, "cpu", name, &c->hostSpan) != LOOMRT_OK)
    c->hostSpan = -1;
}
void loomrt_step_host_end(loomrt_step_ctx c) {
  if (!c->hostOpen)
    return;
  c->hostOpen = false;
  c->hostTotalMs += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                              c->hostBegin)
                        .count();
  if (c->trace && c->hostSpan >= 0)
    loomrt_trace_host_end(c->trace, c->hostSpan);
}
}

