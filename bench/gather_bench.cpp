// gather_bench.cpp: zero-copy row gather bandwidth (issue 21; Min et al.,
// "Large GCN training with GPU-oriented data communication"). A table of
// rows in pinned host memory, 4 KiB pages (cudaHostAlloc through
// loomrt_alloc) or 2 MiB pages (mmap + MADV_HUGEPAGE, then
// cudaHostRegister; the row says when the kernel gave no huge pages);
// for each row size (64 B to 4 KiB) and order (random, sorted) it times:
//   zero-copy  loomrt_gather_rows on the GPU straight from the host table
//   sorted     the same with LOOMRT_GATHER_SORTED: the indices radix-sorted
//              on the device first, each row written to its place
//   cpu+copy   the conventional path: the CPU gathers the rows into a
//              pinned buffer (loomrt_gather_rows on the CPU backend, all
//              cores), then one copy to the GPU; the sum of the two
//   copy       a pinned copy of as many contiguous bytes (the copy engine)
// Median of --iters timings of 256 MiB of rows; bandwidth = bytes of rows
// / time. Prints JSON lines, then a table.
//   gather_bench [--table-gib G] [--iters N]
#include "loomrt/loomrt.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <sys/mman.h>
#include <vector>

#define OK(call)                                                               \
  do {                                                                         \
    if ((call) != LOOMRT_OK) {                                                 \
      std::fprintf(stderr, "%s failed: %s\n", #call, loomrt_last_error());      \
      std::exit(2);                                                            \
    }                                                                          \
  } while (0)

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

template <typename F> double median(int iters, F &&f) {
  std::vector<double> t;
  for (int i = 0; i < iters + 2; ++i) {
    double s = now();
    f();
    if (i >= 2)
      t.push_back(now() - s);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// Huge pages in /proc/self/smaps for the mapping at `p` (kB), or -1.
long hugeKb(void *p) {
  FILE *f = std::fopen("/proc/self/smaps", "r");
  if (!f)
    return -1;
  char line[512];
  bool in = false;
  long kb = -1;
  unsigned long lo, hi;
  while (std::fgets(line, sizeof line, f)) {
    if (std::sscanf(line, "%lx-%lx", &lo, &hi) == 2 && std::strchr(line, '-') < std::strchr(line, ' '))
      in = uintptr_t(p) >= lo && uintptr_t(p) < hi;
    else if (in && std::sscanf(line, "AnonHugePages: %ld kB", &kb) == 1)
      break;
  }
  std::fclose(f);
  return kb;
}

} // namespace

int main(int argc, char **argv) {
  double tableGiB = 4;
  int iters = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--table-gib")
      tableGiB = std::atof(argv[i + 1]);
    else if (a == "--iters")
      iters = std::atoi(argv[i + 1]);
  }
  loomrt_device gpu, cpu;
  OK(loomrt_device_open(LOOMRT_BACKEND_CUDA, 0, &gpu));
  OK(loomrt_device_open(LOOMRT_BACKEND_CPU, 0, &cpu));
  loomrt_stream gs, cs;
  OK(loomrt_stream_create(gpu, &gs));
  OK(loomrt_stream_create(cpu, &cs));
  const size_t tableBytes = size_t(tableGiB * double(1ull << 30));
  const size_t gatherBytes = size_t(256) << 20;
  void *out, *staging, *rowsDev;
  OK(loomrt_alloc(gpu, LOOMRT_MEM_DEVICE, gatherBytes, &out));
  OK(loomrt_alloc(gpu, LOOMRT_MEM_PINNED, gatherBytes, &staging));
  OK(loomrt_alloc(gpu, LOOMRT_MEM_DEVICE, (gatherBytes / 64) * 8, &rowsDev));
  std::vector<int64_t> rowsHost(gatherBytes / 64);
  struct Row {
    std::string pages, order;
    size_t rowBytes;
    double zeroCopy, sortedZeroCopy, cpuCopy, copy;
  };
  std::vector<Row> table;
  for (int huge = 0; huge < 2; ++huge) {
    void *t = nullptr;
    std::string pages = huge ? "2MiB" : "4KiB";
    if (!huge) {
      OK(loomrt_alloc(gpu, LOOMRT_MEM_PINNED, tableBytes, &t));
    } else {
      t = mmap(nullptr, tableBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (t == MAP_FAILED) {
        std::fprintf(stderr, "mmap of the table failed\n");
        return 2;
      }
      madvise(t, tableBytes, MADV_HUGEPAGE);
      std::memset(t, 0, tableBytes); // fault the pages in (huge where the kernel gives them)
      long kb = hugeKb(t);
      pages += kb >= 0 ? " (" + std::to_string(kb / 1024) + " MiB huge)" : "";
      if (cudaHostRegister(t, tableBytes, cudaHostRegisterMapped | cudaHostRegisterPortable) !=
          cudaSuccess) {
        std::fprintf(stderr, "cudaHostRegister failed; no 2 MiB rows\n");
        munmap(t, tableBytes);
        break;
      }
    }
    // Fill (each byte a function of its place).
    for (size_t i = 0; i < tableBytes; i += 4096)
      static_cast<char *>(t)[i] = char(i >> 12);
    for (size_t rowBytes = 64; rowBytes <= 4096; rowBytes *= 2) {
      size_t numRows = tableBytes / rowBytes, n = gatherBytes / rowBytes;
      std::mt19937_64 rng(rowBytes);
      std::uniform_int_distribution<int64_t> pick(0, int64_t(numRows) - 1);
      for (const char *order : {"random", "sorted"}) {
        for (size_t i = 0; i < n; ++i)
          rowsHost[i] = pick(rng);
        if (std::string(order) == "sorted")
          std::sort(rowsHost.begin(), rowsHost.begin() + n);
        OK(loomrt_memcpy_async(gs, rowsDev, rowsHost.data(), n * 8));
        OK(loomrt_stream_synchronize(gs));
        const int64_t *rd = static_cast<const int64_t *>(rowsDev);
        double z = median(iters, [&] {
          OK(loomrt_gather_rows(gs, t, numRows, rowBytes, rd, n, out, 0));
          OK(loomrt_stream_synchronize(gs));
        });
        double zs = median(iters, [&] {
          OK(loomrt_gather_rows(gs, t, numRows, rowBytes, rd, n, out, LOOMRT_GATHER_SORTED));
          OK(loomrt_stream_synchronize(gs));
        });
        double c = median(iters, [&] {
          OK(loomrt_gather_rows(cs, t, numRows, rowBytes, rowsHost.data(), n, staging, 0));
          OK(loomrt_memcpy_async(gs, out, staging, n * rowBytes));
          OK(loomrt_stream_synchronize(gs));
        });
        double e = median(iters, [&] {
          OK(loomrt_memcpy_async(gs, out, t, n * rowBytes));
          OK(loomrt_stream_synchronize(gs));
        });
        double bytes = double(n * rowBytes);
        table.push_back({pages, order, rowBytes, bytes / z / 1e9, bytes / zs / 1e9, bytes / c / 1e9,
                         bytes / e / 1e9});
        std::printf("{\"pages\": \"%s\", \"order\": \"%s\", \"row_bytes\": %zu, \"zero_copy_gbs\": "
                    "%.2f, \"zero_copy_device_sorted_gbs\": %.2f, \"cpu_gather_copy_gbs\": %.2f, "
                    "\"copy_engine_gbs\": %.2f}\n",
                    pages.c_str(), order, rowBytes, table.back().zeroCopy,
                    table.back().sortedZeroCopy, table.back().cpuCopy, table.back().copy);
        std::fflush(stdout);
      }
    }
    if (huge) {
      cudaHostUnregister(t);
      munmap(t, tableBytes);
    } else {
      loomrt_free(gpu, LOOMRT_MEM_PINNED, t);
    }
  }
  std::printf("| pages | order | row | zero-copy GB/s | zero-copy, sorted on the GPU | CPU gather + "
              "copy GB/s | copy engine GB/s | zero-copy / copy engine | best zero-copy / CPU path |\n");
  for (const Row &r : table)
    std::printf("| %s | %s | %zu B | %.1f | %.1f | %.1f | %.1f | %.0f%% | %.2fx |\n", r.pages.c_str(),
                r.order.c_str(), r.rowBytes, r.zeroCopy, r.sortedZeroCopy, r.cpuCopy, r.copy,
                100 * r.zeroCopy / r.copy, std::max(r.zeroCopy, r.sortedZeroCopy) / r.cpuCopy);
  return 0;
}
