// gather_test.cpp: loomrt_gather_rows (the zero-copy row gather of issue 21)
// against a host loop, on every backend: tables in device memory and in
// pinned host memory (the GPU reads those across PCIe), row sizes that take
// 16-byte, 4-byte and 1-byte words, rows that start off the 128-byte
// boundary (the kernel reads from the boundary below and drops the extra),
// repeated and sorted indices, read in the given order and sorted on the
// device first (LOOMRT_GATHER_SORTED); bad arguments are errors.
#include "backends.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

namespace {

class GatherRows : public BufferTest {};

TEST_P(GatherRows, MatchesAHostLoop) {
  for (loomrt_mem_space space : {LOOMRT_MEM_DEVICE, LOOMRT_MEM_PINNED})
    for (size_t rowBytes : {size_t(64), size_t(400), size_t(512), size_t(12), size_t(7),
                            size_t(4096)}) {
      SCOPED_TRACE("space " + std::to_string(int(space)) + ", row " + std::to_string(rowBytes));
      const size_t numRows = 1000, n = 777;
      std::vector<uint8_t> table(numRows * rowBytes);
      std::mt19937 gen{unsigned(rowBytes)};
      for (uint8_t &b : table)
        b = uint8_t(gen());
      std::vector<int64_t> rows(n);
      std::uniform_int_distribution<int64_t> pick(0, int64_t(numRows) - 1);
      for (int64_t &r : rows)
        r = pick(gen);
      rows[1] = rows[0]; // a repeat
      std::sort(rows.begin() + n / 2, rows.end()); // and a sorted half
      void *t = nullptr;
      ASSERT_EQ(LOOMRT_OK, loomrt_alloc(BackendTest::dev, space, table.size(), &t));
      ASSERT_EQ(LOOMRT_OK, loomrt_memcpy_async(stream, t, table.data(), table.size()));
      int64_t *dRows = BufferTest::dev<int64_t>(n);
      uint8_t *dOut = BufferTest::dev<uint8_t>(n * rowBytes);
      put(dRows, rows);
      for (int flags : {0, LOOMRT_GATHER_SORTED}) {
        EXPECT_EQ(LOOMRT_OK, loomrt_fill(stream, LOOMRT_F32, dOut, 0.0f, n * rowBytes / 4));
        ASSERT_EQ(LOOMRT_OK,
                  loomrt_gather_rows(stream, t, numRows, rowBytes, dRows, n, dOut, flags));
        std::vector<uint8_t> got = get(dOut, n * rowBytes);
        size_t wrong = 0;
        for (size_t i = 0; i < n; ++i)
          wrong += std::memcmp(got.data() + i * rowBytes,
                               table.data() + size_t(rows[i]) * rowBytes, rowBytes) != 0;
        EXPECT_EQ(wrong, 0u) << "flags " << flags;
      }
      loomrt_free(BackendTest::dev, space, t);
    }
}

// Host memory the caller owns (a shared-memory mapping in the driver),
// registered with loomrt_host_register, reads like pinned memory: copies
// from it and the zero-copy gather.
TEST_P(GatherRows, FromRegisteredHostMemory) {
  const size_t numRows = 300, rowBytes = 512, n = 100;
  std::vector<uint8_t> table(numRows * rowBytes);
  std::mt19937 gen{7u};
  for (uint8_t &b : table)
    b = uint8_t(gen());
  ASSERT_EQ(LOOMRT_OK, loomrt_host_register(BackendTest::dev, table.data(), table.size()))
      << loomrt_last_error();
  std::vector<int64_t> rows(n);
  for (size_t i = 0; i < n; ++i)
    rows[i] = int64_t((i * 37) % numRows);
  int64_t *dRows = BufferTest::dev<int64_t>(n);
  uint8_t *dOut = BufferTest::dev<uint8_t>(n * rowBytes);
  put(dRows, rows);
  ASSERT_EQ(LOOMRT_OK, loomrt_gather_rows(stream, table.data(), numRows, rowBytes, dRows, n, dOut,
                                          LOOMRT_GATHER_SORTED));
  std::vector<uint8_t> got = get(dOut, n * rowBytes);
  for (size_t i = 0; i < n; ++i)
    EXPECT_EQ(0, std::memcmp(got.data() + i * rowBytes,
                             table.data() + size_t(rows[i]) * rowBytes, rowBytes))
        << "row " << i;
  EXPECT_EQ(LOOMRT_OK, loomrt_host_unregister(BackendTest::dev, table.data()));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_host_register(nullptr, table.data(), 8));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_host_register(BackendTest::dev, nullptr, 8));
}

TEST_P(GatherRows, BadArgumentsAreErrors) {
  int64_t *rows = BufferTest::dev<int64_t>(4);
  uint8_t *out = BufferTest::dev<uint8_t>(64);
  uint8_t *table = BufferTest::dev<uint8_t>(64);
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_gather_rows(stream, table, 4, 0, rows, 4, out, 0));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_gather_rows(stream, nullptr, 4, 16, rows, 4, out, 0));
  EXPECT_EQ(LOOMRT_OK, loomrt_gather_rows(stream, table, 4, 16, rows, 0, out, 0));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_gather_rows(stream, table, 4, 16, rows, 4, out, 6));
  if (GetParam() == LOOMRT_BACKEND_CPU) {
    put(rows, std::vector<int64_t>{0, 3, 4, 1});
    EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_gather_rows(stream, table, 4, 16, rows, 4, out, 0));
    EXPECT_NE(std::string(loomrt_last_error()).find("row index 4 at 2 is outside [0, 4)"),
              std::string::npos)
        << loomrt_last_error();
  }
}

LOOMRT_INSTANTIATE_BACKENDS(GatherRows);

} // namespace
