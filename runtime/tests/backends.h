// backends.h: helpers that parameterise the conformance suite over backends.
#ifndef LOOMRT_TESTS_BACKENDS_H
#define LOOMRT_TESTS_BACKENDS_H

#include "loomrt/loomrt.h"
#include <gtest/gtest.h>

#include <string>
#include <vector>

#define LOOMRT_ASSERT_OK(expr)                                                 \
  do {                                                                         \
    loomrt_status s_ = (expr);                                                 \
    ASSERT_EQ(s_, LOOMRT_OK) << #expr << ": " << loomrt_last_error();          \
  } while (0)

// Fixture: opens device 0 of the backend under test and one stream; skips
// when the backend is not built in or no device is present.
class BackendTest : public ::testing::TestWithParam<loomrt_backend> {
protected:
  void SetUp() override {
    if (!loomrt_backend_available(GetParam()))
      GTEST_SKIP() << loomrt_backend_name(GetParam())
                   << " backend not built or no device present";
    LOOMRT_ASSERT_OK(loomrt_device_open(GetParam(), 0, &dev));
    LOOMRT_ASSERT_OK(loomrt_stream_create(dev, &stream));
  }
  void TearDown() override {
    loomrt_stream_destroy(stream);
    loomrt_device_close(dev);
  }
  loomrt_device dev = nullptr;
  loomrt_stream stream = nullptr;
};

// BackendTest with device buffers freed at the end of the test, and
// copies to and from them (synchronised).
class BufferTest : public BackendTest {
protected:
  template <typename T> T *dev(size_t count) {
    void *p = nullptr;
    EXPECT_EQ(LOOMRT_OK, loomrt_alloc(BackendTest::dev, LOOMRT_MEM_DEVICE,
                                      count * sizeof(T) > 8 ? count * sizeof(T) : 8, &p));
    owned.push_back(p);
    return static_cast<T *>(p);
  }
  template <typename T> void put(T *d, const std::vector<T> &h) {
    ASSERT_EQ(LOOMRT_OK, loomrt_memcpy_async(stream, d, h.data(), h.size() * sizeof(T)));
  }
  template <typename T> std::vector<T> get(const T *d, size_t count) {
    std::vector<T> h(count);
    EXPECT_EQ(LOOMRT_OK, loomrt_memcpy_async(stream, h.data(), d, count * sizeof(T)));
    EXPECT_EQ(LOOMRT_OK, loomrt_stream_synchronize(stream));
    return h;
  }
  void TearDown() override {
    for (void *p : owned)
      loomrt_free(BackendTest::dev, LOOMRT_MEM_DEVICE, p);
    BackendTest::TearDown();
  }
  std::vector<void *> owned;
};

inline std::string backendName(
    const ::testing::TestParamInfo<loomrt_backend> &info) {
  return loomrt_backend_name(info.param);
}

#define LOOMRT_INSTANTIATE_BACKENDS(Suite)                                     \
  INSTANTIATE_TEST_SUITE_P(AllBackends, Suite,                                 \
                           ::testing::Values(LOOMRT_BACKEND_CPU,               \
                                             LOOMRT_BACKEND_CUDA,              \
                                             LOOMRT_BACKEND_HIP),              \
                           backendName)

#endif
