// cpu_kernels.h: the CPU backend's kernels, called from cpu_backend.cpp.
#ifndef LOOMRT_CPU_CPU_KERNELS_H
#define LOOMRT_CPU_CPU_KERNELS_H

#include "loomrt/loomrt.h"

namespace loomrt {
/// Adam/AdamW over n fp32 elements with the host's widest vector unit, or at
/// most the one named by `isa` ("scalar", "avx2", "avx512").
void cpuAdamF32(const loomrt_adam_config &cfg, float *p, const float *g,
                float *m, float *v, size_t n, const char *isa = nullptr);
/// The mixed-precision step: bf16 gradient in, optional bf16 weights out.
void cpuAdamBf16Grad(const loomrt_adam_config &cfg, float *p,
                     const uint16_t *g, float *m, float *v, uint16_t *pOut,
                     size_t n, const char *isa = nullptr);
/// The vector path cpuAdamF32 takes here for `isa` (null: the default).
const char *cpuAdamIsa(const char *isa = nullptr);
} // namespace loomrt

#endif
