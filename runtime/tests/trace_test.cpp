// trace_test.cpp: spans recorded on streams come out as Chrome trace JSON
// with one named lane per stream and the work's real duration.
#include "backends.h"
#include "common/json.h"

#include <cstdio>
#include <fstream>
#include <unistd.h>

namespace {

using Trace = BackendTest;

/// Writes the trace to `path` and parses it back (false: not JSON).
::testing::AssertionResult writeAndRead(loomrt_trace t, const std::string &path,
                                        loomrt::json::Value &v, std::string &text) {
  if (loomrt_trace_write(t, path.c_str()) != LOOMRT_OK)
    return ::testing::AssertionFailure() << "trace_write: " << loomrt_last_error();
  std::ifstream in(path);
  text.assign(std::istreambuf_iterator<char>(in), {});
  std::string err;
  if (!loomrt::json::parse(text, v, err))
    return ::testing::AssertionFailure() << err;
  return ::testing::AssertionSuccess();
}

TEST_P(Trace, WritesChromeTraceJson) {
  loomrt_trace t;
  LOOMRT_ASSERT_OK(loomrt_trace_create(stream, &t));
  loomrt_stream copies;
  LOOMRT_ASSERT_OK(loomrt_stream_create(dev, &copies));
  const size_t n = size_t(16) << 20;
  void *a, *b;
  LOOMRT_ASSERT_OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, n * 4, &a));
  LOOMRT_ASSERT_OK(loomrt_alloc(dev, LOOMRT_MEM_PINNED, n * 4, &b));
  LOOMRT_ASSERT_OK(loomrt_fill(stream, LOOMRT_F32, a, 1.0f, n));
  int64_t s1, s2;
  LOOMRT_ASSERT_OK(loomrt_trace_begin(t, stream, "compute", "exp \"x\"", &s1));
  LOOMRT_ASSERT_OK(loomrt_unary(stream, LOOMRT_EXP, LOOMRT_F32, a, a, n));
  LOOMRT_ASSERT_OK(loomrt_trace_end(t, stream, s1));
  LOOMRT_ASSERT_OK(loomrt_trace_begin(t, copies, "d2h", "copy out", &s2));
  LOOMRT_ASSERT_OK(loomrt_memcpy_async(copies, b, a, n * 4));
  LOOMRT_ASSERT_OK(loomrt_trace_end(t, copies, s2));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_trace_end(t, copies, s2));

  std::string path = "/tmp/loomrt_trace_" + std::to_string(getpid()) + ".json";
  loomrt::json::Value v;
  std::string text;
  ASSERT_TRUE(writeAndRead(t, path, v, text));
  ASSERT_TRUE(v.contains("traceEvents") && v["traceEvents"].is_array());
  int spans = 0, lanes = 0;
  for (auto &e : v["traceEvents"]) {
    std::string ph = e.at("ph").get<std::string>();
    if (ph == "M") {
      ++lanes;
      continue;
    }
    ASSERT_EQ("X", ph);
    ++spans;
    EXPECT_GE(e.at("ts").get<double>(), 0.0);
    EXPECT_GT(e.at("dur").get<double>(), 0.0) << e.at("name").get<std::string>();
  }
  EXPECT_EQ(2, spans);
  EXPECT_EQ(2, lanes);
  EXPECT_NE(text.find("\"exp \\\"x\\\"\""), std::string::npos);

  // A span that was never ended is an error, not a silent hole.
  int64_t s3;
  LOOMRT_ASSERT_OK(loomrt_trace_begin(t, stream, "compute", "open", &s3));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_trace_write(t, path.c_str()));
  loomrt_trace_destroy(t);
  loomrt_free(dev, LOOMRT_MEM_DEVICE, a);
  loomrt_free(dev, LOOMRT_MEM_PINNED, b);
  loomrt_stream_destroy(copies);
  std::remove(path.c_str());
}

// Work the host does itself is timed on the host's clock, on its own lane,
// after the work queued before it (the trace waited for its origin).
TEST_P(Trace, HostSpansOnTheHostClock) {
  loomrt_trace t;
  LOOMRT_ASSERT_OK(loomrt_trace_create(stream, &t));
  int64_t dev1, host1;
  LOOMRT_ASSERT_OK(loomrt_trace_begin(t, stream, "compute", "queued", &dev1));
  LOOMRT_ASSERT_OK(loomrt_trace_end(t, stream, dev1));
  LOOMRT_ASSERT_OK(loomrt_stream_synchronize(stream));
  LOOMRT_ASSERT_OK(loomrt_trace_host_begin(t, "cpu", "adam", &host1));
  usleep(20000);
  LOOMRT_ASSERT_OK(loomrt_trace_host_end(t, host1));
  // Host spans end with trace_host_end, device spans with trace_end.
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_trace_host_end(t, host1));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_trace_host_end(t, dev1));
  int64_t host2;
  LOOMRT_ASSERT_OK(loomrt_trace_host_begin(t, "cpu", "open", &host2));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_trace_end(t, stream, host2));
  std::string path = "/tmp/loomrt_trace_host_" + std::to_string(getpid()) + ".json";
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_trace_write(t, path.c_str())); // host2 open
  LOOMRT_ASSERT_OK(loomrt_trace_host_end(t, host2));
  loomrt::json::Value v;
  std::string text;
  ASSERT_TRUE(writeAndRead(t, path, v, text));
  double queuedEnd = -1, adamStart = -1, adamDur = -1;
  bool cpuLane = false;
  for (auto &e : v.at("traceEvents")) {
    if (e.at("ph") == "M") {
      cpuLane |= e.at("args").at("name") == "cpu";
      continue;
    }
    std::string name = e.at("name").get<std::string>();
    if (name == "queued")
      queuedEnd = e.at("ts").get<double>() + e.at("dur").get<double>();
    if (name == "adam") {
      adamStart = e.at("ts").get<double>();
      adamDur = e.at("dur").get<double>();
    }
  }
  EXPECT_TRUE(cpuLane);
  // The two clocks are aligned when the origin's synchronisation returns,
  // a few microseconds after the GPU passed it (measured on the H100: host
  // spans ~5 us early): allow 100 us.
  EXPECT_GE(adamStart, queuedEnd - 100);
  EXPECT_GE(adamDur, 20000.0); // microseconds
  EXPECT_LT(adamDur, 2e6);
  loomrt_trace_destroy(t);
  std::remove(path.c_str());
}

LOOMRT_INSTANTIATE_BACKENDS(Trace);

} // namespace
