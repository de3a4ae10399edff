// plan.cpp: what the compiler needs to know about this runtime to plan and
// price a step (loomc's step simulation), behind the public C interface:
// how many commands the GPU backend issues for an op, the attention's
// workspace, and the step arena's placement policy without memory
// (loomrt.h, "planning"). It depends on nothing but the C++ library, so the
// compiler links it (in libloomrt_base) without the backends' CUDA, NCCL,
// MPI or BLAS.
#include "loomrt/loomrt.h"

#include "loomrt/arena_policy.h"
#include "common/launch_rules.h"

#include <unordered_map>

struct loomrt_arena_model_t {
  loomrt::ArenaPolicy policy;
  std::unordered_map<int64_t, loomrt::ArenaPolicy::Place> placed;
  int64_t next = 0;
};

extern "C" {

size_t loomrt_attention_workspace_bytes(loomrt_dtype dt, int64_t bh, int64_t t, int64_t s,
                                        int backward) {
  size_t es = dt == LOOMRT_BF16 ? 2 : 4;
  return size_t(bh * t * s) * es * (backward ? 2 : 1);
}

int loomrt_attention_fused(loomrt_dtype dt, int64_t t, int64_t s, int64_t dh) {
  return loomrt::flashCovers(dt, t, s, dh) ? 1 : 0;
}

size_t loomrt_attention_saved_bytes(int64_t bh, int64_t t) {
  // Each query row's log-sum-exp, fp32 (the fused forward's L).
  return bh > 0 && t > 0 ? size_t(bh) * size_t(t) * sizeof(float) : 0;
}

int loomrt_gpu_reduce_commands(int64_t outer, int64_t len, int64_t inner) {
  // In chunks: a scratch allocation, two kernels, its release.
  return loomrt::reduceInChunks(outer, len, inner) ? 4 : 1;
}

int loomrt_gpu_attention_commands(loomrt_dtype dt, int64_t t, int64_t s, int64_t dh,
                                  int backward) {
  // Fused: one kernel forward; the backward recomputes the output and its
  // row statistics, then the K/V and the Q gradients; from the saved ones
  // (backward 2: loomrt_attention_grad_saved) only the last two. Composed
  // (common/attention.cpp): two products and a softmax forward; five
  // products, a softmax and its gradient backward.
  bool fused = loomrt::flashCovers(dt, t, s, dh);
  if (backward == 2)
    return fused ? 2 : 7;
  return backward ? (fused ? 3 : 7) : (fused ? 1 : 3);
}

uint64_t loomrt_collective_bytes_sent(loomrt_collective_kind kind, uint64_t bytes, int ranks) {
  if (ranks <= 1)
    return 0;
  switch (kind) {
  case LOOMRT_COLL_ALL_REDUCE:
    return uint64_t(2.0 * (ranks - 1) / ranks * double(bytes));
  case LOOMRT_COLL_BROADCAST:
  case LOOMRT_COLL_SEND_RECV: // what goes to the peer
    return bytes;
  default: // reduce-scatter, all-gather, all-to-all: W-1 blocks
    return uint64_t(ranks - 1) * bytes;
  }
}

loomrt_arena_model loomrt_arena_model_create(void) { return new loomrt_arena_model_t(); }

void loomrt_arena_model_destroy(loomrt_arena_model m) { delete m; }

int64_t loomrt_arena_model_alloc(loomrt_arena_model m, size_t bytes) {
  loomrt::ArenaPolicy::Place at;
  m->policy.alloc(bytes, at, [](size_t) { return true; });
  m->placed[m->next] = at;
  return m->next++;
}

void loomrt_arena_model_release(loomrt_arena_model m, int64_t placement) {
  auto it = m->placed.find(placement);
  if (it == m->placed.end())
    return;
  m->policy.release(it->second);
  m->placed.erase(it);
}

size_t loomrt_arena_model_reserved(loomrt_arena_model m) { return m->policy.reserved(); }

} // extern "C"
