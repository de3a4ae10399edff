// pin_bench: how fast a host can hand the GPU pinned memory, four ways
// (issue 44: a 7B offload binary spent 60-100 s starting, most of it
// pinning ~100 GiB of parameters and optimizer state one cudaHostAlloc at
// a time).
//
//   pin_bench [GiB=16] [buffer MiB=512] [threads=8]
//
// GiB of host memory in buffers of the given size, each way timed from the
// first call to every page resident and pinned, then freed (the free timed
// apart):
//   alloc        cudaHostAlloc per buffer, one thread (the runtime today)
//   alloc-mt     cudaHostAlloc per buffer, THREADS threads
//   register     mmap, first touch on THREADS threads, cudaHostRegister per
//                buffer on one thread
//   register-mt  the same, cudaHostRegister on THREADS threads
// Prints one table: GiB/s to pin, seconds to free.
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void check(cudaError_t e, const char *what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "pin_bench: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Runs f(i) for i in [0, n) on t threads (work taken in order).
void forEach(size_t n, int t, const std::function<void(size_t)> &f) {
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int k = 0; k < t; ++k)
    pool.emplace_back([&] {
      for (size_t i; (i = next++) < n;)
        f(i);
    });
  for (auto &th : pool)
    th.join();
}

struct Row {
  const char *name;
  double pin, free;
};

} // namespace

int main(int argc, char **argv) {
  double gib = argc > 1 ? std::atof(argv[1]) : 16;
  size_t mib = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 512;
  int threads = argc > 3 ? std::atoi(argv[3]) : 8;
  if (!(gib > 0) || mib == 0 || threads < 1) {
    std::fprintf(stderr, "usage: pin_bench [GiB > 0] [buffer MiB > 0] [threads >= 1]\n");
    return 2;
  }
  size_t bytes = mib << 20, n = size_t(gib * 1024 / double(mib));
  check(cudaSetDevice(0), "set device");
  check(cudaFree(nullptr), "context");
  std::vector<void *> buf(n);
  std::vector<Row> rows;
  const unsigned flags = cudaHostAllocPortable | cudaHostAllocMapped;
  for (int mt = 0; mt < 2; ++mt) {
    double t0 = now();
    forEach(n, mt ? threads : 1,
            [&](size_t i) { check(cudaHostAlloc(&buf[i], bytes, flags), "cudaHostAlloc"); });
    double t1 = now();
    forEach(n, mt ? threads : 1, [&](size_t i) { check(cudaFreeHost(buf[i]), "cudaFreeHost"); });
    rows.push_back({mt ? "alloc-mt" : "alloc", t1 - t0, now() - t1});
  }
  for (int mt = 0; mt < 2; ++mt) {
    double t0 = now();
    forEach(n, threads, [&](size_t i) {
      void *p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) {
        std::perror("mmap");
        std::exit(1);
      }
      std::memset(p, 0, bytes); // first touch: the pages become resident
      buf[i] = p;
    });
    forEach(n, mt ? threads : 1, [&](size_t i) {
      check(cudaHostRegister(buf[i], bytes, cudaHostRegisterPortable | cudaHostRegisterMapped),
            "cudaHostRegister");
    });
    double t1 = now();
    forEach(n, mt ? threads : 1, [&](size_t i) {
      check(cudaHostUnregister(buf[i]), "cudaHostUnregister");
      munmap(buf[i], bytes);
    });
    rows.push_back({mt ? "register-mt" : "register", t1 - t0, now() - t1});
  }
  std::printf("pin_bench: %.1f GiB in %zu buffers of %zu MiB, %d threads\n", gib, n, mib, threads);
  std::printf("| way | pin s | pin GiB/s | free s |\n|---|---|---|---|\n");
  for (const Row &r : rows)
    std::printf("| %s | %.2f | %.1f | %.2f |\n", r.name, r.pin, gib / r.pin, r.free);
  return 0;
}
