// comm_bench.cpp: all-reduce and reduce-scatter bus bandwidth through
// loomrt's collectives, one process per rank (torchrun-style variables or
// mpirun), as NCCL's nccl-tests report it:
//   all-reduce     busbw = bytes * 2(n-1)/n / time
//   reduce-scatter busbw = bytes * (n-1)/n / time   (bytes: the full input)
// Median of --iters timed calls after 5 warm-ups, timed on the host around
// a stream synchronisation. Rank 0 prints one JSON object per size.
// --shape G holds the world's collectives to an emulated G GB/s link
// (loomrt_comm_shape, as LOOMRT_SLOW_LINK does in training binaries).
//   comm_bench cuda|cpu [--iters N] [--max-mib M] [--shape G]
#include "loomrt/loomrt.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define OK(call)                                                               \
  do {                                                                         \
    if ((call) != LOOMRT_OK) {                                                 \
      std::fprintf(stderr, "%s failed: %s\n", #call, loomrt_last_error());      \
      return 2;                                                                \
    }                                                                          \
  } while (0)

int main(int argc, char **argv) {
  loomrt_backend be = argc > 1 && std::string(argv[1]) == "cpu" ? LOOMRT_BACKEND_CPU
                                                                : LOOMRT_BACKEND_CUDA;
  int iters = 20;
  double maxMiB = 1024, shapeGBps = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--iters")
      iters = std::atoi(argv[i + 1]);
    else if (a == "--max-mib")
      maxMiB = std::atof(argv[i + 1]);
    else if (a == "--shape")
      shapeGBps = std::atof(argv[i + 1]);
  }
  loomrt_device dev;
  OK(loomrt_device_open(be, be == LOOMRT_BACKEND_CPU ? 0 : loomrt_local_rank(), &dev));
  loomrt_stream s;
  OK(loomrt_stream_create(dev, &s));
  loomrt_comm c;
  OK(loomrt_comm_init_from_env(dev, &c));
  if (shapeGBps > 0)
    OK(loomrt_comm_shape(c, shapeGBps * 1e9));
  int n = loomrt_comm_size(c), rank = loomrt_comm_rank(c);
  size_t maxBytes = size_t(maxMiB * (1 << 20));
  void *a, *b;
  OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, maxBytes, &a));
  OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, maxBytes, &b));
  OK(loomrt_fill(s, LOOMRT_F32, a, 1.0f, maxBytes / 4));
  for (size_t bytes = 1 << 20; bytes <= maxBytes; bytes *= 4) {
    for (loomrt_dtype dt : {LOOMRT_BF16, LOOMRT_F32}) {
      size_t es = dt == LOOMRT_BF16 ? 2 : 4, count = bytes / es;
      for (int op = 0; op < 2; ++op) {
        std::vector<double> ms;
        for (int it = 0; it < iters + 5; ++it) {
          OK(loomrt_stream_synchronize(s));
          auto t0 = std::chrono::steady_clock::now();
          if (op == 0)
            OK(loomrt_all_reduce(c, s, dt, a, b, count, LOOMRT_REDUCE_SUM));
          else
            OK(loomrt_reduce_scatter(c, s, dt, a, b, count / size_t(n), LOOMRT_REDUCE_SUM));
          OK(loomrt_stream_synchronize(s));
          if (it >= 5)
            ms.push_back(std::chrono::duration<double, std::milli>(
                             std::chrono::steady_clock::now() - t0).count());
        }
        std::sort(ms.begin(), ms.end());
        double med = ms[ms.size() / 2];
        double factor = op == 0 ? 2.0 * (n - 1) / n : double(n - 1) / n;
        if (rank == 0)
          std::printf("{\"impl\": \"loomrt\", \"op\": \"%s\", \"dtype\": \"%s\", \"bytes\": %zu, "
                      "\"ranks\": %d, \"ms\": %.4f, \"busbw_gbs\": %.4f}\n",
                      op == 0 ? "all_reduce" : "reduce_scatter",
                      dt == LOOMRT_BF16 ? "bf16" : "fp32", bytes, n, med,
                      double(bytes) * factor / (med * 1e-3) / 1e9);
        std::fflush(stdout);
      }
    }
  }
  loomrt_comm_destroy(c);
  loomrt_free(dev, LOOMRT_MEM_DEVICE, a);
  loomrt_free(dev, LOOMRT_MEM_DEVICE, b);
  loomrt_stream_destroy(s);
  loomrt_device_close(dev);
  return 0;
}
