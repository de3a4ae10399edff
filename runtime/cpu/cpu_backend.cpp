// cpu_backend.cpp: the CPU backend. Always built, so every schedule (GPU ones
// included) can run and be tested on a CPU-only machine:
//   * "device" memory is a second host arena, kept apart from host memory so
//     that a schedule's transfers are real copies between distinct buffers;
//   * streams execute their work synchronously at enqueue time, which is a
//     valid (if serial) ordering of any stream/event program: every wait is
//     then already satisfied. Overlapping CPU workers come with the offload
//     schedule (issue 7).
#include "common/backend.h"
#include "cpu/cpu_kernels.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unistd.h>
#include <omp.h>

namespace loomrt {
namespace {

struct CpuEvent {
  std::chrono::steady_clock::time_point when;
};

int cpuDeviceCount() { return 1; }
loomrt_status cpuInit(int, void **state) {
  *state = nullptr;
  return LOOMRT_OK;
}
void cpuFini(void *) {}

loomrt_status cpuAlloc(void *, loomrt_mem_space, size_t bytes, void **out) {
  // 64-byte alignment: whole cache lines, and AVX-512 aligned loads.
  size_t rounded = (bytes + 63) / 64 * 64;
  *out = std::aligned_alloc(64, rounded);
  if (!*out)
    return fail(LOOMRT_ERR_OUT_OF_MEMORY,
                "cpu alloc of " + std::to_string(bytes) + " bytes failed");
  return LOOMRT_OK;
}
loomrt_status cpuFree(void *, loomrt_mem_space, void *ptr) {
  std::free(ptr);
  return LOOMRT_OK;
}

loomrt_status cpuStreamCreate(void *, void **out) {
  *out = nullptr;
  return LOOMRT_OK;
}
void cpuStreamDestroy(void *) {}
loomrt_status cpuStreamSync(void *) { return LOOMRT_OK; }

loomrt_status cpuMemcpy(void *, void *dst, const void *src, size_t bytes) {
  // One core cannot saturate DRAM: split large copies over the threads, in
  // contiguous cache-line aligned chunks. Overlapping ranges keep memmove's
  // semantics by staying serial.
  const char *s = static_cast<const char *>(src);
  char *d = static_cast<char *>(dst);
  bool overlap = d < s + bytes && s < d + bytes;
  if (bytes < (size_t(8) << 20) || overlap) {
    std::memmove(dst, src, bytes);
    return LOOMRT_OK;
  }
#pragma omp parallel
  {
    size_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    size_t chunk = ((bytes + threads - 1) / threads + 63) / 64 * 64;
    size_t begin = std::min(bytes, t * chunk);
    size_t end = std::min(bytes, begin + chunk);
    if (begin < end)
      std::memcpy(d + begin, s + begin, end - begin);
  }
  return LOOMRT_OK;
}

loomrt_status cpuEventCreate(void *, void **out) {
  *out = new CpuEvent{};
  return LOOMRT_OK;
}
void cpuEventDestroy(void *e) { delete static_cast<CpuEvent *>(e); }
loomrt_status cpuEventRecord(void *e, void *) {
  static_cast<CpuEvent *>(e)->when = std::chrono::steady_clock::now();
  return LOOMRT_OK;
}
loomrt_status cpuWaitEvent(void *, void *) { return LOOMRT_OK; }
loomrt_status cpuEventSync(void *) { return LOOMRT_OK; }
loomrt_status cpuElapsed(void *a, void *b, float *ms) {
  auto d = static_cast<CpuEvent *>(b)->when - static_cast<CpuEvent *>(a)->when;
  *ms = std::chrono::duration<float, std::milli>(d).count();
  return LOOMRT_OK;
}

loomrt_status cpuAdam(void *, const loomrt_adam_config *cfg, float *p,
                      const float *g, float *m, float *v, size_t n) {
  cpuAdamF32(*cfg, p, g, m, v, n);
  return LOOMRT_OK;
}

loomrt_status cpuAdamBf16(void *, const loomrt_adam_config *cfg, float *p,
                          const uint16_t *g, float *m, float *v,
                          uint16_t *pOut, size_t n) {
  cpuAdamBf16Grad(*cfg, p, g, m, v, pOut, n);
  return LOOMRT_OK;
}

/// Host memory: physical pages in total and available now.
loomrt_status cpuMemoryInfo(void *, size_t *freeBytes, size_t *total) {
  long page = sysconf(_SC_PAGESIZE), pages = sysconf(_SC_PHYS_PAGES),
       avail = sysconf(_SC_AVPHYS_PAGES);
  if (page <= 0 || pages <= 0)
    return fail(LOOMRT_ERR_BACKEND, "device_memory: sysconf failed");
  *total = size_t(page) * size_t(pages);
  *freeBytes = avail > 0 ? size_t(page) * size_t(avail) : 0;
  return LOOMRT_OK;
}

// Link shaping on the CPU: collectives run on the calling thread, so the
// stamp is the host's clock and the hold a sleep until its end.
int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
loomrt_status cpuShapeStamp(void *, int64_t *slot) {
  *slot = nowNs();
  return LOOMRT_OK;
}
loomrt_status cpuShapeHold(void *, const int64_t *slot, int64_t ns) {
  int64_t left = *slot + ns - nowNs();
  if (left > 0)
    std::this_thread::sleep_for(std::chrono::nanoseconds(left));
  return LOOMRT_OK;
}

const BackendOps kCpuOps = {
    "cpu",          cpuDeviceCount, cpuInit,         cpuFini,
    cpuAlloc,       cpuFree,        cpuStreamCreate, cpuStreamDestroy,
    cpuStreamSync,  cpuMemcpy,      cpuEventCreate,  cpuEventDestroy,
    cpuEventRecord, cpuWaitEvent,   cpuEventSync,    cpuElapsed,
    cpuAdam,        cpuAdamBf16,
    nullptr, // adam_multi: the per-tensor calls (threaded per call already)
    cpuMemoryInfo,   [](void *) { return LOOMRT_OK; },
    cpuShapeStamp,  cpuShapeHold,
    // Host memory is the CPU's own: nothing to pin.
    [](void *, void *, size_t) { return LOOMRT_OK; }, [](void *, void *) { return LOOMRT_OK; },
    nullptr, nullptr, nullptr, nullptr, // no graphs: streams run work as it is issued
    cpuKernels(),
};

} // namespace

const BackendOps *cpuBackend() { return &kCpuOps; }

} // namespace loomrt
