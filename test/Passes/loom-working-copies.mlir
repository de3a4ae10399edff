// RUN: loom-opt %s --loom-working-copies | FileCheck %s
// RUN: loom-opt %s --loom-working-copies --loom-pipeline="from=optimizer to=lowered" | FileCheck %s --check-prefix=LOWERED
// loom-working-copies: @a is read through a bf16 cast and updated by Adam on
// the device, so its reader takes a bf16 working copy that the update
// refreshes; @b is read in fp32 and keeps its load.
// CHECK: loom.param @a : tensor<3x2xf32>
// CHECK-NEXT: loom.state @a.work : tensor<3x2xbf16> role other init #loom.init<zeros> {loom.mirror_of = @a}
// CHECK-NOT: @b.work
// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[W:.+]] = loom.load @a.work : tensor<3x2xbf16>
// CHECK-NOT: loom.cast %{{.+}} : tensor<3x2xf32> to tensor<3x2xbf16>
// CHECK: loom.matmul %{{.+}}, %[[W]] transpose_rhs
// CHECK: loom.load @b : tensor<3xf32>
// CHECK-LABEL: func.func @train_step
// CHECK: %[[A2:.+]], %{{.+}}, %{{.+}} = loom.adam
// CHECK-NEXT: loom.store %[[A2]] to @a : tensor<3x2xf32>
// CHECK-NEXT: %[[R:.+]] = loom.cast %[[A2]] : tensor<3x2xf32> to tensor<3x2xbf16>
// CHECK-NEXT: loom.store %[[R]] to @a.work : tensor<3x2xbf16>
// CHECK-NOT: @b.work
// Lowered (loom-batch-updates): the update reads the bf16 gradient and
// writes the working copy itself; no cast is left for @a.
// LOWERED-LABEL: func.func @train_step
// LOWERED: %[[G:.+]] = loomrt.global @a.work
// LOWERED: loomrt.adam %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} step %{{.+}} refresh %[[G]] grad bf16
// LOWERED-NOT: loomrt.cast f32
// LOWERED: return
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
