//===- LoomRTOps.td - the loomrt dialect: the runtime's entry points ------===//
//
// One op per runtime entry point that a training step calls (runtime/include/
// loomrt/loomrt.h and train.h). Buffers, streams, events and communicators
// are SSA values; sizes, shapes and kinds are attributes, so an op holds
// exactly the arguments of its call. `loom-lower-to-runtime` makes every
// decision that leads here (allocation and release, streams and events,
// in-place updates); code generation translates each op to its call, the
// reference executor (loom-run) makes the call, the step simulation prices it.
//
//===----------------------------------------------------------------------===//
#ifndef LOOMRT_OPS_TD
#define LOOMRT_OPS_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def LoomRT_Dialect : Dialect {
  let name = "loomrt";
  let cppNamespace = "::mlir::loomrt";
  let summary = "Runtime calls, buffers, streams and events of a training step";
  let description = [{
    The `loomrt` dialect is the last IR before C++: a training step as the
    sequence of runtime calls the generated binary makes. Every value is a
    handle the runtime knows (`!loomrt.buffer`, `!loomrt.stream`,
    `!loomrt.event`, `!loomrt.comm`) or a host integer; every op is one
    entry point of `loomrt.h` with its sizes spelled out as attributes.
    Nothing is left to decide: which buffer is reused, when it goes back to
    the step arena (`loomrt.free`), which stream runs a call and which event
    orders it are all in the IR, so they can be printed, FileChecked and
    changed like every other decision.

    Functions keep the `func` dialect; their tensor arguments and results
    become `!loomrt.buffer`s (device pointers). Module-level `loom.param` and
    `loom.state` declarations stay: `loomrt.global @name` is the address of
    one.
  }];
  let useDefaultTypePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    void registerTypes();
  }];
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

class LoomRT_Type<string name, string typeMnemonic, string doc>
    : TypeDef<LoomRT_Dialect, name> {
  let mnemonic = typeMnemonic;
  let summary = doc;
  // Parameterless: results of this type need not be spelled in builders.
  let builderCall = "$_builder.getType<::mlir::loomrt::" # name # "Type>()";
}
def LoomRT_Buffer : LoomRT_Type<"Buffer", "buffer",
    "bytes in device or host memory (a pointer)">;
def LoomRT_Stream : LoomRT_Type<"Stream", "stream", "an in-order work queue">;
def LoomRT_Event : LoomRT_Type<"Event", "event", "a point on a stream">;
def LoomRT_Comm : LoomRT_Type<"Comm", "comm", "a communicator over ranks">;

//===----------------------------------------------------------------------===//
// Enums: the runtime's, with its numbering.
//===----------------------------------------------------------------------===//

def LoomRT_DType : I32EnumAttr<"DType", "an element type of the runtime", [
    I32EnumAttrCase<"f32", 0>, I32EnumAttrCase<"bf16", 1>, I32EnumAttrCase<"i64", 2>
  ]> {
  let cppNamespace = "::mlir::loomrt";
}
def LoomRT_UnaryKind : I32EnumAttr<"UnaryKind", "loomrt_unary_op", [
    I32EnumAttrCase<"neg", 0>, I32EnumAttrCase<"exp", 1>, I32EnumAttrCase<"log", 2>,
    I32EnumAttrCase<"sqrt", 3>, I32EnumAttrCase<"rsqrt", 4>, I32EnumAttrCase<"tanh", 5>,
    I32EnumAttrCase<"erf", 6>, I32EnumAttrCase<"sin", 7>, I32EnumAttrCase<"cos", 8>,
    I32EnumAttrCase<"sigmoid", 9>, I32EnumAttrCase<"relu", 10>, I32EnumAttrCase<"silu", 11>,
    I32EnumAttrCase<"gelu", 12>, I32EnumAttrCase<"gelu_tanh", 13>
  ]> {
  let cppNamespace = "::mlir::loomrt";
}
def LoomRT_BinaryKind : I32EnumAttr<"BinaryKind", "loomrt_binary_op", [
    I32EnumAttrCase<"add", 0>, I32EnumAttrCase<"sub", 1>, I32EnumAttrCase<"mul", 2>,
    I32EnumAttrCase<"div", 3>, I32EnumAttrCase<"pow", 4>, I32EnumAttrCase<"max", 5>,
    I32EnumAttrCase<"min", 6>, I32EnumAttrCase<"eq", 7>, I32EnumAttrCase<"ne", 8>,
    I32EnumAttrCase<"lt", 9>, I32EnumAttrCase<"le", 10>
  ]> {
  let cppNamespace = "::mlir::loomrt";
}
def LoomRT_ReduceKind : I32EnumAttr<"ReduceKind", "loomrt_reduce_op", [
    I32EnumAttrCase<"sum", 0>, I32EnumAttrCase<"mean", 1>, I32EnumAttrCase<"max", 2>,
    I32EnumAttrCase<"min", 3>
  ]> {
  let cppNamespace = "::mlir::loomrt";
}
def LoomRT_BlockCodec : I32EnumAttr<"BlockCodec", "loomrt_block_codec", [
    I32EnumAttrCase<"fp8_e4m3", 0>, I32EnumAttrCase<"fp4_e2m1", 1>,
    I32EnumAttrCase<"int8", 2>, I32EnumAttrCase<"int4", 3>
  ]> {
  let cppNamespace = "::mlir::loomrt";
}
def LoomRT_StreamRole : I32EnumAttr<"StreamRole", "one of the step's streams", [
    I32EnumAttrCase<"compute", 0>, I32EnumAttrCase<"comm", 1>, I32EnumAttrCase<"host", 2>,
    I32EnumAttrCase<"h2d", 3>, I32EnumAttrCase<"d2h", 4>
  ]> {
  let cppNamespace = "::mlir::loomrt";
}

//===----------------------------------------------------------------------===//
// The work a call does (what the step simulation prices)
//===----------------------------------------------------------------------===//

def LoomRT_WorkOpInterface : OpInterface<"WorkOpInterface"> {
  let cppNamespace = "::mlir::loomrt";
  let description = [{
    What a runtime call costs, read from its attributes: the bytes it reads
    and writes in the memory it runs on and the floating-point operations
    it performs. The step simulation (lib/CostModel/StepSimulation.cpp)
    prices a call on its stream's device with the cost model's roofline of
    these; every call op declares them, so an op added without them does
    not link.
  }];
  let methods = [
    InterfaceMethod<"Bytes the call reads plus bytes it writes.",
                    "double", "getBytesMoved">,
    InterfaceMethod<"Floating-point operations (0: memory-bound).",
                    "double", "getFlops", (ins), [{}], [{ return 0; }]>,
    InterfaceMethod<"The element type its arithmetic runs in.",
                    "::mlir::loomrt::DType", "getWorkDType", (ins), [{}], [{
      if (auto a = $_op->template getAttrOfType<::mlir::loomrt::DTypeAttr>("dtype"))
        return a.getValue();
      return ::mlir::loomrt::DType::f32;
    }]>,
  ];
}

//===----------------------------------------------------------------------===//
// Op classes
//===----------------------------------------------------------------------===//

class LoomRT_Op<string mnemonic, list<Trait> traits = []>
    : Op<LoomRT_Dialect, mnemonic, traits>;

// A call that runs on a stream: its first operand. `args` are its buffers
// and attributes; the assembly reads `loomrt.NAME ... on %stream`.
class LoomRT_CallOp<string mnemonic, dag args, string format,
                    list<string> overrides = []>
    : LoomRT_Op<mnemonic, [DeclareOpInterfaceMethods<LoomRT_WorkOpInterface, overrides>]> {
  let arguments = !con((ins LoomRT_Stream:$stream), args);
  let assemblyFormat = format # " `on` $stream attr-dict";
}

def NonNegI64 : ConfinedAttr<I64Attr, [IntNonNegative]>;

//===----------------------------------------------------------------------===//
// The step's context: streams, communicator, memory
//===----------------------------------------------------------------------===//

def LoomRT_StreamOp : LoomRT_Op<"stream", [Pure]> {
  let summary = "one of the step's streams";
  let description = [{
    The driver gives each step five streams: `compute` (kernels), `comm`
    (collectives), `host` (work the CPU runs on host memory), `h2d` and
    `d2h` (the two copy directions, so they overlap).

    ```mlir
    %s = loomrt.stream compute
    ```
  }];
  let arguments = (ins LoomRT_StreamRole:$role);
  let results = (outs LoomRT_Stream:$result);
  let assemblyFormat = "$role attr-dict";
}

def LoomRT_CommOp : LoomRT_Op<"comm", [Pure]> {
  let summary = "the step's communicator over every rank, or over some levels";
  let description = [{
    Without `levels`, the world's communicator. With them, the group of the
    ranks that differ only in those levels (indices into the topology's
    levels, innermost first; `sizes` are the topology's): the binary splits
    it from the world once, the first time a step needs it, and keeps it.

    ```mlir
    %w = loomrt.comm
    // ["gcd" = 2, "gpu" = 2, "node" = 2]: the two GCDs of a GPU, and the
    // four ranks of a node.
    %g = loomrt.comm levels [0] of [2, 2, 2]
    %n = loomrt.comm levels [0, 1] of [2, 2, 2]
    ```
  }];
  let arguments = (ins OptionalAttr<DenseI64ArrayAttr>:$levels,
                       OptionalAttr<DenseI64ArrayAttr>:$sizes);
  let results = (outs LoomRT_Comm:$result);
  let assemblyFormat = "(`levels` $levels^ `of` $sizes)? attr-dict";
  let hasVerifier = 1;
}

def LoomRT_AllocOp : LoomRT_Op<"alloc"> {
  let summary = "a buffer from the step arena";
  let description = [{
    `bytes` bytes from the step's device arena (`host`: its pinned host
    arena), valid until the matching `loomrt.free` or the end of the step.

    `at OFFSET` (loom-plan-arena) places the buffer at a fixed offset in
    the function's planned region, whose size the function's `loomrt.arena`
    attribute gives: the compiler, not the runtime, decided where it lives,
    and two buffers alive at once never share bytes. Without it the runtime
    places the buffer (best fit, runtime/common/arena_policy.h).

    ```mlir
    %b = loomrt.alloc 4096
    %h = loomrt.alloc 4096 host
    %p = loomrt.alloc 4096 at 8192
    ```
  }];
  let arguments = (ins NonNegI64:$bytes, UnitAttr:$host,
                       OptionalAttr<NonNegI64>:$offset);
  let results = (outs LoomRT_Buffer:$result);
  let assemblyFormat = "$bytes (`host` $host^)? (`at` $offset^)? attr-dict";
  let builders = [
    // The runtime places it (no offset); loom-plan-arena sets the offset.
    OpBuilder<(ins "::mlir::Type":$result, "int64_t":$bytes, "bool":$host), [{
      build($_builder, $_state, result, bytes, host, ::mlir::IntegerAttr());
    }]>
  ];
  let hasVerifier = 1;
}

def LoomRT_FreeOp : LoomRT_Op<"free"> {
  let summary = "gives a step-arena buffer back";
  let arguments = (ins LoomRT_Buffer:$buffer);
  let assemblyFormat = "$buffer attr-dict";
}

def LoomRT_GlobalOp : LoomRT_Op<"global", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "the buffer of a parameter or state";
  let description = [{
    The address of the persistent buffer the driver keeps for a module-level
    `loom.param` or `loom.state`.

    ```mlir
    %w = loomrt.global @weight
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs LoomRT_Buffer:$result);
  let assemblyFormat = "$name attr-dict";
}

def LoomRT_ViewOp : LoomRT_Op<"view", [Pure]> {
  let summary = "a buffer at a byte offset into another";
  let arguments = (ins LoomRT_Buffer:$source, NonNegI64:$offset);
  let results = (outs LoomRT_Buffer:$result);
  let assemblyFormat = "$source `[` $offset `]` attr-dict";
}

def LoomRT_RankViewOp : LoomRT_Op<"rank_view", [Pure]> {
  let summary = "this rank's block of a buffer";
  let description = [{
    The `block_bytes` bytes at offset rank × `block_bytes` (a ZeRO shard of
    a gathered buffer).
  }];
  let arguments = (ins LoomRT_Buffer:$source, LoomRT_Comm:$comm, NonNegI64:$block_bytes);
  let results = (outs LoomRT_Buffer:$result);
  let assemblyFormat = "$source `[` $block_bytes `]` `of` $comm attr-dict";
}

def LoomRT_CommentOp : LoomRT_Op<"comment"> {
  let summary = "the op the following calls implement";
  let description = [{
    The lowering puts each `loom` op's text before the calls it became, so
    a reader can follow the schedule in the generated source. No effect.
  }];
  let arguments = (ins StrAttr:$text);
  let assemblyFormat = "$text attr-dict";
}

def LoomRT_BackwardDoneOp : LoomRT_Op<"backward_done"> {
  let summary = "marks the end of the backward (the driver times the phases)";
  let assemblyFormat = "attr-dict";
}

//===----------------------------------------------------------------------===//
// Ordering
//===----------------------------------------------------------------------===//

def LoomRT_RecordOp : LoomRT_Op<"record"> {
  let summary = "an event recorded on a stream";
  let description = [{
    ```mlir
    %e = loomrt.record %cs
    ```
  }];
  let arguments = (ins LoomRT_Stream:$stream);
  let results = (outs LoomRT_Event:$event);
  let assemblyFormat = "$stream attr-dict";
}

def LoomRT_WaitOp : LoomRT_Op<"wait"> {
  let summary = "a stream waits for an event (the host does not)";
  let arguments = (ins LoomRT_Stream:$stream, LoomRT_Event:$event);
  let assemblyFormat = "$stream `for` $event attr-dict";
}

def LoomRT_SyncOp : LoomRT_Op<"sync"> {
  let summary = "the host waits for an event";
  let arguments = (ins LoomRT_Event:$event);
  let assemblyFormat = "$event attr-dict";
}

def LoomRT_HostTaskOp : LoomRT_Op<"host_task", [SingleBlock,
    RecursiveMemoryEffects]> {
  let summary = "work the step's host thread runs, in order, while the step goes on";
  let description = [{
    The body runs on the step's host thread after every host task issued
    before it; the thread that issues the step does not wait for it. That
    is how a CPU update starts as soon as its gradient has landed, while the
    issuing thread, held back by the GPU's launch queue, is still issuing
    the backward (Deep Optimizer States, section 3: updates on the host
    overlap the backward). The lowering puts in a task each CPU update
    with the host's wait for its gradient before it and the copy of its
    refreshed weights to the device after it.

    The body may wait (`loomrt.sync`, `loomrt.wait`), record events, run
    calls on any stream and free buffers; it may not allocate (buffers and
    events are taken in program order by the issuing thread, before the
    task). Its results are events recorded in it, yielded; the issuing
    thread may use them only after a `loomrt.join`.

    ```mlir
    %e = loomrt.host_task -> !loomrt.event {
      loomrt.sync %grad_copied
      loomrt.adam %w, %g, %m, %v step %t refresh %r grad bf16 on %hs {...}
      loomrt.free %g
      loomrt.wait %h2d for %after_last_read
      loomrt.memcpy %work, %r, 1024 on %h2d
      %done = loomrt.record %h2d
      loomrt.yield %done
    }
    ...
    loomrt.join
    loomrt.wait %compute for %e
    ```
  }];
  let results = (outs Variadic<LoomRT_Event>:$events);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "(`->` type($events)^)? $body attr-dict";
  let hasVerifier = 1;
}

def LoomRT_YieldOp : LoomRT_Op<"yield", [Pure, Terminator,
    HasParent<"HostTaskOp">]> {
  let summary = "the events a host task hands to the issuing thread";
  let arguments = (ins Variadic<LoomRT_Event>:$events);
  let assemblyFormat = "($events^)? attr-dict";
}

def LoomRT_JoinOp : LoomRT_Op<"join"> {
  let summary = "the issuing thread waits for every host task issued so far";
  let description = [{
    After it, the events the tasks yielded are recorded and the buffers
    they freed are back in the arena. The lowering joins before the first
    use of a task's event outside it and before the step returns.
  }];
  let assemblyFormat = "attr-dict";
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def LoomRT_MemcpyOp : LoomRT_CallOp<"memcpy",
    (ins LoomRT_Buffer:$dst, LoomRT_Buffer:$src, NonNegI64:$bytes),
    "$dst `,` $src `,` $bytes"> {
  let summary = "copies bytes (any direction)";
}

def LoomRT_WriteConstOp : LoomRT_CallOp<"write_const",
    (ins LoomRT_Buffer:$dst, ElementsAttr:$value),
    "$dst `,` $value"> {
  let summary = "copies a constant (f32, bf16, i64 or i1) into a buffer";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The constant as the runtime stores it (loomrt::denseBytes).
    std::vector<uint8_t> getBytes();
  }];
}

def LoomRT_FillOp : LoomRT_CallOp<"fill",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$dst, F64Attr:$value, NonNegI64:$n),
    "$dtype $dst `,` $value `,` $n"> {
  let summary = "fills `n` elements with one value";
}

def LoomRT_CopyStridedOp : LoomRT_CallOp<"copy_strided",
    (ins LoomRT_Buffer:$src, LoomRT_Buffer:$dst, NonNegI64:$elem_bytes,
         DenseI64ArrayAttr:$src_strides, DenseI64ArrayAttr:$dst_strides,
         DenseI64ArrayAttr:$shape),
    "$src $src_strides `->` $dst $dst_strides `shape` $shape `elem` $elem_bytes"> {
  let summary = "a strided copy (transpose, slice, concatenation, broadcast)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Kernels
//===----------------------------------------------------------------------===//

def LoomRT_UnaryOp : LoomRT_CallOp<"unary",
    (ins LoomRT_UnaryKind:$kind, LoomRT_DType:$dtype, LoomRT_Buffer:$x,
         LoomRT_Buffer:$y, NonNegI64:$n),
    "$kind $dtype $x `->` $y `,` $n"> {
  let summary = "y = f(x), elementwise";
}

def LoomRT_DropoutOp : LoomRT_CallOp<"dropout",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$x, LoomRT_Buffer:$y, I64:$key, LoomRT_Comm:$comm,
         F64Attr:$ratio, NonNegI64:$n),
    "$dtype $x `->` $y `,` $n `key` $key `ratio` $ratio `of` $comm"> {
  let summary = "inverted dropout (loomrt_dropout), the mask drawn from `key`";
  let description = [{
    `loomrt_dropout` with the key of `loomrt.random_key` and the element
    offset rank × `n`: on data-parallel ranks, each rank's rows are its
    block of the global batch, so R ranks draw the masks one rank would
    draw for the whole batch.

    ```mlir
    %k = loomrt.random_key 3
    loomrt.dropout f32 %x -> %y, 4096 key %k ratio 1.000000e-01 of %comm on %s
    ```
  }];
}

def LoomRT_OnebitCompressOp : LoomRT_CallOp<"onebit_compress",
    (ins LoomRT_Buffer:$x, LoomRT_Buffer:$error, LoomRT_Buffer:$packed, NonNegI64:$n),
    "$x `,` $error `->` $packed `,` $n"> {
  let summary = "1-bit compression with error feedback (loomrt_onebit_compress)";
  let description = [{
    Writes a `sign_scale` payload to `packed`: its fp32 scale in the first
    4 bytes, the n/8 bytes of signs after it; updates `error` in place.
  }];
}

def LoomRT_BlockCompressOp : LoomRT_CallOp<"block_compress",
    (ins LoomRT_BlockCodec:$codec, LoomRT_Buffer:$x, LoomRT_Buffer:$packed, NonNegI64:$n,
         ConfinedAttr<I64Attr, [IntPositive]>:$block),
    "$codec $x `->` $packed `,` $n `block` $block"> {
  let summary = "block-scaled FP8 / FP4 / int8 / int4 compression (loomrt_block_compress)";
  let description = [{
    Writes the n/block fp32 scales, then the codes (a byte each for
    fp8_e4m3 and int8, two a byte for fp4_e2m1 and int4).
  }];
}

def LoomRT_BlockDecompressOp : LoomRT_CallOp<"block_decompress",
    (ins LoomRT_BlockCodec:$codec, LoomRT_Buffer:$packed, LoomRT_Buffer:$out, NonNegI64:$n,
         ConfinedAttr<I64Attr, [IntPositive]>:$block),
    "$codec $packed `->` $out `,` $n `block` $block"> {
  let summary = "code value · scale of a block-scaled payload (loomrt_block_decompress)";
}

def LoomRT_OnebitDecompressOp : LoomRT_CallOp<"onebit_decompress",
    (ins LoomRT_Buffer:$packed, LoomRT_Buffer:$out, NonNegI64:$n,
         DefaultValuedAttr<ConfinedAttr<I64Attr, [IntPositive]>, "1">:$chunks),
    "$packed `->` $out `,` $n (`chunks` $chunks^)?"> {
  let summary = "scale · sign of a `sign_scale` payload (loomrt_onebit_decompress)";
  let description = [{
    `chunks` chunks of `n` elements, each with its own scale: the payload
    holds the `chunks` fp32 scales first, then the signs of every chunk.
  }];
}

def LoomRT_OnebitAverageOp : LoomRT_CallOp<"onebit_average",
    (ins LoomRT_Buffer:$packed, LoomRT_Buffer:$out, NonNegI64:$n,
         ConfinedAttr<I64Attr, [IntPositive]>:$world),
    "$packed `->` $out `,` $n `of` $world"> {
  let summary = "the mean of `world` `sign_scale` chunks (loomrt_onebit_average)";
  let description = [{
    1-bit Adam's server step: `out[i]` is the mean over the `world` chunks
    of n elements of scale · sign, read from the payload (the scales first,
    then the signs of every chunk) without decompressing it whole.
  }];
}

def LoomRT_UnaryGradOp : LoomRT_CallOp<"unary_grad",
    (ins LoomRT_UnaryKind:$kind, LoomRT_DType:$dtype, LoomRT_Buffer:$dy,
         LoomRT_Buffer:$x, LoomRT_Buffer:$dx, NonNegI64:$n),
    "$kind $dtype $dy `,` $x `->` $dx `,` $n"> {
  let summary = "dx = dy · f'(x), elementwise";
}

def LoomRT_BinaryOp : LoomRT_CallOp<"binary",
    (ins LoomRT_BinaryKind:$kind, LoomRT_DType:$dtype, LoomRT_Buffer:$a,
         DenseI64ArrayAttr:$a_shape, LoomRT_Buffer:$b, DenseI64ArrayAttr:$b_shape,
         LoomRT_Buffer:$out, DenseI64ArrayAttr:$out_shape),
    "$kind $dtype $a $a_shape `,` $b $b_shape `->` $out $out_shape"> {
  let summary = "out = a ∘ b with numpy broadcasting (shapes aligned to one rank)";
  let hasVerifier = 1;
}

def LoomRT_SelectOp : LoomRT_CallOp<"select",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$cond, DenseI64ArrayAttr:$cond_shape,
         LoomRT_Buffer:$a, DenseI64ArrayAttr:$a_shape, LoomRT_Buffer:$b,
         DenseI64ArrayAttr:$b_shape, LoomRT_Buffer:$out, DenseI64ArrayAttr:$out_shape),
    "$dtype $cond $cond_shape `,` $a $a_shape `,` $b $b_shape `->` $out $out_shape"> {
  let summary = "out = cond ? a : b with broadcasting (cond is one byte per element)";
  let hasVerifier = 1;
}

def LoomRT_CastOp : LoomRT_CallOp<"cast",
    (ins LoomRT_DType:$from, LoomRT_Buffer:$x, LoomRT_DType:$to,
         LoomRT_Buffer:$y, NonNegI64:$n),
    "$from $x `->` $to $y `,` $n"> {
  let summary = "converts `n` elements";
}

def LoomRT_FusedElementwiseOp : LoomRT_Op<"fused_elementwise", [AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<LoomRT_WorkOpInterface, ["getFlops", "getWorkDType"]>]> {
  let summary = "a fused elementwise region: one pass over n elements (loomrt_fused_elementwise)";
  let description = [{
    A chain of elementwise calls (`loomrt.unary`, `loomrt.binary` of equal
    shapes, `loomrt.unary_grad`, `loomrt.cast`) as one straight-line program
    over `n` elements, made by loom-fuse: the intermediate buffers are gone
    and each element is read once and written once. `program` holds four
    integers an instruction (`loomrt_fused_inst`: opcode, op kind, a, b;
    instruction k defines register k):

    | opcode | meaning |
    |---|---|
    | 0 load | r_k = inputs[a][i] |
    | 1 unary | r_k = kind(r_a) (`loomrt_unary_op`) |
    | 2 binary | r_k = r_a kind r_b (`loomrt_binary_op`) |
    | 3 unary_grad | r_k = r_a * kind'(r_b) |
    | 4 store | outputs[a][i] = r_b |

    `in_types` and `out_types` are the buffers' `loomrt_dtype`s (0 f32, 1
    bf16). On CUDA the region runs as its own generated kernel
    (`loomrt_fused_source`, compiled with NVRTC at its first call); `loomc
    --compile-to=cpp -o F.cpp` writes each region's kernel beside F.cpp
    (F.kernels.cu).

    ```mlir
    // y = silu(a) * b over 4096 bf16 elements
    loomrt.fused_elementwise "fused_0" (%a, %b) -> (%y), 4096 on %s {
        in_types = array<i32: 1, 1>, out_types = array<i32: 1>,
        program = array<i32: 0, 0, 0, 0,  0, 0, 1, 0,  1, 11, 0, 0,  2, 2, 2, 1,  4, 0, 0, 3>}
    ```
  }];
  let arguments = (ins LoomRT_Stream:$stream, StrAttr:$name, Variadic<LoomRT_Buffer>:$inputs,
                       Variadic<LoomRT_Buffer>:$outputs, DenseI32ArrayAttr:$in_types,
                       DenseI32ArrayAttr:$out_types, DenseI32ArrayAttr:$program,
                       NonNegI64:$n);
  let assemblyFormat = [{
    $name `(` $inputs `)` `->` `(` $outputs `)` `,` $n `on` $stream attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The program as the runtime takes it (pointers into this op's
    /// attributes and `storage`, valid while both live).
    loomrt_fused_program toProgram(std::vector<loomrt_fused_inst> &storage);
  }];
}

def LoomRT_MatmulOp : LoomRT_CallOp<"matmul",
    (ins LoomRT_Buffer:$a, LoomRT_Buffer:$b, LoomRT_Buffer:$c,
         UnitAttr:$trans_a, UnitAttr:$trans_b, NonNegI64:$batch, NonNegI64:$m,
         NonNegI64:$n, NonNegI64:$k, NonNegI64:$stride_a, NonNegI64:$stride_b,
         NonNegI64:$stride_c, LoomRT_DType:$in, LoomRT_DType:$out),
    "$in $a `,` $b `->` $out $c", ["getFlops", "getWorkDType"]> {
  let summary = "batched c = op(a) · op(b) (loomrt_gemm; a stride 0 broadcasts)";
}

def LoomRT_MatmulBiasOp : LoomRT_CallOp<"matmul_bias",
    (ins LoomRT_Buffer:$a, LoomRT_Buffer:$b, LoomRT_Buffer:$bias, LoomRT_Buffer:$c,
         UnitAttr:$trans_a, UnitAttr:$trans_b, NonNegI64:$batch, NonNegI64:$m,
         NonNegI64:$n, NonNegI64:$k, NonNegI64:$stride_a, NonNegI64:$stride_b,
         NonNegI64:$stride_c, LoomRT_DType:$in, LoomRT_DType:$out),
    "$in $a `,` $b `bias` $bias `->` $out $c", ["getFlops", "getWorkDType"]> {
  let summary = "batched c = op(a) · op(b) + bias on every row (loomrt_matmul_bias)";
  let description = [{
    `loomrt.matmul` whose result gets `bias` (`n` elements of `out`'s type)
    added to each of its rows, as a GEMM epilogue where the backend has one
    (cuBLASLt on CUDA: the bias joins the fp32 accumulator before rounding).
    loom-fuse-epilogues makes it from a matmul and the broadcast add after it.

    ```mlir
    loomrt.matmul_bias bf16 %x, %w bias %b -> bf16 %y on %s {batch = 16 : i64,
        k = 768 : i64, m = 1024 : i64, n = 3072 : i64, stride_a = 786432 : i64,
        stride_b = 0 : i64, stride_c = 3145728 : i64, trans_b}
    ```
  }];
}

def LoomRT_MatmulBiasActOp : LoomRT_CallOp<"matmul_bias_act",
    (ins LoomRT_UnaryKind:$act, LoomRT_Buffer:$a, LoomRT_Buffer:$b, LoomRT_Buffer:$bias,
         LoomRT_Buffer:$aux, LoomRT_Buffer:$c,
         UnitAttr:$trans_a, UnitAttr:$trans_b, NonNegI64:$batch, NonNegI64:$m,
         NonNegI64:$n, NonNegI64:$k, NonNegI64:$stride_a, NonNegI64:$stride_b,
         NonNegI64:$stride_c, LoomRT_DType:$in, LoomRT_DType:$out),
    "$act $in $a `,` $b `bias` $bias `->` $out $c `aux` $aux", ["getFlops", "getWorkDType"]> {
  let summary = "c = act(op(a) · op(b) + bias), keeping the sum in aux (loomrt_matmul_bias_act)";
  let description = [{
    `loomrt.matmul_bias` followed by the activation `act` (`gelu_tanh`),
    as one GEMM epilogue where the backend has it (cuBLASLt's
    GELU_AUX_BIAS on CUDA: the bias and the GELU act on the fp32
    accumulator, and the pre-activation goes to `aux` for the gradient).
    `aux` and `c` are laid out alike, contiguous. loom-fuse-epilogues makes
    it from a matmul_bias and the unary call after it; the activation's
    gradient then reads `aux`.

    ```mlir
    loomrt.matmul_bias_act gelu_tanh bf16 %x, %w bias %b -> bf16 %g aux %h on %s {
        batch = 16 : i64, k = 768 : i64, m = 1024 : i64, n = 3072 : i64,
        stride_a = 786432 : i64, stride_b = 0 : i64, stride_c = 3145728 : i64, trans_b}
    ```
  }];
  let hasVerifier = 1;
}

def LoomRT_MatmulActGradOp : LoomRT_CallOp<"matmul_act_grad",
    (ins LoomRT_UnaryKind:$act, LoomRT_Buffer:$a, LoomRT_Buffer:$b, LoomRT_Buffer:$aux,
         LoomRT_Buffer:$c,
         UnitAttr:$trans_a, UnitAttr:$trans_b, NonNegI64:$batch, NonNegI64:$m,
         NonNegI64:$n, NonNegI64:$k, NonNegI64:$stride_a, NonNegI64:$stride_b,
         NonNegI64:$stride_c, LoomRT_DType:$in, LoomRT_DType:$out),
    "$act $in $a `,` $b `aux` $aux `->` $out $c", ["getFlops", "getWorkDType"]> {
  let summary = "c = (op(a) · op(b)) · act'(aux) (loomrt_matmul_act_grad)";
  let description = [{
    The GEMM that computes an activation's output gradient, with the
    activation's derivative at its saved input `aux` applied in the
    epilogue (cuBLASLt's DGELU on CUDA: the product is not rounded before
    the multiply), so the gradient through the activation is written once.
    loom-fuse-epilogues makes it from a matmul and the `loomrt.unary_grad`
    after it.

    ```mlir
    loomrt.matmul_act_grad gelu_tanh bf16 %dy, %w aux %h -> bf16 %dh on %s {
        batch = 16 : i64, k = 768 : i64, m = 1024 : i64, n = 3072 : i64,
        stride_a = 786432 : i64, stride_b = 0 : i64, stride_c = 3145728 : i64}
    ```
  }];
  let hasVerifier = 1;
}

def LoomRT_MatmulBgradOp : LoomRT_CallOp<"matmul_bgrad",
    (ins LoomRT_Buffer:$a, LoomRT_Buffer:$b, LoomRT_Buffer:$c, LoomRT_Buffer:$db,
         UnitAttr:$trans_a, UnitAttr:$trans_b, NonNegI64:$batch, NonNegI64:$m,
         NonNegI64:$n, NonNegI64:$k, NonNegI64:$stride_a, NonNegI64:$stride_b,
         NonNegI64:$stride_c, LoomRT_DType:$in, LoomRT_DType:$out),
    "$in $a `,` $b `->` $out $c `bgrad` $db", ["getFlops", "getWorkDType"]> {
  let summary = "c = op(a) · op(b) and db = the sum over k of op(a) (loomrt_matmul_bgrad)";
  let description = [{
    A linear layer's weight gradient (dW = dYᵀ · X, the weight stored
    [out, in]) with its bias's gradient (the column sums of dY, `m`
    elements) from the same pass over dY: cuBLASLt's BGRADB epilogue on
    CUDA; elsewhere the matmul and a `loomrt.reduce`. One batch; `in` and
    `out` alike. loom-fuse-epilogues makes it from the matmul and the
    reduce over its first operand.

    ```mlir
    loomrt.matmul_bgrad bf16 %dy, %x -> bf16 %dw bgrad %db on %s {batch = 1 : i64,
        k = 16384 : i64, m = 3072 : i64, n = 768 : i64, stride_a = 0 : i64,
        stride_b = 0 : i64, stride_c = 2359296 : i64, trans_a}
    ```
  }];
  let hasVerifier = 1;
}

def LoomRT_LayerNormOp : LoomRT_CallOp<"layer_norm",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$x, LoomRT_Buffer:$w,
         Optional<LoomRT_Buffer>:$b, LoomRT_Buffer:$y, NonNegI64:$rows,
         NonNegI64:$d, F64Attr:$eps),
    "$dtype $x `,` $w (`,` $b^)? `->` $y"> {
  let summary = "layer normalisation over the last dimension";
}

def LoomRT_LayerNormGradOp : LoomRT_CallOp<"layer_norm_grad",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$dy, LoomRT_Buffer:$x, LoomRT_Buffer:$w,
         LoomRT_Buffer:$dx, LoomRT_Buffer:$dw, LoomRT_Buffer:$db, NonNegI64:$rows,
         NonNegI64:$d, F64Attr:$eps),
    "$dtype $dy `,` $x `,` $w `->` $dx `,` $dw `,` $db"> {
  let summary = "the gradients of layer_norm";
}

def LoomRT_RmsNormOp : LoomRT_CallOp<"rms_norm",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$x, LoomRT_Buffer:$w, LoomRT_Buffer:$y,
         NonNegI64:$rows, NonNegI64:$d, F64Attr:$eps),
    "$dtype $x `,` $w `->` $y"> {
  let summary = "RMS normalisation over the last dimension";
}

def LoomRT_RmsNormGradOp : LoomRT_CallOp<"rms_norm_grad",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$dy, LoomRT_Buffer:$x, LoomRT_Buffer:$w,
         LoomRT_Buffer:$dx, LoomRT_Buffer:$dw, NonNegI64:$rows, NonNegI64:$d,
         F64Attr:$eps),
    "$dtype $dy `,` $x `,` $w `->` $dx `,` $dw"> {
  let summary = "the gradients of rms_norm";
}

def LoomRT_SoftmaxOp : LoomRT_CallOp<"softmax",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$x, LoomRT_Buffer:$y, NonNegI64:$rows,
         NonNegI64:$d, UnitAttr:$log),
    "$dtype $x `->` $y"> {
  let summary = "(log-)softmax over rows of `d`";
}

def LoomRT_SoftmaxGradOp : LoomRT_CallOp<"softmax_grad",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$dy, LoomRT_Buffer:$y, LoomRT_Buffer:$dx,
         NonNegI64:$rows, NonNegI64:$d, UnitAttr:$log),
    "$dtype $dy `,` $y `->` $dx"> {
  let summary = "the gradient of softmax from its output";
}

def LoomRT_EmbeddingOp : LoomRT_CallOp<"embedding",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$table, LoomRT_Buffer:$indices,
         LoomRT_Buffer:$out, NonNegI64:$n, NonNegI64:$d, NonNegI64:$vocab),
    "$dtype $table `[` $indices `]` `->` $out"> {
  let summary = "rows of a table (i64 indices, checked against `vocab`)";
}

def LoomRT_GatherRowsOp : LoomRT_CallOp<"gather_rows",
    (ins LoomRT_Buffer:$table, LoomRT_Buffer:$rows, LoomRT_Buffer:$out,
         NonNegI64:$num_rows, NonNegI64:$row_bytes, NonNegI64:$n, UnitAttr:$sorted,
         UnitAttr:$zero_copy),
    "$table `[` $rows `]` `->` $out `rows` $num_rows `row_bytes` $row_bytes `count` $n "
    "(`sorted` $sorted^)? (`zero_copy` $zero_copy^)?"> {
  let summary = "rows of a table by i64 index (loomrt_gather_rows)";
  let description = [{
    `out[i] = table[rows[i]]` for `i < n`, rows of `row_bytes` bytes. With
    `zero_copy` the table is pinned host memory the GPU reads across PCIe
    (a `loom.embedding` of a `#loom.mem<mapped>` table; the step simulation
    prices it by `cost::gatherTime`); `sorted` passes
    `LOOMRT_GATHER_SORTED` (indices sorted on the GPU first).

    ```mlir
    loomrt.gather_rows %table[%ids] -> %out rows 1000000 row_bytes 512 count 4096 sorted zero_copy on %s
    ```
  }];
}

def LoomRT_EmbeddingGradOp : LoomRT_CallOp<"embedding_grad",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$dy, LoomRT_Buffer:$indices,
         LoomRT_Buffer:$dtable, NonNegI64:$n, NonNegI64:$d, NonNegI64:$vocab),
    "$dtype $dy `[` $indices `]` `->` $dtable"> {
  let summary = "scatter-adds row gradients into an f32 table gradient";
}

def LoomRT_TopKOp : LoomRT_CallOp<"top_k",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$x, LoomRT_Buffer:$values, LoomRT_Buffer:$indices,
         NonNegI64:$rows, NonNegI64:$n, NonNegI64:$k),
    "$dtype $x `->` $values `,` $indices `rows` $rows `n` $n `k` $k"> {
  let summary = "the k largest of each row of n and their positions (i64)";
}

def LoomRT_TopKGradOp : LoomRT_CallOp<"top_k_grad",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$dv, LoomRT_Buffer:$indices, LoomRT_Buffer:$dx,
         NonNegI64:$rows, NonNegI64:$n, NonNegI64:$k),
    "$dtype $dv `[` $indices `]` `->` $dx `rows` $rows `n` $n `k` $k"> {
  let summary = "dx = 0, then dx[r, indices[r, j]] = dv[r, j]";
}

def LoomRT_MoeSlotsOp : LoomRT_CallOp<"moe_slots",
    (ins LoomRT_Buffer:$experts, LoomRT_Buffer:$slots, LoomRT_Buffer:$counts,
         NonNegI64:$n, NonNegI64:$k, NonNegI64:$num_experts, NonNegI64:$capacity),
    "$experts `->` $slots `,` $counts `tokens` $n `k` $k `experts` $num_experts "
    "`capacity` $capacity"> {
  let summary = "each choice's row in its expert's buffer (-1: dropped) and the f32 counts";
}

def LoomRT_MoeDispatchOp : LoomRT_CallOp<"moe_dispatch",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$x, LoomRT_Buffer:$slots,
         Optional<LoomRT_Buffer>:$weights, LoomRT_Buffer:$out, NonNegI64:$n, NonNegI64:$k,
         NonNegI64:$d, NonNegI64:$rows),
    "$dtype $x `[` $slots `]` (`weights` $weights^)? `->` $out `tokens` $n `k` $k `d` $d "
    "`rows` $rows"> {
  let summary = "out = 0, then out[slots[n, j]] = x[n] (* weights[n, j])";
}

def LoomRT_MoeCombineOp : LoomRT_CallOp<"moe_combine",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$y, LoomRT_Buffer:$slots,
         Optional<LoomRT_Buffer>:$weights, LoomRT_Buffer:$out, NonNegI64:$n, NonNegI64:$k,
         NonNegI64:$d, NonNegI64:$rows),
    "$dtype $y `[` $slots `]` (`weights` $weights^)? `->` $out `tokens` $n `k` $k `d` $d "
    "`rows` $rows"> {
  let summary = "out[n] = sum over kept j of weights[n, j] (or 1) * y[slots[n, j]]";
}

def LoomRT_MoeSlotDotOp : LoomRT_CallOp<"moe_slot_dot",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$a, LoomRT_Buffer:$b, LoomRT_Buffer:$slots,
         LoomRT_Buffer:$out, NonNegI64:$n, NonNegI64:$k, NonNegI64:$d, NonNegI64:$rows),
    "$dtype $a `,` $b `[` $slots `]` `->` $out `tokens` $n `k` $k `d` $d `rows` $rows"> {
  let summary = "out[n, j] = dot(a[n], b[slots[n, j]]), 0 where dropped";
}

def LoomRT_AttentionOp : LoomRT_CallOp<"attention",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$q, LoomRT_Buffer:$k, LoomRT_Buffer:$v,
         LoomRT_Buffer:$out, LoomRT_Buffer:$workspace, NonNegI64:$bh, NonNegI64:$t,
         NonNegI64:$s, NonNegI64:$dh, F64Attr:$scale, UnitAttr:$causal),
    "$dtype $q `,` $k `,` $v `->` $out `workspace` $workspace", ["getFlops"]> {
  let summary = "scaled dot-product attention (the workspace from loomrt_attention_workspace_bytes)";
}

def LoomRT_AttentionGradOp : LoomRT_CallOp<"attention_grad",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$q, LoomRT_Buffer:$k, LoomRT_Buffer:$v,
         LoomRT_Buffer:$dout, LoomRT_Buffer:$dq, LoomRT_Buffer:$dk, LoomRT_Buffer:$dv,
         LoomRT_Buffer:$workspace, NonNegI64:$bh, NonNegI64:$t, NonNegI64:$s,
         NonNegI64:$dh, F64Attr:$scale, UnitAttr:$causal),
    "$dtype $q `,` $k `,` $v `,` $dout `->` $dq `,` $dk `,` $dv `workspace` $workspace",
    ["getFlops"]> {
  let summary = "the gradients of attention (recomputes the scores)";
}

def LoomRT_AttentionSaveOp : LoomRT_CallOp<"attention_save",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$q, LoomRT_Buffer:$k, LoomRT_Buffer:$v,
         LoomRT_Buffer:$out, LoomRT_Buffer:$saved, LoomRT_Buffer:$workspace, NonNegI64:$bh,
         NonNegI64:$t, NonNegI64:$s, NonNegI64:$dh, F64Attr:$scale, UnitAttr:$causal),
    "$dtype $q `,` $k `,` $v `->` $out `,` $saved `workspace` $workspace",
    ["getFlops", "getBytesMoved"]> {
  let summary = "attention that keeps its row statistics for its gradient";
  let description = [{
    `loomrt.attention`, and where the fused kernel runs, each query row's
    log-sum-exp into `saved` (`loomrt_attention_saved_bytes`), which the
    paired `loomrt.attention_grad_saved` reads with `out` instead of running
    the forward again. loom-lower-to-runtime pairs a `loom.attention` with
    the `loom.attention_grad` of the same query, key and value.
  }];
}

def LoomRT_AttentionGradSavedOp : LoomRT_CallOp<"attention_grad_saved",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$q, LoomRT_Buffer:$k, LoomRT_Buffer:$v,
         LoomRT_Buffer:$out, LoomRT_Buffer:$saved, LoomRT_Buffer:$dout, LoomRT_Buffer:$dq,
         LoomRT_Buffer:$dk, LoomRT_Buffer:$dv, LoomRT_Buffer:$workspace, NonNegI64:$bh,
         NonNegI64:$t, NonNegI64:$s, NonNegI64:$dh, F64Attr:$scale, UnitAttr:$causal),
    "$dtype $q `,` $k `,` $v `,` $dout `from` $out `,` $saved `->` $dq `,` $dk `,` $dv "
    "`workspace` $workspace",
    ["getFlops", "getBytesMoved"]> {
  let summary = "the gradients of attention from its saved output and row statistics";
}

def LoomRT_CrossEntropyOp : LoomRT_CallOp<"cross_entropy",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$logits, LoomRT_Buffer:$labels,
         LoomRT_Buffer:$loss, NonNegI64:$rows, NonNegI64:$classes),
    "$dtype $logits `,` $labels `->` $loss"> {
  let summary = "mean cross entropy of rows of logits against i64 labels (f32 loss)";
}

def LoomRT_CrossEntropyGradOp : LoomRT_CallOp<"cross_entropy_grad",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$logits, LoomRT_Buffer:$labels,
         LoomRT_Buffer:$dloss, LoomRT_Buffer:$dlogits, NonNegI64:$rows,
         NonNegI64:$classes),
    "$dtype $logits `,` $labels `,` $dloss `->` $dlogits"> {
  let summary = "the gradient of cross_entropy";
}

def LoomRT_ReduceOp : LoomRT_CallOp<"reduce",
    (ins LoomRT_ReduceKind:$kind, LoomRT_DType:$dtype, LoomRT_Buffer:$x,
         LoomRT_Buffer:$y, NonNegI64:$outer, NonNegI64:$len, NonNegI64:$inner),
    "$kind $dtype $x `->` $y `[` $outer `,` $len `,` $inner `]`"> {
  let summary = "reduces the middle dimension of [outer, len, inner]";
}

def LoomRT_RotaryOp : LoomRT_CallOp<"rotary",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$x, LoomRT_Buffer:$cos, LoomRT_Buffer:$sin,
         LoomRT_Buffer:$y, NonNegI64:$rows, NonNegI64:$period, NonNegI64:$d,
         UnitAttr:$transpose),
    "$dtype $x `,` $cos `,` $sin `->` $y (`transpose` $transpose^)?"> {
  let summary = "rotary position embeddings over `rows` rows of `d` (loomrt_rotary)";
}

def LoomRT_LerpOp : LoomRT_CallOp<"lerp",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$a, LoomRT_Buffer:$b, LoomRT_Buffer:$y,
         NonNegI64:$n, F64Attr:$weight),
    "$dtype $a `,` $b `->` $y `,` $n `weight` $weight"> {
  let summary = "y = a + weight · (b − a) (loomrt_lerp)";
}

def LoomRT_CumsumOp : LoomRT_CallOp<"cumsum",
    (ins LoomRT_DType:$dtype, LoomRT_Buffer:$x, LoomRT_Buffer:$y, NonNegI64:$outer,
         NonNegI64:$len, NonNegI64:$inner, UnitAttr:$exclusive, UnitAttr:$reverse),
    "$dtype $x `->` $y `[` $outer `,` $len `,` $inner `]`"> {
  let summary = "prefix sum along the middle dimension of [outer, len, inner]";
}

//===----------------------------------------------------------------------===//
// Host integers (the step counter)
//===----------------------------------------------------------------------===//

def LoomRT_AddI64Op : LoomRT_Op<"add_i64"> {
  let summary = "adds two i64 scalars on the host; writes the sum and returns it";
  let description = [{
    The step counter's increment: both operands are read back (the host
    waits for `stream`), the sum is written to `out` and returned as a host
    integer, so every update of the step reads it without another read-back.
  }];
  let arguments = (ins LoomRT_Stream:$stream, LoomRT_Buffer:$lhs, LoomRT_Buffer:$rhs,
                       LoomRT_Buffer:$out);
  let results = (outs I64:$sum);
  let assemblyFormat = "$lhs `,` $rhs `->` $out `on` $stream attr-dict";
}

def LoomRT_RandomKeyOp : LoomRT_Op<"random_key", [Pure]> {
  let summary = "the key of dropout `op` in this training step";
  let description = [{
    `loomrt_random_key(seed, step, op)` of the run's `--seed` and the step
    the driver is running (from 0; a resumed run continues the count), so
    a resumed run draws the masks the uninterrupted one would have.
  }];
  let arguments = (ins NonNegI64:$op);
  let results = (outs I64:$key);
  let assemblyFormat = "$op attr-dict";
}

def LoomRT_ReadI64Op : LoomRT_Op<"read_i64"> {
  let summary = "reads an i64 scalar back to the host (waits for the stream)";
  let arguments = (ins LoomRT_Stream:$stream, LoomRT_Buffer:$buffer);
  let results = (outs I64:$value);
  let assemblyFormat = "$buffer `on` $stream attr-dict";
}

//===----------------------------------------------------------------------===//
// Optimizer updates (in place)
//===----------------------------------------------------------------------===//

def LoomRT_AdamOp : LoomRT_Op<"adam", [DeclareOpInterfaceMethods<LoomRT_WorkOpInterface>]> {
  let summary = "Adam(W) in place on fp32 parameters and state";
  let description = [{
    `loomrt_adam_f32`, or `loomrt_adam_bf16grad` when the gradient is bf16;
    `refresh`, when present, receives the updated parameters in bf16 (the
    working copy's cast, fused). `timed`: the host runs it and the driver
    times it (the JSON log's cpu_update_*).

    ```mlir
    loomrt.adam %p, %g, %m, %v step %t grad bf16 on %hs {lr = 1.0e-03, ...}
    ```
  }];
  let arguments = (ins LoomRT_Stream:$stream, LoomRT_Buffer:$param, LoomRT_Buffer:$grad,
                       LoomRT_Buffer:$exp_avg, LoomRT_Buffer:$exp_avg_sq, I64:$step,
                       Optional<LoomRT_Buffer>:$refresh, LoomRT_DType:$grad_dtype,
                       F64Attr:$lr, F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps,
                       F64Attr:$weight_decay, UnitAttr:$decoupled, UnitAttr:$timed,
                       NonNegI64:$n, DefaultValuedAttr<I64Attr, "0">:$freeze_step);
  let assemblyFormat = [{
    $param `,` $grad `,` $exp_avg `,` $exp_avg_sq `step` $step (`refresh` $refresh^)?
    `grad` $grad_dtype `on` $stream attr-dict
  }];
  let hasVerifier = 1;
}

def LoomRT_AdamMultiOp : LoomRT_Op<"adam_multi", [AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<LoomRT_WorkOpInterface>]> {
  let summary = "many Adam(W) updates with one config in one call (loomrt_adam_multi)";
  let description = [{
    `loomrt.adam` over several tensors at once: operand k of `params`,
    `grads`, `exp_avgs` and `exp_avg_sqs` (and of `refresh`, when present:
    the bf16 copies) is one update of `sizes[k]` elements, each bit for bit
    what its own `loomrt.adam` computes. On the GPU up to 48 tensors run in
    one launch (`LOOMRT_ADAM_MULTI_BATCH`): a step of many small parameters
    (GPT-2's 148) is otherwise bound by launches. loom-batch-updates makes
    it from a run of `loomrt.adam` calls with the same config.

    ```mlir
    loomrt.adam_multi (%p0, %p1), (%g0, %g1), (%m0, %m1), (%v0, %v1) step %t
        grad f32 on %s {lr = 1.0e-03, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-08,
        weight_decay = 0.01, decoupled, sizes = array<i64: 768, 2359296>}
    ```
  }];
  let arguments = (ins LoomRT_Stream:$stream, Variadic<LoomRT_Buffer>:$params,
                       Variadic<LoomRT_Buffer>:$grads, Variadic<LoomRT_Buffer>:$exp_avgs,
                       Variadic<LoomRT_Buffer>:$exp_avg_sqs, Variadic<LoomRT_Buffer>:$refresh,
                       I64:$step, LoomRT_DType:$grad_dtype,
                       F64Attr:$lr, F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps,
                       F64Attr:$weight_decay, UnitAttr:$decoupled,
                       DenseI64ArrayAttr:$sizes, DefaultValuedAttr<I64Attr, "0">:$freeze_step);
  let assemblyFormat = [{
    `(` $params `)` `,` `(` $grads `)` `,` `(` $exp_avgs `)` `,` `(` $exp_avg_sqs `)`
    (`refresh` `(` $refresh^ `)`)? `step` $step `grad` $grad_dtype `on` $stream attr-dict
  }];
  let hasVerifier = 1;
}

def LoomRT_SgdOp : LoomRT_CallOp<"sgd",
    (ins LoomRT_Buffer:$param, LoomRT_Buffer:$grad, LoomRT_Buffer:$momentum_buf,
         F64Attr:$lr, F64Attr:$momentum, UnitAttr:$nesterov, NonNegI64:$n),
    "$param `,` $grad `,` $momentum_buf"> {
  let summary = "SGD with momentum in place on fp32 parameters";
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

def LoomRT_AllReduceOp : LoomRT_Op<"all_reduce"> {
  let summary = "all-reduce of `n` elements over a communicator";
  let arguments = (ins LoomRT_Comm:$comm, LoomRT_Stream:$stream, LoomRT_DType:$dtype,
                       LoomRT_Buffer:$input, LoomRT_Buffer:$output, NonNegI64:$n,
                       LoomRT_ReduceKind:$reduce);
  let assemblyFormat = "$reduce $dtype $input `->` $output `,` $n `over` $comm `on` $stream attr-dict";
}

def LoomRT_ReduceScatterOp : LoomRT_Op<"reduce_scatter"> {
  let summary = "reduce-scatter: `n` output elements per rank";
  let arguments = (ins LoomRT_Comm:$comm, LoomRT_Stream:$stream, LoomRT_DType:$dtype,
                       LoomRT_Buffer:$input, LoomRT_Buffer:$output, NonNegI64:$n,
                       LoomRT_ReduceKind:$reduce);
  let assemblyFormat = "$reduce $dtype $input `->` $output `,` $n `over` $comm `on` $stream attr-dict";
}

def LoomRT_AllToAllOp : LoomRT_Op<"all_to_all"> {
  let summary = "block j (`bytes` bytes) of the input to rank j (loomrt_all_to_all)";
  let arguments = (ins LoomRT_Comm:$comm, LoomRT_Stream:$stream, LoomRT_Buffer:$input,
                       LoomRT_Buffer:$output, NonNegI64:$bytes);
  let assemblyFormat = "$input `->` $output `,` $bytes `bytes` `over` $comm `on` $stream attr-dict";
}

def LoomRT_SendRecvOp : LoomRT_Op<"send_recv"> {
  let summary = "point to point between ranks `shift` apart (loomrt_send_recv)";
  let description = [{
    Rank r of the communicator sends `bytes` bytes of `input` to rank
    r + shift and receives `bytes` bytes into `output` from rank r - shift,
    both at once; a side whose rank is outside the communicator does
    nothing (no wrap-around), so `output` on a rank with no sender keeps
    what it held. Pipeline stages pass activations forward with shift 1
    and their gradients back with shift -1.

    ```mlir
    loomrt.send_recv %act -> %in, 8192 bytes shift 1 over %stages on %cs
    ```
  }];
  let arguments = (ins LoomRT_Comm:$comm, LoomRT_Stream:$stream, LoomRT_Buffer:$input,
                       LoomRT_Buffer:$output, NonNegI64:$bytes, I64Attr:$shift);
  let assemblyFormat = "$input `->` $output `,` $bytes `bytes` `shift` $shift `over` $comm `on` $stream attr-dict";
  let hasVerifier = 1;
}

def LoomRT_P2POp : LoomRT_Op<"p2p", [AttrSizedOperandSegments]> {
  let summary = "point to point with the ranks `to` and `from` places on (loomrt_send_recv)";
  let description = [{
    `bytes` bytes of `input` go to rank r + `to` of the communicator and
    `bytes` bytes come from rank r + `from` into `output`, both at once;
    either side may be absent (loom.p2p between pipeline stages).

    ```mlir
    loomrt.p2p send %act to 1 recv %grad from 1, 8192 bytes over %stages on %cs
    ```
  }];
  let arguments = (ins LoomRT_Comm:$comm, LoomRT_Stream:$stream,
                       Optional<LoomRT_Buffer>:$input, Optional<LoomRT_Buffer>:$output,
                       NonNegI64:$bytes, OptionalAttr<I64Attr>:$to,
                       OptionalAttr<I64Attr>:$from);
  let assemblyFormat = [{
    (`send` $input^ `to` $to)? (`recv` $output^ `from` $from)? `,` $bytes `bytes` `over` $comm
    `on` $stream attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    int64_t sendPeer() { return getToAttr() ? getToAttr().getInt() : 0; }
    int64_t recvPeer() { return getFromAttr() ? getFromAttr().getInt() : 0; }
  }];
}

def LoomRT_AllGatherBytesOp : LoomRT_Op<"all_gather_bytes"> {
  let summary = "all-gather of `bytes` bytes per rank (packed payloads)";
  let arguments = (ins LoomRT_Comm:$comm, LoomRT_Stream:$stream, LoomRT_Buffer:$input,
                       LoomRT_Buffer:$output, NonNegI64:$bytes);
  let assemblyFormat = "$input `->` $output `,` $bytes `bytes` `over` $comm `on` $stream attr-dict";
}

def LoomRT_AllGatherOp : LoomRT_Op<"all_gather"> {
  let summary = "all-gather: `n` input elements per rank";
  let arguments = (ins LoomRT_Comm:$comm, LoomRT_Stream:$stream, LoomRT_DType:$dtype,
                       LoomRT_Buffer:$input, LoomRT_Buffer:$output, NonNegI64:$n);
  let assemblyFormat = "$dtype $input `->` $output `,` $n `over` $comm `on` $stream attr-dict";
}

#endif // LOOMRT_OPS_TD
