// fused_source.cpp: the checks of a fused elementwise program and the text
// of its generated kernel (loomrt_fused_source). Vendor-free, in loomrt_base:
// loomc verifies loomrt.fused_elementwise ops and writes their kernels
// beside its output with the same code the runtime compiles them with. A
// program comes from generated code and is checked completely before a
// backend runs it or its text is generated: its name becomes an identifier
// in generated source, so it must be one.
#include "common/backend.h"
#include "common/fused_eval.h"

#include <cstring>
#include <string>
#include <vector>

using loomrt::fail;

namespace {

loomrt_status bad(const std::string &msg) { return loomrt::fusedError(msg); }

bool identifier(const char *s) {
  if (!s || !*s || std::strlen(s) > 64)
    return false;
  for (const char *c = s; *c; ++c) {
    bool alpha = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || *c == '_';
    if (!alpha && !(c != s && *c >= '0' && *c <= '9'))
      return false;
  }
  return true;
}

} // namespace

loomrt_status loomrt::checkFusedProgram(const loomrt_fused_program *p, FusedProgram &out) {
  if (!p)
    return bad("null program");
  if (!identifier(p->name))
    return bad("the region's name must be an identifier of at most 64 characters "
               "([A-Za-z_][A-Za-z0-9_]*)");
  std::string where = std::string("region '") + p->name + "': ";
  if (p->n_inputs < 0 || p->n_inputs > LOOMRT_FUSED_MAX_IO || p->n_outputs < 1 ||
      p->n_outputs > LOOMRT_FUSED_MAX_IO)
    return bad(where + "needs 0-" + std::to_string(LOOMRT_FUSED_MAX_IO) + " inputs and 1-" +
               std::to_string(LOOMRT_FUSED_MAX_IO) + " outputs");
  if (p->n_insts < 1 || p->n_insts > LOOMRT_FUSED_MAX_INSTS)
    return bad(where + "needs 1-" + std::to_string(LOOMRT_FUSED_MAX_INSTS) + " instructions");
  if (!p->insts || (p->n_inputs && !p->in_types) || !p->out_types)
    return bad(where + "null instruction or type array");
  out = loomrt::FusedProgram{};
  out.nIn = p->n_inputs;
  out.nOut = p->n_outputs;
  out.nInsts = p->n_insts;
  auto dtypeOk = [](loomrt_dtype t) { return t == LOOMRT_F32 || t == LOOMRT_BF16; };
  for (int i = 0; i < p->n_inputs; ++i)
    if (!dtypeOk(out.inT[i] = p->in_types[i]))
      return bad(where + "input " + std::to_string(i) + " is not f32 or bf16");
  for (int i = 0; i < p->n_outputs; ++i)
    if (!dtypeOk(out.outT[i] = p->out_types[i]))
      return bad(where + "output " + std::to_string(i) + " is not f32 or bf16");
  std::vector<bool> stored(size_t(p->n_outputs), false);
  for (int k = 0; k < p->n_insts; ++k) {
    const loomrt_fused_inst &x = out.insts[k] = p->insts[k];
    std::string at = where + "instruction " + std::to_string(k) + ": ";
    // A register operand: an earlier instruction that defines one.
    auto reg = [&](int32_t r) {
      return r >= 0 && r < k && p->insts[r].opcode != LOOMRT_FUSED_STORE;
    };
    switch (x.opcode) {
    case LOOMRT_FUSED_LOAD:
      if (x.a < 0 || x.a >= p->n_inputs)
        return bad(at + "loads input " + std::to_string(x.a) + " of " +
                   std::to_string(p->n_inputs));
      break;
    case LOOMRT_FUSED_UNARY:
      if (x.kind < 0 || x.kind >= LOOMRT_UNARY_OP_COUNT || !reg(x.a))
        return bad(at + "needs a unary op and an earlier register");
      break;
    case LOOMRT_FUSED_BINARY:
      if (x.kind < 0 || x.kind >= LOOMRT_BINARY_OP_COUNT || !reg(x.a) || !reg(x.b))
        return bad(at + "needs a binary op and two earlier registers");
      break;
    case LOOMRT_FUSED_UNARY_GRAD:
      if (x.kind < 0 || x.kind >= LOOMRT_UNARY_OP_COUNT ||
          !loomrt::hasUnaryGrad(loomrt_unary_op(x.kind)) || !reg(x.a) || !reg(x.b))
        return bad(at + "needs a unary op with a gradient and two earlier registers");
      break;
    case LOOMRT_FUSED_STORE:
      if (x.a < 0 || x.a >= p->n_outputs || !reg(x.b))
        return bad(at + "stores to output " + std::to_string(x.a) + " of " +
                   std::to_string(p->n_outputs) + " from an earlier register");
      stored[size_t(x.a)] = true;
      break;
    case LOOMRT_FUSED_ROUND:
      if (!reg(x.a))
        return bad(at + "rounds an earlier register");
      break;
    default:
      return bad(at + "unknown opcode " + std::to_string(x.opcode));
    }
  }
  for (int i = 0; i < p->n_outputs; ++i)
    if (!stored[size_t(i)])
      return bad(where + "output " + std::to_string(i) + " is never stored");
  return LOOMRT_OK;
}

namespace {

const char *storage(loomrt_dtype t) { return t == LOOMRT_BF16 ? "uint16_t" : "float"; }

} // namespace

loomrt_status loomrt::fusedError(const std::string &msg) {
  return fail(LOOMRT_ERR_INVALID_ARGUMENT, "fused_elementwise: " + msg);
}

std::string loomrt::fusedKernelText(const char *name, const FusedProgram &prog) {
  // One thread an element over a grid-stride loop; the per-element math is
  // the runtime's own (common/kernel_math.h), called with constant op
  // codes, so each switch folds to the one formula. Single source: the
  // text compiles as CUDA (nvcc, NVRTC) and as HIP (hipcc, clang -x hip).
  std::string src = "// loom-fuse region '" + std::string(name) +
                    "' (generated by loomrt_fused_source)\n"
                    "#if defined(__HIP__) // hipcc and clang -x hip: the built-in names\n"
                    "#include <hip/hip_runtime.h>\n"
                    "#endif\n"
                    "#include \"common/kernel_math.h\"\n\n"
                    "extern \"C\" __global__ void loom_fused_" + name + "(";
  for (int i = 0; i < prog.nIn; ++i)
    src += std::string("const ") + storage(prog.inT[i]) + " *in" + std::to_string(i) + ", ";
  for (int i = 0; i < prog.nOut; ++i)
    src += std::string(storage(prog.outT[i])) + " *out" + std::to_string(i) + ", ";
  src += "unsigned long long n) {\n"
         "  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + "
         "threadIdx.x; i < n;\n"
         "       i += (unsigned long long)gridDim.x * blockDim.x) {\n";
  for (int k = 0; k < prog.nInsts; ++k) {
    const loomrt_fused_inst &x = prog.insts[k];
    std::string r = "r" + std::to_string(k), a = "r" + std::to_string(x.a),
                b = "r" + std::to_string(x.b), kind = std::to_string(x.kind);
    switch (x.opcode) {
    case LOOMRT_FUSED_LOAD:
      src += "    float " + r + " = loomrt::load(in" + std::to_string(x.a) + "[i]);\n";
      break;
    case LOOMRT_FUSED_UNARY:
      src += "    float " + r + " = loomrt::unaryOp(loomrt_unary_op(" + kind + "), " + a + ");\n";
      break;
    case LOOMRT_FUSED_BINARY:
      src += "    float " + r + " = loomrt::binaryOp(loomrt_binary_op(" + kind + "), " + a +
             ", " + b + ");\n";
      break;
    case LOOMRT_FUSED_UNARY_GRAD:
      src += "    float " + r + " = loomrt::unaryGrad(loomrt_unary_op(" + kind + "), " + a +
             ", " + b + ");\n";
      break;
    case LOOMRT_FUSED_ROUND:
      src += "    float " + r + " = loomrt::load(loomrt::store<uint16_t>(" + a + "));\n";
      break;
    default:
      src += "    out" + std::to_string(x.a) + "[i] = loomrt::store<" +
             storage(prog.outT[x.a]) + ">(" + b + ");\n";
      break;
    }
  }
  src += "  }\n}\n";
  return src;
}

extern "C" {

size_t loomrt_fused_source(const loomrt_fused_program *p, char *buf, size_t cap) {
  loomrt::FusedProgram prog;
  if (loomrt::checkFusedProgram(p, prog))
    return 0;
  std::string src = loomrt::fusedKernelText(p->name, prog);
  if (buf && cap > src.size())
    std::memcpy(buf, src.c_str(), src.size() + 1);
  return src.size();
}

} // extern "C"
