// loom-form-host-tasks on its own: the host tasks of a lowered step with
// --host-thread are those loomc's lowering pipeline makes, none are made
// without the pass, and a module that has its tasks is left as it is.
// RUN: loomc --model gpt:layers=1,d_model=16,heads=2,vocab=64,seq=8,batch=2 --optimizer-offload=cpu --target=cuda --host-thread=on --no-fuse --no-graphs --arena=online --compile-to=optimizer -o %t.loom.mlir 2>/dev/null
// RUN: loomc --model gpt:layers=1,d_model=16,heads=2,vocab=64,seq=8,batch=2 --optimizer-offload=cpu --target=cuda --host-thread=on --no-fuse --no-graphs --arena=online --compile-to=lowered -o %t.lowered.mlir 2>/dev/null
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

// ZeRO-3: a gradient shard is the reduce-scatter's result and the source
// of its copy to the host. Its release follows the compute stream's wait
// for the reduce-scatter (a layer later), so the host task's sync for the
// copy no longer orders it: the compute stream waits for the copy too
// before the shard goes back. Without that wait the next reduce-scatter
// wrote into the shard while the copy still read it (a 13B model on 2
// H200s: the cpu and interleaved plans parted at step 3).
// RUN: loomc --model gpt:layers=2,d_model=16,heads=2,vocab=64,seq=8,batch=4 --optimizer-offload=cpu --target=cuda --topology=gpu=2 --zero-stage=3 --host-thread=on --no-fuse --no-graphs --arena=online --bucket-size=1000 --compile-to=lowered -o %t.zero3.mlir 2>/dev/null
// RUN: FileCheck %s --check-prefix=ZERO3 < %t.zero3.mlir
// ZERO3: loomrt.reduce_scatter mean f32 %{{[0-9]+}} -> %[[G:[0-9]+]], {{[0-9]+}} over %{{[0-9]+}} on %{{[0-9]+}}
// ZERO3: loomrt.memcpy %{{[0-9]+}}, %[[G]], {{[0-9]+}} on %[[Y:[0-9]+]]
// ZERO3-NEXT: %[[E:[0-9]+]] = loomrt.record %[[Y]]
// ZERO3: loomrt.sync %[[E]]
// ZERO3-NOT: loomrt.free %[[G]]{{$}}
// ZERO3: loomrt.wait %{{[0-9]+}} for %[[E]]
// ZERO3-NEXT: loomrt.free %[[G]]{{$}}
