// Microbenchmark (issue 22): GPT-2's GELU (tanh form) forward over a
// [16, 1024, 3072] bf16 activation, the runtime's kernel beside variants
// of it, to find why it ran at 1.7 TB/s (116 us a call on an H200) while
// the gradient, which moves 1.5x the bytes, ran at 2.8 TB/s. The variants
// differ only in how the op is chosen: at run time inside the unrolled
// loop (the runtime's unaryWordKernel: every case of unaryOp inlined once
// per element of a word, sin/cos slow paths included), at compile time,
// or at run time with the loop not unrolled. Each is checked against the
// runtime's output (bitwise: the same math).
//   there: nvcc -O3 -std=c++17 -arch=sm_90 -I runtime -I runtime/include \
//            bench/unary_variants.cu build-bench/runtime/libloomrt.so -o /tmp/uv && /tmp/uv
#include "common/kernel_math.h"
#include "loomrt/loomrt.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>
#include <vector>

using namespace loomrt;

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e = (x);                                                                           \
    if (e != cudaSuccess) {                                                                        \
      printf("%s: %s\n", #x, cudaGetErrorString(e));                                               \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

constexpr int kW = 8; // bf16 elements a 16-byte word

template <loomrt_unary_op Op>
__global__ void fixedOp(const uint16_t *x, uint16_t *y, size_t words) {
  for (size_t w = size_t(blockIdx.x) * blockDim.x + threadIdx.x; w < words;
       w += size_t(gridDim.x) * blockDim.x) {
    uint4 v = reinterpret_cast<const uint4 *>(x)[w];
    uint16_t *e = reinterpret_cast<uint16_t *>(&v);
#pragma unroll
    for (int k = 0; k < kW; ++k)
      e[k] = store<uint16_t>(unaryOp(Op, load(e[k])));
    reinterpret_cast<uint4 *>(y)[w] = v;
  }
}
__global__ void runtimeOpNoUnroll(loomrt_unary_op op, const uint16_t *x, uint16_t *y,
                                  size_t words) {
  for (size_t w = size_t(blockIdx.x) * blockDim.x + threadIdx.x; w < words;
       w += size_t(gridDim.x) * blockDim.x) {
    uint4 v = reinterpret_cast<const uint4 *>(x)[w];
    uint16_t *e = reinterpret_cast<uint16_t *>(&v);
#pragma unroll 1
    for (int k = 0; k < kW; ++k)
      e[k] = store<uint16_t>(unaryOp(op, load(e[k])));
    reinterpret_cast<uint4 *>(y)[w] = v;
  }
}

int main() {
  const size_t n = size_t(16) * 1024 * 3072, words = n / kW, bytes = n * 2;
  std::vector<uint16_t> h(n);
  uint64_t s = 1;
  for (size_t i = 0; i < n; ++i) {
    s = splitmix64(s);
    h[i] = floatToBf16(float(int64_t(s >> 40) - (1 << 23)) / float(1 << 22)); // [-2, 2)
  }
  uint16_t *x, *y, *ref;
  CK(cudaMalloc(&x, bytes));
  CK(cudaMalloc(&y, bytes));
  CK(cudaMalloc(&ref, bytes));
  CK(cudaMemcpy(x, h.data(), bytes, cudaMemcpyHostToDevice));
  loomrt_device dev;
  loomrt_stream st;
  if (loomrt_device_open(LOOMRT_BACKEND_CUDA, 0, &dev) || loomrt_stream_create(dev, &st)) {
    printf("no CUDA device\n");
    return 1;
  }
  // The runtime's call runs on its own stream, the variants on the default
  // one: each is timed on the host over 50 back-to-back launches after a
  // synchronisation (launches queue ahead, so launch cost hides), median
  // of 5 such runs.
  auto sync = [&] {
    loomrt_stream_synchronize(st);
    cudaDeviceSynchronize();
  };
  auto time = [&](const char *name, auto launch, bool check) {
    for (int i = 0; i < 3; ++i)
      launch();
    std::vector<double> ms;
    for (int r = 0; r < 5; ++r) {
      sync();
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < 50; ++i)
        launch();
      sync();
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                       .count() / 50);
    }
    std::sort(ms.begin(), ms.end());
    double med = ms[ms.size() / 2];
    bool same = true;
    if (check) {
      std::vector<uint16_t> o(n), r(n);
      cudaMemcpy(o.data(), y, bytes, cudaMemcpyDeviceToHost);
      cudaMemcpy(r.data(), ref, bytes, cudaMemcpyDeviceToHost);
      same = std::memcmp(o.data(), r.data(), bytes) == 0;
    }
    printf("| %s | %.1f | %.2f | %s |\n", name, med * 1e3, 2.0 * bytes / (med * 1e-3) / 1e12,
           check ? (same ? "bitwise equal" : "DIFFERS") : "reference");
  };
  unsigned grid = unsigned((words + 255) / 256);
  printf("| GELU tanh forward, %zu bf16 | us | TB/s (read + write) | output |\n|---|---|---|---|\n", n);
  time("runtime loomrt_unary (op at run time, unrolled)",
       [&] { loomrt_unary(st, LOOMRT_GELU_TANH, LOOMRT_BF16, x, ref, n); }, false);
  time("op at compile time", [&] { fixedOp<LOOMRT_GELU_TANH><<<grid, 256>>>(x, y, words); },
       true);
  time("op at run time, loop not unrolled",
       [&] { runtimeOpNoUnroll<<<grid, 256>>>(LOOMRT_GELU_TANH, x, y, words); }, true);
  time("device-to-device copy (ceiling)",
       [&] { cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice); }, false);
  CK(cudaGetLastError());
  return 0;
}
