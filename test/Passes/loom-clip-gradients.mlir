// RUN: loom-opt %s --split-input-file --verify-diagnostics --loom-clip-gradients=max-norm=0.5 | FileCheck %s
// Both gradients' squares summed, the norm stored, each gradient scaled by
// min(1, 0.5 / (norm + 1e-6)) just before its update (one rank: no
// all-reduce).
// CHECK: loom.state @optimizer.grad_norm : tensor<f32> role other
// CHECK-LABEL: func.func @train_step
// CHECK: %[[R:.*]]:3 = call @forward_backward
// CHECK: %[[SA:.*]] = loom.mul %[[R]]#1, %[[R]]#1
// CHECK-NEXT: %[[TA:.*]] = loom.reduce sum %[[SA]] [0, 1] : tensor<3x2xf32> to tensor<f32>
// CHECK-NEXT: %[[SB:.*]] = loom.mul %[[R]]#2, %[[R]]#2
// CHECK-NEXT: %[[TB:.*]] = loom.reduce sum %[[SB]] [0] : tensor<3xf32> to tensor<f32>
// CHECK-NEXT: %[[T:.*]] = loom.add %[[TA]], %[[TB]]
// CHECK-NEXT: %[[N:.*]] = loom.sqrt %[[T]] : tensor<f32>
// CHECK: %[[C:.*]] = loom.min
// CHECK-NEXT: loom.store %[[N]] to @optimizer.grad_norm
// CHECK: %[[GA:.*]] = loom.mul %[[R]]#1, %[[C]] : tensor<3x2xf32>, tensor<f32> -> tensor<3x2xf32>
// CHECK-NEXT: loom.adam %{{.*}}, %[[GA]],
// CHECK: %[[GB:.*]] = loom.mul %[[R]]#2, %[[C]] : tensor<3xf32>, tensor<f32> -> tensor<3xf32>
// CHECK-NEXT: loom.adam %{{.*}}, %[[GB]],
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

// -----

// A step with no Adam update is refused.
func.func @forward_backward(%x: tensor<3xf32>) -> (tensor<f32>, tensor<3xf32>) {
  %c = arith.constant dense<1.0> : tensor<f32>
  return %c, %x : tensor<f32>, tensor<3xf32>
}
loom.param @w : tensor<3xf32> init #loom.init<zeros>
loom.state @w.momentum_buf : tensor<3xf32> role momentum of @w init #loom.init<zeros>
// expected-error @+1 {{loom-clip-gradients: clips the gradients Adam reads: the step has no loom.adam (--optimizer=adam|adamw)}}
func.func @train_step(%x: tensor<3xf32>) -> tensor<f32> {
  %r:2 = call @forward_backward(%x) : (tensor<3xf32>) -> (tensor<f32>, tensor<3xf32>)
  %w = loom.load @w : tensor<3xf32>
  %b = loom.load @w.momentum_buf : tensor<3xf32>
  %p, %m = loom.sgd %w, %r#1, %b {lr = 0.1 : f64, momentum = 0.9 : f64} : tensor<3xf32>
  loom.store %p to @w : tensor<3xf32>
  loom.store %m to @w.momentum_buf : tensor<3xf32>
  return %r#0 : tensor<f32>
}
