// kernel_math.h: per-element math shared by the CPU and GPU kernels, so both
// backends compute the same functions (and the conformance suite can hold
// the GPU to the CPU within rounding).
#ifndef LOOMRT_COMMON_KERNEL_MATH_H
#define LOOMRT_COMMON_KERNEL_MATH_H

#include "common/adam_math.h"

namespace loomrt {

/// Storage types: float, or uint16_t holding bf16 bits. Math is fp32.
LOOMRT_HD float load(float x) { return x; }
LOOMRT_HD float load(uint16_t x) { return bf16ToFloat(x); }
template <typename T> LOOMRT_HD T store(float x);
template <> LOOMRT_HD float store<float>(float x) { return x; }
template <> LOOMRT_HD uint16_t store<uint16_t>(float x) {
  return floatToBf16(x);
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;
constexpr float kGeluCoeff = 0.044715f;

LOOMRT_HD float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/// splitmix64 (Steele, Lea & Flood, OOPSLA 2014): the hash behind every
/// counter-based draw of the runtime (initialisers, dropout masks).
LOOMRT_HD uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
/// A uniform double in (0, 1] from the top 53 bits of a hash.
LOOMRT_HD double unitDraw(uint64_t h) { return double((h >> 11) + 1) * 0x1.0p-53; }
/// Dropout keeps element `i` of stream `key` (loomrt_dropout) when its
/// draw unitDraw(h) = ((h >> 11) + 1) / 2^53 exceeds the ratio, i.e. when
/// the integer (h >> 11) + 1 exceeds floor(ratio * 2^53) (exact: the ratio
/// is a float), so kernels compare integers, not doubles.
LOOMRT_HD uint64_t dropoutThreshold(float ratio) { return uint64_t(double(ratio) * 0x1.0p53); }
LOOMRT_HD bool dropoutKeep(uint64_t key, uint64_t i, uint64_t threshold) {
  return (splitmix64(key ^ splitmix64(i)) >> 11) + 1 > threshold;
}

/// 1-bit compression (loomrt_onebit_*): byte j of the signs of c = x +
/// error (element 8j+k in bit 7-k, sign(0) = +1), with error updated to
/// c - scale * sign(c).
LOOMRT_HD uint8_t onebitPackByte(const float *x, float *error, size_t j, float scale) {
  uint8_t byte = 0;
  for (size_t k = 0; k < 8; ++k) {
    size_t i = 8 * j + k;
    float c = x[i] + error[i];
    bool pos = c >= 0.0f;
    byte = uint8_t(byte | (pos ? 0x80u >> k : 0u));
    error[i] = c - (pos ? scale : -scale);
  }
  return byte;
}
/// The sign (+1 or -1) of element i of packed signs.
LOOMRT_HD float onebitSign(const uint8_t *packed, size_t i) {
  return (packed[i >> 3] >> (7 - (i & 7))) & 1 ? 1.0f : -1.0f;
}

/// Block-scaled narrow floats (loomrt_block_compress): the largest
/// magnitude of each codec, a code's value, and the code of a value
/// (round to nearest, ties to even, saturating; the caller divides by the
/// block's scale first).
LOOMRT_HD float blockCodecMax(loomrt_block_codec c) {
  return c == LOOMRT_CODEC_FP8_E4M3 ? 448.0f
       : c == LOOMRT_CODEC_FP4_E2M1 ? 6.0f
       : c == LOOMRT_CODEC_INT8     ? 127.0f
                                    : 7.0f;
}
/// Whether a codec packs two codes a byte (element i in the low nibble of
/// byte i/2 when i is even, the high one when odd).
LOOMRT_HD bool blockCodecNibbles(loomrt_block_codec c) {
  return c == LOOMRT_CODEC_FP4_E2M1 || c == LOOMRT_CODEC_INT4;
}
/// OCP FP8 E4M3: bias 7, 3 mantissa bits, subnormals 2^-9 apart, no
/// infinities (0x7F and 0xFF are NaN; never produced here).
LOOMRT_HD float e4m3Value(uint8_t code) {
  int e = (code >> 3) & 15, m = code & 7;
  float mag = e == 0 ? float(m) * 0x1p-9f : ldexpf(1.0f + float(m) / 8.0f, e - 7);
  return code & 0x80 ? -mag : mag;
}
LOOMRT_HD uint8_t e4m3Code(float v) {
  uint8_t sign = v < 0.0f ? 0x80 : 0;
  float a = fabsf(v);
  uint8_t mag;
  if (!(a < 448.0f)) {
    mag = 0x7E; // 448, saturated (NaN inputs too: the scale is NaN then anyway)
  } else if (a < 0x1p-6f) {
    // Subnormal: a multiple of 2^-9; 8 of them is the smallest normal, code 8.
    mag = uint8_t(rintf(a * 0x1p9f));
  } else {
    int k;
    float f = frexpf(a, &k); // a = f * 2^k, f in [0.5, 1)
    int e = k - 1 + 7, m = int(rintf((2.0f * f - 1.0f) * 8.0f));
    if (m == 8) {
      m = 0;
      ++e;
    }
    mag = e > 15 || (e == 15 && m == 7) ? uint8_t(0x7E) : uint8_t(e << 3 | m);
  }
  return mag ? uint8_t(sign | mag) : 0;
}
/// OCP MX FP4 E2M1: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 (codes 0-7), the
/// sign in bit 3.
LOOMRT_HD float e2m1Value(uint8_t code) {
  const float mags[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return code & 8 ? -mags[code & 7] : mags[code & 7];
}
LOOMRT_HD uint8_t e2m1Code(float v) {
  float a = fabsf(v);
  // The midpoints; at a tie the even code (mantissa bit 0) wins.
  uint8_t mag = a <= 0.25f ? 0 : a < 0.75f ? 1 : a <= 1.25f ? 2 : a < 1.75f ? 3
              : a <= 2.5f  ? 4 : a < 3.5f  ? 5 : a <= 5.0f  ? 6 : 7;
  return mag && v < 0.0f ? uint8_t(8 | mag) : mag;
}

/// Symmetric integers (ZeRO++'s qwZ and qgZ, Wang et al. 2023, §3.1 and
/// §3.3): the scaled value rounded to nearest (ties to even) and clamped to
/// ±127 (int8) or ±7 (int4, two's complement in a nibble).
LOOMRT_HD uint8_t intCode(float v, float top) {
  float r = rintf(fminf(fmaxf(v, -top), top));
  return uint8_t(int(r) & (top > 7.0f ? 0xFF : 0x0F));
}
/// The code of a value already divided by its block's scale, and a code's
/// value, for every block codec.
LOOMRT_HD uint8_t blockCode(loomrt_block_codec c, float v) {
  switch (c) {
  case LOOMRT_CODEC_FP8_E4M3: return e4m3Code(v);
  case LOOMRT_CODEC_FP4_E2M1: return e2m1Code(v);
  case LOOMRT_CODEC_INT8: return intCode(v, 127.0f);
  default: return intCode(v, 7.0f);
  }
}
LOOMRT_HD float blockValue(loomrt_block_codec c, uint8_t code) {
  switch (c) {
  case LOOMRT_CODEC_FP8_E4M3: return e4m3Value(code);
  case LOOMRT_CODEC_FP4_E2M1: return e2m1Value(code);
  case LOOMRT_CODEC_INT8: return float(int8_t(code));
  default: return float(code & 8 ? int(code) - 16 : int(code));
  }
}
/// Element i of a block codec's codes.
LOOMRT_HD float blockElement(loomrt_block_codec c, const uint8_t *codes, size_t i) {
  return blockCodecNibbles(c) ? blockValue(c, uint8_t(codes[i / 2] >> (4 * (i & 1)) & 15))
                              : blockValue(c, codes[i]);
}

LOOMRT_HD float unaryOp(loomrt_unary_op op, float x) {
  switch (op) {
  case LOOMRT_NEG: return -x;
  case LOOMRT_EXP: return expf(x);
  case LOOMRT_LOG: return logf(x);
  case LOOMRT_SQRT: return sqrtf(x);
  case LOOMRT_RSQRT: return 1.0f / sqrtf(x);
  case LOOMRT_TANH: return tanhf(x);
  case LOOMRT_ERF: return erff(x);
  case LOOMRT_SIN: return sinf(x);
  case LOOMRT_COS: return cosf(x);
  case LOOMRT_SIGMOID: return sigmoidf(x);
  case LOOMRT_RELU: return x > 0.0f ? x : 0.0f;
  case LOOMRT_SILU: return x * sigmoidf(x);
  // Exact GELU: x * Phi(x) (PyTorch approximate='none').
  case LOOMRT_GELU: return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
  // GPT-2's tanh form (PyTorch approximate='tanh').
  case LOOMRT_GELU_TANH:
    return 0.5f * x *
           (1.0f + tanhf(kSqrt2OverPi * (x + kGeluCoeff * x * x * x)));
  default: return 0.0f;
  }
}

/// Whether unaryGrad knows op's derivative.
LOOMRT_HD bool hasUnaryGrad(loomrt_unary_op op) {
  return op == LOOMRT_RELU || op == LOOMRT_SILU || op == LOOMRT_GELU ||
         op == LOOMRT_GELU_TANH || op == LOOMRT_SIGMOID || op == LOOMRT_TANH ||
         op == LOOMRT_EXP;
}

/// dy * op'(x).
LOOMRT_HD float unaryGrad(loomrt_unary_op op, float dy, float x) {
  switch (op) {
  case LOOMRT_RELU: return x > 0.0f ? dy : 0.0f;
  case LOOMRT_SILU: {
    float s = sigmoidf(x);
    return dy * s * (1.0f + x * (1.0f - s));
  }
  case LOOMRT_GELU: {
    float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
    float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
    return dy * (cdf + x * pdf);
  }
  case LOOMRT_GELU_TANH: {
    float u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
    float t = tanhf(u);
    float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
    return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
  }
  case LOOMRT_SIGMOID: {
    float s = sigmoidf(x);
    return dy * s * (1.0f - s);
  }
  case LOOMRT_TANH: {
    float t = tanhf(x);
    return dy * (1.0f - t * t);
  }
  case LOOMRT_EXP: return dy * expf(x);
  default: return 0.0f;
  }
}

LOOMRT_HD float binaryOp(loomrt_binary_op op, float a, float b) {
  switch (op) {
  case LOOMRT_ADD: return a + b;
  case LOOMRT_SUB: return a - b;
  case LOOMRT_MUL: return a * b;
  case LOOMRT_DIV: return a / b;
  case LOOMRT_POW: return powf(a, b);
  case LOOMRT_MAX: return a > b ? a : b;
  case LOOMRT_MIN: return a < b ? a : b;
  case LOOMRT_EQ: return a == b ? 1.0f : 0.0f;
  case LOOMRT_NE: return a != b ? 1.0f : 0.0f;
  case LOOMRT_LT: return a < b ? 1.0f : 0.0f;
  case LOOMRT_LE: return a <= b ? 1.0f : 0.0f;
  default: return 0.0f;
  }
}

/// torch.lerp's formula (ATen's lerp: from the nearer end).
/// (Each product and sum rounded on its own, as adam_math.h's: both
/// backends give the same bits, so Streaming DiLoCo's merge may run on the
/// CPU, beside offloaded master weights, or on the GPU.)
/// loomrt_rotary on the pair (a, b) = (x[j], x[j + d/2]) of a row, with
/// the tables' values at j (ca, sa) and j + d/2 (cb, sb): the rotation, or
/// its transpose (`backward`).
LOOMRT_HD void rotaryPair(float a, float b, float ca, float cb, float sa, float sb, bool backward,
                          float &ya, float &yb) {
  if (!backward) {
    ya = a * ca - b * sa;
    yb = b * cb + a * sb;
  } else {
    ya = a * ca + b * sb;
    yb = b * cb - a * sa;
  }
}

LOOMRT_HD float lerpOp(float a, float b, float w) {
  return w < 0.5f ? addRn(a, mulRn(w, subRn(b, a))) : subRn(b, mulRn(subRn(b, a), 1.0f - w));
}

/// torch.optim.SGD's step for one element (momentum buffer b, dampening 0),
/// rounded alike on both backends (the outer step of Streaming DiLoCo runs
/// on either).
LOOMRT_HD void sgdElement(float lr, float mu, bool nesterov, float &p, float g, float &b) {
  b = addRn(mulRn(mu, b), g);
  p = subRn(p, mulRn(lr, nesterov ? addRn(g, mulRn(mu, b)) : b));
}

/// loomrt_binary on int64: sums and products wrap modulo 2^64 (computed on
/// uint64, so no signed-overflow undefined behaviour); DIV and POW are
/// refused before a kernel runs.
LOOMRT_HD int64_t binaryOpInt(loomrt_binary_op op, int64_t a, int64_t b) {
  uint64_t ua = uint64_t(a), ub = uint64_t(b);
  switch (op) {
  case LOOMRT_ADD: return int64_t(ua + ub);
  case LOOMRT_SUB: return int64_t(ua - ub);
  case LOOMRT_MUL: return int64_t(ua * ub);
  case LOOMRT_MAX: return a > b ? a : b;
  case LOOMRT_MIN: return a < b ? a : b;
  case LOOMRT_EQ: return a == b;
  case LOOMRT_NE: return a != b;
  case LOOMRT_LT: return a < b;
  case LOOMRT_LE: return a <= b;
  default: return 0;
  }
}

/// loomrt_cast from float to int64: toward zero, saturating, NaN to 0.
LOOMRT_HD int64_t floatToInt64(float x) {
  if (!(x == x))
    return 0;
  if (x >= 9.2233720368547758e18f)
    return INT64_MAX;
  if (x <= -9.2233720368547758e18f)
    return INT64_MIN;
  return int64_t(x);
}

/// Row-major strides of `shape` with broadcast dims (size 1 where the output
/// is larger) given stride 0.
struct Strides {
  int64_t s[LOOMRT_MAX_RANK];
};
inline Strides broadcastStrides(const int64_t *shape, const int64_t *outShape,
                                int rank) {
  Strides st;
  int64_t acc = 1;
  for (int d = rank - 1; d >= 0; --d) {
    st.s[d] = (shape[d] == 1 && outShape[d] != 1) ? 0 : acc;
    acc *= shape[d];
  }
  return st;
}

/// Offsets of linear index `i` of `shape` under up to three stride sets.
struct Shape {
  int64_t d[LOOMRT_MAX_RANK];
  int rank;
};
LOOMRT_HD void stridedOffsets(const Shape &shape, int64_t i, const Strides &a,
                              const Strides &b, const Strides &c, int64_t &oa,
                              int64_t &ob, int64_t &oc) {
  oa = ob = oc = 0;
  for (int d = shape.rank - 1; d >= 0; --d) {
    int64_t idx = i % shape.d[d];
    i /= shape.d[d];
    oa += idx * a.s[d];
    ob += idx * b.s[d];
    oc += idx * c.s[d];
  }
}

} // namespace loomrt

#endif // LOOMRT_COMMON_KERNEL_MATH_H
