//===- loom-run.cpp - execute a function of loom IR -----------------------===//
//
//   loom-run model.mlir --function=forward_backward --inputs=in.safetensors
//            [--params=p.safetensors | --seed=N] [--dump-params=FILE]
//            [--outputs=out.safetensors] [--backend=cpu|cuda]
//
// Inputs are named arg0, arg1, ... (the function's arguments, in order);
// outputs out0, ... or, for a function made by loom-autodiff, out0 (the
// loss) and grad.<parameter>. Scalar results are also printed.
//
//===----------------------------------------------------------------------===//
#include "loom/Execution.h"
#include "loom/InitAll.h"

#include "dialects/Loom/LoomOps.h"
#include "loomrt/loomrt.h"
#include "llvm/Support/Format.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"

#include <chrono>
#include <cstring>

using namespace mlir;
namespace cl = llvm::cl;

namespace {

int fail(const llvm::Twine &msg) {
  llvm::errs() << "loom-run: error: " << msg << "\n";
  return 1;
}

std::optional<loomrt_dtype> dtypeOf(Type t) {
  if (t.isF32())
    return LOOMRT_F32;
  if (t.isBF16())
    return LOOMRT_BF16;
  if (t.isInteger(64))
    return LOOMRT_I64;
  return std::nullopt;
}
const char *dtypeName(loomrt_dtype d) {
  return d == LOOMRT_BF16 ? "BF16" : d == LOOMRT_I64 ? "I64" : "F32";
}
size_t dtypeBytes(loomrt_dtype d) {
  return d == LOOMRT_BF16 ? 2 : d == LOOMRT_I64 ? 8 : 4;
}

/// Reads tensors of known names and types from a safetensors file.
bool readTensors(const std::string &path,
                 const std::vector<std::pair<std::string, RankedTensorType>> &want,
                 std::vector<::loom::HostTensor> &out, std::string &err) {
  std::vector<loomrt_tensor_ref> refs;
  out.resize(want.size());
  for (auto [i, w] : llvm::enumerate(want)) {
    auto dt = dtypeOf(w.second.getElementType());
    if (!dt || w.second.getRank() > LOOMRT_MAX_RANK)
      return err = "'" + w.first + "' has a type loom-run cannot read", false;
    ::loom::HostTensor &h = out[i];
    h.name = w.first;
    h.dtype = dtypeName(*dt);
    h.shape.assign(w.second.getShape().begin(), w.second.getShape().end());
    h.bytes.resize(size_t(w.second.getNumElements()) * dtypeBytes(*dt));
    loomrt_tensor_ref r{h.name.c_str(), *dt, int(w.second.getRank()), {}, h.bytes.data()};
    for (int d = 0; d < r.rank; ++d)
      r.shape[d] = h.shape[d];
    refs.push_back(r);
  }
  if (loomrt_checkpoint_load(path.c_str(), refs.data(), refs.size()))
    return err = loomrt_last_error(), false;
  return true;
}

bool writeTensors(const std::string &path,
                  const std::vector<::loom::HostTensor> &ts, std::string &err) {
  std::vector<loomrt_tensor_ref> refs;
  for (const ::loom::HostTensor &h : ts) {
    loomrt_dtype dt = h.dtype == "BF16" ? LOOMRT_BF16
                      : h.dtype == "I64" ? LOOMRT_I64
                                         : LOOMRT_F32;
    if (h.dtype != dtypeName(dt))
      return err = "cannot write '" + h.name + "' of dtype " + h.dtype, false;
    loomrt_tensor_ref r{h.name.c_str(), dt, int(h.shape.size()), {},
                        const_cast<uint8_t *>(h.bytes.data())};
    for (size_t d = 0; d < h.shape.size(); ++d)
      r.shape[d] = h.shape[d];
    refs.push_back(r);
  }
  if (loomrt_checkpoint_save(path.c_str(), refs.data(), refs.size(), nullptr,
                             nullptr, 0))
    return err = loomrt_last_error(), false;
  return true;
}

/// The tokens of `path` for @f, a function of (tokens, targets), both
/// [B, T] i64: false with `err` set when it is not one or the file is short.
bool readTokens(func::FuncOp f, const std::string &path, std::vector<uint16_t> &tokens,
                int64_t &batch, int64_t &seq, std::string &err) {
  auto isTokens = [](Type t) {
    auto r = dyn_cast<RankedTensorType>(t);
    return r && r.getRank() == 2 && r.getElementType().isInteger(64);
  };
  if (f.getNumArguments() != 2 || !isTokens(f.getArgumentTypes()[0]) ||
      f.getArgumentTypes()[0] != f.getArgumentTypes()[1])
    return err = ("--data feeds functions of (tokens, targets), both [B, T] i64; @" +
                  f.getName() + " is not one").str(),
           false;
  auto shape = cast<RankedTensorType>(f.getArgumentTypes()[0]).getShape();
  batch = shape[0];
  seq = shape[1];
  auto file = llvm::MemoryBuffer::getFile(path, /*IsText=*/false);
  if (!file)
    return err = "cannot open data file '" + path + "': " + file.getError().message(), false;
  size_t n = (*file)->getBufferSize() / 2;
  if (int64_t(n) < batch * seq + 2)
    return err = ("data file '" + path + "' has " + llvm::Twine(n) + " tokens; a batch of " +
                  llvm::Twine(batch) + " x " + llvm::Twine(seq) + " needs at least " +
                  llvm::Twine(batch * seq + 2))
                     .str(),
           false;
  tokens.resize(n);
  std::memcpy(tokens.data(), (*file)->getBufferStart(), n * 2);
  return true;
}

/// Step `step`'s (tokens, targets): the data order of the training binary
/// (issue 6), so runs compare with other frameworks reading the same file.
std::vector<::loom::HostTensor> tokenArgs(const std::vector<uint16_t> &tokens, int64_t batch,
                                          int64_t seq, unsigned step) {
  int64_t bt = batch * seq, n = int64_t(tokens.size());
  int64_t offset = (int64_t(step - 1) * bt) % (n - bt - 1);
  std::vector<::loom::HostTensor> args(2);
  for (int k = 0; k < 2; ++k) {
    args[k].name = k ? "targets" : "tokens";
    args[k].dtype = "I64";
    args[k].shape = {batch, seq};
    args[k].bytes.resize(size_t(bt) * 8);
    for (int64_t i = 0; i < bt; ++i) {
      int64_t v = tokens[size_t(offset + i + k)];
      std::memcpy(&args[k].bytes[size_t(i) * 8], &v, 8);
    }
  }
  return args;
}

} // namespace


int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  ::loom::installCrashMessage();
  static cl::OptionCategory cat("loom-run options");
  cl::opt<std::string> input(cl::Positional, cl::Required,
                             cl::desc("<module.mlir>"), cl::cat(cat));
  cl::opt<std::string> function("function", cl::init("forward"),
                                cl::desc("Function to run"), cl::cat(cat));
  cl::opt<std::string> inputs("inputs", cl::init(""),
                              cl::desc("safetensors file with arg0, arg1, ..."),
                              cl::cat(cat));
  cl::opt<std::string> params("params", cl::init(""),
                              cl::desc("safetensors file of parameter values"),
                              cl::cat(cat));
  cl::opt<uint64_t> seed("seed", cl::init(0),
                         cl::desc("Seed of the parameter initialisers"),
                         cl::cat(cat));
  cl::opt<std::string> dumpParams("dump-params", cl::init(""),
                                  cl::desc("Write the parameters used here"),
                                  cl::cat(cat));
  cl::opt<std::string> outputs("outputs", cl::init(""),
                               cl::desc("Write the results to this file"),
                               cl::cat(cat));
  cl::opt<unsigned> steps("steps", cl::init(1),
                          cl::desc("Run the function this many times (a "
                                   "training step: parameters persist)"),
                          cl::cat(cat));
  cl::opt<std::string> data(
      "data", cl::init(""),
      cl::desc("Token file (raw little-endian uint16, as nanoGPT's train.bin) "
               "feeding a function of (tokens, targets), both [B, T] i64: "
               "step s reads B*T+1 tokens at (s*B*T) mod (N - B*T - 1)"),
      cl::cat(cat));
  cl::opt<std::string> backend("backend", cl::init("cpu"),
                               cl::desc("cpu or cuda"), cl::cat(cat));
  cl::HideUnrelatedOptions(cat);
  cl::ParseCommandLineOptions(argc, argv, "loom-run: execute loom IR\n");

  DialectRegistry registry;
  ::loom::registerAllDialects(registry);
  MLIRContext ctx(registry);
  llvm::SourceMgr sm;
  std::string err;
  auto buf = llvm::MemoryBuffer::getFileOrSTDIN(input);
  if (!buf)
    return fail("cannot open '" + input + "': " + buf.getError().message());
  sm.AddNewSourceBuffer(std::move(*buf), llvm::SMLoc());
  SourceMgrDiagnosticHandler handler(sm, &ctx);
  OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(sm, &ctx);
  if (!module || failed(verify(*module)))
    return 1;
  auto f = module->lookupSymbol<func::FuncOp>(function);
  if (!f)
    return fail("no function @" + function);

  auto exec = ::loom::Executor::create(*module, backend, err);
  if (!exec)
    return fail(err);
  if (!exec->initParams(seed, err))
    return fail(err);
  if (!params.empty()) {
    std::vector<std::pair<std::string, RankedTensorType>> want;
    for (auto p : module->getOps<mlir::loom::ParamOp>())
      want.push_back({p.getSymName().str(), cast<RankedTensorType>(p.getType())});
    std::vector<::loom::HostTensor> values;
    if (!readTensors(params, want, values, err) || !exec->setParams(values, err))
      return fail(err);
  }
  if (!dumpParams.empty() && !writeTensors(dumpParams, exec->getParams(), err))
    return fail(err);

  std::vector<::loom::HostTensor> args;
  std::vector<uint16_t> tokens;
  int64_t batch = 0, seq = 0;
  if (!data.empty()) {
    if (!readTokens(f, data, tokens, batch, seq, err))
      return fail(err);
  } else if (f.getNumArguments()) {
    if (inputs.empty())
      return fail("@" + function + " takes " +
                  llvm::Twine(f.getNumArguments()) +
                  " arguments: give them with --inputs");
    std::vector<std::pair<std::string, RankedTensorType>> want;
    for (auto [i, a] : llvm::enumerate(f.getArguments()))
      want.push_back({"arg" + std::to_string(i), cast<RankedTensorType>(a.getType())});
    if (!readTensors(inputs, want, args, err))
      return fail(err);
  }
  std::vector<::loom::HostTensor> results;
  for (unsigned step = 1; step <= steps; ++step) {
    results.clear();
    if (!tokens.empty())
      args = tokenArgs(tokens, batch, seq, step);
    auto t0 = std::chrono::steady_clock::now();
    if (!exec->run(function, args, results, err))
      return fail(err);
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
    if (!tokens.empty() && !results.empty()) {
      float loss;
      std::memcpy(&loss, results[0].bytes.data(), 4);
      llvm::outs() << llvm::format("step %4u  loss %.5f  %8.1f ms  %9.0f tokens/s\n",
                                   step, loss, ms, batch * seq / (ms * 1e-3));
      continue;
    }
    for (const ::loom::HostTensor &r : results)
      if (r.shape.empty() && r.dtype == "F32") {
        float v;
        std::memcpy(&v, r.bytes.data(), 4);
        if (steps > 1)
          llvm::outs() << "step " << step << " ";
        llvm::outs() << r.name << " = " << llvm::format("%.8g", v) << "\n";
      }
  }
  if (!outputs.empty() && !writeTensors(outputs, results, err))
    return fail(err);
  return 0;
}
