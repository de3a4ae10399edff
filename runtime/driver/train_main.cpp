// train_main.cpp: the driver of generated training binaries (see train.h).
// Data order, language models: step s reads B*T+1 tokens at offset (s*B*T)
// mod (N - B*T - 1); inputs are the first B*T tokens as [B, T], targets the
// next-token shift - the order PyTorch reference runs use, so losses
// compare step by step. Array inputs (classifiers, graph models): step s
// reads rows (s*B + r) mod N of every input's file, r < B (the whole world's
// batch; rank k takes rows [k*B, (k+1)*B) of it).
#include "loomrt/train.h"
#include "common/backend.h"
#include "common/adam_math.h"
#include "loomrt/arena_policy.h"
#include "common/file_util.h"
#include "driver/checkpoint_set.h"
#include "driver/arrays.h"
#include "driver/graph.h"
#include "driver/tokens.h"

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
  uint64_t seed = 0; // --seed
  int64_t step = 0;  // the step being run, from 0 (dropout keys)
  Arena device, host; // step buffers on the device and in pinned host memory
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
  std::unique_ptr<HostThread> hostThread = std::make_unique<HostThread>();
  std::mutex arenaMutex;

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
    return device.alloc(bytes);
  }
  void *allocHost(size_t bytes) {
    std::lock_guard<std::mutex> l(arenaMutex);
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

namespace {
/// LOOMRT_SLOW_LINK=RANKS:GBPS: this host stands for nodes of RANKS
/// consecutive ranks joined by a link of GBPS GB/s (10^9 bytes a second);
/// every communicator spanning two of them is shaped to it
/// (loomrt_comm_shape). rate 0: not set.
struct SlowLink {
  int64_t ranksPerNode = 0;
  double rate = 0;
  bool invalid = false; // set but not RANKS:GBPS in range
};
SlowLink slowLink() {
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

} // namespace

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
  return c->lrOverride > 0 ? c->lrOverride : compiled;
}
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

namespace {

struct Flags {
  std::string data, logJson, ckptDir, trace, weights, init = "model", sample = "sequential";
  std::string graph, dumpSamples; // graph models: --graph DIR, --dump-samples DIR
  long steps = 10, ckptEvery = 0;
  double commTimeout = 0; // seconds; 0: LOOMRT_COMM_TIMEOUT or the default
  double lr = -1;
  unsigned long long seed = 0;
  bool resume = false;
  std::vector<std::pair<std::string, std::string>> inputs; // --input NAME=FILE
};

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
      "          [--resume] [--trace FILE] [--comm-timeout S] [--sample sequential|random]\n\n"
      "Trains %s (batch %lld%s) on %s.\n\n"
      "%s"
      "  --steps N              steps to run (default 10)\n"
      "  --sample MODE          sequential (default): step s reads the batch's rows\n"
      "                         one after the other at s x batch x seq; random: each\n"
      "                         row at its own offset, drawn from --seed, the step and\n"
      "                         the row (resume with the same --seed: the same rows)\n"
      "  --lr LR                learning rate (default: the compiled one)\n"
      "  --seed S               seed of the initial weights (default 0)\n"
      "  --init model|random    start from the model's weights (default) or draw\n"
      "                         every parameter from its initialiser and --seed\n"
      "  --weights FILE         the imported weights (default: %s)\n"
      "  --log-json FILE        one JSON object per step: step, loss, step_ms, tokens_per_s\n"
      "  --checkpoint-dir DIR   where DIR/checkpoint.safetensors is written\n"
      "  --checkpoint-every K   save every K steps (and after the last)\n"
      "  --resume               continue from DIR/checkpoint.safetensors\n"
      "  --trace FILE           Chrome trace JSON of the steps (opens in Perfetto)\n"
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
             : "  --data FILE            raw little-endian uint16 tokens (nanoGPT's train.bin)\n",
      p->weights ? p->weights : "none, the model has initialisers",
      p->world > 1 ? ("\nCompiled for " + std::to_string(p->world) +
                      " data-parallel ranks (ZeRO stage " + std::to_string(p->zero_stage) +
                      "): start it with mpirun -np " + std::to_string(p->world) +
                      " (CPU) or torchrun-style RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR/"
                      "MASTER_PORT variables (GPU).\n")
                         .c_str()
                   : "");
}

bool parse(int argc, char **argv, const loomrt_program *p, Flags &f,
           std::string &err) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i], inlineValue;
    bool hasInline = false;
    if (size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      inlineValue = a.substr(eq + 1); // --flag=value as well as --flag value
      a = a.substr(0, eq);
      hasInline = true;
    }
    auto value = [&](std::string &out) {
      if (hasInline)
        return out = inlineValue, true;
      if (i + 1 >= argc)
        return err = "missing value after " + a, false;
      out = argv[++i];
      return true;
    };
    // Finite numbers only: --lr=inf or --steps=1e30 are typos, not
    // requests (a step count past the range of a long trained 0 steps).
    auto number = [&](double &out, double min, double max = 1e300) {
      std::string v;
      if (!value(v))
        return false;
      char *end = nullptr;
      out = std::strtod(v.c_str(), &end);
      if (v.empty() || *end || !std::isfinite(out) || !(out >= min) || out > max)
        return err = a + " expects a number in [" + fmt(min) + ", " + fmt(max) +
                     "], got '" + v + "'",
               false;
      return true;
    };
    auto integer = [&](long &out, long min, long max) {
      std::string v;
      if (!value(v))
        return false;
      char *end = nullptr;
      errno = 0;
      long long x = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end || errno || x < min || x > max)
        return err = a + " expects a whole number in [" + std::to_string(min) + ", " +
                     std::to_string(max) + "], got '" + v + "'",
               false;
      out = long(x);
      return true;
    };
    long k;
    double x;
    if (a == "--help" || a == "-h") {
      usage(argv[0], p);
      std::exit(0);
    } else if (a == "--data") {
      if (!value(f.data))
        return false;
    } else if (a == "--graph") {
      if (!value(f.graph))
        return false;
    } else if (a == "--dump-samples") {
      if (!value(f.dumpSamples))
        return false;
    } else if (a == "--input") {
      std::string v;
      if (!value(v))
        return false;
      size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
        return err = "--input expects NAME=FILE.npy, got '" + v + "'", false;
      f.inputs.push_back({v.substr(0, eq), v.substr(eq + 1)});
    } else if (a == "--log-json") {
      if (!value(f.logJson))
        return false;
    } else if (a == "--checkpoint-dir") {
      if (!value(f.ckptDir))
        return false;
    } else if (a == "--trace") {
      if (!value(f.trace))
        return false;
    } else if (a == "--steps") {
      if (!integer(f.steps, 1, 1000000000000L))
        return false;
    } else if (a == "--checkpoint-every") {
      if (!integer(f.ckptEvery, 1, 1000000000000L))
        return false;
    } else if (a == "--lr") {
      if (!number(x, 1e-12, 1e6))
        return false;
      f.lr = x;
    } else if (a == "--seed") {
      if (!integer(k, 0, std::numeric_limits<long>::max()))
        return false;
      f.seed = (unsigned long long)k;
    } else if (a == "--weights") {
      if (!value(f.weights))
        return false;
    } else if (a == "--init") {
      if (!value(f.init))
        return false;
      if (f.init != "model" && f.init != "random")
        return err = "--init expects 'model' or 'random', got '" + f.init + "'", false;
    } else if (a == "--sample") {
      if (!value(f.sample))
        return false;
      if (f.sample != "sequential" && f.sample != "random")
        return err = "--sample expects 'sequential' or 'random', got '" + f.sample + "'", false;
    } else if (a == "--resume") {
      f.resume = true;
    } else if (a == "--comm-timeout") {
      if (!number(x, 1e-3, 1e7))
        return false;
      f.commTimeout = x;
    } else {
      return err = "unknown flag '" + a + "' (see --help)", false;
    }
  }
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
  if ((f.resume || f.ckptEvery) && f.ckptDir.empty())
    return err = "--resume and --checkpoint-every need --checkpoint-dir", false;
  return true;
}

/// A relative file name resolved against the executable's folder, so a
/// binary finds the weights loomc wrote beside it from any working folder.
std::string besideExecutable(const std::string &name) {
  if (name.empty() || name[0] == '/')
    return name;
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0)
    return name;
  std::string dir(exe, size_t(n));
  return dir.substr(0, dir.rfind('/') + 1) + name;
}

size_t dtypeBytes(loomrt_dtype d) {
  return d == LOOMRT_BF16 ? 2 : d == LOOMRT_I64 ? 8 : 4;
}
/// Host memory standing for one global.
struct HostView {
  uint8_t *ptr = nullptr;
  size_t bytes = 0;
  uint8_t *data() const { return ptr; }
  size_t size() const { return bytes; }
};

size_t numel(const loomrt_global_desc &g) {
  size_t n = 1;
  for (int d = 0; d < g.rank; ++d)
    n *= size_t(g.shape[d]);
  return n;
}

#define TRY(expr, what)                                                        \
  do {                                                                         \
    if ((expr) != LOOMRT_OK)                                                   \
      return die(std::string(what) + ": " + loomrt_last_error());              \
  } while (0)

/// A fresh run's parameters and state in their host views: drawn from
/// --seed in declaration order (ZeRO-3 shards: every member, keeping this
/// rank's block), imported values over their stand-ins, working copies from
/// their masters. Returns 0 or die()'s code.
int initialiseGlobals(const loomrt_program *p, const Flags &f, int rank,
                      std::vector<HostView> &host) {
  std::unique_ptr<loomrt_rng_t, void (*)(loomrt_rng)> rng(loomrt_rng_create(f.seed),
                                                         loomrt_rng_destroy);
  // ZeRO-3 shards: every rank draws all members of a shard (the same
  // stream as one rank drawing the unsharded parameters) into the full
  // bucket, then keeps its block.
  std::vector<std::vector<float>> full(p->num_globals);
  std::vector<loomrt_tensor_ref> fromWeights;
  std::vector<std::pair<float *, const loomrt_global_desc *>> splats;
  auto ref = [](const loomrt_global_desc &g, void *data) {
    loomrt_tensor_ref t{g.name, g.dtype, g.rank, {}, data};
    for (int d = 0; d < g.rank; ++d)
      t.shape[d] = g.shape[d];
    return t;
  };
  // Where member k of a shard starts in its bucket.
  auto memberOffsets = [&](const loomrt_global_desc &g, std::vector<size_t> &offs) -> bool {
    size_t off = 0, align = size_t(std::max<int64_t>(g.member_align, 1));
    offs.clear();
    for (size_t k = 0; k < g.num_members; ++k) {
      off = (off + align - 1) / align * align;
      offs.push_back(off);
      off += numel(g.members[k]);
    }
    return off <= size_t(g.padded_numel);
  };
  std::vector<size_t> offs;
  // The part [from, to) of member k (at offs[k]) that lies in this rank's
  // block of shard g's bucket; empty when from == to.
  auto inBlock = [&](const loomrt_global_desc &g, size_t k) {
    size_t lo = numel(g) * size_t(rank), hi = lo + numel(g);
    size_t from = std::max(lo, offs[k]), to = std::min(hi, offs[k] + numel(g.members[k]));
    return std::pair<size_t, size_t>{from, std::max(from, to)};
  };
  for (size_t i = 0; i < p->num_globals; ++i) {
    const loomrt_global_desc &g = p->globals[i];
    // A shard of parameters that are globals themselves (ZeRO 1-2 master
    // weights): its block is copied from them once they hold their final
    // values (below), nothing is drawn for it.
    if (g.num_members && g.members[0].mirror_of > 0)
      continue;
    if (g.num_members) {
      if (!memberOffsets(g, offs))
        return die(std::string("shard ") + g.name + ": its members do not fit its " +
                   std::to_string(g.padded_numel) + " elements");
      bool anyImported = false;
      for (size_t k = 0; k < g.num_members; ++k)
        anyImported |= g.members[k].from_weights != 0;
      if (!anyImported) {
        // Only this rank's block is drawn (the counter-based stream gives
        // each element the value one rank drawing everything would).
        float *block = reinterpret_cast<float *>(host[i].data());
        std::memset(block, 0, host[i].size()); // the padding and the gaps
        for (size_t k = 0; k < g.num_members; ++k) {
          const loomrt_global_desc &m = g.members[k];
          auto [from, to] = inBlock(g, k);
          size_t count = to - from;
          TRY(loomrt_rng_fill_part(rng.get(), m.init_kind, m.a, m.b,
                                   count ? block + (from - numel(g) * size_t(rank)) : nullptr,
                                   numel(m), count ? from - offs[k] : 0, count),
              std::string("initialising ") + m.name);
        }
        continue;
      }
      full[i].assign(size_t(g.padded_numel), 0.0f);
      // Imported values go into the whole bucket (below), then this rank
      // keeps its block.
      for (size_t k = 0; k < g.num_members; ++k) {
        const loomrt_global_desc &m = g.members[k];
        float *at = full[i].data() + offs[k];
        TRY(loomrt_rng_fill(rng.get(), m.init_kind, m.a, m.b, at, numel(m)),
            std::string("initialising ") + m.name);
        if (m.from_weights == 1)
          fromWeights.push_back(ref(m, at));
        else if (m.from_weights == 2)
          splats.push_back({at, &m});
      }
      continue;
    }
    if (g.dtype != LOOMRT_F32)
      continue; // integer state starts at zero
    TRY(loomrt_rng_fill(rng.get(), g.init_kind, g.a, g.b,
                        reinterpret_cast<float *>(host[i].data()), numel(g)),
        std::string("initialising ") + g.name);
    if (g.from_weights == 1)
      fromWeights.push_back(ref(g, host[i].data()));
    else if (g.from_weights == 2)
      splats.push_back({reinterpret_cast<float *>(host[i].data()), &g});
  }
  // Imported values overwrite their stand-in draws (drawn anyway, so the
  // other parameters get the same values under either --init).
  if (f.init == "model")
    for (auto [data, g] : splats)
      std::fill(data, data + numel(*g), float(g->splat));
  if (f.init == "model" && (p->weights || !f.weights.empty()) && !fromWeights.empty()) {
    std::string file = f.weights.empty() ? besideExecutable(p->weights) : f.weights;
    TRY(loomrt_checkpoint_load(file.c_str(), fromWeights.data(), fromWeights.size()),
        "loading the initial weights");
  }
  for (size_t i = 0; i < p->num_globals; ++i) {
    const loomrt_global_desc &g = p->globals[i];
    if (!g.num_members)
      continue;
    if (g.members[0].mirror_of > 0) {
      // This rank's block, straight from the members' final values.
      if (!memberOffsets(g, offs))
        return die(std::string("shard ") + g.name + ": its members do not fit its " +
                   std::to_string(g.padded_numel) + " elements");
      float *block = reinterpret_cast<float *>(host[i].data());
      std::memset(block, 0, host[i].size()); // the padding and the gaps
      for (size_t k = 0; k < g.num_members; ++k) {
        const loomrt_global_desc &m = g.members[k];
        size_t src = size_t(m.mirror_of - 1);
        if (m.mirror_of <= 0 || src >= i || p->globals[src].dtype != LOOMRT_F32 ||
            numel(p->globals[src]) != numel(m))
          return die(std::string("shard ") + g.name + ": member " + m.name +
                     " does not match the global it copies");
        auto [from, to] = inBlock(g, k);
        std::memcpy(block + (from - numel(g) * size_t(rank)),
                    reinterpret_cast<const float *>(host[src].data()) + (from - offs[k]),
                    (to - from) * sizeof(float));
      }
      continue;
    }
    if (full[i].empty())
      continue; // drawn as this rank's block
    std::memcpy(host[i].data(), full[i].data() + numel(g) * size_t(rank), host[i].size());
    std::vector<float>().swap(full[i]);
  }
  // Working copies start as their master weights: the same bytes, or an
  // fp32 master rounded to a bf16 working copy (what the update's
  // mixed-precision refresh writes each step, rounded the same way).
  for (size_t i = 0; i < p->num_globals; ++i) {
    const loomrt_global_desc &g = p->globals[i];
    if (g.mirror_of <= 0)
      continue;
    size_t m = size_t(g.mirror_of - 1);
    const loomrt_global_desc &master = p->globals[m];
    bool narrow = master.dtype == LOOMRT_F32 && g.dtype == LOOMRT_BF16 &&
                  numel(master) == numel(g);
    if (m >= i || (host[m].size() != host[i].size() && !narrow))
      return die(std::string("the working copy ") + g.name + " does not match its master");
    if (!narrow || master.dtype == g.dtype) {
      std::memcpy(host[i].data(), host[m].data(), host[i].size());
      continue;
    }
    const float *src = reinterpret_cast<const float *>(host[m].data());
    uint16_t *dst = reinterpret_cast<uint16_t *>(host[i].data());
    long n = long(numel(g));
#pragma omp parallel for schedule(static)
    for (long k = 0; k < n; ++k)
      dst[k] = loomrt::floatToBf16(src[k]);
  }
  return 0;
}

/// One line of --log-json for a finished step.
void logStep(std::FILE *log, long step, float loss, double ms, double tps, const char *unit,
             float backwardMs, const loomrt_step_ctx_t &ctx, long long commBytes,
             const std::string &byGroup, double dataWaitMs) {
  // JSON has no NaN or infinity: a non-finite loss is logged as null.
  char lossText[32] = "null";
  if (std::isfinite(loss))
    std::snprintf(lossText, sizeof lossText, "%.8g", loss);
  char phases[256] = "";
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
    std::snprintf(phases + n, sizeof phases - size_t(n), ", \"data_wait_ms\": %.4f", dataWaitMs);
  std::fprintf(log, "{\"step\": %ld, \"loss\": %s, \"step_ms\": %.4f, \"%s_per_s\": %.1f%s%s%s%s}\n",
               step, lossText, ms, unit, tps, phases,
               byGroup.empty() ? "" : ", \"comm_bytes_by_group\": {", byGroup.c_str(),
               byGroup.empty() ? "" : "}");
  std::fflush(log);
}

/// What the run held: device memory (what loomc's prediction counts) apart
/// from pinned host memory (offloaded state, the host step arena).
void reportMemory(const loomrt_program *p, const std::vector<HostView> &host,
                  loomrt_step_ctx_t &ctx, int world) {
  size_t onDevice = 0, pinned = 0;
  for (size_t i = 0; i < p->num_globals; ++i)
    (p->globals[i].space == LOOMRT_MEM_PINNED ? pinned : onDevice) += host[i].size();
  std::printf("step memory: %.1f MiB of activations and workspace, %.1f MiB of "
              "parameters and optimizer state%s\n",
              double(ctx.reserved()) / (1 << 20), double(onDevice) / (1 << 20),
              world > 1 ? " (this rank's)" : "");
  if (pinned || ctx.host.reserved())
    std::printf("pinned host memory: %.1f MiB of parameters and optimizer state, %.1f MiB "
                "of step buffers\n",
                double(pinned) / (1 << 20), double(ctx.host.reserved()) / (1 << 20));
}

/// One training run of a generated program: loomrt_train_main sets it up
/// phase by phase (each a member returning 0 or die()'s exit code), steps it
/// and tears it down. Members that other threads write through (the DiLoCo
/// exchange in flight, the sampler one step ahead) are joined before the
/// buffers they use go: the exchange in the destructor, the sampler's
/// future by being the last member.
class TrainRun {
public:
  TrainRun(const loomrt_program *p, const Flags &f) : p(p), f(f) {}
  TrainRun(const TrainRun &) = delete;
  TrainRun &operator=(const TrainRun &) = delete;
  ~TrainRun() {
    if (inflight.joinable())
      inflight.join();
  }

  int loadData();
  int joinWorld();
  int openContexts();
  int setupGlobals();
  int setupInputs();
  int train();
  void finish();

private:
  int fillBatch(long step, double &dataWaitMs);
  int runOuterSteps(long step, uint64_t &sideBytes);
  int joinSide();
  int saveCheckpoint(long stepDone);
  std::vector<loomrt_tensor_ref> refs() const;
  int64_t draw(long step, int64_t row, uint64_t range) const;
  int report(long step, float loss, double ms, double dataWaitMs, uint64_t sentBefore,
             uint64_t sideBytes, const std::map<uint64_t, uint64_t> &groupBefore);

  const loomrt_program *p;
  const Flags &f;
  std::string err;

  // The data: tokens for the whole world's batch, or every input's rows.
  bool arrays = false, graphTask = false;
  std::vector<uint16_t> tokens;
  std::vector<loomrt::ArrayInput> data;
  loomrt::Graph graph;

  // This rank's place in the world.
  int world = 1, rank = 0;
  bool lead = true;
  loomrt_device dev = nullptr;
  loomrt_comm comm = nullptr;
  // bt: what one rank's step takes (tokens, or rows of arrays); gbt the
  // world's; mine: this rank's first row of each global batch.
  int64_t bt = 0, n = 0, gbt = 0, mine = 0;
  const char *unit = "tokens";

  loomrt_step_ctx_t ctx;
  loomrt_stream s = nullptr;
  // Streaming DiLoCo's async exchanges run on a thread of their own with a
  // step context of their own (streams, events, arena) and a duplicate of
  // the communicator, beside the inner steps that follow them, where the
  // transport allows two threads at once (loomrt_comm_concurrent); else
  // between two steps, as the other outer entries.
  loomrt_step_ctx_t side;
  loomrt_comm sideComm = nullptr;
  std::thread inflight;
  loomrt_status inflightSt = LOOMRT_OK;
  std::string inflightWhat;
  uint64_t sideSent = 0;

  // Parameters and state. The host side of each global (initialisation,
  // checkpoints): its own buffer in pinned memory (the CPU reads it
  // directly: a 5B model's offloaded state is 60 GB, which the host should
  // hold once), else a copy.
  std::vector<void *> G;
  std::vector<HostView> host;
  std::vector<std::vector<uint8_t>> hostCopies;
  std::optional<loomrt::CheckpointSet> ckpt;
  long firstStep = 0;

  std::FILE *log = nullptr;
  loomrt_trace trace = nullptr;

  // One device buffer per input of the step, filled from host staging (a
  // graph model's: gSets); a graph's feature table is read once into the
  // memory the compiler placed it in and given to every step as it is.
  size_t nIn = 0;
  std::vector<std::vector<uint8_t>> hIn;
  // A graph model's staging is pinned (its uploads are asynchronous and run
  // at the copy engine's rate: 2 MB of ids and weights a step at batch
  // 1024, 15-10), one set the step reads and one the sampler writes.
  std::vector<uint8_t *> gSets[2];
  std::vector<void *> dIn;
  std::vector<loomrt_mem_space> dSpace;
  // A pinned feature table shared by this host's ranks (one copy in host
  // memory however many GPUs read it).
  std::vector<std::unique_ptr<loomrt::SharedTable>> shared;
  std::vector<size_t> inBytes;
  std::optional<loomrt::Sampler> sampler;
  std::vector<std::vector<int64_t>> padded[2];
  bool warnedNonFinite = false;
  std::chrono::steady_clock::time_point start;
  // The sampler runs one step ahead on a thread of its own: last, so that
  // it is joined before what it writes goes.
  std::future<void> nextSample;
};

int TrainRun::loadData() {
  // Outputs named on the command line are checked before any work: an
  // unwritable trace found after training loses the run's trace.
  if (!f.trace.empty()) {
    std::string dir = loomrt::folderOf(f.trace);
    if (int e = loomrt::folderWriteError(dir, "trace"))
      return die("cannot write the trace '" + f.trace + "': folder '" + dir + "': " +
                 std::strerror(e));
  }
  arrays = p->task == LOOMRT_TASK_ARRAYS;
  graphTask = p->task == LOOMRT_TASK_GRAPH;
  data.resize(arrays ? p->num_inputs : 0);
  if (graphTask && (p->num_fanouts < 1 || !p->fanouts))
    return die("this graph program has no fan-outs; compile it again with loomc");
  if (graphTask && !loomrt::loadGraph(f.graph, *p, graph, err))
    return die(err);
  if (graphTask && !f.dumpSamples.empty())
    if (int e = loomrt::folderWriteError(f.dumpSamples, "samples"))
      return die("cannot write samples to '" + f.dumpSamples + "': " + std::strerror(e));
  if (!arrays && !graphTask &&
      !loomrt::loadTokens(f.data, p->vocab, p->batch * std::max(1, p->world), p->seq, tokens,
                          err))
    return die(err);
  for (size_t i = 0; i < data.size(); ++i) {
    for (auto &[name, file] : f.inputs)
      if (name == p->inputs[i].name && !loomrt::loadNpy(file, p->inputs[i], data[i], err))
        return die(err);
    if (data[i].rows != data[0].rows)
      return die("inputs '" + std::string(p->inputs[0].name) + "' and '" + p->inputs[i].name +
                 "' have " + std::to_string(data[0].rows) + " and " +
                 std::to_string(data[i].rows) + " rows; every input needs one row per sample");
  }
  return 0;
}

/// Data parallelism: this rank's place in the world the step was compiled
/// for. The device is the rank's local GPU (LOCAL_RANK); CPU ranks share
/// the host.
int TrainRun::joinWorld() {
  if (f.commTimeout > 0)
    setenv("LOOMRT_COMM_TIMEOUT", std::to_string(f.commTimeout).c_str(), 1);
  world = p->world < 1 ? 1 : p->world;
  int ordinal = p->backend == LOOMRT_BACKEND_CPU ? 0 : loomrt_local_rank();
  TRY(loomrt_device_open(p->backend, ordinal, &dev), "opening the device");
  TRY(loomrt_comm_init_from_env(dev, &comm), "joining the ranks");
  // Whether the ranks that remain may go on when one is lost: only where
  // every rank holds the whole state (the compiler says so).
  TRY(loomrt_comm_set_elastic(comm, p->elastic), "joining the ranks");
  SlowLink link = slowLink();
  if (link.invalid)
    return die(std::string("LOOMRT_SLOW_LINK='") + std::getenv("LOOMRT_SLOW_LINK") +
               "' is not RANKS:GBPS with 1 <= RANKS <= 1048576 and 1e-6 <= GBPS <= 1e4 "
               "(e.g. 2:12.5)");
  if (link.rate > 0 && loomrt_comm_size(comm) > link.ranksPerNode) {
    TRY(loomrt_comm_shape(comm, link.rate), "LOOMRT_SLOW_LINK");
    if (loomrt_comm_rank(comm) == 0)
      std::fprintf(stderr, "loomrt: nodes of %lld ranks joined by an emulated %.3g GB/s link "
                           "(LOOMRT_SLOW_LINK): collectives spanning nodes are held to it\n",
                   (long long)link.ranksPerNode, link.rate / 1e9);
  }
  rank = loomrt_comm_rank(comm);
  int ranks = loomrt_comm_size(comm);
  if (ranks != world)
    return die(world == 1
                   ? "this binary trains on one rank but was started on " +
                         std::to_string(ranks) +
                         "; compile it with loomc --topology (e.g. --topology gpu=" +
                         std::to_string(ranks) + ") to train data-parallel"
                   : "this binary was compiled for " + std::to_string(world) +
                         " data-parallel ranks (loomc --topology) but was started on " +
                         std::to_string(ranks));
  // Only rank 0 talks; every rank reports errors.
  lead = rank == 0;
  if (!lead && !std::freopen("/dev/null", "w", stdout))
    return die("cannot silence the output of rank " + std::to_string(rank));

  // Rank r trains on rows [r*batch, (r+1)*batch) of each global batch.
  bt = arrays || graphTask ? p->batch : p->batch * p->seq;
  n = graphTask ? int64_t(graph.train.size()) : arrays ? data[0].rows : int64_t(tokens.size());
  gbt = bt * world;
  mine = bt * rank;
  unit = graphTask ? "seeds" : arrays ? "samples" : "tokens";
  return 0;
}

/// The step's context (streams, events, arena) and, for DiLoCo's async
/// exchanges, the side context they run on.
int TrainRun::openContexts() {
  ctx.lrOverride = float(f.lr);
  // Host work runs on the CPU backend; on a CPU target that is this device.
  if (p->backend != LOOMRT_BACKEND_CPU)
    TRY(loomrt_device_open(LOOMRT_BACKEND_CPU, 0, &ctx.hostDev), "opening the host device");
  TRY(ctx.open(dev, comm), "creating the step's streams");
  s = ctx.stream;
  bool anyAsync = false;
  for (size_t k = 0; k < p->num_outer; ++k)
    anyAsync = anyAsync || p->outer[k].async;
  if (anyAsync && loomrt_comm_concurrent(comm)) {
    TRY(loomrt_comm_dup(comm, &sideComm), "DiLoCo: a second communicator for the exchanges");
    side.lrOverride = ctx.lrOverride;
    side.hostDev = ctx.hostDev;
    TRY(side.open(dev, sideComm), "DiLoCo: the exchanges' streams");
  } else if (anyAsync) {
    std::printf("DiLoCo: the outer exchanges run between inner steps (this transport cannot "
                "run two collectives at once: NCCL, or MPI without MPI_THREAD_MULTIPLE)\n");
  }
  TRY(loomrt_event_create(dev, &ctx.phaseStart), "creating an event");
  TRY(loomrt_event_create(dev, &ctx.backwardDone), "creating an event");
  return 0;
}

/// Waits for the exchange in flight; its bytes count from now.
int TrainRun::joinSide() {
  if (!inflight.joinable())
    return 0;
  inflight.join();
  if (inflightSt != LOOMRT_OK)
    return die(inflightWhat);
  return 0;
}

std::vector<loomrt_tensor_ref> TrainRun::refs() const {
  std::vector<loomrt_tensor_ref> r;
  for (size_t i = 0; i < p->num_globals; ++i) {
    const loomrt_global_desc &g = p->globals[i];
    loomrt_tensor_ref t{g.name, g.dtype, g.rank, {}, host[i].data()};
    for (int d = 0; d < g.rank; ++d)
      t.shape[d] = g.shape[d];
    r.push_back(t);
  }
  return r;
}

/// Parameters and state: allocated where the compiler placed them,
/// initialised in declaration order from --seed or restored from the
/// checkpoint, and uploaded; then the log and the trace.
int TrainRun::setupGlobals() {
  G.assign(p->num_globals, nullptr);
  host.assign(p->num_globals, HostView{});
  hostCopies.assign(p->num_globals, {});
  for (size_t i = 0; i < p->num_globals; ++i) {
    const loomrt_global_desc &g = p->globals[i];
    size_t bytes = numel(g) * dtypeBytes(g.dtype);
    TRY(loomrt_alloc(dev, g.space, bytes ? bytes : 8, &G[i]), std::string("allocating ") + g.name);
    if (g.space == LOOMRT_MEM_PINNED) {
      host[i] = {static_cast<uint8_t *>(G[i]), bytes};
      if (g.dtype != LOOMRT_F32) // fp32 globals are all drawn below
        std::memset(G[i], 0, bytes);
    } else {
      hostCopies[i].assign(bytes, 0);
      host[i] = {hostCopies[i].data(), bytes};
    }
  }
  // Each rank saves its own part (ZeRO partitions state); a manifest
  // commits one step for all of them (driver/checkpoint_set.h).
  ckpt.emplace(f.ckptDir, p->model, rank, world, p->zero_stage, dev, s, comm);
  if (!f.ckptDir.empty())
    TRY(ckpt->open(!f.resume), "checkpoints");
  // The data offset (step * global batch tokens) must stay an int64.
  long maxStep = long(std::numeric_limits<int64_t>::max() / gbt) - f.steps;
  if (f.resume) {
    TRY(ckpt->resume(refs(), maxStep, firstStep), "resuming");
    std::printf("resumed from %s at step %ld\n", ckpt->partPath(firstStep, rank).c_str(),
                firstStep);
  } else if (int rc = initialiseGlobals(p, f, rank, host)) {
    return rc;
  }
  for (size_t i = 0; i < p->num_globals; ++i)
    if (host[i].data() != G[i])
      TRY(loomrt_memcpy_async(s, G[i], host[i].data(), host[i].size()), "upload");

  if (lead && !f.logJson.empty()) {
    // Appended to, never through a planted symbolic link, never a FIFO.
    std::string why;
    if (!(log = loomrt::fopenForAppend(f.logJson, "--log-json file", why)))
      return die(why);
  }
  if (lead && !f.trace.empty())
    TRY(loomrt_trace_create(s, &trace), "starting the trace");
  return 0;
}

int TrainRun::saveCheckpoint(long stepDone) {
  if (int rc = joinSide())
    return rc;
  for (size_t i = 0; i < p->num_globals; ++i)
    if (host[i].data() != G[i])
      TRY(loomrt_memcpy_async(s, host[i].data(), G[i], host[i].size()), "download");
  TRY(loomrt_stream_synchronize(s), "download");
  TRY(ckpt->save(stepDone, refs()), "saving the checkpoint");
  return 0;
}

/// The step's input buffers and their host staging; a graph model's
/// feature table, read once; the sampler.
int TrainRun::setupInputs() {
  nIn = p->num_inputs;
  hIn.assign(nIn, {});
  dIn.assign(nIn, nullptr);
  dSpace.assign(nIn, LOOMRT_MEM_DEVICE);
  shared.resize(nIn);
  inBytes.assign(nIn, 0);
  for (size_t i = 0; i < nIn; ++i) {
    const loomrt_input_desc &in = p->inputs[i];
    if (in.role == LOOMRT_INPUT_NODE_TABLE && in.space == LOOMRT_MEM_PINNED &&
        loomrt::localRanks() > 1) {
      int local = loomrt_local_rank(), locals = loomrt::localRanks();
      std::printf("%s %s/features.npy (%.3g GB) in host memory shared by the %d ranks of "
                  "this host\n",
                  local == 0 ? "reading" : "mapping", f.graph.c_str(),
                  double(in.shape[0]) * double(in.shape[1]) * 4 / 1e9, locals);
      std::fflush(stdout);
      shared[i] = std::make_unique<loomrt::SharedTable>();
      // The object's name goes from local rank 0 to the others through the
      // job's own collectives (device buffers: NCCL reads device memory).
      loomrt::AllGather gather{loomrt_comm_size(comm), [&](const void *mine, size_t n,
                                                          void *all) {
        size_t total = n * size_t(loomrt_comm_size(comm));
        void *d = nullptr;
        if (loomrt_alloc(dev, LOOMRT_MEM_DEVICE, total + n, &d) != LOOMRT_OK)
          return false;
        char *dm = static_cast<char *>(d) + total;
        bool ok = loomrt_memcpy_async(s, dm, mine, n) == LOOMRT_OK &&
                  loomrt_all_gather_bytes(comm, s, dm, d, n) == LOOMRT_OK &&
                  loomrt_memcpy_async(s, all, d, total) == LOOMRT_OK &&
                  loomrt_stream_synchronize(s) == LOOMRT_OK;
        loomrt_free(dev, LOOMRT_MEM_DEVICE, d);
        return ok;
      }};
      if (!loomrt::loadSharedFeatures(f.graph, in, local, gather, *shared[i], err))
        return die(err);
      TRY(loomrt_host_register(dev, shared[i]->data, shared[i]->bytes),
          "pinning the shared feature table");
      dIn[i] = shared[i]->data;
      continue;
    }
    if (in.role == LOOMRT_INPUT_NODE_TABLE) {
      dSpace[i] = in.space;
      std::printf("reading %s/features.npy (%.3g GB) into %s memory\n", f.graph.c_str(),
                  double(in.shape[0]) * double(in.shape[1]) * 4 / 1e9,
                  in.space == LOOMRT_MEM_PINNED ? "pinned host" : "device");
      std::fflush(stdout);
      // Pinned (and the CPU backend's) tables are read in place; a device
      // table through a host copy.
      bool direct = in.space == LOOMRT_MEM_PINNED || p->backend == LOOMRT_BACKEND_CPU;
      std::vector<uint8_t> staging;
      size_t tableBytes = 0;
      loomrt_status st = LOOMRT_OK;
      bool ok = loomrt::loadFeatures(
          f.graph, in,
          [&](size_t bytes) -> void * {
            tableBytes = bytes;
            st = loomrt_alloc(dev, in.space, std::max<size_t>(bytes, 8), &dIn[i]);
            if (st != LOOMRT_OK)
              return nullptr;
            if (direct)
              return dIn[i];
            staging.resize(bytes);
            return staging.data();
          },
          err);
      if (st != LOOMRT_OK)
        return die("allocating the feature table: " + std::string(loomrt_last_error()));
      if (!ok)
        return die(err);
      if (!direct) {
        TRY(loomrt_memcpy_async(s, dIn[i], staging.data(), tableBytes), "uploading the features");
        TRY(loomrt_stream_synchronize(s), "uploading the features");
      }
      continue;
    }
    size_t bytes = size_t(bt) * 8;
    if (arrays)
      bytes = size_t(p->batch) * data[i].rowBytes;
    if (graphTask) {
      bytes = in.dtype == LOOMRT_I64 ? 8 : 4;
      for (int d = 0; d < in.rank; ++d)
        bytes *= size_t(in.shape[d]);
      for (auto &g : gSets) {
        void *pinned = nullptr;
        TRY(loomrt_alloc(dev, LOOMRT_MEM_PINNED, std::max<size_t>(bytes, 8), &pinned),
            std::string("allocating the staging of input ") + in.name);
        g.resize(nIn, nullptr);
        g[i] = static_cast<uint8_t *>(pinned);
      }
    } else {
      hIn[i].resize(bytes);
    }
    inBytes[i] = bytes;
    // Pinned: node ids the CPU gathers features by (host-gather placement).
    dSpace[i] = in.space;
    TRY(loomrt_alloc(dev, in.space, std::max<size_t>(bytes, 8), &dIn[i]),
        std::string("allocating input ") + in.name);
  }
  if (graphTask)
    sampler.emplace(*p, graph, f.seed);
  return 0;
}

/// --sample random: a counter-based draw (splitmix64 of seed, step and the
/// row's place in the world's batch), so every rank and a resumed run agree
/// without state.
int64_t TrainRun::draw(long step, int64_t row, uint64_t range) const {
  uint64_t z = f.seed * 0x9E3779B97F4A7C15ull + uint64_t(step) * 0xBF58476D1CE4E5B9ull +
               uint64_t(row) * 0x94D049BB133111EBull + 1;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return int64_t(z % range);
}

/// This rank's rows of step `step` into the host staging (a graph model:
/// the sample drawn one step ahead, and the next one started; the time
/// waited for it in `dataWaitMs`).
int TrainRun::fillBatch(long step, double &dataWaitMs) {
  long last = firstStep + f.steps;
  bool dump = !f.dumpSamples.empty();
  auto sampleInto = [this, dump](long at) {
    sampler->fill(at, rank, world, gSets[at & 1], dump ? &padded[at & 1] : nullptr);
  };
  if (graphTask) {
    auto w0 = std::chrono::steady_clock::now();
    if (nextSample.valid())
      nextSample.get();
    else
      sampleInto(step);
    dataWaitMs =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - w0).count();
    if (dump)
      for (size_t d = 0; d < padded[step & 1].size(); ++d) {
        std::string name = f.dumpSamples + "/" +
                           (world > 1 ? "rank" + std::to_string(rank) + "_" : "") + "step" +
                           std::to_string(step) + "_nodes" + std::to_string(d) + ".npy";
        if (!loomrt::writeNpyI64(name, padded[step & 1][d], err))
          return die(err);
      }
    if (step + 1 < last)
      nextSample = std::async(std::launch::async, sampleInto, step + 1);
  } else if (arrays) {
    for (int64_t r = 0; r < bt; ++r) {
      int64_t row = f.sample == "random" ? draw(step, mine + r, uint64_t(n))
                                         : (int64_t(step) * gbt + mine + r) % n;
      for (size_t i = 0; i < nIn; ++i)
        std::memcpy(hIn[i].data() + size_t(r) * data[i].rowBytes,
                    data[i].bytes.data() + size_t(row) * data[i].rowBytes, data[i].rowBytes);
    }
  } else {
    auto *hx = reinterpret_cast<int64_t *>(hIn[0].data());
    auto *hy = reinterpret_cast<int64_t *>(hIn[1].data());
    if (f.sample == "random") {
      // Each of this rank's rows at an offset of its own.
      int64_t seq = p->seq, rows = bt / seq;
      for (int64_t r = 0; r < rows; ++r) {
        int64_t off = draw(step, mine / seq + r, uint64_t(n - seq - 1));
        for (int64_t t = 0; t < seq; ++t) {
          hx[r * seq + t] = tokens[size_t(off + t)];
          hy[r * seq + t] = tokens[size_t(off + t + 1)];
        }
      }
    } else {
      int64_t off = (int64_t(step) * gbt) % (n - gbt - 1) + mine;
      for (int64_t i = 0; i < bt; ++i) {
        hx[i] = tokens[size_t(off + i)];
        hy[i] = tokens[size_t(off + i + 1)];
      }
    }
  }
  return 0;
}

/// Streaming DiLoCo's outer entries due after inner step `step`: run in
/// order, an async exchange on the side context's thread where it has one.
/// `sideBytes`: what the exchanges joined here sent.
int TrainRun::runOuterSteps(long step, uint64_t &sideBytes) {
  for (size_t k = 0; k < p->num_outer; ++k) {
    const loomrt_outer_desc &o = p->outer[k];
    if (step + 1 < o.offset || (step + 1 - o.offset) % o.every != 0)
      continue;
    if (!o.async || !sideComm) {
      if (!o.async) {
        // What it reads (an exchange's result) must be complete.
        if (int rc = joinSide())
          return rc;
        uint64_t now = sideComm ? side.sent() : 0;
        sideBytes += now - sideSent;
        sideSent = now;
      }
      TRY(o.fn(&ctx, G.data()), std::string("DiLoCo outer step ") + o.name);
      continue;
    }
    if (int rc = joinSide())
      return rc;
    // The exchange reads what the compute stream wrote (the snapshot).
    TRY(loomrt_stream_synchronize(s), "DiLoCo: the snapshot before an exchange");
    side.reset(std::chrono::steady_clock::now());
    side.seed = f.seed;
    side.step = step;
    inflightWhat = std::string("DiLoCo exchange ") + o.name;
    inflight = std::thread([this, fn = o.fn] {
      loomrt_status st = loomrt_device_bind(side.dev);
      if (st == LOOMRT_OK)
        st = fn(&side, G.data());
      if (st == LOOMRT_OK)
        st = loomrt_stream_synchronize(side.stream);
      if (st == LOOMRT_OK)
        st = loomrt_stream_synchronize(side.commStream);
      if (st != LOOMRT_OK)
        inflightWhat += std::string(": ") + loomrt_last_error();
      inflightSt = st;
    });
  }
  return 0;
}

/// The step's line on stdout, the divergence warning, and the --log-json
/// record.
int TrainRun::report(long step, float loss, double ms, double dataWaitMs, uint64_t sentBefore,
                     uint64_t sideBytes, const std::map<uint64_t, uint64_t> &groupBefore) {
  long last = firstStep + f.steps;
  // The backward's share, timed on the compute stream; the update phase is
  // the rest of the step.
  float backwardMs = -1;
  if (ctx.backwardMarked)
    TRY(loomrt_event_elapsed_ms(ctx.phaseStart, ctx.backwardDone, &backwardMs), "phase timing");
  double tps = double(gbt) / (ms * 1e-3); // the whole world's tokens (or samples)
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double eta = elapsed / double(step - firstStep + 1) * double(last - step - 1);
  std::printf("step %5ld/%ld  loss %.5f  %8.1f ms  %9.0f %s/s  eta %4.0fs\n", step + 1, last, loss,
              ms, tps, unit, eta);
  std::fflush(stdout);
  if (lead && !std::isfinite(loss) && !warnedNonFinite) {
    std::fprintf(stderr,
                 "warning: the loss of step %ld is not finite: training "
                 "diverged (a lower --lr may help)\n",
                 step + 1);
    warnedNonFinite = true;
  }
  if (!log)
    return 0;
  // Bytes by group: the levels' indices (innermost 0) of each group smaller
  // than the world, e.g. {"0": ..., "0,1": ...}.
  std::string byGroup;
  for (auto &[mask, g] : ctx.groups) {
    std::string levels;
    for (int i = 0; i < 64; ++i)
      if (mask >> i & 1)
        levels += (levels.empty() ? "" : ",") + std::to_string(i);
    auto before = groupBefore.find(mask);
    byGroup += std::string(byGroup.empty() ? "" : ", ") + "\"" + levels + "\": " +
               std::to_string(loomrt_comm_bytes_sent(g, -1) -
                              (before == groupBefore.end() ? 0 : before->second));
  }
  logStep(log, step + 1, loss, ms, tps, unit, backwardMs, ctx,
          world > 1 ? (long long)(ctx.sent() - sentBefore + sideBytes) : -1, byGroup, dataWaitMs);
  return 0;
}

int TrainRun::train() {
  start = std::chrono::steady_clock::now();
  long last = firstStep + f.steps;
  for (long step = firstStep; step < last; ++step) {
    double dataWaitMs = -1;
    if (int rc = fillBatch(step, dataWaitMs))
      return rc;
    auto t0 = std::chrono::steady_clock::now();
    // Device inputs are copied on the compute stream; pinned ones (read by
    // the CPU on the host stream, which does not wait for that copy) are
    // written here: the step before, which read them, has finished.
    for (size_t i = 0; i < nIn; ++i)
      if (p->inputs[i].role == LOOMRT_INPUT_NODE_TABLE)
        continue;
      else if (const uint8_t *src = graphTask ? gSets[step & 1][i] : hIn[i].data();
               dSpace[i] == LOOMRT_MEM_PINNED)
        std::memcpy(dIn[i], src, inBytes[i]);
      else
        TRY(loomrt_memcpy_async(s, dIn[i], src, inBytes[i]), p->inputs[i].name);
    int64_t span = 0;
    ctx.reset(t0); // the step's time (step_ms) counts from t0 too
    ctx.seed = f.seed;
    ctx.step = step;
    ctx.trace = trace;
    TRY(loomrt_event_record(ctx.phaseStart, s), "phase event");
    if (trace) {
      TRY(loomrt_trace_begin(trace, s, "compute", "train_step", &span), "trace");
      TRY(loomrt_trace_begin(trace, s, "compute", "forward_backward", &ctx.phaseSpan), "trace");
    }
    void *dLoss = nullptr;
    uint64_t sentBefore = ctx.sent();
    std::map<uint64_t, uint64_t> groupBefore;
    for (auto &[mask, g] : ctx.groups)
      groupBefore[mask] = loomrt_comm_bytes_sent(g, -1);
    bool frozen = p->train_step_frozen && step >= p->freeze_step;
    if (frozen && step == p->freeze_step && p->enter_frozen)
      TRY(p->enter_frozen(&ctx, G.data()), "gathering the momentum for 1-bit Adam's frozen steps");
    if (step == 0 && p->outer_start)
      TRY(p->outer_start(&ctx, G.data()), "DiLoCo: the global copy of the parameters");
    TRY((frozen ? p->train_step_frozen : p->train_step)(&ctx, G.data(), dIn.data(), &dLoss),
        frozen ? "training step (1-bit Adam, after the freeze)" : "training step");
    // Generated steps join their host tasks before returning; a hand-written
    // one may not.
    TRY(loomrt_step_host_join(&ctx), "the training step's host tasks");
    uint64_t sideBytes = 0;
    if (int rc = runOuterSteps(step, sideBytes))
      return rc;
    if (trace) {
      TRY(loomrt_trace_end(trace, s, ctx.phaseSpan), "trace");
      TRY(loomrt_trace_end(trace, s, span), "trace");
    }
    float loss;
    TRY(loomrt_memcpy_async(s, &loss, dLoss, 4), "loss");
    TRY(loomrt_stream_synchronize(s), "step");
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (int rc = report(step, loss, ms, dataWaitMs, sentBefore, sideBytes, groupBefore))
      return rc;
    if (f.ckptEvery && ((step + 1 - firstStep) % f.ckptEvery == 0 || step + 1 == last))
      if (int rc = saveCheckpoint(step + 1))
        return rc;
  }
  if (int rc = joinSide())
    return rc;
  if (trace) {
    TRY(loomrt_trace_write(trace, f.trace.c_str()), "writing the trace");
    loomrt_trace_destroy(trace);
    trace = nullptr;
  }
  return 0;
}

/// What the run held, then everything released in the reverse order of
/// its making.
void TrainRun::finish() {
  if (log)
    std::fclose(log);
  log = nullptr;
  reportMemory(p, host, ctx, world);
  if (nextSample.valid())
    nextSample.get();
  for (size_t i = 0; i < nIn; ++i)
    if (shared[i])
      loomrt_host_unregister(dev, dIn[i]);
    else
      loomrt_free(dev, dSpace[i], dIn[i]);
  for (auto &g : gSets)
    for (uint8_t *b : g)
      if (b)
        loomrt_free(dev, LOOMRT_MEM_PINNED, b);
  for (size_t i = 0; i < G.size(); ++i)
    loomrt_free(dev, p->globals[i].space, G[i]);
  ctx.release();
  side.release();
  loomrt_comm_destroy(sideComm);
  loomrt_comm_destroy(comm);
  side.closeStreams();
  ctx.closeStreams();
  if (ctx.hostDev)
    loomrt_device_close(ctx.hostDev);
  loomrt_device_close(dev);
}

} // namespace

extern "C" int loomrt_train_main(int argc, char **argv, const loomrt_program *p) {
  // Before reading anything else of *p: its layout must be ours.
  if (p->abi != LOOMRT_TRAIN_ABI)
    return die("this binary was generated for another version of the runtime "
               "(libloomrt.so was rebuilt since); compile the model again with loomc");
  for (size_t k = 0; k < p->num_outer; ++k)
    if (!p->outer || !p->outer[k].fn || p->outer[k].every < 1)
      return die("the program's DiLoCo outer step " + std::to_string(k) +
                 " has no function or a period below 1");
  // CPU binaries: OpenMP threads that spin after each kernel fight
  // OpenBLAS's threads for the cores (steps of 12 ms took 60-180 ms on the
  // 2-core CI machine). libgomp reads OMP_WAIT_POLICY only at start-up, so
  // set it and start again, unless the user chose a policy.
  if (p->backend == LOOMRT_BACKEND_CPU && !std::getenv("OMP_WAIT_POLICY") &&
      !std::getenv("LOOMRT_NO_REEXEC")) {
    setenv("OMP_WAIT_POLICY", "passive", 1);
    setenv("LOOMRT_NO_REEXEC", "1", 1);
    execv("/proc/self/exe", argv); // returns only on failure: carry on
  }
  Flags f;
  std::string err;
  if (!parse(argc, argv, p, f, err))
    return die(err);
  TrainRun run(p, f);
  for (int (TrainRun::*phase)() : {&TrainRun::loadData, &TrainRun::joinWorld,
                                   &TrainRun::openContexts, &TrainRun::setupGlobals,
                                   &TrainRun::setupInputs, &TrainRun::train})
    if (int rc = (run.*phase)())
      return rc;
  run.finish();
  return 0;
}
