// backends.h: helpers that parameterise the conformance suite over backends.
#ifndef LOOMRT_TESTS_BACKENDS_H
#define LOOMRT_TESTS_BACKENDS_H

#include "loomrt/loomrt.h"
#include <gtest/gtest.h>

#include <string>

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

inline std::string backendName(
    const ::testing::TestParamInfo<loomrt_backend> &info) {
  return loomrt_backend_name(info.param);
}

#define LOOMRT_INSTANTIATE_BACKENDS(Suite)                                     \
  INSTANTIATE_TEST_SUITE_P(AllBackends, Suite,                                 \
                           ::testing::Values(LOOMRT_BACKEND_CPU,               \
                                             LOOMRT_BACKEND_CUDA),             \
                           backendName)

#endif
