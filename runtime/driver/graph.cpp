// graph.cpp: the graph folder and the neighbour sampler (see graph.h).
#include "driver/graph.h"
#include "common/file_util.h"

#include "loomrt/npy_header.h"
#include "driver/arrays.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <unordered_set>

namespace loomrt {
namespace {

uint64_t mix(uint64_t z) { // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// A draw in [0, range) keyed by the run's seed and up to four counters.
uint64_t draw(uint64_t seed, uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t range) {
  uint64_t z = mix(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
  z = mix(z ^ (a + 0x9E3779B97F4A7C15ull));
  z = mix(z ^ (b + 0xBF58476D1CE4E5B9ull));
  z = mix(z ^ (c + 0x94D049BB133111EBull));
  z = mix(z ^ (d + 0xD6E8FEB86659FD93ull));
  return z % range;
}

loomrt_input_desc vector1(const char *name, int64_t n, int64_t limit) {
  loomrt_input_desc d{};
  d.name = name;
  d.dtype = LOOMRT_I64;
  d.rank = 1;
  d.shape[0] = n;
  d.index_limit = limit;
  return d;
}

bool readInts(const std::string &path, const char *name, int64_t exact, int64_t limit,
              std::vector<int64_t> &out, std::string &error) {
  loomrt_input_desc d = vector1(name, exact, limit);
  int64_t rows = 0;
  return readNpy(
      path, d, exact,
      [&](size_t bytes) -> void * {
        out.assign(bytes / 8, 0);
        return out.empty() ? static_cast<void *>(&rows) : out.data();
      },
      rows, error);
}

} // namespace

const loomrt_input_desc *inputWithRole(const loomrt_program &p, loomrt_input_role role) {
  for (size_t i = 0; i < p.num_inputs; ++i)
    if (p.inputs[i].role == role)
      return &p.inputs[i];
  return nullptr;
}

bool loadGraph(const std::string &dir, const loomrt_program &p, Graph &g, std::string &error) {
  const loomrt_input_desc *table = inputWithRole(p, LOOMRT_INPUT_NODE_TABLE),
                          *labels = inputWithRole(p, LOOMRT_INPUT_NODE_LABELS);
  int64_t n = table ? table->shape[0] : 0, c = labels ? labels->index_limit : 0;
  g.nodes = n;
  std::string at = dir + "/";
  // CSR offsets: [N+1], starting at 0, never decreasing; the last is E.
  if (!readInts(at + "indptr.npy", "indptr", n + 1, 0, g.indptr, error))
    return false;
  for (int64_t v = 0; v < n; ++v)
    if (g.indptr[size_t(v)] > g.indptr[size_t(v + 1)] || g.indptr[0] != 0)
      return error = "'" + at + "indptr.npy': offsets must start at 0 and never decrease "
                     "(row " + std::to_string(v) + " has " +
                     std::to_string(g.indptr[size_t(v)]) + " then " +
                     std::to_string(g.indptr[size_t(v + 1)]) + ")",
             false;
  int64_t edges = g.indptr[size_t(n)];
  if (!readInts(at + "indices.npy", "indices", edges, n, g.indices, error))
    return error += error.find("shape") != std::string::npos
                        ? " (indptr.npy's last offset is the number of edges)"
                        : "",
           false;
  if (!readInts(at + "labels.npy", "labels", n, 0, g.labels, error))
    return false;
  for (int64_t v = 0; v < n; ++v)
    if (g.labels[size_t(v)] < -1 || g.labels[size_t(v)] >= c)
      return error = "'" + at + "labels.npy': label " + std::to_string(g.labels[size_t(v)]) +
                     " of node " + std::to_string(v) + " is outside [0, " + std::to_string(c) +
                     ") (the model's classes; -1 marks a node without a label)",
             false;
  std::string trainPath = at + "train.npy";
  struct stat trainStat {};
  if (::stat(trainPath.c_str(), &trainStat) == 0) { // loadNpy refuses a FIFO or a device
    loomrt_input_desc d = vector1("train", -1, n);
    ArrayInput a;
    if (!loadNpy(trainPath, d, a, error))
      return false;
    g.train.assign(reinterpret_cast<const int64_t *>(a.bytes.data()),
                   reinterpret_cast<const int64_t *>(a.bytes.data()) + a.rows);
    for (int64_t v : g.train)
      if (g.labels[size_t(v)] < 0)
        return error = "'" + trainPath + "': node " + std::to_string(v) +
                       " is a training node but its label is -1",
               false;
  } else {
    for (int64_t v = 0; v < n; ++v)
      if (g.labels[size_t(v)] >= 0)
        g.train.push_back(v);
  }
  if (g.train.empty())
    return error = "'" + dir + "': no training nodes (every label is -1 and there is no "
                   "train.npy)",
           false;
  return true;
}

bool loadFeatures(const std::string &dir, const loomrt_input_desc &table,
                  const std::function<void *(size_t)> &alloc, std::string &error) {
  int64_t rows = 0;
  return readNpy(dir + "/features.npy", table, table.shape[0], alloc, rows, error);
}

namespace {
/// The shared object's first page; the table follows it.
struct SharedHeader {
  std::atomic<uint64_t> state; // kReady or kFailed once rank 0 is done
};
constexpr uint64_t kReady = 0x4c4f4f4d52454459ull, kFailed = 0x4c4f4f4d4641494cull;
constexpr size_t kHeaderBytes = 4096;

/// A fresh name no other user can guess (128 random bits): the name used to
/// be a hash of the file, its size, the parent's pid and the uid, which
/// another user could compute and plant an object under.
bool randomSharedName(std::string &name) {
  unsigned char r[16];
  if (getrandom(r, sizeof r, 0) != ssize_t(sizeof r))
    return false;
  char buf[64];
  int n = std::snprintf(buf, sizeof buf, "/loomrt-features-");
  for (unsigned char c : r)
    n += std::snprintf(buf + n, sizeof buf - size_t(n), "%02x", c);
  name = buf;
  return true;
}

/// What each rank tells the others of its host: who it is and, from local
/// rank 0, the object's name and whether it could create it.
struct ShareCard {
  char host[64];
  int32_t localRank;
  int32_t ok; // local rank 0: created; others: mapped
  char name[64]; // "/loomrt-features-" and 32 hex digits
};

bool waitFor(const std::function<bool()> &done, double seconds) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}
} // namespace

int localRanks() {
  for (const char *v : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"})
    if (const char *s = std::getenv(v)) {
      int n = std::atoi(s);
      if (n >= 1)
        return n;
    }
  return 1;
}

SharedTable::~SharedTable() {
  if (map)
    munmap(map, mapBytes);
  if (creator)
    shm_unlink(name.c_str());
}

bool loadSharedFeatures(const std::string &dir, const loomrt_input_desc &table, int localRank,
                        const AllGather &allGather, SharedTable &out,
                        std::string &error, double timeoutSeconds) {
  std::string path = dir + "/features.npy";
  size_t bytes = size_t(table.shape[0]) * size_t(table.shape[1]) * 4;
  out.bytes = bytes;
  out.mapBytes = kHeaderBytes + bytes;
  ShareCard mine{};
  gethostname(mine.host, sizeof mine.host - 1);
  mine.localRank = localRank;
  std::string why;
  int fd = -1;
  // 1. Local rank 0 creates the object under a fresh random name, this
  // user's only (O_EXCL, 0600), at its full size.
  if (localRank == 0) {
    if (!randomSharedName(out.name)) {
      why = std::string("getrandom: ") + std::strerror(errno);
    } else if ((fd = shm_open(out.name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600)) <
               0) {
      why = "shm_open: " + std::string(std::strerror(errno));
    } else {
      out.creator = true;
      if (ftruncate(fd, off_t(out.mapBytes)) != 0)
        why = "reserving " + std::to_string(out.mapBytes) + " bytes: " + std::strerror(errno) +
              " (is /dev/shm big enough?)";
    }
    mine.ok = why.empty();
    std::snprintf(mine.name, sizeof mine.name, "%s", out.name.c_str());
  }
  // 2. The name goes to the host's other ranks through the rendezvous (an
  // all-gather over the job's ranks), never through a name they compute.
  auto gather = [&](std::vector<ShareCard> &all) {
    all.assign(size_t(allGather.size), ShareCard{});
    if (!allGather.fn(&mine, sizeof mine, all.data())) {
      why = "exchanging the table's name between the ranks failed";
      return false;
    }
    return true;
  };
  std::vector<ShareCard> all;
  bool exchanged = gather(all);
  const ShareCard *lead = nullptr;
  for (const ShareCard &c : all)
    if (c.localRank == 0 && std::strncmp(c.host, mine.host, sizeof c.host) == 0)
      lead = &c;
  if (exchanged && localRank != 0) {
    if (!lead || !lead->ok) {
      why = "local rank 0 of this host could not create it (its own error says why)";
    } else {
      out.name.assign(lead->name, strnlen(lead->name, sizeof lead->name));
      // Opened only when it is this user's own object of exactly the size
      // local rank 0 made: a planted object of another owner is never mapped.
      struct stat st {};
      if ((fd = shm_open(out.name.c_str(), O_RDWR | O_CLOEXEC, 0)) < 0)
        why = "shm_open: " + std::string(std::strerror(errno));
      else if (fstat(fd, &st) != 0 || st.st_uid != geteuid() || (st.st_mode & 077) ||
               size_t(st.st_size) != out.mapBytes)
        why = "the object is not this user's own, private and of " +
              std::to_string(out.mapBytes) + " bytes: it is not the one local rank 0 made";
    }
  }
  if (why.empty() && fd >= 0) {
    out.map = mmap(nullptr, out.mapBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (out.map == MAP_FAILED) {
      out.map = nullptr;
      why = "mmap: " + std::string(std::strerror(errno));
    }
  }
  if (fd >= 0)
    close(fd);
  // 3. Every rank says whether it mapped the object; then its name goes
  // (every exit path from here on leaves nothing in /dev/shm, a kill during
  // the load included: the pages live until the last mapping does).
  mine.ok = why.empty();
  bool confirmed = exchanged && gather(all);
  if (out.creator) {
    shm_unlink(out.name.c_str());
    out.creator = false;
  }
  if (why.empty() && confirmed)
    for (const ShareCard &c : all)
      if (std::strncmp(c.host, mine.host, sizeof c.host) == 0 && !c.ok)
        why = "local rank " + std::to_string(c.localRank) + " of this host could not map it";
  if (!why.empty() || !confirmed) {
    error = "sharing the feature table" + (out.name.empty() ? std::string() : " (" + out.name + ")") +
            ": " + (why.empty() ? "exchanging the table's name between the ranks failed" : why);
    return false;
  }
  // 4. Local rank 0 reads the file into it; the others wait for the flag.
  auto *header = static_cast<SharedHeader *>(out.map);
  out.data = static_cast<uint8_t *>(out.map) + kHeaderBytes;
  if (localRank == 0) {
    bool ok = loadFeatures(
        dir, table,
        [&](size_t n) -> void * { return n == bytes ? out.data : nullptr; }, error);
    header->state.store(ok ? kReady : kFailed, std::memory_order_release);
    return ok;
  }
  if (!waitFor([&] { return header->state.load(std::memory_order_acquire) != 0; },
               timeoutSeconds) ||
      header->state.load(std::memory_order_acquire) != kReady) {
    error = "sharing the feature table (" + out.name + "): local rank 0 could not read '" + path +
            "' (its own error says why)";
    return false;
  }
  return true;
}

bool writeNpyI64(const std::string &path, const std::vector<int64_t> &v, std::string &error) {
  std::string pre = npyPreamble("<i8", {int64_t(v.size())});
  // Written in place (--dump-samples), never through a planted symbolic
  // link or into a FIFO.
  std::string why;
  std::FILE *f = fopenForAppend(path, "--dump-samples file", why, /*truncate=*/true);
  if (!f)
    return error = why, false;
  bool ok = true;
  if (ok) {
    ok = std::fwrite(pre.data(), 1, pre.size(), f) == pre.size() &&
         std::fwrite(v.data(), 8, v.size(), f) == v.size();
    ok = std::fclose(f) == 0 && ok;
  }
  if (!ok)
    error = "cannot write '" + path + "': " + std::strerror(errno);
  return ok;
}

Sampler::Sampler(const loomrt_program &p, const Graph &g, uint64_t seed)
    : p(p), g(g), seed(seed), fanouts(p.fanouts, p.fanouts + p.num_fanouts) {
  count.push_back(p.batch);
  for (int64_t f : fanouts)
    count.push_back(count.back() * f);
}

int64_t Sampler::seedAt(int64_t position) const {
  int64_t t = int64_t(g.train.size()), e = position / t;
  if (e != epoch) { // Fisher-Yates keyed by the epoch
    order = g.train;
    for (int64_t i = t - 1; i > 0; --i)
      std::swap(order[size_t(i)],
                order[size_t(draw(seed, ~uint64_t(0), uint64_t(e), uint64_t(i), 0, uint64_t(i + 1)))]);
    epoch = e;
  }
  return order[size_t(position % t)];
}

void Sampler::fill(long step, int rank, int world, const std::vector<uint8_t *> &host,
                   std::vector<std::vector<int64_t>> *padded) const {
  size_t depths = fanouts.size() + 1;
  std::vector<int64_t *> ids(depths, nullptr);
  std::vector<float *> slotW(depths, nullptr), selfW(depths, nullptr);
  int64_t *labels = nullptr;
  for (size_t i = 0; i < p.num_inputs; ++i) {
    const loomrt_input_desc &in = p.inputs[i];
    uint8_t *at = host[i];
    size_t d = size_t(in.depth);
    if (in.role == LOOMRT_INPUT_NODES && d < depths)
      ids[d] = reinterpret_cast<int64_t *>(at);
    else if (in.role == LOOMRT_INPUT_SLOT_WEIGHTS && d < depths)
      slotW[d] = reinterpret_cast<float *>(at);
    else if (in.role == LOOMRT_INPUT_SELF_WEIGHTS && d < depths)
      selfW[d] = reinterpret_cast<float *>(at);
    else if (in.role == LOOMRT_INPUT_NODE_LABELS)
      labels = reinterpret_cast<int64_t *>(at);
  }
  if (padded)
    padded->assign(depths, {});
  std::vector<int64_t> level(static_cast<size_t>(count[0]));
  int64_t first = int64_t(step) * count[0] * world + int64_t(rank) * count[0];
  for (int64_t i = 0; i < count[0]; ++i)
    level[size_t(i)] = seedAt(first + i);
  if (labels)
    for (int64_t i = 0; i < count[0]; ++i)
      labels[i] = g.labels[size_t(level[size_t(i)])];
  auto degree = [&](int64_t v) { return g.indptr[size_t(v + 1)] - g.indptr[size_t(v)]; };
  bool gcn = p.graph_norm == LOOMRT_GRAPH_GCN;
  for (size_t d = 0;; ++d) {
    if (ids[d])
      std::copy(level.begin(), level.end(), ids[d]);
    if (padded && d == 0) // deeper levels come from `shown` below
      (*padded)[0] = level;
    if (d + 1 == depths)
      break;
    if (selfW[d])
      for (size_t j = 0; j < level.size(); ++j)
        selfW[d][j] = gcn ? float(1.0 / double(degree(level[j]) + 1)) : 1.0f;
    int64_t f = fanouts[d];
    std::vector<int64_t> next(level.size() * size_t(f));
    std::vector<int64_t> shown(padded ? next.size() : 0, -1);
    float *w = slotW[d + 1];
    // Parents are independent (their draws are keyed by their place): the
    // host's cores share them (170k slots a step at batch 1024, 15-10).
#pragma omp parallel
    {
    std::vector<int64_t> picks;
    std::unordered_set<int64_t> taken;
#pragma omp for schedule(static)
    for (size_t j = 0; j < level.size(); ++j) {
      int64_t v = level[j], deg = degree(v), base = g.indptr[size_t(v)];
      // The parent's place in the world's tree keys its draws.
      uint64_t where = uint64_t(int64_t(rank) * int64_t(level.size()) + int64_t(j));
      picks.clear();
      if (deg <= f) {
        for (int64_t k = 0; k < deg; ++k)
          picks.push_back(k);
      } else { // Floyd's: f distinct positions of [0, deg)
        taken.clear();
        for (int64_t k = deg - f; k < deg; ++k) {
          int64_t t = int64_t(draw(seed, uint64_t(step), d, where, uint64_t(k), uint64_t(k + 1)));
          bool seen = f <= 32 ? std::find(picks.begin(), picks.end(), t) != picks.end()
                              : taken.count(t) != 0;
          int64_t pick = seen ? k : t;
          picks.push_back(pick);
          if (f > 32)
            taken.insert(pick);
        }
        std::sort(picks.begin(), picks.end());
      }
      int64_t c = int64_t(picks.size());
      for (int64_t k = 0; k < f; ++k) {
        size_t slot = j * size_t(f) + size_t(k);
        if (k < c) {
          int64_t u = g.indices[size_t(base + picks[size_t(k)])];
          next[slot] = u;
          if (padded)
            shown[slot] = u;
          if (w)
            w[slot] = gcn ? float((double(deg) / double(c)) /
                                  std::sqrt(double(deg + 1) * double(degree(u) + 1)))
                          : float(1.0 / double(c));
        } else {
          next[slot] = v; // a valid row, weighted 0
          if (w)
            w[slot] = 0.0f;
        }
      }
    }
    }
    if (padded)
      (*padded)[d + 1] = std::move(shown);
    level = std::move(next);
  }
}

} // namespace loomrt
