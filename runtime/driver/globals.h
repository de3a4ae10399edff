// globals.h: the training binary's parameters and state on the host side
// before the first step: their host views, drawn from --seed (or imported)
// and copied to working copies (driver/globals.cpp).
#pragma once

#include "driver/checkpoint_set.h"
#include "driver/flags.h"

#include "loomrt/train.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#define TRY(expr, what)                                                        \
  do {                                                                         \
    if ((expr) != LOOMRT_OK)                                                   \
      return ::loomrt::driver::die(std::string(what) + ": " + loomrt_last_error()); \
  } while (0)

namespace loomrt::driver {

/// Host memory standing for one global.
struct HostView {
  uint8_t *ptr = nullptr;
  size_t bytes = 0;
  uint8_t *data() const { return ptr; }
  size_t size() const { return bytes; }
};

inline size_t numel(const loomrt_global_desc &g) { return loomrt::numel(g.shape, g.rank); }

/// The replicas data parallelism runs over: the world less the ranks of a
/// tensor-parallel group and a pipeline's stages, which read the same rows.
inline int dataReplicas(const loomrt_program *p) {
  int w = p->world < 1 ? 1 : p->world;
  return std::max(1, w / std::max(p->tensor_parallel, 1) / std::max(p->pipeline_parallel, 1));
}
/// A rank's replica (its block of a ZeRO shard, its rows of a batch): the
/// tensor-parallel rank is the innermost level, the stage the outermost.
inline int dataRank(const loomrt_program *p, int rank) {
  return (rank / std::max(p->tensor_parallel, 1)) % dataReplicas(p);
}

/// A file name loomc wrote beside the binary, found from any working folder.
std::string besideExecutable(const std::string &name);

/// A fresh run's parameters and state in their host views (below).
int initialiseGlobals(const loomrt_program *p, const Flags &f, int rank,
                      std::vector<HostView> &host);
/// Working copies from their masters; 0 or die()'s code.
int copyToWorkingCopies(const loomrt_program *p, std::vector<HostView> &host);
/// Zeroes each buffer on every core.
void zeroInParallel(const std::vector<std::pair<uint8_t *, size_t>> &buffers);

} // namespace loomrt::driver
