// adam_cpu.cpp: the CPU Adam/AdamW update at memory speed.
//
// Adam reads p, g, m, v and writes p, m, v: 28 bytes per fp32 parameter and a
// handful of flops, so on any multi-core host it is bound by DRAM bandwidth
// (the mission's H100 host: 126 GB/s read, 79-101 GB/s copy). What helps:
//   * one pass over the arrays, each thread streaming through its own
//     contiguous, cache-line aligned chunk;
//   * 512- or 256-bit vectors chosen at run time (AVX-512F, else AVX2+FMA,
//     else the compiler's auto-vectorised scalar loop), so one binary runs on
//     any x86-64 host;
//   * regular stores for the arrays updated in place (p, m, v): their lines
//     are in cache from the loads, and non-temporal stores to them measured
//     23% slower (3.76 against 4.90 G params/s, 1e9 parameters, 16-core Xeon
//     of the H200 host, 2026-11-26); non-temporal stores only for the
//     write-only bf16 output, where they save the write-allocate read;
//   * in the mixed-precision step, reading the bf16 gradient and writing the
//     bf16 working copy of the weights in the same pass (26 + 2 bytes per
//     parameter instead of converting in separate passes, 40 bytes in all).
// Every path computes adamElement()'s expression in the same order (no FMA
// contraction), so results agree with the GPU and the float64 reference.
#include "common/adam_math.h"
#include "cpu/cpu_kernels.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <omp.h>
#include <string>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace loomrt {
namespace {

/// One thread's share of an update. G is float or uint16_t (bf16 bits);
/// pOut, when not null, receives the updated weights as bf16.
template <typename G>
using Kernel = void (*)(const AdamScalars &, float *, const G *, float *,
                        float *, uint16_t *, size_t, bool);

inline float gradValue(float g) { return g; }
inline float gradValue(uint16_t g) { return bf16ToFloat(g); }

template <typename G>
void adamScalar(const AdamScalars &s, float *p, const G *g, float *m, float *v,
                uint16_t *pOut, size_t n, bool) {
  for (size_t i = 0; i < n; ++i) {
    adamElement(s, p[i], gradValue(g[i]), m[i], v[i]);
    if (pOut)
      pOut[i] = floatToBf16(p[i]);
  }
}

template <typename G>
void adamTail(const AdamScalars &s, float *p, const G *g, float *m, float *v,
              uint16_t *pOut, size_t begin, size_t end) {
  adamScalar<G>(s, p + begin, g + begin, m + begin, v + begin,
                pOut ? pOut + begin : nullptr, end - begin, false);
}

#if defined(__x86_64__)
#define LOOM_AVX512 __attribute__((target("avx512f")))
#define LOOM_AVX2 __attribute__((target("avx2,fma")))

LOOM_AVX512 inline __m512 loadGrad512(const float *g) {
  return _mm512_loadu_ps(g);
}
LOOM_AVX512 inline __m512 loadGrad512(const uint16_t *g) {
  __m512i w = _mm512_cvtepu16_epi32(
      _mm256_loadu_si256(reinterpret_cast<const __m256i *>(g)));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
/// fp32 -> bf16, round to nearest even (NaNs are not produced by Adam on
/// finite inputs; the scalar path handles them for the tail).
LOOM_AVX512 inline void storeBf16_512(uint16_t *out, __m512 x, bool stream) {
  __m512i u = _mm512_castps_si512(x);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  u = _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
  __m256i h = _mm512_cvtepi32_epi16(_mm512_srli_epi32(u, 16));
  if (stream)
    _mm256_stream_si256(reinterpret_cast<__m256i *>(out), h);
  else
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(out), h);
}

template <typename G>
LOOM_AVX512 void adamAvx512(const AdamScalars &s, float *p, const G *g,
                            float *m, float *v, uint16_t *pOut, size_t n,
                            bool stream) {
  const __m512 l2 = _mm512_set1_ps(s.l2), decay = _mm512_set1_ps(s.decay),
               omb1 = _mm512_set1_ps(1.0f - s.beta1),
               b2 = _mm512_set1_ps(s.beta2),
               omb2 = _mm512_set1_ps(1.0f - s.beta2),
               ibc2 = _mm512_set1_ps(s.invBc2Sqrt),
               eps = _mm512_set1_ps(s.eps),
               step = _mm512_set1_ps(s.stepSize);
  size_t i = 0;
  // Peel to a 64-byte boundary of p (aligned loads and stores of p).
  while (i < n && (reinterpret_cast<uintptr_t>(p + i) & 63))
    ++i;
  adamTail<G>(s, p, g, m, v, pOut, 0, i);
  // Streaming the 32-byte bf16 rows needs them 32-byte aligned.
  stream = stream && pOut && (reinterpret_cast<uintptr_t>(pOut + i) & 31) == 0;
  for (; i + 16 <= n; i += 16) {
    __m512 pp = _mm512_load_ps(p + i);
    __m512 gg = loadGrad512(g + i);
    __m512 mm = _mm512_loadu_ps(m + i);
    __m512 vv = _mm512_loadu_ps(v + i);
    gg = _mm512_add_ps(gg, _mm512_mul_ps(l2, pp));
    pp = _mm512_mul_ps(pp, decay);
    mm = _mm512_add_ps(mm, _mm512_mul_ps(omb1, _mm512_sub_ps(gg, mm)));
    vv = _mm512_add_ps(_mm512_mul_ps(b2, vv),
                       _mm512_mul_ps(_mm512_mul_ps(omb2, gg), gg));
    __m512 denom = _mm512_add_ps(_mm512_mul_ps(_mm512_sqrt_ps(vv), ibc2), eps);
    pp = _mm512_sub_ps(pp, _mm512_mul_ps(step, _mm512_div_ps(mm, denom)));
    _mm512_store_ps(p + i, pp);
    _mm512_storeu_ps(m + i, mm);
    _mm512_storeu_ps(v + i, vv);
    if (pOut)
      storeBf16_512(pOut + i, pp, stream);
  }
  if (stream)
    _mm_sfence();
  adamTail<G>(s, p, g, m, v, pOut, i, n);
}

LOOM_AVX2 inline __m256 loadGrad256(const float *g) { return _mm256_loadu_ps(g); }
LOOM_AVX2 inline __m256 loadGrad256(const uint16_t *g) {
  __m256i w = _mm256_cvtepu16_epi32(
      _mm_loadu_si128(reinterpret_cast<const __m128i *>(g)));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
LOOM_AVX2 inline void storeBf16_256(uint16_t *out, __m256 x, bool stream) {
  __m256i u = _mm256_castps_si256(x);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  u = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  u = _mm256_srli_epi32(u, 16);
  // Pack 8 x u32 (all < 65536) to 8 x u16 in order.
  __m128i lo = _mm256_castsi256_si128(u), hi = _mm256_extracti128_si256(u, 1);
  __m128i h = _mm_packus_epi32(lo, hi);
  if (stream)
    _mm_stream_si128(reinterpret_cast<__m128i *>(out), h);
  else
    _mm_storeu_si128(reinterpret_cast<__m128i *>(out), h);
}

template <typename G>
LOOM_AVX2 void adamAvx2(const AdamScalars &s, float *p, const G *g, float *m,
                        float *v, uint16_t *pOut, size_t n, bool stream) {
  const __m256 l2 = _mm256_set1_ps(s.l2), decay = _mm256_set1_ps(s.decay),
               omb1 = _mm256_set1_ps(1.0f - s.beta1),
               b2 = _mm256_set1_ps(s.beta2),
               omb2 = _mm256_set1_ps(1.0f - s.beta2),
               ibc2 = _mm256_set1_ps(s.invBc2Sqrt),
               eps = _mm256_set1_ps(s.eps),
               step = _mm256_set1_ps(s.stepSize);
  size_t i = 0;
  while (i < n && (reinterpret_cast<uintptr_t>(p + i) & 31))
    ++i;
  adamTail<G>(s, p, g, m, v, pOut, 0, i);
  stream = stream && pOut && (reinterpret_cast<uintptr_t>(pOut + i) & 15) == 0;
  for (; i + 8 <= n; i += 8) {
    __m256 pp = _mm256_load_ps(p + i);
    __m256 gg = loadGrad256(g + i);
    __m256 mm = _mm256_loadu_ps(m + i);
    __m256 vv = _mm256_loadu_ps(v + i);
    gg = _mm256_add_ps(gg, _mm256_mul_ps(l2, pp));
    pp = _mm256_mul_ps(pp, decay);
    mm = _mm256_add_ps(mm, _mm256_mul_ps(omb1, _mm256_sub_ps(gg, mm)));
    vv = _mm256_add_ps(_mm256_mul_ps(b2, vv),
                       _mm256_mul_ps(_mm256_mul_ps(omb2, gg), gg));
    __m256 denom = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(vv), ibc2), eps);
    pp = _mm256_sub_ps(pp, _mm256_mul_ps(step, _mm256_div_ps(mm, denom)));
    _mm256_store_ps(p + i, pp);
    _mm256_storeu_ps(m + i, mm);
    _mm256_storeu_ps(v + i, vv);
    if (pOut)
      storeBf16_256(pOut + i, pp, stream);
  }
  if (stream)
    _mm_sfence();
  adamTail<G>(s, p, g, m, v, pOut, i, n);
}
#endif

template <typename G> struct Choice {
  Kernel<G> kernel;
  const char *name;
};

/// The widest path this host supports, or at most the one named.
template <typename G> Choice<G> choose(const std::string &want) {
#if defined(__x86_64__)
  __builtin_cpu_init();
  bool has512 = __builtin_cpu_supports("avx512f");
  bool has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (has512 && (want.empty() || want == "avx512"))
    return {adamAvx512<G>, "avx512"};
  if (has2 && (want.empty() || want == "avx512" || want == "avx2"))
    return {adamAvx2<G>, "avx2"};
#endif
  return {adamScalar<G>, "scalar"};
}

/// LOOMRT_CPU_ISA=scalar|avx2|avx512 caps the vector width and
/// LOOMRT_CPU_STREAM=0|1 forces streaming stores of the bf16 output off or on
/// (for tests and benchmarks); by default the widest path runs and streams
/// large outputs.
std::string envOr(const char *name, const char *dflt) {
  const char *v = std::getenv(name);
  return v ? v : dflt;
}

template <typename G>
void run(const loomrt_adam_config &cfg, float *p, const G *g, float *m,
         float *v, uint16_t *pOut, size_t n, const char *isa) {
  static const std::string envIsa = envOr("LOOMRT_CPU_ISA", "");
  static const std::string envStream = envOr("LOOMRT_CPU_STREAM", "auto");
  static const Choice<G> dflt = choose<G>(envIsa);
  const AdamScalars s = adamScalars(cfg);
  // The vector paths are plain Adam; 1-bit Adam's frozen update (no
  // moments to update) runs the scalar one.
  Kernel<G> k = s.frozen ? adamScalar<G> : isa ? choose<G>(isa).kernel : dflt.kernel;
  // Streaming the bf16 output pays off only when it does not fit in cache
  // (the copy to the GPU would otherwise find it there); 32 MiB of state is
  // above the L3 of the hosts we run on.
  bool stream = envStream == "auto" ? n * 16 > (size_t(32) << 20)
                                    : envStream == "1";
  // Below ~64k elements the fork/join costs more than it saves.
  if (n < (size_t(1) << 16)) {
    k(s, p, g, m, v, pOut, n, false);
    return;
  }
#pragma omp parallel
  {
    // Contiguous chunks rounded to 16 floats (one 64-byte line) per thread;
    // the same static split as a parallel first touch, so each thread
    // streams through memory local to it.
    size_t threads = omp_get_num_threads(), t = omp_get_thread_num();
    size_t chunk = ((n + threads - 1) / threads + 15) / 16 * 16;
    size_t begin = t * chunk < n ? t * chunk : n;
    size_t end = begin + chunk < n ? begin + chunk : n;
    if (begin < end)
      k(s, p + begin, g + begin, m + begin, v + begin,
        pOut ? pOut + begin : nullptr, end - begin, stream);
  }
}

} // namespace

const char *cpuAdamIsa(const char *isa) {
  return choose<float>(isa ? isa : envOr("LOOMRT_CPU_ISA", "")).name;
}

void cpuAdamF32(const loomrt_adam_config &cfg, float *p, const float *g,
                float *m, float *v, size_t n, const char *isa) {
  run<float>(cfg, p, g, m, v, nullptr, n, isa);
}

void cpuAdamBf16Grad(const loomrt_adam_config &cfg, float *p,
                     const uint16_t *g, float *m, float *v, uint16_t *pOut,
                     size_t n, const char *isa) {
  run<uint16_t>(cfg, p, g, m, v, pOut, n, isa);
}

} // namespace loomrt
