//===- LoomBase.td - the loom dialect, its enums, attributes and types ----===//
//
// The vocabulary every Loom pass speaks: where a buffer lives (#loom.mem),
// which stream orders a piece of work (#loom.stream), how a payload is
// compressed (#loom.codec, !loom.packed), which ranks a collective spans
// (#loom.group), and the tokens that order asynchronous work (!loom.token).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_BASE_TD
#define LOOM_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/IR/TensorEncoding.td"

def Loom_Dialect : Dialect {
  let name = "loom";
  let cppNamespace = "::mlir::loom";
  let summary = "Training graphs with memory placement, communication and schedules";
  let description = [{
    The `loom` dialect holds a whole training step: the forward and backward
    compute, the parameters and their optimizer state, where every buffer
    lives, when it moves, which collectives run over which ranks, how their
    payloads are compressed, and on which stream each piece of work is
    ordered. Every decision a Loom pass makes is written into this IR, so it
    can be printed, FileChecked and written by hand.

    Values are builtin ranked tensors. Their *placement* is the tensor's
    encoding attribute, `#loom.mem<...>`; a tensor with no encoding is not
    placed yet (the state before the placement passes run). A compute op runs
    where its data lives: operands in `device` or `mapped` memory mean a GPU
    kernel, operands in `pinned` or `pageable` host memory mean a CPU kernel,
    and mixing the two sides is an error.
  }];
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
  // The `loom.*` attributes passes hand each other (loom.grad_params,
  // loom.data_parallel, ...) are checked where any op carries them: a .mlir
  // file is untrusted input and the passes read them as typed.
  let hasOperationAttrVerify = 1;
  // Their names and types, declared once: LoomDialect::<Name>AttrHelper
  // (getNameStr(), getAttr/setAttr) is what every pass and the verifier use.
  let discardableAttrs = (ins
    // On a function: the parameters its gradients are of, in result order.
    "::mlir::ArrayAttr":$grad_params,
    // On a ZeRO shard: the parameters (or state) it holds, in order.
    "::mlir::ArrayAttr":$shard_of,
    // On a ZeRO 1-2 shard of Adam state (its parameters stay whole): the
    // parameters whose moments it holds, in bucket order, laid out as its
    // loom.padded and loom.member_align say. Unlike loom.shard_of nothing is
    // drawn for them: the layout is for checkpoints (a re-sharding resume).
    "::mlir::ArrayAttr":$layout_of,
    // On a sharded parameter or state: the shard that holds it.
    "::mlir::FlatSymbolRefAttr":$sharded_into,
    // On a working copy: the fp32 master it mirrors.
    "::mlir::FlatSymbolRefAttr":$mirror_of,
    // On a shard: its elements after padding to a multiple of the ranks.
    "::mlir::IntegerAttr":$padded,
    // On a shard: each member starts at a multiple of this many elements of
    // the bucket (loom-data-parallel member-align; absent: packed).
    "::mlir::IntegerAttr":$member_align,
    // On a parameter the ranks of a tensor-parallel group split
    // (loom-tensor-parallel): [dim, groups], the part each rank holds.
    "::mlir::DenseI64ArrayAttr":$tp_slice,
    // On the module: the ranks of each tensor-parallel group.
    "::mlir::IntegerAttr":$tensor_parallel,
    // On the module: the ops between the branches run on each rank's
    // tokens (loom-tensor-parallel sequence-parallel).
    "::mlir::UnitAttr":$sequence_parallel,
    // On the slices of @forward's inputs that loom-micro-batches makes: the
    // micro-batch (from 0) whose rows they are; loom-pipeline-schedule
    // orders each micro-batch's ops by it.
    "::mlir::IntegerAttr":$micro_batch,
    // On a metric's state (@metrics.NAME): its micro-batches' values are
    // summed (a count) where loom-micro-batches would otherwise average them.
    "::mlir::UnitAttr":$metric_sum,
    // On a forward op and a loom.param (loom-pipeline-cut): the pipeline
    // stage, from 0, that runs or holds it.
    "::mlir::IntegerAttr":$stage,
    // On the module of one pipeline stage's program (loom-pipeline-split):
    // [stage, stages, stage level's index in the topology].
    "::mlir::DenseI64ArrayAttr":$pipeline,
    // On the module of one expert-parallel rank's program
    // (loom-expert-parallel): [rank, ranks, the level's index in the
    // topology].
    "::mlir::DenseI64ArrayAttr":$expert_parallel,
    // On a loom.param of an expert-parallel rank's program: one of the
    // experts only this rank of its group holds; loom-data-parallel
    // averages its gradient over the ranks holding the same expert only.
    "::mlir::UnitAttr":$expert,
    // On a loom.param of a stage's program (loom-pipeline-split): the
    // elements the one-rank model draws from the seed's stream for the
    // parameters before it that this stage does not hold (the driver skips
    // them, so every stage starts from the one-rank model's values).
    "::mlir::IntegerAttr":$init_skip,
    // On a loom.param two stages hold (a tied embedding, Megatron's shared
    // word embeddings): how many stages on the other copy is; their
    // gradients are summed before the update (loom-pipeline-join).
    "::mlir::IntegerAttr":$tied_peer,
    // On an op: loom-mixed-precision leaves it in fp32 (its bf16 operands
    // cast up): the vocabulary-parallel cross-entropy's statistics.
    "::mlir::UnitAttr":$fp32,
    // On @train_step: #loom.data_parallel, its ranks and ZeRO stage
    // (loom-data-parallel).
    "::mlir::loom::DataParallelAttr":$data_parallel,
    // On the module: #loom.offload_plan, the interleaved plan
    // (loom-interleave-offload).
    "::mlir::loom::OffloadPlanAttr":$offload_plan,
    // On the module: the model it was made from (a generator spec or file).
    "::mlir::StringAttr":$model,
    // On the module: the parallel plan loomc --plan chose, {flags = "...",
    // predicted_step_s = ...} (lib/Pipelines/PlanSearch.cpp).
    "::mlir::DictionaryAttr":$plan,
    // On @train_step: #loom.optimizer_offload, the mode
    // loom-offload-optimizer applied.
    "::mlir::loom::OptimizerOffloadAttr":$optimizer_offload,
    // On the module: the names of @forward's arguments, in order (the
    // model's inputs and the loss's labels; the training binary's
    // --input NAME=FILE.npy).
    "::mlir::ArrayAttr":$input_names,
    // On the module of a graph model on sampled mini-batches (--model sage
    // and gcn): #loom.graph, how the training binary's sampler fills and
    // weights the step's inputs, named features, nodes<d>, weights<d>,
    // self<d>, labels.
    "::mlir::loom::GraphAttr":$graph,
    // On @train_step_frozen (loom-onebit-adam): the run step from which the
    // binary runs it instead of @train_step (1-bit Adam's freeze step).
    "::mlir::IntegerAttr":$freeze_step,
    // On @train_step_frozen (loom-onebit-adam variance-refresh=K): the
    // variance is refreshed K, 2K, 4K, ... steps after the freeze (the
    // binary runs @train_step there, its v standing for the steps since the
    // last refresh; 0/1 Adam's adaptive freezing, Lu et al. 2022).
    "::mlir::IntegerAttr":$variance_refresh,
    // On a Streaming DiLoCo outer step (loom-diloco's @diloco_outer_F):
    // #loom.diloco, the inner steps after which it runs.
    "::mlir::loom::DilocoAttr":$diloco,
    // On any op: why a pass left it as it was where it rewrites its kind
    // (a fallback, e.g. qgZ's plain reduce-scatter for a shard that is not
    // whole blocks), so the IR says what was not done and why.
    "::mlir::StringAttr":$note
  );
  let hasConstantMaterializer = 0;
  let extraClassDeclaration = [{
    void registerAttributes();
    void registerTypes();

    // The functions of a training module, by phase: passes find them by
    // these names, code generation and the step simulation enter them.
    /// The model (loss) as imported or generated.
    static constexpr ::llvm::StringLiteral kForward = "forward";
    /// loom-autodiff's forward plus backward (gradients as results).
    static constexpr ::llvm::StringLiteral kForwardBackward = "forward_backward";
    /// loom-attach-optimizer's whole step: gradients and the update.
    static constexpr ::llvm::StringLiteral kTrainStep = "train_step";
    /// loom-onebit-adam's step after the freeze (compressed momentum).
    static constexpr ::llvm::StringLiteral kTrainStepFrozen = "train_step_frozen";
    /// With ZeRO 1-2 and 1-bit Adam, the function the driver runs once
    /// before the first frozen step (loom-data-parallel).
    static constexpr ::llvm::StringLiteral kEnterFrozen = "enter_frozen";
    /// Streaming DiLoCo's start: the global copy from the initial
    /// parameters (loom-diloco).
    static constexpr ::llvm::StringLiteral kDilocoStart = "diloco_start";
  }];
}

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Loom_MemSpace : I32EnumAttr<"MemSpace", "where a buffer lives", [
    I32EnumAttrCase<"device", 0>,
    I32EnumAttrCase<"pinned", 1>,
    I32EnumAttrCase<"pageable", 2>,
    I32EnumAttrCase<"mapped", 3>,
    I32EnumAttrCase<"nvme", 4>
  ]> {
  let cppNamespace = "::mlir::loom";
  let genSpecializedAttr = 0;
}

def Loom_StreamKind : I32EnumAttr<"StreamKind", "the kind of an in-order work queue", [
    I32EnumAttrCase<"compute", 0>,
    I32EnumAttrCase<"h2d", 1>,
    I32EnumAttrCase<"d2h", 2>,
    I32EnumAttrCase<"comm", 3>,
    I32EnumAttrCase<"cpu", 4>
  ]> {
  let cppNamespace = "::mlir::loom";
  let genSpecializedAttr = 0;
}

// Where the offload schedule updates a subgroup (loom.subgroup's `update`,
// kept as a string in the IR; passes read it through SubgroupOp::getPlace).
def Loom_UpdatePlace : I32EnumAttr<"UpdatePlace", "where an optimizer subgroup is updated", [
    I32EnumAttrCase<"gpu", 0>,
    I32EnumAttrCase<"stream", 1>,
    I32EnumAttrCase<"cpu", 2>
  ]> {
  let cppNamespace = "::mlir::loom";
  let genSpecializedAttr = 0;
}

def Loom_CodecKind : I32EnumAttr<"CodecKind", "a compression scheme", [
    I32EnumAttrCase<"sign_scale", 0>,
    I32EnumAttrCase<"int8", 1>,
    I32EnumAttrCase<"int4", 2>,
    I32EnumAttrCase<"fp8_e4m3", 3>,
    I32EnumAttrCase<"fp8_e5m2", 4>,
    I32EnumAttrCase<"fp4_e2m1", 5>
  ]> {
  let cppNamespace = "::mlir::loom";
  let genSpecializedAttr = 0;
}

def Loom_InitKind : I32EnumAttr<"InitKind", "a parameter initialiser", [
    I32EnumAttrCase<"zeros", 0>,
    I32EnumAttrCase<"ones", 1>,
    I32EnumAttrCase<"normal", 2>,
    I32EnumAttrCase<"uniform", 3>
  ]> {
  let cppNamespace = "::mlir::loom";
  let genSpecializedAttr = 0;
}

def Loom_StateRole : I32EnumAttr<"StateRole", "what a persistent state buffer holds", [
    I32EnumAttrCase<"adam_m", 0>,
    I32EnumAttrCase<"adam_v", 1>,
    I32EnumAttrCase<"master", 2>,
    I32EnumAttrCase<"momentum", 3>,
    I32EnumAttrCase<"error_feedback", 4>,
    I32EnumAttrCase<"step", 5>,
    I32EnumAttrCase<"other", 6>
  ]> {
  let cppNamespace = "::mlir::loom";
  let genSpecializedAttr = 1;
}

def Loom_ReduceKind : I32EnumAttr<"ReduceKind", "a reduction", [
    I32EnumAttrCase<"sum", 0>,
    I32EnumAttrCase<"mean", 1>,
    I32EnumAttrCase<"max", 2>,
    I32EnumAttrCase<"min", 3>
  ]> {
  let cppNamespace = "::mlir::loom";
  let genSpecializedAttr = 1;
}

def Loom_GraphNorm : I32EnumAttr<"GraphNorm", "how a graph model weights its neighbours", [
    I32EnumAttrCase<"mean", 0>,
    I32EnumAttrCase<"gcn", 1>
  ]> {
  let cppNamespace = "::mlir::loom";
  let genSpecializedAttr = 0;
}

def Loom_FeaturePlace : I32EnumAttr<"FeaturePlace", "where a graph model's feature rows are gathered", [
    I32EnumAttrCase<"device", 0>,
    I32EnumAttrCase<"zero_copy", 1>,
    I32EnumAttrCase<"host_gather", 2>
  ]> {
  let cppNamespace = "::mlir::loom";
  let genSpecializedAttr = 0;
}

def Loom_OffloadMode : I32EnumAttr<"OffloadMode", "how loom-offload-optimizer places the updates", [
    I32EnumAttrCase<"cpu", 0>,
    I32EnumAttrCase<"static_ratio", 1, "static">,
    I32EnumAttrCase<"subgroups", 2>
  ]> {
  let cppNamespace = "::mlir::loom";
  let genSpecializedAttr = 0;
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

class Loom_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Loom_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Loom_MemSpaceAttr : EnumAttr<Loom_Dialect, Loom_MemSpace, "mem"> {
  let summary = "A memory space: the placement of a buffer";
  let description = [{
    Used as the encoding of a ranked tensor to say where the buffer lives:

    * `device`: GPU memory (on the CPU target, a separate host arena that
      plays the GPU's part, so GPU schedules run and test on any machine);
    * `pinned`: page-locked host memory, the source and target of fast DMA;
    * `pageable`: ordinary host memory (slow DMA: ~10 GB/s against ~55);
    * `mapped`: pinned host memory seen from the GPU (zero-copy); only
      `loom.zero_copy` produces it, so every zero-copy read is explicit;
    * `nvme`: reserved for a future storage tier; nothing computes on it.

    ```mlir
    %w = loom.load @w : tensor<1024x1024xf32, #loom.mem<pinned>>
    ```
  }];
  let assemblyFormat = "`<` $value `>`";
}

def Loom_UpdatePlaceAttr : EnumAttr<Loom_Dialect, Loom_UpdatePlace, "update"> {
  let summary = "Where an optimizer subgroup is updated";
  let description = [{
    `gpu` (state resident on the device), `stream` (state in pinned host
    memory, copied in for a GPU update and back) or `cpu` (state in pinned
    host memory, updated by the CPU): `loom.subgroup`'s `update`, where it
    prints as the bare keyword (`update cpu`); on its own, `#loom<update cpu>`.
  }];
  let assemblyFormat = "$value";
}

def Loom_StreamAttr : Loom_Attr<"Stream", "stream"> {
  let summary = "An in-order work queue";
  let description = [{
    Names the queue an asynchronous op is ordered on: `compute` (GPU
    kernels), `h2d` and `d2h` (the two DMA directions), `comm` (collectives)
    and `cpu` (host worker threads), with an index when a schedule uses
    several queues of one kind. The order of the ops that name a stream is
    the order of work on it, which is what a printed timeline shows.

    ```mlir
    %d, %t = loom.copy %h on h2d
        : tensor<64xf32, #loom.mem<pinned>> -> tensor<64xf32, #loom.mem<device>>
    %u, %t2 = loom.all_reduce %g over #loom.group<@t, ["node"]> on comm[1]
        : tensor<64xf32, #loom.mem<device>> -> tensor<64xf32, #loom.mem<device>>
    ```
  }];
  let parameters = (ins
    EnumParameter<Loom_StreamKind>:$kind,
    DefaultValuedParameter<"int64_t", "0">:$index);
  let assemblyFormat = "`<` $kind (`,` $index^)? `>`";
  let genVerifyDecl = 1;
}

def Loom_CodecAttr : Loom_Attr<"Codec", "codec"> {
  let summary = "A compression scheme for a communicated payload";
  let description = [{
    * `sign_scale`: one bit per element (its sign, with sign(0) = +1) plus one
      fp32 scale ‖x‖₂/√n per block (1-bit Adam, §3); `block = 0` means one
      scale for the whole tensor;
    * `int8`, `int4`: symmetric block quantisation, one fp32 scale per
      `block` elements (ZeRO++ qwZ uses int8 blocks of ~4k, qgZ int4);
    * `fp8_e4m3`, `fp8_e5m2`, `fp4_e2m1`: low-precision floats with a
      per-block scale (Streaming DiLoCo exchanges 4-bit floats).

    Every codec applies to floating-point tensors only; the block scheme
    codecs need a positive block size.

    ```mlir
    #loom.codec<sign_scale>
    #loom.codec<int8, block = 4096>
    ```
  }];
  let parameters = (ins
    EnumParameter<Loom_CodecKind>:$kind,
    DefaultValuedParameter<"int64_t", "0">:$block);
  let assemblyFormat = "`<` $kind (`,` `block` `=` $block^)? `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Bits stored per element of the payload (scales not counted).
    unsigned getBitsPerElement() const;
  }];
}

def Loom_InitAttr : Loom_Attr<"Init", "init"> {
  let summary = "How a parameter or state buffer is initialised";
  let description = [{
    `zeros`, `ones`, `normal(mean, std)` or `uniform(low, high)`. Values
    imported from a model file are given instead as a `value` elements
    attribute on `loom.param`.

    ```mlir
    #loom.init<normal(0.0, 0.02)>
    #loom.init<zeros>
    ```
  }];
  let parameters = (ins
    EnumParameter<Loom_InitKind>:$kind,
    APFloatParameter<"first argument (mean or low)">:$a,
    APFloatParameter<"second argument (std or high)">:$b);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def Loom_GroupAttr : Loom_Attr<"Group", "group"> {
  let summary = "The ranks a collective spans: levels of a topology";
  let description = [{
    Names a `loom.topology` and the levels whose coordinate varies inside the
    group; ranks that agree on every other level's coordinate form one
    group. With `loom.topology @t ["gcd" = 2, "gpu" = 4, "node" = 16]`:

    * `#loom.group<@t, ["gcd"]>`: the two dies of one MI250X (size 2);
    * `#loom.group<@t, ["gcd", "gpu"]>`: every rank of one node (size 8);
    * `#loom.group<@t, ["node"]>`: one rank per node, same local slot (16);
    * all levels: the whole world.

    The verifier of each collective checks that the topology exists and
    defines every named level, and uses the group's size to check shapes.

    ```mlir
    loom.topology @t ["gpu" = 8, "node" = 4]
    %s, %tok = loom.reduce_scatter %g over #loom.group<@t, ["gpu"]> on comm
        : tensor<4096xf32> -> tensor<512xf32>
    ```
  }];
  let parameters = (ins
    "FlatSymbolRefAttr":$topology,
    "ArrayAttr":$levels);
  let assemblyFormat = "`<` $topology `,` $levels `>`";
}

// A double (an IEEE double APFloat: the storage must hash it), printed so
// that it reads back to the same bits (the cost model's predictions travel
// in the plan and tests compare them). Zero when not given.
class Loom_F64Parameter<string desc> : APFloatParameter<desc> {
  let parser = [{ [&]() -> ::mlir::FailureOr<::llvm::APFloat> {
    double v = 0;
    if ($_parser.parseFloat(v))
      return ::mlir::failure();
    return ::llvm::APFloat(v);
  }() }];
  let printer = [{ $_printer.printFloat($_self); }];
  let defaultValue = "::llvm::APFloat(0.0)";
}

def Loom_DataParallelAttr : Loom_Attr<"DataParallel", "data_parallel"> {
  let summary = "A data-parallel step: its ranks and ZeRO stage";
  let description = [{
    On `@train_step` (loom-data-parallel writes it): the step runs on
    `world` ranks that each hold a replica of the model, with the ZeRO
    stage `zero_stage` (0: gradients all-reduced; 1: optimizer state
    partitioned; 2: and gradients; 3: and parameters).

    ```mlir
    func.func @train_step(...) attributes {
        loom.data_parallel = #loom.data_parallel<world = 4, zero_stage = 3>}
    ```
  }];
  let parameters = (ins "int64_t":$world, "int64_t":$zero_stage);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Loom_OffloadPlanAttr : Loom_Attr<"OffloadPlan", "offload_plan"> {
  let summary = "The interleaved offload plan and what the cost model predicted for it";
  let description = [{
    On the module (loom-interleave-offload writes it): how many optimizer
    subgroups are updated on the GPU with their state resident (`gpu`),
    streamed in for a GPU update (`stream`) and updated on the CPU (`cpu`),
    with the hardware description the plan was made for and the step
    simulation's predictions for it (seconds and bytes; zero where not
    given). The placement itself is each `loom.subgroup`'s `update`.

    ```mlir
    module attributes {loom.offload_plan = #loom.offload_plan<gpu = 22,
        stream = 9, cpu = 24, hardware = "h100", predicted_step_s = 0.779>}
    ```
  }];
  let parameters = (ins
    "int64_t":$gpu, "int64_t":$stream, "int64_t":$cpu,
    StringRefParameter<"the hardware description's name", "\"\"">:$hardware,
    Loom_F64Parameter<"predicted step (s)">:$predicted_step_s,
    Loom_F64Parameter<"predicted update phase (s)">:$predicted_update_s,
    DefaultValuedParameter<"int64_t", "0", "predicted peak device memory (bytes)">:$predicted_peak_device_bytes,
    DefaultValuedParameter<"int64_t", "0", "device memory the plan may use (bytes)">:$usable_device_bytes);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Loom_DilocoAttr : Loom_Attr<"Diloco", "diloco"> {
  let summary = "When a Streaming DiLoCo outer-step function runs";
  let description = [{
    On the functions loom-diloco adds (`@diloco_outer_F`, and with overlap
    `@diloco_exchange_F` and `@diloco_apply_F`): run after inner step `t`
    when `t + 1 >= offset` and `t + 1 - offset` is a multiple of `every`.
    `async`: the function's collectives are left in flight when it returns
    (the exchange of an overlapped fragment, waited for by its apply).
    `elastic`: the exchange counts the replicas that remain (`--diloco
    elastic=true`), so the training binary lets the survivors go on when a
    replica is lost.

    ```mlir
    func.func @diloco_outer_0() attributes {
        loom.diloco = #loom.diloco<every = 4, offset = 2>}
    func.func @diloco_exchange_1() attributes {
        loom.diloco = #loom.diloco<every = 4, offset = 4, async = true>}
    ```
  }];
  let parameters = (ins "int64_t":$every, "int64_t":$offset,
                    DefaultValuedParameter<"bool", "false">:$async,
                    DefaultValuedParameter<"bool", "false">:$elastic);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Loom_GraphAttr : Loom_Attr<"Graph", "graph"> {
  let summary = "A graph model on sampled mini-batches: its sampler";
  let description = [{
    On the module of `--model sage` and `--model gcn`: `fanouts`, the
    neighbours sampled per hop (hop 1 first, each in [1, 4096]); `norm`,
    how the training binary's sampler weights them (`mean`: GraphSAGE;
    `gcn`: symmetric, with self loops); and, once loom-place-features has
    chosen, where the step's feature rows are gathered (`device`,
    `zero_copy` from mapped host memory, `host_gather` on the CPU).

    ```mlir
    module attributes {loom.graph = #loom.graph<fanouts = [15, 10], norm = mean,
                                                placement = zero_copy>}
    ```
  }];
  let parameters = (ins
    ArrayRefParameter<"int64_t">:$fanouts,
    EnumParameter<Loom_GraphNorm>:$norm,
    OptionalParameter<"std::optional<::mlir::loom::FeaturePlace>">:$placement);
  let assemblyFormat = [{
    `<` `fanouts` `=` `[` $fanouts `]` `,` `norm` `=` $norm
        (`,` `placement` `=` $placement^)? `>`
  }];
  let genVerifyDecl = 1;
}

def Loom_OptimizerOffloadAttr : Loom_Attr<"OptimizerOffload", "optimizer_offload"> {
  let summary = "The offload mode loom-offload-optimizer applied";
  let description = [{
    On `@train_step`: `cpu` (every update on the CPU), `static` with
    `gpu_fraction` (DeepSpeed's fixed split: that fraction of the
    parameters, in declaration order, updated on the GPU, the rest on the
    CPU) or `subgroups` (each `loom.subgroup`'s `update` says where, as
    loom-interleave-offload plans it).

    ```mlir
    #loom.optimizer_offload<cpu>
    #loom.optimizer_offload<static, gpu_fraction = 0.25>
    ```
  }];
  let parameters = (ins EnumParameter<Loom_OffloadMode>:$mode,
                    Loom_F64Parameter<"the GPU's share under static">:$gpu_fraction);
  let assemblyFormat = "`<` $mode (`,` `gpu_fraction` `=` $gpu_fraction^)? `>`";
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

class Loom_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Loom_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

def Loom_TokenType : Loom_Type<"Token", "token"> {
  let summary = "Completion of an asynchronous op";
  let description = [{
    Produced by every asynchronous op (copies, collectives). It orders work:
    another asynchronous op lists it in its dependencies (a stream waits for
    an event), or `loom.wait` blocks on it. The results of an asynchronous op
    may be read only after its token has been waited on or by an asynchronous
    op that depends on it; a token is waited at most once, and every token is
    consumed. These rules are checked by the verifier, so a schedule written
    by hand or by a pass cannot read a buffer whose transfer has not ended.

    ```mlir
    %d, %t0 = loom.copy %h on h2d : tensor<64xf32, #loom.mem<pinned>> -> tensor<64xf32, #loom.mem<device>>
    %e, %t1 = loom.copy %h2 after [%t0] on h2d : tensor<64xf32, #loom.mem<pinned>> -> tensor<64xf32, #loom.mem<device>>
    loom.wait %t1          // covers %t0 too: %t1's copy started after it
    %s = loom.add %d, %e : tensor<64xf32, #loom.mem<device>>, tensor<64xf32, #loom.mem<device>> -> tensor<64xf32, #loom.mem<device>>
    ```
  }];
}

def Loom_PackedType : Loom_Type<"Packed", "packed"> {
  let summary = "A compressed payload";
  let description = [{
    The output of `loom.compress`: a tensor of the given logical type stored
    with the given codec (packed bits or narrow floats plus scales). It can
    be moved and exchanged (copies, all-gather, all-to-all, broadcast) but
    not computed on or summed: decompress first.

    ```mlir
    !loom.packed<tensor<4096xf32, #loom.mem<device>>, #loom.codec<sign_scale>>
    ```
  }];
  let parameters = (ins "RankedTensorType":$logical, "CodecAttr":$codec);
  let assemblyFormat = "`<` $logical `,` qualified($codec) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Bytes on the wire: packed elements plus one fp32 scale per block.
    int64_t getStorageBytes() const;
  }];
}

// Static shapes only: every size, placement and schedule is decided at
// compile time, and verifiers and passes compute with the dimensions (a `?`
// in a model file must be an error, not a -1 in that arithmetic).
def Loom_AnyTensor : StaticShapeTensorOf<[AnyType]>;
def Loom_FloatTensor : StaticShapeTensorOf<[AnyFloat]>;
def Loom_IntTensor : StaticShapeTensorOf<[AnySignlessInteger]>;
def Loom_Payload : AnyTypeOf<[Loom_AnyTensor, Loom_PackedType]>;

#endif // LOOM_BASE_TD
