// comm.cpp: communicators and collectives.
//
// Four transports behind one C interface:
//   * self: the one-rank world (every collective is a copy or nothing);
//   * MPI (Open MPI, Debian's libopenmpi-dev) for CPU devices, so CI runs
//     several ranks on one machine under mpirun;
//   * NCCL for CUDA devices, bootstrapped through MPI when mpirun started
//     the job, otherwise through a TCP rendezvous at MASTER_ADDR:MASTER_PORT
//     (the torchrun variables);
//   * elastic TCP (comm/tcp.h): CPU ranks started torchrun-style (RANK,
//     WORLD_SIZE, MASTER_ADDR, MASTER_PORT) without mpirun, or any device
//     with LOOMRT_TRANSPORT=tcp (GPU buffers are staged through the host).
//     A rank that dies leaves the group and the others go on, which MPI and
//     NCCL as Debian and CUDA 13 ship them cannot do (no ULFM).
// A watchdog thread turns a collective that does not finish within the
// timeout (LOOMRT_COMM_TIMEOUT seconds, default 300; a rank died or hangs)
// into a one-line error and an exit, so no rank waits forever; the launcher
// (mpirun, torchrun) then tears down the rest.
//
// The world comes from the launcher's variables (launcherOf): Open MPI's
// mpirun, torchrun, MPICH's mpiexec (PMI) or Slurm's srun, in that order.
#include "comm/auth.h"
#include "comm/tcp.h"
#include "common/backend.h"

#include <arpa/inet.h>
#include <cmath>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <functional>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <unistd.h>
#include <vector>

#ifdef LOOMRT_HAVE_MPI
// The C interface only (Open MPI and MPICH otherwise pull in their C++ one).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif
#ifdef LOOMRT_HAVE_NCCL
// NCCL on CUDA (linked); RCCL on HIP (loaded at run time, same API).
#include "gpu/gpu_api.h"
#if defined(LOOMRT_GPU_HIP)
#include "hip/rccl_api.h"
#else
#include <nccl.h>
#endif
#endif

using loomrt::fail;

namespace {

enum class Transport { Self, Mpi, Nccl, Tcp };

size_t esize(loomrt_dtype dt) { return dt == LOOMRT_BF16 ? 2 : 4; }

//===----------------------------------------------------------------------===//
// Watchdog
//===----------------------------------------------------------------------===//

/// One in-flight collective: blocking MPI calls register themselves for
/// their duration; NCCL calls are asynchronous and register an event that
/// the watchdog polls.
struct Pending {
  std::chrono::steady_clock::time_point start;
  std::string what;
  void *event = nullptr; // gpuEvent_t for NCCL / RCCL, null for a blocking call
  long id = 0;
};

class Watchdog {
public:
  static Watchdog &get() {
    static Watchdog *w = new Watchdog; // lives until exit; never joined
    return *w;
  }
  double timeout() const { return timeoutS; }
  long begin(const std::string &what, void *event = nullptr) {
    std::lock_guard<std::mutex> l(m);
    pending.push_back({std::chrono::steady_clock::now(), what, event, ++next});
    return next;
  }
  void end(long id) {
    std::lock_guard<std::mutex> l(m);
    for (size_t i = 0; i < pending.size(); ++i)
      if (pending[i].id == id) {
        pending.erase(pending.begin() + long(i));
        return;
      }
  }
  void setIdentity(int r, int n, std::function<void()> abortFn) {
    std::lock_guard<std::mutex> l(m);
    rank = r, size = n, onTimeout = std::move(abortFn);
  }

private:
  Watchdog() {
    if (const char *v = std::getenv("LOOMRT_COMM_TIMEOUT")) {
      char *end = nullptr;
      double t = std::strtod(v, &end);
      if (end && *end == 0 && t > 0)
        timeoutS = t;
      else
        std::fprintf(stderr, "loomrt: ignoring LOOMRT_COMM_TIMEOUT='%s' (expected "
                             "seconds > 0); using %g s\n", v, timeoutS);
    }
    std::thread([this] { run(); }).detach();
  }
  void run() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      std::unique_lock<std::mutex> l(m);
      auto now = std::chrono::steady_clock::now();
      for (size_t i = 0; i < pending.size();) {
#ifdef LOOMRT_HAVE_NCCL
        if (pending[i].event &&
            gpuEventQuery(static_cast<gpuEvent_t>(pending[i].event)) == gpuSuccess) {
          (void)gpuEventDestroy(static_cast<gpuEvent_t>(pending[i].event));
          pending.erase(pending.begin() + long(i));
          continue;
        }
#endif
        double waited = std::chrono::duration<double>(now - pending[i].start).count();
        if (waited > timeoutS) {
          std::fprintf(stderr,
                       "loomrt: error: rank %d of %d: %s has not completed after "
                       "%.0f s: another rank died or hangs (timeout: "
                       "LOOMRT_COMM_TIMEOUT / --comm-timeout); exiting\n",
                       rank, size, pending[i].what.c_str(), waited);
          std::fflush(stderr);
          if (onTimeout)
            onTimeout();
          _exit(3);
        }
        ++i;
      }
    }
  }
  std::mutex m;
  std::vector<Pending> pending;
  long next = 0;
  double timeoutS = 300;
  int rank = 0, size = 1;
  std::function<void()> onTimeout;
};

/// Registers a blocking call with the watchdog for its scope.
struct Guard {
  long id;
  explicit Guard(const std::string &what) : id(Watchdog::get().begin(what)) {}
  ~Guard() { Watchdog::get().end(id); }
};

/// The launcher (mpirun, torchrun) stops the other ranks with SIGTERM when
/// one fails: say so instead of vanishing.
int termRank = 0;
extern "C" void onTerm(int) {
  char msg[160];
  int n = std::snprintf(msg, sizeof msg,
                        "loomrt: rank %d: stopped by the launcher (SIGTERM): "
                        "another rank failed or the job was cancelled\n",
                        termRank);
  if (n > 0 && write(2, msg, size_t(n)) < 0) {
  }
  _exit(143);
}

//===----------------------------------------------------------------------===//
// Environment
//===----------------------------------------------------------------------===//

/// A positive integer from the first of `vars` that is set; 0 when none is.
int envInt(std::initializer_list<const char *> vars, std::string &source) {
  for (const char *var : vars)
    if (const char *v = std::getenv(var)) {
      source = var;
      char *end = nullptr;
      long x = std::strtol(v, &end, 10);
      return end && *end == 0 && x >= 0 && x < (1 << 20) ? int(x) : -1;
    }
  return 0;
}

bool launchedByMpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

/// A launcher's variables: world size, rank, local rank (the GPU).
struct Launcher {
  const char *name, *size, *rank, *local;
};
/// The launchers whose variables say where a process is, the first whose
/// size variable is set winning (torchrun inside an srun step is torchrun's
/// world). Slurm's is the job step's task count, which only srun sets: a
/// process started by hand in an allocation (`salloc`, a batch script's
/// own shell) has SLURM_NTASKS and SLURM_PROCID=0 but is one rank.
constexpr Launcher kLaunchers[] = {
    {"mpirun (Open MPI)", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
     "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"torchrun", "WORLD_SIZE", "RANK", "LOCAL_RANK"},
    {"mpiexec (MPICH, PMI)", "PMI_SIZE", "PMI_RANK", "MPI_LOCALRANKID"},
    {"srun (Slurm)", "SLURM_STEP_NUM_TASKS", "SLURM_PROCID", "SLURM_LOCALID"},
};
const Launcher *launcherOf() {
  for (const Launcher &l : kLaunchers)
    if (std::getenv(l.size))
      return &l;
  return nullptr;
}

#ifdef LOOMRT_HAVE_MPI
bool mpiStartedHere = false;
/// MPI_THREAD_MULTIPLE where the library gives it: two threads may then
/// run collectives on two communicators (loomrt_comm_concurrent).
int mpiThreads = MPI_THREAD_SINGLE;
loomrt_status mpiInit(int expectSize) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &mpiThreads) != MPI_SUCCESS)
      return fail(LOOMRT_ERR_BACKEND, "comm_init: MPI_Init failed");
    mpiStartedHere = true;
    std::atexit([] {
      int fin = 0;
      MPI_Finalized(&fin);
      if (!fin)
        MPI_Finalize();
    });
  }
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != expectSize)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "comm_init: the environment asks for " + std::to_string(expectSize) +
                    " ranks but MPI sees " + std::to_string(size) +
                    " (CPU ranks are started with mpirun -np N)");
  return LOOMRT_OK;
}

/// bf16 has no MPI type: reduce the 16-bit patterns through fp32.
void bf16Reduce(void *in, void *inout, int *len, MPI_Datatype *, int op) {
  auto *a = static_cast<const uint16_t *>(in);
  auto *b = static_cast<uint16_t *>(inout);
  for (int i = 0; i < *len; ++i) {
    uint32_t ua = uint32_t(a[i]) << 16, ub = uint32_t(b[i]) << 16;
    float x, y;
    std::memcpy(&x, &ua, 4);
    std::memcpy(&y, &ub, 4);
    float r = op == 0 ? x + y : op == 1 ? std::max(x, y) : std::min(x, y);
    uint32_t u;
    std::memcpy(&u, &r, 4);
    u += 0x7fffu + ((u >> 16) & 1u); // round to nearest even
    b[i] = uint16_t(u >> 16);
  }
}
void bf16Sum(void *a, void *b, int *n, MPI_Datatype *t) { bf16Reduce(a, b, n, t, 0); }
void bf16Max(void *a, void *b, int *n, MPI_Datatype *t) { bf16Reduce(a, b, n, t, 1); }
void bf16Min(void *a, void *b, int *n, MPI_Datatype *t) { bf16Reduce(a, b, n, t, 2); }

MPI_Datatype mpiType(loomrt_dtype dt) {
  return dt == LOOMRT_BF16 ? MPI_UINT16_T : dt == LOOMRT_I64 ? MPI_INT64_T : MPI_FLOAT;
}
MPI_Op mpiOp(loomrt_dtype dt, loomrt_reduce_op op) {
  if (dt != LOOMRT_BF16)
    return op == LOOMRT_REDUCE_MAX ? MPI_MAX : op == LOOMRT_REDUCE_MIN ? MPI_MIN : MPI_SUM;
  static MPI_Op ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  int k = op == LOOMRT_REDUCE_MAX ? 1 : op == LOOMRT_REDUCE_MIN ? 2 : 0;
  if (ops[k] == MPI_OP_NULL)
    MPI_Op_create(k == 0 ? bf16Sum : k == 1 ? bf16Max : bf16Min, 1, &ops[k]);
  return ops[k];
}
#endif

#ifdef LOOMRT_HAVE_NCCL
/// Rank 0 hands the NCCL id to every other rank over TCP (MASTER_ADDR,
/// MASTER_PORT, as torchrun sets them), retrying connects until the
/// watchdog's timeout. With a job key (LOOMRT_JOB_KEY or _FILE) the id goes
/// only to ranks that prove they hold it, and strangers are dropped (auth.h);
/// without one, to whoever connects first, as NCCL's own bootstrap does with
/// its id: a shared host should set a key (docs/data-parallel.md).
loomrt_status tcpExchangeId(int rank, int size, ncclUniqueId &id) {
  namespace tcp = loomrt::tcp;
  std::vector<uint8_t> key;
  if (loomrt_status st = loomrt::auth::loadJobKey(/*required=*/false, "comm_init (NCCL)", key))
    return st;
  sockaddr_in master{};
  if (loomrt_status st = tcp::resolveMaster("NCCL ranks started without mpirun", &master))
    return st;
  tcp::Deadline deadline = tcp::deadlineIn(Watchdog::get().timeout());
  const std::string where = std::to_string(ntohs(master.sin_port));
  const int32_t world = size;
  if (rank != 0) {
    int fd = tcp::connectBefore(master, deadline);
    std::string why;
    int32_t me = rank, theirs = 0;
    bool ok = fd >= 0 &&
              (key.empty() || (loomrt::auth::handshake(fd, key, true, &me, sizeof me, &theirs,
                                                       sizeof theirs, deadline, why) &&
                               theirs == world)) &&
              tcp::recvAll(fd, &id, sizeof id);
    if (fd >= 0)
      close(fd);
    return ok ? LOOMRT_OK
              : fail(LOOMRT_ERR_BACKEND,
                     fd < 0 ? std::string("comm_init: rank 0 never listened at port ") + where
                            : "comm_init: rank 0 closed the rendezvous early" +
                                  (why.empty() ? std::string() : ": " + why));
  }
  ncclGetUniqueId(&id);
  uint32_t ip = 0;
  if (loomrt_status st = tcp::bindAddress("comm_init", master.sin_addr.s_addr, &ip))
    return st;
  uint16_t bound;
  int ls = tcp::listenOn(ip, master.sin_port, size, &bound);
  if (ls < 0)
    return fail(LOOMRT_ERR_BACKEND, std::string("comm_init: cannot listen on port ") + where +
                                        ": " + std::strerror(errno));
  loomrt_status st = LOOMRT_OK;
  for (int k = 1; k < size && st == LOOMRT_OK;) {
    int fd = tcp::acceptBefore(ls, deadline);
    if (fd < 0) {
      st = fail(LOOMRT_ERR_BACKEND, "comm_init: only " + std::to_string(k) + " of " +
                                        std::to_string(size) + " ranks took the NCCL id before "
                                        "the timeout");
      break;
    }
    std::string why;
    int32_t who = -1;
    if (!key.empty() &&
        !loomrt::auth::handshake(fd, key, false, &world, sizeof world, &who, sizeof who,
                                 std::min(deadline, tcp::deadlineIn(10)), why)) {
      std::fprintf(stderr, "loomrt: rank 0: refused a connection from %s: %s\n",
                   tcp::peerName(fd).c_str(), why.c_str());
      close(fd);
      continue;
    }
    if (!tcp::sendAll(fd, &id, sizeof id))
      st = fail(LOOMRT_ERR_BACKEND, "comm_init: handing the NCCL id to a rank failed");
    close(fd);
    ++k;
  }
  close(ls);
  return st;
}

ncclDataType_t ncclType(loomrt_dtype dt) {
  return dt == LOOMRT_BF16 ? ncclBfloat16 : dt == LOOMRT_I64 ? ncclInt64 : ncclFloat;
}
ncclRedOp_t ncclOp(loomrt_reduce_op op) {
  return op == LOOMRT_REDUCE_MAX   ? ncclMax
         : op == LOOMRT_REDUCE_MIN ? ncclMin
         : op == LOOMRT_REDUCE_MEAN ? ncclAvg
                                    : ncclSum;
}
#endif

} // namespace

struct loomrt_comm_t {
  loomrt_device dev;
  int rank;
  int size;
  Transport transport;
  uint64_t sent[LOOMRT_COLL_KIND_COUNT] = {}; // loomrt_comm_bytes_sent
  /// loomrt_comm_shape: the emulated link's bytes per second (0: none) and
  /// the device word its stamps go to.
  double shapeRate = 0;
  int64_t *shapeSlot = nullptr;
  /// A collective's link shaping: stamps the stream before the transfer is
  /// queued, and on destruction (after it) holds the stream until the
  /// bytes it sent would have crossed the emulated link.
  struct Shaped {
    loomrt_stream s = nullptr;
    const int64_t *slot = nullptr;
    int64_t ns = 0;
    Shaped() = default;
    Shaped(Shaped &&o) : s(o.s), slot(o.slot), ns(o.ns) { o.ns = 0; }
    Shaped(const Shaped &) = delete;
    ~Shaped() {
      if (ns > 0)
        s->dev->ops->shape_hold(s->impl, slot, ns);
    }
  };
  /// Counts what a collective of `bytes` sends (loomrt_collective_bytes_sent)
  /// and shapes it on stream `s`.
  Shaped count(loomrt_collective_kind kind, uint64_t bytes, loomrt_stream s) {
    uint64_t b = loomrt_collective_bytes_sent(kind, bytes, size);
    sent[kind] += b;
    Shaped sh;
    if (shapeRate > 0 && b > 0 && s && s->dev->ops->shape_stamp) {
      if (!shapeSlot && s->dev->ops->alloc(s->dev->state, LOOMRT_MEM_DEVICE, sizeof(int64_t),
                                           reinterpret_cast<void **>(&shapeSlot)) != LOOMRT_OK)
        shapeSlot = nullptr;
      if (shapeSlot && s->dev->ops->shape_stamp(s->impl, shapeSlot) == LOOMRT_OK) {
        sh.s = s;
        sh.slot = shapeSlot;
        sh.ns = int64_t(double(b) / shapeRate * 1e9);
      }
    }
    return sh;
  }
  loomrt::tcp::Group *tcp = nullptr;
#ifdef LOOMRT_HAVE_MPI
  MPI_Comm mpi = MPI_COMM_NULL;
#endif
#ifdef LOOMRT_HAVE_NCCL
  ncclComm_t nccl = nullptr;
#endif
};

namespace {

loomrt_status checkCall(const char *fn, loomrt_comm c, loomrt_stream s,
                        bool work, std::initializer_list<const void *> bufs) {
  if (!c || !s)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                std::string(fn) + ": null communicator or stream");
  if (s->dev != c->dev)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                std::string(fn) + ": stream of another device");
  if (work)
    for (const void *b : bufs)
      if (!b)
        return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                    std::string(fn) + ": null buffer");
  return LOOMRT_OK;
}

/// On one rank every collective moves the caller's own data.
loomrt_status localCopy(loomrt_stream s, void *dst, const void *src,
                        size_t bytes) {
  return dst == src ? LOOMRT_OK : loomrt_memcpy_async(s, dst, src, bytes);
}

std::string describe(const char *fn, size_t count, loomrt_dtype dt) {
  return std::string(fn) + " of " + std::to_string(count) +
         (dt == LOOMRT_BF16 ? " bf16" : " fp32") + " elements";
}

/// Runs one collective of the elastic TCP transport under the watchdog,
/// after the stream's earlier work, on host copies of the buffers when they
/// live on a GPU (the CPU backend's are host memory). `f(send, recv)`.
template <typename F>
loomrt_status tcpCall(loomrt_comm c, loomrt_stream s, const std::string &what, const void *send,
                      size_t sendBytes, void *recv, size_t recvBytes, F &&f) {
  if (loomrt_status st = loomrt_stream_synchronize(s))
    return st;
  Guard g(what);
  if (c->dev->kind == LOOMRT_BACKEND_CPU)
    return f(send, recv);
  std::vector<char> hs(sendBytes), hr(recvBytes);
  if (sendBytes > 0)
    if (loomrt_status st = loomrt_memcpy_async(s, hs.data(), send, sendBytes))
      return st;
  if (loomrt_status st = loomrt_stream_synchronize(s))
    return st;
  if (loomrt_status st = f(static_cast<const void *>(hs.data()), static_cast<void *>(hr.data())))
    return st;
  if (recvBytes > 0)
    if (loomrt_status st = loomrt_memcpy_async(s, recv, hr.data(), recvBytes))
      return st;
  return loomrt_stream_synchronize(s);
}

#ifdef LOOMRT_HAVE_MPI
/// Runs one blocking MPI call under the watchdog, after the stream's
/// earlier work (the CPU backend runs work at enqueue; this is for order).
template <typename F>
loomrt_status mpiCall(loomrt_stream s, const std::string &what, F &&f, size_t count) {
  // MPI counts are int.
  if (count > size_t(INT32_MAX))
    return fail(LOOMRT_ERR_UNSUPPORTED,
                "MPI " + what + ": more than 2^31-1 elements in one call");
  if (loomrt_status st = loomrt_stream_synchronize(s))
    return st;
  Guard g(what);
  int rc = f();
  if (rc != MPI_SUCCESS)
    return fail(LOOMRT_ERR_BACKEND, "MPI " + what + " failed (code " + std::to_string(rc) + ")");
  return LOOMRT_OK;
}
/// fp32 sums in rank order: each rank receives every rank's block of its
/// chunk (MPI_Alltoall) and adds them 0, 1, ..., R-1. MPI's own reductions
/// choose their order by algorithm, which Open MPI picks by world size and
/// message size, and its all-reduce and reduce-scatter differ at 4 ranks;
/// in rank order every element of an all-reduce and of a reduce-scatter is
/// the same float, so ZeRO stages 0, 1 and 2 reduce a gradient to the same
/// bits (1-bit Adam's sign compression turns a last-bit difference into a
/// different run: test/Integration/onebit_adam.py). The volume each rank
/// sends is a ring reduce-scatter's, (R-1)/R of the buffer.
int orderedSumScatter(MPI_Comm comm, int size, const float *send, float *recv, size_t chunk) {
  std::vector<float> all(chunk * size_t(size));
  int rc = MPI_Alltoall(send, int(chunk), MPI_FLOAT, all.data(), int(chunk), MPI_FLOAT, comm);
  if (rc != MPI_SUCCESS)
    return rc;
  for (size_t i = 0; i < chunk; ++i) {
    float acc = all[i];
    for (int r = 1; r < size; ++r)
      acc += all[size_t(r) * chunk + i];
    recv[i] = acc;
  }
  return MPI_SUCCESS;
}
/// An all-reduce in rank order: the scatter above over chunks of
/// ceil(count/R) (the last padded), then an all-gather.
int orderedSumAll(MPI_Comm comm, int size, const float *send, float *recv, size_t count) {
  size_t chunk = (count + size_t(size) - 1) / size_t(size);
  std::vector<float> in(chunk * size_t(size), 0.0f), mine(chunk), out(chunk * size_t(size));
  std::memcpy(in.data(), send, count * sizeof(float));
  int rc = orderedSumScatter(comm, size, in.data(), mine.data(), chunk);
  if (rc == MPI_SUCCESS)
    rc = MPI_Allgather(mine.data(), int(chunk), MPI_FLOAT, out.data(), int(chunk), MPI_FLOAT, comm);
  if (rc == MPI_SUCCESS)
    std::memcpy(recv, out.data(), count * sizeof(float));
  return rc;
}
bool orderedSum(loomrt_dtype dt, loomrt_reduce_op op) {
  return dt == LOOMRT_F32 && (op == LOOMRT_REDUCE_SUM || op == LOOMRT_REDUCE_MEAN);
}
/// MEAN: MPI has no average; divide after the sum.
void scaleMean(void *buf, size_t n, loomrt_dtype dt, int size) {
  float inv = 1.0f / float(size);
  if (dt == LOOMRT_BF16) {
    auto *p = static_cast<uint16_t *>(buf);
    for (size_t i = 0; i < n; ++i) {
      uint32_t u = uint32_t(p[i]) << 16;
      float x;
      std::memcpy(&x, &u, 4);
      x *= inv;
      std::memcpy(&u, &x, 4);
      u += 0x7fffu + ((u >> 16) & 1u);
      p[i] = uint16_t(u >> 16);
    }
  } else {
    auto *p = static_cast<float *>(buf);
    for (size_t i = 0; i < n; ++i)
      p[i] *= inv;
  }
}
#endif

#ifdef LOOMRT_HAVE_NCCL
gpuStream_t gpuStreamOf(loomrt_stream s) { return static_cast<gpuStream_t>(s->impl); }
/// Checks an NCCL call and hands the watchdog an event after it.
loomrt_status ncclDone(loomrt_stream s, const std::string &what, ncclResult_t r) {
  if (r != ncclSuccess)
    return fail(LOOMRT_ERR_BACKEND, "NCCL " + what + " failed: " + ncclGetErrorString(r));
  gpuEvent_t ev;
  if (gpuEventCreateNoTiming(&ev) == gpuSuccess) {
    (void)gpuEventRecord(ev, gpuStreamOf(s));
    Watchdog::get().begin(what, ev);
  }
  return LOOMRT_OK;
}
#endif

} // namespace

extern "C" {

loomrt_status loomrt_comm_init_from_env(loomrt_device dev, loomrt_comm *out) {
  if (!dev || !out)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "comm_init: null argument");
  std::string sizeVar, rankVar;
  const Launcher *l = launcherOf();
  int size = l ? envInt({l->size}, sizeVar) : 0;
  int rank = l ? envInt({l->rank}, rankVar) : 0;
  if (l && size > 1 && !std::getenv(l->rank))
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, std::string("comm_init: ") + l->size + " is set (" +
                                                 l->name + ") but " + l->rank + " is not");
  if (size < 0 || rank < 0)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "comm_init: " + (size < 0 ? sizeVar : rankVar) +
                    " must be a non-negative integer");
  if (size <= 1) {
    *out = new loomrt_comm_t{dev, 0, 1, Transport::Self};
    return LOOMRT_OK;
  }
  if (rank >= size)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "comm_init: " + rankVar + "=" + std::to_string(rank) + " is not below " +
                    sizeVar + "=" + std::to_string(size));
  termRank = rank;
  std::signal(SIGTERM, onTerm);
  auto *c = new loomrt_comm_t{dev, rank, size, Transport::Self};
  const char *forced = std::getenv("LOOMRT_TRANSPORT");
  if (forced && std::strcmp(forced, "tcp") != 0 && std::strcmp(forced, "auto") != 0) {
    delete c;
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                std::string("comm_init: LOOMRT_TRANSPORT='") + forced +
                    "' is not a transport (tcp, or auto: MPI for CPU ranks under mpirun, NCCL "
                    "for GPUs, TCP for CPU ranks started with MASTER_ADDR)");
  }
  if ((forced && std::strcmp(forced, "tcp") == 0) ||
      (dev->kind == LOOMRT_BACKEND_CPU && !launchedByMpirun() && std::getenv("MASTER_ADDR"))) {
    if (loomrt_status st = loomrt::tcp::join(rank, size, Watchdog::get().timeout(), &c->tcp)) {
      delete c;
      return st;
    }
    c->transport = Transport::Tcp;
    Watchdog::get().setIdentity(rank, size, nullptr);
    *out = c;
    return LOOMRT_OK;
  }
  if (dev->kind == LOOMRT_BACKEND_CPU) {
#ifdef LOOMRT_HAVE_MPI
    if (!launchedByMpirun()) {
      delete c;
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  "comm_init: " + sizeVar + "=" + std::to_string(size) +
                      ": CPU ranks communicate over MPI (start them with mpirun -np " +
                      std::to_string(size) +
                      ") or, started torchrun-style, over TCP (set MASTER_ADDR and "
                      "MASTER_PORT)");
    }
    if (loomrt_status st = mpiInit(size)) {
      delete c;
      return st;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi);
    c->transport = Transport::Mpi;
    Watchdog::get().setIdentity(rank, size, nullptr);
    *out = c;
    return LOOMRT_OK;
#else
    delete c;
    return fail(LOOMRT_ERR_UNSUPPORTED,
                "comm_init: " + sizeVar + "=" + std::to_string(size) +
                    " asks for several CPU ranks, but this runtime was built without "
                    "MPI (install libopenmpi-dev and rebuild)");
#endif
  }
#ifdef LOOMRT_HAVE_NCCL
  if (dev->kind == LOOMRT_BACKEND_CUDA || dev->kind == LOOMRT_BACKEND_HIP) {
#if defined(LOOMRT_GPU_HIP)
    if (*loomrt::rcclLoadError()) {
      delete c;
      return fail(LOOMRT_ERR_UNSUPPORTED, std::string("comm_init: ") + sizeVar + "=" +
                                              std::to_string(size) + " asks for several HIP "
                                              "ranks: " + loomrt::rcclLoadError());
    }
#endif
    ncclUniqueId id{};
    loomrt_status st = LOOMRT_OK;
#ifdef LOOMRT_HAVE_MPI
    if (launchedByMpirun()) {
      st = mpiInit(size);
      if (st == LOOMRT_OK) {
        if (rank == 0)
          ncclGetUniqueId(&id);
        MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
      }
    } else
#endif
      st = tcpExchangeId(rank, size, id);
    if (st != LOOMRT_OK) {
      delete c;
      return st;
    }
    Guard g("NCCL communicator setup");
    ncclResult_t r = ncclCommInitRank(&c->nccl, size, id, rank);
    if (r != ncclSuccess) {
      delete c;
      return fail(LOOMRT_ERR_BACKEND,
                  std::string("comm_init: ncclCommInitRank failed: ") + ncclGetErrorString(r));
    }
    c->transport = Transport::Nccl;
    ncclComm_t nc = c->nccl;
    Watchdog::get().setIdentity(rank, size, [nc] { ncclCommAbort(nc); });
    *out = c;
    return LOOMRT_OK;
  }
#endif
  delete c;
  return fail(LOOMRT_ERR_UNSUPPORTED,
              std::string("comm_init: ") + sizeVar + "=" + std::to_string(size) +
                  " asks for several ranks on a " + loomrt_backend_name(dev->kind) +
                  " device, but this runtime has no transport for it (NCCL for CUDA "
                  "needs nccl.h and libnccl at build time; RCCL for HIP is loaded at run time)");
}

int loomrt_local_rank(void) {
  // The local rank of the launcher that set the world (its own variable;
  // LOCAL_RANK, which torchrun sets and users export by hand, otherwise).
  std::string var;
  const Launcher *l = launcherOf();
  int r = l && std::getenv(l->local) ? envInt({l->local}, var) : envInt({"LOCAL_RANK"}, var);
  return r > 0 ? r : 0;
}

int loomrt_comm_rank(loomrt_comm c) { return c ? c->rank : -1; }
loomrt_status loomrt_comm_shape(loomrt_comm c, double bytes_per_second) {
  if (!c || !(bytes_per_second >= 0) || !std::isfinite(bytes_per_second))
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "comm_shape: a rate of 0 or more bytes a second");
  if (bytes_per_second > 0 && !c->dev->ops->shape_stamp)
    return fail(LOOMRT_ERR_UNSUPPORTED, "comm_shape: this backend cannot shape links");
  c->shapeRate = bytes_per_second;
  return LOOMRT_OK;
}

uint64_t loomrt_comm_bytes_sent(loomrt_comm c, int kind) {
  if (!c || kind >= LOOMRT_COLL_KIND_COUNT)
    return 0;
  if (kind >= 0)
    return c->sent[kind];
  uint64_t total = 0;
  for (uint64_t b : c->sent)
    total += b;
  return total;
}
int loomrt_comm_size(loomrt_comm c) { return c ? c->size : 0; }

int loomrt_comm_peer(loomrt_comm c, int offset) {
  if (!c)
    return -1;
  int64_t p = int64_t(c->rank) + offset;
  return p >= 0 && p < c->size ? int(p) : -1;
}

loomrt_status loomrt_comm_split(loomrt_comm c, int color, int key, loomrt_comm *out) {
  if (!c || !out)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "comm_split: null argument");
  if (c->transport == Transport::Self) {
    *out = new loomrt_comm_t{c->dev, 0, 1, Transport::Self};
    return LOOMRT_OK;
  }
#ifdef LOOMRT_HAVE_MPI
  if (c->transport == Transport::Mpi) {
    auto *s = new loomrt_comm_t{c->dev, 0, 1, Transport::Mpi};
    MPI_Comm_split(c->mpi, color, key, &s->mpi);
    MPI_Comm_rank(s->mpi, &s->rank);
    MPI_Comm_size(s->mpi, &s->size);
    *out = s;
    return LOOMRT_OK;
  }
#endif
#ifdef LOOMRT_HAVE_NCCL
  if (c->transport == Transport::Nccl) {
    auto *s = new loomrt_comm_t{c->dev, 0, 1, Transport::Nccl};
    ncclResult_t r = ncclCommSplit(c->nccl, color, key, &s->nccl, nullptr);
    if (r != ncclSuccess) {
      delete s;
      return fail(LOOMRT_ERR_BACKEND, std::string("comm_split: ") + ncclGetErrorString(r));
    }
    ncclCommUserRank(s->nccl, &s->rank);
    ncclCommCount(s->nccl, &s->size);
    *out = s;
    return LOOMRT_OK;
  }
#endif
  (void)color, (void)key;
  if (c->transport == Transport::Tcp)
    return fail(LOOMRT_ERR_UNSUPPORTED,
                "comm_split: the elastic TCP transport has no sub-groups yet (one level: "
                "DiLoCo's replicas of one rank each)");
  return fail(LOOMRT_ERR_UNSUPPORTED, "comm_split: unknown transport");
}

loomrt_status loomrt_comm_split_levels(loomrt_comm c, uint64_t levels, int numLevels,
                                       const int64_t *sizes, int64_t outerRanks, int *spansOuter,
                                       loomrt_comm *out) {
  if (!c || !out || (numLevels > 0 && !sizes))
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "comm_split_levels: null argument");
  int64_t world = 1;
  for (int i = 0; i < numLevels; ++i) {
    if (sizes[i] < 1)
      return fail(LOOMRT_ERR_INVALID_ARGUMENT, "comm_split_levels: a level of no ranks");
    world *= sizes[i];
  }
  if (world != c->size || numLevels > 64)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "comm_split_levels: the topology's " + std::to_string(world) +
                    " ranks are not the " + std::to_string(c->size) + " the job has");
  // A rank's color (the other levels' digits) and key (the group's).
  auto split = [&](int64_t rank, int64_t &color, int64_t &key) {
    int64_t stride = 1, cStride = 1, kStride = 1;
    color = key = 0;
    for (int i = 0; i < numLevels; ++i) {
      int64_t d = (rank / stride) % sizes[i];
      stride *= sizes[i];
      if (levels >> i & 1)
        key += d * kStride, kStride *= sizes[i];
      else
        color += d * cStride, cStride *= sizes[i];
    }
  };
  int64_t color = 0, key = 0;
  split(c->rank, color, key);
  if (spansOuter) {
    // The group's members are the ranks of this color.
    int64_t lo = INT64_MAX, hi = -1;
    for (int64_t r = 0; r < world && outerRanks > 0; ++r) {
      int64_t col = 0, k = 0;
      split(r, col, k);
      if (col == color)
        lo = std::min(lo, r / outerRanks), hi = std::max(hi, r / outerRanks);
    }
    *spansOuter = hi > lo;
  }
  return loomrt_comm_split(c, int(color), int(key), out);
}

loomrt_status loomrt_comm_dup(loomrt_comm c, loomrt_comm *out) {
  if (!c || !out)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "comm_dup: null argument");
  auto *d = new loomrt_comm_t{c->dev, c->rank, c->size, c->transport};
  loomrt_status st = LOOMRT_OK;
  if (c->transport == Transport::Tcp)
    st = loomrt::tcp::dup(c->tcp, Watchdog::get().timeout(), &d->tcp);
#ifdef LOOMRT_HAVE_MPI
  if (c->transport == Transport::Mpi && MPI_Comm_dup(c->mpi, &d->mpi) != MPI_SUCCESS)
    st = fail(LOOMRT_ERR_BACKEND, "comm_dup: MPI_Comm_dup failed");
#endif
#ifdef LOOMRT_HAVE_NCCL
  if (c->transport == Transport::Nccl) {
    ncclResult_t r = ncclCommSplit(c->nccl, 0, c->rank, &d->nccl, nullptr);
    if (r != ncclSuccess)
      st = fail(LOOMRT_ERR_BACKEND, std::string("comm_dup: ") + ncclGetErrorString(r));
  }
#endif
  if (st != LOOMRT_OK) {
    delete d;
    return st;
  }
  d->shapeRate = c->shapeRate; // the same link
  *out = d;
  return LOOMRT_OK;
}

loomrt_status loomrt_comm_set_elastic(loomrt_comm c, int allowed) {
  if (!c)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "comm_set_elastic: null communicator");
  if (c->transport == Transport::Tcp)
    loomrt::tcp::setShrinkable(c->tcp, allowed != 0);
  return LOOMRT_OK;
}

int loomrt_comm_live(loomrt_comm c) {
  if (!c)
    return 0;
  return c->transport == Transport::Tcp ? loomrt::tcp::live(c->tcp) : c->size;
}

int loomrt_comm_concurrent(loomrt_comm c) {
  if (!c)
    return 0;
  switch (c->transport) {
  case Transport::Self:
  case Transport::Tcp:
    return 1;
  case Transport::Mpi:
#ifdef LOOMRT_HAVE_MPI
    return mpiThreads == MPI_THREAD_MULTIPLE;
#else
    return 0;
#endif
  case Transport::Nccl:
    // Two communicators' kernels on one GPU may wait on each other in
    // different orders on different ranks (NCCL's documentation).
    return 0;
  }
  return 0;
}

void loomrt_comm_destroy(loomrt_comm c) {
  if (!c)
    return;
  loomrt::tcp::destroy(c->tcp);
  if (c->shapeSlot)
    c->dev->ops->free(c->dev->state, LOOMRT_MEM_DEVICE, c->shapeSlot);
#ifdef LOOMRT_HAVE_MPI
  if (c->mpi != MPI_COMM_NULL)
    MPI_Comm_free(&c->mpi);
#endif
#ifdef LOOMRT_HAVE_NCCL
  if (c->nccl)
    ncclCommDestroy(c->nccl);
#endif
  delete c;
}

loomrt_status loomrt_all_reduce(loomrt_comm c, loomrt_stream s, loomrt_dtype dt,
                                const void *send, void *recv, size_t count,
                                loomrt_reduce_op op) {
  if (loomrt_status st = checkCall("all_reduce", c, s, count, {send, recv}))
    return st;
  auto shaped = c->count(LOOMRT_COLL_ALL_REDUCE, uint64_t(count * esize(dt)), s);
  if (c->transport == Transport::Self || count == 0)
    return localCopy(s, recv, send, count * esize(dt));
  if (c->transport == Transport::Tcp)
    return tcpCall(c, s, describe("all_reduce", count, dt), send, count * esize(dt), recv,
                   count * esize(dt), [&](const void *in, void *o) {
                     return loomrt::tcp::allReduce(c->tcp, dt, in, o, count, op);
                   });
#ifdef LOOMRT_HAVE_MPI
  if (c->transport == Transport::Mpi) {
    loomrt_status st = mpiCall(s, describe("all_reduce", count, dt), [&] {
      if (orderedSum(dt, op))
        return orderedSumAll(c->mpi, c->size, static_cast<const float *>(send),
                             static_cast<float *>(recv), count);
      return MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, int(count), mpiType(dt),
                           mpiOp(dt, op), c->mpi);
    }, count + size_t(c->size));
    if (st == LOOMRT_OK && op == LOOMRT_REDUCE_MEAN)
      scaleMean(recv, count, dt, c->size);
    return st;
  }
#endif
#ifdef LOOMRT_HAVE_NCCL
  return ncclDone(s, describe("all_reduce", count, dt),
                  ncclAllReduce(send, recv, count, ncclType(dt), ncclOp(op), c->nccl,
                                gpuStreamOf(s)));
#endif
  (void)op;
  return fail(LOOMRT_ERR_UNSUPPORTED, "all_reduce: unknown transport");
}

loomrt_status loomrt_reduce_scatter(loomrt_comm c, loomrt_stream s, loomrt_dtype dt,
                                    const void *send, void *recv, size_t recvCount,
                                    loomrt_reduce_op op) {
  if (loomrt_status st = checkCall("reduce_scatter", c, s, recvCount, {send, recv}))
    return st;
  auto shaped = c->count(LOOMRT_COLL_REDUCE_SCATTER, uint64_t(recvCount * esize(dt)), s);
  if (c->transport == Transport::Self || recvCount == 0)
    return localCopy(s, recv, send, recvCount * esize(dt));
  if (c->transport == Transport::Tcp)
    return tcpCall(c, s, describe("reduce_scatter", recvCount * c->size, dt), send,
                   recvCount * esize(dt) * size_t(c->size), recv, recvCount * esize(dt),
                   [&](const void *in, void *o) {
                     return loomrt::tcp::reduceScatter(c->tcp, dt, in, o, recvCount, op);
                   });
#ifdef LOOMRT_HAVE_MPI
  if (c->transport == Transport::Mpi) {
    loomrt_status st = mpiCall(s, describe("reduce_scatter", recvCount * c->size, dt), [&] {
      if (orderedSum(dt, op))
        return orderedSumScatter(c->mpi, c->size, static_cast<const float *>(send),
                                 static_cast<float *>(recv), recvCount);
      return MPI_Reduce_scatter_block(send, recv, int(recvCount), mpiType(dt), mpiOp(dt, op),
                                      c->mpi);
    }, recvCount * size_t(c->size));
    if (st == LOOMRT_OK && op == LOOMRT_REDUCE_MEAN)
      scaleMean(recv, recvCount, dt, c->size);
    return st;
  }
#endif
#ifdef LOOMRT_HAVE_NCCL
  return ncclDone(s, describe("reduce_scatter", recvCount * c->size, dt),
                  ncclReduceScatter(send, recv, recvCount, ncclType(dt), ncclOp(op), c->nccl,
                                    gpuStreamOf(s)));
#endif
  (void)op;
  return fail(LOOMRT_ERR_UNSUPPORTED, "reduce_scatter: unknown transport");
}

loomrt_status loomrt_all_gather(loomrt_comm c, loomrt_stream s, loomrt_dtype dt,
                                const void *send, void *recv, size_t sendCount) {
  if (loomrt_status st = checkCall("all_gather", c, s, sendCount, {send, recv}))
    return st;
  auto shaped = c->count(LOOMRT_COLL_ALL_GATHER, uint64_t(sendCount * esize(dt)), s);
  if (c->transport == Transport::Self || sendCount == 0)
    return localCopy(s, recv, send, sendCount * esize(dt));
  if (c->transport == Transport::Tcp)
    return tcpCall(c, s, describe("all_gather", sendCount * c->size, dt), send,
                   sendCount * esize(dt), recv, sendCount * esize(dt) * size_t(c->size),
                   [&](const void *in, void *o) {
                     return loomrt::tcp::allGather(c->tcp, in, o, sendCount * esize(dt));
                   });
#ifdef LOOMRT_HAVE_MPI
  if (c->transport == Transport::Mpi)
    return mpiCall(s, describe("all_gather", sendCount * c->size, dt), [&] {
      return MPI_Allgather(send, int(sendCount), mpiType(dt), recv, int(sendCount), mpiType(dt),
                           c->mpi);
    }, sendCount * size_t(c->size));
#endif
#ifdef LOOMRT_HAVE_NCCL
  return ncclDone(s, describe("all_gather", sendCount * c->size, dt),
                  ncclAllGather(send, recv, sendCount, ncclType(dt), c->nccl, gpuStreamOf(s)));
#endif
  return fail(LOOMRT_ERR_UNSUPPORTED, "all_gather: unknown transport");
}

loomrt_status loomrt_all_gather_bytes(loomrt_comm c, loomrt_stream s, const void *send,
                                      void *recv, size_t bytes) {
  if (loomrt_status st = checkCall("all_gather_bytes", c, s, bytes, {send, recv}))
    return st;
  auto shaped = c->count(LOOMRT_COLL_ALL_GATHER, uint64_t(bytes), s);
  if (c->transport == Transport::Self || bytes == 0)
    return localCopy(s, recv, send, bytes);
  std::string what = "all_gather of " + std::to_string(bytes) + " bytes per rank";
  if (c->transport == Transport::Tcp)
    return tcpCall(c, s, what, send, bytes, recv, bytes * size_t(c->size),
                   [&](const void *in, void *o) {
                     return loomrt::tcp::allGather(c->tcp, in, o, bytes);
                   });
#ifdef LOOMRT_HAVE_MPI
  if (c->transport == Transport::Mpi)
    return mpiCall(s, what, [&] {
      return MPI_Allgather(send, int(bytes), MPI_BYTE, recv, int(bytes), MPI_BYTE, c->mpi);
    }, bytes * size_t(c->size));
#endif
#ifdef LOOMRT_HAVE_NCCL
  return ncclDone(s, what, ncclAllGather(send, recv, bytes, ncclInt8, c->nccl, gpuStreamOf(s)));
#endif
  return fail(LOOMRT_ERR_UNSUPPORTED, "all_gather_bytes: unknown transport");
}

loomrt_status loomrt_all_to_all(loomrt_comm c, loomrt_stream s, const void *send,
                                void *recv, size_t bytes) {
  if (loomrt_status st = checkCall("all_to_all", c, s, bytes, {send, recv}))
    return st;
  auto shaped = c->count(LOOMRT_COLL_ALL_TO_ALL, uint64_t(bytes), s);
  if (c->transport == Transport::Self || bytes == 0)
    return localCopy(s, recv, send, bytes);
  std::string what = "all_to_all of " + std::to_string(bytes) + " bytes per rank";
  if (c->transport == Transport::Tcp)
    return tcpCall(c, s, what, send, bytes * size_t(c->size), recv, bytes * size_t(c->size),
                   [&](const void *in, void *o) {
                     return loomrt::tcp::allToAll(c->tcp, in, o, bytes);
                   });
#ifdef LOOMRT_HAVE_MPI
  if (c->transport == Transport::Mpi)
    return mpiCall(s, what, [&] {
      return MPI_Alltoall(send, int(bytes), MPI_BYTE, recv, int(bytes), MPI_BYTE, c->mpi);
    }, bytes * size_t(c->size));
#endif
#ifdef LOOMRT_HAVE_NCCL
  // This rank's own chunk by a device copy on the stream (HBM speed), not
  // through NCCL's send-to-self, whose few point-to-point channels moved it
  // at NVLink's per-channel rate: half an expert exchange's bytes
  // (bench/RESULTS.md, 2026-11-30, session 20).
  if (loomrt_status st = localCopy(s, static_cast<char *>(recv) + size_t(c->rank) * bytes,
                                   static_cast<const char *>(send) + size_t(c->rank) * bytes,
                                   bytes))
    return st;
  ncclGroupStart();
  for (int j = 0; j < c->size; ++j) {
    if (j == c->rank)
      continue;
    ncclSend(static_cast<const char *>(send) + j * bytes, bytes, ncclInt8, j, c->nccl,
             gpuStreamOf(s));
    ncclRecv(static_cast<char *>(recv) + j * bytes, bytes, ncclInt8, j, c->nccl,
             gpuStreamOf(s));
  }
  return ncclDone(s, what, ncclGroupEnd());
#endif
  return fail(LOOMRT_ERR_UNSUPPORTED, "all_to_all: unknown transport");
}

loomrt_status loomrt_broadcast(loomrt_comm c, loomrt_stream s, void *buf, size_t bytes,
                               int root) {
  if (loomrt_status st = checkCall("broadcast", c, s, bytes, {buf}))
    return st;
  if (root < 0 || root >= c->size)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "broadcast: root " + std::to_string(root) +
                    " is not a rank of a communicator of " + std::to_string(c->size));
  auto shaped = c->count(LOOMRT_COLL_BROADCAST, uint64_t(bytes), s);
  if (c->transport == Transport::Self || bytes == 0)
    return LOOMRT_OK;
  std::string what = "broadcast of " + std::to_string(bytes) + " bytes";
  if (c->transport == Transport::Tcp)
    return tcpCall(c, s, what, buf, bytes, buf, bytes, [&](const void *in, void *o) {
      if (in != o)
        std::memcpy(o, in, bytes);
      return loomrt::tcp::broadcast(c->tcp, o, bytes, root);
    });
#ifdef LOOMRT_HAVE_MPI
  if (c->transport == Transport::Mpi)
    return mpiCall(s, what, [&] { return MPI_Bcast(buf, int(bytes), MPI_BYTE, root, c->mpi); },
                   bytes);
#endif
#ifdef LOOMRT_HAVE_NCCL
  return ncclDone(s, what,
                  ncclBroadcast(buf, buf, bytes, ncclInt8, root, c->nccl, gpuStreamOf(s)));
#endif
  return fail(LOOMRT_ERR_UNSUPPORTED, "broadcast: unknown transport");
}

loomrt_status loomrt_send_recv(loomrt_comm c, loomrt_stream s, const void *send,
                               size_t sendBytes, int dest, void *recv, size_t recvBytes,
                               int src) {
  if (loomrt_status st = checkCall("send_recv", c, s, false, {}))
    return st;
  for (auto [who, peer, buf, n] : {std::tuple{"dest", dest, send, sendBytes},
                                   std::tuple{"src", src, static_cast<const void *>(recv), recvBytes}}) {
    if (peer < -1 || peer >= c->size)
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  std::string("send_recv: ") + who + " " + std::to_string(peer) +
                      " is not a rank of a communicator of " + std::to_string(c->size) +
                      " (-1: none)");
    if (peer >= 0 && n > 0 && !buf)
      return fail(LOOMRT_ERR_INVALID_ARGUMENT, std::string("send_recv: null buffer for ") + who);
  }
  // A rank that names itself sends to itself: the one message is a copy.
  if (dest == c->rank || src == c->rank) {
    if (dest != src)
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  "send_recv: rank " + std::to_string(c->rank) +
                      " sends to or receives from itself but not both (dest " +
                      std::to_string(dest) + ", src " + std::to_string(src) + ")");
    if (sendBytes != recvBytes)
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  "send_recv: to itself, " + std::to_string(sendBytes) + " bytes sent but " +
                      std::to_string(recvBytes) + " received");
    return sendBytes ? localCopy(s, recv, send, sendBytes) : LOOMRT_OK;
  }
  auto shaped = c->count(LOOMRT_COLL_SEND_RECV, dest >= 0 ? uint64_t(sendBytes) : 0, s);
  if (dest < 0 && src < 0)
    return LOOMRT_OK;
  std::string what = "send_recv of " + std::to_string(dest >= 0 ? sendBytes : 0) +
                     " bytes to rank " + std::to_string(dest) + " and " +
                     std::to_string(src >= 0 ? recvBytes : 0) + " from rank " + std::to_string(src);
  if (c->transport == Transport::Tcp)
    return tcpCall(c, s, what, send, dest >= 0 ? sendBytes : 0, recv, src >= 0 ? recvBytes : 0,
                   [&](const void *in, void *o) {
                     return loomrt::tcp::sendRecv(c->tcp, in, sendBytes, dest, o, recvBytes, src);
                   });
#ifdef LOOMRT_HAVE_MPI
  if (c->transport == Transport::Mpi)
    return mpiCall(s, what, [&] {
      if (dest >= 0 && src >= 0)
        return MPI_Sendrecv(send, int(sendBytes), MPI_BYTE, dest, 0, recv, int(recvBytes),
                            MPI_BYTE, src, 0, c->mpi, MPI_STATUS_IGNORE);
      if (dest >= 0)
        return MPI_Send(send, int(sendBytes), MPI_BYTE, dest, 0, c->mpi);
      return MPI_Recv(recv, int(recvBytes), MPI_BYTE, src, 0, c->mpi, MPI_STATUS_IGNORE);
    }, std::max(sendBytes, recvBytes));
#endif
#ifdef LOOMRT_HAVE_NCCL
  ncclGroupStart();
  if (dest >= 0)
    ncclSend(send, sendBytes, ncclInt8, dest, c->nccl, gpuStreamOf(s));
  if (src >= 0)
    ncclRecv(recv, recvBytes, ncclInt8, src, c->nccl, gpuStreamOf(s));
  return ncclDone(s, what, ncclGroupEnd());
#endif
  return fail(LOOMRT_ERR_UNSUPPORTED, "send_recv: unknown transport");
}

} // extern "C"
