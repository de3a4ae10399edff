// RUN: loom-opt %s -split-input-file --loom-lower-to-runtime --loom-insert-frees -verify-diagnostics | FileCheck %s
// Round trip: the lowered IR parses, verifies and lowers to itself.
// RUN: loom-opt %s -split-input-file --loom-lower-to-runtime --loom-insert-frees 2>/dev/null | loom-opt --loom-lower-to-runtime --loom-insert-frees | FileCheck %s --check-prefix=RT

// Buffers: one per result from the step arena, freed right after the last
// use of every value naming it (a reshape aliases its input, so %e lives
// until the sigmoid); a value nobody reads is freed at once. Functions
// @train_step does not reach go. A collective runs on the comm stream
// after an event of the compute stream; its token is the event after it,
// and its input (here a global: never freed) and output live until the
// wait. The Adam update runs in place on the globals (its stores vanish),
// and reads the step counter's host copy.
loom.topology @world ["rank" = 2]
loom.param @w : tensor<4x4xf32> init #loom.init<normal(0.0, 0.02)>
loom.state @w.m : tensor<4x4xf32> role adam_m of @w init #loom.init<zeros>
loom.state @w.v : tensor<4x4xf32> role adam_v of @w init #loom.init<zeros>
loom.state @step : tensor<i64> role step init #loom.init<zeros>

func.func @unused(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = loom.neg %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

func.func @train_step(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %w = loom.load @w : tensor<4x4xf32>
  %h = loom.matmul %x, %w : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %e = loom.exp %h : tensor<2x4xf32>
  %r = loom.reshape %e : tensor<2x4xf32> to tensor<8xf32>
  %n = loom.neg %r : tensor<8xf32>
  %g, %t = loom.all_reduce %w over #loom.group<@world, ["rank"]> reduce mean on comm : tensor<4x4xf32> -> tensor<4x4xf32>
  %o = loom.sigmoid %e : tensor<2x4xf32>
  loom.wait %t
  %one = arith.constant dense<1> : tensor<i64>
  %s0 = loom.load @step : tensor<i64>
  %s = arith.addi %s0, %one : tensor<i64>
  loom.store %s to @step : tensor<i64>
  %m = loom.load @w.m : tensor<4x4xf32>
  %v = loom.load @w.v : tensor<4x4xf32>
  %w2 = loom.load @w : tensor<4x4xf32>
  %p2, %m2, %v2 = loom.adam %w2, %g, %m, %v step %s {lr = 1.0e-3 : f64} : tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<i64>
  loom.store %p2 to @w : tensor<4x4xf32>
  loom.store %m2 to @w.m : tensor<4x4xf32>
  loom.store %v2 to @w.v : tensor<4x4xf32>
  return %o : tensor<2x4xf32>
}

// CHECK-NOT: @unused
// CHECK-LABEL: func.func @train_step(%{{.*}}: !loomrt.buffer) -> !loomrt.buffer
// CHECK-DAG: %[[S:.+]] = loomrt.stream compute
// CHECK-DAG: %[[COMM:.+]] = loomrt.comm
// CHECK-DAG: %[[CS:.+]] = loomrt.stream comm
// CHECK: loomrt.comment "%0 = loom.load @w : tensor<4x4xf32>"
// CHECK-NEXT: %[[W:.+]] = loomrt.global @w
// CHECK: %[[H:.+]] = loomrt.alloc 32
// CHECK-NEXT: loomrt.matmul f32 %{{.*}}, %[[W]] -> f32 %[[H]] on %[[S]] {batch = 1 : i64, k = 4 : i64, m = 2 : i64, n = 4 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 8 : i64}
// CHECK: %[[E:.+]] = loomrt.alloc 32
// CHECK-NEXT: loomrt.unary exp f32 %[[H]] -> %[[E]], 8 on %[[S]]
// CHECK-NEXT: loomrt.free %[[H]]
// CHECK: loomrt.comment "%3 = loom.reshape
// CHECK-NEXT: loomrt.comment "%4 = loom.neg
// CHECK-NEXT: %[[N:.+]] = loomrt.alloc 32
// CHECK-NEXT: loomrt.unary neg f32 %[[E]] -> %[[N]], 8 on %[[S]]
// CHECK-NEXT: loomrt.free %[[N]]
// CHECK: %[[G:.+]] = loomrt.alloc 64
// CHECK-NEXT: %[[READY:.+]] = loomrt.record %[[S]]
// CHECK-NEXT: loomrt.wait %[[CS]] for %[[READY]]
// CHECK-NEXT: loomrt.all_reduce mean f32 %[[W]] -> %[[G]], 16 over %[[COMM]] on %[[CS]]
// CHECK-NEXT: %[[TOK:.+]] = loomrt.record %[[CS]]
// CHECK: loomrt.unary sigmoid f32 %[[E]] -> %[[O:.+]], 8 on %[[S]]
// CHECK-NEXT: loomrt.free %[[E]]
// CHECK-NEXT: loomrt.backward_done
// CHECK-NEXT: loomrt.comment "loom.wait
// CHECK-NEXT: loomrt.wait %[[S]] for %[[TOK]]
// CHECK: loomrt.write_const %[[ONE:.+]], dense<1> : tensor<i64> on %[[S]]
// CHECK: %[[T:.+]] = loomrt.add_i64 %{{.*}}, %[[ONE]] -> %[[TB:.+]] on %[[S]]
// CHECK-NEXT: loomrt.free %[[ONE]]
// CHECK: loomrt.memcpy %{{.*}}, %[[TB]], 8 on %[[S]]
// CHECK-NEXT: loomrt.free %[[TB]]
// CHECK: loomrt.adam %[[W2:.+]], %[[G]], %[[M:.+]], %[[V:.+]] step %[[T]] grad f32 on %[[S]] {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, n = 16 : i64, weight_decay = 0.000000e+00 : f64}
// CHECK-NEXT: loomrt.free %[[G]]
// CHECK-NOT: loomrt.memcpy
// CHECK: return %[[O]] : !loomrt.buffer

// RT-LABEL: func.func @train_step
// RT: loomrt.all_reduce mean f32
// RT: loomrt.adam
