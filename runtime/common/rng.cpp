// rng.cpp: the seeded parameter initialisers shared by loom-run and the
// generated training binaries (same seed, same weights).
//
// Counter-based: element k of the stream (k counts every random element
// drawn since loomrt_rng_create) is a function of (seed, k) alone, so a fill runs
// on all cores and still gives the same values as one thread drawing the
// stream in order (a 5-billion-parameter model initialises in seconds, not
// minutes). splitmix64 (Steele, Lea & Flood, OOPSLA 2014) hashes the
// counter; a normal draw is Box-Muller's cosine branch on two uniforms of
// its own element.
#include "common/backend.h"
#include "common/kernel_math.h"

#include <cmath>
#include <omp.h>

struct loomrt_rng_t {
  uint64_t seed;
  uint64_t next = 0; // elements drawn so far
};

namespace {

using loomrt::splitmix64;
inline double unit(uint64_t h) { return loomrt::unitDraw(h); }

template <typename F> void parallelFill(float *dst, size_t n, F f) {
#pragma omp parallel for schedule(static) if (n > (size_t(1) << 16))
  for (size_t i = 0; i < n; ++i)
    dst[i] = f(i);
}

} // namespace

namespace {
/// Writes dst[i] = element at(i) of r's draw of n elements, i < count, then
/// advances the stream by n.
template <typename At>
loomrt_status fillMapped(loomrt_rng r, int kind, double a, double b, float *dst, size_t n,
                         size_t count, At at) {
  const uint64_t key = r->seed, first = r->next;
  // Two independent hashes per element: 2k and 2k+1 of the key's stream.
  auto u = [key, first, &at](size_t i, int which) {
    return unit(splitmix64(key ^ splitmix64(2 * (first + at(i)) + uint64_t(which))));
  };
  switch (kind) {
  case 0:
  case 1:
    // Constants draw nothing: adding a zero-initialised state (an offload
    // schedule's working copy) leaves every parameter's values unchanged.
    parallelFill(dst, count, [kind](size_t) { return float(kind); });
    return LOOMRT_OK;
  case 2:
    if (!(b > 0))
      return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT,
                          "rng_fill: normal needs a positive std");
    parallelFill(dst, count, [&](size_t i) {
      double radius = std::sqrt(-2.0 * std::log(u(i, 0)));
      return float(a + b * radius * std::cos(6.283185307179586 * u(i, 1)));
    });
    break;
  case 3:
    if (!(a < b))
      return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT,
                          "rng_fill: uniform needs low < high");
    parallelFill(dst, count, [&](size_t i) { return float(a + (b - a) * (1.0 - u(i, 0))); });
    break;
  default:
    return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT,
                        "rng_fill: unknown initialiser kind " + std::to_string(kind));
  }
  r->next += n;
  return LOOMRT_OK;
}
} // namespace

extern "C" {

uint64_t loomrt_random_key(uint64_t seed, int64_t step, uint64_t op) {
  // Three rounds, so that neighbouring seeds, steps and ops give unrelated
  // keys (the initialisers hash splitmix64(seed) alone: a dropout key never
  // equals an initialiser's).
  return splitmix64(splitmix64(splitmix64(seed ^ 0x64726f706f7574ull) + uint64_t(step)) + op);
}

loomrt_rng loomrt_rng_create(uint64_t seed) { return new loomrt_rng_t{splitmix64(seed)}; }

void loomrt_rng_destroy(loomrt_rng r) { delete r; }

loomrt_status loomrt_rng_fill(loomrt_rng r, int kind, double a, double b,
                              float *dst, size_t n) {
  return loomrt_rng_fill_part(r, kind, a, b, dst, n, 0, n);
}

loomrt_status loomrt_rng_fill_part(loomrt_rng r, int kind, double a, double b, float *dst,
                                   size_t n, size_t begin, size_t count) {
  if (!r || (count && !dst))
    return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT, "rng_fill: null argument");
  if (begin > n || count > n - begin)
    return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT, "rng_fill: the part is outside the draw");
  // Element i of the part is element begin + i of the draw.
  return fillMapped(r, kind, a, b, dst, n, count, [begin](size_t i) { return begin + i; });
}

loomrt_status loomrt_rng_fill_slice(loomrt_rng r, int kind, double a, double b, float *dst,
                                    const int64_t *full, int rank, int dim, int64_t groups,
                                    int64_t parts, int64_t part, size_t begin, size_t count) {
  if (!r || !full || (count && !dst))
    return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT, "rng_fill_slice: null argument");
  if (dim < 0 || dim >= rank || groups < 1 || parts < 1 || part < 0 || part >= parts ||
      full[dim] % (groups * parts) != 0)
    return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT,
                        "rng_fill_slice: dimension " + std::to_string(dim) +
                            " does not divide into the groups and parts asked for");
  size_t n = 1, inner = 1;
  for (int d = 0; d < rank; ++d) {
    n *= size_t(full[d]);
    if (d > dim)
      inner *= size_t(full[d]);
  }
  const size_t fullDim = size_t(full[dim]), localDim = fullDim / size_t(parts),
               perGroup = localDim / size_t(groups), groupFull = fullDim / size_t(groups);
  if (begin > n / size_t(parts) || count > n / size_t(parts) - begin)
    return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT,
                        "rng_fill_slice: the part is outside the slice");
  // Local element i: (outer, j, k) in the slice's [outer, localDim, inner]
  // view; its j is in group j / perGroup, which the full tensor holds at
  // group * groupFull + part * perGroup.
  auto at = [=](size_t i) {
    size_t li = begin + i, k = li % inner, j = (li / inner) % localDim,
           outer = li / (inner * localDim);
    size_t fj = (j / perGroup) * groupFull + size_t(part) * perGroup + j % perGroup;
    return (outer * fullDim + fj) * inner + k;
  };
  return fillMapped(r, kind, a, b, dst, n, count, at);
}

} // extern "C"
