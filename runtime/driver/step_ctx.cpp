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

namespace {
using loomrt::EnvSwitch;
/// LOOMRT_GRAPHS: `off` runs every capturable function uncaptured (an A/B
/// inside one binary), `report` prints each capture.
EnvSwitch graphMode() {
  static const EnvSwitch mode = loomrt::envSwitch("LOOMRT_GRAPHS");
  return mode;
}

/// A function found capturable but run uncaptured from now on, with why.
void declineGraph(loomrt_step_ctx_t::Graph &g, const char *name, const std::string &why) {
  g.declined = true;
  loomrt_graph_destroy(g.exec);
  g.exec = nullptr;
  std::fprintf(stderr, "loomrt: %s runs uncaptured: %s\n", name, why.c_str());
}
} // namespace

extern "C" {
const void *loomrt_step_const(loomrt_step_ctx c, const void *data, size_t bytes) {
  if (!c || !data || !bytes) {
    loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT, "step_const: null or empty constant");
    return nullptr;
  }
  auto it = c->consts.find(data);
  if (it != c->consts.end())
    return it->second;
  // Once, on the compute stream (the copy from pageable memory waits for
  // the stream to take it; later steps copy from the device).
  void *copy = nullptr;
  if (loomrt_alloc(c->dev, LOOMRT_MEM_DEVICE, bytes, &copy) != LOOMRT_OK)
    return nullptr;
  if (loomrt_memcpy_async(c->stream, copy, data, bytes) != LOOMRT_OK ||
      loomrt_stream_synchronize(c->stream) != LOOMRT_OK) {
    loomrt_free(c->dev, LOOMRT_MEM_DEVICE, copy);
    return nullptr;
  }
  c->consts[data] = copy;
  return copy;
}

loomrt_status loomrt_step_graph(loomrt_step_ctx c, const char *name, void *const *globals,
                                size_t numGlobals, const void *const *inputs, size_t numInputs,
                                void **const *outs, size_t numOuts, loomrt_graph_body body,
                                void *arg) {
  if (!c || !body || (numGlobals && !globals) || (numInputs && !inputs) || (numOuts && !outs))
    return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT, "step_graph: null argument");
  name = name ? name : "a step function";
  // Nested in another capture (a capturable function calling one), or
  // graphs off: the calls as they are.
  if (c->capturing || graphMode() == EnvSwitch::Off)
    return body(c, arg);
  loomrt_step_ctx_t::Graph &g = c->graphs[body];
  if (g.declined)
    return body(c, arg);
  // The first call runs as it is: kernels load, the vendor libraries make
  // their plans and workspaces, compiled kernels are built, none of which
  // a capture may do.
  if (g.calls++ == 0)
    return body(c, arg);
  std::vector<const void *> key(globals, globals + numGlobals);
  key.insert(key.end(), inputs, inputs + numInputs);
  key.push_back(c->device.planBase);
  key.push_back(reinterpret_cast<const void *>(c->device.planBytes));
  if (g.exec && key == g.key) {
    if (loomrt_status e = loomrt_graph_launch(g.exec, c->stream))
      return e;
    for (size_t i = 0; i < numOuts; ++i)
      *outs[i] = g.outs[i];
    return LOOMRT_OK;
  }
  // (Re)capture. Something that changes every step would capture every
  // step, slower than not capturing.
  if (g.captures >= 4) {
    declineGraph(g, name, "what it reads moved at 4 captures (globals, inputs or the planned "
                          "region)");
    return body(c, arg);
  }
  loomrt_graph_destroy(g.exec);
  g.exec = nullptr;
  loomrt_status st = loomrt_stream_begin_capture(c->stream);
  if (st == LOOMRT_ERR_UNSUPPORTED) { // the CPU: nothing to capture, nothing to say
    g.declined = true;
    return body(c, arg);
  }
  if (st != LOOMRT_OK) {
    declineGraph(g, name, loomrt_last_error());
    return body(c, arg);
  }
  int64_t allocsBefore = c->allocs;
  c->capturing = true;
  loomrt_status ran = body(c, arg);
  c->capturing = false;
  std::string why = ran != LOOMRT_OK ? std::string(loomrt_last_error()) : std::string();
  loomrt_graph exec = nullptr;
  size_t nodes = 0;
  loomrt_status ended = loomrt_stream_end_capture(c->stream, &exec, &nodes);
  if (ended != LOOMRT_OK && why.empty())
    why = loomrt_last_error();
  if (ran == LOOMRT_OK && ended == LOOMRT_OK && c->allocs != allocsBefore)
    why = "it took a buffer the runtime placed (compile with the planned arena)";
  if (!why.empty()) {
    // Nothing of a failed capture ran; run the body (an error that is not
    // the capture's comes back from it again).
    loomrt_graph_destroy(exec);
    declineGraph(g, name, "its capture failed: " + why);
    return body(c, arg);
  }
  ++g.captures;
  g.exec = exec;
  g.key = std::move(key);
  g.outs.assign(numOuts, nullptr);
  for (size_t i = 0; i < numOuts; ++i)
    g.outs[i] = *outs[i];
  if (graphMode() == EnvSwitch::Report)
    std::printf("loomrt: %s captured as a graph of %zu nodes (capture %lld)\n", name, nodes,
                (long long)g.captures);
  return loomrt_graph_launch(g.exec, c->stream);
}

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

