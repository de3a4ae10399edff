// conformance_test.cpp: memory, copies, streams and events behave the same on
// every backend; bad arguments give an error status and a message, not a crash.
#include "backends.h"

#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

namespace {

using Conformance = BackendTest;

TEST_P(Conformance, CopiesRoundTripThroughEverySpace) {
  const size_t n = 100003; // odd, not a multiple of any vector width
  std::vector<float> src(n), back(n, -1.0f);
  for (size_t i = 0; i < n; ++i)
    src[i] = 0.5f * static_cast<float>(i) - 7.0f;
  void *pinned, *devbuf, *pageable;
  LOOMRT_ASSERT_OK(loomrt_alloc(dev, LOOMRT_MEM_PINNED, n * 4, &pinned));
  LOOMRT_ASSERT_OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, n * 4, &devbuf));
  LOOMRT_ASSERT_OK(loomrt_alloc(dev, LOOMRT_MEM_PAGEABLE, n * 4, &pageable));
  std::memcpy(pinned, src.data(), n * 4);
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, devbuf, pinned, n * 4));
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, pageable, devbuf, n * 4));
  LOOMRT_ASSERT_OK(loomrt_stream_synchronize(stream));
  std::memcpy(back.data(), pageable, n * 4);
  EXPECT_EQ(0, std::memcmp(src.data(), back.data(), n * 4));
  EXPECT_NE(devbuf, pinned);
  LOOMRT_ASSERT_OK(loomrt_free(dev, LOOMRT_MEM_PINNED, pinned));
  LOOMRT_ASSERT_OK(loomrt_free(dev, LOOMRT_MEM_DEVICE, devbuf));
  LOOMRT_ASSERT_OK(loomrt_free(dev, LOOMRT_MEM_PAGEABLE, pageable));
}

TEST_P(Conformance, EventsOrderStreamsAndMeasureTime) {
  loomrt_stream other;
  LOOMRT_ASSERT_OK(loomrt_stream_create(dev, &other));
  loomrt_event a, b;
  LOOMRT_ASSERT_OK(loomrt_event_create(dev, &a));
  LOOMRT_ASSERT_OK(loomrt_event_create(dev, &b));
  const size_t bytes = 1 << 20;
  void *x, *y;
  LOOMRT_ASSERT_OK(loomrt_alloc(dev, LOOMRT_MEM_PINNED, bytes, &x));
  LOOMRT_ASSERT_OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, bytes, &y));
  std::memset(x, 0x5a, bytes);
  LOOMRT_ASSERT_OK(loomrt_event_record(a, stream));
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, y, x, bytes));
  LOOMRT_ASSERT_OK(loomrt_event_record(b, stream));
  // The second stream copies back only after the first copy finished.
  LOOMRT_ASSERT_OK(loomrt_stream_wait_event(other, b));
  std::vector<unsigned char> back(bytes, 0);
  void *z;
  LOOMRT_ASSERT_OK(loomrt_alloc(dev, LOOMRT_MEM_PINNED, bytes, &z));
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(other, z, y, bytes));
  LOOMRT_ASSERT_OK(loomrt_stream_synchronize(other));
  EXPECT_EQ(0, std::memcmp(x, z, bytes));
  LOOMRT_ASSERT_OK(loomrt_event_synchronize(b));
  float ms = -1;
  LOOMRT_ASSERT_OK(loomrt_event_elapsed_ms(a, b, &ms));
  EXPECT_GE(ms, 0.0f);
  loomrt_free(dev, LOOMRT_MEM_PINNED, x);
  loomrt_free(dev, LOOMRT_MEM_PINNED, z);
  loomrt_free(dev, LOOMRT_MEM_DEVICE, y);
  loomrt_event_destroy(a);
  loomrt_event_destroy(b);
  loomrt_stream_destroy(other);
}

TEST_P(Conformance, BadArgumentsAreErrorsWithMessages) {
  void *p = nullptr;
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_alloc(dev, static_cast<loomrt_mem_space>(9), 16, &p));
  EXPECT_NE(std::string(loomrt_last_error()).find("memory space"),
            std::string::npos);
  loomrt_event never;
  LOOMRT_ASSERT_OK(loomrt_event_create(dev, &never));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_stream_wait_event(stream, never));
  EXPECT_NE(std::string(loomrt_last_error()).find("never recorded"),
            std::string::npos);
  loomrt_event_destroy(never);
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_memcpy_async(stream, nullptr, &p, 8));
}

TEST(Devices, MissingDeviceIsUnsupportedNotACrash) {
  loomrt_device dev = nullptr;
  EXPECT_EQ(LOOMRT_ERR_UNSUPPORTED,
            loomrt_device_open(LOOMRT_BACKEND_CPU, 7, &dev));
  EXPECT_EQ(dev, nullptr);
  EXPECT_NE(std::string(loomrt_last_error()).find("no cpu device 7"),
            std::string::npos);
#if !defined(LOOMRT_HAVE_HIP) // a CUDA or CPU-only runtime: one GPU vendor a build
  EXPECT_EQ(LOOMRT_ERR_UNSUPPORTED,
            loomrt_device_open(LOOMRT_BACKEND_HIP, 0, &dev));
  EXPECT_NE(std::string(loomrt_last_error()).find("not built"),
            std::string::npos);
#endif
}

// Capacity for the cost model (loom-calibrate): some memory, free <= total.
// Another host thread binds the device before it enqueues work (the driver
// runs DiLoCo's exchange so): a fill on a stream made there comes back.
TEST_P(Conformance, AnotherThreadBindsTheDevice) {
  void *d = nullptr;
  LOOMRT_ASSERT_OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, 64 * 4, &d));
  loomrt_status st = LOOMRT_ERR_BACKEND;
  std::thread t([&] {
    loomrt_stream s2 = nullptr;
    st = loomrt_device_bind(dev);
    if (st == LOOMRT_OK)
      st = loomrt_stream_create(dev, &s2);
    if (st == LOOMRT_OK)
      st = loomrt_fill(s2, LOOMRT_F32, d, 2.5f, 64);
    if (st == LOOMRT_OK)
      st = loomrt_stream_synchronize(s2);
    if (s2)
      loomrt_stream_destroy(s2);
  });
  t.join();
  ASSERT_EQ(LOOMRT_OK, st) << loomrt_last_error();
  std::vector<float> back(64);
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, back.data(), d, 64 * 4));
  LOOMRT_ASSERT_OK(loomrt_stream_synchronize(stream));
  EXPECT_EQ(std::vector<float>(64, 2.5f), back);
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_device_bind(nullptr));
  loomrt_free(dev, LOOMRT_MEM_DEVICE, d);
}

// A capture records work without running it; each launch of the graph
// runs it again, reading what the buffers hold then. Backends without graphs
// (the CPU) say so without an error.
TEST_P(Conformance, CapturedWorkRunsAtEachLaunch) {
  const size_t n = 4099;
  void *x, *y;
  LOOMRT_ASSERT_OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, n * 4, &x));
  LOOMRT_ASSERT_OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, n * 4, &y));
  LOOMRT_ASSERT_OK(loomrt_fill(stream, LOOMRT_F32, x, 2.0f, n));
  LOOMRT_ASSERT_OK(loomrt_fill(stream, LOOMRT_F32, y, 0.0f, n));
  LOOMRT_ASSERT_OK(loomrt_stream_synchronize(stream));
  loomrt_status st = loomrt_stream_begin_capture(stream);
  if (st == LOOMRT_ERR_UNSUPPORTED) {
    loomrt_graph g = nullptr;
    EXPECT_EQ(loomrt_stream_end_capture(stream, &g, nullptr), LOOMRT_ERR_UNSUPPORTED);
    loomrt_free(dev, LOOMRT_MEM_DEVICE, x);
    loomrt_free(dev, LOOMRT_MEM_DEVICE, y);
    GTEST_SKIP() << loomrt_backend_name(GetParam()) << " has no graphs";
  }
  LOOMRT_ASSERT_OK(st);
  // y += x, twice: a graph of two kernels.
  const int64_t shape[] = {int64_t(n)};
  for (int k = 0; k < 2; ++k)
    LOOMRT_ASSERT_OK(loomrt_binary(stream, LOOMRT_ADD, LOOMRT_F32, y, shape, x, shape, y,
                                   shape, 1));
  loomrt_graph g = nullptr;
  size_t nodes = 0;
  LOOMRT_ASSERT_OK(loomrt_stream_end_capture(stream, &g, &nodes));
  EXPECT_GE(nodes, 2u);
  std::vector<float> back(n, -1);
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, back.data(), y, n * 4));
  LOOMRT_ASSERT_OK(loomrt_stream_synchronize(stream));
  EXPECT_EQ(back[0], 0.0f) << "a capture must not run the work";
  for (int launch = 1; launch <= 3; ++launch) {
    LOOMRT_ASSERT_OK(loomrt_graph_launch(g, stream));
    LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, back.data(), y, n * 4));
    LOOMRT_ASSERT_OK(loomrt_stream_synchronize(stream));
    EXPECT_EQ(back[0], 4.0f * launch);
    EXPECT_EQ(back[n - 1], 4.0f * launch);
  }
  // A synchronisation inside a capture invalidates it: end_capture fails
  // with a message and the stream takes work again.
  LOOMRT_ASSERT_OK(loomrt_stream_begin_capture(stream));
  LOOMRT_ASSERT_OK(loomrt_fill(stream, LOOMRT_F32, y, 1.0f, n));
  EXPECT_NE(loomrt_stream_synchronize(stream), LOOMRT_OK);
  loomrt_graph bad = nullptr;
  EXPECT_NE(loomrt_stream_end_capture(stream, &bad, nullptr), LOOMRT_OK);
  EXPECT_NE(std::string(loomrt_last_error()), "");
  LOOMRT_ASSERT_OK(loomrt_fill(stream, LOOMRT_F32, y, 5.0f, n));
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(stream, back.data(), y, n * 4));
  LOOMRT_ASSERT_OK(loomrt_stream_synchronize(stream));
  EXPECT_EQ(back[7], 5.0f);
  loomrt_graph_destroy(g);
  loomrt_free(dev, LOOMRT_MEM_DEVICE, x);
  loomrt_free(dev, LOOMRT_MEM_DEVICE, y);
}

TEST_P(Conformance, ReportsDeviceMemory) {
  size_t freeBytes = 0, total = 0;
  LOOMRT_ASSERT_OK(loomrt_device_memory(dev, &freeBytes, &total));
  EXPECT_GT(total, size_t(1) << 28);
  EXPECT_LE(freeBytes, total);
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_device_memory(dev, nullptr, &total));
}

LOOMRT_INSTANTIATE_BACKENDS(Conformance);

} // namespace
