//===- CostModel.cpp - hardware description and cost model ----------------===//
#include "loom/CostModel.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace loom::cost {
namespace {

constexpr double G = 1e9, T = 1e12, GiB = double(1ull << 30), MiB = double(1ull << 20);

/// One numeric field of the description: its JSON key, where it lives,
/// whether a description must give it, and the range a real machine's value
/// lies in (generous: three or more orders of magnitude around today's
/// machines; outside it a value is a typo or a hostile file, and a rate of
/// 1e-300 would predict an infinite step). A table, so parsing, writing and
/// the documentation's schema cannot drift apart.
struct Field {
  const char *key;
  double Hardware::*member;
  bool required;
  double min, max;
};
const Field kFields[] = {
    {"cpu_clock_hz", &Hardware::cpuClockHz, true, 1e7, 1e11},
    {"cpu_flops_per_cycle", &Hardware::cpuFlopsPerCycle, true, 1, 4096},
    {"dram_read_bandwidth", &Hardware::dramReadBandwidth, true, 1e6, 1e14},
    {"dram_copy_bandwidth", &Hardware::dramCopyBandwidth, true, 1e6, 1e14},
    {"cpu_adam_params_per_s", &Hardware::cpuAdamParamsPerSec, false, 1e3, 1e13},
    {"pcie_h2d_pinned", &Hardware::h2dPinned, false, 1e6, 1e14},
    {"pcie_d2h_pinned", &Hardware::d2hPinned, false, 1e6, 1e14},
    {"pcie_bidirectional_pinned", &Hardware::bidirPinned, false, 1e6, 1e14},
    {"pcie_h2d_pageable", &Hardware::h2dPageable, false, 1e6, 1e14},
    {"pcie_d2h_pageable", &Hardware::d2hPageable, false, 1e6, 1e14},
    {"gpu_memory_bytes", &Hardware::gpuMemoryBytes, false, 1e6, 1e15},
    {"gpu_hbm_bandwidth", &Hardware::hbmBandwidth, false, 1e8, 1e15},
    {"gpu_flops_f32", &Hardware::gpuFlopsF32, false, 1e9, 1e18},
    {"gpu_flops_bf16", &Hardware::gpuFlopsBF16, false, 1e9, 1e18},
    {"gpu_adam_params_per_s", &Hardware::gpuAdamParamsPerSec, false, 1e3, 1e14},
    {"gpu_attention_bf16_flops", &Hardware::gpuAttentionBf16Rate, false, 1e9, 1e18},
    {"gpu_launch_queue", &Hardware::gpuLaunchQueue, false, 1, 1e7},
    // The efficiencies' upper bound is the (0, 1] check after the table.
    {"gpu_kernel_efficiency", &Hardware::gpuKernelEfficiency, false, 1e-6, 1e300},
    {"gpu_flops_efficiency", &Hardware::gpuFlopsEfficiency, false, 1e-6, 1e300},
    {"gpu_kernel_gap_seconds", &Hardware::gpuKernelGapSeconds, false, 1e-9, 1e-3},
    {"gpu_graph_kernel_gap_seconds", &Hardware::gpuGraphKernelGapSeconds, false, 1e-9, 1e-3},
    {"gpu_comm_overlap_slowdown", &Hardware::gpuCommOverlapSlowdown, false, 1e-9, 0.9},
    {"cpu_update_efficiency", &Hardware::cpuUpdateEfficiency, false, 1e-6, 1e300},
    {"zero_copy_gather_bandwidth", &Hardware::zeroCopyGatherBandwidth, false, 1e6, 1e14},
    {"zero_copy_row_seconds", &Hardware::zeroCopyRowSeconds, false, 1e-12, 1},
    {"host_gather_bandwidth", &Hardware::hostGatherBandwidth, false, 1e6, 1e14},
    {"host_gather_row_seconds", &Hardware::hostGatherRowSeconds, false, 1e-12, 1},
    {"gpus_per_host", &Hardware::gpusPerHost, false, 1, 1024},
};
// With a GPU these must be known too.
const char *const kGpuRequired[] = {"pcie_h2d_pinned", "pcie_d2h_pinned",
                                    "pcie_bidirectional_pinned", "gpu_memory_bytes",
                                    "gpu_hbm_bandwidth", "gpu_flops_bf16"};

Hardware h100() {
  // The project's H100 host (docs/cost-model.md lists the sources): PCIe,
  // DRAM, HBM, GEMM and Adam rates as measured; the CPU clock, vector width
  // and cache sizes are assumptions until loom-calibrate measures them.
  Hardware h;
  h.name = "h100";
  h.cpuCores = 16;
  h.cpuClockHz = 2.0 * G;
  h.cpuFlopsPerCycle = 64; // AVX-512: 2 FMA units x 16 fp32 lanes x 2 flops
  h.dramReadBandwidth = 126 * G;
  h.dramCopyBandwidth = 90 * G;
  h.caches = {{"L2", 16 * 2 * MiB, 2 * T}, {"L3", 60 * MiB, 500 * G}};
  h.cpuAdamParamsPerSec = 5.4 * G; // DeepSpeed CPUAdam, 16 cores
  h.h2dPinned = 55 * G;
  h.d2hPinned = 55 * G;
  h.bidirPinned = 92 * G;
  h.h2dPageable = 9.5 * G;
  h.d2hPageable = 9.5 * G;
  h.hasGpu = true;
  h.gpuMemoryBytes = 80 * GiB;
  h.hbmBandwidth = 3.0 * T;
  h.gpuFlopsF32 = 50 * T; // assumed (no TF32); not measured yet
  h.gpuFlopsBF16 = 780 * T;
  h.gpuAdamParamsPerSec = 80 * G;
  h.gpuLaunchQueue = 1015; // loom-calibrate, 2026-11-26 (per stream)
  h.links = {{"nvlink", 271 * G}, {"shared-memory", 27 * G}, {"socket", 3.7 * G}};
  // Row gathers from a 4 GiB pinned table, fitted to bench/RESULTS.md
  // (2026-11-27, gather_bench) as a cost a row plus bytes over a rate: the
  // sorted zero-copy column (64 B 31.8 GB/s ... 4 KiB 48.6 GB/s) and the
  // CPU gather's share of "CPU gather + copy" (that column less a 52.5 GB/s
  // upload: 64 B 6.6 GB/s ... 4 KiB 20.2 GB/s combined).
  h.zeroCopyGatherBandwidth = 49 * G;
  h.zeroCopyRowSeconds = 0.70e-9;
  h.hostGatherBandwidth = 34.7 * G;
  h.hostGatherRowSeconds = 6.6e-9;
  return h;
}

Hardware cpuHost() {
  // A 2-core CI machine: Adam rate as measured (bench/RESULTS.md), the rest
  // assumed.
  Hardware h;
  h.name = "cpu-host";
  h.cpuCores = 2;
  h.cpuClockHz = 2.5 * G;
  h.cpuFlopsPerCycle = 32; // AVX2: 2 FMA units x 8 fp32 lanes x 2 flops
  h.dramReadBandwidth = 20 * G;
  h.dramCopyBandwidth = 15 * G;
  h.caches = {{"L2", 2 * 1 * MiB, 400 * G}, {"L3", 32 * MiB, 100 * G}};
  h.cpuAdamParamsPerSec = 2.6 * G;
  return h;
}

Hardware frontier() {
  // One GCD of a Frontier node (OLCF Frontier User Guide, "System
  // Overview": 4 AMD MI250X, each two GCDs, and a 64-core EPYC 7A53 per
  // node; docs/cost-model.md lists every number and its source). A rank is
  // a GCD; the host's share is an eighth of the node.
  Hardware h;
  h.name = "frontier";
  h.cpuCores = 7; // 56 of the 64 cores are usable, an eighth each
  h.cpuClockHz = 2.0 * G;
  h.cpuFlopsPerCycle = 32; // Zen 3, AVX2
  h.dramReadBandwidth = 204.8 * G / 8; // DDR4-3200 x 8 channels, shared by 8 GCDs
  h.dramCopyBandwidth = 150 * G / 8;   // assumed
  h.caches = {{"L2", 3.5 * MiB, 400 * G}, {"L3", 32 * MiB, 200 * G}}; // assumed
  h.h2dPinned = 36 * G; // CPU-GCD Infinity Fabric, 36 GB/s each way
  h.d2hPinned = 36 * G;
  h.bidirPinned = 72 * G;
  h.hasGpu = true;
  h.gpuMemoryBytes = 64 * GiB;     // HBM2e per GCD
  h.hbmBandwidth = 1.6 * T;        // per GCD
  h.gpuFlopsF32 = 47.9 * T;        // matrix fp32 per GCD
  h.gpuFlopsBF16 = 191.5 * T;      // matrix bf16 per GCD
  h.gpuAdamParamsPerSec = 50 * G;  // assumed: HBM-bound, 32 bytes a parameter
  h.gpuKernelEfficiency = 0.5;     // assumed, not fitted (no MI250X here)
  // The levels of --topology=node=N,gpu=4,gcd=2, innermost first: the two
  // GCDs of one MI250X (4 Infinity Fabric links, 200 GB/s), the GPUs of a
  // node (50 GB/s, one link; some pairs have two), the nodes (4 Slingshot
  // NICs of 25 GB/s for 8 GCDs: 12.5 GB/s a GCD when all send at once).
  h.links = {{"gcd", 200 * G, 1e-6}, {"gpu", 50 * G, 2e-6}, {"node", 12.5 * G, 5e-6}};
  return h;
}

bool positive(double x) { return x > 0 && x < std::numeric_limits<double>::infinity(); }

/// A number as C's %g writes it (1e-300, 4.2e+10), for messages.
std::string g(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

/// More cores than any machine has: 2^32 in a file is a typo or an attack.
constexpr int64_t kMaxCores = 1 << 20;
/// A description is a flat object with arrays of flat objects: three levels
/// of nesting. llvm::json parses recursively, so a file nested 40,000 deep
/// would overflow the stack; nothing deeper than this is read.
constexpr int kMaxJsonDepth = 16;

/// The deepest nesting of [ and { in `text`, outside strings; stops counting
/// past `limit`.
int jsonDepth(llvm::StringRef text, int limit) {
  int depth = 0, deepest = 0;
  bool inString = false;
  for (size_t i = 0; i < text.size() && deepest <= limit; ++i) {
    char c = text[i];
    if (inString) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        inString = false;
    } else if (c == '"') {
      inString = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

} // namespace

std::optional<Hardware> preset(llvm::StringRef name) {
  if (name == "h100")
    return h100();
  if (name == "cpu-host")
    return cpuHost();
  if (name == "frontier")
    return frontier();
  return std::nullopt;
}

std::string presetNames() { return "h100, cpu-host, frontier"; }

std::optional<Hardware> parseHardware(llvm::StringRef text, std::string &error) {
  if (jsonDepth(text, kMaxJsonDepth) > kMaxJsonDepth) {
    error = "hardware description nests arrays or objects more than " +
            std::to_string(kMaxJsonDepth) + " deep (docs/cost-model.md lists the schema)";
    return std::nullopt;
  }
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed) {
    error = "hardware description is not JSON: " + llvm::toString(parsed.takeError());
    return std::nullopt;
  }
  const llvm::json::Object *o = parsed->getAsObject();
  if (!o) {
    error = "hardware description must be a JSON object";
    return std::nullopt;
  }
  auto fail = [&](const std::string &msg) -> std::optional<Hardware> {
    error = "hardware description: " + msg;
    return std::nullopt;
  };
  Hardware h;
  // Where loom-calibrate found the cache sizes; read for the record only.
  if (const llvm::json::Value *src = o->get("cache_source")) {
    auto v = src->getAsString();
    if (!v || !(*v == "sysfs" || *v == "cpuid" || *v == "none"))
      return fail("'cache_source' must be \"sysfs\", \"cpuid\" or \"none\"");
  }
  if (auto name = o->getString("name"))
    h.name = name->str();
  else
    return fail("'name' must be a string");
  auto cores = o->getInteger("cpu_cores");
  if (!cores || *cores <= 0 || *cores > kMaxCores)
    return fail("'cpu_cores' must be an integer in [1, " + std::to_string(kMaxCores) + "]");
  h.cpuCores = int(*cores);
  h.hasGpu = o->getBoolean("gpu").value_or(false);
  // Every key must be known: a typo would otherwise silently fall back.
  for (const auto &kv : *o) {
    llvm::StringRef k = kv.first;
    bool known = k == "name" || k == "cpu_cores" || k == "gpu" || k == "caches" || k == "links" ||
                 k == "gpu_matmul_bf16_by_size" || k == "cache_source";
    for (const Field &f : kFields)
      known |= k == f.key;
    if (!known)
      return fail("unknown key '" + k.str() + "' (docs/cost-model.md lists the schema)");
  }
  for (const Field &f : kFields) {
    const llvm::json::Value *v = o->get(f.key);
    bool needed = f.required;
    if (h.hasGpu)
      for (const char *g : kGpuRequired)
        needed |= llvm::StringRef(f.key) == g;
    if (!v) {
      if (needed)
        return fail("missing '" + std::string(f.key) + "'");
      continue;
    }
    std::optional<double> x = v->getAsNumber();
    if (!x || !positive(*x))
      return fail("'" + std::string(f.key) + "' must be a positive number");
    if (*x < f.min || *x > f.max)
      return fail("'" + std::string(f.key) + "' is " + g(*x) +
                  ", outside the range of real machines [" + g(f.min) +
                  ", " + g(f.max) + "]");
    h.*f.member = *x;
  }
  if (h.gpusPerHost != std::floor(h.gpusPerHost))
    return fail("'gpus_per_host' must be a whole number");
  for (double e : {h.gpuKernelEfficiency, h.gpuFlopsEfficiency, h.cpuUpdateEfficiency})
    if (e > 1)
      return fail("'gpu_kernel_efficiency', 'gpu_flops_efficiency' and 'cpu_update_efficiency' "
                  "are fractions in (0, 1]");
  auto levels = [&](const char *key, auto &out, const char *rateKey) -> bool {
    if (!o->get(key))
      return true; // optional
    const llvm::json::Array *a = o->getArray(key);
    if (!a) {
      fail(std::string("'") + key + "' must be an array");
      return false;
    }
    for (const llvm::json::Value &e : *a) {
      const llvm::json::Object *lo = e.getAsObject();
      auto name = lo ? lo->getString("name") : std::nullopt;
      auto bw = lo ? lo->getNumber(rateKey) : std::nullopt;
      if (!name || !bw || !positive(*bw)) {
        fail(std::string("each of '") + key + "' needs a 'name' and a positive '" + rateKey + "'");
        return false;
      }
      // Bytes per second: a link from 1 kB/s (an emulated dial-up) to
      // 100 TB/s, a cache up to 10 PB/s.
      double maxRate = std::is_same_v<typename std::decay_t<decltype(out)>::value_type,
                                      CacheLevel> ? 1e16 : 1e14;
      if (*bw < 1e3 || *bw > maxRate) {
        fail(std::string("'") + key + "' level '" + name->str() + "': '" + rateKey + "' " +
             g(*bw) + " is outside [1e3, " +
             g(maxRate) + "] bytes/s");
        return false;
      }
      using Elem = typename std::decay_t<decltype(out)>::value_type;
      Elem l;
      l.name = name->str();
      l.bandwidth = *bw;
      if constexpr (std::is_same_v<Elem, LinkLevel>) {
        if (lo->get("latency")) {
          auto lat = lo->getNumber("latency");
          if (!lat || *lat < 0 || *lat > 10 || !std::isfinite(*lat)) {
            fail("link '" + l.name + "': 'latency' must be a number of seconds in [0, 10]");
            return false;
          }
          l.latency = *lat;
        }
      }
      if constexpr (std::is_same_v<Elem, CacheLevel>) {
        auto bytes = lo->getNumber("bytes");
        if (!bytes || !positive(*bytes) || *bytes > 1e12) {
          fail("cache level '" + l.name + "' needs a positive 'bytes' of at most 1e12");
          return false;
        }
        l.bytes = *bytes;
      }
      out.push_back(l);
    }
    return true;
  };
  if (!levels("caches", h.caches, "bandwidth") || !levels("links", h.links, "bandwidth"))
    return std::nullopt;
  if (const llvm::json::Value *v = o->get("gpu_matmul_bf16_by_size")) {
    const llvm::json::Array *a = v->getAsArray();
    if (!a)
      return fail("'gpu_matmul_bf16_by_size' must be an array of {\"n\", \"flops\"}");
    for (const llvm::json::Value &e : *a) {
      const llvm::json::Object *po = e.getAsObject();
      auto n = po ? po->getNumber("n") : std::nullopt;
      auto f = po ? po->getNumber("flops") : std::nullopt;
      if (!n || !f || !positive(*n) || !positive(*f))
        return fail("each of 'gpu_matmul_bf16_by_size' needs a positive 'n' and 'flops'");
      h.gpuMatmulBf16BySize.push_back({*n, *f});
    }
    llvm::sort(h.gpuMatmulBf16BySize);
  }
  std::sort(h.caches.begin(), h.caches.end(),
            [](const CacheLevel &a, const CacheLevel &b) { return a.bytes < b.bytes; });
  return h;
}

std::string toJson(const Hardware &h) {
  llvm::json::Object o{{"name", h.name}, {"cpu_cores", h.cpuCores}, {"gpu", h.hasGpu}};
  for (const Field &f : kFields)
    if (h.*f.member > 0 &&
        !((f.member == &Hardware::gpuKernelEfficiency || f.member == &Hardware::cpuUpdateEfficiency ||
           f.member == &Hardware::gpusPerHost) &&
          h.*f.member == 1))
      o[f.key] = h.*f.member;
  llvm::json::Array caches, links;
  for (const CacheLevel &c : h.caches)
    caches.push_back(llvm::json::Object{{"name", c.name}, {"bytes", c.bytes}, {"bandwidth", c.bandwidth}});
  for (const LinkLevel &l : h.links)
    links.push_back(llvm::json::Object{{"name", l.name}, {"bandwidth", l.bandwidth}, {"latency", l.latency}});
  o["caches"] = std::move(caches);
  o["links"] = std::move(links);
  if (!h.gpuMatmulBf16BySize.empty()) {
    llvm::json::Array curve;
    for (auto [n, f] : h.gpuMatmulBf16BySize)
      curve.push_back(llvm::json::Object{{"n", n}, {"flops", f}});
    o["gpu_matmul_bf16_by_size"] = std::move(curve);
  }
  std::string s;
  llvm::raw_string_ostream os(s);
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(o))) << "\n";
  return s;
}

std::optional<Hardware> scaled(const Hardware &hw, llvm::StringRef resource,
                               double factor, std::string &error) {
  if (!positive(factor)) {
    error = "what-if factor must be positive";
    return std::nullopt;
  }
  Hardware h = hw;
  if (resource == "cpu-clock") {
    h.cpuClockHz *= factor;
  } else if (resource == "cpu-cores") {
    h.cpuCores = std::max(1, int(h.cpuCores * factor + 0.5));
  } else if (resource == "dram") {
    h.dramReadBandwidth *= factor;
    h.dramCopyBandwidth *= factor;
    // A measured CPU Adam rate is DRAM-bound (28 bytes per parameter), so
    // it follows the DRAM bandwidth, not the clock.
    h.cpuAdamParamsPerSec *= factor;
  } else if (resource == "cache") {
    for (CacheLevel &c : h.caches)
      c.bandwidth *= factor;
  } else if (resource == "pcie") {
    for (double *x : {&h.h2dPinned, &h.d2hPinned, &h.bidirPinned, &h.h2dPageable, &h.d2hPageable})
      *x *= factor;
  } else if (resource == "hbm") {
    h.hbmBandwidth *= factor;
  } else if (resource == "gpu-flops") {
    h.gpuFlopsF32 *= factor;
    h.gpuFlopsBF16 *= factor;
    for (auto &point : h.gpuMatmulBf16BySize)
      point.second *= factor;
  } else if (resource == "network") {
    for (LinkLevel &l : h.links)
      l.bandwidth *= factor;
  } else {
    error = "unknown what-if resource '" + resource.str() +
            "': expected cpu-clock, cpu-cores, dram, cache, pcie, hbm, gpu-flops or network";
    return std::nullopt;
  }
  h.name += "*" + resource.str() + "x" + std::to_string(factor);
  return h;
}

int64_t ranksPerHost(const Hardware &hw, int64_t world) {
  world = std::max<int64_t>(world, 1);
  if (!hw.hasGpu)
    return 1; // CPU ranks: the description is each rank's own
  return std::clamp<int64_t>(int64_t(hw.gpusPerHost + 0.5), 1, world);
}

Hardware rankShare(const Hardware &hw, int64_t ranks) {
  if (ranks <= 1)
    return hw;
  Hardware h = hw;
  double k = double(ranks);
  h.cpuCores = std::max(1, int(double(hw.cpuCores) / k));
  for (double *x : {&h.dramReadBandwidth, &h.dramCopyBandwidth, &h.cpuAdamParamsPerSec,
                    &h.hostGatherBandwidth})
    *x /= k;
  h.gpusPerHost = 1;
  h.name += "/" + std::to_string(ranks);
  return h;
}

double Hardware::gpuBf16Rate(double flops) const {
  const auto &c = gpuMatmulBf16BySize;
  if (c.empty() || flops <= 0)
    return gpuFlopsBF16;
  double n = std::cbrt(flops / 2);
  if (n <= c.front().first)
    return c.front().second;
  if (n >= c.back().first)
    return c.back().second;
  size_t i = 1;
  while (c[i].first < n)
    ++i;
  double f = std::log(n / c[i - 1].first) / std::log(c[i].first / c[i - 1].first);
  return c[i - 1].second + f * (c[i].second - c[i - 1].second);
}

/// The GPU roofline with each roof at a fraction of its rate.
static double gpuRoofline(const Hardware &hw, DType t, double flops, double bytes,
                          double flopsEff, double bytesEff) {
  double rate = t == DType::BF16 ? hw.gpuBf16Rate(flops) : hw.gpuFlopsF32;
  return std::max(flops / (rate * flopsEff), bytes / (hw.hbmBandwidth * bytesEff));
}

double gpuKernelTime(const Hardware &hw, DType t, double flops, double bytes) {
  double flopsEff = hw.gpuFlopsEfficiency > 0 ? hw.gpuFlopsEfficiency : hw.gpuKernelEfficiency;
  return gpuRoofline(hw, t, flops, bytes, flopsEff, hw.gpuKernelEfficiency);
}

double opTime(const Hardware &hw, Device d, DType t, double flops, double bytes,
              double workingSet) {
  if (d == Device::GPU)
    return gpuRoofline(hw, t, flops, bytes, 1, 1);
  double bw = hw.dramCopyBandwidth;
  for (const CacheLevel &c : hw.caches) // smallest first
    if (workingSet <= c.bytes) {
      bw = c.bandwidth;
      break;
    }
  return std::max(flops / hw.cpuFlops(), bytes / bw);
}

const char *placementName(GatherPlacement p) {
  switch (p) {
  case GatherPlacement::Device:
    return "device";
  case GatherPlacement::ZeroCopy:
    return "zero-copy";
  case GatherPlacement::HostGather:
    return "host-gather";
  }
  return "?";
}

std::optional<GatherPlacement> parsePlacement(llvm::StringRef name) {
  for (GatherPlacement p :
       {GatherPlacement::Device, GatherPlacement::ZeroCopy, GatherPlacement::HostGather})
    if (name == placementName(p))
      return p;
  return std::nullopt;
}

double gatherTime(const Hardware &hw, GatherPlacement p, double rows, double rowBytes) {
  double bytes = rows * rowBytes;
  if (!hw.hasGpu) // the CPU gathers whatever the placement: host memory is all there is
    return hostGatherCpuTime(hw, rows, rowBytes);
  switch (p) {
  case GatherPlacement::Device: // read the rows and the indices, write the rows
    return (2 * bytes + 8 * rows) / (hw.hasGpu ? hw.hbmBandwidth : hw.dramCopyBandwidth);
  case GatherPlacement::ZeroCopy: {
    // Without a fitted rate: 93% of the pinned upload rate (the sorted
    // gather's measured share of the copy engine at 512 B and up) and
    // 0.7 ns a row (the H100 fit).
    double bw = hw.zeroCopyGatherBandwidth > 0 ? hw.zeroCopyGatherBandwidth
                                                : 0.93 * hw.h2dPinned;
    double row = hw.zeroCopyRowSeconds > 0 ? hw.zeroCopyRowSeconds : 0.7e-9;
    return rows * row + bytes / bw;
  }
  case GatherPlacement::HostGather: // then one upload
    return hostGatherCpuTime(hw, rows, rowBytes) +
           (hw.hasGpu && hw.h2dPinned > 0 ? bytes / hw.h2dPinned : 0);
  }
  return 0;
}

double hostGatherCpuTime(const Hardware &hw, double rows, double rowBytes) {
  // Without a fitted rate: the cores copy at half the host's copy
  // bandwidth, 6.6 ns a row (the H100 host's fit).
  double bw = hw.hostGatherBandwidth > 0 ? hw.hostGatherBandwidth : hw.dramCopyBandwidth / 2;
  double row = hw.hostGatherRowSeconds > 0 ? hw.hostGatherRowSeconds : 6.6e-9;
  return rows * row + rows * rowBytes / bw;
}

double transferTime(const Hardware &hw, double h2d, double d2h, bool pinned) {
  if (!pinned)
    return h2d / hw.h2dPageable + d2h / hw.d2hPageable;
  return std::max({h2d / hw.h2dPinned, d2h / hw.d2hPinned, (h2d + d2h) / hw.bidirPinned});
}

UpdateEstimate updateTime(const Hardware &hw, double params, double gpuFraction) {
  UpdateEstimate e;
  double ng = hw.hasGpu ? params * std::clamp(gpuFraction, 0.0, 1.0) : 0;
  double nc = params - ng;
  // The CPU path: DRAM-bound at 28 bytes per parameter, or the measured
  // update rate where one is known (it already includes the traffic).
  e.cpuSeconds = hw.cpuAdamParamsPerSec > 0 ? nc / hw.cpuAdamParamsPerSec
                                            : nc * kCpuAdamBytesPerParam / hw.dramCopyBandwidth;
  if (ng > 0) {
    e.pcieSeconds = transferTime(hw, ng * kGpuAdamBytesEachWay, ng * kGpuAdamBytesEachWay);
    e.gpuSeconds = hw.gpuAdamParamsPerSec > 0 ? ng / hw.gpuAdamParamsPerSec
                                              : ng * kCpuAdamBytesPerParam / hw.hbmBandwidth;
  }
  // One host-memory budget: DMA reads and writes host memory too. A measured
  // CPU update rate proves the memory sustains at least 28 bytes per
  // parameter at that rate, so the budget is the larger of the two.
  double hostBw = std::max(hw.dramCopyBandwidth, hw.cpuAdamParamsPerSec * kCpuAdamBytesPerParam);
  e.hostMemorySeconds = (nc * kCpuAdamBytesPerParam + 2 * ng * kGpuAdamBytesEachWay) / hostBw;
  e.total = std::max({e.cpuSeconds, e.pcieSeconds + e.gpuSeconds, e.hostMemorySeconds});
  return e;
}

std::pair<double, UpdateEstimate> bestUpdateSplit(const Hardware &hw, double params,
                                                  int granularity) {
  std::pair<double, UpdateEstimate> best{0.0, updateTime(hw, params, 0.0)};
  if (!hw.hasGpu)
    return best;
  for (int i = 1; i <= granularity; ++i) {
    double f = double(i) / granularity;
    UpdateEstimate e = updateTime(hw, params, f);
    if (e.total < best.second.total)
      best = {f, e};
  }
  return best;
}

GroupLink groupLink(const Hardware &hw, const std::vector<std::string> &topology,
                    const std::vector<std::string> &levels) {
  GroupLink g;
  if (hw.links.empty())
    return g;
  bool first = true;
  for (const std::string &level : levels) {
    const LinkLevel *link = nullptr;
    for (const LinkLevel &l : hw.links)
      if (l.name == level)
        link = &l;
    if (!link) {
      size_t pos = 0;
      while (pos < topology.size() && topology[pos] != level)
        ++pos;
      link = &hw.links[std::min(pos, hw.links.size() - 1)];
    }
    if (first || link->bandwidth < g.bandwidth)
      g.bandwidth = link->bandwidth;
    g.latency = std::max(g.latency, link->latency);
    first = false;
  }
  return g;
}

} // namespace loom::cost
