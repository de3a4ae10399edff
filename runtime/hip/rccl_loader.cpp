// rccl_loader.cpp: NCCL's API (hip/rccl_api.h) forwarded to librccl.so,
// loaded on first use.
#include "hip/rccl_api.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

namespace {

struct Rccl {
  void *handle = nullptr;
  std::string error;
};

Rccl &rccl() {
  static Rccl lib;
  static std::once_flag once;
  std::call_once(once, [] {
    for (const char *name : {"librccl.so", "librccl.so.1"})
      if ((lib.handle = dlopen(name, RTLD_NOW | RTLD_GLOBAL)))
        return;
    const char *why = dlerror();
    lib.error = std::string("librccl.so (ROCm's RCCL) could not be loaded: ") +
                (why ? why : "not found") +
                "; install RCCL or add its folder to LD_LIBRARY_PATH";
  });
  return lib;
}

/// The library's `name`, or null (the loader's or the symbol's error kept).
template <typename F> F *symbol(const char *name) {
  Rccl &lib = rccl();
  if (!lib.handle)
    return nullptr;
  return reinterpret_cast<F *>(dlsym(lib.handle, name));
}
thread_local std::string missingSymbol;

} // namespace

namespace loomrt {
const char *rcclLoadError() { return rccl().error.c_str(); }
} // namespace loomrt

// Each entry point: look the symbol up once, forward, or report.
#define LOOMRT_RCCL_FORWARD(name, params, args)                                                    \
  ncclResult_t name params {                                                                       \
    using F = ncclResult_t params;                                                                 \
    static F *fn = symbol<F>(#name);                                                               \
    if (!fn) {                                                                                     \
      missingSymbol = rccl().handle ? std::string("librccl.so has no ") + #name : rccl().error;    \
      return ncclSystemError;                                                                      \
    }                                                                                              \
    missingSymbol.clear();                                                                         \
    return fn args;                                                                                \
  }

LOOMRT_RCCL_FORWARD(ncclGetUniqueId, (ncclUniqueId * id), (id))
LOOMRT_RCCL_FORWARD(ncclCommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId id, int rank),
                    (comm, nranks, id, rank))
LOOMRT_RCCL_FORWARD(ncclCommSplit,
                    (ncclComm_t comm, int color, int key, ncclComm_t *out, ncclConfig_t *config),
                    (comm, color, key, out, config))
LOOMRT_RCCL_FORWARD(ncclCommUserRank, (ncclComm_t comm, int *rank), (comm, rank))
LOOMRT_RCCL_FORWARD(ncclCommCount, (ncclComm_t comm, int *count), (comm, count))
LOOMRT_RCCL_FORWARD(ncclCommAbort, (ncclComm_t comm), (comm))
LOOMRT_RCCL_FORWARD(ncclCommDestroy, (ncclComm_t comm), (comm))
LOOMRT_RCCL_FORWARD(ncclAllReduce,
                    (const void *send, void *recv, size_t count, ncclDataType_t dt,
                     ncclRedOp_t op, ncclComm_t comm, hipStream_t stream),
                    (send, recv, count, dt, op, comm, stream))
LOOMRT_RCCL_FORWARD(ncclReduceScatter,
                    (const void *send, void *recv, size_t count, ncclDataType_t dt,
                     ncclRedOp_t op, ncclComm_t comm, hipStream_t stream),
                    (send, recv, count, dt, op, comm, stream))
LOOMRT_RCCL_FORWARD(ncclAllGather,
                    (const void *send, void *recv, size_t count, ncclDataType_t dt,
                     ncclComm_t comm, hipStream_t stream),
                    (send, recv, count, dt, comm, stream))
LOOMRT_RCCL_FORWARD(ncclBroadcast,
                    (const void *send, void *recv, size_t count, ncclDataType_t dt, int root,
                     ncclComm_t comm, hipStream_t stream),
                    (send, recv, count, dt, root, comm, stream))
LOOMRT_RCCL_FORWARD(ncclSend,
                    (const void *send, size_t count, ncclDataType_t dt, int peer,
                     ncclComm_t comm, hipStream_t stream),
                    (send, count, dt, peer, comm, stream))
LOOMRT_RCCL_FORWARD(ncclRecv,
                    (void *recv, size_t count, ncclDataType_t dt, int peer, ncclComm_t comm,
                     hipStream_t stream),
                    (recv, count, dt, peer, comm, stream))
LOOMRT_RCCL_FORWARD(ncclGroupStart, (), ())
LOOMRT_RCCL_FORWARD(ncclGroupEnd, (), ())

const char *ncclGetErrorString(ncclResult_t r) {
  using F = const char *(ncclResult_t);
  static F *fn = symbol<F>("ncclGetErrorString");
  if (r == ncclSystemError && !missingSymbol.empty())
    return missingSymbol.c_str();
  return fn ? fn(r) : rccl().error.c_str();
}
