// gpu_backend.cu: the GPU backend, single source for CUDA and HIP through
// gpu_api.h. Memory spaces map to gpuMalloc (device), gpuHostAlloc (pinned,
// mapped so kernels can read it zero-copy) and malloc (pageable).
#include "common/adam_math.h"
#include "common/backend.h"
#include "gpu/gpu_device.h"
#include "gpu/gpu_state.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace loomrt {

loomrt_status gpuCheck(gpuError_t e, const char *what) {
  if (e == gpuSuccess)
    return LOOMRT_OK;
  return fail(e == gpuErrorMemoryAllocation ? LOOMRT_ERR_OUT_OF_MEMORY
                                             : LOOMRT_ERR_BACKEND,
              std::string(LOOMRT_GPU_VENDOR " ") + what + ": " +
                  gpuGetErrorString(e));
}

namespace {
loomrt_status check(gpuError_t e, const char *what) { return gpuCheck(e, what); }

int gpuCount() {
  int n = 0;
  if (gpuGetDeviceCount(&n) != gpuSuccess) {
    (void)gpuGetLastError(); // no driver / no device: clear the sticky error
    return 0;
  }
  return n;
}

loomrt_status gpuInit(int ordinal, void **state) {
  if (loomrt_status s = check(gpuSetDevice(ordinal), "set device"))
    return s;
  *state = new GpuState{ordinal, nullptr};
  return LOOMRT_OK;
}
void gpuFini(void *state) {
  auto *st = static_cast<GpuState *>(state);
  vendorGemmDestroy(st);
  delete st;
}

/// Pinned memory of `bytes` (large): mapped, zeroed by the first touch of
/// every core at once, then registered with the driver. Measured on an
/// H200 host (bench/pin_bench.cpp, bench/RESULTS.md): the vendor's host
/// alloc zeroes and locks pages on one thread at 1.5-2.6 GiB/s; this way
/// pins at 7-11 GiB/s, which is what a 7B offload run's start waited on.
loomrt_status registeredAlloc(GpuState *st, size_t bytes, void **out) {
  void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return fail(LOOMRT_ERR_OUT_OF_MEMORY, "pinned host alloc: mmap of " +
                                              std::to_string(bytes) + " bytes failed");
  constexpr size_t kMaxTouchThreads = 32; // past this, the memory bus is the limit
  size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, kMaxTouchThreads);
  size_t chunk = (bytes / threads + 4095) / 4096 * 4096;
  std::vector<std::thread> pool;
  for (size_t off = 0; off < bytes; off += chunk)
    pool.emplace_back([p, off, n = std::min(chunk, bytes - off)] {
      std::memset(static_cast<char *>(p) + off, 0, n);
    });
  for (std::thread &t : pool)
    t.join();
  if (gpuError_t e = gpuHostRegister(p, bytes); e != gpuSuccess) {
    munmap(p, bytes);
    return check(e, "pinned host alloc (registering)");
  }
  std::lock_guard<std::mutex> lock(st->registeredMutex);
  st->registered[p] = bytes;
  *out = p;
  return LOOMRT_OK;
}

/// From this size up, pinned buffers are registered mappings: below it the
/// vendor's alloc is as quick and keeps small buffers off mmap's 4 KiB
/// granularity.
constexpr size_t kRegisterFrom = size_t(64) << 20;

loomrt_status gpuAllocImpl(void *state, loomrt_mem_space space, size_t bytes,
                           void **out) {
  auto *st = static_cast<GpuState *>(state);
  (void)gpuSetDevice(st->ordinal);
  switch (space) {
  case LOOMRT_MEM_DEVICE:
    return check(gpuMalloc(out, bytes), "malloc");
  case LOOMRT_MEM_PINNED:
    if (bytes >= kRegisterFrom)
      return registeredAlloc(st, bytes, out);
    return check(gpuHostAlloc(out, bytes), "pinned host alloc");
  case LOOMRT_MEM_PAGEABLE:
    *out = std::malloc(bytes);
    return *out ? LOOMRT_OK
                : fail(LOOMRT_ERR_OUT_OF_MEMORY, "pageable alloc failed");
  }
  return fail(LOOMRT_ERR_INVALID_ARGUMENT, "unknown memory space");
}

loomrt_status gpuFreeImpl(void *state, loomrt_mem_space space, void *ptr) {
  auto *st = static_cast<GpuState *>(state);
  switch (space) {
  case LOOMRT_MEM_DEVICE:
    return check(gpuFree(ptr), "free");
  case LOOMRT_MEM_PINNED: {
    size_t mapped = 0;
    {
      std::lock_guard<std::mutex> lock(st->registeredMutex);
      auto it = st->registered.find(ptr);
      if (it != st->registered.end()) {
        mapped = it->second;
        st->registered.erase(it);
      }
    }
    if (!mapped)
      return check(gpuFreeHost(ptr), "free pinned");
    (void)gpuSetDevice(st->ordinal);
    loomrt_status s = check(gpuHostUnregister(ptr), "free pinned (unregistering)");
    munmap(ptr, mapped);
    return s;
  }
  case LOOMRT_MEM_PAGEABLE:
    std::free(ptr);
    return LOOMRT_OK;
  }
  return fail(LOOMRT_ERR_INVALID_ARGUMENT, "unknown memory space");
}

loomrt_status gpuStreamCreateImpl(void *state, void **out) {
  (void)gpuSetDevice(static_cast<GpuState *>(state)->ordinal);
  gpuStream_t s;
  if (loomrt_status st = check(gpuStreamCreate(&s), "stream create"))
    return st;
  *out = s;
  return LOOMRT_OK;
}
void gpuStreamDestroyImpl(void *s) {
  (void)gpuStreamDestroy(static_cast<gpuStream_t>(s));
}
loomrt_status gpuStreamSyncImpl(void *s) {
  return check(gpuStreamSynchronize(static_cast<gpuStream_t>(s)),
               "stream synchronize");
}
loomrt_status gpuMemcpyImpl(void *s, void *dst, const void *src, size_t n) {
  return check(gpuMemcpyAsync(dst, src, n, static_cast<gpuStream_t>(s)),
               "memcpy async");
}
loomrt_status gpuEventCreateImpl(void *, void **out) {
  gpuEvent_t e;
  if (loomrt_status st = check(gpuEventCreate(&e), "event create"))
    return st;
  *out = e;
  return LOOMRT_OK;
}
void gpuEventDestroyImpl(void *e) { (void)gpuEventDestroy(static_cast<gpuEvent_t>(e)); }
loomrt_status gpuEventRecordImpl(void *e, void *s) {
  return check(gpuEventRecord(static_cast<gpuEvent_t>(e),
                              static_cast<gpuStream_t>(s)),
               "event record");
}
loomrt_status gpuWaitEventImpl(void *s, void *e) {
  return check(gpuStreamWaitEvent(static_cast<gpuStream_t>(s),
                                  static_cast<gpuEvent_t>(e)),
               "stream wait event");
}
loomrt_status gpuEventSyncImpl(void *e) {
  return check(gpuEventSynchronize(static_cast<gpuEvent_t>(e)),
               "event synchronize");
}
loomrt_status gpuElapsedImpl(void *a, void *b, float *ms) {
  return check(gpuEventElapsedTime(ms, static_cast<gpuEvent_t>(a),
                                   static_cast<gpuEvent_t>(b)),
               "event elapsed time");
}

// Adam is memory bound (28 bytes per element, ~0 flops of note): each thread
// handles 4 consecutive elements with 16-byte vector loads and stores, and the
// grid strides so that any n is covered with a bounded number of blocks. G is
// float or uint16_t (bf16 bits, the mixed-precision step); pOut, when set,
// receives the updated weights as bf16.
__device__ __forceinline__ float gradValue(float g) { return g; }
__device__ __forceinline__ float gradValue(uint16_t g) { return bf16ToFloat(g); }

template <typename G> struct Vec4;
template <> struct Vec4<float> {
  using T = float4;
  __device__ static float get(const T &x, int k) { return (&x.x)[k]; }
};
template <> struct Vec4<uint16_t> {
  using T = ushort4;
  __device__ static float get(const T &x, int k) {
    return bf16ToFloat((&x.x)[k]);
  }
};

/// Whether an update's buffers take adamVec4's vector loads and stores.
template <typename G>
__device__ __forceinline__ bool adamAligned(const float *p, const G *g, const float *m,
                                            const float *v, const uint16_t *pOut) {
  return ((reinterpret_cast<uintptr_t>(p) | reinterpret_cast<uintptr_t>(m) |
           reinterpret_cast<uintptr_t>(v)) & 15) == 0 &&
         (reinterpret_cast<uintptr_t>(g) & (4 * sizeof(G) - 1)) == 0 &&
         (reinterpret_cast<uintptr_t>(pOut) & 7) == 0;
}

/// Elements 4q..4q+3 of one update, with 16-byte loads and stores (the
/// pointers aligned): 1-bit Adam after the freeze takes g as m and leaves v
/// (8 bytes an element: the old momentum is not read nor v written).
template <typename G>
__device__ __forceinline__ void adamVec4(const AdamScalars &s, float *__restrict__ p,
                                         const G *__restrict__ g, float *__restrict__ m,
                                         float *__restrict__ v, uint16_t *__restrict__ pOut,
                                         size_t q) {
  using V = Vec4<G>;
  float4 pp = reinterpret_cast<float4 *>(p)[q];
  typename V::T gg = reinterpret_cast<const typename V::T *>(g)[q];
  float4 mm = s.frozen ? float4{} : reinterpret_cast<float4 *>(m)[q];
  float4 vv = reinterpret_cast<float4 *>(v)[q];
  adamElement(s, pp.x, V::get(gg, 0), mm.x, vv.x);
  adamElement(s, pp.y, V::get(gg, 1), mm.y, vv.y);
  adamElement(s, pp.z, V::get(gg, 2), mm.z, vv.z);
  adamElement(s, pp.w, V::get(gg, 3), mm.w, vv.w);
  reinterpret_cast<float4 *>(p)[q] = pp;
  reinterpret_cast<float4 *>(m)[q] = mm;
  if (!s.frozen)
    reinterpret_cast<float4 *>(v)[q] = vv;
  if (pOut)
    reinterpret_cast<ushort4 *>(pOut)[q] = make_ushort4(floatToBf16(pp.x), floatToBf16(pp.y),
                                                        floatToBf16(pp.z), floatToBf16(pp.w));
}

template <typename G>
__global__ void adamKernel(AdamScalars s, float *__restrict__ p,
                           const G *__restrict__ g, float *__restrict__ m,
                           float *__restrict__ v, uint16_t *__restrict__ pOut,
                           size_t n) {
  size_t nvec = n / 4;
  size_t stride = (size_t)gridDim.x * blockDim.x;
  bool aligned = adamAligned(p, g, m, v, pOut);
  size_t tid = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (aligned)
    for (size_t i = tid; i < nvec; i += stride)
      adamVec4(s, p, g, m, v, pOut, i);
  for (size_t i = (aligned ? nvec * 4 : 0) + tid; i < n; i += stride) {
    adamElement(s, p[i], gradValue(g[i]), m[i], v[i]);
    if (pOut)
      pOut[i] = floatToBf16(p[i]);
  }
}

template <typename G>
loomrt_status launchAdam(void *stream, const loomrt_adam_config *cfg, float *p,
                         const G *g, float *m, float *v, uint16_t *pOut,
                         size_t n) {
  AdamScalars s = adamScalars(*cfg);
  int threads = 256;
  size_t work = (n + 3) / 4;
  // Enough blocks to fill every SM many times over; the grid stride covers
  // the rest.
  size_t blocks = (work + threads - 1) / threads;
  constexpr size_t kMaxBlocks = 132 * 32; // an H100's SMs, 32 blocks each
  if (blocks > kMaxBlocks)
    blocks = kMaxBlocks;
  if (blocks == 0)
    blocks = 1;
  adamKernel<G><<<(unsigned)blocks, threads, 0,
                  static_cast<gpuStream_t>(stream)>>>(s, p, g, m, v, pOut, n);
  return check(gpuGetLastError(), "adam kernel launch");
}

loomrt_status gpuAdam(void *stream, const loomrt_adam_config *cfg, float *p,
                      const float *g, float *m, float *v, size_t n) {
  return launchAdam<float>(stream, cfg, p, g, m, v, nullptr, n);
}

loomrt_status gpuAdamBf16(void *stream, const loomrt_adam_config *cfg,
                          float *p, const uint16_t *g, float *m, float *v,
                          uint16_t *pOut, size_t n) {
  return launchAdam<uint16_t>(stream, cfg, p, g, m, v, pOut, n);
}

// loomrt_adam_multi: up to LOOMRT_ADAM_MULTI_BATCH tensors a launch, their
// pointers and sizes in the kernel's argument (2.7 KB, under the 4 KB every
// CUDA and HIP version takes). Each tensor gets ceil(n / kAdamTile) blocks;
// a block finds its tensor in the prefix sums and updates one tile with
// adamKernel's element math (so each tensor's bits are the per-tensor
// call's). GPT-2's 148 updates: 4 launches instead of 148.
constexpr int kAdamBatch = LOOMRT_ADAM_MULTI_BATCH;
constexpr int kAdamThreads = 256;
constexpr int64_t kAdamTile = kAdamThreads * 4 * 4; // 4 float4 groups a thread
struct AdamBatch {
  float *p[kAdamBatch], *m[kAdamBatch], *v[kAdamBatch];
  const void *g[kAdamBatch];
  uint16_t *out[kAdamBatch];
  int64_t n[kAdamBatch];
  int64_t firstBlock[kAdamBatch + 1];
  int count;
};

template <typename G>
__global__ void adamMultiKernel(AdamScalars s, AdamBatch b) {
  int t = 0;
  while (t + 1 < b.count && b.firstBlock[t + 1] <= int64_t(blockIdx.x))
    ++t;
  const int64_t begin = (int64_t(blockIdx.x) - b.firstBlock[t]) * kAdamTile,
                end = begin + kAdamTile < b.n[t] ? begin + kAdamTile : b.n[t];
  float *p = b.p[t], *m = b.m[t], *v = b.v[t];
  const G *g = static_cast<const G *>(b.g[t]);
  uint16_t *pOut = b.out[t];
  int64_t i = begin + 4 * int64_t(threadIdx.x);
  if (adamAligned(p, g, m, v, pOut))
    for (; i + 3 < end; i += 4 * kAdamThreads)
      adamVec4(s, p, g, m, v, pOut, size_t(i / 4));
  // The tail (or every element, unaligned): four a thread, one by one.
  for (; i < end; i += 4 * kAdamThreads)
    for (int64_t j = i; j < i + 4 && j < end; ++j) {
      adamElement(s, p[j], gradValue(g[j]), m[j], v[j]);
      if (pOut)
        pOut[j] = floatToBf16(p[j]);
    }
}

loomrt_status gpuAdamMulti(void *stream, const loomrt_adam_config *cfg, loomrt_dtype gradDt,
                           const loomrt_adam_tensor *t, size_t count) {
  AdamScalars s = adamScalars(*cfg);
  for (size_t at = 0; at < count;) {
    AdamBatch b{};
    int64_t blocks = 0;
    for (; at < count && b.count < kAdamBatch; ++at) {
      if (!t[at].n)
        continue;
      int k = b.count++;
      b.p[k] = t[at].param, b.m[k] = t[at].exp_avg, b.v[k] = t[at].exp_avg_sq;
      b.g[k] = t[at].grad, b.out[k] = t[at].param_bf16, b.n[k] = int64_t(t[at].n);
      b.firstBlock[k] = blocks;
      blocks += (b.n[k] + kAdamTile - 1) / kAdamTile;
    }
    if (!b.count)
      break;
    b.firstBlock[b.count] = blocks;
    if (blocks > INT32_MAX)
      return fail(LOOMRT_ERR_INVALID_ARGUMENT, "adam_multi: too many elements in one launch");
    auto st = static_cast<gpuStream_t>(stream);
    if (gradDt == LOOMRT_BF16)
      adamMultiKernel<uint16_t><<<unsigned(blocks), kAdamThreads, 0, st>>>(s, b);
    else
      adamMultiKernel<float><<<unsigned(blocks), kAdamThreads, 0, st>>>(s, b);
    if (loomrt_status e = check(gpuGetLastError(), "adam_multi kernel launch"))
      return e;
  }
  return LOOMRT_OK;
}

loomrt_status gpuBind(void *state) {
  return check(gpuSetDevice(static_cast<GpuState *>(state)->ordinal), "set device");
}

// Link shaping: the stream's clock is the device clock (gpu_device.h); the
// hold is one thread spinning until the stamp plus the link's time, so the
// stream (the comm stream) is busy that long and the SMs are free.
__global__ void shapeStampKernel(int64_t *slot) { *slot = deviceClock(); }
__global__ void shapeHoldKernel(const int64_t *slot, int64_t ticks) {
  const int64_t until = *slot + ticks;
  while (deviceClock() < until)
    backOff();
}
/// ns in ticks of deviceClock(): ns on NVIDIA; on AMD the wall clock's rate
/// (kHz, 100 MHz on MI200 and MI300) is the device's to say.
/// The stream's device is the current one (comm binds it before a collective).
int64_t gpuTimerTicks(int64_t ns) {
#if defined(LOOMRT_GPU_HIP)
  int khz = 100000; // MI100, MI200 and MI300; HIP before 5.3 cannot say
#if HIP_VERSION >= 50300000
  int dev = 0;
  if (hipGetDevice(&dev) != hipSuccess ||
      hipDeviceGetAttribute(&khz, hipDeviceAttributeWallClockRate, dev) != hipSuccess || khz <= 0)
    khz = 100000;
#endif
  return ns * khz / 1000000;
#else
  return ns;
#endif
}
loomrt_status gpuShapeStamp(void *stream, int64_t *slot) {
  shapeStampKernel<<<1, 1, 0, static_cast<gpuStream_t>(stream)>>>(slot);
  return check(gpuGetLastError(), "shape stamp launch");
}
loomrt_status gpuShapeHold(void *stream, const int64_t *slot, int64_t ns) {
  shapeHoldKernel<<<1, 1, 0, static_cast<gpuStream_t>(stream)>>>(slot, gpuTimerTicks(ns));
  return check(gpuGetLastError(), "shape hold launch");
}

loomrt_status gpuMemoryInfo(void *state, size_t *freeBytes, size_t *total) {
  (void)gpuSetDevice(static_cast<GpuState *>(state)->ordinal);
  return check(gpuMemGetInfo(freeBytes, total), "device memory");
}

loomrt_status gpuHostRegisterImpl(void *state, void *ptr, size_t bytes) {
  (void)gpuSetDevice(static_cast<GpuState *>(state)->ordinal);
  return check(gpuHostRegister(ptr, bytes), "host register");
}
loomrt_status gpuHostUnregisterImpl(void *state, void *ptr) {
  (void)gpuSetDevice(static_cast<GpuState *>(state)->ordinal);
  return check(gpuHostUnregister(ptr), "host unregister");
}

// Graphs: the capture is the calling thread's (ThreadLocal), so the step's
// host thread may allocate or synchronise while the issuing thread
// captures; an unsafe call on the capturing thread invalidates the capture
// (capture_end then fails and the caller runs the work uncaptured).
loomrt_status gpuCaptureBegin(void *s) {
  return check(gpuStreamBeginCaptureLocal(static_cast<gpuStream_t>(s)), "begin stream capture");
}
loomrt_status gpuCaptureEnd(void *s, void **exec, size_t *nodes) {
  gpuGraph_t g = nullptr;
  gpuError_t e = gpuStreamEndCapture(static_cast<gpuStream_t>(s), &g);
  (void)gpuGetLastError(); // a capture invalidated by an unsafe call leaves its error here
  if (e != gpuSuccess)
    return check(e, "end stream capture");
  if (!g)
    return fail(LOOMRT_ERR_BACKEND, "end stream capture: no graph");
  *nodes = 0;
  (void)gpuGraphGetNodes(g, nullptr, nodes);
  gpuGraphExec_t x = nullptr;
  e = gpuGraphInstantiate(&x, g);
  (void)gpuGraphDestroy(g); // the executable keeps what it needs
  if (loomrt_status st = check(e, "instantiate the captured graph"))
    return st;
  *exec = x;
  return LOOMRT_OK;
}
loomrt_status gpuGraphLaunchImpl(void *x, void *s) {
  return check(gpuGraphLaunch(static_cast<gpuGraphExec_t>(x), static_cast<gpuStream_t>(s)),
               "graph launch");
}
void gpuGraphDestroyImpl(void *x) { (void)gpuGraphExecDestroy(static_cast<gpuGraphExec_t>(x)); }

const BackendOps kGpuOps = {
    LOOMRT_GPU_VENDOR,  gpuCount,          gpuInit,
    gpuFini,            gpuAllocImpl,      gpuFreeImpl,
    gpuStreamCreateImpl, gpuStreamDestroyImpl, gpuStreamSyncImpl,
    gpuMemcpyImpl,      gpuEventCreateImpl, gpuEventDestroyImpl,
    gpuEventRecordImpl, gpuWaitEventImpl,  gpuEventSyncImpl,
    gpuElapsedImpl,     gpuAdam,           gpuAdamBf16,
    gpuAdamMulti,
    gpuMemoryInfo,      gpuBind,           gpuShapeStamp,
    gpuShapeHold,       gpuHostRegisterImpl, gpuHostUnregisterImpl,
    gpuCaptureBegin,    gpuCaptureEnd,     gpuGraphLaunchImpl,
    gpuGraphDestroyImpl,
    gpuKernels(),
};

} // namespace

const BackendOps *gpuBackend() { return &kGpuOps; }

} // namespace loomrt
