// rng.cpp: the seeded parameter initialisers shared by loom-run and the
// generated training binaries (same seed, same weights).
#include "common/backend.h"

#include <random>

struct loomrt_rng_t {
  std::mt19937_64 gen;
};

extern "C" {

loomrt_rng loomrt_rng_create(uint64_t seed) { return new loomrt_rng_t{std::mt19937_64(seed)}; }

void loomrt_rng_destroy(loomrt_rng r) { delete r; }

loomrt_status loomrt_rng_fill(loomrt_rng r, int kind, double a, double b,
                              float *dst, size_t n) {
  if (!r || (n && !dst))
    return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT, "rng_fill: null argument");
  switch (kind) {
  case 0:
  case 1:
    for (size_t i = 0; i < n; ++i)
      dst[i] = float(kind);
    return LOOMRT_OK;
  case 2: {
    if (!(b > 0))
      return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT,
                          "rng_fill: normal needs a positive std");
    std::normal_distribution<double> d(a, b);
    for (size_t i = 0; i < n; ++i)
      dst[i] = float(d(r->gen));
    return LOOMRT_OK;
  }
  case 3: {
    if (!(a < b))
      return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT,
                          "rng_fill: uniform needs low < high");
    std::uniform_real_distribution<double> d(a, b);
    for (size_t i = 0; i < n; ++i)
      dst[i] = float(d(r->gen));
    return LOOMRT_OK;
  }
  }
  return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT,
                      "rng_fill: unknown initialiser kind " + std::to_string(kind));
}

} // extern "C"
