// adam_math.h: the per-element Adam/AdamW update, shared by the CPU and GPU
// backends so both compute the same function. Follows torch.optim.AdamW's
// single-tensor path (exp_avg.lerp_, exp_avg_sq.mul_.addcmul_,
// denom = sqrt(v)/sqrt(bc2) + eps, p.addcdiv_(m, denom, -lr/bc1)), which is
// what the end-to-end tests compare against.
#ifndef LOOMRT_COMMON_ADAM_MATH_H
#define LOOMRT_COMMON_ADAM_MATH_H

#include "loomrt/loomrt.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/portable.h"

namespace loomrt {

// Step-dependent scalars, computed once per launch on the host (in double so
// that beta^step does not lose precision at large step counts).
struct AdamScalars {
  float lr, beta1, beta2, eps; // beta2: v's EMA factor this step (see adamScalars)
  float decay;       // multiplicative decay of p for AdamW: 1 - lr*wd
  float l2;          // wd added to the gradient for plain Adam
  float stepSize;    // lr / (1 - beta1^t)
  float invBc2Sqrt;  // 1 / sqrt(1 - beta2^t), t frozen at freeze_step
  bool frozen;       // 1-bit Adam after its freeze step: g is the momentum
};

inline AdamScalars adamScalars(const loomrt_adam_config &c) {
  AdamScalars s;
  s.lr = c.lr;
  s.beta1 = c.beta1;
  // The EMA factor of v: beta2, or beta2^k where this update stands for
  // k steps (1-bit Adam's variance refresh); the bias correction below
  // keeps beta2 itself.
  s.beta2 = c.variance_steps > 1 ? (float)pow((double)c.beta2, (double)c.variance_steps)
                                 : c.beta2;
  s.eps = c.eps;
  s.decay = c.decoupled_weight_decay ? 1.0f - c.lr * c.weight_decay : 1.0f;
  s.l2 = c.decoupled_weight_decay ? 0.0f : c.weight_decay;
  double bc1 = 1.0 - pow((double)c.beta1, (double)c.step);
  s.frozen = c.freeze_step > 0;
  double bc2 = 1.0 - pow((double)c.beta2,
                         (double)(s.frozen && c.freeze_step < c.step ? c.freeze_step : c.step));
  s.stepSize = (float)(c.lr / bc1);
  s.invBc2Sqrt = (float)(1.0 / sqrt(bc2));
  return s;
}

/// bf16 <-> fp32 by bit manipulation, identical on host and device: bf16 is
/// the upper half of an fp32; narrowing rounds to nearest, ties to even.
LOOMRT_HD float bf16ToFloat(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
LOOMRT_HD uint16_t floatToBf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu))
    return uint16_t((u >> 16) | 0x40); // NaN stays a (quiet) NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

/// Every product and sum rounds on its own (mulRn, addRn, subRn: no fused
/// multiply-add on any compiler), and sqrtf and `/` are IEEE's correctly
/// rounded operations on the host and, without fast-math, on the GPU: the
/// CPU backend (scalar and SIMD paths) and the GPU kernels give the same
/// bits, so a streamed subgroup (updated on the GPU) trains exactly as the
/// CPU would have updated it (issue 44).
LOOMRT_HD void adamElement(const AdamScalars &s, float &p, float g, float &m,
                           float &v) {
  if (s.frozen) {
    // 1-bit Adam after the freeze (Tang et al. 2021, Algorithm 1 line 13):
    // the averaged momentum arrives as g, the variance stays.
    p = mulRn(p, s.decay);
    m = g;
    float denom = addRn(mulRn(sqrtf(v), s.invBc2Sqrt), s.eps);
    p = subRn(p, mulRn(s.stepSize, m / denom));
    return;
  }
  g = addRn(g, mulRn(s.l2, p));
  p = mulRn(p, s.decay);
  m = addRn(m, mulRn(1.0f - s.beta1, subRn(g, m)));
  v = addRn(mulRn(s.beta2, v), mulRn(mulRn(1.0f - s.beta2, g), g));
  float denom = addRn(mulRn(sqrtf(v), s.invBc2Sqrt), s.eps);
  p = subRn(p, mulRn(s.stepSize, m / denom));
}

} // namespace loomrt

#endif // LOOMRT_COMMON_ADAM_MATH_H
