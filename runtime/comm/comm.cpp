// comm.cpp: communicators and collectives. The one-rank world is complete
// here; multi-rank transports (NCCL on GPUs, MPI on CPUs) plug in behind the
// same entry points with the data-parallel work.
#include "common/backend.h"

#include <cstdlib>
#include <string>

struct loomrt_comm_t {
  loomrt_device dev;
  int rank;
  int size;
};

using loomrt::fail;

namespace {

/// World size from mpirun's or the torchrun-style variables; 1 without.
int envWorldSize(std::string &source) {
  for (const char *var : {"OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"}) {
    if (const char *v = std::getenv(var)) {
      source = var;
      return std::atoi(v);
    }
  }
  return 1;
}

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

size_t esize(loomrt_dtype dt) { return dt == LOOMRT_BF16 ? 2 : 4; }

/// On one rank every collective moves the caller's own data.
loomrt_status localCopy(loomrt_stream s, void *dst, const void *src,
                        size_t bytes) {
  return dst == src ? LOOMRT_OK : loomrt_memcpy_async(s, dst, src, bytes);
}

} // namespace

extern "C" {

loomrt_status loomrt_comm_init_from_env(loomrt_device dev, loomrt_comm *out) {
  if (!dev || !out)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "comm_init: null argument");
  std::string source;
  int size = envWorldSize(source);
  if (size < 1)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "comm_init: " + source + " must be a positive integer");
  if (size > 1)
    return fail(LOOMRT_ERR_UNSUPPORTED,
                "comm_init: " + source + "=" + std::to_string(size) +
                    " asks for several ranks, but this runtime has only the "
                    "one-rank world (NCCL/MPI transports are not built yet)");
  *out = new loomrt_comm_t{dev, 0, 1};
  return LOOMRT_OK;
}

int loomrt_comm_rank(loomrt_comm c) { return c ? c->rank : -1; }
int loomrt_comm_size(loomrt_comm c) { return c ? c->size : 0; }

loomrt_status loomrt_comm_split(loomrt_comm c, int, int, loomrt_comm *out) {
  if (!c || !out)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "comm_split: null argument");
  *out = new loomrt_comm_t{c->dev, 0, 1};
  return LOOMRT_OK;
}

void loomrt_comm_destroy(loomrt_comm c) { delete c; }

loomrt_status loomrt_all_reduce(loomrt_comm c, loomrt_stream s,
                                loomrt_dtype dt, const void *send, void *recv,
                                size_t count, loomrt_reduce_op) {
  if (loomrt_status st = checkCall("all_reduce", c, s, count, {send, recv}))
    return st;
  return localCopy(s, recv, send, count * esize(dt));
}

loomrt_status loomrt_reduce_scatter(loomrt_comm c, loomrt_stream s,
                                    loomrt_dtype dt, const void *send,
                                    void *recv, size_t recvCount,
                                    loomrt_reduce_op) {
  if (loomrt_status st =
          checkCall("reduce_scatter", c, s, recvCount, {send, recv}))
    return st;
  return localCopy(s, recv, send, recvCount * esize(dt));
}

loomrt_status loomrt_all_gather(loomrt_comm c, loomrt_stream s,
                                loomrt_dtype dt, const void *send, void *recv,
                                size_t sendCount) {
  if (loomrt_status st = checkCall("all_gather", c, s, sendCount, {send, recv}))
    return st;
  return localCopy(s, recv, send, sendCount * esize(dt));
}

loomrt_status loomrt_all_to_all(loomrt_comm c, loomrt_stream s,
                                const void *send, void *recv, size_t bytes) {
  if (loomrt_status st = checkCall("all_to_all", c, s, bytes, {send, recv}))
    return st;
  return localCopy(s, recv, send, bytes);
}

loomrt_status loomrt_broadcast(loomrt_comm c, loomrt_stream s, void *buf,
                               size_t bytes, int root) {
  if (loomrt_status st = checkCall("broadcast", c, s, bytes, {buf}))
    return st;
  if (root < 0 || root >= c->size)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "broadcast: root " + std::to_string(root) +
                    " is not a rank of a communicator of " +
                    std::to_string(c->size));
  return LOOMRT_OK;
}

} // extern "C"
