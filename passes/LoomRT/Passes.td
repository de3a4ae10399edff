//===- Passes.td - loomrt -> loomrt transforms: fusion and the arena plan of the lowered step ===//
#ifndef LOOM_PASSES_LOOMRT_TD
#define LOOM_PASSES_LOOMRT_TD

include "mlir/Pass/PassBase.td"

def InsertFrees : Pass<"loom-insert-frees", "ModuleOp"> {
  let summary = "Release each buffer after its last use";
  let description = [{
    Runs on the lowered step (after loom-lower-to-runtime), every function,
    callees first. Inserts `loomrt.free` after the last use of each buffer
    a function owns: its `loomrt.alloc`s and the results its callees hand
    over (an allocation of the callee that it returns once). What a
    function returns is not released there: it goes to the caller. A
    transfer (a `loomrt.memcpy` or a collective on a copy or comm stream,
    then `loomrt.record` on that stream) reads its buffers until that
    event is waited (`loomrt.wait`, `loomrt.sync`): the release follows
    the wait. One liveness analysis in Loom: the step simulation and the
    arena plan see these releases. A function that has releases already (a
    lowered module read back) is left as it is.

    Before:

    ```mlir
    %a = loomrt.alloc 1024
    %b = loomrt.alloc 1024
    loomrt.unary relu f32 %a -> %b n 256 on %s
    loomrt.wait %c for %ready
    loomrt.memcpy %h, %b, 1024 on %c
    %done = loomrt.record %c
    loomrt.wait %s for %done
    ```

    After (`%b` is read by the copy until its event is waited):

    ```mlir
    %a = loomrt.alloc 1024
    %b = loomrt.alloc 1024
    loomrt.unary relu f32 %a -> %b n 256 on %s
    loomrt.free %a
    loomrt.wait %c for %ready
    loomrt.memcpy %h, %b, 1024 on %c
    %done = loomrt.record %c
    loomrt.wait %s for %done
    loomrt.free %b
    ```
  }];
  let dependentDialects = ["mlir::loomrt::LoomRTDialect"];
}

def FormHostTasks : Pass<"loom-form-host-tasks", "ModuleOp"> {
  let summary = "Run the CPU's optimizer updates on the step's host thread";
  let description = [{
    Runs on the lowered step after loom-insert-frees, when loomc's
    `--host-thread` is on (the default for GPU targets with
    `--optimizer-offload`). Each run of host-stream updates (`loomrt.adam`,
    `loomrt.sgd`, the casts of their refreshed weights), with the host's
    `loomrt.sync` for the gradient copy they read and the copies of what
    they wrote (with their stream's wait before and event after), becomes
    one `loomrt.host_task`, issued where its last op was; its events are
    its results. The issuing thread keeps what orders its own work: the
    device buffers released after a moved sync are released after the
    compute stream waits for the same event (inside the backward, a few
    tasks later in an interleaved plan); a device buffer the copy read that
    is released further down (a ZeRO-3 gradient shard, whose release
    follows the wait for its reduce-scatter) gets the same wait before its
    release; and the host buffers a task uses
    after the next `loomrt.join`, which precedes the first use of a task's
    event outside tasks, anything else that touches what a task wrote, and
    the return. A function that has tasks already is left as it is.

    Before:

    ```mlir
    loomrt.sync %g_copied
    loomrt.adam %w, %g, %m, %v step %t on %h {...}
    loomrt.wait %h2d for %ready
    loomrt.memcpy %w_dev, %w, 32768 on %h2d
    %w_up = loomrt.record %h2d
    ```

    After:

    ```mlir
    %w_up = loomrt.host_task -> !loomrt.event {
      loomrt.sync %g_copied
      loomrt.adam %w, %g, %m, %v step %t on %h {...}
      loomrt.wait %h2d for %ready
      loomrt.memcpy %w_dev, %w, 32768 on %h2d
      %e = loomrt.record %h2d
      loomrt.yield %e
    }
    ```
  }];
  let dependentDialects = ["mlir::loomrt::LoomRTDialect"];
}

def ComposeCopies : Pass<"loom-compose-copies", "ModuleOp"> {
  let summary = "Compose a strided copy into a temporary with the copy out of it";
  let description = [{
    Runs on the lowered step (after loom-lower-to-runtime). A
    `loomrt.copy_strided` of `%a` into `%t`, followed on the same stream and
    in the same block by one of `%t` into `%d`, becomes one copy of `%a`
    into `%d` when

    * `%t` is a device allocation the first copy writes whole and densely,
      read by nothing but the second copy (and freed after it);
    * nothing between the two uses `%a`'s buffer (frees of it move after
      the composed copy), and `%d` is not in that buffer;
    * each dimension of the second copy steps within one digit of `%t`'s
      dense offset without carrying into the next (a dimension that steps
      through several digits at unit stride is split into them).

    The lowering makes such chains at every attention: a slice out of the
    fused qkv projection and its head transpose in the forward, the
    gradient's head transpose and its copy into the concatenated qkv
    gradient in the backward. Each composition saves a read and a write of
    the temporary. loomc's `--no-fuse` leaves the step as lowered.

    Before (q's slice of a [2, 16, 192] projection, then [B, T, H, D] to
    [B, H, T, D]):

    ```mlir
    %t = loomrt.alloc 4096
    loomrt.copy_strided %qkv [3072, 192, 1] -> %t [1024, 64, 1] shape [2, 16, 64] elem 2 on %s
    %q = loomrt.alloc 4096
    loomrt.copy_strided %t [1024, 16, 64, 1] -> %q [1024, 256, 16, 1] shape [2, 4, 16, 16] elem 2 on %s
    loomrt.free %t
    ```

    After:

    ```mlir
    %q = loomrt.alloc 4096
    loomrt.copy_strided %qkv [3072, 16, 192, 1] -> %q [1024, 256, 16, 1] shape [2, 4, 16, 16] elem 2 on %s
    ```
  }];
  let statistics = [
    Statistic<"composed", "composed", "Pairs of copies composed into one">,
  ];
  let dependentDialects = ["mlir::loomrt::LoomRTDialect"];
}

def FuseEpilogues : Pass<"loom-fuse-epilogues", "ModuleOp"> {
  let summary = "Fold a linear layer's bias add (loomrt.matmul_bias), a weight gradient's upcast into its bucket, or a GELU and its gradient into their GEMMs";
  let description = [{
    Runs on the lowered step (after loom-lower-to-runtime). A
    `loomrt.matmul` whose result the next call (comments, allocations and
    other buffers' releases aside) adds a bias to, on the same stream and
    in the same type, becomes one `loomrt.matmul_bias`, when

    * the add's other operand is a vector of `n` elements broadcast along
      the matmul's rows (shape `[1, ..., 1, n]`) computed before the matmul,
      or by a cast between the two whose input exists before the matmul
      (a recomputed block casts its bias there: the cast moves up);
    * the matmul writes its whole, contiguous `[batch, m, n]` result, read by
      nothing but the add (and freed);
    * both results are step-arena allocations of the same size.

    The add's result buffer is dropped and its readers read the matmul's.
    On CUDA, loomrt_matmul_bias adds the bias in cuBLASLt's epilogue (to the
    fp32 accumulator, before rounding to bf16); elsewhere it is the matmul
    and the add. loomc's `--no-fuse` leaves the step as lowered.

    Before:

    ```mlir
    %y = loomrt.alloc 12288
    loomrt.matmul bf16 %x, %w -> bf16 %y on %s {batch = 2 : i64, k = 64 : i64,
        m = 16 : i64, n = 192 : i64, stride_a = 1024 : i64, stride_b = 0 : i64,
        stride_c = 3072 : i64, trans_b}
    %z = loomrt.alloc 12288
    loomrt.binary add bf16 %y [2, 16, 192], %b [1, 1, 192] -> %z [2, 16, 192] on %s
    loomrt.free %y
    loomrt.unary gelu bf16 %z -> %g, 6144 on %s
    ```

    After:

    ```mlir
    %y = loomrt.alloc 12288
    loomrt.matmul_bias bf16 %x, %w bias %b -> bf16 %y on %s {batch = 2 : i64,
        k = 64 : i64, m = 16 : i64, n = 192 : i64, stride_a = 1024 : i64,
        stride_b = 0 : i64, stride_c = 3072 : i64, trans_b}
    loomrt.unary gelu bf16 %y -> %g, 6144 on %s
    ```

    Second pattern: a bf16 `loomrt.matmul` whose whole result the next
    call casts to fp32 into a slot of a larger buffer (`loomrt.view`: a
    gradient bucket, where data parallelism flattens mixed precision's
    weight gradients in fp32) writes fp32 into the slot itself, from its
    fp32 accumulator: the bf16 buffer, its rounding and the cast's pass go
    (the view and its buffer's allocation move up to the product). A cast
    into a buffer of its own is left alone: it feeds an update that the
    offload path feeds with the bf16 gradient itself, and offloaded and
    on-device steps stay equal bit for bit.

    ```mlir
    loomrt.matmul bf16 %dy, %x -> bf16 %g on %s {...}
    %slot = loomrt.view %bucket[4096]
    loomrt.cast bf16 %g -> f32 %slot, 1024 on %s
    ```

    becomes `loomrt.matmul bf16 %dy, %x -> f32 %slot on %s {...}`.

    Third and fourth: an activation with a GEMM epilogue (`gelu_tanh`,
    GPT-2's) joins its GEMMs. A `loomrt.matmul_bias` whose whole result the
    next call passes through the activation becomes one
    `loomrt.matmul_bias_act` that writes the activation into the unary's
    output and keeps its own result (the activation's input, which the
    gradient reads) as `aux`. A `loomrt.matmul` whose whole result the next
    call takes as `dy` of the activation's `loomrt.unary_grad` becomes one
    `loomrt.matmul_act_grad` writing the gradient's buffer (the product's
    buffer goes). On CUDA these are cuBLASLt's GELU_AUX_BIAS and DGELU
    epilogues, from the fp32 accumulator; elsewhere the GEMM and the
    elementwise call, as before. The erf form (`gelu`) has no epilogue and
    is left alone.

    ```mlir
    loomrt.matmul_bias bf16 %x, %w bias %b -> bf16 %h on %s {...}
    loomrt.unary gelu_tanh bf16 %h -> %g, 6144 on %s
    // ... the backward:
    loomrt.matmul bf16 %dy, %w2 -> bf16 %dg on %s {...}
    loomrt.unary_grad gelu_tanh bf16 %dg, %h -> %dh, 6144 on %s
    loomrt.free %dg
    ```

    becomes

    ```mlir
    loomrt.matmul_bias_act gelu_tanh bf16 %x, %w bias %b -> bf16 %g aux %h on %s {...}
    loomrt.matmul_act_grad gelu_tanh bf16 %dy, %w2 aux %h -> bf16 %dh on %s {...}
    ```
  }];
  let statistics = [
    Statistic<"fused", "fused",
              "Bias adds, upcasts and activations folded into their GEMMs">,
  ];
  let dependentDialects = ["mlir::loomrt::LoomRTDialect"];
}

def BatchUpdates : Pass<"loom-batch-updates", "ModuleOp"> {
  let summary = "Batch runs of Adam updates with one config into loomrt.adam_multi, reading bf16 gradients without their upcasts";
  let description = [{
    Runs on the lowered step (after loom-fuse). A run of `loomrt.adam`
    calls in one block with the same stream, step, gradient type,
    hyperparameters and freeze step, each with a bf16 refresh or none, and
    nothing between them but comments, globals, views and releases, becomes
    one `loomrt.adam_multi` where the run's last update stood; a release
    between of a buffer the run takes moves after it. Updates the host
    runs (`timed`) are left alone. On the GPU, loomrt_adam_multi updates up
    to 48 tensors a launch, each to the bits its own call gives: GPT-2's
    148 updates, most of a few thousand elements, were bound by the host's
    launches. loomc's `--no-fuse` leaves the updates apart.

    First, a function that returns a bf16 gradient cast up to fp32 (mixed
    precision's weight gradients) for updates alone (every caller's result
    is the gradient of `loomrt.adam` calls, and released) returns the bf16
    buffer itself: the cast and its fp32 buffer go and the updates read
    bf16 (`grad bf16`: loomrt_adam_bf16grad widens each element exactly as
    the cast did, so the bits are the same). GPT-2: 147 casts a step fewer.

    Then a working copy's refresh (loom-working-copies: a cast of the new
    weights to bf16 into a temporary copied whole to `@P.work`) casts into
    the global itself, and where the update just before it reads a bf16
    gradient and the cast reads its weights, the update writes the copy
    (`refresh`, rounded as the cast rounds): one pass over the weights
    instead of a cast and a copy.

    Before:

    ```mlir
    %p0 = loomrt.global @w0
    ...
    loomrt.adam %p0, %g0, %m0, %v0 step %t grad f32 on %s {n = 768 : i64, ...}
    loomrt.free %g0
    loomrt.adam %p1, %g1, %m1, %v1 step %t grad f32 on %s {n = 2359296 : i64, ...}
    loomrt.free %g1
    ```

    After:

    ```mlir
    loomrt.adam_multi (%p0, %p1), (%g0, %g1), (%m0, %m1), (%v0, %v1) step %t grad f32
        on %s {sizes = array<i64: 768, 2359296>, ...}
    loomrt.free %g0
    loomrt.free %g1
    ```
  }];
  let statistics = [
    Statistic<"batched", "batched", "loomrt.adam_multi calls made">,
  ];
  let dependentDialects = ["mlir::loomrt::LoomRTDialect"];
}

def FuseElementwise : Pass<"loom-fuse", "ModuleOp"> {
  let summary = "Fuse chains of elementwise calls into generated kernels (loomrt.fused_elementwise)";
  let description = [{
    Runs on the lowered step (after loom-fuse-epilogues). A run of adjacent
    calls (comments, allocations and frees between them aside) on one
    stream over the same number of elements, each after the first reading a
    buffer an earlier one wrote, becomes one `loomrt.fused_elementwise`:

    * `loomrt.unary`, `loomrt.unary_grad`, `loomrt.cast` between f32 and
      bf16, and `loomrt.binary` with one shape for both operands and the
      result (no broadcasting);
    * every buffer they touch a step-arena allocation (views and globals
      may alias, so they end a chain);
    * at most 8 inputs, 8 outputs and 48 instructions.

    The region loads each buffer the chain reads before writing it, keeps
    every intermediate value in fp32 registers, rounded to bf16 wherever the
    unfused call would have written bf16 (instruction 5, round: a fused
    region gives the unfused calls' bits, so what fuses, which changes with
    the schedule, never changes a number), and stores the last value of
    each buffer used after the chain; a buffer first written inside the
    chain and used only there (and freed) has no memory any more. The region
    takes the place of the chain's last call; the frees met on the way move
    after it. On CUDA the runtime compiles the region's generated kernel
    with NVRTC (`loomrt_fused_source`: its text is written beside
    `loomc --compile-to=cpp` output); elsewhere it interprets the program.
    loomc's `--no-fuse` (loom-pipeline `fuse=false`) leaves the step as
    lowered.

    Before (a SwiGLU: silu of the gate times the up projection):

    ```mlir
    %g = loomrt.alloc 8192
    loomrt.unary silu bf16 %gate -> %g, 4096 on %s
    %y = loomrt.alloc 8192
    loomrt.binary mul bf16 %g [4096], %up [4096] -> %y [4096] on %s
    loomrt.free %g
    ```

    After:

    ```mlir
    %y = loomrt.alloc 8192
    loomrt.fused_elementwise "fused_0" (%gate, %up) -> (%y), 4096 on %s {
        in_types = array<i32: 1, 1>, out_types = array<i32: 1>,
        program = array<i32: 0, 0, 0, 0, 0, 0, 1, 0, 1, 11, 0, 0, 5, 0, 2, 0,
                             2, 2, 3, 1, 5, 0, 4, 0, 4, 0, 0, 5>}
    ```
  }];
  let statistics = [
    Statistic<"fused", "fused", "Elementwise regions made">,
  ];
  let dependentDialects = ["mlir::loomrt::LoomRTDialect"];
}

def PlanArena : Pass<"loom-plan-arena", "ModuleOp"> {
  let summary = "Place the step's device buffers at offsets planned ahead (loomrt.alloc ... at)";
  let description = [{
    Runs on the lowered step, after fusion. A step is straight-line code,
    so every `loomrt.alloc` of device memory and its `loomrt.free` are known
    before the binary runs: this pass gives each buffer of the planned
    functions (@train_step and @train_step_frozen by default) a fixed offset
    (`at`) in one region whose size goes on the function as `loomrt.arena`.
    Two buffers whose lifetimes (from the allocation to the free, in the
    order the issuing thread reaches them) overlap never share a byte; a
    buffer freed inside a `loomrt.host_task` (on the host thread, later than
    its place in the block) or never freed keeps its bytes to the function's
    end.

    Placement is greedy by size (largest first, each at the lowest offset
    where it meets no placed buffer alive at the same time): the offline
    dynamic-storage-allocation heuristic of TensorFlow Lite's and XLA's
    buffer assignment. The runtime's arena places buffers online, best fit,
    in 64 MiB blocks, and cannot know what comes later: on the 6.7B
    Llama-style step with the optimizer interleaved it reserves 30.7 GiB
    where at most 18.2 GiB are in use at once; the plan needs 18.5 GiB.
    The step simulation charges the plan's size, so the offload planner
    spends what the plan saves on resident optimizer state.

    Host buffers, functions that call others and buffers already placed are
    left to the runtime. loomc's `--arena=online` skips the pass.

    Before:

    ```mlir
    func.func @train_step(...) {
      %a = loomrt.alloc 4096
      %b = loomrt.alloc 1024
      loomrt.free %a
      %c = loomrt.alloc 2048
      ...
    }
    ```

    After (%c reuses %a's bytes):

    ```mlir
    func.func @train_step(...) attributes {loomrt.arena = 5120 : i64} {
      %a = loomrt.alloc 4096 at 0
      %b = loomrt.alloc 1024 at 4096
      loomrt.free %a
      %c = loomrt.alloc 2048 at 0
      ...
    }
    ```
  }];
  let options = [
    ListOption<"functions", "functions", "std::string",
               "The functions to plan (default: train_step, train_step_frozen)">,
  ];
  let statistics = [
    Statistic<"planned", "planned", "Buffers given a planned offset">,
  ];
  let dependentDialects = ["mlir::loomrt::LoomRTDialect"];
}

def CaptureGraphs : Pass<"loom-capture-graphs", "ModuleOp"> {
  let summary = "Mark the lowered functions the runtime may capture once as a graph and replay";
  let description = [{
    Runs last on the lowered step (after loom-plan-arena). A function whose
    calls would be issued the same way every step is marked `loomrt.graph`;
    code generation then issues it through `loomrt_step_graph`, which on a
    GPU captures it (CUDA graphs, hipGraph) on its second call and replays
    the graph afterwards instead of launching each kernel: GPT-2's forward
    and backward are ~1,000 kernels, and the H200's compute stream idles
    2.5-2.7 us between two kernels launched apart. Every other function
    gets `loomrt.graph_declined` with the first reason, so the choice can be
    read in `loomc --compile-to=lowered`.

    A function qualifies when it holds only kernels and copies on the
    compute stream (`loomrt.stream compute`), globals, views, comments,
    releases, buffers at planned offsets in device memory (`loomrt.alloc
    ... at`), and calls of functions that qualify. It does not with
    anything the host computes or waits for each step (the step counter,
    `loomrt.read_i64`, dropout keys, updates with the step's learning
    rate), another stream, events, collectives, host tasks, or a buffer
    the runtime places (constants are copied from a device copy the runtime
    makes once: `loomrt_step_const`); nor when it is called more than once
    a step (each micro-batch's forward and backward reads other inputs,
    and the runtime keeps one graph a function). The
    runtime checks the rest each call: the globals, inputs and planned
    region must be those of the capture, or it captures again. On the CPU
    the runtime runs the function as it is. loomc's `--no-graphs` skips
    the pass.

    Before:

    ```mlir
    func.func @forward_backward(%arg0: !loomrt.buffer) -> !loomrt.buffer {
      %s = loomrt.stream compute
      %w = loomrt.global @w
      %y = loomrt.alloc 4096 at 0
      loomrt.cast f32 %w -> bf16 %y, 2048 on %s
      return %y : !loomrt.buffer
    }
    func.func @train_step(%arg0: !loomrt.buffer) -> !loomrt.buffer {
      %s = loomrt.stream compute
      %t = loomrt.read_i64 %arg0 on %s
      ...
    }
    ```

    After:

    ```mlir
    func.func @forward_backward(%arg0: !loomrt.buffer) -> !loomrt.buffer
        attributes {loomrt.graph} {...}
    func.func @train_step(%arg0: !loomrt.buffer) -> !loomrt.buffer
        attributes {loomrt.graph_declined = "the host reads a value back ('loomrt.read_i64')"} {...}
    ```
  }];
  let statistics = [
    Statistic<"captured", "captured", "Functions marked capturable">,
  ];
  let dependentDialects = ["mlir::loomrt::LoomRTDialect"];
}

#endif // LOOM_PASSES_LOOMRT_TD
