//===- LoomAttrs.cpp - attributes and types of the loom dialect -----------===//
#include "dialects/Loom/LoomDialect.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace mlir::loom;

#include "dialects/Loom/LoomEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "dialects/Loom/LoomAttrs.cpp.inc"
#define GET_TYPEDEF_CLASSES
#include "dialects/Loom/LoomTypes.cpp.inc"

void LoomDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Loom/LoomAttrs.cpp.inc"
      >();
}

void LoomDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/Loom/LoomTypes.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// StreamAttr
//===----------------------------------------------------------------------===//

LogicalResult StreamAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                 StreamKind, int64_t index) {
  if (index < 0)
    return emitError() << "stream index must be non-negative, got " << index;
  return success();
}

//===----------------------------------------------------------------------===//
// CodecAttr
//===----------------------------------------------------------------------===//

LogicalResult CodecAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                CodecKind kind, int64_t block) {
  if (block < 0)
    return emitError() << "codec block size must be non-negative, got "
                       << block;
  if ((kind == CodecKind::int8 || kind == CodecKind::int4) && block == 0)
    return emitError() << "codec " << stringifyCodecKind(kind)
                       << " quantises in blocks: give a positive block size "
                          "(e.g. block = 4096)";
  return success();
}

unsigned CodecAttr::getBitsPerElement() const {
  switch (getKind()) {
  case CodecKind::sign_scale:
    return 1;
  case CodecKind::int4:
  case CodecKind::fp4_e2m1:
    return 4;
  case CodecKind::int8:
  case CodecKind::fp8_e4m3:
  case CodecKind::fp8_e5m2:
    return 8;
  }
  return 32;
}

//===----------------------------------------------------------------------===//
// InitAttr: #loom.init<zeros> | <ones> | <normal(mean, std)> | <uniform(lo, hi)>
//===----------------------------------------------------------------------===//

Attribute InitAttr::parse(AsmParser &parser, Type) {
  StringRef keyword;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess() || parser.parseKeyword(&keyword))
    return {};
  std::optional<InitKind> kind = symbolizeInitKind(keyword);
  if (!kind) {
    parser.emitError(loc, "unknown initialiser '")
        << keyword << "': expected zeros, ones, normal(mean, std) or "
        << "uniform(low, high)";
    return {};
  }
  double a = 0.0, b = 0.0;
  if (*kind == InitKind::normal || *kind == InitKind::uniform) {
    if (parser.parseLParen() || parser.parseFloat(a) || parser.parseComma() ||
        parser.parseFloat(b) || parser.parseRParen())
      return {};
  }
  if (parser.parseGreater())
    return {};
  return InitAttr::getChecked([&] { return parser.emitError(loc); },
                              parser.getContext(), *kind, llvm::APFloat(a),
                              llvm::APFloat(b));
}

void InitAttr::print(AsmPrinter &printer) const {
  printer << '<' << stringifyInitKind(getKind());
  if (getKind() == InitKind::normal || getKind() == InitKind::uniform) {
    printer << '(';
    printer.printFloat(getA());
    printer << ", ";
    printer.printFloat(getB());
    printer << ')';
  }
  printer << '>';
}

LogicalResult InitAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               InitKind kind, llvm::APFloat af,
                               llvm::APFloat bf) {
  double a = af.convertToDouble(), b = bf.convertToDouble();
  if (kind == InitKind::normal && !(b > 0.0))
    return emitError() << "normal initialiser needs a positive standard "
                          "deviation, got "
                       << b;
  if (kind == InitKind::uniform && !(a < b))
    return emitError() << "uniform initialiser needs low < high, got [" << a
                       << ", " << b << ")";
  return success();
}

//===----------------------------------------------------------------------===//
// PackedType
//===----------------------------------------------------------------------===//

LogicalResult PackedType::verify(function_ref<InFlightDiagnostic()> emitError,
                                 RankedTensorType logical, CodecAttr codec) {
  if (!logical.hasStaticShape())
    return emitError() << "packed payloads need a statically shaped tensor";
  if (!isa<FloatType>(logical.getElementType()))
    return emitError() << "codec " << stringifyCodecKind(codec.getKind())
                       << " compresses floating-point tensors, not "
                       << logical.getElementType();
  if (logical.getEncoding() && !isa<MemSpaceAttr>(logical.getEncoding()))
    return emitError() << "packed payload's tensor encoding must be a "
                          "#loom.mem placement";
  return success();
}

int64_t PackedType::getStorageBytes() const {
  int64_t n = getLogical().getNumElements();
  int64_t bits = n * getCodec().getBitsPerElement();
  int64_t block = getCodec().getBlock();
  // A codec without a block keeps one scale for the whole tensor.
  // (ceil(n / block) without n + block - 1, which a block near INT64_MAX
  // in a hand-written attribute would overflow.)
  int64_t scales = block > 0 ? (n > 0 ? (n - 1) / block + 1 : 0) : 1;
  return (bits + 7) / 8 + 4 * scales;
}

//===----------------------------------------------------------------------===//
// The decisions passes hand each other
//===----------------------------------------------------------------------===//

LogicalResult DataParallelAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t world,
                                       int64_t zeroStage) {
  if (world < 1 || world > (int64_t(1) << 20))
    return emitError() << "data_parallel world must be in [1, 1048576], got " << world;
  if (zeroStage < 0 || zeroStage > 3)
    return emitError() << "data_parallel zero_stage must be in [0, 3], got " << zeroStage;
  return success();
}

/// A prediction or a byte count: finite and not negative.
static bool isMeasure(const llvm::APFloat &f) {
  double v = f.convertToDouble();
  return std::isfinite(v) && v >= 0;
}

LogicalResult OffloadPlanAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t gpu,
                                      int64_t stream, int64_t cpu, StringRef, llvm::APFloat stepS,
                                      llvm::APFloat updateS, int64_t peakBytes,
                                      int64_t usableBytes) {
  if (gpu < 0 || stream < 0 || cpu < 0)
    return emitError() << "offload_plan subgroup counts must be non-negative, got gpu = " << gpu
                       << ", stream = " << stream << ", cpu = " << cpu;
  if (!isMeasure(stepS) || !isMeasure(updateS) || peakBytes < 0 || usableBytes < 0)
    return emitError() << "offload_plan predictions must be finite and non-negative";
  return success();
}

LogicalResult DilocoAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t every,
                                 int64_t offset, bool, bool) {
  if (every < 1 || offset < 1)
    return emitError() << "diloco every and offset must be at least 1, got every = " << every
                       << ", offset = " << offset;
  return success();
}

LogicalResult GraphAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                ArrayRef<int64_t> fanouts, GraphNorm, std::optional<FeaturePlace>) {
  if (fanouts.empty() || !llvm::all_of(fanouts, [](int64_t f) { return f >= 1 && f <= 4096; }))
    return emitError() << "graph fanouts must be one or more hops, each in [1, 4096]";
  return success();
}

LogicalResult OptimizerOffloadAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                           OffloadMode mode, llvm::APFloat fraction) {
  double gpuFraction = fraction.convertToDouble();
  if (!(gpuFraction >= 0 && gpuFraction <= 1))
    return emitError() << "optimizer_offload gpu_fraction must be in [0, 1], got " << gpuFraction;
  if (mode != OffloadMode::static_ratio && gpuFraction != 0)
    return emitError() << "optimizer_offload gpu_fraction is given only with 'static'";
  return success();
}

FailureOr<OptimizerOffloadAttr> mlir::loom::parseOffloadMode(MLIRContext *ctx, StringRef mode,
                                                             std::string &error) {
  if (mode == "cpu")
    return OptimizerOffloadAttr::get(ctx, OffloadMode::cpu, llvm::APFloat(0.0));
  if (mode == "subgroups")
    return OptimizerOffloadAttr::get(ctx, OffloadMode::subgroups, llvm::APFloat(0.0));
  double ratio = 0;
  StringRef r = mode;
  if (r.consume_front("static:") && !r.getAsDouble(ratio) && ratio >= 0 && ratio <= 1)
    return OptimizerOffloadAttr::get(ctx, OffloadMode::static_ratio, llvm::APFloat(ratio));
  if (mode.starts_with("static"))
    error = "static:R needs a fraction R in [0, 1], got '" + mode.str() + "'";
  else
    error = "unknown mode '" + mode.str() + "': expected cpu, static:R or subgroups";
  return failure();
}
