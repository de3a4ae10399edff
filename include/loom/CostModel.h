//===- CostModel.h - hardware description and cost model ------*- C++ -*-===//
//
// What the offload and distribution passes ask before they place anything:
// how long an op, a transfer or an optimizer update takes on this machine.
// Every estimate is a roofline (work over rate, bytes over bandwidth, the
// larger wins) on a hardware description that is plain data, read from and
// written to JSON (docs/cost-model.md), so a plan can be recomputed for a
// machine that does not exist yet (what-if scaling).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_COSTMODEL_H
#define LOOM_COSTMODEL_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace loom::cost {

/// One level of the CPU's cache hierarchy: capacity and the bandwidth all
/// cores together get from it.
struct CacheLevel {
  std::string name;
  double bytes = 0;
  double bandwidth = 0; // bytes/s, all cores
};

/// A level of the collective topology (GCD pair, node, network) and the bus
/// bandwidth an all-reduce reaches on it.
struct LinkLevel {
  std::string name;
  double bandwidth = 0; // bytes/s
  double latency = 0;   // seconds a ring step (a message's start-up)
};

/// What a collective over some topology levels runs at: the slowest
/// link among them.
struct GroupLink {
  double bandwidth = 0, latency = 0;
};

/// Rates are per second, sizes in bytes. A zero rate means "not measured"
/// and is derived where a formula allows (documented at each use).
struct Hardware {
  std::string name;
  // Host.
  int cpuCores = 1;
  double cpuClockHz = 0;
  double cpuFlopsPerCycle = 0; // fp32, per core (e.g. 32 for AVX-512 FMA)
  double dramReadBandwidth = 0;
  double dramCopyBandwidth = 0; // read + write streams, counted once
  std::vector<CacheLevel> caches;
  double cpuAdamParamsPerSec = 0;
  // PCIe.
  double h2dPinned = 0, d2hPinned = 0, bidirPinned = 0;
  double h2dPageable = 0, d2hPageable = 0;
  // GPU (absent on a CPU-only host).
  bool hasGpu = false;
  double gpuMemoryBytes = 0;
  double hbmBandwidth = 0;
  double gpuFlopsF32 = 0, gpuFlopsBF16 = 0;
  /// bf16 matrix-product rate by size (square products of edge n, measured
  /// by loom-calibrate), ascending n: small products reach less of the
  /// peak. Empty: gpuFlopsBF16 at every size.
  std::vector<std::pair<double, double>> gpuMatmulBf16BySize; // {n, flops/s}
  double gpuAdamParamsPerSec = 0;
  /// The rate (flops/s, FlashAttention's count) the runtime's fused bf16
  /// attention kernels reach, forward and backward alike (measured by
  /// bench/run-attention-gpu.sh). 0: attention is priced at the bf16
  /// product rate like any product.
  double gpuAttentionBf16Rate = 0;
  // Commands (kernels, event records, stream waits) the host may issue to
  // one stream ahead of the GPU before issuing blocks: the driver's launch
  // queue, measured by loom-calibrate (1015 on the H100 host). 0: unbounded.
  double gpuLaunchQueue = 0;
  std::vector<LinkLevel> links;
  // What a whole training step reaches of the rates above (1 = all of it),
  // fitted on a measured step (docs/cost-model.md, "Fitting the step
  // model"): the fraction of the roofline its GPU kernels achieve, and of
  // the measured CPU Adam rate the CPU updates keep while the copies share
  // host memory with them.
  double gpuKernelEfficiency = 1;
  double cpuUpdateEfficiency = 1;
  // The fraction of the product rate (gpuBf16Rate, gpuFlopsF32) that
  // compute-bound kernels (cuBLAS's products) reach, where it differs from
  // the memory-bound kernels' gpuKernelEfficiency: on the H200 products
  // reach their measured rate and the runtime's own kernels half of HBM
  // (bench/RESULTS.md, 2026-11-29, kernel by kernel). 0: gpuKernelEfficiency
  // for both (the descriptions fitted on whole steps before then).
  double gpuFlopsEfficiency = 0;
  // The compute stream's idle time between one kernel and the next while
  // the host keeps it fed (the launch latency CUDA does not hide): a step
  // of thousands of small kernels loses it thousands of times. Measured on
  // the H200 with CUPTI as (step - kernel time) / kernels: 2.5-2.7 us
  // (bench/RESULTS.md, 2026-11-29). 0: none (descriptions before then).
  double gpuKernelGapSeconds = 0;
  // The same idle time between two kernels replayed from a captured graph
  // (loom-capture-graphs): the GPU's front end walks the graph without the
  // host's launches between. 0: gpuKernelGapSeconds (no measurement; a
  // graph still saves the host its launches).
  double gpuGraphKernelGapSeconds = 0;
  // The fraction of its rate a compute kernel loses while a collective
  // runs beside it on the same GPU (NCCL's kernels take SMs and HBM
  // bandwidth from it): a kernel overlapping a collective for t seconds
  // takes this times t longer. Fitted on measured steps (docs/cost-model.md,
  // "Collectives beside kernels"). 0: none (descriptions before then).
  double gpuCommOverlapSlowdown = 0;
  // Row gathers from a table in pinned host memory (graph features), each
  // a fixed cost a row plus its bytes over a bandwidth (fitted on
  // bench/gather_bench: docs/cost-model.md, "Row gathers"). Zero-copy: the
  // GPU reads the rows itself, indices sorted on the GPU first. Host
  // gather: the CPU's cores copy the rows into a pinned buffer, which a
  // copy then uploads (priced as any copy). 0: derived from the PCIe and
  // DRAM rates (zeroCopyRate, hostGatherRate).
  double zeroCopyGatherBandwidth = 0, zeroCopyRowSeconds = 0;
  double hostGatherBandwidth = 0, hostGatherRowSeconds = 0;

  // GPUs sharing this host's CPU cores and DRAM (its PCIe rates are each
  // GPU's own link). The host rates above are the whole host's; a rank's
  // share is rankShare's.
  double gpusPerHost = 1;

  double cpuFlops() const { return cpuCores * cpuClockHz * cpuFlopsPerCycle; }
  /// The bf16 rate a product of `flops` reaches: the measured curve at the
  /// square product of as many flops (2 n^3), log-linear between points,
  /// the nearest end outside them.
  double gpuBf16Rate(double flops) const;
};

/// `levels` are the names of a group's levels with more than one rank;
/// `topology` every level's name, innermost first. A level takes the link
/// of its name in `hw.links`, else the link at its position (innermost
/// first, the last link for any level beyond); bandwidth 0 without links.
GroupLink groupLink(const Hardware &hw, const std::vector<std::string> &topology,
                    const std::vector<std::string> &levels);

/// How many of `world` data-parallel ranks share one host: with GPUs, as
/// many as the host has (gpus_per_host), at most the world. A CPU-only
/// description is taken as each CPU rank's own (1).
int64_t ranksPerHost(const Hardware &hw, int64_t world);
/// What one of `ranks` ranks sharing the host gets of it: its cores, DRAM
/// bandwidth and CPU Adam rate divided evenly (Deep Optimizer States §3:
/// the CPU updates and the DMA of every GPU on the host compete for the same
/// memory); each GPU's PCIe link and the GPU rates are its own.
Hardware rankShare(const Hardware &hw, int64_t ranks);

/// The built-in descriptions: "h100" (the project's H100 host, measured in
/// docs/cost-model.md's sources) and "cpu-host" (a small CPU-only machine).
/// Returns nullopt for other names.
std::optional<Hardware> preset(llvm::StringRef name);
/// Names of the presets, for messages.
std::string presetNames();

/// Reads a description; on failure returns nullopt and a one-line message
/// naming the key and what was expected.
std::optional<Hardware> parseHardware(llvm::StringRef json, std::string &error);
/// Writes the description as the JSON that parseHardware reads.
std::string toJson(const Hardware &hw);

/// What-if: a copy with one resource scaled by `factor` ("cpu-clock",
/// "cpu-cores", "dram", "cache", "pcie", "hbm", "gpu-flops", "network").
/// Scaling the clock leaves every bandwidth alone. Returns nullopt and sets
/// `error` for an unknown resource or a non-positive factor.
std::optional<Hardware> scaled(const Hardware &hw, llvm::StringRef resource,
                               double factor, std::string &error);

enum class Device { CPU, GPU };
enum class DType { F32, BF16 };

/// Time of an op doing `flops` arithmetic and moving `bytes` of memory
/// traffic. On the GPU: max(flops / rate(dtype), bytes / HBM). On the CPU the
/// memory side is served by the smallest cache level that holds
/// `workingSet` bytes, else DRAM (the high-frequency-cores paper's roofline:
/// faster cores help only while the op is compute-bound at that level).
double opTime(const Hardware &hw, Device d, DType t, double flops, double bytes,
              double workingSet);
/// A GPU kernel of a training step: opTime's GPU roofline with each roof
/// at what a step reaches of it, max(flops / (rate(dtype) x
/// gpu_flops_efficiency), bytes / (HBM x gpu_kernel_efficiency)).
double gpuKernelTime(const Hardware &hw, DType t, double flops, double bytes);

/// Where a gathered table lives (graph features): on the GPU, in pinned
/// host memory read by the GPU (zero-copy), or in host memory gathered by
/// the CPU into a pinned buffer and then uploaded.
enum class GatherPlacement { Device, ZeroCopy, HostGather };
const char *placementName(GatherPlacement p);
/// The placement `placementName` calls `name` (none: not a placement).
std::optional<GatherPlacement> parsePlacement(llvm::StringRef name);

/// Seconds to gather `rows` rows of `rowBytes` bytes: on the device, HBM
/// traffic; zero-copy, the fitted PCIe read (indices sorted on the GPU
/// first); host gather, the CPU's gather plus the upload of its result.
double gatherTime(const Hardware &hw, GatherPlacement p, double rows, double rowBytes);
/// The CPU's part of a host gather (rows copied into a pinned buffer).
double hostGatherCpuTime(const Hardware &hw, double rows, double rowBytes);

/// Host<->GPU copies running at once: each direction at its own rate and
/// both together under the bidirectional limit. Pageable copies have no
/// bidirectional overlap (they are staged by the CPU).
double transferTime(const Hardware &hw, double h2dBytes, double d2hBytes,
                    bool pinned = true);

/// Bytes of host DRAM traffic of one fp32 Adam update on the CPU: read
/// param, grad, m, v and write param, m, v: 7 x 4 = 28 bytes per parameter.
constexpr double kCpuAdamBytesPerParam = 28;
/// PCIe bytes of a GPU update of host-resident state: fp32 param, m and v in
/// (12 bytes) and back out (12 bytes).
constexpr double kGpuAdamBytesEachWay = 12;

/// The optimizer update of `params` parameters whose state lives in pinned
/// host memory, with `gpuFraction` of them streamed to the GPU, updated and
/// streamed back while the CPU updates the rest. Both paths draw on one host
/// memory budget: the CPU update's DRAM traffic and the DMA traffic (which
/// the host memory must serve too) together cannot exceed the DRAM copy
/// bandwidth (Deep Optimizer States, "competition for shared resources").
struct UpdateEstimate {
  double cpuSeconds = 0;  // the CPU path alone
  double pcieSeconds = 0; // the GPU path's transfers alone
  double gpuSeconds = 0;  // the GPU path's kernels
  double hostMemorySeconds = 0; // the shared-budget bound
  double total = 0;       // the max of the above
};
UpdateEstimate updateTime(const Hardware &hw, double params, double gpuFraction);

/// The GPU fraction (in steps of 1/granularity) that minimises updateTime,
/// and that time.
std::pair<double, UpdateEstimate> bestUpdateSplit(const Hardware &hw, double params,
                                                  int granularity = 100);

} // namespace loom::cost

#endif // LOOM_COSTMODEL_H
