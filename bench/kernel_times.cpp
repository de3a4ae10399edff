// kernel_times: an LD_PRELOAD library that sums the GPU time of every
// kernel a process launches, by kernel name, through CUPTI's activity API,
// and writes one CSV line per kernel at exit ("name",calls,total_ns) to
// $LOOM_KERNEL_TIMES (or stderr). It profiles a loomc-generated training
// binary the way torch.profiler profiles PyTorch (bench/profile-gpt2-gpu.sh),
// where Nsight Systems is not installed.
//   c++ -O2 -shared -fPIC bench/kernel_times.cpp -I$CUDA/include -L$CUDA/lib64 -lcupti -o libkt.so
//   LD_PRELOAD=./libkt.so LOOM_KERNEL_TIMES=k.csv ./binary ...
// Preload the binary alone (`timeout 200 env LD_PRELOAD=... ./binary`): a
// wrapper such as timeout loads the library too and, exiting last,
// overwrites the binary's table with its own empty one.
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <cxxabi.h>
#include <map>
#include <mutex>
#include <string>

namespace {
std::mutex mu;
std::map<std::string, std::pair<unsigned long long, unsigned long long>> *totals;

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
    auto &t = (*totals)[demangle(k->name)];
    t.first += 1;
    t.second += k->end - k->start;
  }
  std::free(buffer);
}

struct Profiler {
  Profiler() {
    totals = new std::map<std::string, std::pair<unsigned long long, unsigned long long>>();
    if (cuptiActivityRegisterCallbacks(requested, completed) != CUPTI_SUCCESS ||
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS)
      std::fprintf(stderr, "kernel_times: CUPTI did not start\n");
  }
  ~Profiler() {
    cuptiActivityFlushAll(1);
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
