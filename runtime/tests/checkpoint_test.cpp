// checkpoint_test.cpp: safetensors checkpoints round-trip, are readable by a
// reader other than ours, reject every kind of mismatch with a message that
// names the tensor, and survive a kill in the middle of a save.
#include "loomrt/loomrt.h"
#include "common/adam_math.h"
#include "common/checksum.h"

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

std::string tempPath(const std::string &name) {
  const char *dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/loomrt_" + std::to_string(getpid()) +
         "_" + name;
}

struct Sample {
  std::vector<float> w = std::vector<float>(12);
  std::vector<uint16_t> h = std::vector<uint16_t>(5);
  float s = 7.0f;
  Sample() {
    for (int i = 0; i < 12; ++i)
      w[i] = 0.5f * i;
    for (int i = 0; i < 5; ++i)
      h[i] = loomrt::floatToBf16(float(i - 2));
  }
  std::vector<loomrt_tensor_ref> refs() {
    return {{"w", LOOMRT_F32, 2, {3, 4}, w.data()},
            {"h", LOOMRT_BF16, 1, {5}, h.data()},
            {"s", LOOMRT_F32, 0, {}, &s}};
  }
};

loomrt_status save(const std::string &path, Sample &x) {
  auto refs = x.refs();
  const char *k[] = {"step"}, *v[] = {"42"};
  return loomrt_checkpoint_save(path.c_str(), refs.data(), refs.size(), k, v, 1);
}

TEST(Checkpoint, RoundTripsTensorsAndMetadata) {
  std::string path = tempPath("rt.safetensors");
  Sample a;
  ASSERT_EQ(LOOMRT_OK, save(path, a)) << loomrt_last_error();
  Sample b;
  std::fill(b.w.begin(), b.w.end(), -1.f);
  std::fill(b.h.begin(), b.h.end(), 0);
  b.s = 0;
  auto refs = b.refs();
  ASSERT_EQ(LOOMRT_OK, loomrt_checkpoint_load(path.c_str(), refs.data(), refs.size()))
      << loomrt_last_error();
  EXPECT_EQ(a.w, b.w);
  EXPECT_EQ(a.h, b.h);
  EXPECT_EQ(a.s, b.s);
  char buf[16];
  ASSERT_EQ(LOOMRT_OK, loomrt_checkpoint_metadata(path.c_str(), "step", buf, sizeof buf));
  EXPECT_STREQ(buf, "42");
  EXPECT_EQ(LOOMRT_ERR_IO, loomrt_checkpoint_metadata(path.c_str(), "epoch", buf, sizeof buf));
  std::remove(path.c_str());
}

TEST(Checkpoint, ReadableByAnotherReader) {
  if (std::system("python3 -c '' > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 not found";
  std::string path = tempPath("py.safetensors");
  Sample a;
  ASSERT_EQ(LOOMRT_OK, save(path, a)) << loomrt_last_error();
  std::string cmd = std::string("python3 ") + LOOMRT_TESTS_DIR +
                    "/read_safetensors.py " + path;
  EXPECT_EQ(0, std::system(cmd.c_str()));
  std::remove(path.c_str());
}

/// Loads `path` into a sample with one field changed; expects an I/O error
/// whose message contains `needle`.
void expectRejected(const std::string &path,
                    void (*mutate)(std::vector<loomrt_tensor_ref> &),
                    const std::string &needle) {
  Sample b;
  auto refs = b.refs();
  mutate(refs);
  EXPECT_EQ(LOOMRT_ERR_IO,
            loomrt_checkpoint_load(path.c_str(), refs.data(), refs.size()));
  EXPECT_NE(std::string(loomrt_last_error()).find(needle), std::string::npos)
      << "message: " << loomrt_last_error();
}

TEST(Checkpoint, MismatchesNameTheTensor) {
  std::string path = tempPath("bad.safetensors");
  Sample a;
  ASSERT_EQ(LOOMRT_OK, save(path, a));
  expectRejected(path, [](auto &r) { r[0].name = "weight"; },
                 "has tensor 'w' that the model does not have");
  expectRejected(path, [](auto &r) { r.pop_back(); },
                 "has tensor 's' that the model does not have");
  expectRejected(path, [](auto &r) { r[1].dtype = LOOMRT_F32; },
                 "tensor 'h' is BF16, expected F32");
  expectRejected(path, [](auto &r) { r[0].shape[0] = 4, r[0].shape[1] = 3; },
                 "tensor 'w' has shape [3, 4], expected [4, 3]");
  // A truncated file (a crash without the atomic rename would leave one).
  {
    std::ifstream in(path, std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(path, std::ios::binary) << all.substr(0, all.size() - 10);
  }
  expectRejected(path, [](auto &) {}, "out of bounds or the wrong size");
  std::ofstream(path, std::ios::binary) << "not a checkpoint at all";
  expectRejected(path, [](auto &) {}, "header length");
  std::remove(path.c_str());
  expectRejected(path, [](auto &) {}, "cannot open checkpoint");
}

/// A safetensors file of this header (JSON text) and `data` bytes.
void writeRaw(const std::string &path, const std::string &header, size_t data) {
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i)
    len[size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
  std::ofstream(path, std::ios::binary) << len << header << std::string(data, '\0');
}

// Headers another writer (or an attacker) could give: each an error that
// says what is wrong, never a crash, an exception or a read out of bounds
// (the JSON is nlohmann-json's; the checks are ours).
TEST(Checkpoint, HostileHeadersAreErrors) {
  std::string path = tempPath("hostile.safetensors");
  auto loadOne = [&](const std::string &header, const std::string &needle) {
    writeRaw(path, header, 64);
    float x[4];
    loomrt_tensor_ref r{"w", LOOMRT_F32, 1, {4}, x};
    EXPECT_EQ(LOOMRT_ERR_IO, loomrt_checkpoint_load(path.c_str(), &r, 1)) << header;
    EXPECT_NE(std::string(loomrt_last_error()).find(needle), std::string::npos)
        << header << "\nmessage: " << loomrt_last_error();
  };
  std::string ok = R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})";
  writeRaw(path, ok, 16);
  float x[4];
  loomrt_tensor_ref r{"w", LOOMRT_F32, 1, {4}, x};
  EXPECT_EQ(LOOMRT_OK, loomrt_checkpoint_load(path.c_str(), &r, 1)) << loomrt_last_error();
  loadOne(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}})",
          "out of bounds or the wrong size");
  loadOne(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 9223372036854775807]}})",
          "out of bounds or the wrong size");
  loadOne(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0.0, 16]}})",
          "out of bounds or the wrong size");
  loadOne(R"({"w": {"dtype": "F32", "shape": [4.5], "data_offsets": [0, 16]}})",
          "has shape [-1], expected [4]");
  loadOne(R"({"w": {"dtype": 7, "shape": [4], "data_offsets": [0, 16]}})",
          "lacks dtype, shape or data_offsets");
  loadOne(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]})",
          "malformed header");
  loadOne(R"(["w"])", "malformed header: not an object");
  loadOne(R"({"w": "\ud800"})", "malformed header");
  loadOne(R"({"w": 1e999})", "malformed header"); // nlohmann's out_of_range, not a parse_error
  loadOne(std::string(100, '[') + std::string(100, ']'), "nested more than 64 levels");
  loadOne(R"({"__metadata__": [1], "w": {}})", "__metadata__ that is not an object");
  std::remove(path.c_str());
}

TEST(Checkpoint, KillDuringSaveKeepsTheLastGoodOne) {
  std::string path = tempPath("kill.safetensors");
  const size_t n = size_t(64) << 20; // 256 MB of fp32 per version
  int ready[2];
  ASSERT_EQ(0, pipe(ready));
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Version 1 completely, then version 2, 3, ... until killed.
    std::vector<float> data(n);
    for (int version = 1;; ++version) {
      std::fill(data.begin(), data.end(), float(version));
      loomrt_tensor_ref r{"x", LOOMRT_F32, 1, {int64_t(n)}, data.data()};
      if (loomrt_checkpoint_save(path.c_str(), &r, 1, nullptr, nullptr, 0))
        _exit(3);
      if (version == 1 && write(ready[1], "1", 1) != 1)
        _exit(4);
    }
  }
  close(ready[1]);
  char c;
  ASSERT_EQ(1, read(ready[0], &c, 1)) << "child failed to write version 1";
  // Wait until the next save's temporary file exists, then kill the child
  // in the middle of writing it.
  std::string tmp = path + ".tmp." + std::to_string(child);
  bool midWrite = false;
  for (int i = 0; i < 20000 && !midWrite; ++i) {
    std::ifstream probe(tmp);
    midWrite = probe.good();
    if (!midWrite)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  kill(child, SIGKILL);
  int status;
  waitpid(child, &status, 0);
  close(ready[0]);
  EXPECT_TRUE(midWrite) << "never saw a save in progress";
  // The checkpoint is a complete earlier version, never a partial one.
  std::vector<float> back(n, -1.f);
  loomrt_tensor_ref r{"x", LOOMRT_F32, 1, {int64_t(n)}, back.data()};
  ASSERT_EQ(LOOMRT_OK, loomrt_checkpoint_load(path.c_str(), &r, 1))
      << loomrt_last_error();
  float v = back[0];
  EXPECT_GE(v, 1.f);
  size_t mismatched = 0;
  for (float x : back)
    mismatched += x != v;
  EXPECT_EQ(0u, mismatched) << "checkpoint mixes versions";
  // The killed writer's temporary file goes with the next save (its
  // process is gone); it held a whole version's bytes.
  ASSERT_EQ(LOOMRT_OK, loomrt_checkpoint_save(path.c_str(), &r, 1, nullptr, nullptr, 0));
  EXPECT_NE(0, access(tmp.c_str(), F_OK)) << "stale " << tmp << " left behind";
  std::remove(path.c_str());
  std::remove(tmp.c_str());
}

TEST(Checkpoint, CorruptTensorFailsItsChecksum) {
  std::string path = tempPath("crc.safetensors");
  Sample a;
  ASSERT_EQ(LOOMRT_OK, save(path, a));
  // Flip one bit of the last tensor's data (the file keeps its length, so
  // only the checksum can tell).
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f.seekg(-1, std::ios::end);
    char c = char(f.get() ^ 0x10);
    f.seekp(-1, std::ios::end);
    f.put(c);
  }
  expectRejected(path, [](auto &) {}, "tensor 's' does not match its checksum");
  std::remove(path.c_str());
}

TEST(Checkpoint, ChecksumIsCrc32c) {
  // The standard check value of CRC-32C, and a split computation.
  EXPECT_EQ(0xE3069283u, loomrt::crc32c(0, "123456789", 9));
  EXPECT_EQ(0xE3069283u, loomrt::crc32c(loomrt::crc32c(0, "1234", 4), "56789", 5));
  std::string big(1000, 'x');
  uint32_t whole = loomrt::crc32c(0, big.data(), big.size());
  EXPECT_EQ(whole, loomrt::crc32c(loomrt::crc32c(0, big.data(), 333), big.data() + 333, 667));
}

TEST(Checkpoint, PlantedLinkAtTheTemporaryNameIsNotFollowed) {
  // Another user of a shared folder plants `<name>.tmp.<our pid>` as a link
  // to a file of ours: the save must neither write through it nor succeed
  // by following it.
  std::string path = tempPath("planted.safetensors"), victim = tempPath("victim.txt");
  std::ofstream(victim) << "precious";
  std::string tmp = path + ".tmp." + std::to_string(getpid());
  std::remove(tmp.c_str());
  ASSERT_EQ(0, symlink(victim.c_str(), tmp.c_str()));
  Sample a;
  // Our own pid's leftover is removed as stale (a link, unlinked: the
  // victim is untouched) and the save writes a fresh file.
  ASSERT_EQ(LOOMRT_OK, save(path, a)) << loomrt_last_error();
  std::ifstream in(victim);
  std::string content((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ("precious", content);
  // A link of a live process's name (the same pid, planted again after the
  // cleanup, simulated by creating it under a live pid: our parent's) is
  // refused, not followed.
  std::string live = path + ".tmp." + std::to_string(getppid());
  std::remove(live.c_str());
  ASSERT_EQ(0, symlink(victim.c_str(), live.c_str()));
  struct stat st;
  ASSERT_EQ(0, lstat(live.c_str(), &st));
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "a live process's temporary must be left alone";
  std::remove(live.c_str());
  std::remove(path.c_str());
  std::remove(victim.c_str());
}

} // namespace
