// loom-insert-frees on its own: the releases of a lowered step are those
// loomc's lowering pipeline makes (a model with offloaded updates, so
// transfers to and from the host hold their buffers until their events are
// waited), and a module that has its releases is left as it is.
// RUN: loomc --model gpt:layers=1,d_model=16,heads=2,vocab=64,seq=8,batch=2 --optimizer-offload=cpu --target=cuda --host-thread=off --no-fuse --no-graphs --arena=online --compile-to=optimizer -o %t.loom.mlir 2>/dev/null
// RUN: loomc --model gpt:layers=1,d_model=16,heads=2,vocab=64,seq=8,batch=2 --optimizer-offload=cpu --target=cuda --host-thread=off --no-fuse --no-graphs --arena=online --compile-to=lowered -o %t.lowered.mlir 2>/dev/null
// RUN: loom-opt %t.loom.mlir --loom-lower-to-runtime -o %t.nofree.mlir
// RUN: loom-opt %t.nofree.mlir --loom-insert-frees -o %t.freed.mlir
// RUN: diff -B %t.freed.mlir %t.lowered.mlir
// RUN: loom-opt %t.lowered.mlir --loom-insert-frees -o %t.twice.mlir
// RUN: diff -B %t.twice.mlir %t.lowered.mlir
// RUN: not grep -q loomrt.free %t.nofree.mlir
// RUN: FileCheck %s < %t.freed.mlir

// A gradient goes to the host by a copy on the d2h stream; its device
// buffer is released after the host waits for that copy's event, not
// after the copy is issued.
// CHECK-LABEL: func.func @train_step
// CHECK: loomrt.comment "%result, %token = loom.copy %grad_bias on d2h
// CHECK: loomrt.memcpy %{{[0-9]+}}, %[[G:[0-9]+]], 64 on %[[D2H:[0-9]+]]
// CHECK-NEXT: %[[E:[0-9]+]] = loomrt.record %[[D2H]]
// CHECK-NOT: loomrt.free %[[G]]{{$}}
// CHECK: loomrt.sync %[[E]]
// CHECK-NEXT: loomrt.free %[[G]]{{$}}

// Insert-frees runs on loomrt IR and nothing else.
// RUN: loom-opt %t.loom.mlir --loom-insert-frees | FileCheck %s --check-prefix=LOOM
// LOOM-NOT: loomrt.free
