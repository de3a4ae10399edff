// RUN: loom-opt %s --verify-diagnostics --loom-offload-optimizer | FileCheck %s
// Streaming DiLoCo with the inner updates offloaded (mode=cpu): the outer
// step's global copy and momentum move to host memory with the master
// weights; the pseudo-gradient, outer SGD and merge run on the host, the
// all-reduce on the device (its operand copied up, its result copied down);
// the merge refreshes the bf16 working copy; @diloco_start copies host to
// host. The step's reads go to the working copy, DiLoCo's stay on @a.
// CHECK: loom.param @a : tensor<3x2xf32, #loom.mem<pinned>>
// CHECK-NEXT: loom.state @a.work : tensor<3x2xbf16>
// CHECK: loom.state @a.diloco.momentum : tensor<3x2xf32, #loom.mem<pinned>> role momentum of @a
// CHECK-NEXT: loom.state @a.diloco.global : tensor<3x2xf32, #loom.mem<pinned>> role master of @a
// CHECK-LABEL: func.func @train_step
// CHECK: loom.load @a.work : tensor<3x2xbf16>
// CHECK-LABEL: func.func @diloco_start
// CHECK-NEXT: %[[L:.*]] = loom.load @a : tensor<3x2xf32, #loom.mem<pinned>>
// CHECK-NEXT: loom.store %[[L]] to @a.diloco.global : tensor<3x2xf32, #loom.mem<pinned>>
// CHECK-LABEL: func.func @diloco_outer_0
// CHECK: %[[LOC:.*]] = loom.load @a : tensor<3x2xf32, #loom.mem<pinned>>
// CHECK-NEXT: %[[G:.*]] = loom.load @a.diloco.global : tensor<3x2xf32, #loom.mem<pinned>>
// CHECK-NEXT: %[[D:.*]] = loom.sub %[[G]], %[[LOC]] : {{.*}} -> tensor<3x2xf32, #loom.mem<pinned>>
// CHECK-NEXT: %[[F:.*]] = loom.reshape %[[D]] : tensor<3x2xf32, #loom.mem<pinned>> to tensor<6xf32, #loom.mem<pinned>>
// CHECK-NEXT: %[[UP:.*]], %[[TU:.*]] = loom.copy %[[F]] on h2d : tensor<6xf32, #loom.mem<pinned>> -> tensor<6xf32>
// CHECK-NEXT: loom.wait %[[TU]]
// CHECK-NEXT: %[[M:.*]], %[[TM:.*]] = loom.all_reduce %[[UP]]
// CHECK-NEXT: loom.wait %[[TM]]
// CHECK-NEXT: %[[R:.*]] = loom.reshape %[[M]] : tensor<6xf32> to tensor<3x2xf32>
// CHECK-NEXT: %[[MOM:.*]] = loom.load @a.diloco.momentum : tensor<3x2xf32, #loom.mem<pinned>>
// CHECK-NEXT: %[[DOWN:.*]], %[[TD:.*]] = loom.copy %[[R]] on d2h : tensor<3x2xf32> -> tensor<3x2xf32, #loom.mem<pinned>>
// CHECK-NEXT: loom.wait %[[TD]]
// CHECK-NEXT: %[[NG:.*]], %[[NM:.*]] = loom.sgd %[[G]], %[[DOWN]], %[[MOM]] {{.*}} : tensor<3x2xf32, #loom.mem<pinned>>
// CHECK-NEXT: loom.store %[[NG]] to @a.diloco.global
// CHECK-NEXT: loom.store %[[NM]] to @a.diloco.momentum
// CHECK-NEXT: %[[MERGED:.*]] = loom.lerp %[[NG]], %[[LOC]] weight 5.000000e-01 : tensor<3x2xf32, #loom.mem<pinned>>
// CHECK-NEXT: loom.store %[[MERGED]] to @a : tensor<3x2xf32, #loom.mem<pinned>>
// CHECK-NEXT: %[[C:.*]] = loom.cast %[[MERGED]] : tensor<3x2xf32, #loom.mem<pinned>> to tensor<3x2xbf16, #loom.mem<pinned>>
// CHECK-NEXT: %[[W:.*]], %[[TW:.*]] = loom.copy %[[C]] on h2d : tensor<3x2xbf16, #loom.mem<pinned>> -> tensor<3x2xbf16>
// CHECK-NEXT: loom.wait %[[TW]]
// CHECK-NEXT: loom.store %[[W]] to @a.work : tensor<3x2xbf16>
// CHECK-NEXT: return
loom.topology @world ["replica" = 2]
loom.param @a : tensor<3x2xf32> init #loom.init<ones>
loom.state @a.exp_avg : tensor<3x2xf32> role adam_m of @a init #loom.init<zeros>
loom.state @a.exp_avg_sq : tensor<3x2xf32> role adam_v of @a init #loom.init<zeros>
loom.state @a.diloco.momentum : tensor<3x2xf32> role momentum of @a init #loom.init<zeros>
loom.state @a.diloco.global : tensor<3x2xf32> role master of @a init #loom.init<zeros>
loom.state @optimizer.step : tensor<i64> role step init #loom.init<zeros>
func.func @forward_backward(%x: tensor<4x2xbf16>, %y: tensor<4xi64>) -> (tensor<f32>, tensor<3x2xf32>) attributes {loom.grad_params = [@a]} {
  %a = loom.load @a : tensor<3x2xf32>
  %ab = loom.cast %a : tensor<3x2xf32> to tensor<3x2xbf16>
  %h = loom.matmul %x, %ab transpose_rhs : tensor<4x2xbf16>, tensor<3x2xbf16> -> tensor<4x3xf32>
  %l = loom.cross_entropy %h, %y : tensor<4x3xf32>, tensor<4xi64> -> tensor<f32>
  %one = arith.constant dense<1.0> : tensor<f32>
  %g = loom.cross_entropy_grad %h, %y, %one : tensor<4x3xf32>, tensor<4xi64>, tensor<f32> -> tensor<4x3xf32>
  %g16 = loom.cast %g : tensor<4x3xf32> to tensor<4x3xbf16>
  %gab = loom.matmul %g16, %x transpose_lhs : tensor<4x3xbf16>, tensor<4x2xbf16> -> tensor<3x2xbf16>
  %ga = loom.cast %gab : tensor<3x2xbf16> to tensor<3x2xf32>
  return %l, %ga : tensor<f32>, tensor<3x2xf32>
}
func.func @train_step(%x: tensor<4x2xbf16>, %y: tensor<4xi64>) -> tensor<f32> {
  %r:2 = call @forward_backward(%x, %y) : (tensor<4x2xbf16>, tensor<4xi64>) -> (tensor<f32>, tensor<3x2xf32>)
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
  return %r#0 : tensor<f32>
}
func.func @diloco_start() {
  %0 = loom.load @a : tensor<3x2xf32>
  loom.store %0 to @a.diloco.global : tensor<3x2xf32>
  return
}
func.func @diloco_outer_0() attributes {loom.diloco = #loom.diloco<every = 4, offset = 4>} {
  %0 = loom.load @a : tensor<3x2xf32>
  %1 = loom.load @a.diloco.global : tensor<3x2xf32>
  %2 = loom.sub %1, %0 : tensor<3x2xf32>, tensor<3x2xf32> -> tensor<3x2xf32>
  %3 = loom.reshape %2 : tensor<3x2xf32> to tensor<6xf32>
  %result, %token = loom.all_reduce %3 over #loom.group<@world, ["replica"]> reduce mean on comm : tensor<6xf32> -> tensor<6xf32>
  loom.wait %token
  %4 = loom.reshape %result : tensor<6xf32> to tensor<3x2xf32>
  %5 = loom.load @a.diloco.momentum : tensor<3x2xf32>
  %p, %m = loom.sgd %1, %4, %5 {lr = 0.7 : f64, momentum = 0.9 : f64, nesterov} : tensor<3x2xf32>
  loom.store %p to @a.diloco.global : tensor<3x2xf32>
  loom.store %m to @a.diloco.momentum : tensor<3x2xf32>
  %6 = loom.lerp %p, %0 weight 0.5 : tensor<3x2xf32>
  loom.store %6 to @a : tensor<3x2xf32>
  return
}
