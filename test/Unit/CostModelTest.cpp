// Unit tests of the cost model: the hardware description's JSON (round trip,
// errors naming the key), the roofline, transfers with the bidirectional
// limit, the shared host-memory budget and what-if scaling. Expected values
// are worked out by hand from the formulas in docs/cost-model.md.
#include "loom/CostModel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

using namespace loom::cost;

namespace {

Hardware h100() { return *preset("h100"); }

TEST(Hardware, PresetsRoundTripThroughJson) {
  for (const char *name : {"h100", "cpu-host", "frontier"}) {
    Hardware h = *preset(name);
    std::string err;
    auto back = parseHardware(toJson(h), err);
    ASSERT_TRUE(back) << err;
    EXPECT_EQ(toJson(*back), toJson(h));
    EXPECT_EQ(back->hasGpu, h.hasGpu);
    EXPECT_EQ(back->caches.size(), h.caches.size());
  }
  EXPECT_FALSE(preset("tpu"));
}

// loom-calibrate measures this machine (quick sizes, host only) and writes
// a description the cost model reads back: every measured rate positive,
// caches smallest first, and the DRAM bandwidth below the fastest cache's.
namespace {
/// Runs loom-calibrate --quick --no-gpu with `env` before it; its JSON and
/// what it printed.
struct Calibration {
  std::string json, printed;
};
Calibration calibrate(const std::string &env, const std::string &tag) {
  std::string file = ::testing::TempDir() + "loom-calibrate-" + tag + ".json",
              log = ::testing::TempDir() + "loom-calibrate-" + tag + ".log";
  std::string cmd = env + " " + std::string(LOOM_CALIBRATE) + " --quick --no-gpu -o " + file +
                    " > " + log;
  EXPECT_EQ(0, std::system(cmd.c_str())) << cmd;
  auto slurp = [](const std::string &path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  };
  return {slurp(file), slurp(log)};
}
} // namespace

// What must hold on every machine: the file parses and its rates are
// positive. What a machine may not tell (its caches: some virtual machines
// expose neither sysfs's cache directory nor CPUID's cache leaves) is
// checked only where it was found, and the output names the source. The
// order of measured bandwidths (a cache faster than DRAM) is a property of
// an idle machine, not of the tool: it is printed, not asserted (a busy CI
// machine measured L1 at DRAM speed).
TEST(Hardware, ReadsWhatLoomCalibrateWrites) {
  Calibration c = calibrate("", "host");
  std::string err;
  auto hw = parseHardware(c.json, err);
  ASSERT_TRUE(hw) << err << "\n" << c.json;
  EXPECT_GE(hw->cpuCores, 1);
  EXPECT_GT(hw->cpuClockHz, 1e7);
  EXPECT_GT(hw->dramReadBandwidth, 1e6);
  EXPECT_GT(hw->dramCopyBandwidth, 1e6);
  EXPECT_GT(hw->cpuAdamParamsPerSec, 1e3);
  EXPECT_FALSE(hw->hasGpu);
  bool sysfs = c.json.find("\"cache_source\": \"sysfs\"") != std::string::npos,
       cpuid = c.json.find("\"cache_source\": \"cpuid\"") != std::string::npos,
       none = c.json.find("\"cache_source\": \"none\"") != std::string::npos;
  ASSERT_TRUE(sysfs || cpuid || none) << c.json;
  EXPECT_NE(c.printed.find("caches from "), std::string::npos) << c.printed;
  for (size_t i = 1; i < hw->caches.size(); ++i)
    EXPECT_LE(hw->caches[i - 1].bytes, hw->caches[i].bytes);
  for (const CacheLevel &l : hw->caches)
    std::printf("  %s: %.0f KiB at %.1f GB/s (DRAM read %.1f GB/s)\n", l.name.c_str(),
                l.bytes / 1024, l.bandwidth / 1e9, hw->dramReadBandwidth / 1e9);
  // And the model answers with it: an update of 1e8 parameters on the CPU.
  EXPECT_GT(updateTime(*hw, 1e8, 0.0).total, 0.0);
}

// A machine without sysfs's cache directory (LOOM_SYSFS_ROOT at an empty
// folder): the tool still writes a description the model reads, its caches
// from CPUID where the CPU has the leaf, else none, and says which.
TEST(Hardware, CalibratesWithoutSysfs) {
  std::string root = ::testing::TempDir() + "loom-empty-sysfs";
  std::system(("rm -rf " + root + " && mkdir -p " + root).c_str());
  Calibration c = calibrate("LOOM_SYSFS_ROOT=" + root, "nosysfs");
  std::string err;
  auto hw = parseHardware(c.json, err);
  ASSERT_TRUE(hw) << err << "\n" << c.json;
  EXPECT_EQ(c.json.find("\"cache_source\": \"sysfs\""), std::string::npos) << c.json;
  bool none = c.json.find("\"cache_source\": \"none\"") != std::string::npos;
  EXPECT_EQ(none, hw->caches.empty()) << c.json;
  if (none)
    EXPECT_NE(c.printed.find("caches from none"), std::string::npos) << c.printed;
  else
    EXPECT_NE(c.printed.find("caches from cpuid"), std::string::npos) << c.printed;
  // No caches: CPU work is charged at DRAM speed, and still answered.
  Hardware noCaches = *hw;
  noCaches.caches.clear();
  EXPECT_GT(updateTime(noCaches, 1e8, 0.0).total, 0.0);
}

// A sysfs tree written here: the sizes read are exactly the files' (the
// parser, independent of the machine), instruction caches left out.
TEST(Hardware, CalibrateReadsSysfsCaches) {
  std::string root = ::testing::TempDir() + "loom-fake-sysfs";
  std::string dir = root + "/devices/system/cpu/cpu0/cache/";
  std::string mk = "rm -rf " + root + " && mkdir -p " + dir + "index0 " + dir + "index1 " + dir +
                   "index2 && cd " + dir +
                   " && printf Data > index0/type && printf 1 > index0/level && printf 48K > "
                   "index0/size && printf 0 > index0/shared_cpu_list"
                   " && printf Instruction > index1/type && printf 1 > index1/level && printf 32K "
                   "> index1/size && printf 0 > index1/shared_cpu_list"
                   " && printf Unified > index2/type && printf 2 > index2/level && printf 2048K > "
                   "index2/size && printf 0-1 > index2/shared_cpu_list";
  ASSERT_EQ(0, std::system(mk.c_str())) << mk;
  Calibration c = calibrate("LOOM_SYSFS_ROOT=" + root, "fakesysfs");
  std::string err;
  auto hw = parseHardware(c.json, err);
  ASSERT_TRUE(hw) << err << "\n" << c.json;
  EXPECT_NE(c.json.find("\"cache_source\": \"sysfs\""), std::string::npos) << c.json;
  ASSERT_EQ(hw->caches.size(), 2u) << c.json;
  EXPECT_EQ(hw->caches[0].name, "L1");
  EXPECT_EQ(hw->caches[0].bytes, 48.0 * 1024);
  EXPECT_EQ(hw->caches[1].name, "L2");
  EXPECT_EQ(hw->caches[1].bytes, 2048.0 * 1024);
}

// Ranges: a value no machine has is refused with the range, and a file
// nested deeper than a description can be is refused before llvm::json's
// recursive parser sees it (40,000 levels overflowed its stack).
TEST(Hardware, RefusesValuesNoMachineHas) {
  std::string err;
  const char *base = R"({"name": "x", "cpu_clock_hz": 3e9,
      "cpu_flops_per_cycle": 32, "dram_read_bandwidth": 5e10, "dram_copy_bandwidth": 4e10)";
  EXPECT_TRUE(parseHardware(std::string(base) + R"(, "cpu_cores": 4})", err)) << err;
  EXPECT_FALSE(parseHardware(std::string(base) + R"(, "cpu_cores": 4294967296})", err));
  EXPECT_NE(err.find("'cpu_cores' must be an integer in [1, 1048576]"), std::string::npos) << err;
  std::string four = std::string(base) + R"(, "cpu_cores": 4)";
  EXPECT_FALSE(parseHardware(four + R"(, "gpu_hbm_bandwidth": 1e-300})", err));
  EXPECT_NE(err.find("'gpu_hbm_bandwidth' is 1e-300, outside the range of real machines"),
            std::string::npos)
      << err;
  EXPECT_FALSE(parseHardware(four + R"(, "pcie_h2d_pinned": 1e300})", err));
  EXPECT_NE(err.find("outside the range"), std::string::npos) << err;
  EXPECT_FALSE(
      parseHardware(four + R"(, "links": [{"name": "node", "bandwidth": 1e-9}]})", err));
  EXPECT_NE(err.find("'links' level 'node': 'bandwidth' 1e-09 is outside"), std::string::npos)
      << err;
  std::string deep(40000, '[');
  EXPECT_FALSE(parseHardware(deep, err));
  EXPECT_NE(err.find("nests arrays or objects more than 16 deep"), std::string::npos) << err;
  // Brackets inside strings do not count.
  EXPECT_TRUE(parseHardware(four + R"(, "caches": [{"name": "[[[[[[[[[[[[[[[[[[[[", "bytes": 1e6,
      "bandwidth": 1e11}]})", err)) << err;
}

TEST(Hardware, ErrorsNameTheKey) {
  std::string err;
  EXPECT_FALSE(parseHardware("{", err));
  EXPECT_NE(err.find("not JSON"), std::string::npos) << err;
  EXPECT_FALSE(parseHardware(R"({"name": "x"})", err));
  EXPECT_NE(err.find("'cpu_cores'"), std::string::npos) << err;
  const char *base = R"({"name": "x", "cpu_cores": 4, "cpu_clock_hz": 3e9,
      "cpu_flops_per_cycle": 32, "dram_read_bandwidth": 5e10, "dram_copy_bandwidth": 4e10)";
  EXPECT_TRUE(parseHardware(std::string(base) + "}", err)) << err;
  EXPECT_FALSE(parseHardware(std::string(base) + R"(, "dram_copy_bandwith": 1})", err));
  EXPECT_NE(err.find("unknown key 'dram_copy_bandwith'"), std::string::npos) << err;
  EXPECT_FALSE(parseHardware(std::string(base) + R"(, "pcie_h2d_pinned": -1})", err));
  EXPECT_NE(err.find("'pcie_h2d_pinned' must be a positive number"), std::string::npos) << err;
  // A GPU needs its rates.
  EXPECT_FALSE(parseHardware(std::string(base) + R"(, "gpu": true})", err));
  EXPECT_NE(err.find("missing 'pcie_h2d_pinned'"), std::string::npos) << err;
  EXPECT_FALSE(parseHardware(std::string(base) + R"(, "caches": [{"name": "L2"}]})", err));
  EXPECT_NE(err.find("'caches'"), std::string::npos) << err;
}

// Links per topology level: a level takes the link of its name, else the
// one at its position (the last for levels beyond); a group runs at its
// slowest level's bandwidth and the largest latency.
TEST(Hardware, GroupsRunAtTheirSlowestLink) {
  Hardware f = *preset("frontier");
  std::vector<std::string> topo = {"gcd", "gpu", "node"};
  GroupLink pair = groupLink(f, topo, {"gcd"});
  EXPECT_EQ(pair.bandwidth, 200e9);
  EXPECT_EQ(pair.latency, 1e-6);
  GroupLink nodeWide = groupLink(f, topo, {"gcd", "gpu"});
  EXPECT_EQ(nodeWide.bandwidth, 50e9);
  EXPECT_EQ(nodeWide.latency, 2e-6);
  GroupLink world = groupLink(f, topo, {"gcd", "gpu", "node"});
  EXPECT_EQ(world.bandwidth, 12.5e9);
  EXPECT_EQ(world.latency, 5e-6);
  // By position: h100's links are named after transports, not levels.
  Hardware h = h100();
  GroupLink inner = groupLink(h, {"gpu", "node", "rack", "row"}, {"gpu"});
  EXPECT_EQ(inner.bandwidth, h.links[0].bandwidth);
  GroupLink beyond = groupLink(h, {"gpu", "node", "rack", "row"}, {"row"});
  EXPECT_EQ(beyond.bandwidth, h.links.back().bandwidth);
  Hardware none = *preset("cpu-host");
  EXPECT_EQ(groupLink(none, topo, {"gcd"}).bandwidth, 0);
  // The latency is read and checked.
  std::string err, j = toJson(h);
  auto at = j.find("\"latency\": 0");
  ASSERT_NE(at, std::string::npos) << j;
  std::string bad = j;
  bad.replace(at, std::string("\"latency\": 0").size(), "\"latency\": -1");
  EXPECT_FALSE(parseHardware(bad, err));
  EXPECT_NE(err.find("'latency' must be a number of seconds in [0, 10]"), std::string::npos)
      << err;
}

TEST(Hardware, StepEfficienciesAreFractions) {
  std::string err;
  const char *base = R"({"name": "x", "cpu_cores": 4, "cpu_clock_hz": 3e9,
      "cpu_flops_per_cycle": 32, "dram_read_bandwidth": 5e10, "dram_copy_bandwidth": 4e10)";
  // Absent: the rates are taken as reached in full.
  std::optional<Hardware> h = parseHardware(std::string(base) + "}", err);
  ASSERT_TRUE(h) << err;
  EXPECT_EQ(h->gpuKernelEfficiency, 1.0);
  EXPECT_EQ(h->cpuUpdateEfficiency, 1.0);
  h = parseHardware(std::string(base) +
                        R"(, "gpu_kernel_efficiency": 0.6, "cpu_update_efficiency": 0.68})",
                    err);
  ASSERT_TRUE(h) << err;
  EXPECT_EQ(h->gpuKernelEfficiency, 0.6);
  EXPECT_EQ(h->cpuUpdateEfficiency, 0.68);
  // Written back only when fitted, and read again unchanged.
  std::optional<Hardware> again = parseHardware(toJson(*h), err);
  ASSERT_TRUE(again) << err;
  EXPECT_EQ(again->cpuUpdateEfficiency, 0.68);
  EXPECT_EQ(toJson(h100()).find("efficiency"), std::string::npos);
  EXPECT_FALSE(parseHardware(std::string(base) + R"(, "gpu_kernel_efficiency": 1.5})", err));
  EXPECT_NE(err.find("fractions in (0, 1]"), std::string::npos) << err;
  EXPECT_FALSE(parseHardware(std::string(base) + R"(, "cpu_update_efficiency": 0})", err));
  EXPECT_NE(err.find("'cpu_update_efficiency' must be a positive number"), std::string::npos) << err;
  // The fused attention kernels' measured rate: absent (0) by default,
  // read and written back when given, and positive.
  EXPECT_EQ(h->gpuAttentionBf16Rate, 0.0);
  h = parseHardware(std::string(base) + R"(, "gpu_attention_bf16_flops": 1.55e14})", err);
  ASSERT_TRUE(h) << err;
  EXPECT_EQ(h->gpuAttentionBf16Rate, 1.55e14);
  again = parseHardware(toJson(*h), err);
  ASSERT_TRUE(again) << err;
  EXPECT_EQ(again->gpuAttentionBf16Rate, 1.55e14);
  EXPECT_FALSE(parseHardware(std::string(base) + R"(, "gpu_attention_bf16_flops": -1})", err));
  EXPECT_NE(err.find("'gpu_attention_bf16_flops' must be a positive number"), std::string::npos)
      << err;
}

// A kernel's two roofs at what a step reaches of each: the products at
// gpu_flops_efficiency (gpu_kernel_efficiency where it is absent), the
// memory-bound kernels at gpu_kernel_efficiency.
TEST(Hardware, KernelRoofsHaveTheirOwnEfficiencies) {
  Hardware h = h100();
  h.gpuMatmulBf16BySize.clear();
  h.gpuKernelEfficiency = 0.5;
  double flops = 1e12, bytes = 1e6; // compute-bound
  EXPECT_DOUBLE_EQ(gpuKernelTime(h, DType::BF16, flops, bytes), flops / (h.gpuFlopsBF16 * 0.5));
  h.gpuFlopsEfficiency = 1.0;
  EXPECT_DOUBLE_EQ(gpuKernelTime(h, DType::BF16, flops, bytes), flops / h.gpuFlopsBF16);
  EXPECT_DOUBLE_EQ(gpuKernelTime(h, DType::BF16, 1e3, 1e9), 1e9 / (h.hbmBandwidth * 0.5));
  std::string err;
  std::optional<Hardware> again = parseHardware(toJson(h), err);
  ASSERT_TRUE(again) << err;
  EXPECT_EQ(again->gpuFlopsEfficiency, 1.0);
  EXPECT_EQ(again->gpuKernelGapSeconds, 0.0);
  h.gpuFlopsEfficiency = 1.2;
  EXPECT_FALSE(parseHardware(toJson(h), err));
  EXPECT_NE(err.find("'gpu_flops_efficiency'"), std::string::npos) << err;
  h.gpuFlopsEfficiency = 1.0;
  h.gpuKernelGapSeconds = 2.6e-6;
  again = parseHardware(toJson(h), err);
  ASSERT_TRUE(again) << err;
  EXPECT_EQ(again->gpuKernelGapSeconds, 2.6e-6);
  h.gpuKernelGapSeconds = 0.5; // half a second between kernels is no GPU
  EXPECT_FALSE(parseHardware(toJson(h), err));
  EXPECT_NE(err.find("outside the range of real machines"), std::string::npos) << err;
}

// A host shared by several GPUs: each data-parallel rank gets its share of
// the cores, DRAM and CPU Adam rate, never of its own PCIe link or GPU; a
// CPU-only description is each CPU rank's own.
TEST(Hardware, RanksShareTheirHost) {
  std::string err;
  Hardware h = h100();
  EXPECT_EQ(h.gpusPerHost, 1);
  EXPECT_EQ(ranksPerHost(h, 4), 1);
  h.gpusPerHost = 4;
  EXPECT_EQ(ranksPerHost(h, 2), 2);
  EXPECT_EQ(ranksPerHost(h, 8), 4);
  Hardware s = rankShare(h, ranksPerHost(h, 8));
  EXPECT_EQ(s.cpuCores, 4);
  EXPECT_DOUBLE_EQ(s.dramCopyBandwidth, h.dramCopyBandwidth / 4);
  EXPECT_DOUBLE_EQ(s.dramReadBandwidth, h.dramReadBandwidth / 4);
  EXPECT_DOUBLE_EQ(s.cpuAdamParamsPerSec, h.cpuAdamParamsPerSec / 4);
  EXPECT_DOUBLE_EQ(s.h2dPinned, h.h2dPinned);
  EXPECT_DOUBLE_EQ(s.gpuFlopsBF16, h.gpuFlopsBF16);
  EXPECT_EQ(rankShare(h, 1).name, h.name);
  EXPECT_EQ(ranksPerHost(*preset("cpu-host"), 4), 1);
  // Read and written as gpus_per_host, a whole number.
  std::optional<Hardware> back = parseHardware(toJson(h), err);
  ASSERT_TRUE(back) << err;
  EXPECT_EQ(back->gpusPerHost, 4);
  EXPECT_EQ(toJson(h100()).find("gpus_per_host"), std::string::npos);
  const char *base = R"({"name": "x", "cpu_cores": 4, "cpu_clock_hz": 3e9,
      "cpu_flops_per_cycle": 32, "dram_read_bandwidth": 5e10, "dram_copy_bandwidth": 4e10)";
  EXPECT_FALSE(parseHardware(std::string(base) + R"(, "gpus_per_host": 1.5})", err));
  EXPECT_NE(err.find("'gpus_per_host' must be a whole number"), std::string::npos) << err;
}

// loom-calibrate's bf16 rates by size: read sorted, interpolated in log n
// at the square product of the same flops, the ends outside, the peak
// without a curve; the launch queue is a plain positive number.
TEST(Hardware, MatmulRateBySizeAndLaunchQueue) {
  std::string err;
  const char *base = R"({"name": "x", "cpu_cores": 4, "cpu_clock_hz": 3e9,
      "cpu_flops_per_cycle": 32, "dram_read_bandwidth": 5e10, "dram_copy_bandwidth": 4e10,
      "gpu_flops_bf16": 8e14)";
  std::optional<Hardware> h = parseHardware(std::string(base) + "}", err);
  ASSERT_TRUE(h) << err;
  EXPECT_EQ(h->gpuBf16Rate(1e9), 8e14);
  EXPECT_EQ(h->gpuLaunchQueue, 0.0);
  h = parseHardware(std::string(base) + R"(, "gpu_launch_queue": 1015,
      "gpu_matmul_bf16_by_size": [{"n": 4096, "flops": 7e14}, {"n": 1024, "flops": 2e14}]})",
                    err);
  ASSERT_TRUE(h) << err;
  EXPECT_EQ(h->gpuLaunchQueue, 1015.0);
  ASSERT_EQ(h->gpuMatmulBf16BySize.size(), 2u);
  EXPECT_EQ(h->gpuMatmulBf16BySize.front().first, 1024.0);
  auto cube = [](double n) { return 2 * n * n * n; };
  EXPECT_NEAR(h->gpuBf16Rate(cube(2048)), 4.5e14, 1e6); // halfway in log n
  EXPECT_NEAR(h->gpuBf16Rate(cube(512)), 2e14, 1e6);
  EXPECT_NEAR(h->gpuBf16Rate(cube(16384)), 7e14, 1e6);
  EXPECT_NEAR(opTime(*h, Device::GPU, DType::BF16, cube(2048), 0, 0), cube(2048) / 4.5e14, 1e-12);
  // Written back and read again unchanged; scaled with the GPU's flops.
  std::optional<Hardware> again = parseHardware(toJson(*h), err);
  ASSERT_TRUE(again) << err;
  EXPECT_EQ(toJson(*again), toJson(*h));
  EXPECT_NEAR(scaled(*h, "gpu-flops", 2, err)->gpuBf16Rate(cube(1024)), 4e14, 1e6);
  EXPECT_FALSE(parseHardware(std::string(base) + R"(, "gpu_matmul_bf16_by_size": [{"n": 8}]})", err));
  EXPECT_NE(err.find("needs a positive 'n' and 'flops'"), std::string::npos) << err;
  EXPECT_FALSE(parseHardware(std::string(base) + R"(, "gpu_matmul_bf16_by_size": 3})", err));
  EXPECT_NE(err.find("must be an array"), std::string::npos) << err;
  EXPECT_FALSE(parseHardware(std::string(base) + R"(, "gpu_launch_queue": 0})", err));
  EXPECT_NE(err.find("'gpu_launch_queue' must be a positive number"), std::string::npos) << err;
}

TEST(CostModel, GpuRoofline) {
  Hardware h = h100();
  // An 8192^3 bf16 GEMM: 2 * 8192^3 flops over 780 TFLOP/s, compute-bound.
  double flops = 2.0 * 8192 * 8192 * 8192, bytes = 3.0 * 8192 * 8192 * 2;
  EXPECT_NEAR(opTime(h, Device::GPU, DType::BF16, flops, bytes, bytes), flops / 780e12, 1e-9);
  // An elementwise add of 1 GB: bandwidth-bound at 3 TB/s.
  EXPECT_NEAR(opTime(h, Device::GPU, DType::F32, 0.25e9, 3e9, 3e9), 1e-3, 1e-9);
}

TEST(CostModel, CpuRooflinePicksTheCacheLevel) {
  Hardware h = h100();
  double bytes = 1e9;
  // Fits L2 (32 MiB): served at 2 TB/s; fits L3 only: 500 GB/s; else DRAM.
  EXPECT_NEAR(opTime(h, Device::CPU, DType::F32, 0, bytes, 8 << 20), bytes / 2e12, 1e-12);
  EXPECT_NEAR(opTime(h, Device::CPU, DType::F32, 0, bytes, 50 << 20), bytes / 500e9, 1e-12);
  EXPECT_NEAR(opTime(h, Device::CPU, DType::F32, 0, bytes, 1e9), bytes / 90e9, 1e-12);
  // Compute-bound: 16 cores x 2 GHz x 64 flops/cycle = 2.048 TFLOP/s.
  EXPECT_NEAR(opTime(h, Device::CPU, DType::F32, 2.048e12, 1, 1), 1.0, 1e-9);
}

TEST(CostModel, TransfersRespectTheBidirectionalLimit) {
  Hardware h = h100();
  EXPECT_NEAR(transferTime(h, 55e9, 0), 1.0, 1e-12);
  // Both directions at once: 110 GB over the 92 GB/s bidirectional limit.
  EXPECT_NEAR(transferTime(h, 55e9, 55e9), 110.0 / 92, 1e-12);
  // Pageable copies are staged by the CPU: no overlap, 9.5 GB/s.
  EXPECT_NEAR(transferTime(h, 9.5e9, 9.5e9, /*pinned=*/false), 2.0, 1e-12);
}

TEST(CostModel, UpdateSplitBeatsEitherPathAlone) {
  Hardware h = h100();
  double n = 5e9; // the 5B model of the acceptance benchmark
  UpdateEstimate cpu = updateTime(h, n, 0), gpu = updateTime(h, n, 1);
  // CPU alone at the measured 5.4 G params/s.
  EXPECT_NEAR(cpu.total, n / 5.4e9, 1e-9);
  // GPU alone: 12 bytes in and out per parameter at 92 GB/s both ways.
  EXPECT_NEAR(gpu.pcieSeconds, n * 24 / 92e9, 1e-9);
  auto [f, best] = bestUpdateSplit(h, n);
  EXPECT_GT(f, 0.0);
  EXPECT_LT(f, 1.0);
  EXPECT_LT(best.total, cpu.total);
  EXPECT_LT(best.total, gpu.total);
  EXPECT_DOUBLE_EQ(best.total, std::max({best.cpuSeconds, best.pcieSeconds + best.gpuSeconds,
                                         best.hostMemorySeconds}));
  // The shared host-memory budget binds: were the paths independent, the
  // best split would be ~0.40 on the GPU at ~0.55 s; charged to one budget
  // (151 GB/s, what the measured CPU update rate proves) it is ~0.62 at
  // ~0.84 s (docs/cost-model.md works this example).
  double unshared = 1e30;
  for (int i = 0; i <= 100; ++i) {
    UpdateEstimate e = updateTime(h, n, i / 100.0);
    unshared = std::min(unshared, std::max(e.cpuSeconds, e.pcieSeconds + e.gpuSeconds));
  }
  EXPECT_NEAR(unshared, 0.55, 0.01);
  EXPECT_NEAR(f, 0.617, 0.01); // the crossing; the scan steps by 0.01
  EXPECT_NEAR(best.total, 0.844, 0.005);
}

TEST(CostModel, CpuOnlyHostUpdatesOnTheCpu) {
  Hardware h = *preset("cpu-host");
  auto [f, best] = bestUpdateSplit(h, 1e9);
  EXPECT_EQ(f, 0.0);
  EXPECT_NEAR(best.total, 1e9 / 2.6e9, 1e-9);
}

// The H100 preset's gather rates against bench/RESULTS.md (2026-11-27,
// gather_bench over a 4 GiB pinned table): zero-copy with the indices
// sorted on the GPU, and the CPU's gather followed by one upload (the
// measured "CPU gather + copy" used a 52.5 GB/s copy; the preset's is 55).
TEST(CostModel, GathersMatchTheMeasuredRates) {
  Hardware hw = *preset("h100");
  struct Row {
    double bytes, zeroCopyGBs, hostGBs;
  };
  for (Row r : {Row{64, 31.8, 6.6}, Row{512, 47.1, 16.5}, Row{4096, 48.6, 20.2}}) {
    double rows = 1e6;
    double zc = rows * r.bytes / gatherTime(hw, GatherPlacement::ZeroCopy, rows, r.bytes) / 1e9;
    double host = rows * r.bytes / gatherTime(hw, GatherPlacement::HostGather, rows, r.bytes) / 1e9;
    EXPECT_NEAR(zc / r.zeroCopyGBs, 1.0, 0.05) << r.bytes << " B rows, zero-copy";
    EXPECT_NEAR(host / r.hostGBs, 1.0, 0.05) << r.bytes << " B rows, host gather";
    // A table in HBM is far faster than either.
    EXPECT_LT(gatherTime(hw, GatherPlacement::Device, rows, r.bytes) * 10,
              gatherTime(hw, GatherPlacement::ZeroCopy, rows, r.bytes));
  }
  // Without a GPU every placement is the CPU's gather, with no upload.
  Hardware cpu = *preset("cpu-host");
  EXPECT_EQ(gatherTime(cpu, GatherPlacement::ZeroCopy, 1000, 512),
            gatherTime(cpu, GatherPlacement::Device, 1000, 512));
  EXPECT_EQ(gatherTime(cpu, GatherPlacement::HostGather, 1000, 512),
            hostGatherCpuTime(cpu, 1000, 512));
}

TEST(WhatIf, FasterCoresHelpOnlyWhileComputeBound) {
  Hardware h = h100();
  std::string err;
  auto fast = scaled(h, "cpu-clock", 4, err);
  ASSERT_TRUE(fast) << err;
  // A DRAM-bound op (Adam-like: little arithmetic per byte) does not change.
  double flops = 1e9, bytes = 28e9;
  EXPECT_DOUBLE_EQ(opTime(*fast, Device::CPU, DType::F32, flops, bytes, bytes),
                   opTime(h, Device::CPU, DType::F32, flops, bytes, bytes));
  // A compute-bound one in cache gets 4x faster.
  double a = opTime(h, Device::CPU, DType::F32, 1e12, 1e6, 1e6);
  double b = opTime(*fast, Device::CPU, DType::F32, 1e12, 1e6, 1e6);
  EXPECT_NEAR(a / b, 4.0, 1e-9);
  // So the optimizer update is unchanged by the clock, and faster by DRAM.
  EXPECT_DOUBLE_EQ(updateTime(*fast, 5e9, 0).total, updateTime(h, 5e9, 0).total);
  auto wide = scaled(h, "dram", 2, err);
  ASSERT_TRUE(wide);
  EXPECT_NEAR(updateTime(h, 5e9, 0).total / updateTime(*wide, 5e9, 0).total, 2.0, 1e-9);
  EXPECT_FALSE(scaled(h, "cpu-speed", 2, err));
  EXPECT_NE(err.find("unknown what-if resource 'cpu-speed'"), std::string::npos);
  EXPECT_FALSE(scaled(h, "dram", 0, err));
}

} // namespace
