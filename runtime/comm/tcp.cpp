// tcp.cpp: the elastic TCP transport (see tcp.h).
//
// Protocol. Every message is a 24-byte header (magic, type, sequence
// number, payload length) and its payload. A collective is one exchange of
// DATA messages with every peer still in the group, all at once (poll), then
// a decision: each rank sends rank 0 an ACK naming the peers whose data it
// received whole; rank 0 keeps the ranks that answered and that every
// member received (repeated until it holds), and sends that set back
// (DECISION). Every survivor computes the collective's result from the same
// members' data, so replicas stay identical through a loss wherever it
// happens. A peer is lost when its connection closes or fails (a killed
// process's sockets close); one that hangs is the watchdog's (comm.cpp).
// Rank 0 is the single point that must survive, as torchft's lighthouse;
// its loss ends the job with a message that says so. Whether the others go
// on after losing a rank is the program's to say (setShrinkable): by
// default a loss fails every collective from then on.
//
// Joining. Every connection of the mesh starts with the job key's
// challenge-response (auth.h); a connection that fails it is closed and
// the listener waits on, so a stranger, a silent client or garbage costs
// at most kHandshakeS of the join and never ends the job. Listeners bind
// the interface MASTER_ADDR names (rank 0) or the one that reaches rank 0
// (the others), or LOOMRT_BIND's. The handshakes are taken one at a time:
// a local process that keeps opening silent connections can delay the
// join by kHandshakeS each until the timeout (a denial of service, never
// an admission).
#include "comm/tcp.h"

#include "comm/auth.h"

#include "common/adam_math.h"
#include "common/backend.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using loomrt::fail;
using Clock = std::chrono::steady_clock;

namespace loomrt::tcp {

namespace {

constexpr uint32_t kMagic = 0x4d4f4f4c; // "LOOM"
enum MsgType : uint32_t { kData = 1, kAck = 2, kDecision = 3, kPoint = 4 };
struct Header {
  uint32_t magic, type;
  uint64_t seq, len;
};
static_assert(sizeof(Header) == 24, "the wire header is 24 bytes");

void noDelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/// What each rank tells rank 0 when it joins, and rank 0 tells everyone.
struct Card {
  int32_t rank;
  uint32_t ip;   // network order
  uint16_t port; // network order
  uint16_t pad;
};

} // namespace

struct Group {
  int rank = 0, size = 1;
  std::vector<int> fd;    // per peer; -1 for this rank and lost peers
  std::vector<char> live; // members
  uint64_t seq = 0;
  // Point-to-point messages sent to and received from each peer so far
  // (sendRecv): their own sequence, apart from the collectives'.
  std::vector<uint64_t> pointSent, pointGot;
  double bytesPerS = 0; // 0: no cap
  /// The program survives losing ranks (tcp.h, setShrinkable); otherwise a
  /// loss fails every collective from then on.
  bool shrinkable = false;
  std::string lost; // the first loss, for the message
  Clock::time_point nextSend = Clock::now();

  ~Group() {
    for (int f : fd)
      if (f >= 0)
        close(f);
  }
  int members() const { return int(std::count(live.begin(), live.end(), 1)); }
  void drop(int p, const char *why) {
    if (fd[size_t(p)] >= 0)
      close(fd[size_t(p)]);
    fd[size_t(p)] = -1;
    if (live[size_t(p)]) {
      live[size_t(p)] = 0;
      if (lost.empty())
        lost = "lost rank " + std::to_string(p) + " (" + why + ")";
      if (shrinkable)
        std::fprintf(stderr,
                     "loomrt: rank %d of %d: lost rank %d (%s); the group continues with %d "
                     "ranks\n",
                     rank, size, p, why, members());
      else
        std::fprintf(stderr, "loomrt: rank %d of %d: lost rank %d (%s)\n", rank, size, p, why);
      std::fflush(stderr);
    }
  }
};

namespace {

/// One direction pair with one peer during an exchange. A collective sends
/// and receives a message (header and payload) in both directions with
/// every peer; a point-to-point exchange only the directions it names.
struct Io {
  const char *send = nullptr;
  size_t sendLen = 0;
  char *recv = nullptr;
  size_t recvLen = 0;
  bool hasOut = true, hasIn = true;
  // The message expected from the peer: its type and sequence number.
  uint32_t inType = kData;
  uint64_t inSeq = 0;
  // progress
  Header out{}, in{};
  size_t sent = 0, got = 0; // header + payload bytes
  bool broken = false;
  size_t outTotal() const { return hasOut ? sizeof(Header) + sendLen : 0; }
  size_t inTotal() const { return hasIn ? sizeof(Header) + recvLen : 0; }
  bool done() const { return broken || (sent == outTotal() && got == inTotal()); }
};

/// The messages of `io` with every live peer at once (a collective: DATA
/// of sequence g.seq both ways with each; see collective()). ok[p]: p's
/// message arrived whole. A malformed message (not a lost peer: a bug or a
/// stranger) fails.
loomrt_status exchange(Group &g, std::vector<Io> &io, std::vector<char> &ok,
                       bool collective = true) {
  const size_t kChunk = 1 << 16;
  if (collective)
    for (int p = 0; p < g.size; ++p)
      if (p != g.rank && g.live[size_t(p)]) {
        io[size_t(p)].out = Header{kMagic, kData, g.seq, io[size_t(p)].sendLen};
        io[size_t(p)].inSeq = g.seq;
      }
  std::vector<pollfd> fds;
  std::vector<int> who;
  for (;;) {
    fds.clear(), who.clear();
    auto now = Clock::now();
    bool mayWrite = g.bytesPerS <= 0 || now >= g.nextSend;
    // The rate cap's wait, to the nanosecond (poll's milliseconds would
    // round a 64 KiB chunk's half millisecond at 1 Gbit/s up to one).
    bool wait = false;
    timespec until{};
    for (int p = 0; p < g.size; ++p) {
      Io &x = io[size_t(p)];
      if (p == g.rank || !g.live[size_t(p)] || g.fd[size_t(p)] < 0 || x.done())
        continue;
      short ev = 0;
      if (x.got < x.inTotal())
        ev |= POLLIN;
      if (x.sent < x.outTotal()) {
        if (mayWrite) {
          ev |= POLLOUT;
        } else {
          auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(g.nextSend - now).count();
          wait = true;
          until.tv_sec = time_t(ns / 1000000000);
          until.tv_nsec = long(ns % 1000000000);
        }
      }
      fds.push_back({g.fd[size_t(p)], ev, 0});
      who.push_back(p);
    }
    if (fds.empty())
      break;
    int n = ppoll(fds.data(), fds.size(), wait ? &until : nullptr, nullptr);
    if (n < 0 && errno != EINTR)
      return fail(LOOMRT_ERR_BACKEND, std::string("tcp: poll failed: ") + std::strerror(errno));
    for (size_t k = 0; n > 0 && k < fds.size(); ++k) {
      int p = who[k];
      Io &x = io[size_t(p)];
      short re = fds[k].revents;
      if (re & (POLLIN | POLLHUP | POLLERR)) {
        if (x.got < x.inTotal()) {
          char *dst = x.got < sizeof(Header) ? reinterpret_cast<char *>(&x.in) + x.got
                                              : x.recv + (x.got - sizeof(Header));
          size_t want = x.got < sizeof(Header) ? sizeof(Header) - x.got
                                               : sizeof(Header) + x.recvLen - x.got;
          ssize_t r = ::recv(fds[k].fd, dst, want, MSG_DONTWAIT);
          if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            x.broken = true;
            g.drop(p, r == 0 ? "its connection closed" : std::strerror(errno));
            continue;
          }
          if (r > 0) {
            bool hadHeader = x.got >= sizeof(Header);
            x.got += size_t(r);
            if (!hadHeader && x.got >= sizeof(Header) &&
                (x.in.magic != kMagic || x.in.type != x.inType || x.in.seq != x.inSeq ||
                 x.in.len != x.recvLen)) {
              auto name = [](uint32_t type) {
                return std::string(type == kPoint ? "point-to-point message " : "collective ");
              };
              return fail(LOOMRT_ERR_BACKEND,
                          "tcp: rank " + std::to_string(p) + " sent an unexpected message " +
                              "(type " + std::to_string(x.in.type) + ", number " +
                              std::to_string(x.in.seq) + " of " + std::to_string(x.in.len) +
                              " bytes) where " + name(x.inType) + std::to_string(x.inSeq) +
                              " of " + std::to_string(x.recvLen) +
                              " bytes was expected: the ranks run different programs");
            }
          }
        } else if (re & (POLLHUP | POLLERR)) {
          // Everything from it arrived; what we still send may not.
          if (x.sent < x.outTotal()) {
            x.broken = true;
            g.drop(p, "its connection closed");
            continue;
          }
        }
      }
      if ((re & POLLOUT) && x.sent < x.outTotal()) {
        const char *src = x.sent < sizeof(Header) ? reinterpret_cast<const char *>(&x.out) + x.sent
                                                  : x.send + (x.sent - sizeof(Header));
        size_t want = x.sent < sizeof(Header) ? sizeof(Header) - x.sent : x.outTotal() - x.sent;
        if (g.bytesPerS > 0)
          want = std::min(want, kChunk);
        ssize_t w = ::send(fds[k].fd, src, want, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          x.broken = true;
          g.drop(p, std::strerror(errno));
          continue;
        }
        if (w > 0) {
          x.sent += size_t(w);
          if (g.bytesPerS > 0) {
            // A token bucket of 2 ms: a late wake-up is caught up on, so
            // the long-run rate is the cap's.
            auto base = std::max(g.nextSend, Clock::now() - std::chrono::milliseconds(2));
            g.nextSend = base + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(double(w) / g.bytesPerS));
            break; // re-plan the poll: the cap holds writes back
          }
        }
      }
    }
  }
  for (int p = 0; p < g.size; ++p)
    ok[size_t(p)] = p == g.rank || (g.live[size_t(p)] && !io[size_t(p)].broken &&
                                    io[size_t(p)].got == io[size_t(p)].inTotal());
  return LOOMRT_OK;
}

/// The members whose data every member received, as rank 0 decides them;
/// the group keeps only those.
loomrt_status decide(Group &g, const std::vector<char> &ok) {
  size_t n = size_t(g.size);
  std::vector<char> members(n, 0);
  if (g.rank == 0) {
    std::vector<std::vector<char>> masks(n);
    masks[0] = ok;
    members[0] = 1;
    for (int p = 1; p < g.size; ++p) {
      if (!g.live[size_t(p)] || g.fd[size_t(p)] < 0)
        continue;
      Header h{};
      masks[size_t(p)].assign(n, 0);
      if (!recvAll(g.fd[size_t(p)], &h, sizeof h) ||
          !(h.magic == kMagic && h.type == kAck && h.seq == g.seq && h.len == n) ||
          !recvAll(g.fd[size_t(p)], masks[size_t(p)].data(), n)) {
        g.drop(p, "its connection closed");
        continue;
      }
      members[size_t(p)] = 1;
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t q = 0; q < n; ++q)
        for (size_t r = 0; r < n && members[q]; ++r)
          if (members[r] && !masks[r][q])
            members[q] = 0, changed = true;
    }
    for (int p = 1; p < g.size; ++p) {
      if (!g.live[size_t(p)] || g.fd[size_t(p)] < 0)
        continue;
      Header h{kMagic, kDecision, g.seq, n};
      // A rank left out is told so (it exits); one that cannot be told is
      // found lost by the next collective.
      if (!sendAll(g.fd[size_t(p)], &h, sizeof h) ||
          !sendAll(g.fd[size_t(p)], members.data(), n))
        g.drop(p, "its connection closed");
    }
  } else {
    Header h{kMagic, kAck, g.seq, n};
    int f = g.fd[0];
    if (f < 0 || !sendAll(f, &h, sizeof h) || !sendAll(f, ok.data(), n) ||
        !recvAll(f, &h, sizeof h) ||
        !(h.magic == kMagic && h.type == kDecision && h.seq == g.seq && h.len == n) ||
        !recvAll(f, members.data(), n))
      return fail(LOOMRT_ERR_BACKEND,
                  "tcp: rank " + std::to_string(g.rank) + " of " + std::to_string(g.size) +
                      " lost rank 0, the group's coordinator: the elastic transport survives "
                      "the loss of any rank but the first");
    if (!members[size_t(g.rank)])
      return fail(LOOMRT_ERR_BACKEND,
                  "tcp: rank " + std::to_string(g.rank) + " was dropped from the group: a rank "
                      "that remains could not exchange data with it");
  }
  for (int p = 0; p < g.size; ++p)
    if (g.live[size_t(p)] && !members[size_t(p)])
      g.drop(p, "another rank lost it");
  ++g.seq;
  return LOOMRT_OK;
}

/// Runs one collective's exchange and decision; a send block that overlaps
/// the receive buffer was copied by the caller.
loomrt_status collective(Group &g, std::vector<Io> &io) {
  std::vector<char> ok(size_t(g.size), 0);
  loomrt_status st = exchange(g, io, ok);
  if (!st)
    st = decide(g, ok);
  // A program that keeps part of its state on every rank cannot go on
  // without one: its result would be computed from zeros where the lost
  // rank's shard was (ZeRO-1 and 3 went on to train a model that had lost
  // half its parameters). It stops here, before another step or checkpoint.
  if (!st && !g.shrinkable && g.members() < g.size)
    return fail(LOOMRT_ERR_BACKEND,
                "tcp: rank " + std::to_string(g.rank) + " of " + std::to_string(g.size) + ": " +
                    g.lost +
                    ": this program keeps part of its model or optimizer state on every rank "
                    "(ZeRO stage 1 to 3, 1-bit Adam, or DiLoCo without elastic=true), so it "
                    "cannot go on without it; restart all ranks (--resume continues from the "
                    "last committed checkpoint)");
  return st;
}

bool overlaps(const void *a, size_t na, const void *b, size_t nb) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + nb && y < x + na;
}

size_t esize(loomrt_dtype dt) { return dt == LOOMRT_BF16 ? 2 : dt == LOOMRT_I64 ? 8 : 4; }

/// out = op over the members' blocks (rank order; MEAN divides by their
/// number). fp32 and bf16 accumulate in fp32 (bf16 rounds once).
void reduceBlocks(const Group &g, loomrt_dtype dt, const char *blocks, size_t count,
                  loomrt_reduce_op op, void *out) {
  size_t stride = count * esize(dt);
  std::vector<int> m;
  for (int p = 0; p < g.size; ++p)
    if (g.live[size_t(p)])
      m.push_back(p);
  // acc[i] = op(acc[i], x[i]) over the members after the first, a loop the
  // compiler vectorises.
  auto fold = [&](auto *acc, auto load) {
    for (size_t k = 1; k < m.size(); ++k) {
      const char *blk = blocks + size_t(m[k]) * stride;
      if (op == LOOMRT_REDUCE_MAX)
        for (size_t i = 0; i < count; ++i)
          acc[i] = std::max(acc[i], load(blk, i));
      else if (op == LOOMRT_REDUCE_MIN)
        for (size_t i = 0; i < count; ++i)
          acc[i] = std::min(acc[i], load(blk, i));
      else
        for (size_t i = 0; i < count; ++i)
          acc[i] += load(blk, i);
    }
  };
  const char *first = blocks + size_t(m[0]) * stride;
  if (dt == LOOMRT_I64) {
    std::vector<int64_t> acc(count);
    std::memcpy(acc.data(), first, stride);
    fold(acc.data(), [](const char *b, size_t i) {
      int64_t v;
      std::memcpy(&v, b + i * 8, 8);
      return v;
    });
    if (op == LOOMRT_REDUCE_MEAN)
      for (int64_t &v : acc)
        v /= int64_t(m.size());
    std::memcpy(out, acc.data(), stride);
    return;
  }
  std::vector<float> acc(count);
  auto loadF = [dt](const char *b, size_t i) {
    if (dt == LOOMRT_BF16) {
      uint16_t h;
      std::memcpy(&h, b + i * 2, 2);
      return bf16ToFloat(h);
    }
    float v;
    std::memcpy(&v, b + i * 4, 4);
    return v;
  };
  for (size_t i = 0; i < count; ++i)
    acc[i] = loadF(first, i);
  fold(acc.data(), loadF);
  if (op == LOOMRT_REDUCE_MEAN)
    for (float &v : acc)
      v /= float(m.size());
  if (dt == LOOMRT_BF16)
    for (size_t i = 0; i < count; ++i) {
      uint16_t h = floatToBf16(acc[i]);
      std::memcpy(static_cast<char *>(out) + i * 2, &h, 2);
    }
  else
    std::memcpy(out, acc.data(), stride);
}

/// Blocks of ranks that are not members become zeros.
void zeroLost(const Group &g, char *recv, size_t bytes) {
  for (int p = 0; p < g.size; ++p)
    if (!g.live[size_t(p)])
      std::memset(recv + size_t(p) * bytes, 0, bytes);
}

} // namespace

Deadline deadlineIn(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(seconds));
}

loomrt_status resolveMaster(const char *who, sockaddr_in *out) {
  const char *addr = std::getenv("MASTER_ADDR"), *port = std::getenv("MASTER_PORT");
  const char *own = std::getenv("LOOMRT_RENDEZVOUS_PORT");
  if (!addr || (!port && !own))
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, std::string("comm_init: ") + who +
                                                 " need MASTER_ADDR and MASTER_PORT (as "
                                                 "torchrun sets them; under srun or mpiexec, "
                                                 "export them: docs/data-parallel.md)");
  // getaddrinfo takes 99999 as port 34463 (it wraps to 16 bits).
  const char *var = own ? "LOOMRT_RENDEZVOUS_PORT" : "MASTER_PORT";
  const char *text = own ? own : port;
  char *end = nullptr;
  long p = std::strtol(text, &end, 10);
  if (!*text || !end || *end || p < 1 || p > 65535)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, std::string("comm_init: ") + var + "='" + text +
                                                 "' is not a port number in [1, 65535]");
  // Under torchrun's static rendezvous (its default) the agent's own store
  // listens at MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True): rank 0 takes
  // the port after it. LOOMRT_RENDEZVOUS_PORT names another.
  const char *agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  if (!own && agent && std::strcmp(agent, "True") == 0)
    p = p == 65535 ? 65534 : p + 1;
  std::string portText = std::to_string(p);
  port = portText.c_str();
  addrinfo hints{}, *res = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(addr, port, &hints, &res) != 0 || !res)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                std::string("comm_init: cannot resolve MASTER_ADDR=") + addr + ":" + port);
  *out = *reinterpret_cast<sockaddr_in *>(res->ai_addr);
  freeaddrinfo(res);
  return LOOMRT_OK;
}

loomrt_status bindAddress(const char *who, uint32_t fallback, uint32_t *out) {
  const char *v = std::getenv("LOOMRT_BIND");
  if (!v) {
    *out = fallback;
    return LOOMRT_OK;
  }
  in_addr a{};
  if (inet_pton(AF_INET, v, &a) != 1)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                std::string(who) + ": LOOMRT_BIND='" + v +
                    "' is not an IPv4 address (the interface the rendezvous listens on; "
                    "0.0.0.0 for every interface)");
  *out = a.s_addr;
  return LOOMRT_OK;
}

std::string peerName(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  char ip[INET_ADDRSTRLEN] = "?";
  if (getpeername(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0)
    inet_ntop(AF_INET, &a.sin_addr, ip, sizeof ip);
  return std::string(ip) + ":" + std::to_string(ntohs(a.sin_port));
}

int listenOn(uint32_t ip, uint16_t port, int backlog, uint16_t *bound) {
  int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
  if (ls < 0)
    return -1;
  setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  any.sin_port = port;
  any.sin_addr.s_addr = ip;
  socklen_t len = sizeof any;
  if (bind(ls, reinterpret_cast<sockaddr *>(&any), sizeof any) != 0 || listen(ls, backlog) != 0 ||
      getsockname(ls, reinterpret_cast<sockaddr *>(&any), &len) != 0) {
    close(ls);
    return -1;
  }
  *bound = any.sin_port;
  return ls;
}

int acceptBefore(int ls, Deadline d) {
  for (;;) {
    int left = int(std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now()).count());
    if (left <= 0)
      return -1;
    pollfd p{ls, POLLIN, 0};
    if (poll(&p, 1, left) > 0)
      return accept4(ls, nullptr, nullptr, SOCK_CLOEXEC);
  }
}

int connectBefore(const sockaddr_in &to, Deadline d) {
  for (;;) {
    int f = socket(AF_INET, SOCK_STREAM, 0);
    if (f >= 0 && connect(f, reinterpret_cast<const sockaddr *>(&to), sizeof to) == 0)
      return f;
    if (f >= 0)
      close(f);
    if (Clock::now() > d)
      return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

bool sendAll(int fd, const void *p, size_t n) {
  for (size_t k = 0; k < n;) {
    ssize_t w = ::send(fd, static_cast<const char *>(p) + k, n - k, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    k += size_t(w);
  }
  return true;
}
bool recvAll(int fd, void *p, size_t n) {
  for (size_t k = 0; k < n;) {
    ssize_t r = ::recv(fd, static_cast<char *>(p) + k, n - k, 0);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    k += size_t(r);
  }
  return true;
}
namespace {

/// How long a connection may take to prove it holds the job's key before it
/// is dropped (a silent or half-sent join must not hold the rendezvous
/// until the whole timeout passes).
constexpr double kHandshakeS = 10;

/// Accepts on `ls` until one connection proves it holds `key` and passes
/// `accept` (its card in `card`), or the deadline passes (-1). A connection
/// that fails the handshake is a stranger: it is closed with a line on
/// stderr and the wait goes on, so neither a stranger nor garbage ends the
/// job. `accept` returning a message fails the join (a rank that holds the
/// key but a wrong rank number is the job's own mistake).
template <typename CardT>
int acceptRank(int ls, const std::vector<uint8_t> &key, int rank, const void *mine,
               size_t mineLen, CardT &card, Deadline deadline,
               const std::function<std::string(const CardT &)> &accept, std::string &error) {
  for (;;) {
    int f = acceptBefore(ls, deadline);
    if (f < 0)
      return -1;
    std::string why;
    Deadline d = std::min(deadline, deadlineIn(kHandshakeS));
    if (!auth::handshake(f, key, /*initiator=*/false, mine, mineLen, &card, sizeof card, d, why)) {
      std::fprintf(stderr, "loomrt: rank %d: refused a connection from %s: %s\n", rank,
                   peerName(f).c_str(), why.c_str());
      std::fflush(stderr);
      close(f);
      continue;
    }
    error = accept(card);
    if (!error.empty()) {
      close(f);
      return -2;
    }
    return f;
  }
}

/// The full mesh: rank 0 takes every other rank's card on `ls` (its
/// listener at `master`) and hands out the table; every other rank connects
/// to the lower ranks and takes the higher ones' calls. Every connection
/// starts with the key's handshake (auth.h).
loomrt_status mesh(int rank, int size, double bytesPerS, sockaddr_in master, int ls,
                   const std::vector<uint8_t> &key, Deadline deadline, Group **out) {
  auto g = std::make_unique<Group>();
  g->rank = rank, g->size = size;
  g->fd.assign(size_t(size), -1);
  g->live.assign(size_t(size), 1);
  g->bytesPerS = bytesPerS;
  std::vector<Card> cards(static_cast<size_t>(size));
  const int32_t world = size;
  if (rank == 0) {
    for (int k = 1; k < size; ++k) {
      Card c{};
      std::string error;
      int f = acceptRank<Card>(
          ls, key, 0, &world, sizeof world, c, deadline,
          [&](const Card &c) -> std::string {
            if (c.rank < 1 || c.rank >= size)
              return "comm_init: a rank holding the job's key joined as rank " +
                     std::to_string(c.rank) + ", not in 1.." + std::to_string(size - 1) +
                     " (is WORLD_SIZE the same for every rank?)";
            if (g->fd[size_t(c.rank)] >= 0)
              return "comm_init: two ranks joined as rank " + std::to_string(c.rank) +
                     " (RANK must differ between the ranks)";
            return "";
          },
          error);
      if (f < 0) {
        close(ls);
        return fail(LOOMRT_ERR_BACKEND,
                    f == -2 ? error
                            : "comm_init: only " + std::to_string(k) + " of " +
                                  std::to_string(size) + " ranks joined at port " +
                                  std::to_string(ntohs(master.sin_port)) +
                                  " before the timeout");
      }
      noDelay(f);
      g->fd[size_t(c.rank)] = f;
      cards[size_t(c.rank)] = c;
    }
    close(ls);
    for (int p = 1; p < size; ++p)
      if (!sendAll(g->fd[size_t(p)], cards.data(), cards.size() * sizeof(Card)))
        return fail(LOOMRT_ERR_BACKEND, "comm_init: rank " + std::to_string(p) +
                                            " left while the ranks were joining");
  } else {
    int f = connectBefore(master, deadline);
    if (f < 0)
      return fail(LOOMRT_ERR_BACKEND, "comm_init: rank 0 never listened at port " +
                                          std::to_string(ntohs(master.sin_port)));
    noDelay(f);
    g->fd[0] = f;
    // This rank's listener for the higher ranks, on the interface that
    // reaches rank 0 (or LOOMRT_BIND's), never on every interface.
    sockaddr_in self{};
    socklen_t len = sizeof self;
    getsockname(f, reinterpret_cast<sockaddr *>(&self), &len);
    uint32_t ip = 0;
    if (loomrt_status st = bindAddress("comm_init", self.sin_addr.s_addr, &ip))
      return st;
    uint16_t minePort = 0;
    int mine = listenOn(ip, 0, size, &minePort);
    if (mine < 0)
      return fail(LOOMRT_ERR_BACKEND, std::string("comm_init: cannot listen: ") +
                                          std::strerror(errno));
    Card c{rank, ip == htonl(INADDR_ANY) ? self.sin_addr.s_addr : ip, minePort, 0};
    int32_t theirWorld = 0;
    std::string why;
    if (!auth::handshake(f, key, /*initiator=*/true, &c, sizeof c, &theirWorld,
                         sizeof theirWorld, deadline, why)) {
      close(mine);
      return fail(LOOMRT_ERR_BACKEND, "comm_init: rank " + std::to_string(rank) +
                                          " could not join rank 0 at port " +
                                          std::to_string(ntohs(master.sin_port)) + ": " + why +
                                          " (is LOOMRT_JOB_KEY the same for every rank?)");
    }
    if (theirWorld != world) {
      close(mine);
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  "comm_init: rank 0 runs a world of " + std::to_string(theirWorld) +
                      " ranks, this rank one of " + std::to_string(world) + " (WORLD_SIZE)");
    }
    if (!recvAll(f, cards.data(), cards.size() * sizeof(Card))) {
      close(mine);
      return fail(LOOMRT_ERR_BACKEND, "comm_init: rank 0 closed the rendezvous early");
    }
    // Connect to every lower rank but 0, then take the higher ranks' calls
    // (the listener's backlog holds them meanwhile).
    for (int p = 1; p < rank; ++p) {
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_addr.s_addr = cards[size_t(p)].ip;
      to.sin_port = cards[size_t(p)].port;
      int q = connectBefore(to, deadline);
      int32_t me = rank, them = -1;
      if (q < 0 || !auth::handshake(q, key, /*initiator=*/true, &me, sizeof me, &them,
                                    sizeof them, deadline, why) ||
          them != p) {
        if (q >= 0)
          close(q);
        close(mine);
        return fail(LOOMRT_ERR_BACKEND, "comm_init: cannot reach rank " + std::to_string(p) +
                                            (why.empty() ? "" : ": " + why));
      }
      noDelay(q);
      g->fd[size_t(p)] = q;
    }
    for (int k = rank + 1; k < size; ++k) {
      int32_t who = -1, me = rank;
      std::string error;
      int q = acceptRank<int32_t>(
          mine, key, rank, &me, sizeof me, who, deadline,
          [&](const int32_t &w) -> std::string {
            if (w <= rank || w >= size || g->fd[size_t(w)] >= 0)
              return "comm_init: a rank holding the job's key connected to rank " +
                     std::to_string(rank) + " as rank " + std::to_string(w) +
                     ", which is not a higher rank still expected";
            return "";
          },
          error);
      if (q < 0) {
        close(mine);
        return fail(LOOMRT_ERR_BACKEND,
                    q == -2 ? error
                            : "comm_init: a higher rank did not connect to rank " +
                                  std::to_string(rank) + " before the timeout");
      }
      noDelay(q);
      g->fd[size_t(who)] = q;
    }
    close(mine);
  }
  *out = g.release();
  return LOOMRT_OK;
}

} // namespace

loomrt_status join(int rank, int size, double timeoutS, Group **out) {
  double mbits = 0;
  if (const char *v = std::getenv("LOOMRT_TCP_MBITS")) {
    char *end = nullptr;
    mbits = std::strtod(v, &end);
    if (!end || *end || !(mbits > 0))
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  std::string("comm_init: LOOMRT_TCP_MBITS='") + v +
                      "' is not a rate in megabits per second above 0");
  }
  std::vector<uint8_t> key;
  if (loomrt_status st = auth::loadJobKey(/*required=*/true, "comm_init (elastic TCP)", key))
    return st;
  sockaddr_in master{};
  if (loomrt_status st = resolveMaster("ranks started without mpirun", &master))
    return st;
  Deadline deadline = deadlineIn(timeoutS);
  int ls = -1;
  if (rank == 0) {
    // On the interface MASTER_ADDR names (or LOOMRT_BIND's), not on every
    // interface: with MASTER_ADDR=127.0.0.1 no other host can reach it.
    uint32_t ip = 0;
    if (loomrt_status st = bindAddress("comm_init", master.sin_addr.s_addr, &ip))
      return st;
    uint16_t bound;
    ls = listenOn(ip, master.sin_port, size, &bound);
    if (ls < 0)
      return fail(LOOMRT_ERR_BACKEND, "comm_init: rank 0 cannot listen on port " +
                                          std::to_string(ntohs(master.sin_port)) + ": " +
                                          std::strerror(errno) +
                                          (errno == EADDRNOTAVAIL
                                               ? " (MASTER_ADDR is not an address of this "
                                                 "host; LOOMRT_BIND names the one to listen on)"
                                               : ""));
  }
  return mesh(rank, size, mbits * 1e6 / 8, master, ls, key, deadline, out);
}

loomrt_status dup(Group *g, double timeoutS, Group **out) {
  if (g->members() != g->size)
    return fail(LOOMRT_ERR_UNSUPPORTED,
                "comm_dup: the group has lost ranks; a copy would have to leave them out too");
  sockaddr_in master{};
  if (loomrt_status st = resolveMaster("ranks started without mpirun", &master))
    return st;
  std::vector<uint8_t> key;
  if (loomrt_status st = auth::loadJobKey(/*required=*/true, "comm_dup (elastic TCP)", key))
    return st;
  uint32_t ip = 0;
  if (loomrt_status st = bindAddress("comm_dup", master.sin_addr.s_addr, &ip))
    return st;
  uint16_t port = 0;
  int ls = g->rank == 0 ? listenOn(ip, 0, g->size, &port) : -1;
  // Rank 0's new port, to every rank (0: it could not listen).
  if (loomrt_status st = broadcast(g, &port, sizeof port, 0)) {
    if (ls >= 0)
      close(ls);
    return st;
  }
  if (port == 0)
    return fail(LOOMRT_ERR_BACKEND, "comm_dup: rank 0 could not open a second listener");
  master.sin_port = port;
  loomrt_status st =
      mesh(g->rank, g->size, g->bytesPerS, master, ls, key, deadlineIn(timeoutS), out);
  if (!st)
    (*out)->shrinkable = g->shrinkable;
  return st;
}

void destroy(Group *g) { delete g; }
void setShrinkable(Group *g, bool on) { g->shrinkable = on; }
int live(const Group *g) { return g ? g->members() : 0; }

loomrt_status allGather(Group *g, const void *send, void *recv, size_t bytes) {
  char *r = static_cast<char *>(recv);
  std::vector<char> copy;
  if (overlaps(send, bytes, recv, bytes * size_t(g->size))) {
    copy.assign(static_cast<const char *>(send), static_cast<const char *>(send) + bytes);
    send = copy.data();
  }
  std::vector<Io> io(size_t(g->size));
  for (int p = 0; p < g->size; ++p)
    io[size_t(p)].send = static_cast<const char *>(send), io[size_t(p)].sendLen = bytes,
    io[size_t(p)].recv = r + size_t(p) * bytes, io[size_t(p)].recvLen = bytes;
  if (loomrt_status st = collective(*g, io))
    return st;
  std::memmove(r + size_t(g->rank) * bytes, send, bytes);
  zeroLost(*g, r, bytes);
  return LOOMRT_OK;
}

loomrt_status allToAll(Group *g, const void *send, void *recv, size_t bytes) {
  size_t total = bytes * size_t(g->size);
  char *r = static_cast<char *>(recv);
  std::vector<char> copy;
  if (overlaps(send, total, recv, total)) {
    copy.assign(static_cast<const char *>(send), static_cast<const char *>(send) + total);
    send = copy.data();
  }
  const char *s = static_cast<const char *>(send);
  std::vector<Io> io(size_t(g->size));
  for (int p = 0; p < g->size; ++p)
    io[size_t(p)].send = s + size_t(p) * bytes, io[size_t(p)].sendLen = bytes,
    io[size_t(p)].recv = r + size_t(p) * bytes, io[size_t(p)].recvLen = bytes;
  if (loomrt_status st = collective(*g, io))
    return st;
  std::memmove(r + size_t(g->rank) * bytes, s + size_t(g->rank) * bytes, bytes);
  zeroLost(*g, r, bytes);
  return LOOMRT_OK;
}

loomrt_status allReduce(Group *g, loomrt_dtype dt, const void *send, void *recv, size_t count,
                        loomrt_reduce_op op) {
  size_t bytes = count * esize(dt);
  std::vector<char> all(bytes * size_t(g->size));
  std::memcpy(all.data() + size_t(g->rank) * bytes, send, bytes);
  std::vector<Io> io(size_t(g->size));
  for (int p = 0; p < g->size; ++p)
    io[size_t(p)].send = static_cast<const char *>(send), io[size_t(p)].sendLen = bytes,
    io[size_t(p)].recv = all.data() + size_t(p) * bytes, io[size_t(p)].recvLen = bytes;
  if (loomrt_status st = collective(*g, io))
    return st;
  reduceBlocks(*g, dt, all.data(), count, op, recv);
  return LOOMRT_OK;
}

loomrt_status reduceScatter(Group *g, loomrt_dtype dt, const void *send, void *recv,
                            size_t recvCount, loomrt_reduce_op op) {
  size_t bytes = recvCount * esize(dt);
  const char *s = static_cast<const char *>(send);
  std::vector<char> all(bytes * size_t(g->size));
  std::memcpy(all.data() + size_t(g->rank) * bytes, s + size_t(g->rank) * bytes, bytes);
  std::vector<Io> io(size_t(g->size));
  for (int p = 0; p < g->size; ++p)
    io[size_t(p)].send = s + size_t(p) * bytes, io[size_t(p)].sendLen = bytes,
    io[size_t(p)].recv = all.data() + size_t(p) * bytes, io[size_t(p)].recvLen = bytes;
  if (loomrt_status st = collective(*g, io))
    return st;
  reduceBlocks(*g, dt, all.data(), recvCount, op, recv);
  return LOOMRT_OK;
}

loomrt_status broadcast(Group *g, void *buf, size_t bytes, int root) {
  if (!g->live[size_t(root)])
    return fail(LOOMRT_ERR_BACKEND, "tcp: broadcast from rank " + std::to_string(root) +
                                        ", which has left the group");
  std::vector<Io> io(size_t(g->size));
  for (int p = 0; p < g->size; ++p) {
    if (g->rank == root)
      io[size_t(p)].send = static_cast<const char *>(buf), io[size_t(p)].sendLen = bytes;
    else if (p == root)
      io[size_t(p)].recv = static_cast<char *>(buf), io[size_t(p)].recvLen = bytes;
  }
  if (loomrt_status st = collective(*g, io))
    return st;
  if (!g->live[size_t(root)])
    return fail(LOOMRT_ERR_BACKEND, "tcp: the broadcast's root, rank " + std::to_string(root) +
                                        ", left the group during it");
  return LOOMRT_OK;
}

loomrt_status sendRecv(Group *g, const void *send, size_t sendBytes, int dest, void *recv,
                       size_t recvBytes, int src) {
  if (g->pointSent.size() != size_t(g->size))
    g->pointSent.assign(size_t(g->size), 0), g->pointGot.assign(size_t(g->size), 0);
  // Only the peers named take part; nothing is decided with rank 0: a
  // lost peer fails the exchange (a pipeline stage cannot train without
  // its neighbour), elastic or not.
  for (int p : {dest, src})
    if (p >= 0 && (!g->live[size_t(p)] || g->fd[size_t(p)] < 0))
      return fail(LOOMRT_ERR_BACKEND, "tcp: rank " + std::to_string(g->rank) + " of " +
                                          std::to_string(g->size) + ": a point-to-point exchange with rank " +
                                          std::to_string(p) + ", which " +
                                          (g->lost.empty() ? "has left the group" : g->lost));
  std::vector<Io> io(size_t(g->size));
  for (Io &x : io)
    x.hasOut = x.hasIn = false;
  if (dest >= 0) {
    Io &x = io[size_t(dest)];
    x.hasOut = true, x.send = static_cast<const char *>(send), x.sendLen = sendBytes;
    x.out = Header{kMagic, kPoint, g->pointSent[size_t(dest)], sendBytes};
  }
  if (src >= 0) {
    Io &x = io[size_t(src)];
    x.hasIn = true, x.recv = static_cast<char *>(recv), x.recvLen = recvBytes;
    x.inType = kPoint, x.inSeq = g->pointGot[size_t(src)];
  }
  std::vector<char> ok(size_t(g->size), 0);
  if (loomrt_status st = exchange(*g, io, ok, /*collective=*/false))
    return st;
  for (int p : {dest, src})
    if (p >= 0 && (io[size_t(p)].broken || !ok[size_t(p)] || io[size_t(p)].sent != io[size_t(p)].outTotal()))
      return fail(LOOMRT_ERR_BACKEND, "tcp: rank " + std::to_string(g->rank) + " of " +
                                          std::to_string(g->size) + ": " +
                                          (g->lost.empty() ? "lost rank " + std::to_string(p) : g->lost) +
                                          " during a point-to-point exchange");
  if (dest >= 0)
    ++g->pointSent[size_t(dest)];
  if (src >= 0)
    ++g->pointGot[size_t(src)];
  return LOOMRT_OK;
}

} // namespace loomrt::tcp
