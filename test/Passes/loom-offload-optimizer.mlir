// RUN: loom-opt %s --split-input-file --verify-diagnostics --loom-offload-optimizer | FileCheck %s
// static:1 keeps every parameter's state on the device: nothing moves.
// RUN: loom-opt %s --split-input-file --verify-diagnostics --loom-offload-optimizer=mode=static:1 | FileCheck %s --check-prefix=KEEP
// RUN: not loom-opt %s --split-input-file --loom-offload-optimizer=mode=static:1.5 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not loom-opt %s --split-input-file --loom-offload-optimizer=mode=subgroups 2>&1 | FileCheck %s --check-prefix=NOSG
// KEEP: loom.param @a : tensor<3x2xf32> init #loom.init<ones>
// KEEP: func.func @forward_backward
// KEEP-NOT: loom.copy
// KEEP-NOT: mem<pinned>
// BAD: static:R needs a fraction R in [0, 1], got 'static:1.5'
// NOSG: '@a' belongs to no loom.subgroup (run loom-optimizer-subgroups)

// mode=cpu. @a is read only through a cast to bf16: its working copy is
// bf16 and its gradient leaves the backward as bf16. @b is read as f32: an
// f32 working copy.
// CHECK: loom.param @a : tensor<3x2xf32, #loom.mem<pinned>> init #loom.init<ones>
// CHECK-NEXT: loom.state @a.work : tensor<3x2xbf16> role other init #loom.init<zeros> {loom.mirror_of = @a}
// CHECK-NEXT: loom.param @b : tensor<3xf32, #loom.mem<pinned>> init #loom.init<zeros>
// CHECK-NEXT: loom.state @b.work : tensor<3xf32> role other init #loom.init<zeros> {loom.mirror_of = @b}
// CHECK-NEXT: loom.state @a.exp_avg : tensor<3x2xf32, #loom.mem<pinned>>
// The backward is inlined into the step.
// CHECK-NOT: func.func @forward_backward
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: attributes {loom.optimizer_offload = #loom.optimizer_offload<cpu>}
// CHECK: %[[A:.*]] = loom.load @a.work : tensor<3x2xbf16>
// CHECK-NEXT: loom.matmul %arg0, %[[A]] transpose_rhs
// CHECK: %[[B:.*]] = loom.load @b.work : tensor<3xf32>
// Each gradient goes to the host as soon as it exists: @b's first.
// CHECK: %[[GB:.*]] = loom.reduce sum
// CHECK-NEXT: %[[GBH:.*]], %[[TB:.*]] = loom.copy %[[GB]] on d2h : tensor<3xf32> -> tensor<3xf32, #loom.mem<pinned>>
// CHECK: %[[GA:.*]] = loom.matmul {{.*}} -> tensor<3x2xbf16>
// CHECK-NEXT: %[[GAH:.*]], %[[TA:.*]] = loom.copy %[[GA]] on d2h : tensor<3x2xbf16> -> tensor<3x2xbf16, #loom.mem<pinned>>
// CHECK-NOT: loom.cast
// The CPU updates, in the order their gradients land, each after waiting
// only for its own gradient; @a's reads the bf16 gradient and refreshes the
// bf16 working copy.
// CHECK: loom.wait %[[TB]]
// CHECK-NEXT: %[[NB:.*]], %{{.*}}, %{{.*}} = loom.adam %{{.*}}, %[[GBH]], {{.*}} : tensor<3xf32, #loom.mem<pinned>>, tensor<3xf32, #loom.mem<pinned>>
// CHECK-NEXT: loom.store %[[NB]] to @b
// CHECK-NEXT: loom.store
// CHECK-NEXT: loom.store
// CHECK-NEXT: %[[DB:.*]], %[[RB:.*]] = loom.copy %[[NB]] on h2d : tensor<3xf32, #loom.mem<pinned>> -> tensor<3xf32>
// CHECK-NEXT: loom.wait %[[TA]]
// CHECK-NEXT: %[[NA:.*]], %{{.*}}, %{{.*}} = loom.adam %{{.*}}, %[[GAH]], {{.*}} : tensor<3x2xf32, #loom.mem<pinned>>, tensor<3x2xbf16, #loom.mem<pinned>>
// CHECK: %[[NAB:.*]] = loom.cast %[[NA]] : tensor<3x2xf32, #loom.mem<pinned>> to tensor<3x2xbf16, #loom.mem<pinned>>
// CHECK-NEXT: %[[DA:.*]], %[[RA:.*]] = loom.copy %[[NAB]] on h2d : tensor<3x2xbf16, #loom.mem<pinned>> -> tensor<3x2xbf16>
// The next forward reads the working copies: the compute stream waits for
// them before the step ends.
// CHECK-NEXT: loom.wait %[[RB]], %[[RA]]
// CHECK-NEXT: loom.store %[[DB]] to @b.work
// CHECK-NEXT: loom.store %[[DA]] to @a.work
// CHECK-NEXT: return
loom.param @a : tensor<3x2xf32> init #loom.init<ones>
loom.param @b : tensor<3xf32> init #loom.init<zeros>
loom.state @a.exp_avg : tensor<3x2xf32> role adam_m of @a init #loom.init<zeros>
loom.state @a.exp_avg_sq : tensor<3x2xf32> role adam_v of @a init #loom.init<zeros>
loom.state @b.exp_avg : tensor<3xf32> role adam_m of @b init #loom.init<zeros>
loom.state @b.exp_avg_sq : tensor<3xf32> role adam_v of @b init #loom.init<zeros>
loom.state @optimizer.step : tensor<i64> role step init #loom.init<zeros>
func.func @forward_backward(%x: tensor<4x2xbf16>, %y: tensor<4xi64>) -> (tensor<f32>, tensor<3x2xf32>, tensor<3xf32>) attributes {loom.grad_params = [@a, @b]} {
  %a = loom.load @a : tensor<3x2xf32>
  %ab = loom.cast %a : tensor<3x2xf32> to tensor<3x2xbf16>
  %h = loom.matmul %x, %ab transpose_rhs : tensor<4x2xbf16>, tensor<3x2xbf16> -> tensor<4x3xf32>
  %b = loom.load @b : tensor<3xf32>
  %o = loom.add %h, %b : tensor<4x3xf32>, tensor<3xf32> -> tensor<4x3xf32>
  %l = loom.cross_entropy %o, %y : tensor<4x3xf32>, tensor<4xi64> -> tensor<f32>
  %one = arith.constant dense<1.0> : tensor<f32>
  %g = loom.cross_entropy_grad %o, %y, %one : tensor<4x3xf32>, tensor<4xi64>, tensor<f32> -> tensor<4x3xf32>
  %gb = loom.reduce sum %g [0] : tensor<4x3xf32> to tensor<3xf32>
  %g16 = loom.cast %g : tensor<4x3xf32> to tensor<4x3xbf16>
  %gab = loom.matmul %g16, %x transpose_lhs : tensor<4x3xbf16>, tensor<4x2xbf16> -> tensor<3x2xbf16>
  %ga = loom.cast %gab : tensor<3x2xbf16> to tensor<3x2xf32>
  return %l, %ga, %gb : tensor<f32>, tensor<3x2xf32>, tensor<3xf32>
}
func.func @train_step(%x: tensor<4x2xbf16>, %y: tensor<4xi64>) -> tensor<f32> {
  %r:3 = call @forward_backward(%x, %y) : (tensor<4x2xbf16>, tensor<4xi64>) -> (tensor<f32>, tensor<3x2xf32>, tensor<3xf32>)
  %s0 = loom.load @optimizer.step : tensor<i64>
  %c1 = arith.constant dense<1> : tensor<i64>
  %s = arith.addi %s0, %c1 : tensor<i64>
  loom.store %s to @optimizer.step : tensor<i64>
  %a = loom.load @a : tensor<3x2xf32>
  %am = loom.load @a.exp_avg : tensor<3x2xf32>
  %av = loom.load @a.exp_avg_sq : tensor<3x2xf32>
  %a2, %am2, %av2 = loom.adam %a, %r#1, %am, %av step %s {decoupled, lr = 1.0e-03 : f64, weight_decay = 1.0e-02 : f64} : tensor<3x2xf32>, tensor<3x2xf32>, tensor<3x2xf32>, tensor<3x2xf32>, tensor<i64>
  loom.store %a2 to @a : tensor<3x2xf32>
  loom.store %am2 to @a.exp_avg : tensor<3x2xf32>
  loom.store %av2 to @a.exp_avg_sq : tensor<3x2xf32>
  %b = loom.load @b : tensor<3xf32>
  %bm = loom.load @b.exp_avg : tensor<3xf32>
  %bv = loom.load @b.exp_avg_sq : tensor<3xf32>
  %b2, %bm2, %bv2 = loom.adam %b, %r#2, %bm, %bv step %s {decoupled, lr = 1.0e-03 : f64, weight_decay = 1.0e-02 : f64} : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<i64>
  loom.store %b2 to @b : tensor<3xf32>
  loom.store %bm2 to @b.exp_avg : tensor<3xf32>
  loom.store %bv2 to @b.exp_avg_sq : tensor<3xf32>
  return %r#0 : tensor<f32>
}
