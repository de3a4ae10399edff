// fused_eval.h: one element of a fused elementwise program
// (loomrt_fused_elementwise), shared by the CPU backend's and the GPU
// backend's interpreters so both run the same per-element math as the
// unfused kernels (common/kernel_math.h). The program travels by value (a
// kernel argument on the GPU), in fixed-size arrays.
#ifndef LOOMRT_COMMON_FUSED_EVAL_H
#define LOOMRT_COMMON_FUSED_EVAL_H

#include "common/kernel_math.h"

#include <string>

namespace loomrt {

/// A checked program (kernels_api.cpp validates it before any backend sees
/// it: opcodes, kinds, register and buffer indices, dtypes).
struct FusedProgram {
  int32_t nIn, nOut, nInsts;
  loomrt_dtype inT[LOOMRT_FUSED_MAX_IO], outT[LOOMRT_FUSED_MAX_IO];
  loomrt_fused_inst insts[LOOMRT_FUSED_MAX_INSTS];
};
struct FusedBuffers {
  const void *in[LOOMRT_FUSED_MAX_IO];
  void *out[LOOMRT_FUSED_MAX_IO];
};

/// Checks `p` completely (opcodes, kinds, register and buffer indices,
/// dtypes, its name an identifier) and copies it into `out`; an error
/// recorded with loomrt's last error otherwise (common/fused_source.cpp).
loomrt_status checkFusedProgram(const loomrt_fused_program *p, FusedProgram &out);
/// The generated kernel loom_fused_`name` of the checked program `p`
/// (loomrt_fused_source's text).
std::string fusedKernelText(const char *name, const FusedProgram &p);
/// Records "fused_elementwise: `msg`" and returns LOOMRT_ERR_INVALID_ARGUMENT.
loomrt_status fusedError(const std::string &msg);

/// Runs program `p` on element i.
LOOMRT_HD void fusedElement(const FusedProgram &p, const FusedBuffers &b, size_t i) {
  float r[LOOMRT_FUSED_MAX_INSTS];
  for (int k = 0; k < p.nInsts; ++k) {
    const loomrt_fused_inst &x = p.insts[k];
    switch (x.opcode) {
    case LOOMRT_FUSED_LOAD:
      r[k] = p.inT[x.a] == LOOMRT_BF16 ? load(static_cast<const uint16_t *>(b.in[x.a])[i])
                                       : load(static_cast<const float *>(b.in[x.a])[i]);
      break;
    case LOOMRT_FUSED_UNARY:
      r[k] = unaryOp(loomrt_unary_op(x.kind), r[x.a]);
      break;
    case LOOMRT_FUSED_BINARY:
      r[k] = binaryOp(loomrt_binary_op(x.kind), r[x.a], r[x.b]);
      break;
    case LOOMRT_FUSED_UNARY_GRAD:
      r[k] = unaryGrad(loomrt_unary_op(x.kind), r[x.a], r[x.b]);
      break;
    case LOOMRT_FUSED_ROUND:
      r[k] = load(store<uint16_t>(r[x.a]));
      break;
    default: // LOOMRT_FUSED_STORE
      if (p.outT[x.a] == LOOMRT_BF16)
        static_cast<uint16_t *>(b.out[x.a])[i] = store<uint16_t>(r[x.b]);
      else
        static_cast<float *>(b.out[x.a])[i] = r[x.b];
      r[k] = 0.0f;
      break;
    }
  }
}

} // namespace loomrt

#endif // LOOMRT_COMMON_FUSED_EVAL_H
