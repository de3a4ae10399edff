// comm_check.cpp: every collective across real ranks, checked against values
// each rank computes for itself. Started by a launcher, one process per rank:
//   mpirun -np 3 comm_check cpu            (CPU ranks over MPI; ctest does this)
//   RANK=r WORLD_SIZE=2 LOCAL_RANK=r MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 \
//     comm_check cuda                      (GPU ranks over NCCL)
// Rank r contributes x_r[i] = r + 1 + i/8 (exact in bf16 for the sizes used,
// so sums compare exactly in both dtypes). Prints one line per rank and
// exits non-zero on any mismatch.
#include "loomrt/loomrt.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int failures = 0, checks = 0;
int rank = 0, size = 1;

void expect(bool ok, const std::string &what) {
  ++checks;
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "rank %d: FAILED %s\n", rank, what.c_str());
  }
}

uint16_t toBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float fromBf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

#define OK(call)                                                               \
  do {                                                                         \
    if (loomrt_status st_ = (call)) {                                          \
      std::fprintf(stderr, "rank %d: %s failed: %s\n", rank, #call,            \
                   loomrt_last_error());                                       \
      std::exit(2);                                                            \
    }                                                                          \
  } while (0)

struct Buf {
  loomrt_device dev;
  loomrt_stream s;
  loomrt_dtype dt;
  size_t n;
  void *p = nullptr;
  Buf(loomrt_device d, loomrt_stream st, loomrt_dtype t, size_t count) : dev(d), s(st), dt(t), n(count) {
    OK(loomrt_alloc(dev, LOOMRT_MEM_DEVICE, bytes(), &p));
  }
  ~Buf() { loomrt_free(dev, LOOMRT_MEM_DEVICE, p); }
  size_t bytes() const { return n * (dt == LOOMRT_BF16 ? 2 : 4); }
  void put(const std::vector<float> &v) {
    std::vector<uint16_t> h(v.size());
    for (size_t i = 0; i < v.size(); ++i)
      h[i] = toBf16(v[i]);
    OK(loomrt_memcpy_async(s, p, dt == LOOMRT_BF16 ? (const void *)h.data() : v.data(), bytes()));
    OK(loomrt_stream_synchronize(s));
  }
  std::vector<float> get() {
    std::vector<float> v(n);
    std::vector<uint16_t> h(n);
    OK(loomrt_memcpy_async(s, dt == LOOMRT_BF16 ? (void *)h.data() : v.data(), p, bytes()));
    OK(loomrt_stream_synchronize(s));
    if (dt == LOOMRT_BF16)
      for (size_t i = 0; i < n; ++i)
        v[i] = fromBf16(h[i]);
    return v;
  }
};

float x(int r, size_t i) { return float(r + 1) + float(i % 16) / 8.0f; }

bool same(const std::vector<float> &a, const std::vector<float> &b, float tol) {
  if (a.size() != b.size())
    return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::fabs(a[i] - b[i]) > tol * (1 + std::fabs(b[i])))
      return false;
  return true;
}

/// send_recv around the ring (pipeline stages): each rank sends to the next
/// and receives from the previous at once (one rank: a copy).
void sendRecvRing(loomrt_device dev, loomrt_stream s, loomrt_comm c) {
  int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  Buf sr(dev, s, LOOMRT_F32, 4), rr(dev, s, LOOMRT_F32, 4);
  sr.put({float(rank), 1, 2, 3});
  OK(loomrt_send_recv(c, s, sr.p, 16, next, rr.p, 16, prev));
  expect(same(rr.get(), {float(prev), 1, 2, 3}, 0), "send_recv ring");
}

} // namespace

int main(int argc, char **argv) {
  loomrt_backend be = argc > 1 && std::string(argv[1]) == "cuda" ? LOOMRT_BACKEND_CUDA
                                                                 : LOOMRT_BACKEND_CPU;
  loomrt_device dev;
  OK(loomrt_device_open(be, be == LOOMRT_BACKEND_CPU ? 0 : loomrt_local_rank(), &dev));
  loomrt_stream s;
  OK(loomrt_stream_create(dev, &s));
  loomrt_comm c;
  OK(loomrt_comm_init_from_env(dev, &c));
  rank = loomrt_comm_rank(c), size = loomrt_comm_size(c);

  for (loomrt_dtype dt : {LOOMRT_F32, LOOMRT_BF16}) {
    std::string t = dt == LOOMRT_BF16 ? " bf16" : " f32";
    const size_t n = 96; // divisible by 1, 2, 3, 4
    float tol = dt == LOOMRT_BF16 ? 1e-2f : 1e-6f;
    Buf a(dev, s, dt, n), b(dev, s, dt, n);
    std::vector<float> mine(n), sum(n), mx(n);
    for (size_t i = 0; i < n; ++i) {
      mine[i] = x(rank, i);
      sum[i] = mx[i] = 0;
      for (int r = 0; r < size; ++r) {
        sum[i] += x(r, i);
        mx[i] = std::max(mx[i], x(r, i));
      }
    }
    a.put(mine);
    OK(loomrt_all_reduce(c, s, dt, a.p, b.p, n, LOOMRT_REDUCE_SUM));
    expect(same(b.get(), sum, tol), "all_reduce sum" + t);
    OK(loomrt_all_reduce(c, s, dt, a.p, b.p, n, LOOMRT_REDUCE_MAX));
    expect(same(b.get(), mx, tol), "all_reduce max" + t);
    std::vector<float> mean(sum);
    for (float &v : mean)
      v /= float(size);
    OK(loomrt_all_reduce(c, s, dt, a.p, a.p, n, LOOMRT_REDUCE_MEAN)); // in place
    expect(same(a.get(), mean, tol), "all_reduce mean in place" + t);

    a.put(mine);
    size_t part = n / size_t(size);
    Buf rs(dev, s, dt, part);
    OK(loomrt_reduce_scatter(c, s, dt, a.p, rs.p, part, LOOMRT_REDUCE_SUM));
    expect(same(rs.get(), std::vector<float>(sum.begin() + long(rank * part),
                                             sum.begin() + long((rank + 1) * part)),
                tol),
           "reduce_scatter sum" + t);

    Buf one(dev, s, dt, part), all(dev, s, dt, part * size_t(size));
    std::vector<float> shard(part), gathered;
    for (size_t i = 0; i < part; ++i)
      shard[i] = x(rank, i);
    for (int r = 0; r < size; ++r)
      for (size_t i = 0; i < part; ++i)
        gathered.push_back(x(r, i));
    one.put(shard);
    OK(loomrt_all_gather(c, s, dt, one.p, all.p, part));
    expect(same(all.get(), gathered, tol), "all_gather" + t);
  }

  // CPU ranks (MPI) sum fp32 in rank order, in all-reduce and in
  // reduce-scatter alike (comm.cpp, orderedSumScatter): values whose sum
  // depends on the order, an odd count for the all-reduce's padding; the
  // results must be those bits exactly, and the reduce-scatter's the
  // all-reduce's.
  if (be == LOOMRT_BACKEND_CPU) {
    const size_t n = size_t(size) * 37;
    auto y = [](int r, size_t i) {
      float big = (i % 3 == 0 ? 1e8f : 1.0f) * (r % 2 ? -1.0f : 1.0f);
      return big + float(r) * 0.1f + float(i) * 1e-3f;
    };
    std::vector<float> mine(n), want(n);
    for (size_t i = 0; i < n; ++i) {
      mine[i] = y(rank, i);
      float acc = y(0, i);
      for (int r = 1; r < size; ++r)
        acc += y(r, i);
      want[i] = acc;
    }
    Buf a(dev, s, LOOMRT_F32, n), b(dev, s, LOOMRT_F32, n - 1);
    a.put(mine);
    OK(loomrt_all_reduce(c, s, LOOMRT_F32, a.p, b.p, n - 1, LOOMRT_REDUCE_SUM));
    std::vector<float> got = b.get();
    expect(got == std::vector<float>(want.begin(), want.end() - 1),
           "all_reduce sums in rank order");
    size_t part = n / size_t(size);
    Buf rs(dev, s, LOOMRT_F32, part);
    OK(loomrt_reduce_scatter(c, s, LOOMRT_F32, a.p, rs.p, part, LOOMRT_REDUCE_SUM));
    expect(rs.get() == std::vector<float>(want.begin() + long(rank * part),
                                          want.begin() + long((rank + 1) * part)),
           "reduce_scatter sums in rank order");
  }

  // all_to_all: block j of rank r holds r*100 + j; rank r receives j*100 + r.
  {
    Buf sbuf(dev, s, LOOMRT_F32, size_t(size)), rbuf(dev, s, LOOMRT_F32, size_t(size));
    std::vector<float> v(size), want(size);
    for (int j = 0; j < size; ++j) {
      v[j] = float(rank * 100 + j);
      want[j] = float(j * 100 + rank);
    }
    sbuf.put(v);
    OK(loomrt_all_to_all(c, s, sbuf.p, rbuf.p, 4));
    expect(same(rbuf.get(), want, 0), "all_to_all");
    // broadcast from the last rank
    std::vector<float> mineB(4, float(rank)), rootB(4, float(size - 1));
    Buf bb(dev, s, LOOMRT_F32, 4);
    bb.put(mineB);
    OK(loomrt_broadcast(c, s, bb.p, 16, size - 1));
    expect(same(bb.get(), rootB, 0), "broadcast");
    sendRecvRing(dev, s, c);
  }

  // Bytes sent, as loomrt.h counts them: the all_to_all above sent
  // (W-1) blocks of 4 bytes, the broadcast its 16 bytes.
  expect(loomrt_comm_bytes_sent(c, LOOMRT_COLL_ALL_TO_ALL) == uint64_t(4 * (size - 1)),
         "all_to_all bytes counted");
  expect(loomrt_comm_bytes_sent(c, LOOMRT_COLL_BROADCAST) == (size > 1 ? 16u : 0u),
         "broadcast bytes counted");
  expect(loomrt_comm_bytes_sent(c, LOOMRT_COLL_SEND_RECV) == (size > 1 ? 16u : 0u),
         "send_recv bytes counted");
  expect(loomrt_comm_bytes_sent(c, -1) >= loomrt_comm_bytes_sent(c, LOOMRT_COLL_ALL_REDUCE) +
                                              loomrt_comm_bytes_sent(c, LOOMRT_COLL_ALL_TO_ALL),
         "total bytes counted");

  // split into even and odd ranks: the sub-world sums only its own.
  {
    loomrt_comm sub;
    OK(loomrt_comm_split(c, rank % 2, rank, &sub));
    int subSize = (size + (rank % 2 == 0 ? 1 : 0)) / 2;
    expect(loomrt_comm_size(sub) == subSize, "split size");
    expect(loomrt_comm_rank(sub) == rank / 2, "split rank");
    Buf a(dev, s, LOOMRT_F32, 1), b(dev, s, LOOMRT_F32, 1);
    a.put({float(rank)});
    OK(loomrt_all_reduce(sub, s, LOOMRT_F32, a.p, b.p, 1, LOOMRT_REDUCE_SUM));
    float want = 0;
    for (int r = rank % 2; r < size; r += 2)
      want += float(r);
    expect(same(b.get(), {want}, 0), "split all_reduce");
    loomrt_comm_destroy(sub);
  }
  OK(loomrt_stream_synchronize(s));
  std::printf("rank %d of %d: %d of %d collective checks passed\n", rank, size,
              checks - failures, checks);
  loomrt_comm_destroy(c);
  loomrt_stream_destroy(s);
  loomrt_device_close(dev);
  return failures ? 1 : 0;
}
