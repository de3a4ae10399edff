// step_ctx.h: the step context of generated training binaries (private to
// runtime/driver): the step arena, the host thread that runs the CPU's
// optimizer updates, and loomrt_step_ctx_t, which train.h's step functions
// take (step_ctx.cpp implements them; train_main.cpp runs the steps).
#ifndef LOOMRT_DRIVER_STEP_CTX_H
#define LOOMRT_DRIVER_STEP_CTX_H

#include "loomrt/train.h"
#include "common/backend.h"
#include "common/adam_math.h"
#include "loomrt/arena_policy.h"
#include "common/file_util.h"
#include "driver/checkpoint_set.h"
#include "driver/arrays.h"
#include "driver/graph.h"
#include "driver/tokens.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <optional>
#include <limits>
#include <map>
#include <mutex>
#include <unordered_map>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <thread>
#include <vector>

namespace loomrt::driver {


/// The step's buffers in one memory space: blocks allocated once and
/// reused every step (reset), placed by ArenaPolicy (best fit, split,
/// coalesce), the policy loomc's step simulation predicts with.
struct Arena {
  loomrt_device dev = nullptr;
  loomrt_mem_space space = LOOMRT_MEM_DEVICE;
  std::vector<void *> blocks;
  void *planBase = nullptr; // the compiler-planned region
  size_t planBytes = 0;
  loomrt::ArenaPolicy policy;
  std::unordered_map<void *, loomrt::ArenaPolicy::Place> placed;

  /// The stream runs in order, so a released range's earlier readers are
  /// done before anything enqueued now writes it (copies' inputs are
  /// released only after their waits).
  void *alloc(size_t bytes) {
    loomrt::ArenaPolicy::Place at;
    bool ok = policy.alloc(bytes, at, [&](size_t size) {
      void *p = nullptr;
      if (loomrt_alloc(dev, space, size, &p))
        return false;
      blocks.push_back(p);
      return true;
    });
    if (!ok)
      return nullptr;
    void *p = static_cast<char *>(blocks[at.block]) + at.offset;
    placed[p] = at;
    return p;
  }
  /// The planned region (loom-plan-arena), grown to `bytes` when smaller.
  /// Growing happens at a planned function's start, where no planned buffer
  /// is in use; the stream is drained first, as the old region may still
  /// be read by the previous function's work.
  loomrt_status plan(size_t bytes, loomrt_stream s) {
    if (bytes <= planBytes)
      return LOOMRT_OK;
    if (planBase) {
      if (loomrt_status e = loomrt_stream_synchronize(s))
        return e;
      loomrt_free(dev, space, planBase);
      planBase = nullptr;
      planBytes = 0;
    }
    if (loomrt_status e = loomrt_alloc(dev, space, bytes, &planBase))
      return e;
    planBytes = bytes;
    return LOOMRT_OK;
  }
  void *at(size_t offset, size_t bytes) {
    if (!planBase || offset > planBytes || bytes > planBytes - offset)
      return nullptr;
    return static_cast<char *>(planBase) + offset;
  }
  bool planned(void *p) const {
    auto *c = static_cast<char *>(p), *b = static_cast<char *>(planBase);
    return planBase && c >= b && c < b + planBytes;
  }
  /// False when `p` is not this arena's.
  bool free(void *p) {
    if (planned(p))
      return true;
    auto it = placed.find(p);
    if (it == placed.end())
      return false;
    policy.release(it->second);
    placed.erase(it);
    return true;
  }
  size_t reserved() const { return policy.reserved() + planBytes; }
  void reset() {
    policy.reset();
    placed.clear();
  }
  void release() {
    for (void *b : blocks)
      loomrt_free(dev, space, b);
    if (planBase)
      loomrt_free(dev, space, planBase);
    planBase = nullptr;
    planBytes = 0;
    blocks.clear();
    policy.clear();
    placed.clear();
  }
};

/// The step's host thread (loomrt.host_task): runs queued host work in
/// order while the thread that issues the step goes on issuing GPU work, so
/// a CPU update starts when its gradient has landed, not when the issuing
/// thread, held back by the launch queue, reaches it. The first failure is
/// kept and returned by the next join; later tasks are skipped.
struct HostThread {
  std::mutex m;
  std::condition_variable wake, idle;
  struct Task {
    loomrt_host_fn fn;
    void *arg;
    void (*release)(void *);
  };
  std::deque<Task> queue;
  int64_t issued = 0, done = 0;
  loomrt_status error = LOOMRT_OK;
  std::string what;
  bool stop = false;
  std::thread worker;
  loomrt_device bindTo = nullptr;

  void run() {
    if (bindTo && loomrt_device_bind(bindTo) != LOOMRT_OK) {
      std::lock_guard<std::mutex> l(m);
      error = LOOMRT_ERR_BACKEND;
      what = std::string("binding the host thread to the device: ") + loomrt_last_error();
    }
    std::unique_lock<std::mutex> l(m);
    while (true) {
      wake.wait(l, [&] { return stop || !queue.empty(); });
      if (queue.empty())
        return; // stopped, nothing left
      Task t = queue.front();
      queue.pop_front();
      bool skip = error != LOOMRT_OK;
      l.unlock();
      loomrt_status st = skip ? LOOMRT_OK : t.fn(t.arg);
      std::string msg = st != LOOMRT_OK ? std::string(loomrt_last_error()) : std::string();
      if (t.release)
        t.release(t.arg);
      l.lock();
      if (st != LOOMRT_OK && error == LOOMRT_OK) {
        error = st;
        what = msg;
      }
      ++done;
      idle.notify_all();
    }
  }
  void enqueue(loomrt_host_fn fn, void *arg, void (*release)(void *)) {
    {
      std::lock_guard<std::mutex> l(m);
      if (!worker.joinable())
        worker = std::thread([this] { run(); });
      queue.push_back({fn, arg, release});
      ++issued;
    }
    wake.notify_one();
  }
  /// Waits for every task queued so far; the first failure, once.
  loomrt_status join() {
    std::unique_lock<std::mutex> l(m);
    idle.wait(l, [&] { return done == issued; });
    loomrt_status st = error;
    if (st != LOOMRT_OK) {
      error = LOOMRT_OK;
      loomrt::fail(st, "host task: " + what);
    }
    return st;
  }
  ~HostThread() {
    {
      std::lock_guard<std::mutex> l(m);
      stop = true;
    }
    wake.notify_all();
    if (worker.joinable())
      worker.join();
  }
};

/// LOOMRT_SLOW_LINK=RANKS:GBPS: this host stands for nodes of RANKS
/// consecutive ranks joined by a link of GBPS GB/s (10^9 bytes a second);
/// every communicator spanning two of them is shaped to it
/// (loomrt_comm_shape). rate 0: not set.
struct SlowLink {
  int64_t ranksPerNode = 0;
  double rate = 0;
  bool invalid = false; // set but not RANKS:GBPS in range
};
SlowLink slowLink();

} // namespace loomrt::driver

struct loomrt_step_ctx_t {
  loomrt_device dev = nullptr;
  loomrt_stream stream = nullptr;
  loomrt_comm comm = nullptr;
  // Collectives and copies run on their own streams, ordered against the
  // compute stream by events from a pool that every step reuses; work on
  // host memory (the CPU's optimizer update) runs on a host stream.
  loomrt_stream commStream = nullptr, hostStream = nullptr;
  loomrt_stream copyStreams[2] = {nullptr, nullptr}; // host->device, device->host
  loomrt_device hostDev = nullptr; // a CPU device when the step runs on a GPU
  std::vector<loomrt_event> events;
  size_t nextEvent = 0;
  float lrOverride = -1; // < 0: none
  // The learning-rate schedule's factor for this step (--lr-schedule), and
  // the rate the step's Adam last used (the log's "lr"; -1: none yet).
  double lrScale = 1.0;
  std::atomic<float> lastLr{-1.0f};
  // 1-bit Adam's variance refresh (loomrt_step_variance_*): the optimizer
  // step of the last variance update after the freeze (0: the compiled
  // freeze step) and the steps this step's update of v stands for.
  int64_t varianceStep = 0;
  int64_t varianceSteps = 1;
  uint64_t seed = 0; // --seed
  int64_t step = 0;  // the step being run, from 0 (dropout keys)
  loomrt::driver::Arena device, host; // step buffers on the device and in pinned host memory
  // Phases of the step: the compute stream's start and the point where the
  // backward issued its last gradient (loomrt_step_backward_done).
  loomrt_event phaseStart = nullptr, backwardDone = nullptr;
  bool backwardMarked = false;
  loomrt_trace trace = nullptr;
  int64_t phaseSpan = -1;
  // Communicators of groups smaller than the world (loomrt_step_group), by
  // the mask of their levels; made the first time a step asks.
  std::map<uint64_t, loomrt_comm> groups;
  // Host updates of this step (loomrt_step_host_begin/end): the step's start
  // on the host's clock, the first update's start after it, their sum.
  std::chrono::steady_clock::time_point stepStart, hostBegin;
  double hostFirstMs = -1, hostTotalMs = 0;
  int64_t hostSpan = -1;
  bool hostOpen = false;
  // Host tasks run on their own thread; the arenas are shared with it (the
  // ABI lets a task free step buffers; generated code frees them on the
  // issuing thread after the join).
  std::unique_ptr<loomrt::driver::HostThread> hostThread =
      std::make_unique<loomrt::driver::HostThread>();
  std::mutex arenaMutex;
  // loomrt_step_graph: each capturable function's graph, by its body (a
  // --replan binary's plans have functions of the same name), with what
  // it was captured with: the globals, inputs and planned region (the key)
  // and the results' pointers a replay hands back.
  struct Graph {
    loomrt_graph exec = nullptr;
    int64_t calls = 0, captures = 0;
    bool declined = false;
    std::vector<const void *> key;
    std::vector<void *> outs;
  };
  std::map<loomrt_graph_body, Graph> graphs;
  bool capturing = false;
  // loomrt_step_const: the device copy of each constant, by its address.
  std::map<const void *, void *> consts;
  int64_t allocs = 0; // runtime-placed buffers taken (a captured body takes none)

  /// The streams of a context on `d` (hostDev set first where the host is
  /// another device) with communicator `cm`.
  loomrt_status open(loomrt_device d, loomrt_comm cm) {
    dev = d;
    hostThread->bindTo = d;
    device.dev = host.dev = d;
    host.space = LOOMRT_MEM_PINNED;
    comm = cm;
    for (loomrt_stream *st : {&stream, &commStream, &copyStreams[0], &copyStreams[1]})
      if (loomrt_status e = loomrt_stream_create(d, st))
        return e;
    return loomrt_stream_create(hostDev ? hostDev : d, &hostStream);
  }
  /// Streams back; the devices are the caller's.
  void closeStreams() {
    for (loomrt_stream st : {hostStream, copyStreams[0], copyStreams[1], commStream, stream})
      if (st)
        loomrt_stream_destroy(st);
    hostStream = copyStreams[0] = copyStreams[1] = commStream = stream = nullptr;
  }

  void *alloc(size_t bytes) {
    std::lock_guard<std::mutex> l(arenaMutex);
    ++allocs;
    return device.alloc(bytes);
  }
  void *allocHost(size_t bytes) {
    std::lock_guard<std::mutex> l(arenaMutex);
    ++allocs;
    return host.alloc(bytes);
  }
  void free(void *p) {
    std::lock_guard<std::mutex> l(arenaMutex);
    if (!device.free(p))
      host.free(p);
  }
  size_t reserved() const { return device.reserved(); }
  loomrt_event event() {
    if (nextEvent == events.size()) {
      loomrt_event e;
      if (loomrt_event_create(dev, &e) != LOOMRT_OK)
        return nullptr;
      events.push_back(e);
    }
    return events[nextEvent++];
  }
  /// A new step, begun (host clock) at `start`.
  void reset(std::chrono::steady_clock::time_point start) {
    nextEvent = 0;
    backwardMarked = false;
    stepStart = start;
    hostFirstMs = -1;
    hostTotalMs = 0;
    hostOpen = false;
    device.reset();
    host.reset();
  }
  /// Bytes sent through the world's communicator and the groups'.
  uint64_t sent() const {
    uint64_t b = loomrt_comm_bytes_sent(comm, -1);
    for (auto &[mask, g] : groups)
      b += loomrt_comm_bytes_sent(g, -1);
    return b;
  }
  /// Frees the arenas, the events and the groups' communicators; must run
  /// before the device is closed and the world's communicator destroyed.
  void release() {
    hostThread.reset(); // its tasks have been joined; the thread ends
    for (auto &[body, g] : graphs)
      loomrt_graph_destroy(g.exec);
    graphs.clear();
    for (auto &[data, copy] : consts)
      loomrt_free(dev, LOOMRT_MEM_DEVICE, copy);
    consts.clear();
    for (auto &[mask, g] : groups)
      loomrt_comm_destroy(g);
    groups.clear();
    for (loomrt_event e : {phaseStart, backwardDone})
      if (e)
        loomrt_event_destroy(e);
    for (loomrt_event e : events)
      loomrt_event_destroy(e);
    events.clear();
    device.release();
    host.release();
  }
};


#endif // LOOMRT_DRIVER_STEP_CTX_H
