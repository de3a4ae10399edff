//===- fuzz_mlir.cpp - .mlir text through parse, verify and the compiler --===//
//
// The input reaches the parser as loom-opt and loomc give it a file: in a
// null-terminated buffer (MLIR's lexer relies on the terminator, so raw
// fuzzer bytes would only find that assumption).
//
//===----------------------------------------------------------------------===//
#include "FuzzCommon.h"

#include "mlir/Parser/Parser.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  loom::fuzz::Context c;
  llvm::SourceMgr sources;
  sources.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef((const char *)data, size), "fuzz.mlir"),
      llvm::SMLoc());
  mlir::ParserConfig config(&c.ctx);
  auto module = mlir::parseSourceFile<mlir::ModuleOp>(sources, config);
  if (module)
    loom::fuzz::compileRest(*module);
  return 0;
}
