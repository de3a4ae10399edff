//===- LoomOps.td - ops of the loom dialect -------------------------------===//
//
// Four families: module-level declarations (parameters, persistent state,
// subgroups, topologies), compute (forward and gradient ops, optimizer
// updates), memory placement (copies, waits, releases, zero-copy views) and
// communication (collectives, compression).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_OPS_TD
#define LOOM_OPS_TD

include "LoomBase.td"
include "LoomInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/IR/OpAsmInterface.td"

class Loom_Op<string mnemonic, list<Trait> traits = []>
    : Op<Loom_Dialect, mnemonic, traits>;

// Compute ops run where their data lives; the trait checks that every
// tensor operand and result is on one side (GPU: device/mapped; CPU:
// pinned/pageable) or not placed yet.
def Loom_ComputeOpTrait : NativeOpTrait<"ComputeOp"> {
  let cppNamespace = "::mlir::loom";
}

//===----------------------------------------------------------------------===//
// Declarations
//===----------------------------------------------------------------------===//

def Loom_TopologyOp : Loom_Op<"topology", [Symbol, HasParent<"ModuleOp">]> {
  let summary = "The levels of the machine and how many of each";
  let description = [{
    Declares the machine as nested levels, innermost first, each with its
    size (how many of it the next level holds). Ranks are numbered with the
    innermost level varying fastest. Collectives name groups of ranks as a
    set of levels of a topology (`#loom.group`).

    ```mlir
    // Frontier: 2 GCDs per MI250X, 4 MI250X per node, 16 nodes.
    loom.topology @frontier ["gcd" = 2, "gpu" = 4, "node" = 16]
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrArrayAttr:$levels,
                       DenseI64ArrayAttr:$sizes);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Size of level `name`, or -1 when the topology has no such level.
    int64_t getLevelSize(::llvm::StringRef name);
    /// Product of all level sizes.
    int64_t getWorldSize();
  }];
}

def Loom_ParamOp : Loom_Op<"param", [Symbol, HasParent<"ModuleOp">]> {
  let summary = "A trainable parameter";
  let description = [{
    Declares a parameter: its type (shape, element type and, once placed,
    the memory it lives in), and its initial value, either an initialiser
    (`init`) or the values imported from a model (`value`). A parameter used
    in several places (tied embeddings) is one symbol loaded several times;
    its gradients accumulate.

    ```mlir
    loom.param @wte : tensor<50257x768xf32> init #loom.init<normal(0.0, 0.02)>
    loom.param @ln_f.weight : tensor<768xf32> value dense<1.0> : tensor<768xf32>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttrOf<Loom_FloatTensor>:$type,
                       OptionalAttr<Loom_InitAttr>:$init,
                       OptionalAttr<ElementsAttr>:$value);
  let assemblyFormat = [{
    $sym_name `:` $type (`init` qualified($init)^)? (`value` $value^)? attr-dict
  }];
  let hasVerifier = 1;
}

def Loom_StateOp : Loom_Op<"state", [Symbol, HasParent<"ModuleOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Persistent, non-trainable state that lives across steps";
  let description = [{
    Optimizer moments and fp32 master weights, error-feedback buffers of
    compressed communication, momentum of DiLoCo's outer optimizer, step
    counters. `of` links the state to the parameter it belongs to; the
    verifier checks that it names a `loom.param` of the same shape. State
    starts at its initialiser (zeros by default).

    ```mlir
    loom.param @w : tensor<1024xbf16>
    loom.state @w.master : tensor<1024xf32, #loom.mem<pinned>> role master of @w
    loom.state @w.m : tensor<1024xf32, #loom.mem<pinned>> role adam_m of @w
    loom.state @w.err : tensor<1024xf32, #loom.mem<device>> role error_feedback of @w
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, TypeAttrOf<Loom_AnyTensor>:$type,
                       Loom_StateRole:$role,
                       OptionalAttr<FlatSymbolRefAttr>:$param,
                       OptionalAttr<Loom_InitAttr>:$init);
  let assemblyFormat = [{
    $sym_name `:` $type `role` $role (`of` $param^)? (`init` qualified($init)^)? attr-dict
  }];
}

def Loom_SubgroupOp : Loom_Op<"subgroup", [Symbol, HasParent<"ModuleOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Parameters whose optimizer state moves and updates together";
  let description = [{
    The unit of the offload schedule (Deep Optimizer States §3.2; DeepSpeed's
    `sub_group_size`): the optimizer state of these parameters is moved,
    updated and written back as one. A parameter belongs to at most one
    subgroup. `numel` is the total element count, kept for the cost model
    and checked against the parameters.

    `update`, when present, is where the offload schedule updates the
    subgroup each step (written by `loom-interleave-offload`, or by hand,
    and applied by `loom-offload-optimizer{mode=subgroups}`): `gpu` (state
    resident in device memory), `stream` (state in pinned host memory,
    copied to the device, updated there and copied back) or `cpu` (state in
    pinned host memory, updated by the CPU).

    ```mlir
    loom.subgroup @sg0 [@wte, @wpe] numel 39383040
    loom.subgroup @sg1 [@h0.w] numel 2359296 update cpu
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypedArrayAttrBase<FlatSymbolRefAttr, "parameter symbols">:$params,
                       I64Attr:$numel, OptionalAttr<Loom_UpdatePlaceAttr>:$update);
  let assemblyFormat = "$sym_name $params `numel` $numel (`update` $update^)? attr-dict";
  let extraClassDeclaration = [{
    /// Where it is updated (none when unplanned).
    std::optional<UpdatePlace> getPlace() { return getUpdate(); }
    void setPlace(UpdatePlace p) { setUpdate(p); }
  }];
}

def Loom_LoadOp : Loom_Op<"load", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>, MemoryEffects<[MemRead]>]> {
  let summary = "Read the current value of a parameter or state";
  let description = [{
    The result type must be the declared type of `@name`, placement
    included: moving it elsewhere is an explicit `loom.copy`.

    ```mlir
    %w = loom.load @w : tensor<1024xf32, #loom.mem<device>>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs Loom_AnyTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

def Loom_StoreOp : Loom_Op<"store", [
    DeclareOpInterfaceMethods<SymbolUserOpInterface>, MemoryEffects<[MemWrite]>]> {
  let summary = "Write the next value of a parameter or state";
  let description = [{
    Makes `value` the value of `@name` for the next step. The type must be
    the declared one, placement included.

    ```mlir
    loom.store %w_new to @w : tensor<1024xf32, #loom.mem<device>>
    ```
  }];
  let arguments = (ins Loom_AnyTensor:$value, FlatSymbolRefAttr:$name);
  let assemblyFormat = "$value `to` $name attr-dict `:` type($value)";
}

//===----------------------------------------------------------------------===//
// Elementwise compute
//===----------------------------------------------------------------------===//

class Loom_UnaryOp<string mnemonic, string math> : Loom_Op<mnemonic,
    [Pure, SameOperandsAndResultType, Loom_ComputeOpTrait]> {
  let summary = "Elementwise " # math;
  let description = "Computes `" # math # "` for every element of a "
    # "floating-point tensor.\n\n```mlir\n%y = loom." # mnemonic
    # " %x : tensor<4x8xf32>\n```";
  let arguments = (ins Loom_FloatTensor:$input);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Loom_NegOp : Loom_UnaryOp<"neg", "-x"> { let hasFolder = 1; }
def Loom_ExpOp : Loom_UnaryOp<"exp", "exp(x)">;
def Loom_LogOp : Loom_UnaryOp<"log", "log(x)">;
def Loom_SqrtOp : Loom_UnaryOp<"sqrt", "sqrt(x)">;
def Loom_RsqrtOp : Loom_UnaryOp<"rsqrt", "1/sqrt(x)">;
def Loom_TanhOp : Loom_UnaryOp<"tanh", "tanh(x)">;
def Loom_ErfOp : Loom_UnaryOp<"erf", "erf(x)">;
def Loom_SinOp : Loom_UnaryOp<"sin", "sin(x)">;
def Loom_CosOp : Loom_UnaryOp<"cos", "cos(x)">;
def Loom_SigmoidOp : Loom_UnaryOp<"sigmoid", "1/(1+exp(-x))">;
def Loom_ReluOp : Loom_UnaryOp<"relu", "max(x, 0)">;
def Loom_SiluOp : Loom_UnaryOp<"silu", "x*sigmoid(x)">;

def Loom_GeluOp : Loom_Op<"gelu", [Pure, SameOperandsAndResultType, Loom_ComputeOpTrait]> {
  let summary = "Gaussian error linear unit";
  let description = [{
    `x * Φ(x)`; with `approximate` the tanh form used by GPT-2
    (`0.5x(1+tanh(√(2/π)(x+0.044715x³)))`), otherwise the exact erf form.

    ```mlir
    %y = loom.gelu %x approximate : tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input, UnitAttr:$approximate);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$input (`approximate` $approximate^)? attr-dict `:` type($result)";
}

def Loom_DropoutOp : Loom_Op<"dropout", [Pure, SameOperandsAndResultType, Loom_ComputeOpTrait]> {
  let summary = "inverted dropout with a counter-based mask";
  let description = [{
    `x * mask / (1 - ratio)`, where the mask keeps each element with
    probability `1 - ratio` (torch.nn.Dropout in training mode). The mask is
    not an operand: it is drawn from the training step's random key (the
    binary's `--seed` and the step number) and this op's `key`, one
    counter per element (`loomrt_dropout`), so it is the same on every
    backend and after a resume. The gradient is the same op on the
    result's adjoint with the same `key`: the backward draws the forward's
    mask again instead of storing it. Distinct dropouts of a model have
    distinct keys (the importer numbers them).

    ```mlir
    %y = loom.dropout %x ratio 1.0e-01 key 3 : tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input, F64Attr:$ratio,
                       ConfinedAttr<I64Attr, [IntNonNegative]>:$key);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$input `ratio` $ratio `key` $key attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Loom_LerpOp : Loom_Op<"lerp", [Pure, SameOperandsAndResultType, Loom_ComputeOpTrait]> {
  let summary = "Linear interpolation a + w·(b − a) (torch.lerp)";
  let description = [{
    Elementwise `a + weight · (b − a)` with a constant weight, computed as
    torch.lerp does (from `b` when the weight is 0.5 or more, for accuracy
    near 1). A moving average is a lerp: Adam's momentum
    `m + (1−β₁)(g − m)` (1-bit Adam's worker step), and Streaming DiLoCo's
    merge of global and local parameters. One pass over memory where the
    same arithmetic as mul, mul, add takes three.

    ```mlir
    %m2 = loom.lerp %m, %g weight 1.0e-01 : tensor<768xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$lhs, Loom_FloatTensor:$rhs, F64Attr:$weight);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs `weight` $weight attr-dict `:` type($result)";
}

class Loom_BinaryOp<string mnemonic, string math> : Loom_Op<mnemonic,
    [Pure, SameOperandsAndResultElementType, ResultsBroadcastableShape,
     Loom_ComputeOpTrait]> {
  let summary = "Elementwise " # math # " with broadcasting";
  let description = "Computes `" # math # "` elementwise. Shapes broadcast "
    # "as in NumPy (and ONNX): trailing dimensions are aligned and a "
    # "dimension of 1 stretches. The result type must be the broadcast "
    # "shape.\n\n```mlir\n%z = loom." # mnemonic
    # " %x, %b : tensor<2x8x64xf32>, tensor<64xf32> -> tensor<2x8x64xf32>\n```";
  let arguments = (ins Loom_AnyTensor:$lhs, Loom_AnyTensor:$rhs);
  let results = (outs Loom_AnyTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
}

def Loom_AddOp : Loom_BinaryOp<"add", "lhs + rhs">;
def Loom_SubOp : Loom_BinaryOp<"sub", "lhs - rhs">;
def Loom_MulOp : Loom_BinaryOp<"mul", "lhs * rhs">;
def Loom_DivOp : Loom_BinaryOp<"div", "lhs / rhs">;
def Loom_PowOp : Loom_BinaryOp<"pow", "lhs ^ rhs">;
def Loom_MaxOp : Loom_BinaryOp<"max", "max(lhs, rhs)">;
def Loom_MinOp : Loom_BinaryOp<"min", "min(lhs, rhs)">;
// Comparisons give 1 or 0 in the operands' element type: a mask computed on
// the device (ONNX Equal, Not, Less... on input ids) stays an integer tensor
// that arithmetic and casts take as it is. No gradient flows through them.
def Loom_EqOp : Loom_BinaryOp<"eq", "lhs == rhs ? 1 : 0">;
def Loom_NeOp : Loom_BinaryOp<"ne", "lhs != rhs ? 1 : 0">;
def Loom_LtOp : Loom_BinaryOp<"lt", "lhs < rhs ? 1 : 0">;
def Loom_LeOp : Loom_BinaryOp<"le", "lhs <= rhs ? 1 : 0">;

def Loom_CumsumOp : Loom_Op<"cumsum", [Pure, SameOperandsAndResultType, Loom_ComputeOpTrait]> {
  let summary = "prefix sum along one dimension (ONNX CumSum)";
  let description = [{
    `y[..., i, ...] = Σ x[..., j, ...]` over `j ≤ i` along `dim`; with
    `exclusive`, over `j < i`; with `reverse`, from the end (`j ≥ i`,
    `j > i`). On integers (RoBERTa's position ids: the running count of
    non-pad tokens), exact int64 arithmetic; on floats, fp32 accumulation in
    order, and the gradient is the prefix sum of the adjoint in the other
    direction.

    ```mlir
    %p = loom.cumsum %mask dim 1 : tensor<2x16xi64>
    %q = loom.cumsum %x dim 0 exclusive reverse : tensor<8x4xf32>
    ```
  }];
  let arguments = (ins Loom_AnyTensor:$input, I64Attr:$dim, UnitAttr:$exclusive,
                       UnitAttr:$reverse);
  let results = (outs Loom_AnyTensor:$result);
  let assemblyFormat = [{
    $input `dim` $dim (`exclusive` $exclusive^)? (`reverse` $reverse^)? attr-dict `:` type($result)
  }];
  let hasVerifier = 1;
}

def Loom_SelectOp : Loom_Op<"select", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Elementwise choice: cond ? lhs : rhs, with broadcasting";
  let description = [{
    ONNX `Where`; the causal mask of attention is a `select` of a constant
    lower-triangular `i1` tensor.

    ```mlir
    %y = loom.select %mask, %s, %ninf
        : tensor<8x8xi1>, tensor<2x4x8x8xf32>, tensor<f32> -> tensor<2x4x8x8xf32>
    ```
  }];
  let arguments = (ins StaticShapeTensorOf<[I1]>:$cond, Loom_AnyTensor:$lhs,
                       Loom_AnyTensor:$rhs);
  let results = (outs Loom_AnyTensor:$result);
  let assemblyFormat = [{
    $cond `,` $lhs `,` $rhs attr-dict `:` type($cond) `,` type($lhs) `,`
    type($rhs) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Loom_CastOp : Loom_Op<"cast", [Pure, SameOperandsAndResultShape, Loom_ComputeOpTrait]> {
  let summary = "Convert the element type";
  let description = [{
    Rounds to nearest even when narrowing (fp32 → bf16 for mixed precision).
    Placement cannot change here: that is a `loom.copy`.

    ```mlir
    %h = loom.cast %w : tensor<64xf32> to tensor<64xbf16>
    ```
  }];
  let arguments = (ins Loom_AnyTensor:$input);
  let results = (outs Loom_AnyTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasFolder = 1;
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Linear algebra and normalisation
//===----------------------------------------------------------------------===//

def Loom_MatmulOp : Loom_Op<"matmul", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Batched matrix product with optional transposes";
  let description = [{
    `result[..., m, n] = Σ_k A[..., m, k] · B[..., k, n]` where `A` is `lhs`
    (or its last two dimensions swapped with `transpose_lhs`) and likewise
    `B`. Batch dimensions broadcast; a rank-2 `rhs` is shared by every batch
    (a linear layer). Element types of the operands must agree; the result
    may be wider (bf16 × bf16 → f32 accumulation).

    ```mlir
    %y = loom.matmul %x, %w transpose_rhs
        : tensor<2x8x64xbf16>, tensor<256x64xbf16> -> tensor<2x8x256xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$lhs, Loom_FloatTensor:$rhs,
                       UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs (`transpose_lhs` $transpose_lhs^)? (`transpose_rhs` $transpose_rhs^)?
    attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Loom_LayerNormOp : Loom_Op<"layer_norm", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Layer normalisation over the last dimension";
  let description = [{
    `(x - mean) / sqrt(var + eps) * weight + bias` over the last dimension;
    `weight` and `bias` have the shape of that dimension; `bias` is optional.

    ```mlir
    %y = loom.layer_norm %x, %g, %b eps 1.0e-05
        : tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32> -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input, Loom_FloatTensor:$weight,
                       Optional<Loom_FloatTensor>:$bias, F64Attr:$eps);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? `eps` $eps attr-dict `:` type($input) `,`
    type($weight) (`,` type($bias)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def Loom_RmsNormOp : Loom_Op<"rms_norm", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Root-mean-square normalisation over the last dimension";
  let description = [{
    `x / sqrt(mean(x²) + eps) * weight` (Llama).

    ```mlir
    %y = loom.rms_norm %x, %g eps 1.0e-06
        : tensor<2x8x64xf32>, tensor<64xf32> -> tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input, Loom_FloatTensor:$weight,
                       F64Attr:$eps);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight `eps` $eps attr-dict `:` type($input) `,` type($weight)
    `->` type($result)
  }];
  let hasVerifier = 1;
}

def Loom_RotaryOp : Loom_Op<"rotary", [Pure, Loom_ComputeOpTrait,
    AllTypesMatch<["input", "result"]>, AllTypesMatch<["cos", "sin"]>]> {
  let summary = "Rotary position embeddings, rotate-half form (Llama, GPT-NeoX)";
  let description = [{
    `x · cos + rotate_half(x) · sin` with `rotate_half(x) = [-x₂, x₁]` (the
    two halves of the last dimension), `x` of shape `[..., T, D]` and the
    tables `[T, D]` (or with leading dimensions of 1), broadcast over the
    rest. `transpose`: the product with the transposed rotation,
    `x · cos + [(x · sin)₂, -(x · sin)₁]`, which is the operation's
    gradient with respect to `x` (the tables take none: they must not depend
    on parameters). loom-recognize-ops forms it from the slices, negation,
    concatenation, products and sum an exporter writes, so the runtime does
    one pass (loomrt_rotary) where those took about fifteen calls.

    ```mlir
    %y = loom.rotary %q, %cos, %sin : tensor<2x4x64x32xbf16>, tensor<64x32xbf16>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input, Loom_FloatTensor:$cos, Loom_FloatTensor:$sin,
                       UnitAttr:$transpose);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $cos `,` $sin (`transpose` $transpose^)? attr-dict `:` type($input) `,`
    type($cos)
  }];
  let hasVerifier = 1;
}

def Loom_SoftmaxOp : Loom_Op<"softmax", [Pure, SameOperandsAndResultType, Loom_ComputeOpTrait]> {
  let summary = "Softmax (or log-softmax) along one dimension";
  let description = [{
    ```mlir
    %p = loom.softmax %s dim 3 : tensor<2x4x8x8xf32>
    %lp = loom.softmax %s dim 1 log : tensor<16x50xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input, I64Attr:$dim, UnitAttr:$log);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$input `dim` $dim (`log` $log^)? attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Loom_EmbeddingOp : Loom_Op<"embedding", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Gather rows of a table";
  let description = [{
    `result[i..., :] = table[indices[i...], :]`. With a `mapped` table this is
    the zero-copy gather of feature tables kept in pinned host memory (the
    GCN paper's kernel): GPU threads read the rows they need over PCIe.

    ```mlir
    %x = loom.embedding %wte[%tokens]
        : tensor<50x16xf32>, tensor<2x8xi64> -> tensor<2x8x16xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$table, Loom_IntTensor:$indices);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $table `[` $indices `]` attr-dict `:` type($table) `,` type($indices)
    `->` type($result)
  }];
  let hasVerifier = 1;
}

def Loom_AttentionOp : Loom_Op<"attention", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Scaled dot-product attention";
  let description = [{
    `softmax(q kᵀ · scale + mask) v` over `[batch, heads, seq, head_dim]`
    tensors; `causal` masks keys after the query position. A lowering may use
    a fused kernel; importers may also emit the parts (matmul, select,
    softmax).

    ```mlir
    %o = loom.attention %q, %k, %v causal scale 0.125
        : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
        -> tensor<2x4x8x16xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$query, Loom_FloatTensor:$key,
                       Loom_FloatTensor:$value, UnitAttr:$causal, F64Attr:$scale);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`causal` $causal^)? `scale` $scale attr-dict `:`
    type($query) `,` type($key) `,` type($value) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Loom_SpmmOp : Loom_Op<"spmm", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Sparse (CSR) matrix times dense matrix: graph aggregation";
  let description = [{
    `result[r, :] = Σ_{j ∈ row_ptr[r]..row_ptr[r+1]} values[j] · input[col_idx[j], :]`,
    the neighbour aggregation of a GCN layer with a normalised adjacency in
    CSR form. `row_ptr` has one more element than the result has rows.

    ```mlir
    %h = loom.spmm %rp, %ci, %vals, %x
        : tensor<101xi64>, tensor<640xi64>, tensor<640xf32>, tensor<100x32xf32>
        -> tensor<100x32xf32>
    ```
  }];
  let arguments = (ins Loom_IntTensor:$row_ptr, Loom_IntTensor:$col_idx,
                       Loom_FloatTensor:$values, Loom_FloatTensor:$input);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $row_ptr `,` $col_idx `,` $values `,` $input attr-dict `:` type($row_ptr)
    `,` type($col_idx) `,` type($values) `,` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Mixture of experts: routing, and tokens moved to and from expert slots
//===----------------------------------------------------------------------===//

def Loom_TopKOp : Loom_Op<"top_k", [Pure, Loom_ComputeOpTrait]> {
  let summary = "The k largest values of each row and their positions";
  let description = [{
    Over the last dimension: `values[..., j]` is the j-th largest of
    `input[..., :]` (descending) and `indices[..., j]` its position; equal
    values keep their order (the lower position first). The router of a
    mixture of experts: the experts each token goes to.

    ```mlir
    %v, %i = loom.top_k %probs k 2 : tensor<64x8xf32> -> tensor<64x2xf32>, tensor<64x2xi64>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input, I64Attr:$k);
  let results = (outs Loom_FloatTensor:$values, Loom_IntTensor:$indices);
  let assemblyFormat = [{
    $input `k` $k attr-dict `:` type($input) `->` type($values) `,` type($indices)
  }];
  let hasVerifier = 1;
}

def Loom_TopKGradOp : Loom_Op<"top_k_grad", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Gradient of top_k: values' gradients put back at their positions";
  let description = [{
    `result[..., indices[..., j]] = grad[..., j]`, zero at the positions
    top_k did not choose. The result has top_k's input shape.

    ```mlir
    %dp = loom.top_k_grad %dv[%i] : tensor<64x2xf32>, tensor<64x2xi64> -> tensor<64x8xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$grad, Loom_IntTensor:$indices);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `[` $indices `]` attr-dict `:` type($grad) `,` type($indices) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Loom_MoeSlotsOp : Loom_Op<"moe_slots", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Each token's place in its experts' buffers (capacity, drops)";
  let description = [{
    `experts[N, K]` names the K experts of each of N tokens. Expert `e` has
    `capacity` slots, rows `e * capacity ...` of a `[experts x capacity, D]`
    buffer; they are filled in the order of (choice, token): every token's
    first choice before any second choice (GShard's priority), tokens in
    order. `slots[n, j]` is the row of token n's j-th choice, or -1 when its
    expert was full (the token is dropped from that expert).
    `counts[e]` is the number of choices of expert e before dropping (the
    load-balancing loss's and the log's token counts). `capacity = N`
    drops nothing.

    ```mlir
    %slots, %counts = loom.moe_slots %i experts 8 capacity 20
        : tensor<64x2xi64> -> tensor<64x2xi64>, tensor<8xf32>
    ```
  }];
  let arguments = (ins Loom_IntTensor:$experts, ConfinedAttr<I64Attr, [IntPositive]>:$num_experts,
                       ConfinedAttr<I64Attr, [IntPositive]>:$capacity);
  let results = (outs Loom_IntTensor:$slots, Loom_FloatTensor:$counts);
  let assemblyFormat = [{
    $experts `experts` $num_experts `capacity` $capacity attr-dict `:` type($experts) `->`
    type($slots) `,` type($counts)
  }];
  let hasVerifier = 1;
}

def Loom_MoeDispatchOp : Loom_Op<"moe_dispatch", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Tokens copied into their experts' slots";
  let description = [{
    `result[slots[n, j], :] = input[n, :] (* weights[n, j])` for every kept
    choice (`slots >= 0`); rows no token took are zero. The result's rows
    are the experts' buffers (`experts x capacity`).

    ```mlir
    %buf = loom.moe_dispatch %x[%slots] : tensor<64x32xf32>, tensor<64x2xi64> -> tensor<160x32xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input, Loom_IntTensor:$slots,
                       Optional<Loom_FloatTensor>:$weights);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $input `[` $slots `]` (`weights` $weights^)? attr-dict `:` type($input) `,` type($slots)
    (`,` type($weights)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def Loom_MoeCombineOp : Loom_Op<"moe_combine", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Each token's experts' outputs summed back (weighted by its gates)";
  let description = [{
    `result[n, :] = Σ_j weights[n, j] · input[slots[n, j], :]` over the kept
    choices (`slots >= 0`; 1 without weights). A token dropped by every
    expert gets zero.

    ```mlir
    %y = loom.moe_combine %buf[%slots] weights %gates
        : tensor<160x32xf32>, tensor<64x2xi64>, tensor<64x2xf32> -> tensor<64x32xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input, Loom_IntTensor:$slots,
                       Optional<Loom_FloatTensor>:$weights);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $input `[` $slots `]` (`weights` $weights^)? attr-dict `:` type($input) `,` type($slots)
    (`,` type($weights)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def Loom_MoeSlotDotOp : Loom_Op<"moe_slot_dot", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Dot products of tokens with their slots' rows (the gates' gradient)";
  let description = [{
    `result[n, j] = Σ_c tokens[n, c] · rows[slots[n, j], c]`, zero for a
    dropped choice: the gradient of moe_combine's and moe_dispatch's weights.

    ```mlir
    %dg = loom.moe_slot_dot %dy, %buf[%slots]
        : tensor<64x32xf32>, tensor<160x32xf32>, tensor<64x2xi64> -> tensor<64x2xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$tokens, Loom_FloatTensor:$rows, Loom_IntTensor:$slots);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $tokens `,` $rows `[` $slots `]` attr-dict `:` type($tokens) `,` type($rows) `,`
    type($slots) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Shape manipulation and reductions
//===----------------------------------------------------------------------===//

def Loom_ReshapeOp : Loom_Op<"reshape", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Same elements, another shape";
  let description = [{
    ```mlir
    %y = loom.reshape %x : tensor<2x8x64xf32> to tensor<16x64xf32>
    ```
  }];
  let arguments = (ins Loom_AnyTensor:$input);
  let results = (outs Loom_AnyTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Loom_TransposeOp : Loom_Op<"transpose", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Permute dimensions";
  let description = [{
    `result` dimension `i` is `input` dimension `perm[i]`.

    ```mlir
    %y = loom.transpose %x [0, 2, 1, 3] : tensor<2x8x4x16xf32> to tensor<2x4x8x16xf32>
    ```
  }];
  let arguments = (ins Loom_AnyTensor:$input, DenseI64ArrayAttr:$perm);
  let results = (outs Loom_AnyTensor:$result);
  let assemblyFormat = "$input $perm attr-dict `:` type($input) `to` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Loom_SliceOp : Loom_Op<"slice", [Pure, Loom_ComputeOpTrait]> {
  let summary = "A strided box of a tensor";
  let description = [{
    For each dimension, elements `start, start+step, ...` below `limit`
    (ONNX `Slice` and `Split` with constant bounds).

    ```mlir
    %q = loom.slice %qkv [0, 0, 0] [2, 8, 64] [1, 1, 1]
        : tensor<2x8x192xf32> to tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Loom_AnyTensor:$input, DenseI64ArrayAttr:$start,
                       DenseI64ArrayAttr:$limit, DenseI64ArrayAttr:$step);
  let results = (outs Loom_AnyTensor:$result);
  let assemblyFormat = [{
    $input $start $limit $step attr-dict `:` type($input) `to` type($result)
  }];
  let hasVerifier = 1;
}

def Loom_ConcatOp : Loom_Op<"concat", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Join tensors along one dimension";
  let description = [{
    ```mlir
    %y = loom.concat %a, %b dim 2
        : tensor<2x8x8xf32>, tensor<2x8x8xf32> -> tensor<2x8x16xf32>
    ```
  }];
  let arguments = (ins Variadic<Loom_AnyTensor>:$inputs, I64Attr:$dim);
  let results = (outs Loom_AnyTensor:$result);
  let assemblyFormat = "$inputs `dim` $dim attr-dict `:` type($inputs) `->` type($result)";
  let hasVerifier = 1;
}

def Loom_BroadcastOp : Loom_Op<"broadcast_to", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Stretch a tensor to a broadcast-compatible shape";
  let description = [{
    ```mlir
    %y = loom.broadcast_to %b : tensor<64xf32> to tensor<16x64xf32>
    ```
  }];
  let arguments = (ins Loom_AnyTensor:$input);
  let results = (outs Loom_AnyTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` type($result)";
  let hasVerifier = 1;
}

def Loom_ReduceOp : Loom_Op<"reduce", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Sum, mean, max or min over dimensions";
  let description = [{
    Reduces `dims`; with `keepdim` they stay as size 1.

    ```mlir
    %s = loom.reduce sum %x [0, 1] : tensor<2x8x64xf32> to tensor<64xf32>
    %m = loom.reduce mean %x [2] keepdim : tensor<2x8x64xf32> to tensor<2x8x1xf32>
    ```
  }];
  let arguments = (ins Loom_ReduceKind:$kind, Loom_AnyTensor:$input,
                       DenseI64ArrayAttr:$dims, UnitAttr:$keepdim);
  let results = (outs Loom_AnyTensor:$result);
  let assemblyFormat = [{
    $kind $input $dims (`keepdim` $keepdim^)? attr-dict `:` type($input) `to` type($result)
  }];
  let hasVerifier = 1;
}

def Loom_CrossEntropyOp : Loom_Op<"cross_entropy", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Mean cross-entropy of logits against integer labels";
  let description = [{
    `mean_i(logsumexp(logits[i, :]) - logits[i, labels[i]])` where the class
    dimension is the last one and every other dimension indexes samples.

    ```mlir
    %loss = loom.cross_entropy %logits, %targets
        : tensor<2x8x50xf32>, tensor<2x8xi64> -> tensor<f32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$logits, Loom_IntTensor:$labels);
  let results = (outs RankedTensorOf<[AnyFloat], [HasAnyRankOfPred<[0]>]>:$loss);
  let assemblyFormat = [{
    $logits `,` $labels attr-dict `:` type($logits) `,` type($labels) `->` type($loss)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Gradients (produced by loom-autodiff)
//===----------------------------------------------------------------------===//

class Loom_ActGradOp<string mnemonic, string fwd> : Loom_Op<mnemonic,
    [Pure, SameOperandsAndResultType, Loom_ComputeOpTrait]> {
  let summary = "Gradient of " # fwd;
  let description = "`dx = dy · " # fwd # "'(x)`, given the forward input "
    # "`x`.\n\n```mlir\n%dx = loom." # mnemonic # " %dy, %x : tensor<16x64xf32>\n```";
  let arguments = (ins Loom_FloatTensor:$grad, Loom_FloatTensor:$input);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$grad `,` $input attr-dict `:` type($result)";
}

def Loom_SiluGradOp : Loom_ActGradOp<"silu_grad", "silu">;
def Loom_ReluGradOp : Loom_ActGradOp<"relu_grad", "relu">;

def Loom_GeluGradOp : Loom_Op<"gelu_grad", [Pure, SameOperandsAndResultType, Loom_ComputeOpTrait]> {
  let summary = "Gradient of gelu";
  let description = [{
    `dx = dy · gelu'(x)` for the exact or (`approximate`) tanh form.

    ```mlir
    %dx = loom.gelu_grad %dy, %x approximate : tensor<16x64xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$grad, Loom_FloatTensor:$input,
                       UnitAttr:$approximate);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$grad `,` $input (`approximate` $approximate^)? attr-dict `:` type($result)";
}

def Loom_SoftmaxGradOp : Loom_Op<"softmax_grad", [Pure, SameOperandsAndResultType, Loom_ComputeOpTrait]> {
  let summary = "Gradient of softmax given its output";
  let description = [{
    `dx = y ⊙ (dy - Σ_dim(dy ⊙ y))`; with `log`, the gradient of log-softmax
    given its output: `dx = dy - exp(y) Σ_dim dy`.

    ```mlir
    %ds = loom.softmax_grad %dp, %p dim 3 : tensor<2x4x8x8xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$grad, Loom_FloatTensor:$output,
                       I64Attr:$dim, UnitAttr:$log);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$grad `,` $output `dim` $dim (`log` $log^)? attr-dict `:` type($result)";
}

def Loom_LayerNormGradOp : Loom_Op<"layer_norm_grad", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Gradients of layer_norm";
  let description = [{
    Given `dy` and the forward `x` and `weight`, returns `dx`, `dweight` and
    `dbias` (statistics are recomputed from `x`).

    ```mlir
    %dx, %dg, %db = loom.layer_norm_grad %dy, %x, %g eps 1.0e-05
        : tensor<16x64xf32>, tensor<16x64xf32>, tensor<64xf32>
        -> tensor<16x64xf32>, tensor<64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$grad, Loom_FloatTensor:$input,
                       Loom_FloatTensor:$weight, F64Attr:$eps);
  let results = (outs Loom_FloatTensor:$grad_input, Loom_FloatTensor:$grad_weight,
                      Loom_FloatTensor:$grad_bias);
  let assemblyFormat = [{
    $grad `,` $input `,` $weight `eps` $eps attr-dict `:` type($grad) `,`
    type($input) `,` type($weight) `->` type($grad_input) `,` type($grad_weight)
    `,` type($grad_bias)
  }];
  let hasVerifier = 1;
}

def Loom_RmsNormGradOp : Loom_Op<"rms_norm_grad", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Gradients of rms_norm";
  let description = [{
    ```mlir
    %dx, %dg = loom.rms_norm_grad %dy, %x, %g eps 1.0e-06
        : tensor<16x64xf32>, tensor<16x64xf32>, tensor<64xf32>
        -> tensor<16x64xf32>, tensor<64xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$grad, Loom_FloatTensor:$input,
                       Loom_FloatTensor:$weight, F64Attr:$eps);
  let results = (outs Loom_FloatTensor:$grad_input, Loom_FloatTensor:$grad_weight);
  let assemblyFormat = [{
    $grad `,` $input `,` $weight `eps` $eps attr-dict `:` type($grad) `,`
    type($input) `,` type($weight) `->` type($grad_input) `,` type($grad_weight)
  }];
  let hasVerifier = 1;
}

def Loom_CrossEntropyGradOp : Loom_Op<"cross_entropy_grad", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Gradient of cross_entropy with respect to the logits";
  let description = [{
    `dlogits = (softmax(logits) - onehot(labels)) · dloss / N`.

    ```mlir
    %dl = loom.cross_entropy_grad %logits, %targets, %dloss
        : tensor<2x8x50xf32>, tensor<2x8xi64>, tensor<f32> -> tensor<2x8x50xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$logits, Loom_IntTensor:$labels,
                       Loom_FloatTensor:$grad);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $labels `,` $grad attr-dict `:` type($logits) `,` type($labels)
    `,` type($grad) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Loom_EmbeddingGradOp : Loom_Op<"embedding_grad", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Scatter-add rows of a gradient into a table-shaped gradient";
  let description = [{
    `result[indices[i...], :] += grad[i..., :]`, zero elsewhere; repeated
    indices accumulate. The result has the table's shape.

    ```mlir
    %dw = loom.embedding_grad %dx[%tokens]
        : tensor<2x8x16xf32>, tensor<2x8xi64> -> tensor<50x16xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$grad, Loom_IntTensor:$indices);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $grad `[` $indices `]` attr-dict `:` type($grad) `,` type($indices) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Loom_AttentionGradOp : Loom_Op<"attention_grad", [Pure, Loom_ComputeOpTrait]> {
  let summary = "Gradients of attention with respect to q, k and v";
  let description = [{
    ```mlir
    %dq, %dk, %dv = loom.attention_grad %do, %q, %k, %v causal scale 0.125
        : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>,
          tensor<2x4x8x16xf32>
        -> tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$grad, Loom_FloatTensor:$query,
                       Loom_FloatTensor:$key, Loom_FloatTensor:$value,
                       UnitAttr:$causal, F64Attr:$scale);
  let results = (outs Loom_FloatTensor:$grad_query, Loom_FloatTensor:$grad_key,
                      Loom_FloatTensor:$grad_value);
  let assemblyFormat = [{
    $grad `,` $query `,` $key `,` $value (`causal` $causal^)? `scale` $scale
    attr-dict `:` type($grad) `,` type($query) `,` type($key) `,` type($value)
    `->` type($grad_query) `,` type($grad_key) `,` type($grad_value)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Optimizer updates
//===----------------------------------------------------------------------===//

def Loom_AdamOp : Loom_Op<"adam", [Pure, Loom_ComputeOpTrait,
    AllShapesMatch<["param", "grad", "exp_avg", "exp_avg_sq",
                    "new_param", "new_exp_avg", "new_exp_avg_sq"]>,
    AllTypesMatch<["param", "new_param"]>,
    AllTypesMatch<["exp_avg", "new_exp_avg", "exp_avg_sq", "new_exp_avg_sq"]>]> {
  let summary = "One Adam / AdamW step";
  let description = [{
    torch.optim.AdamW's update (with `decoupled`, else Adam with L2 weight
    decay folded into the gradient), `step` being the 1-based step count
    used for bias correction:

        m ← β₁m + (1-β₁)g;  v ← β₂v + (1-β₂)g²
        p ← p·(1 - lr·wd) - lr/(1-β₁ᵗ) · m / (√v/√(1-β₂ᵗ) + ε)

    The device it runs on follows from where its operands live: state in
    pinned host memory is updated by the CPU, state copied to the GPU is
    updated there (Deep Optimizer States' two paths). `subgroup` records
    which `loom.subgroup` this update belongs to.

    With `freeze_step = F`, the op is 1-bit Adam's update after its freeze
    (Tang et al. 2021, Algorithm 1): `grad` is the momentum, already
    updated on each rank and averaged by the compressed all-reduce; the new
    `exp_avg` is it, `exp_avg_sq` stays, and its bias correction stays at
    step F (`decoupled` required):

        m ← g;  p ← p·(1 - lr·wd) - lr/(1-β₁ᵗ) · m / (√v/√(1-β₂ᶠ) + ε)

    ```mlir
    %p2, %m2, %v2 = loom.adam %p, %g, %m, %v step %t
        {lr = 1.0e-03 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64,
         eps = 1.0e-08 : f64, weight_decay = 0.01 : f64, decoupled}
        : tensor<1024xf32, #loom.mem<pinned>>, tensor<1024xf32, #loom.mem<pinned>>,
          tensor<1024xf32, #loom.mem<pinned>>, tensor<1024xf32, #loom.mem<pinned>>, tensor<i64>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$param, Loom_FloatTensor:$grad,
                       Loom_FloatTensor:$exp_avg, Loom_FloatTensor:$exp_avg_sq,
                       RankedTensorOf<[I64], [HasAnyRankOfPred<[0]>]>:$step,
                       F64Attr:$lr, DefaultValuedAttr<F64Attr, "0.9">:$beta1,
                       DefaultValuedAttr<F64Attr, "0.999">:$beta2,
                       DefaultValuedAttr<F64Attr, "1.0e-8">:$eps,
                       DefaultValuedAttr<F64Attr, "0.0">:$weight_decay,
                       UnitAttr:$decoupled,
                       OptionalAttr<FlatSymbolRefAttr>:$subgroup,
                       OptionalAttr<ConfinedAttr<I64Attr, [IntPositive]>>:$freeze_step);
  let results = (outs Loom_FloatTensor:$new_param, Loom_FloatTensor:$new_exp_avg,
                      Loom_FloatTensor:$new_exp_avg_sq);
  let assemblyFormat = [{
    $param `,` $grad `,` $exp_avg `,` $exp_avg_sq `step` $step attr-dict `:`
    type($param) `,` type($grad) `,` type($exp_avg) `,` type($exp_avg_sq) `,` type($step)
  }];
  let hasVerifier = 1;
}

def Loom_SgdOp : Loom_Op<"sgd", [Pure, Loom_ComputeOpTrait,
    AllTypesMatch<["param", "grad", "momentum_buf", "new_param", "new_momentum_buf"]>]> {
  let summary = "SGD with (Nesterov) momentum";
  let description = [{
    torch.optim.SGD: `b ← μb + g`; `p ← p - lr·(g + μb)` with `nesterov`,
    else `p ← p - lr·b`. Streaming DiLoCo's outer step is this op applied to
    the pseudo-gradient (global − local) with lr 0.7, μ 0.9, Nesterov.

    ```mlir
    %p2, %b2 = loom.sgd %p, %g, %b {lr = 0.7 : f64, momentum = 0.9 : f64, nesterov}
        : tensor<1024xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$param, Loom_FloatTensor:$grad,
                       Loom_FloatTensor:$momentum_buf, F64Attr:$lr,
                       DefaultValuedAttr<F64Attr, "0.0">:$momentum,
                       UnitAttr:$nesterov);
  let results = (outs Loom_FloatTensor:$new_param, Loom_FloatTensor:$new_momentum_buf);
  let assemblyFormat = [{
    $param `,` $grad `,` $momentum_buf attr-dict `:` type($param)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Memory placement
//===----------------------------------------------------------------------===//

def Loom_CopyOp : Loom_Op<"copy", [
    Loom_AsyncOpInterface,
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "Asynchronous move of a buffer to another memory space";
  let description = [{
    Queues a DMA of `input` into a new buffer in the result's memory space on
    `stream`, after the tokens in `[...]` complete. The result may be read
    only once the returned token has been waited on (see `!loom.token`).
    The payload may be a tensor or a compressed `!loom.packed`. Source and
    result must differ in placement; a host→GPU copy belongs on an `h2d`
    stream and a GPU→host copy on a `d2h` stream (a `compute` or `comm`
    stream may also order a copy).

    ```mlir
    %d, %t = loom.copy %h after [%t0] on h2d
        : tensor<1024xf32, #loom.mem<pinned>> -> tensor<1024xf32, #loom.mem<device>>
    loom.wait %t
    ```
  }];
  let arguments = (ins Loom_Payload:$input, Variadic<Loom_TokenType>:$deps,
                       Loom_StreamAttr:$stream);
  let results = (outs Loom_Payload:$result, Loom_TokenType:$token);
  let assemblyFormat = [{
    $input (`after` ` ` `[` $deps^ `]`)? `on` custom<Stream>($stream) attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Value getAsyncToken() { return getToken(); }
    ::mlir::OperandRange getAsyncDeps() { return getDeps(); }
  }];
}

def Loom_WaitOp : Loom_Op<"wait", [MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "Block until asynchronous work completes";
  let description = [{
    After this op the results of the ops that produced these tokens may be
    read. Each token is waited at most once and must come from an
    asynchronous op.

    ```mlir
    loom.wait %t0, %t1
    ```
  }];
  let arguments = (ins Variadic<Loom_TokenType>:$tokens);
  let assemblyFormat = "$tokens attr-dict";
  let hasVerifier = 1;
}

def Loom_ReleaseOp : Loom_Op<"release", [MemoryEffects<[MemFree]>]> {
  let summary = "Mark the end of a buffer's life";
  let description = [{
    The memory of `value` may be reused from here on: the schedule's record
    of when GPU memory frees up during backward (activations die, gradients
    are flushed). Nothing in the same block may use `value` after it.

    ```mlir
    loom.release %act : tensor<2x8x64xf32, #loom.mem<device>>
    ```
  }];
  let arguments = (ins Loom_Payload:$value);
  let assemblyFormat = "$value attr-dict `:` type($value)";
  let hasVerifier = 1;
}

def Loom_ZeroCopyOp : Loom_Op<"zero_copy", [Pure]> {
  let summary = "Let the GPU read pinned host memory directly";
  let description = [{
    A view of a pinned host buffer that GPU kernels read over PCIe without a
    copy (`#loom.mem<mapped>`). This is the only way a GPU kernel may read
    host memory: the verifier rejects a GPU compute op with a host operand.
    Only pinned memory can be mapped.

    ```mlir
    %feat = loom.zero_copy %table
        : tensor<1000000x128xf32, #loom.mem<pinned>> -> tensor<1000000x128xf32, #loom.mem<mapped>>
    %rows = loom.embedding %feat[%ids]
        : tensor<1000000x128xf32, #loom.mem<mapped>>, tensor<4096xi64, #loom.mem<device>>
        -> tensor<4096x128xf32, #loom.mem<device>>
    ```
  }];
  let arguments = (ins Loom_AnyTensor:$input);
  let results = (outs Loom_AnyTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Communication
//===----------------------------------------------------------------------===//

class Loom_CollectiveOp<string mnemonic, list<Trait> traits = []> : Loom_Op<mnemonic,
    traits # [Loom_AsyncOpInterface,
              DeclareOpInterfaceMethods<SymbolUserOpInterface>,
              MemoryEffects<[MemRead, MemWrite]>]> {
  let results = (outs Loom_Payload:$result, Loom_TokenType:$token);
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Value getAsyncToken() { return getToken(); }
    ::mlir::OperandRange getAsyncDeps() { return getDeps(); }
  }];
}

def Loom_AllReduceOp : Loom_CollectiveOp<"all_reduce"> {
  let summary = "Reduce over a group; every rank gets the result";
  let description = [{
    `reduce` is `sum` (default), `mean`, `max` or `min`. The payload must be
    a tensor: a compressed payload cannot be summed (1-bit Adam's compressed
    all-reduce is an all-to-all and an all-gather of packed chunks).

    ```mlir
    %s, %t = loom.all_reduce %g over #loom.group<@t, ["gpu", "node"]> reduce mean
        on comm : tensor<1024xf32> -> tensor<1024xf32>
    ```
  }];
  let arguments = (ins Loom_Payload:$input, Variadic<Loom_TokenType>:$deps,
                       Loom_GroupAttr:$group,
                       DefaultValuedAttr<Loom_ReduceKind, "ReduceKind::sum">:$reduce,
                       Loom_StreamAttr:$stream);
  let assemblyFormat = [{
    $input (`after` ` ` `[` $deps^ `]`)? `over` qualified($group) (`reduce` $reduce^)? `on` custom<Stream>($stream) attr-dict
    `:` type($input) `->` type($result)
  }];
}

def Loom_ReduceScatterOp : Loom_CollectiveOp<"reduce_scatter"> {
  let summary = "Reduce over a group; rank i keeps slice i of dimension 0";
  let description = [{
    The result's dimension 0 is the input's divided by the group size.

    ```mlir
    %part, %t = loom.reduce_scatter %g over #loom.group<@t, ["gpu"]> on comm
        : tensor<4096xf32> -> tensor<1024xf32>
    ```
  }];
  let arguments = (ins Loom_Payload:$input, Variadic<Loom_TokenType>:$deps,
                       Loom_GroupAttr:$group,
                       DefaultValuedAttr<Loom_ReduceKind, "ReduceKind::sum">:$reduce,
                       Loom_StreamAttr:$stream);
  let assemblyFormat = [{
    $input (`after` ` ` `[` $deps^ `]`)? `over` qualified($group) (`reduce` $reduce^)? `on` custom<Stream>($stream) attr-dict
    `:` type($input) `->` type($result)
  }];
}

def Loom_AllGatherOp : Loom_CollectiveOp<"all_gather"> {
  let summary = "Concatenate every rank's tensor along dimension 0";
  let description = [{
    The result's dimension 0 is the input's times the group size. A packed
    payload is gathered as packed (ZeRO++ qwZ gathers int8 weights).

    ```mlir
    %w, %t = loom.all_gather %shard over #loom.group<@t, ["gpu"]> on comm
        : tensor<256x64xbf16> -> tensor<1024x64xbf16>
    ```
  }];
  let arguments = (ins Loom_Payload:$input, Variadic<Loom_TokenType>:$deps,
                       Loom_GroupAttr:$group, Loom_StreamAttr:$stream);
  let assemblyFormat = [{
    $input (`after` ` ` `[` $deps^ `]`)? `over` qualified($group) `on` custom<Stream>($stream) attr-dict
    `:` type($input) `->` type($result)
  }];
}

def Loom_AllToAllOp : Loom_CollectiveOp<"all_to_all"> {
  let summary = "Rank i sends chunk j of dimension 0 to rank j";
  let description = [{
    Same type in and out; dimension 0 must divide by the group size.

    ```mlir
    %x, %t = loom.all_to_all %p over #loom.group<@t, ["gcd", "gpu"]> on comm
        : tensor<4096xf32> -> tensor<4096xf32>
    ```
  }];
  let arguments = (ins Loom_Payload:$input, Variadic<Loom_TokenType>:$deps,
                       Loom_GroupAttr:$group, Loom_StreamAttr:$stream);
  let assemblyFormat = [{
    $input (`after` ` ` `[` $deps^ `]`)? `over` qualified($group) `on` custom<Stream>($stream) attr-dict
    `:` type($input) `->` type($result)
  }];
}

def Loom_BroadcastCommOp : Loom_CollectiveOp<"broadcast"> {
  let summary = "Every rank of a group receives the root's tensor";
  let description = [{
    `root` is the rank's index inside the group.

    ```mlir
    %w, %t = loom.broadcast %w0 over #loom.group<@t, ["node"]> root 0 on comm
        : tensor<1024xf32> -> tensor<1024xf32>
    ```
  }];
  let arguments = (ins Loom_Payload:$input, Variadic<Loom_TokenType>:$deps,
                       Loom_GroupAttr:$group, I64Attr:$root, Loom_StreamAttr:$stream);
  let assemblyFormat = [{
    $input (`after` ` ` `[` $deps^ `]`)? `over` qualified($group) `root` $root `on` custom<Stream>($stream) attr-dict
    `:` type($input) `->` type($result)
  }];
}

def Loom_SendRecvOp : Loom_CollectiveOp<"send_recv"> {
  let summary = "Pass a tensor to the rank `shift` places on in a group";
  let description = [{
    Rank i of the group sends its input to rank i + shift and receives its
    result from rank i - shift, both at once (pipeline stages: activations
    forward with shift 1, their gradients back with shift -1). There is no
    wrap-around: a rank with no sender receives zeros, and a rank with no
    receiver sends nothing. Same type in and out; tensors, not packed
    payloads.

    ```mlir
    %a, %t = loom.send_recv %h over #loom.group<@t, ["stage"]> shift 1 on comm
        : tensor<8x1024xf32> -> tensor<8x1024xf32>
    ```
  }];
  let arguments = (ins Loom_Payload:$input, Variadic<Loom_TokenType>:$deps,
                       Loom_GroupAttr:$group, I64Attr:$shift, Loom_StreamAttr:$stream);
  let assemblyFormat = [{
    $input (`after` ` ` `[` $deps^ `]`)? `over` qualified($group) `shift` $shift `on` custom<Stream>($stream) attr-dict
    `:` type($input) `->` type($result)
  }];
}

def Loom_P2POp : Loom_Op<"p2p", [Loom_AsyncOpInterface, AttrSizedOperandSegments,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>, MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "Send to and receive from ranks of a group `to` and `from` places on";
  let description = [{
    Point to point between pipeline stages, one side or both at once: the
    input goes to rank i + `to` of the group and the result comes from rank
    i + `from` (both must exist: a stage's program names only the
    neighbours it has). Every `loom.p2p` must be matched on its peer by one
    of the same size in the same order (loom-pipeline-split writes them in
    pairs). Both sides in one op (Megatron's `send_forward_recv_backward`)
    proceed together, so two stages that send to each other never wait on
    each other.

    Gradient (loom-autodiff): a send's input gets its gradient from the
    rank it was sent to, and a received result's gradient goes back where
    it came from, so the rule of `send to a, recv from b` is `send (the
    result's gradient) to b, recv (the input's gradient) from a`. The rule
    runs whether or not a gradient reached the op (zeros are sent), so the
    backward's transfers pair up as the forward's did.

    ```mlir
    %t = loom.p2p send %h to 1 over #loom.group<@t, ["stage"]> on comm : tensor<8x1024xf32>
    %x, %t2 = loom.p2p recv from -1 over #loom.group<@t, ["stage"]> on comm
        -> tensor<8x1024xf32>
    %g, %t3 = loom.p2p send %h to 1 recv from 1 over #loom.group<@t, ["stage"]> on comm
        : tensor<8x1024xf32> -> tensor<8x1024xf32>
    ```
  }];
  let arguments = (ins Optional<Loom_AnyTensor>:$input, Variadic<Loom_TokenType>:$deps,
                       Loom_GroupAttr:$group, OptionalAttr<I64Attr>:$to,
                       OptionalAttr<I64Attr>:$from, Loom_StreamAttr:$stream);
  let results = (outs Optional<Loom_AnyTensor>:$result, Loom_TokenType:$token);
  let assemblyFormat = [{
    (`send` $input^ `to` $to)? (`recv` `from` $from^)? (`after` ` ` `[` $deps^ `]`)?
    `over` qualified($group) `on` custom<Stream>($stream) attr-dict
    (`:` type($input)^)? (`->` type($result)^)?
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Value getAsyncToken() { return getToken(); }
    ::mlir::OperandRange getAsyncDeps() { return getDeps(); }
    /// The signed peer offsets (the attributes' getters are unsigned).
    std::optional<int64_t> sendPeer() {
      if (auto a = getToAttr()) return a.getInt();
      return std::nullopt;
    }
    std::optional<int64_t> recvPeer() {
      if (auto a = getFromAttr()) return a.getInt();
      return std::nullopt;
    }
  }];
}

def Loom_ShardOp : Loom_Op<"shard", [Pure,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "This rank's block of dimension 0 within a group";
  let description = [{
    Rank i of the group gets block i of the input's dimension 0 (which must
    divide by the group size): the partition ZeRO gives each rank of
    optimizer state and, at stage 3, of the parameters. No data moves; the
    result is a view. It is how rank-dependent slices appear in IR whose
    shapes are the same on every rank.

    ```mlir
    %mine = loom.shard over #loom.group<@t, ["gpu"]> %flat
        : tensor<4096xf32> -> tensor<1024xf32>
    ```
  }];
  let arguments = (ins Loom_AnyTensor:$input, Loom_GroupAttr:$group);
  let results = (outs Loom_AnyTensor:$result);
  let assemblyFormat = [{
    `over` qualified($group) $input attr-dict `:` type($input) `->` type($result)
  }];
}

def Loom_TpEnterOp : Loom_Op<"tp_enter", [Pure, AllTypesMatch<["input", "result"]>,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Enter a tensor-parallel region: identity forward, all-reduce backward";
  let description = [{
    Megatron-LM's `f` (Shoeybi et al. 2019, section 3): an activation every
    rank of the tensor-parallel `group` holds whole, about to feed each
    rank's column slice of the next products. The value is unchanged; its
    gradient is the sum of the ranks' gradients, so loom-autodiff's rule is
    an all-reduce (sum) over `group`, and loom-autodiff removes the op once
    the backward is built. loom-tensor-parallel inserts it.

    ```mlir
    %h1 = loom.tp_enter over #loom.group<@world, ["gpu"]> %h : tensor<2x8x64xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input, Loom_GroupAttr:$group);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    `over` qualified($group) $input attr-dict `:` type($input)
  }];
}

def Loom_StopGradientOp : Loom_Op<"stop_gradient", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "The identity, through which no gradient flows";
  let description = [{
    PyTorch's `detach`: the value is unchanged and `loom-autodiff` treats it
    as a constant (a comparison's result is one too). The vocabulary-parallel
    cross-entropy of `loom-tensor-parallel` shifts the logits by their
    maximum over the group before the exponential, a shift whose gradient is
    zero in exact arithmetic. `loom-autodiff` removes the op once the
    backward is built.

    ```mlir
    %m1 = loom.stop_gradient %m : tensor<16x1xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Loom_CompressOp : Loom_Op<"compress", [Pure]> {
  let summary = "Encode a tensor with a codec, optionally with error feedback";
  let description = [{
    Produces a `!loom.packed` payload. With `feedback(%e)`, the error of the
    previous step is added before compressing and the new error
    (`x + e - decompress(compress(x + e))`) is returned, so nothing the codec
    drops is lost across steps (1-bit Adam's worker- and server-side error
    feedback, §3.2). The codec must suit the element type.

    ```mlir
    %p, %e2 = loom.compress %m feedback(%e : tensor<4096xf32>)
        : tensor<4096xf32> -> !loom.packed<tensor<4096xf32>, #loom.codec<sign_scale>>, tensor<4096xf32>
    %q = loom.compress %w : tensor<4096xbf16>
        -> !loom.packed<tensor<4096xbf16>, #loom.codec<int8, block = 2048>>
    ```
  }];
  let arguments = (ins Loom_AnyTensor:$input, Optional<Loom_FloatTensor>:$error);
  let results = (outs Loom_PackedType:$result, Optional<Loom_FloatTensor>:$new_error);
  let assemblyFormat = [{
    $input (`feedback` `(` $error^ `:` type($error) `)`)? attr-dict `:` type($input)
    `->` qualified(type($result))
    (`,` type($new_error)^)?
  }];
  let hasVerifier = 1;
}

def Loom_DecompressOp : Loom_Op<"decompress", [Pure]> {
  let summary = "Decode a packed payload";
  let description = [{
    Decompression of a compression is not folded away: codecs are lossy.

    ```mlir
    %x = loom.decompress %p
        : !loom.packed<tensor<4096xf32>, #loom.codec<sign_scale>> -> tensor<4096xf32>
    ```
  }];
  let arguments = (ins Loom_PackedType:$input);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` qualified(type($input)) `->` type($result)";
  let hasVerifier = 1;
}

#endif // LOOM_OPS_TD
