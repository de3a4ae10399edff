// fused.cpp: loomrt_fused_elementwise, dispatched to the backend once the
// program is checked (common/fused_source.cpp).
#include "common/backend.h"
#include "common/fused_eval.h"

#include <string>

using loomrt::fail;
using loomrt::fusedError;

extern "C" {

loomrt_status loomrt_fused_elementwise(loomrt_stream s, const loomrt_fused_program *p,
                                       const void *const *inputs, void *const *outputs,
                                       size_t n) {
  if (!s)
    return fusedError("null stream");
  loomrt::FusedProgram prog;
  if (loomrt_status st = loomrt::checkFusedProgram(p, prog))
    return st;
  if (n == 0)
    return LOOMRT_OK;
  loomrt::FusedBuffers b{};
  if ((prog.nIn && !inputs) || !outputs)
    return fusedError("null buffer list");
  for (int i = 0; i < prog.nIn; ++i)
    if (!(b.in[i] = inputs[i]))
      return fusedError("null input " + std::to_string(i));
  for (int i = 0; i < prog.nOut; ++i)
    if (!(b.out[i] = outputs[i]))
      return fusedError("null output " + std::to_string(i));
  const loomrt::KernelOps &k = *s->dev->ops->kernels;
  if (!k.fused)
    return fail(LOOMRT_ERR_UNSUPPORTED, "fused_elementwise: no kernel on this backend");
  return k.fused(s->dev->state, s->impl, &prog, p, &b, n);
}

} // extern "C"
