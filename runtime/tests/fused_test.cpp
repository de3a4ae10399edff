// loomrt_fused_elementwise's checks and loomrt_fused_source's text, apart
// from running programs (kernels_test.cpp's FusedRegionAgainstFloat64): a
// program comes from generated code and its name becomes an identifier in
// generated source, so every malformed one is an error, never a crash. On
// CUDA builds the generated text of programs that use every op compiles
// with NVRTC (no GPU needed).
#include "loomrt/loomrt.h"
#include "common/adam_math.h"
#if defined(LOOMRT_HAVE_CUDA)
#include "cuda/fused_rtc.h"
#endif

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

struct FusedProgram : ::testing::Test {
  void SetUp() override {
    ASSERT_EQ(LOOMRT_OK, loomrt_device_open(LOOMRT_BACKEND_CPU, 0, &dev));
    ASSERT_EQ(LOOMRT_OK, loomrt_stream_create(dev, &s));
  }
  void TearDown() override {
    loomrt_stream_destroy(s);
    loomrt_device_close(dev);
  }
  /// Runs `p` over 4 f32 elements; returns the status and keeps the error.
  loomrt_status run(const loomrt_fused_program &p) {
    float a[4] = {1, 2, 3, 4}, b[4] = {}, c[4] = {};
    const void *in[2] = {a, a};
    void *out[2] = {b, c};
    return loomrt_fused_elementwise(s, &p, in, out, 4);
  }
  loomrt_device dev = nullptr;
  loomrt_stream s = nullptr;
};

const loomrt_dtype kF32[2] = {LOOMRT_F32, LOOMRT_F32};

TEST_F(FusedProgram, RunsAProgramInPlace) {
  // y = exp(x) - x, written over x: each element is read before it is written.
  float x[3] = {0.0f, 1.0f, -2.0f};
  const loomrt_fused_inst prog[] = {{LOOMRT_FUSED_LOAD, 0, 0, 0},
                                    {LOOMRT_FUSED_UNARY, LOOMRT_EXP, 0, 0},
                                    {LOOMRT_FUSED_BINARY, LOOMRT_SUB, 1, 0},
                                    {LOOMRT_FUSED_STORE, 0, 0, 2}};
  loomrt_fused_program p = {"in_place", 1, 1, 4, kF32, kF32, prog};
  const void *in[1] = {x};
  void *out[1] = {x};
  ASSERT_EQ(LOOMRT_OK, loomrt_fused_elementwise(s, &p, in, out, 3)) << loomrt_last_error();
  ASSERT_EQ(LOOMRT_OK, loomrt_stream_synchronize(s));
  EXPECT_FLOAT_EQ(x[0], 1.0f);
  EXPECT_FLOAT_EQ(x[1], std::exp(1.0f) - 1.0f);
  EXPECT_FLOAT_EQ(x[2], std::exp(-2.0f) + 2.0f);
}

// ROUND gives what an unfused bf16 call would have written: x + 1 rounded
// to bf16 (nearest, ties to even) and back, here stored as fp32.
TEST_F(FusedProgram, RoundsToBf16) {
  float x[3] = {1.0f / 3.0f, 255.5f, 1e-3f}, y[3] = {};
  float one = 1.0f;
  const loomrt_fused_inst prog[] = {{LOOMRT_FUSED_LOAD, 0, 0, 0},
                                    {LOOMRT_FUSED_LOAD, 0, 1, 0},
                                    {LOOMRT_FUSED_BINARY, LOOMRT_ADD, 0, 1},
                                    {LOOMRT_FUSED_ROUND, 0, 2, 0},
                                    {LOOMRT_FUSED_STORE, 0, 0, 3}};
  std::vector<float> ones(3, one);
  loomrt_fused_program p = {"round", 2, 1, 5, kF32, kF32, prog};
  const void *in[2] = {x, ones.data()};
  void *out[1] = {y};
  ASSERT_EQ(LOOMRT_OK, loomrt_fused_elementwise(s, &p, in, out, 3)) << loomrt_last_error();
  ASSERT_EQ(LOOMRT_OK, loomrt_stream_synchronize(s));
  for (int i = 0; i < 3; ++i) {
    float want = loomrt::bf16ToFloat(loomrt::floatToBf16(x[i] + 1.0f));
    EXPECT_EQ(want, y[i]) << i;
    EXPECT_NE(x[i] + 1.0f, y[i]) << i; // none of them is a bf16 value
  }
  std::string src(loomrt_fused_source(&p, nullptr, 0) + 1, '\0');
  loomrt_fused_source(&p, src.data(), src.size());
  EXPECT_NE(src.find("float r3 = loomrt::load(loomrt::store<uint16_t>(r2));"), std::string::npos)
      << src;
}

TEST_F(FusedProgram, MalformedProgramsAreErrors) {
  const loomrt_fused_inst good[] = {{LOOMRT_FUSED_LOAD, 0, 0, 0}, {LOOMRT_FUSED_STORE, 0, 0, 0}};
  struct Case {
    const char *name;
    std::vector<loomrt_fused_inst> insts;
    const char *expect;
    int nIn = 1, nOut = 1;
  };
  const Case cases[] = {
      {"x y", {good, good + 2}, "identifier"},
      {"1x", {good, good + 2}, "identifier"},
      {"x\");system(\"", {good, good + 2}, "identifier"},
      {"", {good, good + 2}, "identifier"},
      {"ok", {}, "instructions"},
      {"ok", {{LOOMRT_FUSED_LOAD, 0, 3, 0}, {LOOMRT_FUSED_STORE, 0, 0, 0}}, "loads input 3"},
      {"ok", {{LOOMRT_FUSED_LOAD, 0, 0, 0}, {LOOMRT_FUSED_UNARY, 0, 1, 0},
              {LOOMRT_FUSED_STORE, 0, 0, 1}}, "earlier register"},
      {"ok", {{LOOMRT_FUSED_LOAD, 0, 0, 0}, {LOOMRT_FUSED_UNARY, 99, 0, 0},
              {LOOMRT_FUSED_STORE, 0, 0, 1}}, "unary op"},
      {"ok", {{LOOMRT_FUSED_LOAD, 0, 0, 0}, {LOOMRT_FUSED_BINARY, LOOMRT_ADD, 0, 5},
              {LOOMRT_FUSED_STORE, 0, 0, 1}}, "two earlier registers"},
      {"ok", {{LOOMRT_FUSED_LOAD, 0, 0, 0}, {LOOMRT_FUSED_UNARY_GRAD, LOOMRT_LOG, 0, 0},
              {LOOMRT_FUSED_STORE, 0, 0, 1}}, "with a gradient"},
      {"ok", {{LOOMRT_FUSED_LOAD, 0, 0, 0}, {LOOMRT_FUSED_STORE, 0, 0, 0},
              {LOOMRT_FUSED_STORE, 0, 0, 1}}, "from an earlier register"},
      {"ok", {{LOOMRT_FUSED_LOAD, 0, 0, 0}, {LOOMRT_FUSED_STORE, 0, 0, 0}},
       "output 1 is never stored", 1, 2},
      {"ok", {{LOOMRT_FUSED_LOAD, 0, 0, 0}, {LOOMRT_FUSED_ROUND, 0, 1, 0},
              {LOOMRT_FUSED_STORE, 0, 0, 1}}, "rounds an earlier register"},
      {"ok", {{LOOMRT_FUSED_LOAD, 0, 0, 0}, {7, 0, 0, 0}}, "unknown opcode 7"},
      {"ok", {good, good + 2}, "inputs", 9, 1},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(std::string("case expecting '") + c.expect + "'");
    loomrt_fused_program p = {c.name, c.nIn, c.nOut, int32_t(c.insts.size()), kF32, kF32,
                              c.insts.data()};
    EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, run(p));
    EXPECT_NE(std::string(loomrt_last_error()).find(c.expect), std::string::npos)
        << loomrt_last_error();
    EXPECT_EQ(0u, loomrt_fused_source(&p, nullptr, 0));
  }
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_fused_elementwise(s, nullptr, nullptr, nullptr, 1));
  loomrt_fused_program p = {"ok", 1, 1, 2, kF32, kF32, good};
  float a = 1;
  const void *in[1] = {nullptr};
  void *out[1] = {&a};
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_fused_elementwise(s, &p, in, out, 1));
  EXPECT_NE(std::string(loomrt_last_error()).find("null input 0"), std::string::npos);
}

/// A program using every unary op, its gradient where it has one, and
/// every binary op, over a bf16 and an f32 input.
loomrt_fused_program everyOp(std::vector<loomrt_fused_inst> &insts) {
  static const loomrt_dtype in[2] = {LOOMRT_BF16, LOOMRT_F32}, out[2] = {LOOMRT_BF16, LOOMRT_F32};
  insts = {{LOOMRT_FUSED_LOAD, 0, 0, 0}, {LOOMRT_FUSED_LOAD, 0, 1, 0}};
  int last = 1;
  for (int op = 0; op < LOOMRT_UNARY_OP_COUNT; ++op) {
    insts.push_back({LOOMRT_FUSED_UNARY, op, last, 0});
    last = int(insts.size()) - 1;
  }
  for (int op : {LOOMRT_RELU, LOOMRT_SILU, LOOMRT_GELU, LOOMRT_GELU_TANH, LOOMRT_SIGMOID,
                 LOOMRT_TANH, LOOMRT_EXP}) {
    insts.push_back({LOOMRT_FUSED_UNARY_GRAD, op, last, 0});
    last = int(insts.size()) - 1;
  }
  for (int op = 0; op < LOOMRT_BINARY_OP_COUNT; ++op) {
    insts.push_back({LOOMRT_FUSED_BINARY, op, last, 1});
    last = int(insts.size()) - 1;
  }
  insts.push_back({LOOMRT_FUSED_STORE, 0, 0, last});
  insts.push_back({LOOMRT_FUSED_STORE, 0, 1, last - 1});
  return {"every_op", 2, 2, int32_t(insts.size()), in, out, insts.data()};
}

TEST(FusedSource, NamesItsKernelAndCallsTheRuntimeMath) {
  std::vector<loomrt_fused_inst> insts;
  loomrt_fused_program p = everyOp(insts);
  size_t len = loomrt_fused_source(&p, nullptr, 0);
  ASSERT_GT(len, 0u) << loomrt_last_error();
  std::string text(len, '\0');
  EXPECT_EQ(len, loomrt_fused_source(&p, text.data(), len + 1));
  EXPECT_NE(text.find("#include \"common/kernel_math.h\""), std::string::npos);
  EXPECT_NE(text.find("extern \"C\" __global__ void loom_fused_every_op(const uint16_t *in0, "
                      "const float *in1, uint16_t *out0, float *out1, unsigned long long n)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("loomrt::unaryGrad(loomrt_unary_op(13)"), std::string::npos);
  EXPECT_NE(text.find("out0[i] = loomrt::store<uint16_t>("), std::string::npos);
  // Too small a buffer is left alone; the length is still returned.
  char small[8] = "unused";
  EXPECT_EQ(len, loomrt_fused_source(&p, small, sizeof small));
  EXPECT_STREQ(small, "unused");
}

#if defined(LOOMRT_HAVE_CUDA)
TEST(FusedSource, CompilesWithNvrtcForSm90) {
  std::vector<loomrt_fused_inst> insts;
  loomrt_fused_program p = everyOp(insts);
  std::string text(loomrt_fused_source(&p, nullptr, 0), '\0');
  loomrt_fused_source(&p, text.data(), text.size() + 1);
  std::vector<char> cubin;
  std::string log;
  EXPECT_TRUE(loomrt::compileFusedSource(text, "every_op", 90, cubin, log)) << log << "\n"
                                                                           << text;
  EXPECT_GT(cubin.size(), 0u);
  // And a program that does not compile reports NVRTC's log.
  EXPECT_FALSE(loomrt::compileFusedSource("this is not CUDA", "x", 90, cubin, log));
  EXPECT_FALSE(log.empty());
}
#endif

} // namespace
