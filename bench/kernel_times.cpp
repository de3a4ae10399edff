// kernel_times: an LD_PRELOAD library that sums the GPU time of every
// kernel a process launches, by kernel name, through CUPTI's activity API,
// and writes one CSV line per kernel at exit ("name",calls,total_ns) to
// $LOOM_KERNEL_TIMES (or stderr). It profiles a loomc-generated training
// binary the way torch.profiler profiles PyTorch (bench/profile-gpt2-gpu.sh),
// where Nsight Systems is not installed.
//   c++ -O2 -shared -fPIC bench/kernel_times.cpp -I$CUDA/include -L$CUDA/lib64 -lcupti -o libkt.so
//   LD_PRELOAD=./libkt.so LOOM_KERNEL_TIMES=k.csv ./binary ...
// With LOOM_KERNEL_GAPS=FILE it also writes where the GPU is idle (one
// JSON line), over the second half of the run's kernels (the steady steps): the
// window, the time some compute kernel (all but NCCL's) runs, the idle time
// while an NCCL kernel runs (waiting for a peer or moving data), and the
// idle time with nothing running, by gap length (< 10 us: launches back to
// back; 10-100 us; 0.1-1 ms; >= 1 ms), each with its count; with
// LOOM_KERNEL_SPANS=FILE too, the window's kernels one by one.
// Preload the binary alone (`timeout 200 env LD_PRELOAD=... ./binary`): a
// wrapper such as timeout loads the library too and, exiting last,
// overwrites the binary's table with its own empty one.
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <cxxabi.h>
#include <map>
#include <mutex>
#include <algorithm>
#include <string>
#include <vector>

namespace {
std::mutex mu;
std::map<std::string, std::pair<unsigned long long, unsigned long long>> *totals;
struct Span {
  unsigned long long start, end;
  bool nccl;
  uint32_t stream;
  char kind; // NCCL's collective: A(ll-reduce), S(end/recv), R(educe-scatter), G(ather), ?
};
std::vector<Span> *spans;

void CUPTIAPI requested(uint8_t **buffer, size_t *size, size_t *maxRecords) {
  *size = size_t(16) << 20;
  *buffer = static_cast<uint8_t *>(std::aligned_alloc(8, *size));
  *maxRecords = 0;
}

std::string demangle(const char *name) {
  int status = 0;
  char *d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : name;
  std::free(d);
  return s;
}

void CUPTIAPI completed(CUcontext, uint32_t, uint8_t *buffer, size_t, size_t valid) {
  CUpti_Activity *rec = nullptr;
  std::lock_guard<std::mutex> lock(mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
      continue;
    auto *k = reinterpret_cast<CUpti_ActivityKernel10 *>(rec);
    std::string name = demangle(k->name);
    auto &t = (*totals)[name];
    t.first += 1;
    t.second += k->end - k->start;
    std::string lower = name;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    bool nccl = lower.find("nccl") != std::string::npos;
    char kind = !nccl ? 'c'
                : lower.find("sendrecv") != std::string::npos      ? 'S'
                : lower.find("allreduce") != std::string::npos     ? 'A'
                : lower.find("reducescatter") != std::string::npos ? 'R'
                : lower.find("allgather") != std::string::npos     ? 'G'
                                                                   : '?';
    spans->push_back({k->start, k->end, nccl, k->streamId, kind});
  }
  std::free(buffer);
}

/// Union of [start, end) intervals, sorted by start, clipped to [lo, hi).
std::vector<std::pair<unsigned long long, unsigned long long>>
merged(const std::vector<Span> &all, bool nccl, unsigned long long lo, unsigned long long hi) {
  std::vector<std::pair<unsigned long long, unsigned long long>> out;
  for (const Span &s : all) {
    if (s.nccl != nccl || s.end <= lo || s.start >= hi)
      continue;
    unsigned long long a = std::max(s.start, lo), b = std::min(s.end, hi);
    if (!out.empty() && a <= out.back().second)
      out.back().second = std::max(out.back().second, b);
    else
      out.push_back({a, b});
  }
  return out;
}

void writeGaps() {
  const char *path = std::getenv("LOOM_KERNEL_GAPS");
  std::lock_guard<std::mutex> lock(mu);
  if (!path || spans->empty())
    return;
  std::sort(spans->begin(), spans->end(),
            [](const Span &a, const Span &b) { return a.start < b.start; });
  // The window: from the kernel half way through the run's kernels (the
  // steps launch the same kernels each; start-up launches few) to the end.
  unsigned long long last = 0;
  for (const Span &s : *spans)
    last = std::max(last, s.end);
  unsigned long long lo = (*spans)[spans->size() / 2].start, hi = last;
  auto compute = merged(*spans, false, lo, hi), comm = merged(*spans, true, lo, hi);
  double busy = 0, waiting = 0, gap[4] = {0, 0, 0, 0};
  long count[4] = {0, 0, 0, 0};
  for (auto &[a, b] : compute)
    busy += double(b - a);
  // Each idle stretch between compute kernels: the part an NCCL kernel
  // covers is a wait, the rest a gap by its whole length.
  unsigned long long at = lo;
  size_t c = 0;
  auto idle = [&](unsigned long long a, unsigned long long b) {
    if (b <= a)
      return;
    double covered = 0;
    while (c < comm.size() && comm[c].second <= a)
      ++c;
    for (size_t k = c; k < comm.size() && comm[k].first < b; ++k)
      covered += double(std::min(b, comm[k].second) - std::max(a, comm[k].first));
    waiting += covered;
    double rest = double(b - a) - covered, len = double(b - a);
    int bin = len < 1e4 ? 0 : len < 1e5 ? 1 : len < 1e6 ? 2 : 3;
    gap[bin] += rest;
    count[bin] += 1;
  };
  for (auto &[a, b] : compute) {
    idle(at, a);
    at = b;
  }
  idle(at, hi);
  // LOOM_KERNEL_SPANS=FILE: every kernel of the window, one line each
  // (NCCL's collective's letter, S A R G or ?, or "c" for the rest, start
  // and end in CUPTI's ns, the stream): ranks on one host share the
  // clock, so two files show which
  // rank reached each collective first (bench/moe_ep_waits.py).
  if (const char *sp = std::getenv("LOOM_KERNEL_SPANS"))
    if (std::FILE *o = std::fopen(sp, "w")) {
      for (const Span &s : *spans)
        if (s.start >= lo)
          std::fprintf(o, "%c %llu %llu %u\n", s.kind, s.start, s.end, s.stream);
      std::fclose(o);
    }
  std::FILE *f = std::fopen(path, "w");
  if (!f)
    return;
  std::fprintf(f,
               "{\"window_s\": %.6f, \"compute_s\": %.6f, \"nccl_wait_s\": %.6f, "
               "\"gap_under_10us_s\": %.6f, \"gaps_under_10us\": %ld, \"gap_10_100us_s\": %.6f, "
               "\"gaps_10_100us\": %ld, \"gap_100us_1ms_s\": %.6f, \"gaps_100us_1ms\": %ld, "
               "\"gap_over_1ms_s\": %.6f, \"gaps_over_1ms\": %ld}\n",
               double(hi - lo) / 1e9, busy / 1e9, waiting / 1e9, gap[0] / 1e9, count[0],
               gap[1] / 1e9, count[1], gap[2] / 1e9, count[2], gap[3] / 1e9, count[3]);
  std::fclose(f);
}

struct Profiler {
  Profiler() {
    totals = new std::map<std::string, std::pair<unsigned long long, unsigned long long>>();
    spans = new std::vector<Span>();
    if (cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS)
      std::fprintf(stderr, "kernel_times: CUPTI did not start\n");
  }
  ~Profiler() {
    cuptiActivityFlushAll(1);
    writeGaps();
    const char *path = std::getenv("LOOM_KERNEL_TIMES");
    std::FILE *f = path ? std::fopen(path, "w") : stderr;
    if (!f)
      return;
    std::lock_guard<std::mutex> lock(mu);
    for (auto &[name, t] : *totals) {
      std::string quoted;
      for (char c : name)
        quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
      std::fprintf(f, "\"%s\",%llu,%llu\n", quoted.c_str(), t.first, t.second);
    }
    if (f != stderr)
      std::fclose(f);
  }
} profiler;
} // namespace
