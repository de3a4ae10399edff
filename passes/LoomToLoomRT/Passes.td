//===- Passes.td - the conversion of loom IR to loomrt runtime calls, and the step simulation of a loom module ===//
#ifndef LOOM_PASSES_LOOMTOLOOMRT_TD
#define LOOM_PASSES_LOOMTOLOOMRT_TD

include "mlir/Pass/PassBase.td"

def SimulateStep : Pass<"loom-simulate-step", "ModuleOp"> {
  let summary = "Predict one training step on a machine (the cost model's step simulation)";
  let description = [{
    An analysis: it changes nothing and prints what one `@train_step` costs
    on `hardware`. A lowered module (`loomrt` IR) is priced as it is; a
    `loom` module is lowered first, on a copy. The host walks the step in
    order: a call on the compute stream is issued (a launch of host time)
    and runs on the device's roofline of the bytes and flops it declares
    (`loomrt::WorkOpInterface`), a copy runs on its copy engine, a
    collective on the link, a call on the host stream on the host; events
    and waits order the streams. The step arena's size comes from the
    module's own `loomrt.alloc` / `loomrt.free` placed by the runtime's
    arena policy. `loomc` prints the same prediction; docs/cost-model.md
    says what it models and what it does not.

    ```mlir
    %s = loomrt.stream compute
    %x = loomrt.stream d2h
    %a = loomrt.alloc 1000000
    loomrt.fill f32 %a, 0.0, 250000 on %s
    %e = loomrt.record %s
    loomrt.wait %x for %e
    loomrt.memcpy %h, %a, 2000000 on %x
    ```

    prints (1 GB/s of HBM and of PCIe)

    ```
    loom-simulate-step: @train_step on 'slow': step 3.004e-03 s, last gradient 0.000e+00 s, ...
    ```
  }];
  let options = [
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
    Option<"hardware", "hardware", "std::string", /*default=*/"\"h100\"",
           "A hardware preset (h100, cpu-host) or a description file from "
           "loom-calibrate">,
    Option<"timeline", "timeline", "std::string", /*default=*/"\"\"",
           "Also write the predicted schedule as a Chrome trace to this file">,
  ];
}

def LowerToRuntime : Pass<"loom-lower-to-runtime", "ModuleOp"> {
  let summary = "Lower a training step to loomrt runtime calls";
  let description = [{
    Rewrites @train_step and the functions it calls into the `loomrt`
    dialect: every tensor becomes a `!loomrt.buffer`, every op the runtime
    call(s) that compute it, and every decision code generation needs is
    made here and written into the IR (docs/codegen.md, "Lowering"):

    * memory: a `loomrt.alloc` from the step arena per result, except
      aliases (reshape, a ZeRO shard, a reduction's last step), loads (the
      global's buffer, `loomrt.global`) and values stored whole into a
      global once (computed there); a `loomrt.free` after the last use of
      every buffer a function owns, a transfer's input staying in use until
      its event is waited;
    * streams and events: kernels on the compute stream, work on host
      memory on the host stream, copies on the stream of their direction,
      collectives on the comm stream, each after an event of the compute
      stream and followed by its own event (the op's `!loom.token`);
    * updates: Adam and SGD in place on the globals' buffers when the update
      reads each state symbol and stores it straight back, and Adam's bf16
      cast of the new weights fused into the update;
    * attention: where the GPU's fused kernels take the shape
      (`loomrt_attention_fused`), a `loom.attention` and the
      `loom.attention_grad` of the same query, key and value become
      `loomrt.attention_save` and `loomrt.attention_grad_saved`: the output
      and each row's log-sum-exp stay alive until the gradient, which does
      not run the forward again;
    * the host thread (module attribute `loom.host_thread`, loomc
      `--host-thread`): each CPU update, with the host's wait for its
      gradient and the copy of its refreshed weights, becomes a
      `loomrt.host_task` issued where it was; `loomrt.join` precedes the
      first use of a task's event outside tasks and the return, and the
      host buffers tasks read go back after it; the compute stream waits
      for an offloaded gradient's copy before the gradient is released (in
      an interleaved plan four tasks later, else at the backward's end).

    Functions the entry (`entry`, @train_step by default) does not reach
    are removed. Each lowered op is
    preceded by `loomrt.comment` with its loom text, and @train_step gets
    `loomrt.program` ({batch, seq, vocab, world, zero_stage}) when it trains
    a language model from token files. IR the runtime cannot run (element
    types other than f32/bf16/i64/i1, compute on host memory other than
    updates and copies, sub-group collectives, zero-sized tensors) is
    refused with an error on the op.

    Before:

    ```mlir
    func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
      %0 = loom.exp %x : tensor<4xf32>
      %1 = loom.neg %0 : tensor<4xf32>
      return %1 : tensor<4xf32>
    }
    ```

    After:

    ```mlir
    func.func @f(%x: !loomrt.buffer) -> !loomrt.buffer {
      %s = loomrt.stream compute
      loomrt.comment "%0 = loom.exp %arg0 : tensor<4xf32>"
      %0 = loomrt.alloc 16
      loomrt.unary exp f32 %x -> %0, 4 on %s
      loomrt.comment "%1 = loom.neg %0 : tensor<4xf32>"
      %1 = loomrt.alloc 16
      loomrt.unary neg f32 %0 -> %1, 4 on %s
      loomrt.free %0
      return %1 : !loomrt.buffer
    }
    ```
  }];
  let options = [
    Option<"entry", "entry", "std::string", /*default=*/"\"train_step\"",
           "The function to lower with the functions it calls (the reference "
           "executor lowers the one it runs)">,
    Option<"comments", "comments", "bool", /*default=*/"true",
           "Put each loom op's text before its calls (loomrt.comment); the "
           "step simulation lowers its copies without them">,
  ];
  let dependentDialects = ["mlir::loomrt::LoomRTDialect"];
}

#endif // LOOM_PASSES_LOOMTOLOOMRT_TD
