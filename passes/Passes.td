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
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect"];
}

#endif // LOOM_PASSES_TD
