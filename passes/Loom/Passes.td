//===- Passes.td - loom -> loom transforms: the training step built and distributed on loom IR ===//
#ifndef LOOM_PASSES_LOOM_TD
#define LOOM_PASSES_LOOM_TD

include "mlir/Pass/PassBase.td"

def OptimizerSubgroups : Pass<"loom-optimizer-subgroups", "ModuleOp"> {
  let summary = "Group parameters in order into optimizer subgroups";
  let description = [{
    Walks the `loom.param` declarations in module order and closes a
    subgroup as soon as its element count reaches `sub-group-size`
    (DeepSpeed's `sub_group_size` rule; Deep Optimizer States §3.2 uses these
    subgroups as the unit that is updated on the CPU or streamed to the GPU).
    A parameter larger than the limit forms a subgroup of its own; the last
    subgroup may be smaller. Existing subgroups are replaced. After
    `loom-data-parallel` at ZeRO stages 1-3 the units updated are the shards
    (`@zero.bucketK.params`): the parameters a `loom.shard_of` lists are
    skipped.

    Before (`--loom-optimizer-subgroups=sub-group-size=1000`):

    ```mlir
    loom.param @a : tensor<600xf32>
    loom.param @b : tensor<600xf32>
    loom.param @c : tensor<100xf32>
    ```

    After:

    ```mlir
    loom.param @a : tensor<600xf32>
    loom.param @b : tensor<600xf32>
    loom.param @c : tensor<100xf32>
    loom.subgroup @sg0 [@a, @b] numel 1200
    loom.subgroup @sg1 [@c] numel 100
    ```
  }];
  let options = [
    Option<"subGroupSize", "sub-group-size", "int64_t", /*default=*/"1000000000",
           "Close a subgroup once it holds at least this many elements "
           "(DeepSpeed's default is 1e9)">,
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

def PrintSchedule : Pass<"loom-print-schedule", "ModuleOp"> {
  let summary = "Print the order of work on every stream of each function";
  let description = [{
    An analysis: it changes nothing and prints, for each function, the work
    in program order with the lane it runs on: a named stream for
    asynchronous ops (`h2d`, `d2h`, `comm[1]`, ...), `gpu` or `cpu` for
    compute ops (from where their operands live), `host` for waits and
    state accesses. Each lane's ops are numbered in the order they run, and
    the bytes each copy or collective moves are summed per stream. This is
    the schedule a pass decided, in a form a person can read and a test can
    check; the timeline with predicted times comes with the cost model.

    ```mlir
    %d, %t = loom.copy %h on h2d : tensor<1024xf32, #loom.mem<pinned>> -> tensor<1024xf32, #loom.mem<device>>
    loom.wait %t
    %e = loom.exp %d : tensor<1024xf32, #loom.mem<device>>
    ```

    prints

    ```
    schedule of @f
      h2d#0         loom.copy                 tensor<1024xf32> pinned -> device, 4096 B
      host          loom.wait                 h2d#0
      gpu#0         loom.exp                  tensor<1024xf32>
    bytes moved: h2d 4096
    ```
  }];
  let options = [
    Option<"outputFile", "output", "std::string", /*default=*/"\"-\"",
           "Where to print: a file name, or '-' for standard error">,
  ];
}

def Autodiff : Pass<"loom-autodiff", "ModuleOp"> {
  let summary = "Reverse-mode differentiation of a loss function";
  let description = [{
    Differentiates `function` (by default `@forward`), which must return one
    scalar loss, with respect to every parameter it loads, and adds a
    function `@<function>_backward` with the same arguments that returns the
    loss followed by one gradient per parameter, in module order. Its
    `loom.grad_params` attribute lists the parameter of each gradient. A
    parameter loaded several times (tied embeddings) gets one gradient, the
    sum of its uses' contributions. Integer operands (token ids, labels) get
    no gradient. An op on the path from a parameter to the loss without a
    gradient rule is an error naming it.

    Communication has the rules of its transpose: an all-gather's gradient
    is a reduce-scatter and back, `loom.tp_enter`'s an all-reduce, and a
    `loom.send_recv` between pipeline stages (shift k) sends the gradient
    back with shift -k (`test/Passes/loom-autodiff-pipeline.mlir`).

    **Activation checkpointing** (`recompute`, per unit: one transformer
    block, found from the parameters' names by `planUnits`,
    passes/Loom/Units.cpp; a model without numbered blocks is one unit).
    With `full`, the backward of unit k starts by running unit k's forward
    again from the values that enter it (the previous unit's output, the
    tokens): only those values live from the forward to the backward, and
    at most one unit's activations at a time (Chen et al., "Training Deep
    Nets with Sublinear Memory Cost", 2016; Megatron-LM's
    `--recompute-granularity full --recompute-method uniform
    --recompute-num-layers 1`). `selective` recomputes only the cheap ops
    of each unit (norms, elementwise, reshapes) and keeps the outputs of
    `loom.matmul` and `loom.attention`, a linear layer's bias add counting
    as part of its product (so the GEMM's epilogue adds the bias in both
    steps and the bits stay those of the step without recompute)
    (Korthikanti et al., "Reducing
    Activation Recomputation in Large Transformer Models", 2022, keep the
    products and recompute around them). `recompute-units=N` applies the
    mode to the first N units only (the cost model's choice under
    `loomc --recompute=auto`): the first units' activations live longest.
    Parameter loads, constants and their casts are made again in each
    recomputed unit, so ZeRO-3 gathers a unit's parameters anew for its
    backward. The recomputed copies come after the loss, in reverse unit
    order, each just before its unit's backward.

    The backward graph uses the dialect's gradient ops (`loom.gelu_grad`,
    `loom.layer_norm_grad`, `loom.attention_grad`, `loom.cross_entropy_grad`,
    `loom.embedding_grad`, ...); broadcasting is undone with `loom.reduce`,
    slices are padded back with zeros and `loom.concat`.

    Before:

    ```mlir
    loom.param @w : tensor<4x3xf32>
    func.func @forward(%x: tensor<2x3xf32>, %y: tensor<2xi64>) -> tensor<f32> {
      %w = loom.load @w : tensor<4x3xf32>
      %h = loom.matmul %x, %w transpose_rhs : tensor<2x3xf32>, tensor<4x3xf32> -> tensor<2x4xf32>
      %l = loom.cross_entropy %h, %y : tensor<2x4xf32>, tensor<2xi64> -> tensor<f32>
      return %l : tensor<f32>
    }
    ```

    After (added beside `@forward`):

    ```mlir
    func.func @forward_backward(%x: tensor<2x3xf32>, %y: tensor<2xi64>)
        -> (tensor<f32>, tensor<4x3xf32>) attributes {loom.grad_params = [@w]} {
      %w = loom.load @w : tensor<4x3xf32>
      %h = loom.matmul %x, %w transpose_rhs : ...
      %l = loom.cross_entropy %h, %y : ...
      %one = arith.constant dense<1.0> : tensor<f32>
      %dh = loom.cross_entropy_grad %h, %y, %one : ...
      %dw = loom.matmul %dh, %x transpose_lhs : tensor<2x4xf32>, tensor<2x3xf32> -> tensor<4x3xf32>
      return %l, %dw : tensor<f32>, tensor<4x3xf32>
    }
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", /*default=*/"\"forward\"",
           "The function to differentiate (returns one scalar loss)">,
    Option<"recompute", "recompute", "mlir::loom::RecomputeKind",
           /*default=*/"mlir::loom::RecomputeKind::none",
           "Activation checkpointing per unit (one transformer block)", [{::llvm::cl::values(
             clEnumValN(mlir::loom::RecomputeKind::none, "none", "keep every activation"),
             clEnumValN(mlir::loom::RecomputeKind::full, "full",
                        "keep each unit's inputs, run the unit again in its backward"),
             clEnumValN(mlir::loom::RecomputeKind::selective, "selective",
                        "as full, but keep the outputs of products and attention"))}]>,
    Option<"recomputeUnits", "recompute-units", "int64_t", /*default=*/"-1",
           "How many units, from the first, recompute (-1: every unit); the "
           "others keep their activations">,
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect"];
}

def AttachOptimizer : Pass<"loom-attach-optimizer", "ModuleOp"> {
  let summary = "Add optimizer state and a training step that updates it";
  let description = [{
    Takes the function made by `loom-autodiff` (`function`, by default
    `@forward_backward`), which returns the loss and one gradient per
    parameter listed in its `loom.grad_params`, and adds:

    * for AdamW/Adam, two `loom.state`s per parameter (`<param>.exp_avg`,
      `<param>.exp_avg_sq`, role `adam_m` / `adam_v`, zeros) and one step
      counter `@optimizer.step`; for SGD with momentum, one
      `<param>.momentum_buffer` (role `momentum`);
    * `@train_step`, with the same arguments, which advances the step
      counter (first: code generation reads it back to the host, which at
      the start of the step waits for nothing), calls the function, updates
      every parameter and its state with `loom.adam` / `loom.sgd`
      (hyper-parameters as attributes) and stores them, and returns the
      loss.

    Before: `@forward_backward(%x, %y) -> (loss, dW) {loom.grad_params = [@w]}`.
    After (`optimizer=adamw lr=0.001`):

    ```mlir
    loom.state @w.exp_avg : tensor<4x3xf32> role adam_m of @w init #loom.init<zeros>
    loom.state @w.exp_avg_sq : tensor<4x3xf32> role adam_v of @w init #loom.init<zeros>
    loom.state @optimizer.step : tensor<i64> role step init #loom.init<zeros>
    func.func @train_step(%x: tensor<2x3xf32>, %y: tensor<2xi64>) -> tensor<f32> {
      %t0 = loom.load @optimizer.step : tensor<i64>
      %one = arith.constant dense<1> : tensor<i64>
      %t = arith.addi %t0, %one : tensor<i64>
      loom.store %t to @optimizer.step : tensor<i64>
      %r:2 = call @forward_backward(%x, %y) : (...) -> (tensor<f32>, tensor<4x3xf32>)
      %w = loom.load @w : tensor<4x3xf32>
      %m = loom.load @w.exp_avg : tensor<4x3xf32>
      %v = loom.load @w.exp_avg_sq : tensor<4x3xf32>
      %w2, %m2, %v2 = loom.adam %w, %r#1, %m, %v step %t {lr = 1.0e-03 : f64, ..., decoupled}
      loom.store %w2 to @w : tensor<4x3xf32>
      ...
      return %r#0 : tensor<f32>
    }
    ```
  }];
  let options = [
    Option<"function", "function", "std::string", /*default=*/"\"forward_backward\"",
           "The function returning the loss and the gradients">,
    Option<"optimizer", "optimizer", "mlir::loom::OptimizerKind",
           /*default=*/"mlir::loom::OptimizerKind::adamw", "The update", [{::llvm::cl::values(
             clEnumValN(mlir::loom::OptimizerKind::adamw, "adamw", "AdamW (decoupled weight decay)"),
             clEnumValN(mlir::loom::OptimizerKind::adam, "adam", "Adam (L2 weight decay)"),
             clEnumValN(mlir::loom::OptimizerKind::sgd, "sgd", "SGD with momentum"))}]>,
    Option<"lr", "lr", "double", /*default=*/"1.0e-3", "Learning rate">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "Adam beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "Adam beta2">,
    Option<"eps", "eps", "double", /*default=*/"1.0e-8", "Adam epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.01",
           "Weight decay (decoupled for adamw, L2 for adam)">,
    Option<"momentum", "momentum", "double", /*default=*/"0.9", "SGD momentum">,
    Option<"nesterov", "nesterov", "bool", /*default=*/"false",
           "SGD with Nesterov momentum">,
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect"];
}

def MixedPrecision : Pass<"loom-mixed-precision", "ModuleOp"> {
  let summary = "bf16 activations and GEMMs with fp32 master weights";
  let description = [{
    Runs on `@forward` before `loom-autodiff`. Every fp32 tensor the forward
    computes becomes bf16; each parameter is loaded in fp32 and cast once,
    so the VJP of that cast gives the optimizer an fp32 gradient and the
    Adam state and master weights stay fp32 (Micikevicius et al., "Mixed
    Precision Training", §3.1; bf16 has fp32's exponent range, so no loss
    scaling). Kernels compute in fp32 whatever the storage type, so norms,
    softmax and the loss keep fp32 statistics. Embedding tables are
    gathered in fp32 and their rows cast down (their gradient is an fp32
    scatter-add); the loss stays fp32.

    Before:

    ```mlir
    func.func @forward(%x: tensor<4x8xf32>, %y: tensor<4xi64>) -> tensor<f32> {
      %w = loom.load @w : tensor<3x8xf32>
      %h = loom.matmul %x, %w transpose_rhs : tensor<4x8xf32>, tensor<3x8xf32> -> tensor<4x3xf32>
      %l = loom.cross_entropy %h, %y : tensor<4x3xf32>, tensor<4xi64> -> tensor<f32>
      return %l : tensor<f32>
    }
    ```

    After:

    ```mlir
    func.func @forward(%x: tensor<4x8xf32>, %y: tensor<4xi64>) -> tensor<f32> {
      %xb = loom.cast %x : tensor<4x8xf32> to tensor<4x8xbf16>
      %w = loom.load @w : tensor<3x8xf32>
      %wb = loom.cast %w : tensor<3x8xf32> to tensor<3x8xbf16>
      %h = loom.matmul %xb, %wb transpose_rhs : tensor<4x8xbf16>, tensor<3x8xbf16> -> tensor<4x3xbf16>
      %l = loom.cross_entropy %h, %y : tensor<4x3xbf16>, tensor<4xi64> -> tensor<f32>
      return %l : tensor<f32>
    }
    ```
  }];
  let options = [
    Option<"computeType", "compute-type", "std::string", /*default=*/"\"bf16\"",
           "Storage type of activations and GEMM inputs (bf16)">,
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

def OnebitAdam : Pass<"loom-onebit-adam", "ModuleOp"> {
  let summary = "1-bit Adam: a second step function that averages momenta compressed";
  let description = [{
    Runs after `loom-attach-optimizer` (AdamW) and before
    `loom-data-parallel`. 1-bit Adam (Tang et al. 2021, Algorithm 1; the
    numerics of DeepSpeed's `OnebitAdam` and its `compressed_allreduce`)
    runs plain Adam with full-precision gradient averaging for the first
    `freeze-step` steps (`@train_step`, made data-parallel by
    `loom-data-parallel` as usual), then freezes the variance: each rank
    updates its own momentum from its own gradient, and the momenta are
    averaged by a two-phase compressed all-reduce. This pass writes that
    second step as `@train_step_frozen` (`loom.freeze_step` says from which
    run step the binary calls it), calling `@forward_backward_local`, a copy
    of `@forward_backward` that data parallelism leaves alone. Per
    parameter of n elements, padded to N, a multiple of W·lcm(W, 8) for W
    ranks, with chunks of C = N/W:

    * worker: `m = β₁m + (1-β₁)g`, flattened and padded, compressed with
      the worker error (`@P.onebit.worker_error`, N elements): one scale
      ‖m + e‖/√N, signs packed 8 a byte;
    * `loom.all_to_all` of the packed signs (chunk j to rank j; each chunk
      keeps its sender's scale), decompressed and averaged over the ranks:
      this rank's chunk of the average;
    * the server's chunk compressed with the server error
      (`@P.onebit.server_error`, C elements), `loom.all_gather`ed and
      decompressed: the averaged momentum, its padding sliced off;
    * `loom.adam` with `freeze_step`: the momentum becomes the average, the
      variance stays, and the weights take the step.

    The error buffers are `loom.state` of role `error_feedback`: checkpoints
    save them and a resume restores them. With ZeRO stages 1-2,
    `loom-data-parallel` partitions the frozen step's updates (its
    `frozen-variance` option). Each rank sends 2(N/8 + 4) bytes
    per parameter in the frozen step where an all-reduce of the gradient
    sends 2·4n(W-1)/W (docs/compression.md).

    After (one parameter @w of 24 elements, two ranks: N = 32, C = 16):

    ```mlir
    func.func @train_step_frozen(%x: tensor<2x8xi64>, %y: tensor<2x8xi64>) -> tensor<f32>
        attributes {loom.freeze_step = 10 : i64} {
      ...
      %0:2 = call @forward_backward_local(%x, %y) : ...
      %ml = loom.add %a, %b : ...            // β₁m + (1-β₁)g
      %p, %we2 = loom.compress %flat feedback(%we : tensor<32xf32>)
          : tensor<32xf32> -> !loom.packed<tensor<32xf32>, #loom.codec<sign_scale>>, tensor<32xf32>
      %r, %t = loom.all_to_all %p over #loom.group<@world, ["rank"]> on comm
          : !loom.packed<tensor<32xf32>, #loom.codec<sign_scale>>
          -> !loom.packed<tensor<32xf32>, #loom.codec<sign_scale, block = 16>>
      ...
      %w2, %m2, %v2 = loom.adam %w, %mavg, %m, %v step %s {decoupled, freeze_step = 10 : i64, ...}
    ```
  }];
  let options = [
    Option<"freezeStep", "freeze-step", "int64_t", /*default=*/"0",
           "Steps of plain Adam before the variance is frozen (>= 1)">,
    Option<"varianceRefresh", "variance-refresh", "int64_t", /*default=*/"0",
           "K > 0: refresh the frozen variance K, 2K, 4K, ... steps after the freeze "
           "(the binary runs the warm-up's @train_step there; 0/1 Adam, Lu et al. 2022); "
           "0: frozen for good">,
    Option<"bucketSize", "bucket-size", "int64_t", /*default=*/"0",
           "0: compress each parameter alone (one scale each, DeepSpeed OnebitAdam); N: "
           "consecutive parameters up to N elements share one compressed all-reduce and "
           "one scale">,
    Option<"topology", "topology", "std::string", /*default=*/"",
           "The loom.topology to span (default: the module's only one)">,
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

def TensorParallel : Pass<"loom-tensor-parallel", "ModuleOp"> {
  let summary = "Split each transformer block's products over a tensor-parallel group";
  let description = [{
    Megatron-LM's tensor parallelism (Shoeybi et al. 2019) on the forward
    graph, before `loom-autodiff`. Each residual branch `x + P(...)` is
    found from its last linear layer P (row-parallel: rank r keeps columns
    r of N of the weight [out, in]); the linear layers that read the
    branch's input from the residual stream are column-parallel (rank r
    keeps rows r of N of the weight and its bias, in groups when the
    output is read in slices: GPT's fused QKV is three). The split
    dimension is propagated through the ops between (heads through
    reshapes and transposes, attention, elementwise ops, RoPE's slices);
    anything else is refused with one line naming the op. P's partial sums
    are summed by `loom.all_reduce` (gradient: itself), the branch's input
    enters through `loom.tp_enter` (gradient: an all-reduce). The group is
    the topology's innermost level, which must have `size` ranks. Sliced
    parameters keep their names and get `loom.tp_slice = [dim, groups]`;
    the module gets `loom.tensor_parallel = size`.

    With `sequence-parallel` (Korthikanti et al. 2023) the ops between the
    branches (embeddings, norms, residual adds, the LM head, the loss) run
    on each rank's block of the step's P tokens, typed `[P/N, ...]`: the
    token ids and targets are taken by `loom.shard`, f becomes
    `loom.all_gather` (gradient: reduce-scatter), g `loom.reduce_scatter`
    (gradient: all-gather), whole values read on the shards (norm weights,
    the LM head) enter through `loom.tp_enter`, and the loss is each
    rank's mean over N, summed by an all-reduce. The module gets
    `loom.sequence_parallel`. The same MLP's exit, after:

    ```mlir
    %y = loom.matmul %g, %proj transpose_rhs : tensor<2x8x128xf32>, tensor<64x128xf32> -> tensor<2x8x64xf32>
    %y2 = loom.reshape %y : tensor<2x8x64xf32> to tensor<16x64xf32>
    %s, %t = loom.reduce_scatter %y2 over #loom.group<@world, ["gpu"]> on comm : tensor<16x64xf32> -> tensor<8x64xf32>
    loom.wait %t
    %x2 = loom.add %x, %s : tensor<8x64xf32>, tensor<8x64xf32> -> tensor<8x64xf32>
    ```

    Before (`size=2`, one GPT MLP):

    ```mlir
    %h = loom.layer_norm %x, %w, %b ...
    %u = loom.matmul %h, %fc transpose_rhs : tensor<2x8x64xf32>, tensor<256x64xf32> -> tensor<2x8x256xf32>
    %g = loom.gelu %u ...
    %y = loom.matmul %g, %proj transpose_rhs : tensor<2x8x256xf32>, tensor<64x256xf32> -> tensor<2x8x64xf32>
    %x2 = loom.add %x, %y
    ```

    After:

    ```mlir
    %he = loom.tp_enter over #loom.group<@world, ["gpu"]> %h : tensor<2x8x64xf32>
    %u = loom.matmul %he, %fc transpose_rhs : tensor<2x8x64xf32>, tensor<128x64xf32> -> tensor<2x8x128xf32>
    %g = loom.gelu %u ...
    %y = loom.matmul %g, %proj transpose_rhs : tensor<2x8x128xf32>, tensor<64x128xf32> -> tensor<2x8x64xf32>
    %s, %t = loom.all_reduce %y over #loom.group<@world, ["gpu"]> on comm ...
    loom.wait %t
    %x2 = loom.add %x, %s
    ```
  }];
  let options = [
    Option<"size", "size", "int64_t", /*default=*/"1",
           "Ranks of the tensor-parallel group (1: nothing to do)">,
    Option<"topology", "topology", "std::string", /*default=*/"",
           "The loom.topology to use (empty: the module's only one)">,
    Option<"vocabParallel", "vocab-parallel", "bool", /*default=*/"true",
           "Split the embedding tables and the LM head by rows of the vocabulary, "
           "with the cross-entropy computed from each rank's logits (Megatron's "
           "vocabulary-parallel embedding and loss); a table read otherwise stays whole">,
    Option<"sequenceParallel", "sequence-parallel", "bool", /*default=*/"false",
           "Also split the tokens between the branches over the group (Megatron's "
           "sequence parallelism): f becomes an all-gather, g a reduce-scatter">
  ];
}

def ClipGradients : Pass<"loom-clip-gradients", "ModuleOp"> {
  let summary = "Clip the gradients Adam reads by their global 2-norm";
  let description = [{
    torch.nn.utils.clip_grad_norm_ in IR: the 2-norm of every gradient the
    step's `loom.adam` ops read, together, and each gradient scaled by
    min(1, max-norm / (norm + 1e-6)) before its update. Runs after
    `loom-attach-optimizer` (and `loom-data-parallel`, whose averaged
    gradients, or at ZeRO 1-3 this rank's shards of them, it clips: the
    shards' squares are summed over the ranks by one scalar all-reduce) and
    before `loom-offload-optimizer`. On a pipeline stage's program
    (`loom.pipeline`) the squares are summed over the stages too, a tied
    parameter's copy (`loom.tied_peer` < 0) left out; on an
    expert-parallel rank's (`loom.expert_parallel`) the experts' squares
    are summed over the experts' level, the shared parameters' as above.
    The gradients' computations move ahead
    of the first update; the norm is stored in `@optimizer.grad_norm`
    (the binary's log reports it). Refused with 1-bit Adam, Streaming
    DiLoCo and SGD.

    Before:

    ```mlir
    %g:2 = call @forward_backward(%x, %y) : ...
    %p, %m, %v = loom.adam %w, %g#1, %m0, %v0 step %s {...} : ...
    ```

    After (`max-norm=1.0`):

    ```mlir
    %g:2 = call @forward_backward(%x, %y) : ...
    %sq = loom.mul %g#1, %g#1 : ...
    %t = loom.reduce sum %sq [0, 1] : tensor<3x2xf32> to tensor<f32>
    %n = loom.sqrt %t : tensor<f32>
    %c = loom.min (loom.div 1.0, (loom.add %n, 1e-6)), 1.0
    loom.store %n to @optimizer.grad_norm : tensor<f32>
    %gc = loom.mul %g#1, %c : tensor<3x2xf32>, tensor<f32> -> tensor<3x2xf32>
    %p, %m, %v = loom.adam %w, %gc, %m0, %v0 step %s {...} : ...
    ```
  }];
  let options = [
    Option<"maxNorm", "max-norm", "double", /*default=*/"1.0",
           "The largest global 2-norm the gradients keep">
  ];
}

def Diloco : Pass<"loom-diloco", "ModuleOp"> {
  let summary = "Streaming DiLoCo: replicas that train alone and average fragments rarely";
  let description = [{
    Runs after `loom-attach-optimizer`, in place of `loom-data-parallel`,
    on a module whose `loom.topology`'s outermost level is `replica`
    (Douillard et al. 2025, Streaming DiLoCo, Algorithm 1). Each replica
    runs `@train_step` (its inner AdamW) on its own slice of the global
    batch; the reported loss is the mean over replicas. The trained
    parameters are split into `fragments` fragments, strided over the
    model's blocks (a name with `.h.i.`, `.layers.i.` or `.blocks.i.` goes
    to fragment i mod P; parameters before the first block, the
    embeddings, to fragment 0; after the last, the final norm and head, to
    fragment P − 1). For each fragment f the pass writes
    `@diloco_outer_f` (`loom.diloco = #loom.diloco<every = H, offset = ⌊H/P·(f+1)⌋>`),
    which the training binary runs after the inner step t with t + 1 ≥
    offset and t + 1 − offset a multiple of H:

    * Δ = global − local for each parameter, flattened, cast to the
      `quant` type, all-reduced (mean) over the replica level, cast back;
    * `loom.sgd` on the global copy with Δ̄ (outer lr and momentum,
      Nesterov when the momentum is above 0);
    * local = lerp(global, local, α).

    `@diloco_start` copies the initial parameters into the global copies
    (`@P.diloco.global`, role `master`; the outer momentum is
    `@P.diloco.momentum`); the binary runs it before a fresh run's first
    step. `quant` fp8 and fp4 exchange block-scaled codes by all-to-all
    (each replica averages its chunk in fp32), requantise and all-gather.
    With `overlap` τ > 0, `@diloco_outer_f` keeps the pseudo-gradients in
    `@diloco.delta_f`, `@diloco_exchange_f` (`async` in its `loom.diloco`:
    the binary may run it beside the next inner steps) averages them into
    `@diloco.pending_f`, and `@diloco_apply_f` (offset + τ) runs the outer
    step and the merge. Not
    built yet: data parallelism inside a replica.

    After (one parameter @w, 2 replicas, inner-steps=4):

    ```mlir
    loom.state @w.diloco.global : tensor<3xf32> role master of @w init #loom.init<zeros>
    func.func @diloco_outer_0() attributes {loom.diloco = #loom.diloco<every = 4, offset = 4>} {
      %w = loom.load @w : tensor<3xf32>
      %g = loom.load @w.diloco.global : tensor<3xf32>
      %d = loom.sub %g, %w : tensor<3xf32>, tensor<3xf32> -> tensor<3xf32>
      %a, %t = loom.all_reduce %d over #loom.group<@world, ["replica"]> reduce mean on comm : ...
      loom.wait %t
      %g2, %b2 = loom.sgd %g, %a, %b {lr = 0.7, momentum = 0.9, nesterov} : tensor<3xf32>
      %w2 = loom.lerp %g2, %w weight 5.000000e-01 : tensor<3xf32>
      loom.store %w2 to @w : tensor<3xf32>
      ...
    ```
  }];
  let options = [
    Option<"innerSteps", "inner-steps", "int64_t", /*default=*/"100",
           "H: inner steps between two synchronisations of a fragment">,
    Option<"fragments", "fragments", "int64_t", /*default=*/"1",
           "P: fragments synchronised in turn (1: DiLoCo)">,
    Option<"overlap", "overlap", "int64_t", /*default=*/"0",
           "tau: inner steps between a fragment's exchange and its outer step and merge "
           "(tau * fragments < inner-steps)">,
    Option<"alpha", "alpha", "double", /*default=*/"0.5",
           "The merge: local = lerp(global, local, alpha)">,
    Option<"outerLr", "outer-lr", "double", /*default=*/"0.7", "Outer SGD learning rate">,
    Option<"outerMomentum", "outer-momentum", "double", /*default=*/"0.9",
           "Outer Nesterov momentum (0: plain SGD)">,
    Option<"quant", "quant", "mlir::loom::DilocoQuant", /*default=*/"mlir::loom::DilocoQuant::fp4",
           "The outer exchange's type", [{::llvm::cl::values(
             clEnumValN(mlir::loom::DilocoQuant::fp32, "fp32", "an fp32 all-reduce"),
             clEnumValN(mlir::loom::DilocoQuant::bf16, "bf16", "a bf16 all-reduce"),
             clEnumValN(mlir::loom::DilocoQuant::fp8, "fp8",
                        "E4M3 with a scale a block (all-to-all, fp32 mean, all-gather)"),
             clEnumValN(mlir::loom::DilocoQuant::fp4, "fp4",
                        "E2M1 with a scale a block (all-to-all, fp32 mean, all-gather)"))}]>,
    Option<"quantBlock", "quant-block", "int64_t", /*default=*/"128",
           "Elements per scale of fp8 and fp4">,
    Option<"elastic", "elastic", "bool", /*default=*/"false",
           "Replicas may be lost mid-run (the runtime's elastic TCP transport): fp8 and fp4 "
           "all-gather every replica's whole fragment with a block of ones, whose sum "
           "counts the replicas that remain, in place of the all-to-all (which would lose "
           "a lost replica's chunk)">,
    Option<"topology", "topology", "std::string", /*default=*/"",
           "The loom.topology to span (default: the module's only one)">,
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

def DataParallel : Pass<"loom-data-parallel", "ModuleOp"> {
  let summary = "Data parallelism with ZeRO stages 0-3 over a topology";
  let description = [{
    Runs on `@train_step` after `loom-attach-optimizer`. Every rank runs
    `@forward_backward` on its own slice of the global batch (the model's
    shapes are the per-rank batch: `loomc` divides a generator's batch by
    the world size); the loss is averaged over ranks. With `exclude`, the
    collectives span every level but that one (data parallelism inside
    each of its groups, as loom-diloco's replicas run it); the lowering
    gives such a group a communicator of its own (`loomrt.comm levels`). Gradients are
    flattened into buckets of at most `bucket-size` elements (zero-padded
    to a multiple of the world size), then, after ZeRO (Rajbhandari et al.
    2020, §5):

    * stage 0: each bucket is all-reduced (mean); the optimizer is unchanged;
    * stage 1: all-reduce, then each rank runs Adam on its `loom.shard` of
      the bucket with Adam state of that size only, and all-gathers the
      updated shards back into the parameters;
    * stage 2: reduce-scatter instead of the all-reduce (at stages 1 and 2
      the moment shards carry their bucket's layout, `loom.layout_of` with
      `loom.padded`: what a checkpoint resumed on another world reads);
    * stage 3: as 2, and the parameters persist as shards
      (`@zero.bucketK.params`, `loom.shard_of` lists its members, which stay
      declared for their initialisers): `@forward_backward` all-gathers a
      bucket before its first use in the forward and again before its
      first use in the backward. Buckets follow the units (one transformer
      block each, `planUnits`): a unit's parameters are one bucket, gathered
      in one collective and released after the unit's last use, as FSDP's
      `fully_shard` per block does (a model without numbered blocks keeps
      buckets of `bucket-size`). With `compute-gathers`, a bucket whose
      every use is a cast to bf16 is gathered in bf16 (the shard cast
      first: half the bytes of the fp32 master). With `prefetch=N`, the
      gather is issued N gathers before its use (its wait stays at the use),
      so it runs on the `comm` stream while the previous units compute.

    With `master-shards` (stages 1 and 2; what `loom-offload-optimizer` moves
    to the host), each rank's fp32 master weights of a bucket are a
    parameter of their own, `@zero.bucketK.params` with `loom.shard_of` its
    members, instead of a slice of the whole parameters: the update reads and
    writes it, and the all-gather refreshes the whole parameters from it.
    The arithmetic is the same element for element (the shard starts as its
    block of the members).

    Each bucket's reduction is issued inside `@forward_backward` right after
    the last of its gradients is computed (overlapping the rest of the
    backward on the `comm` stream); at most `reductions-in-flight` run at
    once (the compute stream waits for the oldest before the next is
    issued, which frees its full gradient during the backward), the rest
    are waited before the return; the reduced
    buckets replace the full gradients among its results, so each full
    gradient dies at its bucket's flatten. The group spans every level of the
    module's `loom.topology` (or the one named by `topology`).

    On an expert-parallel rank's program (`loom.expert_parallel`, from
    `loom-expert-parallel`), the parameters marked `loom.expert` are this
    rank's alone in its group: their gradients are scaled by 1/N right
    after they are computed and all-reduced (mean) over the other levels
    only, at every stage (experts are never partitioned; at stage 3 no
    bucket spans an expert's declaration, so the driver draws the one-rank
    values).

    With 1-bit Adam (`loom-onebit-adam`'s `@train_step_frozen`, stages 1-2):
    `frozen-variance=sharded` rewrites the frozen step's updates as the
    shards' (each rank steps its shard with the averaged momentum and its
    shard of the frozen variance, then all-gathers fp32 parameters);
    `replicated` leaves that step as stage 0's. Either way the full momentum
    stays a state of every rank, and `@enter_frozen`, which the driver runs
    once before the first frozen step, all-gathers the warm-up's momentum
    shards into it (and, `replicated`, the variance's). Stage 3 is refused.

    Before (`--loom-data-parallel=zero-stage=0` with
    `loom.topology @world ["rank" = 2]`):

    ```mlir
    %0:3 = call @forward_backward(%x, %y) : ...
    ...
    %new, %m2, %v2 = loom.adam %w, %0#1, %m, %v step %s {...}
    return %0#0 : tensor<f32>
    ```

    After (in `@forward_backward`, right after the last gradient):

    ```mlir
    %flat = loom.concat %g1, %g2 dim 0 : ...
    %avg, %t2 = loom.all_reduce %flat over #loom.group<@world, ["rank"]> reduce mean on comm : ...
    ...
    loom.wait %t2
    return %loss, %avg : tensor<f32>, tensor<27xf32>
    ```

    and in `@train_step`:

    ```mlir
    %0:2 = call @forward_backward(%x, %y) : ...
    %l, %t = loom.all_reduce %0#0 over #loom.group<@world, ["rank"]> reduce mean on comm : tensor<f32> -> tensor<f32>
    loom.wait %t
    %g1a = loom.slice %0#1 [0] [24] [1] : ...
    %new, %m2, %v2 = loom.adam %w, %g1a, %m, %v step %s {...}
    return %l : tensor<f32>
    ```
  }];
  let options = [
    Option<"zeroStage", "zero-stage", "int64_t", /*default=*/"0",
           "ZeRO stage: 0 (all-reduce), 1 (+ optimizer state partitioned), "
           "2 (+ gradients reduce-scattered), 3 (+ parameters partitioned)">,
    Option<"bucketSize", "bucket-size", "int64_t", /*default=*/"16777216",
           "Most elements per communication bucket (small tensors share one)">,
    Option<"frozenVariance", "frozen-variance", "mlir::loom::FrozenVariance",
           /*default=*/"mlir::loom::FrozenVariance::sharded",
           "1-bit Adam at stages 1-2, after its freeze", [{::llvm::cl::values(
             clEnumValN(mlir::loom::FrozenVariance::sharded, "sharded",
                        "each rank steps its shard with its shard of the frozen variance "
                        "and all-gathers fp32 parameters"),
             clEnumValN(mlir::loom::FrozenVariance::replicated, "replicated",
                        "the variance gathered once at the freeze; every rank updates every "
                        "parameter and only the 1-bit momenta cross the link"))}]>,
    Option<"topology", "topology", "std::string", /*default=*/"",
           "The loom.topology to span (default: the module's only one)">,
    Option<"exclude", "exclude", "std::string", /*default=*/"\"\"",
           "Levels (comma-separated) the data parallelism does not span: it runs inside "
           "each of their groups (loom-diloco's 'replica', tensor and pipeline "
           "parallelism's levels); nothing happens when those groups have one rank">,
    Option<"secondary", "secondary", "std::string", /*default=*/"\"\"",
           "hpZ (ZeRO++): levels (comma-separated) of a secondary partition of ZeRO-3's "
           "parameters: the forward's all-gather keeps this rank's block within them, "
           "and the backward gathers inside them instead of over the world">,
    Option<"shardMultiple", "shard-multiple", "int64_t", /*default=*/"1",
           "Pad each bucket so that every rank's shard is a multiple of this many "
           "elements (ZeRO++'s qwZ and qgZ quantise shards in whole blocks)">,
    Option<"inflight", "reductions-in-flight", "int64_t", /*default=*/"2",
           "Gradient reductions the backward keeps in flight: before issuing the next, "
           "the compute stream waits for the oldest, so its full gradient is freed "
           "during the backward (0: all waited before @forward_backward returns)">,
    Option<"masterShards", "master-shards", "bool", /*default=*/"false",
           "Stages 1 and 2: keep each rank's master weights of a bucket as a shard "
           "parameter of their own (@zero.bucketK.params) that the update reads and "
           "writes and the all-gather copies from, instead of a slice of the whole "
           "parameters (loom-offload-optimizer then moves it to the host)">,
    Option<"memberAlign", "member-align", "int64_t", /*default=*/"1",
           "Start each tensor of a bucket at a multiple of this many elements "
           "(zeros between): a quantisation block then never spans two tensors, "
           "whose ranges differ (a layer norm's gain of 1 beside weights of 0.02)">,
    Option<"computeGathers", "compute-gathers", "bool", /*default=*/"true",
           "Stage 3: gather a bucket in the compute type (bf16) where every use of "
           "its members is a cast to it (loom-mixed-precision's), so half the bytes "
           "move; false: fp32 master shards (what qwZ quantises)">,
    Option<"reduceBf16", "reduce-bf16", "bool", /*default=*/"false",
           "Reduce gradients in bf16 (half the bytes; FSDP's reduce_dtype=bfloat16): "
           "mixed precision's bf16 gradients are reduced as they are, the reduced "
           "shard cast to fp32 for the optimizer">,
    Option<"prefetch", "prefetch", "int64_t", /*default=*/"1",
           "Stage 3: issue each bucket's gather this many gathers ahead of its use, "
           "in the forward's order and in the backward's (0: where it is used)">,
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

def QuantizeWeights : Pass<"loom-quantize-weights", "ModuleOp"> {
  let summary = "ZeRO++ qwZ: int8 block-quantised weights before ZeRO-3's all-gathers";
  let description = [{
    Runs after `loom-data-parallel` at stage 3 (Wang et al., ZeRO++, 2023,
    §3.1). Every all-gather in `@forward_backward` of a parameter shard
    (`loom.load` of a `loom.shard_of` parameter) sends int8 codes with one
    fp32 scale per `block` elements instead of fp32: the shard is
    compressed (symmetric, scale = the block's largest magnitude / 127),
    the packed payload gathered, and the whole bucket decompressed after
    the wait. The forward and the backward decode the same codes, so the
    gradients are of the weights the forward used. hpZ's secondary gathers
    (of a `loom.shard` of the gathered bucket, inside a node) stay
    full-precision, as in ZeRO++. A shard that is not a whole number of
    blocks keeps its fp32 gather and says why in `loom.note`
    (`loom-data-parallel shard-multiple=` pads shards to whole blocks).

    Before:

    ```mlir
    %s = loom.load @zero.bucket0.params : tensor<4096xf32>
    %f, %t = loom.all_gather %s over #loom.group<@world, ["gpu", "node"]> on comm
        : tensor<4096xf32> -> tensor<16384xf32>
    loom.wait %t
    ```

    After (`block=2048`):

    ```mlir
    %s = loom.load @zero.bucket0.params : tensor<4096xf32>
    %q = loom.compress %s : tensor<4096xf32>
        -> !loom.packed<tensor<4096xf32>, #loom.codec<int8, block = 2048>>
    %g, %t = loom.all_gather %q over #loom.group<@world, ["gpu", "node"]> on comm
        : !loom.packed<...4096...> -> !loom.packed<tensor<16384xf32>, #loom.codec<int8, block = 2048>>
    loom.wait %t
    %f = loom.decompress %g : ... -> tensor<16384xf32>
    ```
  }];
  let options = [
    Option<"block", "block", "int64_t", /*default=*/"2048",
           "Elements per fp32 scale (even; ZeRO++ uses blocks of a few thousand)">,
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

def QuantizeGradients : Pass<"loom-quantize-gradients", "ModuleOp"> {
  let summary = "ZeRO++ qgZ: int4 hierarchical gradient reduce-scatter by all-to-all";
  let description = [{
    Runs after `loom-data-parallel` at stages 2-3 (Wang et al., ZeRO++,
    2023, §3.3). Each gradient reduce-scatter (mean, fp32) over a group of
    several levels becomes two quantised all-to-alls: the bucket's chunks
    are reordered so that the chunks bound for one inner rank (the group's
    levels but its outermost: a node) lie together, quantised to int4 in
    blocks of `block` elements, exchanged by an all-to-all inside the node,
    dequantised and averaged over the node, quantised again and exchanged
    by an all-to-all over the outermost level, then dequantised and
    averaged: each rank ends with its shard of the mean, as the
    reduce-scatter gave, and only int4 codes and fp32 scales cross the
    node. Over one level it is one stage. The second stage is issued where
    the next bucket's reduction is (or at the end of the backward), so the
    first all-to-all overlaps the backward; the last decode follows the
    backward's final wait.

    Falls back to the plain reduce-scatter, with `loom.note` saying why,
    for a shard that is not a whole number of blocks, a non-f32 payload or
    a reduction other than mean.

    Before (`["gcd" = 2, "gpu" = 2, "node" = 2]`, a shard of 4096):

    ```mlir
    %r, %t = loom.reduce_scatter %g over #loom.group<@world, ["gcd", "gpu", "node"]>
        reduce mean on comm : tensor<32768xf32> -> tensor<4096xf32>
    ```

    After (abridged):

    ```mlir
    %o = loom.transpose %g3 [1, 0, 2] : tensor<2x4x4096xf32> to tensor<4x2x4096xf32>
    %q = loom.compress %of : tensor<32768xf32> -> !loom.packed<..., #loom.codec<int4, block = 128>>
    %a, %t1 = loom.all_to_all %q over #loom.group<@world, ["gcd", "gpu"]> on comm : ...
    loom.wait %t1
    %m = loom.reduce mean %a2 [0] : tensor<4x8192xf32> to tensor<8192xf32>
    %q2 = loom.compress %m : ...
    %b, %t2 = loom.all_to_all %q2 over #loom.group<@world, ["node"]> on comm : ...
    loom.wait %t2
    %r = loom.reduce mean %b2 [0] : tensor<2x4096xf32> to tensor<4096xf32>
    ```
  }];
  let options = [
    Option<"innerLevels", "inner", "std::string", /*default=*/"\"\"",
           "Levels (comma-separated, the group's innermost) of the first stage; the rest "
           "form the second. Default: every level of the group but its outermost">,
    Option<"block", "block", "int64_t", /*default=*/"128",
           "Elements per fp32 scale (even; 128 costs a quarter bit an element in "
           "scales: with 512 a 2-layer GPT on text ended 1.1% above flat ZeRO-3 after "
           "300 steps, with 128 0.2%)">,
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

def WorkingCopies : Pass<"loom-working-copies", "ModuleOp"> {
  let summary = "Read bf16 working copies the update refreshes instead of casting the fp32 weights every step";
  let description = [{
    Mixed precision's forward casts each fp32 master weight to bf16 every
    step (GPT-2: 149 cast kernels a step). For a parameter whose only
    update is a `loom.adam` on the device that stores its new weights back,
    and whose every other reader is a cast to bf16, this pass adds a bf16
    state `@P.work` (`loom.mirror_of` P: the driver fills it from the
    master at the start and after a resume, and checkpoints leave it out),
    points those readers at it and refreshes it after each update (a cast
    of the new weights stored to it, which the lowering folds into the
    update: `loomrt.adam`'s refresh). The rounding is the cast's, so the
    step's bits do not change. Runs after `loom-attach-optimizer` (and
    `loom-clip-gradients`); loomc runs it for bf16 steps on one rank
    without offload (the offload makes working copies of its own).

    Before:

    ```mlir
    loom.param @w : tensor<64x64xf32>
    // forward
    %w = loom.load @w : tensor<64x64xf32>
    %wb = loom.cast %w : tensor<64x64xf32> to tensor<64x64xbf16>
    // train_step
    %p = loom.load @w : tensor<64x64xf32>
    %np, %nm, %nv = loom.adam %p, %g, %m, %v step %t {...} : ...
    loom.store %np to @w : tensor<64x64xf32>
    ```

    After:

    ```mlir
    loom.param @w : tensor<64x64xf32>
    loom.state @w.work : tensor<64x64xbf16> role other init #loom.init<zeros> {loom.mirror_of = @w}
    // forward
    %wb = loom.load @w.work : tensor<64x64xbf16>
    // train_step
    %np, %nm, %nv = loom.adam %p, %g, %m, %v step %t {...} : ...
    loom.store %np to @w : tensor<64x64xf32>
    %r = loom.cast %np : tensor<64x64xf32> to tensor<64x64xbf16>
    loom.store %r to @w.work : tensor<64x64xbf16>
    ```
  }];
  let statistics = [
    Statistic<"made", "made", "Working copies made">,
  ];
}

def OffloadOptimizer : Pass<"loom-offload-optimizer", "ModuleOp"> {
  let summary = "Place each optimizer update on the GPU or the CPU, with the copies it needs";
  let description = [{
    Each parameter's update runs in one of three places (`mode` chooses):
    `gpu` (state resident in device memory, as without offload), `cpu`
    (ZeRO-Offload, Ren et al. 2021 §4: master weights and Adam state in
    pinned host memory, `#loom.mem<pinned>`, updated by the CPU) or `stream`
    (Deep Optimizer States §3: state in pinned host memory, copied to the
    device once the gradients exist, updated there and copied back).
    Offloaded parameters get a device working copy `@P.work` (initialised
    from the master, `loom.mirror_of`) that the forward and backward read;
    it is bf16 when the forward only reads the parameter through a cast to
    bf16 (`loom-mixed-precision`), and then the gradient also moves as bf16
    and the update writes the refreshed bf16 weights in the same pass
    (code generation fuses the `loom.cast` of the new weights into
    `loom.adam`).

    `@forward_backward` is inlined into `@train_step` so that a gradient is
    copied to the host (`d2h`) right after the backward computes it and the
    CPU update of a subgroup starts as soon as its gradients have landed,
    while the GPU still runs the backward. CPU updates come after all GPU
    work of the step, grouped by `loom.subgroup`, in the order the backward
    finishes them; each refreshed working copy goes back on `h2d`; the
    step's compute stream waits for those copies before it returns (the
    next forward reads them) and the host waits for streamed state. A
    resident (`gpu`) update moves up to the first wait for its gradient,
    with its loads and stores, so the gradient is released during the
    backward rather than at its end (the memory `loom-interleave-offload`
    gives to more resident state); it stays where it was if anything in
    between touches its symbols or an operand is made later (a clipped
    gradient).

    Modes: `cpu` (every update on the CPU), `static:R` (DeepSpeed's fixed
    split: the first parameters holding a fraction R of the elements on the
    GPU, the rest on the CPU), `subgroups` (each `loom.subgroup`'s
    `update`: what `loom-interleave-offload` plans, or a user writes).

    1-bit Adam (ZeRO stage 0): `@train_step_frozen`'s updates of the
    offloaded parameters read the same pinned master weights and moments.
    The stored momentum comes up (`h2d`) for the worker's compression, the
    exchanged momentum goes down (`d2h`) once it exists, the frozen update
    runs on the CPU at the end of the step (a `stream` placement's too: the
    backends' Adam give the same bits) and the working copy is refreshed.
    At ZeRO stages 1 and 2 (master shards, sharded frozen variance) each
    frozen update of a shard has the warm-up's form and is placed as the
    warm-up's, with its working copy; `@enter_frozen` copies the host
    momentum shards up before gathering them.

    Streaming DiLoCo (`loom-diloco` before this pass): the global copy and
    outer momentum of each offloaded parameter move to pinned memory with
    its master weights; in DiLoCo's functions the pseudo-gradient, outer
    SGD and merge run on the host, each collective or codec on the device
    (host operands copied up, device results copied down where a host
    operation reads them), and a merge stored into the master weights
    refreshes the working copy.

    Before (bf16 model):

    ```mlir
    loom.param @w : tensor<8x8xf32> init #loom.init<ones>
    // in @forward_backward
    %w = loom.load @w : tensor<8x8xf32>
    %wb = loom.cast %w : tensor<8x8xf32> -> tensor<8x8xbf16>
    ...
    %gw = loom.cast %gwb : tensor<8x8xbf16> -> tensor<8x8xf32>
    // in @train_step
    %nw, %nm, %nv = loom.adam %w0, %gw, %m, %v step %s {...}
    loom.store %nw to @w : tensor<8x8xf32>
    ```

    After (`mode=cpu`):

    ```mlir
    loom.param @w : tensor<8x8xf32, #loom.mem<pinned>> init #loom.init<ones>
    loom.state @w.work : tensor<8x8xbf16> role other init #loom.init<zeros> {loom.mirror_of = @w}
    // in @train_step (the backward inlined)
    %wb = loom.load @w.work : tensor<8x8xbf16>
    ...
    %gh, %t = loom.copy %gwb on d2h : tensor<8x8xbf16> -> tensor<8x8xbf16, #loom.mem<pinned>>
    ...
    loom.wait %t
    %nw, %nm, %nv = loom.adam %w0, %gh, %m, %v step %s {...}
        : tensor<8x8xf32, #loom.mem<pinned>>, tensor<8x8xbf16, #loom.mem<pinned>>, ...
    loom.store %nw to @w : tensor<8x8xf32, #loom.mem<pinned>>
    %nb = loom.cast %nw : tensor<8x8xf32, #loom.mem<pinned>> -> tensor<8x8xbf16, #loom.mem<pinned>>
    %d, %t2 = loom.copy %nb on h2d : tensor<8x8xbf16, #loom.mem<pinned>> -> tensor<8x8xbf16>
    loom.store %d to @w.work : tensor<8x8xbf16>
    loom.wait %t2
    ```
  }];
  let options = [
    Option<"hostThread", "host-thread", "bool", /*default=*/"false",
           "Move each CPU update up to just after its gradient's copy, for the "
           "step's host thread (loomc --host-thread)">,
    Option<"mode", "mode", "std::string", /*default=*/"\"cpu\"",
           "Which schedule: cpu (every update on the CPU), static:R (the "
           "first parameters holding a fraction R of the elements keep their "
           "state and update on the GPU, the rest on the CPU), or subgroups "
           "(each loom.subgroup's update attribute: gpu, stream or cpu)">,
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

def InterleaveOffload : Pass<"loom-interleave-offload", "ModuleOp"> {
  let summary = "Plan where each optimizer subgroup updates (Deep Optimizer States)";
  let description = [{
    Decides, for every `loom.subgroup`, whether its update runs on the GPU
    with its state resident in device memory (`gpu`), on the GPU with its
    state streamed from pinned host memory and back (`stream`), or on the
    CPU (`cpu`), and writes the decision as the subgroup's `update` (applied
    by `loom-offload-optimizer{mode=subgroups}`). Candidates are simulated
    on the cost model for `hardware` (docs/cost-model.md): the GPU memory
    timeline of each (persistent parameters and state plus the step arena's
    peak, activations at the start of the backward, streamed state after)
    decides what fits; the simulated step time (compute, both copy
    directions, CPU updates, one shared host-memory budget) picks among the
    candidates that fit. First as many subgroups as fit stay resident (the
    first in declaration order, whose gradients come last), then the number
    of streamed subgroups, spread evenly among the CPU's, that gives the
    fastest step. The plan and its prediction are recorded as
    `loom.offload_plan` on the module.

    Before (`--loom-interleave-offload=hardware=h100`):

    ```mlir
    loom.subgroup @sg0 [@wte, @wpe] numel 1024
    loom.subgroup @sg1 [@h0.w] numel 4096
    loom.subgroup @sg2 [@h1.w] numel 4096
    ```

    After:

    ```mlir
    module attributes {loom.offload_plan = #loom.offload_plan<gpu = 1, stream = 1, cpu = 1,
        hardware = "h100", predicted_step_s = ..., ...>} {
    loom.subgroup @sg0 [@wte, @wpe] numel 1024 update gpu
    loom.subgroup @sg1 [@h0.w] numel 4096 update stream
    loom.subgroup @sg2 [@h1.w] numel 4096 update cpu
    ```
  }];
  let options = [
    Option<"hardware", "hardware", "std::string", /*default=*/"\"h100\"",
           "A hardware preset (h100, cpu-host) or a description file from "
           "loom-calibrate">,
    Option<"hostThread", "host-thread", "bool", /*default=*/"false",
           "The simulated step runs the CPU's updates on its host thread "
           "(loom-form-host-tasks; loomc --host-thread)">,
    Option<"fuse", "fuse", "bool", /*default=*/"true",
           "The simulated step is fused as the binary's (loomc --no-fuse: false)">,
    Option<"planArena", "plan-arena", "bool", /*default=*/"true",
           "The simulated step's buffers at planned offsets (loomc "
           "--arena=online: false)">,
    Option<"graphs", "graphs", "bool", /*default=*/"true",
           "The simulated step's capturable functions replayed as graphs "
           "(loom-capture-graphs; loomc --no-graphs: false)">,
    Option<"memoryLimit", "memory-limit", "int64_t", /*default=*/"0",
           "Device memory the plan may use, in bytes (0: the description's "
           "capacity less what the runtime keeps)">,
  ];
  // Candidates are simulated in their lowered form.
  let dependentDialects = ["::mlir::loom::LoomDialect", "::mlir::loomrt::LoomRTDialect"];
}

def RecognizeOps : Pass<"loom-recognize-ops", "ModuleOp"> {
  let summary = "Recognise attention, RMS norm, SiLU and rotary embeddings written out by exporters";
  let description = [{
    PyTorch's exporters write some of Loom's ops as their parts, and the
    parts cost far more than the op: each one reads and writes memory, and
    the backward goes through every one.

    * **Attention**: the scores `q kᵀ` (scaled before or after the
      product; the key transposed by the matmul or by ops of its own), an
      additive mask, a softmax over the keys, the product with the values
      (eager attention in Hugging Face models, and
      `scaled_dot_product_attention` as the dynamo exporter decomposes it)
      become `loom.attention`, one fused kernel that never stores the
      `[batch, heads, T, T]` scores. Only when every part is exactly that:
      scalar constant scales, a mask equal to the causal mask (0 where the
      key is at or before the query, below -1e30 after it, for every batch
      and head: a constant, or a select between two constants on a
      constant condition), a mask of zeros, or none; a softmax over the
      last dimension read by nothing else. A padding mask, dropout on the
      probabilities or a soft cap stays as it is. A key given transposed is
      transposed back (`loom.transpose`, one copy of the key).
    * **RMS norm**: `w · x / sqrt(mean(x²) + eps)` (Llama's `RMSNorm`, with
      `x²` as a power or a product, `1/sqrt` as a division or `rsqrt`)
      becomes `loom.rms_norm` over the last dimension.
    * **SiLU**: `x · sigmoid(x)` becomes `loom.silu`.
    * **Rotary embeddings**: `x · cos + rotate_half(x) · sin` with
      `rotate_half(x) = concat(-x[..., D/2:], x[..., :D/2])` along the last
      dimension (Llama's, GPT-NeoX's) becomes `loom.rotary` (one kernel,
      and one for its gradient, where the slices, negation, concatenation,
      products and sum took about fifteen calls), when the tables are
      `[T, D]` (leading dimensions of 1) and computed from no parameter;
      per-batch tables (`[B, 1, T, D]`) stay as they are.

    Before:

    ```mlir
    %s = loom.matmul %q, %kt : tensor<2x4x16x8xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x16x16xf32>
    %c = arith.constant dense<0.353553385> : tensor<f32>
    %t = loom.mul %s, %c : tensor<2x4x16x16xf32>, tensor<f32> -> tensor<2x4x16x16xf32>
    %m = loom.add %t, %causal : tensor<2x4x16x16xf32>, tensor<1x1x16x16xf32> -> tensor<2x4x16x16xf32>
    %p = loom.softmax %m dim -1 : tensor<2x4x16x16xf32>
    %o = loom.matmul %p, %v : tensor<2x4x16x16xf32>, tensor<2x4x16x8xf32> -> tensor<2x4x16x8xf32>
    %g = loom.sigmoid %x : tensor<2x16x64xf32>
    %y = loom.mul %x, %g : tensor<2x16x64xf32>, tensor<2x16x64xf32> -> tensor<2x16x64xf32>
    ```

    After:

    ```mlir
    %k = loom.transpose %kt [0, 1, 3, 2] : tensor<2x4x8x16xf32> to tensor<2x4x16x8xf32>
    %o = loom.attention %q, %k, %v causal scale 0.353553385 : tensor<2x4x16x8xf32>,
        tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32> -> tensor<2x4x16x8xf32>
    %y = loom.silu %x : tensor<2x16x64xf32>
    ```
  }];
}

def ReinitParams : Pass<"loom-reinit-params", "ModuleOp"> {
  let summary = "Replace imported parameter values with initialisers";
  let description = [{
    For benchmark runs of imported models (`loomc --init=random`): every
    `loom.param` that carries imported values gets an initialiser instead,
    so no weights need to be stored or loaded. Matrices and higher-rank
    tensors draw from `normal(0, std)`; vectors named `*bias` start at zeros
    and other vectors (normalisation weights) at ones - GPT-2's scheme.

    Before:

    ```mlir
    loom.param @fc.weight : tensor<4x3xf32> value dense<...> : tensor<4x3xf32>
    loom.param @fc.bias : tensor<4xf32> value dense<...> : tensor<4xf32>
    loom.param @ln.weight : tensor<4xf32> value dense<...> : tensor<4xf32>
    ```

    After:

    ```mlir
    loom.param @fc.weight : tensor<4x3xf32> init #loom.init<normal(0.0, 0.02)>
    loom.param @fc.bias : tensor<4xf32> init #loom.init<zeros>
    loom.param @ln.weight : tensor<4xf32> init #loom.init<ones>
    ```
  }];
  let options = [
    Option<"stddev", "std", "double", /*default=*/"0.02",
           "Standard deviation of the normal initialiser of matrices">,
  ];
}

def PlaceFeatures : Pass<"loom-place-features", "ModuleOp"> {
  let summary = "Place a graph model's feature table: device, zero-copy or host gather";
  let description = [{
    A graph model (`loom.graph` on the module) reads its node features from
    the `@forward` argument named `features`, only through `loom.embedding`.
    The table stays in device memory when it fits beside the step (the
    step's own memory bounded by twice the forward's values plus four copies
    of the parameters, under 90% of the device); otherwise it goes to pinned
    host memory and the pass picks the faster gather for the step's rows by
    the cost model (`cost::gatherTime`, docs/cost-model.md "Row gathers"):

    * `zero-copy`: a `loom.zero_copy` view the GPU reads itself (Min et al.,
      "Large GCN training with GPU-oriented data communication", §4; the
      runtime's gather sorts the indices on the GPU and reads 128-byte
      aligned segments);
    * `host-gather`: the CPU gathers the rows into pinned memory (its
      indices are pinned inputs too) and a copy on `h2d` uploads them, the
      path of PyG's NeighborLoader.

    `placement=` forces one. The choice is recorded as `placement` in
    `loom.graph`; on a machine without a GPU `auto` keeps the table where
    it is (the host's memory either way). Before (a 2 GB table, an H100
    with a 1 GiB limit):

    ```mlir
    func.func @forward(%f: tensor<4000000x128xf32>, %ids: tensor<4096xi64>, ...) {
      %x = loom.embedding %f[%ids] : tensor<4000000x128xf32>, tensor<4096xi64> -> tensor<4096x128xf32>
    ```

    after (`zero-copy`):

    ```mlir
    func.func @forward(%f: tensor<4000000x128xf32, #loom.mem<pinned>>, %ids: tensor<4096xi64>, ...) {
      %m = loom.zero_copy %f : tensor<4000000x128xf32, #loom.mem<pinned>> -> tensor<4000000x128xf32, #loom.mem<mapped>>
      %x = loom.embedding %m[%ids] : tensor<4000000x128xf32, #loom.mem<mapped>>, tensor<4096xi64> -> tensor<4096x128xf32>
    ```
  }];
  let options = [
    Option<"placement", "placement", "std::string", /*default=*/"\"auto\"",
           "auto (the cost model decides), device, zero-copy or host-gather">,
    Option<"hardware", "hardware", "std::string", /*default=*/"\"h100\"",
           "A hardware preset (h100, cpu-host) or a description file from "
           "loom-calibrate">,
    Option<"function", "function", "std::string", /*default=*/"\"forward\"",
           "The function whose features argument is placed">,
  ];
}

#endif // LOOM_PASSES_LOOM_TD

def MicroBatches : Pass<"loom-micro-batches", "ModuleOp"> {
  let summary = "Split each step's batch into micro-batches whose gradients add up";
  let description = [{
    Gradient accumulation in IR (GPipe's micro-batches, Huang et al. 2019),
    the unit pipeline schedules order. Runs on `@forward` before
    `loom-autodiff`: the function built for one micro-batch of b rows then
    reads `count` x b rows, runs the model on each slice of b rows in turn
    and returns the mean of the losses. Autodiff derives every
    micro-batch's backward; each parameter's gradient is the sum of its
    micro-batches' parts, which is the gradient of the whole batch's mean
    loss. Parameter loads, their casts and everything else that does not
    read an input are computed once and shared. A metric the forward stores
    (`@metrics.*`) is stored once, from every micro-batch's value: their
    sum where the state carries `loom.metric_sum` (a count, such as an
    expert's tokens), else their mean. Refused for graph models,
    for inputs in host memory and for results that are not scalar losses.

    Before (`count=2`):

    ```mlir
    func.func @forward(%x: tensor<2x4xi64>, %y: tensor<2x4xi64>) -> tensor<f32> {
      %w = loom.load @wte : tensor<32x16xf32>
      %h = loom.embedding %w[%x] : tensor<32x16xf32>, tensor<2x4xi64> -> tensor<2x4x16xf32>
      ...
      return %loss : tensor<f32>
    }
    ```

    After:

    ```mlir
    func.func @forward(%x: tensor<4x4xi64>, %y: tensor<4x4xi64>) -> tensor<f32> {
      %x0 = loom.slice %x [0, 0] [2, 4] [1, 1] : tensor<4x4xi64> to tensor<2x4xi64>
      %y0 = loom.slice %y [0, 0] [2, 4] [1, 1] : tensor<4x4xi64> to tensor<2x4xi64>
      %w = loom.load @wte : tensor<32x16xf32>
      %h0 = loom.embedding %w[%x0] : ...
      ...
      %x1 = loom.slice %x [2, 0] [4, 4] [1, 1] : tensor<4x4xi64> to tensor<2x4xi64>
      %y1 = loom.slice %y [2, 0] [4, 4] [1, 1] : tensor<4x4xi64> to tensor<2x4xi64>
      %h1 = loom.embedding %w[%x1] : ...
      ...
      %l0 = loom.reshape %loss0 : tensor<f32> to tensor<1xf32>
      %l1 = loom.reshape %loss1 : tensor<f32> to tensor<1xf32>
      %ls = loom.concat %l0, %l1 dim 0 : tensor<1xf32>, tensor<1xf32> -> tensor<2xf32>
      %loss = loom.reduce mean %ls [0] : tensor<2xf32> to tensor<f32>
      return %loss : tensor<f32>
    }
    ```
  }];
  let options = [
    Option<"count", "count", "int64_t", /*default=*/"1",
           "Micro-batches a step (1: the pass changes nothing)">
  ];
}

def PipelineSchedule : Pass<"loom-pipeline-schedule", "ModuleOp"> {
  let summary = "Order the micro-batches' forwards and backwards";
  let description = [{
    Runs on `@forward_backward` after `loom-autodiff` of a
    `loom-micro-batches` forward. `gpipe` keeps autodiff's order: every
    micro-batch's forward, then every backward, with all micro-batches'
    activations live at the turn. `1f1b` (PipeDream-Flush, Narayanan et al.
    2021) runs each micro-batch's backward right after its forward, so one
    micro-batch's activations are live at a time. Ops are labelled by the
    micro-batches whose rows they read (from the input slices marked
    `loom.micro_batch`); an op reading several (a parameter's running
    gradient sum, the averaged loss) runs as soon as it can, one reading
    none (loads, casts, the seed gradient) just before its first user. Only
    the order changes; a function that writes memory keeps its order (a
    remark says so).

    On a pipeline stage's program (`loom.pipeline`, or `stage`/`stages`),
    1F1B runs min(P - s - 1, M) forwards first (Megatron-LM's warm-up), and
    the steady state's transfers are paired with the neighbour's in one
    `loom.p2p` each (send forward + receive backward, send backward +
    receive forward); `zb-h1` (Zero Bubble, Qi et al. 2024) also orders
    each backward's input-gradient ops before its weight-gradient ops and
    defers the cool-down's weight gradients to its end. `interleaved:V`
    (Narayanan et al., SC 2021) runs on a stage holding V model chunks
    (`loom-pipeline-split chunks=V`): Megatron-LM's interleaved order of
    (micro-batch, chunk) forwards and backwards, the ops of each taken by
    their `loom.stage` (autodiff gives a VJP's ops their op's); its
    transfers stay single and are ordered by one clock every stage
    computes alike (a forward 1, a backward 2: `cost::timePipeline`), so
    each stage meets its neighbours' transfers in one order. M must be a
    multiple of the stages.

    Before (`schedule=1f1b`, two micro-batches; autodiff's order):

    ```mlir
    %x1 = loom.slice %x [2, 0] [4, 3] [1, 1] {loom.micro_batch = 1 : i64} : ...
    %p1 = loom.matmul %x1, %w : ...                        // forward 1
    %x0 = loom.slice %x [0, 0] [2, 3] [1, 1] {loom.micro_batch = 0 : i64} : ...
    %p0 = loom.matmul %x0, %w : ...                        // forward 0
    %g0 = loom.matmul %x0, %d0 transpose_lhs : ...         // backward 0
    %g1 = loom.matmul %x1, %d1 transpose_lhs : ...         // backward 1
    %g = loom.add %g0, %g1 : ...
    ```

    After:

    ```mlir
    %x0 = loom.slice %x [0, 0] [2, 3] [1, 1] {loom.micro_batch = 0 : i64} : ...
    %p0 = loom.matmul %x0, %w : ...                        // forward 0
    %g0 = loom.matmul %x0, %d0 transpose_lhs : ...         // backward 0
    %x1 = loom.slice %x [2, 0] [4, 3] [1, 1] {loom.micro_batch = 1 : i64} : ...
    %p1 = loom.matmul %x1, %w : ...                        // forward 1
    %g1 = loom.matmul %x1, %d1 transpose_lhs : ...         // backward 1
    %g = loom.add %g0, %g1 : ...
    ```
  }];
  let options = [
    Option<"schedule", "schedule", "std::string", /*default=*/"\"1f1b\"",
           "gpipe (every forward, then every backward), 1f1b (each backward after its "
           "forward), zb-h1 (1f1b with the weight gradients after the input gradients, "
           "the cool-down's at its end) or interleaved:V (V model chunks a stage, "
           "Megatron-LM's interleaved 1F1B)">,
    Option<"stage", "stage", "int64_t", /*default=*/"0",
           "This program's pipeline stage (its module's loom.pipeline when it has one)">,
    Option<"stages", "stages", "int64_t", /*default=*/"1",
           "Pipeline stages (1F1B runs min(stages - stage - 1, M) forwards first)">
  ];
}

def PipelineCut : Pass<"loom-pipeline-cut", "ModuleOp"> {
  let summary = "Choose where each pipeline stage begins, by the cost model";
  let description = [{
    The forward's units (one a transformer block; the embedding before the
    first, the head and the loss with the last) cut into `stages`
    contiguous runs that minimise the slowest stage's forward and backward
    time on one micro-batch, each stage's memory (parameters at 16 bytes,
    the units' forward outputs for each micro-batch 1F1B keeps in flight
    there) within the device's. Every non-free op and every parameter gets
    `loom.stage`; a remark gives each stage's units, time and memory, the
    1F1B step and its bubble. Times are the step simulation's GPU roofline
    (`hardware`: a preset or a description file).

    Before (`stages=2`, a 2-block model):

    ```mlir
    loom.param @h.0.w : tensor<64x64xf32> init ...
    loom.param @h.1.w : tensor<64x64xf32> init ...
    %a = loom.matmul %x, %w0 : ...
    %b = loom.matmul %a, %w1 : ...
    ```

    After:

    ```mlir
    loom.param @h.0.w : tensor<64x64xf32> init ... {loom.stage = 0 : i64}
    loom.param @h.1.w : tensor<64x64xf32> init ... {loom.stage = 1 : i64}
    %a = loom.matmul %x, %w0 {loom.stage = 0 : i64} : ...
    %b = loom.matmul %a, %w1 {loom.stage = 1 : i64} : ...
    ```
  }];
  let options = [
    Option<"stages", "stages", "int64_t", /*default=*/"2", "Pipeline stages">,
    Option<"microBatches", "micro-batches", "int64_t", /*default=*/"1",
           "Micro-batches a step (the bubble, and the activations in flight)">,
    Option<"hardware", "hardware", "std::string", /*default=*/"\"h100\"",
           "The machine a stage runs on: a preset or a description file">,
    Option<"deviceMemory", "device-memory", "double", /*default=*/"0",
           "GiB a stage may hold (0: the description's usable device memory)">,
    Option<"quiet", "quiet", "bool", /*default=*/"false",
           "Mark the stages without printing the plan (loomc prints it once)">,
    Option<"chunks", "chunks", "int64_t", /*default=*/"1",
           "Interleaved: the `stages` are model chunks, this many a pipeline stage "
           "(the plan priced in interleaved 1F1B's order)">
  ];
}

def PipelineSplit : Pass<"loom-pipeline-split", "ModuleOp"> {
  let summary = "Keep one pipeline stage's part of the forward, with its transfers";
  let description = [{
    After `loom-pipeline-cut`, before `loom-autodiff`: `@forward` keeps the
    ops marked with `stage`, what any stage can compute for itself
    (parameter loads and their casts, anything computed from the inputs
    and constants alone) where they are read, and the parameters its ops
    read; the value a cut crosses is sent to the next stage at the end
    (`loom.p2p send ... to 1`) and received from the previous one at the
    beginning (`recv from -1`), over the topology's `level`. The loss is
    the model's on the last stage and zero on the others. Kept parameters
    get `loom.init_skip` (the stream elements of the parameters before them
    that went), parameters read on two stages `loom.tied_peer`, the module
    `loom.pipeline = [stage, stages, level index]`. With `chunks=V` the
    cut's `loom.stage` numbers P x V chunks and stage s keeps chunks s,
    s + P, ... (interleaved 1F1B): a transfer at every chunk boundary it
    holds, each marked with its chunk and placed where its value is read
    or computed, the last stage's chunk sending to the first stage's next
    (peer -(P - 1)); the module gets `[stage, stages, level, V]`.

    Before (`stage=1 stages=2`):

    ```mlir
    %a = loom.matmul %x, %w0 {loom.stage = 0 : i64} : ...
    %b = loom.matmul %a, %w1 {loom.stage = 1 : i64} : ...
    %l = loom.cross_entropy %b, %y {loom.stage = 1 : i64} : ...
    return %l
    ```

    After:

    ```mlir
    %a, %t = loom.p2p recv from -1 over #loom.group<@world, ["stage"]> on comm -> ...
    loom.wait %t
    %b = loom.matmul %a, %w1 {loom.stage = 1 : i64} : ...
    %l = loom.cross_entropy %b, %y {loom.stage = 1 : i64} : ...
    return %l
    ```
  }];
  let options = [
    Option<"stage", "stage", "int64_t", /*default=*/"0", "The stage to keep">,
    Option<"stages", "stages", "int64_t", /*default=*/"2", "Pipeline stages">,
    Option<"level", "level", "std::string", /*default=*/"\"stage\"",
           "The topology level whose ranks are the stages">,
    Option<"chunks", "chunks", "int64_t", /*default=*/"1",
           "Model chunks a stage holds (interleaved 1F1B's virtual stages: loom.stage "
           "numbers the chunks, chunk c on stage c mod stages)">
  ];
}

def ExpertParallel : Pass<"loom-expert-parallel", "ModuleOp"> {
  let summary = "Keep one rank's experts and move the tokens to them (expert parallelism)";
  let description = [{
    Before `loom-autodiff`, on the generator's mixture-of-experts layers
    (`--model moe:`): the experts split over the ranks of the topology's
    `level`, rank j holding experts j E/N ... (j+1) E/N - 1. The dispatch
    buffer (ordered by expert) goes to the experts' ranks by one
    `loom.all_to_all`, each local expert runs on every source's C rows
    (its ops cloned once a source), and the outputs come back by a second
    all-to-all before `loom.moe_combine`. The other experts' ops and
    parameters go; the kept parameters after them get `loom.init_skip`,
    the kept experts' parameters `loom.expert` (loom-data-parallel averages
    them over the ranks holding the same experts, scaled by 1/N), and the
    module `loom.expert_parallel = [rank, ranks, level]`. `loomc
    --expert-parallel=N` runs it once per rank on copies of the module
    (docs/moe.md).

    Before (2 experts of 4 rows, `rank=1` of a level of 2):

    ```mlir
    %buf = loom.moe_dispatch %h[%slots] : ... -> tensor<8x16xf32>
    %x0 = loom.slice %buf [0, 0] [4, 16] [1, 1] : ...
    %y0 = loom.matmul %x0, %w0 transpose_rhs : ...
    %x1 = loom.slice %buf [4, 0] [8, 16] [1, 1] : ...
    %y1 = loom.matmul %x1, %w1 transpose_rhs : ...
    %ys = loom.concat %y0, %y1 dim 0 : ...
    %out = loom.moe_combine %ys[%slots] weights %g : ...
    ```

    After:

    ```mlir
    %r, %t = loom.all_to_all %buf over #loom.group<@world, ["gpu"]> on comm : ...
    loom.wait %t
    %a = loom.slice %r [0, 0] [4, 16] [1, 1] : ...   // rank 0's tokens
    %ya = loom.matmul %a, %w1 transpose_rhs : ...
    %c = loom.slice %r [4, 0] [8, 16] [1, 1] : ...   // rank 1's tokens
    %yc = loom.matmul %c, %w1 transpose_rhs : ...
    %ys = loom.concat %ya, %yc dim 0 : ...
    %back, %t2 = loom.all_to_all %ys over #loom.group<@world, ["gpu"]> on comm : ...
    loom.wait %t2
    %out = loom.moe_combine %back[%slots] weights %g : ...
    ```
  }];
  let options = [
    Option<"rank", "rank", "int64_t", /*default=*/"0", "The rank whose experts to keep">,
    Option<"level", "level", "std::string", /*default=*/"\"gpu\"",
           "The topology level whose ranks hold the experts">
  ];
}

def PipelineJoin : Pass<"loom-pipeline-join", "ModuleOp"> {
  let summary = "What a pipeline stage's step shares with the others";
  let description = [{
    On a stage's program (`loom.pipeline`) after `loom-attach-optimizer`:
    the reported loss is summed over the stages (only the last computes
    it, the others report zero), and the gradient of a parameter two
    stages hold (`loom.tied_peer`) is summed with the other copy's at the
    end of `@forward_backward`, after every transfer of activations.

    Before (stage 0 of 2, `@wte` tied to the head on stage 1):

    ```mlir
    func.func @forward_backward(...) -> (tensor<f32>, tensor<64x16xf32>) {
      ...
      return %zero, %dwte : tensor<f32>, tensor<64x16xf32>
    }
    ```

    After:

    ```mlir
      %o, %t = loom.p2p send %dwte to 1 recv from 1 over #loom.group<@world, ["stage"]>
          on comm : tensor<64x16xf32> -> tensor<64x16xf32>
      loom.wait %t
      %sum = loom.add %dwte, %o : ...
      return %zero, %sum : tensor<f32>, tensor<64x16xf32>
    ```
  }];
}
