//===- Passes.td - every Loom pass: flag, summary, before/after, options --===//
#ifndef LOOM_PASSES_TD
#define LOOM_PASSES_TD

include "mlir/Pass/PassBase.td"

def OptimizerSubgroups : Pass<"loom-optimizer-subgroups", "ModuleOp"> {
  let summary = "Group parameters in order into optimizer subgroups";
  let description = [{
    Walks the `loom.param` declarations in module order and closes a
    subgroup as soon as its element count reaches `sub-group-size`
    (DeepSpeed's `sub_group_size` rule; Deep Optimizer States §3.2 uses these
    subgroups as the unit that is updated on the CPU or streamed to the GPU).
    A parameter larger than the limit forms a subgroup of its own; the last
    subgroup may be smaller. Existing subgroups are replaced.

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
    Option<"recompute", "recompute", "bool", /*default=*/"false",
           "Activation checkpointing: the backward differentiates a second "
           "copy of the forward pass made after the loss, so forward "
           "activations need not live until the backward (one checkpoint: "
           "the inputs; about a third more compute)">,
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
    * `@train_step`, with the same arguments, which calls the function,
      advances the step counter, updates every parameter and its state with
      `loom.adam` / `loom.sgd` (hyper-parameters as attributes) and stores
      them, and returns the loss.

    Before: `@forward_backward(%x, %y) -> (loss, dW) {loom.grad_params = [@w]}`.
    After (`optimizer=adamw lr=0.001`):

    ```mlir
    loom.state @w.exp_avg : tensor<4x3xf32> role adam_m of @w init #loom.init<zeros>
    loom.state @w.exp_avg_sq : tensor<4x3xf32> role adam_v of @w init #loom.init<zeros>
    loom.state @optimizer.step : tensor<i64> role step init #loom.init<zeros>
    func.func @train_step(%x: tensor<2x3xf32>, %y: tensor<2xi64>) -> tensor<f32> {
      %r:2 = call @forward_backward(%x, %y) : (...) -> (tensor<f32>, tensor<4x3xf32>)
      %t0 = loom.load @optimizer.step : tensor<i64>
      %one = arith.constant dense<1> : tensor<i64>
      %t = arith.addi %t0, %one : tensor<i64>
      loom.store %t to @optimizer.step : tensor<i64>
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
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"adamw\"",
           "adamw, adam (L2 weight decay) or sgd">,
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

def DataParallel : Pass<"loom-data-parallel", "ModuleOp"> {
  let summary = "Data parallelism with ZeRO stages 0-3 over a topology";
  let description = [{
    Runs on `@train_step` after `loom-attach-optimizer`. Every rank runs
    `@forward_backward` on its own slice of the global batch (the model's
    shapes are the per-rank batch: `loomc` divides a generator's batch by
    the world size); the loss is averaged over ranks. Gradients are
    flattened into buckets of at most `bucket-size` elements (zero-padded
    to a multiple of the world size), then, after ZeRO (Rajbhandari et al.
    2020, §5):

    * stage 0: each bucket is all-reduced (mean); the optimizer is unchanged;
    * stage 1: all-reduce, then each rank runs Adam on its `loom.shard` of
      the bucket with Adam state of that size only, and all-gathers the
      updated shards back into the parameters;
    * stage 2: reduce-scatter instead of the all-reduce;
    * stage 3: as 2, and the parameters persist as shards
      (`@zero.bucketK.params`, `loom.shard_of` lists its members, which stay
      declared for their initialisers): `@forward_backward` all-gathers a
      bucket before its first use in the forward and again before its
      first use in the backward.

    Each bucket's reduction is issued inside `@forward_backward` right after
    the last of its gradients is computed (overlapping the rest of the
    backward on the `comm` stream) and waited before the return; the reduced
    buckets replace the full gradients among its results, so each full
    gradient dies at its bucket's flatten. The group spans every level of the
    module's `loom.topology` (or the one named by `topology`).

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
    Option<"topology", "topology", "std::string", /*default=*/"",
           "The loom.topology to span (default: the module's only one)">,
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

def OffloadOptimizer : Pass<"loom-offload-optimizer", "ModuleOp"> {
  let summary = "Optimizer state and master weights in host memory, updated by the CPU";
  let description = [{
    ZeRO-Offload's schedule (Ren et al. 2021, §4), the `cpu` baseline of the
    offload modes: every parameter and its Adam state move to pinned host
    memory (`#loom.mem<pinned>`) and the CPU runs Adam on them; the GPU
    keeps a working copy (`@P.work`, initialised from the master weights,
    `loom.mirror_of`) that the forward and backward read. Each gradient is
    copied to the host right after the backward computes it (`loom.copy` on
    `d2h`, so the copies overlap the rest of the backward; waited before
    `@forward_backward` returns) and the updated weights go back to the
    working copy on `h2d` after the update. Runs after
    `loom-attach-optimizer`.

    Before:

    ```mlir
    loom.param @w : tensor<8xf32> init #loom.init<ones>
    ...
    %w = loom.load @w : tensor<8xf32>
    %nw, %nm, %nv = loom.adam %w, %g, %m, %v step %s {...} : tensor<8xf32>, ...
    loom.store %nw to @w : tensor<8xf32>
    ```

    After:

    ```mlir
    loom.param @w : tensor<8xf32, #loom.mem<pinned>> init #loom.init<ones>
    loom.state @w.work : tensor<8xf32> role other init #loom.init<zeros> {loom.mirror_of = @w}
    ...
    // in @forward_backward, after the gradient:
    %gh, %t = loom.copy %g on d2h : tensor<8xf32> -> tensor<8xf32, #loom.mem<pinned>>
    // in @train_step:
    %nw, %nm, %nv = loom.adam %w, %gh, %m, %v step %s {...} : tensor<8xf32, #loom.mem<pinned>>, ...
    loom.store %nw to @w : tensor<8xf32, #loom.mem<pinned>>
    %w2 = loom.load @w : tensor<8xf32, #loom.mem<pinned>>
    %d, %t2 = loom.copy %w2 on h2d : tensor<8xf32, #loom.mem<pinned>> -> tensor<8xf32>
    loom.wait %t2
    loom.store %d to @w.work : tensor<8xf32>
    ```
  }];
  let options = [
    Option<"mode", "mode", "std::string", /*default=*/"\"cpu\"",
           "Which schedule: cpu (every update on the CPU), static:R (the "
           "first parameters holding a fraction R of the elements keep their "
           "state and update on the GPU, the rest on the CPU), or "
           "interleaved (all state in host memory; the fraction the cost "
           "model finds fastest is streamed to the GPU and updated there)">,
    Option<"hardware", "hardware", "std::string", /*default=*/"\"h100\"",
           "interleaved: a hardware preset (h100, cpu-host) or a "
           "description file from loom-calibrate">,
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
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

#endif // LOOM_PASSES_TD
