// loom-form-host-tasks on its own: the host tasks of a lowered step with
// --host-thread are those loomc's lowering pipeline makes, none are made
// without the pass, and a module that has its tasks is left as it is.
// RUN: loomc --model gpt:layers=1,d_model=16,heads=2,vocab=64,seq=8,batch=2 --optimizer-offload=cpu --target=cuda --host-thread=on --no-fuse --arena=online --compile-to=optimizer -o %t.loom.mlir 2>/dev/null
// RUN: loomc --model gpt:layers=1,d_model=16,heads=2,vocab=64,seq=8,batch=2 --optimizer-offload=cpu --target=cuda --host-thread=on --no-fuse --arena=online --compile-to=lowered -o %t.lowered.mlir 2>/dev/null
// RUN: loom-opt %t.loom.mlir --loom-lower-to-runtime --loom-insert-frees -o %t.notask.mlir
// RUN: not grep -q loomrt.host_task %t.notask.mlir
// RUN: loom-opt %t.notask.mlir --loom-form-host-tasks -o %t.tasks.mlir
// RUN: diff -B %t.tasks.mlir %t.lowered.mlir
// RUN: loom-opt %t.lowered.mlir --loom-form-host-tasks -o %t.twice.mlir
// RUN: diff -B %t.twice.mlir %t.lowered.mlir
// RUN: FileCheck %s < %t.tasks.mlir

// Each update runs in a task with the host's wait for its gradient's copy
// and the copy of its refreshed weights; the issuing thread joins the
// tasks before the step returns.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[T:[0-9]+]] = loomrt.host_task -> !loomrt.event {
// CHECK-NEXT: loomrt.sync
// CHECK-NEXT: loomrt.adam
// CHECK: loomrt.memcpy
// CHECK-NEXT: %[[E:[0-9]+]] = loomrt.record
// CHECK-NEXT: loomrt.yield %[[E]]
// CHECK-NEXT: }
// CHECK: loomrt.join
// CHECK-NOT: loomrt.host_task
// CHECK: return
