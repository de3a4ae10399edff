// auth.cpp: the job key and the join handshake (see auth.h).
#include "comm/auth.h"

#include "common/backend.h"
#include "common/file_util.h"

#include <poll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace loomrt::auth {
namespace {

// FIPS 180-4, section 4.2.2: the first 32 bits of the fractional parts of
// the cube roots of the first 64 primes.
constexpr uint32_t kK[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

struct Sha256 {
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  uint8_t block[64];
  size_t used = 0;
  uint64_t bits = 0;

  void compress(const uint8_t *p) {
    uint32_t w[64];
    for (int i = 0; i < 16; ++i)
      w[i] = uint32_t(p[4 * i]) << 24 | uint32_t(p[4 * i + 1]) << 16 |
             uint32_t(p[4 * i + 2]) << 8 | uint32_t(p[4 * i + 3]);
    for (int i = 16; i < 64; ++i) {
      uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int i = 0; i < 64; ++i) {
      uint32_t t1 = k + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + kK[i] +
                    w[i];
      uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      k = g, g = f, f = e, e = d + t1, d = c, c = b, b = a, a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
  }
  void update(const void *data, size_t n) {
    auto *p = static_cast<const uint8_t *>(data);
    bits += uint64_t(n) * 8;
    while (n) {
      size_t take = std::min(n, 64 - used);
      std::memcpy(block + used, p, take);
      used += take, p += take, n -= take;
      if (used == 64)
        compress(block), used = 0;
    }
  }
  Digest finish() {
    uint64_t total = bits;
    uint8_t pad = 0x80;
    update(&pad, 1);
    uint8_t zero = 0;
    while (used != 56)
      update(&zero, 1);
    uint8_t len[8];
    for (int i = 0; i < 8; ++i)
      len[i] = uint8_t(total >> (56 - 8 * i));
    update(len, 8);
    Digest out;
    for (int i = 0; i < 8; ++i)
      for (int j = 0; j < 4; ++j)
        out[size_t(4 * i + j)] = uint8_t(h[i] >> (24 - 8 * j));
    return out;
  }
};

constexpr char kHelloMagic[8] = {'L', 'O', 'O', 'M', 'J', 'O', 'I', 'N'};
constexpr uint32_t kVersion = 1;
struct Hello {
  char magic[8];
  uint32_t version;
  uint8_t nonce[32];
};
static_assert(sizeof(Hello) == 44, "the hello is 44 bytes on the wire");

/// Sends or receives exactly `n` bytes before the deadline (poll, so a
/// silent peer cannot hold this rank past it).
bool ioBefore(int fd, void *p, size_t n, bool sending, std::chrono::steady_clock::time_point d,
              std::string &why) {
  auto *c = static_cast<char *>(p);
  for (size_t k = 0; k < n;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    d - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0) {
      why = sending ? "it did not take the handshake before the deadline"
                    : "it sent " + std::to_string(k) + " of " + std::to_string(n) +
                          " handshake bytes before the deadline";
      return false;
    }
    pollfd pf{fd, short(sending ? POLLOUT : POLLIN), 0};
    int r = poll(&pf, 1, int(std::min<long long>(left, 1000)));
    if (r < 0 && errno != EINTR) {
      why = std::string("poll: ") + std::strerror(errno);
      return false;
    }
    if (r <= 0)
      continue;
    ssize_t m = sending ? ::send(fd, c + k, n - k, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : ::recv(fd, c + k, n - k, MSG_DONTWAIT);
    if (m < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
      continue;
    if (m <= 0) {
      why = m == 0 ? "it closed the connection during the handshake"
                   : std::string("the connection failed: ") + std::strerror(errno);
      return false;
    }
    k += size_t(m);
  }
  return true;
}

bool equalInConstantTime(const Digest &a, const Digest &b) {
  uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= uint8_t(a[i] ^ b[i]);
  return diff == 0;
}

} // namespace

Digest sha256(const void *data, size_t n) {
  Sha256 s;
  s.update(data, n);
  return s.finish();
}

Digest hmac(const std::vector<uint8_t> &key,
            std::initializer_list<std::pair<const void *, size_t>> parts) {
  uint8_t k[64] = {};
  if (key.size() > 64) {
    Digest kd = sha256(key.data(), key.size());
    std::memcpy(k, kd.data(), kd.size());
  } else if (!key.empty()) {
    std::memcpy(k, key.data(), key.size());
  }
  uint8_t ipad[64], opad[64];
  for (int i = 0; i < 64; ++i)
    ipad[i] = uint8_t(k[i] ^ 0x36), opad[i] = uint8_t(k[i] ^ 0x5c);
  Sha256 inner;
  inner.update(ipad, 64);
  for (auto [p, n] : parts)
    inner.update(p, n);
  Digest ih = inner.finish();
  Sha256 outer;
  outer.update(opad, 64);
  outer.update(ih.data(), ih.size());
  return outer.finish();
}

loomrt_status loadJobKey(bool required, const char *who, std::vector<uint8_t> &key) {
  key.clear();
  const std::string how =
      "make one and give every rank the same: export LOOMRT_JOB_KEY=$(head -c 32 /dev/urandom | "
      "od -An -tx1 | tr -d ' \\n'), or write it to a file only you can read (chmod 600) and set "
      "LOOMRT_JOB_KEY_FILE to its path (docs/data-parallel.md, 'Launching')";
  if (const char *v = std::getenv("LOOMRT_JOB_KEY")) {
    size_t n = std::strlen(v);
    if (n < 16 || n > 4096)
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  std::string(who) + ": LOOMRT_JOB_KEY has " + std::to_string(n) +
                      " bytes; a job key has 16 to 4096 (" + how + ")");
    key.assign(v, v + n);
    return LOOMRT_OK;
  }
  if (const char *path = std::getenv("LOOMRT_JOB_KEY_FILE")) {
    std::string text, error;
    struct stat st {};
    if (!readRegularFile(path, 4097, "LOOMRT_JOB_KEY_FILE", text, error, &st))
      return fail(LOOMRT_ERR_INVALID_ARGUMENT, std::string(who) + ": " + error);
    if (st.st_uid != geteuid() || (st.st_mode & 077))
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  std::string(who) + ": LOOMRT_JOB_KEY_FILE '" + path +
                      "' must belong to this user and be unreadable by others (chmod 600): "
                      "anyone who reads it can join the job");
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r'))
      text.pop_back();
    if (text.size() < 16 || text.size() > 4096)
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  std::string(who) + ": LOOMRT_JOB_KEY_FILE '" + path + "' holds " +
                      std::to_string(text.size()) + " bytes; a job key has 16 to 4096 (" + how +
                      ")");
    key.assign(text.begin(), text.end());
    return LOOMRT_OK;
  }
  if (required)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                std::string(who) +
                    ": the TCP rendezvous admits only ranks that hold the job's key, and none "
                    "is set: " +
                    how);
  return LOOMRT_OK;
}

bool handshake(int fd, const std::vector<uint8_t> &key, bool initiator, const void *mine,
               size_t mineLen, void *theirs, size_t theirsLen,
               std::chrono::steady_clock::time_point deadline, std::string &why) {
  Hello me{}, peer{};
  std::memcpy(me.magic, kHelloMagic, sizeof kHelloMagic);
  me.version = kVersion;
  if (getrandom(me.nonce, sizeof me.nonce, 0) != ssize_t(sizeof me.nonce)) {
    why = std::string("getrandom: ") + std::strerror(errno);
    return false;
  }
  if (!ioBefore(fd, &me, sizeof me, true, deadline, why) ||
      !ioBefore(fd, &peer, sizeof peer, false, deadline, why))
    return false;
  if (std::memcmp(peer.magic, kHelloMagic, sizeof kHelloMagic) != 0 || peer.version != kVersion) {
    why = "it is not a Loom rank (its first bytes are not a join of protocol version " +
          std::to_string(kVersion) + ")";
    return false;
  }
  // Each end signs its role, the peer's nonce (freshness for the peer),
  // its own nonce and what it tells the peer.
  const char myRole = initiator ? 'I' : 'R', peerRole = initiator ? 'R' : 'I';
  Digest proof = hmac(key, {{&myRole, 1},
                            {peer.nonce, sizeof peer.nonce},
                            {me.nonce, sizeof me.nonce},
                            {mine, mineLen}});
  std::vector<uint8_t> out(mineLen + proof.size()), in(theirsLen + proof.size());
  if (mineLen)
    std::memcpy(out.data(), mine, mineLen);
  std::memcpy(out.data() + mineLen, proof.data(), proof.size());
  if (!ioBefore(fd, out.data(), out.size(), true, deadline, why) ||
      !ioBefore(fd, in.data(), in.size(), false, deadline, why))
    return false;
  Digest expect = hmac(key, {{&peerRole, 1},
                             {me.nonce, sizeof me.nonce},
                             {peer.nonce, sizeof peer.nonce},
                             {in.data(), theirsLen}});
  Digest got;
  std::memcpy(got.data(), in.data() + theirsLen, got.size());
  if (!equalInConstantTime(expect, got)) {
    why = "it does not hold the job's key (its proof is wrong)";
    return false;
  }
  if (theirsLen)
    std::memcpy(theirs, in.data(), theirsLen);
  return true;
}

} // namespace loomrt::auth
