//===- RuntimeCalls.h - each loomrt call op as its runtime call -----------===//
//
// The one table from a `loomrt` op to the C ABI function it stands for and
// the order of that function's arguments. Two back ends read it through a
// builder: code generation (lib/Codegen/EmitCpp.cpp) spells each argument
// as C++ text, the reference executor (lib/Execution/Interpreter.cpp) makes
// the call. A new kernel op is added here once and both follow
// (docs/developing.md, "How to add an op").
//
// A builder B provides, each returning the argument in its own currency
// (std::string for text, the C value for calls):
//   stream(v) comm(v) buf(v) ptr<T>(v, "T *") i(int64) flag(bool) f(double)
//   lr(double) dtype(DType) unary(UnaryKind) binary(BinaryKind) codec(BlockCodec)
//   reduce(ReduceKind) shape(name, ArrayRef<int64_t>) gemm(loomrt_gemm)
//   adam(AdamOp or AdamMultiOp): &config
//   adamTensors(AdamMultiOp): its loomrt_adam_tensor array
//   fused(FusedElementwiseOp): &program (loomrt_fused_program)
//   inputs(name, values) / outputs(name, values): arrays of buffers
//   ptrAt<T>(v, bytes, "T *"): a buffer `bytes` into v, as T *
//   hostInt(v): a host integer result (loomrt.random_key, add_i64)
//   rankTimes(comm, n): the rank in comm times n (an element offset)
//   peer(comm, k): the rank k after this one in comm, -1 past either end
// and call(name, function, args...), which emits or makes the call.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIMECALLS_H
#define LOOM_RUNTIMECALLS_H

#include "dialects/LoomRT/LoomRTDialect.h"
#include "loomrt/loomrt.h"

#include "llvm/ADT/TypeSwitch.h"

namespace loom {

/// The loomrt_gemm of a matmul op (loomrt.matmul, matmul_bias, matmul_bias_act,
/// matmul_act_grad, matmul_bgrad).
template <typename Op> loomrt_gemm gemmOf(Op o) {
  return loomrt_gemm{o.getTransA() ? 1 : 0,     o.getTransB() ? 1 : 0,
                     int64_t(o.getBatch()),     int64_t(o.getM()),
                     int64_t(o.getN()),         int64_t(o.getK()),
                     int64_t(o.getStrideA()),   int64_t(o.getStrideB()),
                     int64_t(o.getStrideC()),   1.0f,
                     0.0f,                      loomrt_dtype(o.getIn()),
                     loomrt_dtype(o.getOut())};
}

/// The runtime calls of copies, elementwise ops and compression (a part
/// of visitRuntimeCall's table).
template <typename B> bool visitElementwiseCall(mlir::Operation *op, B &b) {
  namespace rt = mlir::loomrt;
  using llvm::TypeSwitch;
  return TypeSwitch<mlir::Operation *, bool>(op)
      .Case([&](rt::MemcpyOp o) {
        return b.call("loomrt_memcpy_async", loomrt_memcpy_async, b.stream(o.getStream()),
                      b.buf(o.getDst()), b.buf(o.getSrc()), b.i(o.getBytes()));
      })
      .Case([&](rt::FillOp o) {
        return b.call("loomrt_fill", loomrt_fill, b.stream(o.getStream()), b.dtype(o.getDtype()),
                      b.buf(o.getDst()), b.f(o.getValue().convertToDouble()), b.i(o.getN()));
      })
      .Case([&](rt::CopyStridedOp o) {
        return b.call("loomrt_copy_strided", loomrt_copy_strided, b.stream(o.getStream()),
                      b.i(o.getElemBytes()), b.buf(o.getSrc()), b.shape("ss_", o.getSrcStrides()),
                      b.buf(o.getDst()), b.shape("ds_", o.getDstStrides()),
                      b.shape("sh_", o.getShape()), b.i(o.getShape().size()));
      })
      .Case([&](rt::UnaryOp o) {
        return b.call("loomrt_unary", loomrt_unary, b.stream(o.getStream()), b.unary(o.getKind()),
                      b.dtype(o.getDtype()), b.buf(o.getX()), b.buf(o.getY()), b.i(o.getN()));
      })
      .Case([&](rt::DropoutOp o) {
        return b.call("loomrt_dropout", loomrt_dropout, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.buf(o.getX()), b.buf(o.getY()), b.i(o.getN()),
                      b.f(o.getRatio().convertToDouble()), b.hostInt(o.getKey()),
                      b.rankTimes(o.getComm(), o.getN()));
      })
      .Case([&](rt::OnebitCompressOp o) {
        // A sign_scale payload: the fp32 scale, then the packed signs.
        return b.call("loomrt_onebit_compress", loomrt_onebit_compress, b.stream(o.getStream()),
                      b.template ptr<const float>(o.getX(), "const float *"),
                      b.template ptr<float>(o.getError(), "float *"),
                      b.template ptrAt<uint8_t>(o.getPacked(), 4, "uint8_t *"),
                      b.template ptr<float>(o.getPacked(), "float *"), b.i(o.getN()));
      })
      .Case([&](rt::OnebitDecompressOp o) {
        return b.call("loomrt_onebit_decompress", loomrt_onebit_decompress,
                      b.stream(o.getStream()),
                      b.template ptrAt<const uint8_t>(o.getPacked(), 4 * int64_t(o.getChunks()),
                                                      "const uint8_t *"),
                      b.template ptr<const float>(o.getPacked(), "const float *"),
                      b.template ptr<float>(o.getOut(), "float *"), b.i(o.getChunks()),
                      b.i(o.getN()));
      })
      .Case([&](rt::BlockCompressOp o) {
        return b.call("loomrt_block_compress", loomrt_block_compress, b.stream(o.getStream()),
                      b.codec(o.getCodec()), b.template ptr<const float>(o.getX(), "const float *"),
                      b.buf(o.getPacked()), b.i(o.getN()), b.i(o.getBlock()));
      })
      .Case([&](rt::BlockDecompressOp o) {
        return b.call("loomrt_block_decompress", loomrt_block_decompress, b.stream(o.getStream()),
                      b.codec(o.getCodec()), b.buf(o.getPacked()),
                      b.template ptr<float>(o.getOut(), "float *"), b.i(o.getN()),
                      b.i(o.getBlock()));
      })
      .Case([&](rt::OnebitAverageOp o) {
        return b.call("loomrt_onebit_average", loomrt_onebit_average, b.stream(o.getStream()),
                      b.template ptrAt<const uint8_t>(o.getPacked(), 4 * int64_t(o.getWorld()),
                                                      "const uint8_t *"),
                      b.template ptr<const float>(o.getPacked(), "const float *"),
                      b.template ptr<float>(o.getOut(), "float *"), b.i(o.getWorld()),
                      b.i(o.getN()));
      })
      .Case([&](rt::UnaryGradOp o) {
        return b.call("loomrt_unary_grad", loomrt_unary_grad, b.stream(o.getStream()),
                      b.unary(o.getKind()), b.dtype(o.getDtype()), b.buf(o.getDy()),
                      b.buf(o.getX()), b.buf(o.getDx()), b.i(o.getN()));
      })
      .Case([&](rt::BinaryOp o) {
        return b.call("loomrt_binary", loomrt_binary, b.stream(o.getStream()),
                      b.binary(o.getKind()), b.dtype(o.getDtype()), b.buf(o.getA()),
                      b.shape("a_", o.getAShape()), b.buf(o.getB()), b.shape("b_", o.getBShape()),
                      b.buf(o.getOut()), b.shape("o_", o.getOutShape()),
                      b.i(o.getOutShape().size()));
      })
      .Case([&](rt::SelectOp o) {
        return b.call(
            "loomrt_select", loomrt_select, b.stream(o.getStream()), b.dtype(o.getDtype()),
            b.template ptr<const uint8_t>(o.getCond(), "const uint8_t *"),
            b.shape("c_", o.getCondShape()), b.buf(o.getA()), b.shape("a_", o.getAShape()),
            b.buf(o.getB()), b.shape("b_", o.getBShape()), b.buf(o.getOut()),
            b.shape("o_", o.getOutShape()), b.i(o.getOutShape().size()));
      })
      .Case([&](rt::CastOp o) {
        return b.call("loomrt_cast", loomrt_cast, b.stream(o.getStream()), b.dtype(o.getFrom()),
                      b.buf(o.getX()), b.dtype(o.getTo()), b.buf(o.getY()), b.i(o.getN()));
      })
      .Default([](mlir::Operation *) { return false; });
}

/// The runtime calls of products, row ops and attention.
template <typename B> bool visitRowCall(mlir::Operation *op, B &b) {
  namespace rt = mlir::loomrt;
  using llvm::TypeSwitch;
  return TypeSwitch<mlir::Operation *, bool>(op)
      .Case([&](rt::MatmulOp o) {
        return b.call("loomrt_matmul", loomrt_matmul, b.stream(o.getStream()),
                      b.gemm(gemmOf(o)), b.buf(o.getA()), b.buf(o.getB()), b.buf(o.getC()));
      })
      .Case([&](rt::FusedElementwiseOp o) {
        return b.call("loomrt_fused_elementwise", loomrt_fused_elementwise,
                      b.stream(o.getStream()), b.fused(o), b.inputs("fin_", o.getInputs()),
                      b.outputs("fout_", o.getOutputs()), b.i(o.getN()));
      })
      .Case([&](rt::MatmulBiasOp o) {
        return b.call("loomrt_matmul_bias", loomrt_matmul_bias, b.stream(o.getStream()),
                      b.gemm(gemmOf(o)), b.buf(o.getA()), b.buf(o.getB()), b.buf(o.getBias()),
                      b.buf(o.getC()));
      })
      .Case([&](rt::MatmulBiasActOp o) {
        return b.call("loomrt_matmul_bias_act", loomrt_matmul_bias_act, b.stream(o.getStream()),
                      b.gemm(gemmOf(o)), b.unary(o.getAct()), b.buf(o.getA()), b.buf(o.getB()),
                      b.buf(o.getBias()), b.buf(o.getAux()), b.buf(o.getC()));
      })
      .Case([&](rt::MatmulActGradOp o) {
        return b.call("loomrt_matmul_act_grad", loomrt_matmul_act_grad, b.stream(o.getStream()),
                      b.gemm(gemmOf(o)), b.unary(o.getAct()), b.buf(o.getA()), b.buf(o.getB()),
                      b.buf(o.getAux()), b.buf(o.getC()));
      })
      .Case([&](rt::MatmulBgradOp o) {
        return b.call("loomrt_matmul_bgrad", loomrt_matmul_bgrad, b.stream(o.getStream()),
                      b.gemm(gemmOf(o)), b.buf(o.getA()), b.buf(o.getB()), b.buf(o.getC()),
                      b.buf(o.getDb()));
      })
      .Case([&](rt::LayerNormOp o) {
        return b.call("loomrt_layer_norm", loomrt_layer_norm, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.buf(o.getX()), b.buf(o.getW()), b.buf(o.getB()),
                      b.buf(o.getY()), b.i(o.getRows()), b.i(o.getD()),
                      b.f(o.getEps().convertToDouble()));
      })
      .Case([&](rt::LayerNormGradOp o) {
        return b.call("loomrt_layer_norm_grad", loomrt_layer_norm_grad, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.buf(o.getDy()), b.buf(o.getX()), b.buf(o.getW()),
                      b.buf(o.getDx()), b.buf(o.getDw()), b.buf(o.getDb()), b.i(o.getRows()),
                      b.i(o.getD()), b.f(o.getEps().convertToDouble()));
      })
      .Case([&](rt::RmsNormOp o) {
        return b.call("loomrt_rms_norm", loomrt_rms_norm, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.buf(o.getX()), b.buf(o.getW()), b.buf(o.getY()),
                      b.i(o.getRows()), b.i(o.getD()), b.f(o.getEps().convertToDouble()));
      })
      .Case([&](rt::RmsNormGradOp o) {
        return b.call("loomrt_rms_norm_grad", loomrt_rms_norm_grad, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.buf(o.getDy()), b.buf(o.getX()), b.buf(o.getW()),
                      b.buf(o.getDx()), b.buf(o.getDw()), b.i(o.getRows()), b.i(o.getD()),
                      b.f(o.getEps().convertToDouble()));
      })
      .Case([&](rt::SoftmaxOp o) {
        return b.call("loomrt_softmax", loomrt_softmax, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.buf(o.getX()), b.buf(o.getY()), b.i(o.getRows()),
                      b.i(o.getD()), b.f(1.0), b.flag(o.getLog()), b.i(0));
      })
      .Case([&](rt::SoftmaxGradOp o) {
        return b.call("loomrt_softmax_grad", loomrt_softmax_grad, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.buf(o.getDy()), b.buf(o.getY()), b.buf(o.getDx()),
                      b.i(o.getRows()), b.i(o.getD()), b.f(1.0), b.flag(o.getLog()));
      })
      .Case([&](rt::EmbeddingOp o) {
        return b.call("loomrt_embedding", loomrt_embedding, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.buf(o.getTable()),
                      b.template ptr<const int64_t>(o.getIndices(), "const int64_t *"),
                      b.buf(o.getOut()), b.i(o.getN()), b.i(o.getD()), b.i(o.getVocab()));
      })
      .Case([&](rt::GatherRowsOp o) {
        return b.call("loomrt_gather_rows", loomrt_gather_rows, b.stream(o.getStream()),
                      b.buf(o.getTable()), b.i(o.getNumRows()), b.i(o.getRowBytes()),
                      b.template ptr<const int64_t>(o.getRows(), "const int64_t *"),
                      b.i(o.getN()), b.buf(o.getOut()),
                      b.i(o.getSorted() ? LOOMRT_GATHER_SORTED : 0));
      })
      .Case([&](rt::EmbeddingGradOp o) {
        return b.call("loomrt_embedding_grad", loomrt_embedding_grad, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.buf(o.getDy()),
                      b.template ptr<const int64_t>(o.getIndices(), "const int64_t *"),
                      b.template ptr<float>(o.getDtable(), "float *"), b.i(o.getN()), b.i(o.getD()),
                      b.i(o.getVocab()));
      })
      .Case([&](rt::TopKOp o) {
        return b.call("loomrt_top_k", loomrt_top_k, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.buf(o.getX()), b.buf(o.getValues()),
                      b.template ptr<int64_t>(o.getIndices(), "int64_t *"), b.i(o.getRows()),
                      b.i(o.getN()), b.i(o.getK()));
      })
      .Case([&](rt::TopKGradOp o) {
        return b.call("loomrt_top_k_grad", loomrt_top_k_grad, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.buf(o.getDv()),
                      b.template ptr<const int64_t>(o.getIndices(), "const int64_t *"),
                      b.buf(o.getDx()), b.i(o.getRows()), b.i(o.getN()), b.i(o.getK()));
      })
      .Case([&](rt::MoeSlotsOp o) {
        return b.call("loomrt_moe_slots", loomrt_moe_slots, b.stream(o.getStream()),
                      b.template ptr<const int64_t>(o.getExperts(), "const int64_t *"),
                      b.template ptr<int64_t>(o.getSlots(), "int64_t *"),
                      b.template ptr<float>(o.getCounts(), "float *"), b.i(o.getN()),
                      b.i(o.getK()), b.i(o.getNumExperts()), b.i(o.getCapacity()));
      })
      .Case([&](rt::MoeDispatchOp o) {
        return b.call("loomrt_moe_dispatch", loomrt_moe_dispatch, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.buf(o.getX()),
                      b.template ptr<const int64_t>(o.getSlots(), "const int64_t *"),
                      b.buf(o.getWeights()), b.buf(o.getOut()), b.i(o.getN()), b.i(o.getK()),
                      b.i(o.getD()), b.i(o.getRows()));
      })
      .Case([&](rt::MoeCombineOp o) {
        return b.call("loomrt_moe_combine", loomrt_moe_combine, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.buf(o.getY()),
                      b.template ptr<const int64_t>(o.getSlots(), "const int64_t *"),
                      b.buf(o.getWeights()), b.buf(o.getOut()), b.i(o.getN()), b.i(o.getK()),
                      b.i(o.getD()), b.i(o.getRows()));
      })
      .Case([&](rt::MoeSlotDotOp o) {
        return b.call("loomrt_moe_slot_dot", loomrt_moe_slot_dot, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.buf(o.getA()), b.buf(o.getB()),
                      b.template ptr<const int64_t>(o.getSlots(), "const int64_t *"),
                      b.buf(o.getOut()), b.i(o.getN()), b.i(o.getK()), b.i(o.getD()),
                      b.i(o.getRows()));
      })
      .Case([&](rt::AttentionOp o) {
        return b.call("loomrt_attention", loomrt_attention, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.i(o.getBh()), b.i(o.getT()), b.i(o.getS()),
                      b.i(o.getDh()), b.f(o.getScale().convertToDouble()), b.flag(o.getCausal()),
                      b.buf(o.getQ()), b.buf(o.getK()), b.buf(o.getV()), b.buf(o.getOut()),
                      b.buf(o.getWorkspace()));
      })
      .Case([&](rt::AttentionGradOp o) {
        return b.call("loomrt_attention_grad", loomrt_attention_grad, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.i(o.getBh()), b.i(o.getT()), b.i(o.getS()),
                      b.i(o.getDh()), b.f(o.getScale().convertToDouble()), b.flag(o.getCausal()),
                      b.buf(o.getQ()), b.buf(o.getK()), b.buf(o.getV()), b.buf(o.getDout()),
                      b.buf(o.getDq()), b.buf(o.getDk()), b.buf(o.getDv()),
                      b.buf(o.getWorkspace()));
      })
      .Case([&](rt::AttentionSaveOp o) {
        return b.call("loomrt_attention_save", loomrt_attention_save, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.i(o.getBh()), b.i(o.getT()), b.i(o.getS()),
                      b.i(o.getDh()), b.f(o.getScale().convertToDouble()), b.flag(o.getCausal()),
                      b.buf(o.getQ()), b.buf(o.getK()), b.buf(o.getV()), b.buf(o.getOut()),
                      b.buf(o.getSaved()), b.buf(o.getWorkspace()));
      })
      .Default([](mlir::Operation *) { return false; });
}

/// The runtime calls of losses, reductions, optimizer updates and
/// collectives.
template <typename B> bool visitUpdateCall(mlir::Operation *op, B &b) {
  namespace rt = mlir::loomrt;
  using llvm::TypeSwitch;
  return TypeSwitch<mlir::Operation *, bool>(op)
      .Case([&](rt::AttentionGradSavedOp o) {
        return b.call("loomrt_attention_grad_saved", loomrt_attention_grad_saved,
                      b.stream(o.getStream()), b.dtype(o.getDtype()), b.i(o.getBh()),
                      b.i(o.getT()), b.i(o.getS()), b.i(o.getDh()),
                      b.f(o.getScale().convertToDouble()), b.flag(o.getCausal()),
                      b.buf(o.getQ()), b.buf(o.getK()), b.buf(o.getV()), b.buf(o.getOut()),
                      b.buf(o.getSaved()), b.buf(o.getDout()), b.buf(o.getDq()),
                      b.buf(o.getDk()), b.buf(o.getDv()), b.buf(o.getWorkspace()));
      })
      .Case([&](rt::CrossEntropyOp o) {
        return b.call("loomrt_cross_entropy", loomrt_cross_entropy, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.buf(o.getLogits()),
                      b.template ptr<const int64_t>(o.getLabels(), "const int64_t *"),
                      b.template ptr<float>(o.getLoss(), "float *"), b.i(o.getRows()),
                      b.i(o.getClasses()));
      })
      .Case([&](rt::CrossEntropyGradOp o) {
        return b.call("loomrt_cross_entropy_grad", loomrt_cross_entropy_grad,
                      b.stream(o.getStream()), b.dtype(o.getDtype()), b.buf(o.getLogits()),
                      b.template ptr<const int64_t>(o.getLabels(), "const int64_t *"),
                      b.template ptr<const float>(o.getDloss(), "const float *"),
                      b.buf(o.getDlogits()), b.i(o.getRows()), b.i(o.getClasses()));
      })
      .Case([&](rt::RotaryOp o) {
        return b.call("loomrt_rotary", loomrt_rotary, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.buf(o.getX()), b.buf(o.getCos()),
                      b.buf(o.getSin()), b.buf(o.getY()), b.i(o.getRows()), b.i(o.getPeriod()),
                      b.i(o.getD()), b.flag(o.getTranspose()));
      })
      .Case([&](rt::LerpOp o) {
        return b.call("loomrt_lerp", loomrt_lerp, b.stream(o.getStream()), b.dtype(o.getDtype()),
                      b.buf(o.getA()), b.buf(o.getB()), b.buf(o.getY()), b.i(o.getN()),
                      b.f(o.getWeight().convertToDouble()));
      })
      .Case([&](rt::CumsumOp o) {
        return b.call("loomrt_cumsum", loomrt_cumsum, b.stream(o.getStream()),
                      b.dtype(o.getDtype()), b.buf(o.getX()), b.buf(o.getY()), b.i(o.getOuter()),
                      b.i(o.getLen()), b.i(o.getInner()), b.flag(o.getExclusive()),
                      b.flag(o.getReverse()));
      })
      .Case([&](rt::ReduceOp o) {
        return b.call("loomrt_reduce", loomrt_reduce, b.stream(o.getStream()),
                      b.reduce(o.getKind()), b.dtype(o.getDtype()), b.buf(o.getX()),
                      b.buf(o.getY()), b.i(o.getOuter()), b.i(o.getLen()), b.i(o.getInner()));
      })
      .Case([&](rt::AdamOp o) {
        // The config (hyperparameters, the step's host counter) and, for a
        // host update, the driver's timing around the call.
        auto c = b.adam(o);
        if (o.getGradDtype() == rt::DType::bf16)
          return b.call("loomrt_adam_bf16grad", loomrt_adam_bf16grad, b.stream(o.getStream()), c,
                        b.template ptr<float>(o.getParam(), "float *"),
                        b.template ptr<const uint16_t>(o.getGrad(), "const uint16_t *"),
                        b.template ptr<float>(o.getExpAvg(), "float *"),
                        b.template ptr<float>(o.getExpAvgSq(), "float *"),
                        b.template ptr<uint16_t>(o.getRefresh(), "uint16_t *"), b.i(o.getN()));
        return b.call("loomrt_adam_f32", loomrt_adam_f32, b.stream(o.getStream()), c,
                      b.template ptr<float>(o.getParam(), "float *"),
                      b.template ptr<const float>(o.getGrad(), "const float *"),
                      b.template ptr<float>(o.getExpAvg(), "float *"),
                      b.template ptr<float>(o.getExpAvgSq(), "float *"), b.i(o.getN()));
      })
      .Case([&](rt::AdamMultiOp o) {
        // One config for every tensor; the tensors as loomrt_adam_tensor.
        auto c = b.adam(o);
        return b.call("loomrt_adam_multi", loomrt_adam_multi, b.stream(o.getStream()), c,
                      b.dtype(o.getGradDtype()), b.adamTensors(o), b.i(o.getSizes().size()));
      })
      .Case([&](rt::SgdOp o) {
        return b.call("loomrt_sgd_f32", loomrt_sgd_f32, b.stream(o.getStream()),
                      b.lr(o.getLr().convertToDouble()), b.f(o.getMomentum().convertToDouble()),
                      b.flag(o.getNesterov()), b.template ptr<float>(o.getParam(), "float *"),
                      b.template ptr<const float>(o.getGrad(), "const float *"),
                      b.template ptr<float>(o.getMomentumBuf(), "float *"), b.i(o.getN()));
      })
      .Case([&](rt::AllReduceOp o) {
        return b.call("loomrt_all_reduce", loomrt_all_reduce, b.comm(o.getComm()),
                      b.stream(o.getStream()), b.dtype(o.getDtype()), b.buf(o.getInput()),
                      b.buf(o.getOutput()), b.i(o.getN()), b.reduce(o.getReduce()));
      })
      .Case([&](rt::ReduceScatterOp o) {
        return b.call("loomrt_reduce_scatter", loomrt_reduce_scatter, b.comm(o.getComm()),
                      b.stream(o.getStream()), b.dtype(o.getDtype()), b.buf(o.getInput()),
                      b.buf(o.getOutput()), b.i(o.getN()), b.reduce(o.getReduce()));
      })
      .Case([&](rt::AllToAllOp o) {
        return b.call("loomrt_all_to_all", loomrt_all_to_all, b.comm(o.getComm()),
                      b.stream(o.getStream()), b.buf(o.getInput()), b.buf(o.getOutput()),
                      b.i(o.getBytes()));
      })
      .Case([&](rt::SendRecvOp o) {
        return b.call("loomrt_send_recv", loomrt_send_recv, b.comm(o.getComm()),
                      b.stream(o.getStream()), b.buf(o.getInput()), b.i(o.getBytes()),
                      b.peer(o.getComm(), int64_t(o.getShift())), b.buf(o.getOutput()),
                      b.i(o.getBytes()), b.peer(o.getComm(), -int64_t(o.getShift())));
      })
      // A side that is absent: no buffer, no bytes, no peer (-1).
      .Case([&](rt::P2POp o) {
        mlir::Value in = o.getInput(), out = o.getOutput();
        int64_t n = int64_t(o.getBytes());
        if (in && out)
          return b.call("loomrt_send_recv", loomrt_send_recv, b.comm(o.getComm()),
                        b.stream(o.getStream()), b.buf(in), b.i(n), b.peer(o.getComm(), o.sendPeer()),
                        b.buf(out), b.i(n), b.peer(o.getComm(), o.recvPeer()));
        if (in)
          return b.call("loomrt_send_recv", loomrt_send_recv, b.comm(o.getComm()),
                        b.stream(o.getStream()), b.buf(in), b.i(n), b.peer(o.getComm(), o.sendPeer()),
                        b.buf(mlir::Value()), b.i(0), b.i(-1));
        return b.call("loomrt_send_recv", loomrt_send_recv, b.comm(o.getComm()),
                      b.stream(o.getStream()), b.buf(mlir::Value()), b.i(0), b.i(-1), b.buf(out),
                      b.i(n), b.peer(o.getComm(), o.recvPeer()));
      })
      .Case([&](rt::AllGatherBytesOp o) {
        return b.call("loomrt_all_gather_bytes", loomrt_all_gather_bytes, b.comm(o.getComm()),
                      b.stream(o.getStream()), b.buf(o.getInput()), b.buf(o.getOutput()),
                      b.i(o.getBytes()));
      })
      .Case([&](rt::AllGatherOp o) {
        return b.call("loomrt_all_gather", loomrt_all_gather, b.comm(o.getComm()),
                      b.stream(o.getStream()), b.dtype(o.getDtype()), b.buf(o.getInput()),
                      b.buf(o.getOutput()), b.i(o.getN()));
      })
      .Default([](mlir::Operation *) { return false; });
}

/// Calls `b.call(...)` for a loomrt op that is a runtime call; returns
/// false (and does nothing) for any other op.
template <typename B> bool visitRuntimeCall(mlir::Operation *op, B &b) {
  return visitElementwiseCall(op, b) || visitRowCall(op, b) || visitUpdateCall(op, b);
}

} // namespace loom

#endif // LOOM_RUNTIMECALLS_H
