//===- loom-graphgen.cpp - power-law graphs for graph-model benchmarks ----===//
//
// Writes a graph folder that a graph model's training binary reads with
// --graph DIR (docs/graphs.md) and that PyG loads with numpy: indptr.npy and
// indices.npy (CSR of each node's neighbours, sorted, without duplicates or
// self loops), features.npy, labels.npy and train.npy.
//
// The edges are R-MAT (Chakrabarti, Zhan and Faloutsos, "R-MAT: A recursive
// model for graph mining", SDM 2004; Graph500's a, b, c = 0.57, 0.19, 0.19):
// each edge picks a quadrant of the adjacency matrix at every level of the
// node ids' bits. Node ids are then scrambled by a random permutation so
// that the hubs (R-MAT's low ids) are spread over the table as in a real
// graph's numbering. Labels follow the recursive structure (a node's class
// is the block of its unscrambled id, so neighbours tend to share one) and
// the features carry a noisy copy of the class (a random mean a class plus
// N(0, 1) noise), so a model has something to learn. Every number is drawn
// from a counter-based hash of --seed: the same flags write the same files
// on any machine and thread count.
//
// --preset papers100m is ogbn-papers100M's shape (111,059,956 nodes,
// 1,615,685,872 directed edges, 128 features, 172 classes, 1.1% of nodes
// for training): 57 GB of features.
//
//===----------------------------------------------------------------------===//
#include "common/cli.h"
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <vector>

#include <omp.h>

#include "loomrt/npy_header.h"

namespace {

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
uint64_t hash(uint64_t seed, uint64_t stream, uint64_t i) {
  return mix(mix(seed * 0x9E3779B97F4A7C15ull + stream) ^ (i + 0x632BE59BD9B4E019ull));
}
double uniform(uint64_t bits) { return double(bits >> 11) * 0x1.0p-53; }

struct Options {
  std::string out;
  int64_t nodes = 1 << 20, edges = 16 << 20, features = 128, classes = 16;
  double a = 0.57, b = 0.19, c = 0.19, trainFraction = 0.1;
  uint64_t seed = 1;
  bool undirected = true;
};

[[noreturn]] void fail(const std::string &msg) {
  std::fprintf(stderr, "loom-graphgen: error: %s\n", msg.c_str());
  std::exit(1);
}

void usage() {
  std::printf(
      "usage: loom-graphgen DIR [--nodes N] [--edges E] [--features F] [--classes C]\n"
      "                     [--rmat A,B,C] [--directed] [--train-fraction P] [--seed S]\n"
      "                     [--preset papers100m]\n\n"
      "Writes an R-MAT power-law graph as a graph folder (indptr.npy, indices.npy,\n"
      "features.npy, labels.npy, train.npy) for --graph DIR of a graph model's\n"
      "training binary (loomc --model sage|gcn) and for PyG (numpy.load).\n\n"
      "  --nodes N            nodes (default 1048576)\n"
      "  --edges E            edges drawn (default 16777216); --directed keeps each as\n"
      "                       drawn, else (default) each is also added reversed.\n"
      "                       Duplicates and self loops are dropped\n"
      "  --features F         floats a node (default 128)\n"
      "  --classes C          classes (default 16)\n"
      "  --rmat A,B,C         R-MAT quadrant probabilities (default 0.57,0.19,0.19)\n"
      "  --train-fraction P   share of nodes in train.npy (default 0.1)\n"
      "  --seed S             every draw's seed (default 1)\n"
      "  --preset papers100m  ogbn-papers100M's shape: 111059956 nodes, 1615685872\n"
      "                       edges, 128 features, 172 classes, 1.1%% training nodes\n");
}

Options parse(int argc, char **argv) {
  // The training binary's parser (common/cli.h): --flag value and
  // --flag=value alike, one positional argument (the folder).
  loomrt::cli::Flags c;
  for (const char *n : {"nodes", "edges", "features", "classes", "seed", "train-fraction", "rmat",
                        "preset"})
    c.add(n, loomrt::cli::Flags::Value);
  c.add("directed", loomrt::cli::Flags::Bool);
  c.add("h,help", loomrt::cli::Flags::Bool);
  std::string err;
  if (!c.parse(argc, argv, err, 1))
    fail(err);
  if (c.on("help")) {
    usage();
    std::exit(0);
  }
  Options o;
  // --preset first: the flags given beside it change its shape.
  std::string preset;
  if (!loomrt::cli::choice(c, "preset", {"papers100m"}, preset, err))
    fail(err);
  if (preset == "papers100m") {
    o.nodes = 111059956;
    o.edges = 1615685872;
    o.features = 128;
    o.classes = 172;
    o.trainFraction = 0.011;
  }
  long long nodes = o.nodes, edges = o.edges, features = o.features, classes = o.classes,
            seed = (long long)o.seed;
  if (!loomrt::cli::integer(c, "nodes", 2, int64_t(1) << 40, nodes, err) ||
      !loomrt::cli::integer(c, "edges", 1, int64_t(1) << 40, edges, err) ||
      !loomrt::cli::integer(c, "features", 1, 1 << 20, features, err) ||
      !loomrt::cli::integer(c, "classes", 2, 1 << 20, classes, err) ||
      !loomrt::cli::integer(c, "seed", 0, INT64_MAX, seed, err))
    fail(err);
  o.nodes = nodes, o.edges = edges, o.features = features, o.classes = classes;
  o.seed = uint64_t(seed);
  o.undirected = !c.on("directed");
  if (c.has("train-fraction")) {
    const std::string &v = c.value("train-fraction");
    char *end = nullptr;
    o.trainFraction = std::strtod(v.c_str(), &end);
    if (v.empty() || *end || !(o.trainFraction > 0) || o.trainFraction > 1)
      fail("--train-fraction expects a number in (0, 1], got '" + v + "'");
  }
  if (c.has("rmat")) {
    const std::string &v = c.value("rmat");
    if (std::sscanf(v.c_str(), "%lf,%lf,%lf", &o.a, &o.b, &o.c) != 3 || o.a < 0 || o.b < 0 ||
        o.c < 0 || o.a + o.b + o.c >= 1)
      fail("--rmat expects A,B,C, each >= 0 with A+B+C < 1, got '" + v + "'");
  }
  if (c.positional().empty())
    fail("no output folder (usage: loom-graphgen DIR [flags]; see --help)");
  o.out = c.positional()[0];
  return o;
}

/// An .npy file written in order: the header, then the data.
struct Npy {
  std::FILE *f = nullptr;
  std::string path;
  Npy(const std::string &p, const char *descr, const std::vector<int64_t> &shape) : path(p) {
    if (!(f = std::fopen(p.c_str(), "wb")))
      fail("cannot write '" + p + "': " + std::strerror(errno));
    std::string pre = loomrt::npyPreamble(descr, shape);
    write(pre.data(), pre.size());
  }
  void write(const void *data, size_t bytes) {
    if (bytes && std::fwrite(data, 1, bytes, f) != bytes)
      fail("cannot write '" + path + "': " + std::strerror(errno));
  }
  ~Npy() {
    if (std::fclose(f) != 0)
      fail("cannot write '" + path + "': " + std::strerror(errno));
  }
};

} // namespace

/// Labels, the training nodes (each with probability P), and the features
/// in chunks of rows: N(0, 1) noise (Box-Muller) plus its class's mean.
void writeNodeData(const Options &o, const std::vector<int32_t> &label) {
  const int64_t n = o.nodes;
  {
    Npy f(o.out + "/labels.npy", "<i8", {n});
    std::vector<int64_t> l(label.begin(), label.end());
    f.write(l.data(), l.size() * 8);
  }
  {
    std::vector<int64_t> train;
    for (int64_t i = 0; i < n; ++i)
      if (uniform(hash(o.seed, 3, uint64_t(i))) < o.trainFraction)
        train.push_back(i);
    if (train.empty())
      train.push_back(0);
    Npy f(o.out + "/train.npy", "<i8", {int64_t(train.size())});
    f.write(train.data(), train.size() * 8);
  }
  std::vector<float> mean(static_cast<size_t>(o.classes * o.features));
  for (size_t i = 0; i < mean.size(); ++i)
    mean[i] = float(uniform(hash(o.seed, 4, i)) * 2 - 1);
  Npy f(o.out + "/features.npy", "<f4", {n, o.features});
  const int64_t rows = std::max<int64_t>(1, (int64_t(1) << 24) / o.features);
  std::vector<float> chunk(static_cast<size_t>(rows * o.features));
  for (int64_t first = 0; first < n; first += rows) {
    int64_t count = std::min(rows, n - first);
#pragma omp parallel for schedule(static)
    for (int64_t r = 0; r < count; ++r) {
      int64_t v = first + r;
      const float *mu = mean.data() + size_t(label[size_t(v)]) * size_t(o.features);
      for (int64_t j = 0; j < o.features; j += 2) {
        uint64_t h = hash(o.seed, 5, uint64_t(v) * uint64_t(o.features) + uint64_t(j));
        double u1 = (double(h >> 40) + 1) * 0x1.0p-24, u2 = double(h & 0xFFFFFF) * 0x1.0p-24;
        double rad = std::sqrt(-2 * std::log(u1)), ang = 6.283185307179586 * u2;
        chunk[size_t(r * o.features + j)] = float(rad * std::cos(ang)) + mu[j];
        if (j + 1 < o.features)
          chunk[size_t(r * o.features + j + 1)] = float(rad * std::sin(ang)) + mu[j + 1];
      }
    }
    f.write(chunk.data(), size_t(count * o.features) * 4);
  }
}

int main(int argc, char **argv) {
  Options o = parse(argc, argv);
  if (mkdir(o.out.c_str(), 0777) != 0 && errno != EEXIST)
    fail("cannot create '" + o.out + "': " + std::strerror(errno));
  const int64_t n = o.nodes;
  int bits = 1;
  while ((int64_t(1) << bits) < n)
    ++bits;
  std::printf("loom-graphgen: %lld nodes, %lld R-MAT edges (%s), %lld features, %lld classes "
              "into %s (%d threads)\n",
              (long long)n, (long long)o.edges, o.undirected ? "undirected" : "directed",
              (long long)o.features, (long long)o.classes, o.out.c_str(), omp_get_max_threads());
  std::fflush(stdout);

  // A random permutation of the ids (Fisher-Yates from the seed's stream 1),
  // and each node's class: the block of its R-MAT id.
  std::vector<int64_t> perm(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i)
    perm[size_t(i)] = i;
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(perm[size_t(i)], perm[size_t(hash(o.seed, 1, uint64_t(i)) % uint64_t(i + 1))]);
  std::vector<int32_t> label(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    label[size_t(perm[size_t(i)])] = int32_t(i * o.classes / n);

  // The edges, drawn level by level (two 32-bit uniforms a 64-bit draw); an
  // endpoint past the last node is drawn again.
  const double ab = o.a + o.b, abc = ab + o.c;
  std::vector<int64_t> src(static_cast<size_t>(o.edges)), dst(static_cast<size_t>(o.edges));
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < o.edges; ++e) {
    for (uint64_t attempt = 0;; ++attempt) {
      int64_t u = 0, v = 0;
      for (int l = 0; l < bits; ++l) {
        uint64_t r = hash(o.seed, 2 + attempt, uint64_t(e) * 64 + uint64_t(l));
        double x = uniform(r);
        int qu = x >= ab, qv = (x >= o.a && x < ab) || x >= abc;
        u = u << 1 | qu;
        v = v << 1 | qv;
      }
      if (u < n && v < n) {
        src[size_t(e)] = perm[size_t(u)];
        dst[size_t(e)] = perm[size_t(v)];
        break;
      }
    }
  }
  std::printf("loom-graphgen: edges drawn\n");
  std::fflush(stdout);

  // CSR: count, place, then sort each row and drop duplicates and loops.
  std::vector<std::atomic<int64_t>> count(static_cast<size_t>(n));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    count[size_t(i)].store(0, std::memory_order_relaxed);
  int sides = o.undirected ? 2 : 1;
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < o.edges; ++e) {
    count[size_t(src[size_t(e)])].fetch_add(1, std::memory_order_relaxed);
    if (sides == 2)
      count[size_t(dst[size_t(e)])].fetch_add(1, std::memory_order_relaxed);
  }
  std::vector<int64_t> start(size_t(n) + 1, 0);
  for (int64_t i = 0; i < n; ++i)
    start[size_t(i) + 1] = start[size_t(i)] + count[size_t(i)].load(std::memory_order_relaxed);
  bool narrow = n <= INT32_MAX; // int32 neighbour ids where they fit
  std::vector<int64_t> adj(static_cast<size_t>(start[size_t(n)]));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    count[size_t(i)].store(start[size_t(i)], std::memory_order_relaxed);
#pragma omp parallel for schedule(static)
  for (int64_t e = 0; e < o.edges; ++e) {
    int64_t u = src[size_t(e)], v = dst[size_t(e)];
    adj[size_t(count[size_t(u)].fetch_add(1, std::memory_order_relaxed))] = v;
    if (sides == 2)
      adj[size_t(count[size_t(v)].fetch_add(1, std::memory_order_relaxed))] = u;
  }
  std::vector<int64_t>().swap(src);
  std::vector<int64_t>().swap(dst);
  std::vector<int64_t> kept(size_t(n) + 1, 0);
#pragma omp parallel for schedule(dynamic, 4096)
  for (int64_t i = 0; i < n; ++i) {
    int64_t *b = adj.data() + start[size_t(i)], *e = adj.data() + start[size_t(i) + 1];
    std::sort(b, e);
    int64_t *w = b;
    for (int64_t *r = b; r < e; ++r)
      if (*r != i && (w == b || *r != w[-1]))
        *w++ = *r;
    kept[size_t(i) + 1] = w - b;
  }
  for (int64_t i = 0; i < n; ++i)
    kept[size_t(i) + 1] += kept[size_t(i)];
  int64_t m = kept[size_t(n)];
  {
    Npy f(o.out + "/indptr.npy", "<i8", {n + 1});
    f.write(kept.data(), kept.size() * 8);
  }
  {
    Npy f(o.out + "/indices.npy", narrow ? "<i4" : "<i8", {m});
    std::vector<int32_t> row;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t *b = adj.data() + start[size_t(i)];
      int64_t len = kept[size_t(i) + 1] - kept[size_t(i)];
      if (narrow) {
        row.assign(b, b + len);
        f.write(row.data(), size_t(len) * 4);
      } else {
        f.write(b, size_t(len) * 8);
      }
    }
  }
  std::vector<int64_t>().swap(adj);
  std::printf("loom-graphgen: %lld neighbour entries (mean degree %.1f) written\n",
              (long long)m, double(m) / double(n));
  std::fflush(stdout);

  writeNodeData(o, label);
  std::printf("loom-graphgen: done (%.3g GB of features)\n",
              double(n) * double(o.features) * 4 / 1e9);
  return 0;
}
