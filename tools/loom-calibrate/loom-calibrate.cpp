//===- loom-calibrate.cpp - measure a machine for the cost model ---------===//
//
// Measures what docs/cost-model.md's hardware description holds, on the
// machine it runs on (with its GPU when there is one), prints a line per
// measurement as it goes, and writes the description as JSON:
//
//   loom-calibrate -o host.json            # full sizes (1 GiB buffers)
//   loom-calibrate --quick -o host.json    # small sizes (CI)
//
// It uses only the runtime (no LLVM/MLIR), so it builds on GPU hosts from
// bench/ like the runtime itself; the compiler reads the file with
// loom::parseHardware. Methods, all medians of several timed repetitions
// after a warm-up:
//   * DRAM read: all threads sum their part of a buffer far larger than the
//     caches; copy: all threads copy their part (read + write bytes);
//   * caches: sizes from sysfs (LOOM_SYSFS_ROOT replaces /sys), else from
//     CPUID (leaf 4 on Intel, 0x8000001D on AMD), else none (the output's
//     "cache_source" says which); bandwidth: all threads re-read a working
//     set half the size of their share of the level;
//   * CPU Adam: loomrt_adam_f32 on the CPU backend (the rate the offload
//     schedule charges);
//   * clock and vector width: /proc/cpuinfo's MHz and the ISA flags
//     (AVX-512: 64 fp32 flops per cycle per core with two FMA units; AVX2
//     with FMA: 32; otherwise 8). These two are read, not measured;
//   * GPU: pinned and pageable copies each way and both ways at once (two
//     streams), device-to-device copy (HBM, read + write), bf16 GEMM rate
//     at four sizes and fp32 at the largest (loomrt_matmul, square, enough
//     products per timing to hide the synchronisation), Adam on the
//     device, capacity,
//     and the launch queue: how many commands the host issues ahead of a
//     busy GPU before an issue call blocks (launchQueueDepth).
//   * links (--links node=N,gpu=G,..., one process per rank under mpirun or
//     torchrun-style variables): for each level, every group of ranks that
//     differ only in it (loomrt_comm_split_levels; all groups at once, as a
//     hierarchical collective runs them) times a large fp32 all-reduce (bus
//     bandwidth 2(n-1)/n x bytes / time) and a one-float all-reduce (the
//     latency: its time over the ring's 2(n-1) steps). Rank 0 then
//     measures the rest and writes the file.
//
//===----------------------------------------------------------------------===//
#include "common/cli.h"
#include "loomrt/loomrt.h"

#include <algorithm>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <omp.h>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

struct Options {
  std::string out;
  bool quick = false, noGpu = false;
  std::string links; // --links: the topology, outermost level first
  int gpusPerHost = 0; // --gpus-per-host: written as gpus_per_host (0: not)
};

[[noreturn]] void die(const std::string &msg) {
  std::fprintf(stderr, "loom-calibrate: error: %s\n", msg.c_str());
  std::exit(1);
}

#define OK(call)                                                               \
  do {                                                                         \
    if ((call) != LOOMRT_OK)                                                   \
      die(std::string(#call) + ": " + loomrt_last_error());                    \
  } while (0)

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Seconds of `reps` runs of f after one warm-up: the median, or with
/// `fastest` the shortest run. Host bandwidths take the fastest (STREAM's
/// convention): another process on the machine only ever adds time, and on
/// a loaded 2-core CI machine the median of a cache read once came out
/// below the DRAM read.
double timeIt(int reps, const std::function<void()> &f, bool fastest = false) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    double t0 = seconds();
    f();
    t.push_back(seconds() - t0);
  }
  std::sort(t.begin(), t.end());
  return fastest ? t.front() : t[t.size() / 2];
}

void report(const char *what, double value, const char *unit) {
  std::printf("  %-42s %12.2f %s\n", what, value, unit);
  std::fflush(stdout);
}

std::string readFile(const std::string &path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// --- host -------------------------------------------------------------------

/// Where /sys is: LOOM_SYSFS_ROOT replaces it, so a test can show what the
/// tool does on a machine whose sysfs has no cache directory (some virtual
/// machines of the CI's kind have none).
std::string sysfsRoot() {
  const char *v = std::getenv("LOOM_SYSFS_ROOT");
  return v && *v ? v : "/sys";
}


double cpuClockHz() {
  // The highest "cpu MHz" /proc/cpuinfo lists (cores idle at lower clocks).
  std::istringstream in(readFile("/proc/cpuinfo"));
  std::string line;
  double mhz = 0;
  while (std::getline(in, line))
    if (line.rfind("cpu MHz", 0) == 0)
      mhz = std::max(mhz, std::atof(line.substr(line.find(':') + 1).c_str()));
  if (std::string max = readFile(sysfsRoot() + "/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq");
      !max.empty())
    mhz = std::max(mhz, std::atof(max.c_str()) / 1000.0);
  return mhz * 1e6;
}

int flopsPerCycle() {
  std::string info = readFile("/proc/cpuinfo");
  if (info.find(" avx512f") != std::string::npos)
    return 64;
  if (info.find(" avx2") != std::string::npos && info.find(" fma") != std::string::npos)
    return 32;
  return 8;
}

struct Cache {
  std::string name;
  double bytes = 0, bandwidth = 0;
};

using CacheList = std::vector<std::pair<Cache, int>>; // level, CPUs sharing it

/// Data and unified caches of cpu0 from sysfs, smallest first.
CacheList sysfsCaches() {
  CacheList out;
  for (int i = 0; i < 8; ++i) {
    std::string dir =
        sysfsRoot() + "/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::string type = readFile(dir + "type"), level = readFile(dir + "level"),
                size = readFile(dir + "size"), shared = readFile(dir + "shared_cpu_list");
    if (type.empty())
      break;
    if (type.rfind("Instruction", 0) == 0)
      continue;
    double bytes = std::atof(size.c_str());
    if (size.find('K') != std::string::npos)
      bytes *= 1024;
    else if (size.find('M') != std::string::npos)
      bytes *= 1024 * 1024;
    // shared_cpu_list: "0-3,8-11" -> count the CPUs.
    int sharers = 0;
    std::stringstream ss(shared);
    std::string part;
    while (std::getline(ss, part, ',')) {
      size_t dash = part.find('-');
      sharers += dash == std::string::npos
                     ? 1
                     : std::atoi(part.substr(dash + 1).c_str()) - std::atoi(part.c_str()) + 1;
    }
    if (bytes > 0)
      out.push_back({{"L" + std::to_string(std::atoi(level.c_str())), bytes, 0},
                     std::max(1, sharers)});
  }
  return out;
}

/// Data and unified caches from CPUID's deterministic cache parameters:
/// leaf 4 on Intel, leaf 0x8000001D on AMD (where the topology extensions
/// are reported), both with the same register layout (Intel SDM vol. 2A,
/// CPUID leaf 04H; AMD APM vol. 3, CPUID Fn8000_001D). Sharers: EAX[25:14]
/// + 1 logical processors. Empty off x86 or where the leaf is absent (a
/// hypervisor may hide it).
CacheList cpuidCaches() {
  CacheList out;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (!__get_cpuid(0, &a, &b, &c, &d))
    return out;
  unsigned maxLeaf = a;
  bool amd = b == 0x68747541; // "Auth"enticAMD
  unsigned leaf = 4;
  if (amd) {
    unsigned maxExt = __get_cpuid_max(0x80000000, nullptr);
    // Fn8000_0001 ECX bit 22: TopologyExtensions, which Fn8000_001D needs.
    if (maxExt < 0x8000001D || !__get_cpuid(0x80000001, &a, &b, &c, &d) || !(c & (1u << 22)))
      return out;
    leaf = 0x8000001D;
  } else if (maxLeaf < 4) {
    return out;
  }
  for (unsigned i = 0; i < 16; ++i) {
    __cpuid_count(leaf, i, a, b, c, d);
    unsigned type = a & 0x1f; // 0: no more caches, 1: data, 2: instruction, 3: unified
    if (type == 0)
      break;
    if (type == 2)
      continue;
    unsigned level = (a >> 5) & 0x7;
    double ways = double(((b >> 22) & 0x3ff) + 1), partitions = double(((b >> 12) & 0x3ff) + 1),
           line = double((b & 0xfff) + 1), sets = double(c) + 1;
    int sharers = int(((a >> 14) & 0xfff) + 1);
    out.push_back({{"L" + std::to_string(level), ways * partitions * line * sets, 0}, sharers});
  }
  std::sort(out.begin(), out.end(),
            [](const auto &x, const auto &y) { return x.first.bytes < y.first.bytes; });
#endif
  return out;
}

/// The caches and where they came from ("sysfs", "cpuid" or "none"): sysfs
/// first (it knows what the kernel was told), CPUID where sysfs has no cache
/// directory; with neither, no caches, and the cost model charges CPU work
/// at DRAM speed.
CacheList cacheLevels(std::string &source) {
  CacheList out = sysfsCaches();
  source = "sysfs";
  if (out.empty()) {
    out = cpuidCaches();
    source = out.empty() ? "none" : "cpuid";
  }
  return out;
}

/// All threads read (sum) their own `perThread`-byte buffer `passes` times;
/// returns bytes read per second over all threads.
double readBandwidth(size_t perThread, int passes, int reps) {
  int threads = omp_get_max_threads();
  size_t n = perThread / sizeof(float);
  std::vector<std::vector<float>> bufs(static_cast<size_t>(threads));
#pragma omp parallel
  bufs[size_t(omp_get_thread_num())].assign(n, 1.0f); // first touch by the reader
  volatile float sink = 0;
  double t = timeIt(reps, [&] {
    float total = 0;
#pragma omp parallel reduction(+ : total)
    {
      const float *p = bufs[size_t(omp_get_thread_num())].data();
      // 64 independent sums: four vectors of adds in flight, so the loop
      // is bound by loads, not by the add latency.
      float acc[64] = {};
      for (int pass = 0; pass < passes; ++pass)
        for (size_t i = 0; i + 64 <= n; i += 64)
          for (int k = 0; k < 64; ++k)
            acc[k] += p[i + k];
      for (float a : acc)
        total += a;
    }
    sink = sink + total;
  }, /*fastest=*/true);
  return double(perThread) * passes * threads / t;
}

/// All threads copy their part of a buffer: read + write bytes per second.
double copyBandwidth(size_t bytes, int reps) {
  std::vector<char> a(bytes, 1), b(bytes, 0);
  double t = timeIt(reps, [&] {
#pragma omp parallel
    {
      size_t threads = size_t(omp_get_num_threads()), me = size_t(omp_get_thread_num());
      size_t chunk = (bytes + threads - 1) / threads, lo = std::min(bytes, me * chunk),
             hi = std::min(bytes, lo + chunk);
      std::memcpy(b.data() + lo, a.data() + lo, hi - lo);
    }
  }, /*fastest=*/true);
  return 2.0 * double(bytes) / t;
}

double adamRate(loomrt_backend be, size_t n, int reps) {
  loomrt_device dev;
  OK(loomrt_device_open(be, 0, &dev));
  loomrt_stream s;
  OK(loomrt_stream_create(dev, &s));
  std::vector<void *> bufs(4);
  for (void *&p : bufs) {
    OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, n * 4, &p));
    OK(loomrt_fill(s, LOOMRT_F32, p, 0.5f, n));
  }
  loomrt_adam_config cfg{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 1};
  double t = timeIt(reps, [&] {
    OK(loomrt_adam_f32(s, &cfg, (float *)bufs[0], (const float *)bufs[1], (float *)bufs[2],
                       (float *)bufs[3], n));
    OK(loomrt_stream_synchronize(s));
  });
  for (void *p : bufs)
    loomrt_free(dev, LOOMRT_MEM_DEVICE, p);
  loomrt_stream_destroy(s);
  loomrt_device_close(dev);
  return double(n) / t;
}

/// CPU Adam of `procs` processes at once, each with its share of the cores
/// (what the ranks sharing a host do; the host's rate then, summed): this
/// program run again with --adam-worker, each a fresh process that allocates
/// and first-touches its own buffers. 0 when a worker fails.
double sharedAdamRate(int procs, int cores, size_t n, int reps) {
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (len <= 0)
    return 0;
  exe[len] = 0;
  int threads = std::max(1, cores / procs);
  std::vector<FILE *> workers;
  for (int i = 0; i < procs; ++i) {
    std::string cmd = "OMP_NUM_THREADS=" + std::to_string(threads) + " '" + exe +
                      "' --adam-worker=" + std::to_string(n) + "," + std::to_string(reps);
    workers.push_back(popen(cmd.c_str(), "r"));
  }
  double sum = 0;
  bool ok = true;
  for (FILE *w : workers) {
    double r = 0;
    ok = ok && w && std::fscanf(w, "%lf", &r) == 1 && r > 0;
    if (w)
      ok = pclose(w) == 0 && ok;
    sum += r;
  }
  return ok ? sum : 0;
}

// --- GPU --------------------------------------------------------------------

struct Gpu {
  double memory = 0, hbm = 0, h2d = 0, d2h = 0, bidir = 0, h2dPage = 0, d2hPage = 0;
  double flopsBf16 = 0, flopsF32 = 0, adam = 0;
  double launchQueue = 0; // commands the host may issue ahead of the GPU
  std::vector<std::pair<double, double>> bf16BySize; // {n, flops/s}
};

/// How many commands the host can issue ahead of the GPU before an issue
/// call blocks (the driver's launch queue): with the GPU held busy by a
/// few long matrix products, time each of up to `limit` one-element fills
/// (or event records); the first that takes longer than 0.2 ms found the
/// queue full. Returns the commands issued before it, the long products
/// included. A generated step issues its whole backward ahead of the host
/// work that follows it, so this bounds how early that host work starts.
double launchQueueDepth(loomrt_device dev, loomrt_stream s, bool events, bool quick,
                        double *secondStreamBlockMs = nullptr) {
  const int64_t n = quick ? 2048 : 16384;
  const int blockers = 8; // ~100 ms of bf16 products at n = 16384 on an H100
  const int limit = 1 << 15;
  void *a, *c, *one;
  OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, size_t(n * n) * 2, &a));
  OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, size_t(n * n) * 2, &c));
  OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, 64, &one));
  OK(loomrt_fill(s, LOOMRT_BF16, a, 0.001f, size_t(n * n)));
  loomrt_event e;
  OK(loomrt_event_create(dev, &e));
  OK(loomrt_stream_synchronize(s));
  loomrt_gemm gm{0, 0, 1, n, n, n, 0, 0, 0, 1.0f, 0.0f, LOOMRT_BF16, LOOMRT_BF16};
  for (int i = 0; i < blockers; ++i)
    OK(loomrt_matmul(s, &gm, a, a, c));
  int issued = limit;
  for (int i = 0; i < limit; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    OK(events ? loomrt_event_record(e, s) : loomrt_fill(s, LOOMRT_F32, one, 1.0f, 1));
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (dt > 2e-4) {
      issued = i;
      break;
    }
  }
  bool found = issued < limit; // else the products ended first: unknown
  if (secondStreamBlockMs) {
    // Refill the queue, then issue once to a second stream: whether the
    // queue is one per device or one per stream.
    OK(loomrt_stream_synchronize(s));
    for (int i = 0; i < blockers; ++i)
      OK(loomrt_matmul(s, &gm, a, a, c));
    for (int i = 0; i < issued; ++i)
      OK(loomrt_fill(s, LOOMRT_F32, one, 1.0f, 1));
    loomrt_stream s2;
    OK(loomrt_stream_create(dev, &s2));
    auto t0 = std::chrono::steady_clock::now();
    OK(loomrt_fill(s2, LOOMRT_F32, one, 1.0f, 1));
    *secondStreamBlockMs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() * 1e3;
    OK(loomrt_stream_synchronize(s2));
    loomrt_stream_destroy(s2);
  }
  OK(loomrt_stream_synchronize(s));
  loomrt_event_destroy(e);
  for (void *p : {a, c, one})
    loomrt_free(dev, LOOMRT_MEM_DEVICE, p);
  return found ? double(issued + blockers) : 0;
}

Gpu measureGpu(bool quick) {
  Gpu g;
  loomrt_device dev;
  OK(loomrt_device_open(LOOMRT_BACKEND_CUDA, 0, &dev));
  size_t freeBytes, total;
  OK(loomrt_device_memory(dev, &freeBytes, &total));
  g.memory = double(total);
  report("GPU memory", g.memory / 1e9, "GB");
  loomrt_stream s, s2;
  OK(loomrt_stream_create(dev, &s));
  OK(loomrt_stream_create(dev, &s2));
  size_t bytes = quick ? (64u << 20) : (1u << 30);
  int reps = quick ? 3 : 10;
  void *d1, *d2, *p1, *p2, *h1;
  OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, bytes, &d1));
  OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, bytes, &d2));
  OK(loomrt_alloc(dev, LOOMRT_MEM_PINNED, bytes, &p1));
  OK(loomrt_alloc(dev, LOOMRT_MEM_PINNED, bytes, &p2));
  OK(loomrt_alloc(dev, LOOMRT_MEM_PAGEABLE, bytes, &h1));
  std::memset(p1, 1, bytes);
  std::memset(p2, 2, bytes);
  std::memset(h1, 3, bytes);
  auto copy = [&](void *dst, const void *src) {
    return double(bytes) / timeIt(reps, [&] {
             OK(loomrt_memcpy_async(s, dst, src, bytes));
             OK(loomrt_stream_synchronize(s));
           });
  };
  g.h2d = copy(d1, p1);
  report("PCIe host->GPU, pinned", g.h2d / 1e9, "GB/s");
  g.d2h = copy(p1, d1);
  report("PCIe GPU->host, pinned", g.d2h / 1e9, "GB/s");
  g.bidir = 2.0 * double(bytes) / timeIt(reps, [&] {
              OK(loomrt_memcpy_async(s, d1, p1, bytes));
              OK(loomrt_memcpy_async(s2, p2, d2, bytes));
              OK(loomrt_stream_synchronize(s));
              OK(loomrt_stream_synchronize(s2));
            });
  report("PCIe both ways at once, pinned (sum)", g.bidir / 1e9, "GB/s");
  g.h2dPage = copy(d1, h1);
  report("PCIe host->GPU, pageable", g.h2dPage / 1e9, "GB/s");
  g.d2hPage = copy(h1, d1);
  report("PCIe GPU->host, pageable", g.d2hPage / 1e9, "GB/s");
  g.hbm = 2.0 * copy(d2, d1); // read + write
  report("GPU memory copy (read + write)", g.hbm / 1e9, "GB/s");
  loomrt_free(dev, LOOMRT_MEM_PINNED, p1);
  loomrt_free(dev, LOOMRT_MEM_PINNED, p2);
  loomrt_free(dev, LOOMRT_MEM_PAGEABLE, h1);
  loomrt_free(dev, LOOMRT_MEM_DEVICE, d1);
  loomrt_free(dev, LOOMRT_MEM_DEVICE, d2);

  // bf16 at four sizes (the rate by size the step simulation reads: small
  // products reach less of the peak), the largest also as the peak; fp32 at
  // the largest.
  std::vector<std::pair<loomrt_dtype, int64_t>> products;
  for (int64_t n : quick ? std::vector<int64_t>{256, 512, 1024, 2048}
                         : std::vector<int64_t>{1024, 2048, 4096, 8192})
    products.push_back({LOOMRT_BF16, n});
  products.push_back({LOOMRT_F32, quick ? 2048 : 8192});
  for (auto [dt, n] : products) {
    size_t es = dt == LOOMRT_BF16 ? 2 : 4;
    void *a, *b, *c;
    OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, size_t(n * n) * es, &a));
    OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, size_t(n * n) * es, &b));
    OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, size_t(n * n) * es, &c));
    // Random operands: tensor cores draw less power (and clock higher) on
    // constant data, which overstates the rate by ~10%.
    {
      std::vector<float> host(size_t(n * n));
      uint32_t x = 12345;
      for (float &v : host) {
        x = x * 1664525u + 1013904223u;
        v = float(x >> 8) / float(1 << 24) - 0.5f;
      }
      void *tmp;
      OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, host.size() * 4, &tmp));
      OK(loomrt_memcpy_async(s, tmp, host.data(), host.size() * 4));
      OK(loomrt_cast(s, LOOMRT_F32, tmp, dt, a, host.size()));
      OK(loomrt_cast(s, LOOMRT_F32, tmp, dt, b, host.size()));
      OK(loomrt_stream_synchronize(s));
      loomrt_free(dev, LOOMRT_MEM_DEVICE, tmp);
    }
    loomrt_gemm gm{0, 0, 1, n, n, n, 0, 0, 0, 1.0f, 0.0f, dt, dt};
    // Enough products back to back per timing that the synchronisation
    // does not count (~1 TFLOP, at least one).
    double flops = 2.0 * double(n) * double(n) * double(n);
    int batch = int(std::max(1.0, 1e12 / flops));
    double t = timeIt(reps, [&] {
      for (int i = 0; i < batch; ++i)
        OK(loomrt_matmul(s, &gm, a, b, c));
      OK(loomrt_stream_synchronize(s));
    });
    double rate = flops * batch / t;
    std::string what = (dt == LOOMRT_BF16 ? "GPU matmul bf16 " : "GPU matmul fp32 ") +
                       std::to_string(n) + "^3";
    report(what.c_str(), rate / 1e12, "TFLOP/s");
    if (dt == LOOMRT_F32) {
      g.flopsF32 = rate;
    } else {
      g.bf16BySize.push_back({double(n), rate});
      g.flopsBf16 = rate; // the largest comes last
    }
    for (void *p : {a, b, c})
      loomrt_free(dev, LOOMRT_MEM_DEVICE, p);
  }
  double second = 0;
  g.launchQueue = launchQueueDepth(dev, s, false, quick, &second);
  report("GPU launch queue (kernels)", g.launchQueue, "commands");
  report("  with the queue full, one issue to another stream took", second, "ms");
  report("GPU launch queue (event records)", launchQueueDepth(dev, s, true, quick), "commands");
  loomrt_stream_destroy(s);
  loomrt_stream_destroy(s2);
  loomrt_device_close(dev);
  g.adam = adamRate(LOOMRT_BACKEND_CUDA, quick ? (16u << 20) : (256u << 20), reps);
  report("GPU Adam", g.adam / 1e9, "G params/s");
  return g;
}

struct Link {
  std::string name;
  double bandwidth = 0, latency = 0;
};

/// --links: each level's all-reduce bus bandwidth and latency, measured by
/// every rank over its group of that level. Returns rank 0's result (the
/// other ranks' is empty) after every rank has finished.
std::vector<Link> measureLinks(const Options &o, int *rankOut) {
  // name=size,... outermost first, as loomc's --topology.
  std::vector<std::pair<std::string, int64_t>> levels;
  std::stringstream spec(o.links);
  for (std::string item; std::getline(spec, item, ',');) {
    size_t eq = item.find('=');
    char *end = nullptr;
    long long n = eq == std::string::npos ? 0 : std::strtoll(item.c_str() + eq + 1, &end, 10);
    if (eq == std::string::npos || eq == 0 || n < 1 || !end || *end)
      die("--links: '" + item + "' is not LEVEL=SIZE (e.g. --links node=2,gpu=4)");
    // The name goes into the JSON as it is: letters, digits, '_', '-', '.'.
    for (char c : item.substr(0, eq))
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.')
        die("--links: level names are letters, digits, '_', '-' and '.'");
    levels.insert(levels.begin(), {item.substr(0, eq), n}); // innermost first
  }
  if (levels.empty())
    die("--links: give the topology, e.g. --links node=2,gpu=4");
  bool gpu = !o.noGpu && loomrt_backend_available(LOOMRT_BACKEND_CUDA);
  loomrt_device dev;
  OK(loomrt_device_open(gpu ? LOOMRT_BACKEND_CUDA : LOOMRT_BACKEND_CPU,
                        gpu ? loomrt_local_rank() : 0, &dev));
  loomrt_stream s;
  OK(loomrt_stream_create(dev, &s));
  loomrt_comm world;
  OK(loomrt_comm_init_from_env(dev, &world));
  int rank = loomrt_comm_rank(world);
  *rankOut = rank;
  std::vector<int64_t> sizes;
  for (auto &l : levels)
    sizes.push_back(l.second);
  size_t bytes = o.quick ? (4u << 20) : (256u << 20);
  void *a, *b;
  OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, bytes, &a));
  OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, bytes, &b));
  OK(loomrt_fill(s, LOOMRT_F32, a, 1.0f, bytes / 4));
  auto median = [&](loomrt_comm g, size_t count) {
    std::vector<double> t;
    int reps = o.quick ? 5 : 20;
    for (int i = 0; i < reps + 3; ++i) {
      OK(loomrt_stream_synchronize(s));
      auto t0 = std::chrono::steady_clock::now();
      OK(loomrt_all_reduce(g, s, LOOMRT_F32, a, b, count, LOOMRT_REDUCE_SUM));
      OK(loomrt_stream_synchronize(s));
      if (i >= 3)
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  std::vector<Link> out;
  if (rank == 0)
    std::printf("links (%d ranks, %s)\n", loomrt_comm_size(world), gpu ? "GPUs" : "CPU ranks");
  for (size_t i = 0; i < levels.size(); ++i) {
    loomrt_comm g;
    OK(loomrt_comm_split_levels(world, uint64_t(1) << i, int(sizes.size()), sizes.data(), 0,
                                nullptr, &g));
    int n = loomrt_comm_size(g);
    if (n > 1) {
      double big = median(g, bytes / 4), small = median(g, 1);
      Link l{levels[i].first, 2.0 * (n - 1) / n * double(bytes) / big, small / (2.0 * (n - 1))};
      if (rank == 0) {
        std::printf("  %-40s %10.2f GB/s, latency %.2f us\n",
                    ("level " + l.name + " (" + std::to_string(n) + " ranks a group)").c_str(),
                    l.bandwidth / 1e9, l.latency * 1e6);
        out.push_back(l);
      }
    } else if (rank == 0) {
      std::printf("  level %s: one rank a group, nothing to measure\n", levels[i].first.c_str());
    }
    loomrt_comm_destroy(g);
  }
  OK(loomrt_stream_synchronize(s));
  loomrt_free(dev, LOOMRT_MEM_DEVICE, a);
  loomrt_free(dev, LOOMRT_MEM_DEVICE, b);
  loomrt_comm_destroy(world);
  loomrt_stream_destroy(s);
  loomrt_device_close(dev);
  return out;
}

/// Ten significant digits: cache sizes in bytes stay exact (2 MiB is
/// 2097152, which six digits would round).
std::string num(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.10g", x);
  return buf;
}

} // namespace

/// The command line into `o` (dies on a bad argument); false after --help.
/// The training binary's parser (common/cli.h): --flag=value and --flag
/// value alike (issue 46: `--gpus-per-host 2` was refused).
bool parseOptions(int argc, char **argv, Options &o) {
  loomrt::cli::Flags c;
  c.add("o,output", loomrt::cli::Flags::Value);
  c.add("links", loomrt::cli::Flags::Value);
  c.add("gpus-per-host", loomrt::cli::Flags::Value);
  for (const char *b : {"quick", "no-gpu", "h,help"})
    c.add(b, loomrt::cli::Flags::Bool);
  std::string err;
  long long gpus = 0;
  if (!c.parse(argc, argv, err) || !loomrt::cli::integer(c, "gpus-per-host", 1, 1024, gpus, err))
    die(err);
  if (c.on("help")) {
    std::printf("usage: loom-calibrate -o FILE.json [--quick] [--no-gpu] [--links TOPOLOGY]\n"
                "                      [--gpus-per-host N]   (--flag=value works too)\n\n"
                "Measures this machine (host DRAM and caches, CPU Adam, and the GPU\n"
                "when present: PCIe, HBM, GEMM, Adam, capacity) and writes the\n"
                "hardware description the cost model reads (docs/cost-model.md).\n"
                "  --quick    small buffers and few repetitions (seconds, for tests)\n"
                "  --no-gpu   describe the host only\n"
                "  --links node=N,gpu=G,...  (one process a rank: mpirun -np N*G ...)\n"
                "             each level's all-reduce bandwidth and latency, measured\n"
                "             by every group of it at once; rank 0 writes the file\n"
                "  --gpus-per-host=N  the GPUs sharing this host's cores and DRAM (the\n"
                "             host rates measured are the whole host's; the cost model\n"
                "             gives each data-parallel rank its share); CPU Adam is\n"
                "             then measured as N processes at once, summed\n");
    return false;
  }
  o.out = c.value("output");
  o.links = c.value("links");
  o.quick = c.on("quick");
  o.noGpu = c.on("no-gpu");
  o.gpusPerHost = int(gpus);
  return true;
}

int main(int argc, char **argv) {
  Options o;
  // A worker of sharedAdamRate: prints its CPU Adam rate and stops.
  if (argc == 2 && std::strncmp(argv[1], "--adam-worker=", 14) == 0) {
    size_t n = 0;
    int reps = 0;
    if (std::sscanf(argv[1] + 14, "%zu,%d", &n, &reps) != 2 || n == 0 || reps < 1)
      die("--adam-worker=N,REPS");
    std::printf("%.6g\n", adamRate(LOOMRT_BACKEND_CPU, n, reps));
    return 0;
  }
  if (!parseOptions(argc, argv, o))
    return 0; // --help
  if (o.out.empty())
    die("give -o FILE.json (see --help)");
  std::ofstream test(o.out, std::ios::app);
  if (!test)
    die("cannot write '" + o.out + "'");
  test.close();
  std::vector<Link> links;
  if (!o.links.empty()) {
    int rank = 0;
    links = measureLinks(o, &rank);
    if (rank != 0)
      return 0; // rank 0 measures the rest alone
  }

  int cores = omp_get_max_threads();
  std::printf("loom-calibrate: %d threads%s\n", cores, o.quick ? ", quick sizes" : "");
  std::printf("host\n");
  double clock = cpuClockHz();
  int fpc = flopsPerCycle();
  report("CPU cores (runtime threads)", cores, "");
  report("CPU clock (read from /proc/cpuinfo)", clock / 1e9, "GHz");
  report("fp32 flops per cycle per core (ISA)", fpc, "");
  size_t big = o.quick ? (256u << 20) : (2048u << 20);
  int reps = o.quick ? 3 : 7;
  double dramRead = readBandwidth(big / size_t(cores), 1, reps);
  report("DRAM read, all threads", dramRead / 1e9, "GB/s");
  double dramCopy = copyBandwidth(big / 2, reps);
  report("DRAM copy (read + write), all threads", dramCopy / 1e9, "GB/s");
  std::vector<Cache> caches;
  std::string cacheSource;
  CacheList levels = cacheLevels(cacheSource);
  std::printf("  caches from %s%s\n", cacheSource.c_str(),
              cacheSource == "none" ? " (no sysfs cache directory, no CPUID cache leaf): the cost "
                                      "model charges CPU work at DRAM speed"
                                    : "");
  for (auto &[c, sharers] : levels) {
    // Each thread re-reads half of its share of the level.
    size_t share = size_t(c.bytes / std::min(sharers, cores) / 2);
    if (share < 4096)
      continue;
    int passes = int(std::max<size_t>(1, (o.quick ? (64u << 20) : (1u << 30)) / share));
    c.bandwidth = readBandwidth(share, passes, reps);
    // A cache read slower than DRAM is a measurement disturbed by other
    // work, not a property of the machine: measure again (twice at most)
    // and say so if it stays that way.
    for (int retry = 0; retry < 2 && c.bandwidth <= dramRead; ++retry)
      c.bandwidth = std::max(c.bandwidth, readBandwidth(share, passes, 2 * reps));
    if (c.bandwidth <= dramRead)
      std::fprintf(stderr,
                   "loom-calibrate: warning: %s read measured at or below the DRAM read (%.2f vs "
                   "%.2f GB/s); the machine is busy, calibrate again when it is idle\n",
                   c.name.c_str(), c.bandwidth / 1e9, dramRead / 1e9);
    report((c.name + " read (" + num(c.bytes / 1024) + " KiB)").c_str(), c.bandwidth / 1e9, "GB/s");
    caches.push_back(c);
  }
  size_t adamN = o.quick ? (8u << 20) : (128u << 20);
  double cpuAdam = adamRate(LOOMRT_BACKEND_CPU, adamN, reps);
  report("CPU Adam", cpuAdam / 1e9, "G params/s");
  // With GPUs sharing the host, its CPU Adam rate is what as many processes
  // reach at once, each on its share of the cores (the cost model divides
  // it among the ranks): on the 4-GPU H200 host four processes of 4 threads
  // reached 1.6x one process of 16 (bench/RESULTS.md, 2026-11-27).
  if (o.gpusPerHost > 1) {
    double shared = sharedAdamRate(o.gpusPerHost, cores, adamN, reps);
    if (shared <= 0)
      die("measuring CPU Adam in " + std::to_string(o.gpusPerHost) + " processes at once failed");
    report(("CPU Adam, " + std::to_string(o.gpusPerHost) + " processes at once (sum)").c_str(),
           shared / 1e9, "G params/s");
    cpuAdam = shared;
  }

  bool gpu = !o.noGpu && loomrt_backend_available(LOOMRT_BACKEND_CUDA);
  Gpu g;
  if (gpu) {
    std::printf("GPU\n");
    g = measureGpu(o.quick);
  } else {
    std::printf("GPU: none%s\n", o.noGpu ? " (--no-gpu)" : "");
  }

  char host[256] = "host";
  gethostname(host, sizeof host - 1);
  std::ostringstream js;
  js << "{\n  \"name\": \"" << host << " (loom-calibrate)\",\n"
     << "  \"cpu_cores\": " << cores << ",\n"
     << "  \"cpu_clock_hz\": " << num(clock) << ",\n"
     << "  \"cpu_flops_per_cycle\": " << fpc << ",\n"
     << "  \"dram_read_bandwidth\": " << num(dramRead) << ",\n"
     << "  \"dram_copy_bandwidth\": " << num(dramCopy) << ",\n"
     << "  \"cache_source\": \"" << cacheSource << "\",\n"
     << "  \"caches\": [";
  for (size_t i = 0; i < caches.size(); ++i)
    js << (i ? ", " : "") << "{\"name\": \"" << caches[i].name << "\", \"bytes\": "
       << num(caches[i].bytes) << ", \"bandwidth\": " << num(caches[i].bandwidth) << "}";
  js << "],\n  \"cpu_adam_params_per_s\": " << num(cpuAdam) << ",\n"
     << "  \"gpu\": " << (gpu ? "true" : "false");
  if (gpu)
    js << ",\n  \"pcie_h2d_pinned\": " << num(g.h2d) << ",\n  \"pcie_d2h_pinned\": " << num(g.d2h)
       << ",\n  \"pcie_bidirectional_pinned\": " << num(g.bidir)
       << ",\n  \"pcie_h2d_pageable\": " << num(g.h2dPage)
       << ",\n  \"pcie_d2h_pageable\": " << num(g.d2hPage)
       << ",\n  \"gpu_memory_bytes\": " << num(g.memory)
       << ",\n  \"gpu_hbm_bandwidth\": " << num(g.hbm)
       << ",\n  \"gpu_flops_f32\": " << num(g.flopsF32)
       << ",\n  \"gpu_flops_bf16\": " << num(g.flopsBf16)
       << ",\n  \"gpu_adam_params_per_s\": " << num(g.adam);
  if (gpu) {
    js << ",\n  \"gpu_matmul_bf16_by_size\": [";
    for (size_t i = 0; i < g.bf16BySize.size(); ++i)
      js << (i ? ", " : "") << "{\"n\": " << num(g.bf16BySize[i].first)
         << ", \"flops\": " << num(g.bf16BySize[i].second) << "}";
    js << "]";
  }
  if (o.gpusPerHost > 0)
    js << ",\n  \"gpus_per_host\": " << o.gpusPerHost;
  if (gpu && g.launchQueue > 0)
    js << ",\n  \"gpu_launch_queue\": " << num(g.launchQueue);
  if (!links.empty()) {
    js << ",\n  \"links\": [";
    for (size_t i = 0; i < links.size(); ++i)
      js << (i ? ", " : "") << "{\"name\": \"" << links[i].name << "\", \"bandwidth\": "
         << num(links[i].bandwidth) << ", \"latency\": " << num(links[i].latency) << "}";
    js << "]";
  }
  js << "\n}\n";
  std::ofstream out(o.out);
  out << js.str();
  if (!out)
    die("writing '" + o.out + "' failed");
  std::printf("wrote %s\n", o.out.c_str());
  return 0;
}
