// RUN: loom-opt %s --split-input-file --verify-diagnostics --loom-offload-optimizer | FileCheck %s
// static:1 keeps every parameter's state on the device: nothing moves.
// RUN: loom-opt %s --split-input-file --verify-diagnostics --loom-offload-optimizer=mode=static:1 | FileCheck %s --check-prefix=KEEP
// RUN: not loom-opt %s --split-input-file --loom-offload-optimizer=mode=static:1.5 2>&1 | FileCheck %s --check-prefix=BAD
// KEEP: loom.param @w : tensor<3x2xf32> init #loom.init<ones>
// KEEP-NOT: loom.copy
// KEEP-NOT: mem<pinned>
// BAD: static:R needs a fraction R in [0, 1], got 'static:1.5'
// interleaved on a host whose CPU is slow: the cost model streams the
// update to the GPU; the state stays in host memory.
// RUN: loom-opt %s --split-input-file --verify-diagnostics --loom-offload-optimizer="mode=interleaved hardware=%S/../Integration/Inputs/slow-cpu.json" | FileCheck %s --check-prefix=INT
// INT: loom.offload_plan = {gpu_fraction = 1.000000e+00
// INT: loom.param @w : tensor<3x2xf32, #loom.mem<pinned>>
// INT-LABEL: func.func @forward_backward
// INT-NOT: loom.copy
// INT-LABEL: func.func @train_step
// INT: %[[P:.*]] = loom.load @w : tensor<3x2xf32, #loom.mem<pinned>>
// INT-NEXT: %[[PD:.*]], %{{.*}} = loom.copy %[[P]] on h2d
// INT: loom.wait
// INT-NEXT: %[[NP:.*]], %[[NM:.*]], %[[NV:.*]] = loom.adam %[[PD]], %{{.*}} : tensor<3x2xf32>, tensor<3x2xf32>
// INT: %[[B:.*]], %[[BT:.*]] = loom.copy %[[NP]] on d2h
// INT: loom.store %[[NP]] to @w.work : tensor<3x2xf32>
// The state returns to host memory while the CPU works; the host waits for
// it only at the end of the step.
// INT: loom.wait %[[BT]]
// INT: loom.store %[[B]] to @w : tensor<3x2xf32, #loom.mem<pinned>>
// INT-NEXT: loom.store
// INT-NEXT: loom.store
// INT-NEXT: return

// Master weights and Adam state move to pinned host memory; the device
// keeps a working copy the forward and backward read; gradients go to the
// host right after they are computed; the CPU's update is copied back.
// CHECK: loom.param @w : tensor<3x2xf32, #loom.mem<pinned>> init #loom.init<ones>
// CHECK-NEXT: loom.state @w.work : tensor<3x2xf32> role other init #loom.init<zeros> {loom.mirror_of = @w}
// CHECK-NEXT: loom.state @w.exp_avg : tensor<3x2xf32, #loom.mem<pinned>> role adam_m of @w
// CHECK-NEXT: loom.state @w.exp_avg_sq : tensor<3x2xf32, #loom.mem<pinned>> role adam_v of @w

// CHECK-LABEL: func.func @forward_backward
// CHECK-SAME: -> (tensor<f32>, tensor<3x2xf32, #loom.mem<pinned>>)
// CHECK: %[[W:.*]] = loom.load @w.work : tensor<3x2xf32>
// CHECK: %[[G:.*]] = loom.matmul %{{.*}}, %arg0 transpose_lhs
// CHECK-NEXT: %[[GH:.*]], %[[T:.*]] = loom.copy %[[G]] on d2h : tensor<3x2xf32> -> tensor<3x2xf32, #loom.mem<pinned>>
// CHECK: loom.wait %[[T]]
// CHECK-NEXT: return %{{.*}}, %[[GH]]

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: attributes {loom.optimizer_offload = "cpu"}
// CHECK: %[[R:.*]]:2 = call @forward_backward
// CHECK: %[[P:.*]] = loom.load @w : tensor<3x2xf32, #loom.mem<pinned>>
// CHECK: %[[NP:.*]], %{{.*}}, %{{.*}} = loom.adam %[[P]], %[[R]]#1, {{.*}} : tensor<3x2xf32, #loom.mem<pinned>>, tensor<3x2xf32, #loom.mem<pinned>>
// CHECK: loom.store %[[NP]] to @w : tensor<3x2xf32, #loom.mem<pinned>>
// CHECK: %[[M:.*]] = loom.load @w : tensor<3x2xf32, #loom.mem<pinned>>
// CHECK-NEXT: %[[D:.*]], %[[T2:.*]] = loom.copy %[[M]] on h2d : tensor<3x2xf32, #loom.mem<pinned>> -> tensor<3x2xf32>
// CHECK-NEXT: loom.wait %[[T2]]
// CHECK-NEXT: loom.store %[[D]] to @w.work : tensor<3x2xf32>
loom.param @w : tensor<3x2xf32> init #loom.init<ones>
loom.state @w.exp_avg : tensor<3x2xf32> role adam_m of @w init #loom.init<zeros>
loom.state @w.exp_avg_sq : tensor<3x2xf32> role adam_v of @w init #loom.init<zeros>
loom.state @optimizer.step : tensor<i64> role step init #loom.init<zeros>
func.func @forward_backward(%x: tensor<4x2xf32>, %y: tensor<4xi64>) -> (tensor<f32>, tensor<3x2xf32>) attributes {loom.grad_params = [@w]} {
  %w = loom.load @w : tensor<3x2xf32>
  %h = loom.matmul %x, %w transpose_rhs : tensor<4x2xf32>, tensor<3x2xf32> -> tensor<4x3xf32>
  %l = loom.cross_entropy %h, %y : tensor<4x3xf32>, tensor<4xi64> -> tensor<f32>
  %one = arith.constant dense<1.0> : tensor<f32>
  %g = loom.cross_entropy_grad %h, %y, %one : tensor<4x3xf32>, tensor<4xi64>, tensor<f32> -> tensor<4x3xf32>
  %gw = loom.matmul %g, %x transpose_lhs : tensor<4x3xf32>, tensor<4x2xf32> -> tensor<3x2xf32>
  return %l, %gw : tensor<f32>, tensor<3x2xf32>
}
func.func @train_step(%x: tensor<4x2xf32>, %y: tensor<4xi64>) -> tensor<f32> {
  %r:2 = call @forward_backward(%x, %y) : (tensor<4x2xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<3x2xf32>)
  %s0 = loom.load @optimizer.step : tensor<i64>
  %c1 = arith.constant dense<1> : tensor<i64>
  %s = arith.addi %s0, %c1 : tensor<i64>
  loom.store %s to @optimizer.step : tensor<i64>
  %w = loom.load @w : tensor<3x2xf32>
  %wm = loom.load @w.exp_avg : tensor<3x2xf32>
  %wv = loom.load @w.exp_avg_sq : tensor<3x2xf32>
  %w2, %wm2, %wv2 = loom.adam %w, %r#1, %wm, %wv step %s {decoupled, lr = 1.0e-03 : f64, weight_decay = 1.0e-02 : f64} : tensor<3x2xf32>, tensor<3x2xf32>, tensor<3x2xf32>, tensor<3x2xf32>, tensor<i64>
  loom.store %w2 to @w : tensor<3x2xf32>
  loom.store %wm2 to @w.exp_avg : tensor<3x2xf32>
  loom.store %wv2 to @w.exp_avg_sq : tensor<3x2xf32>
  return %r#0 : tensor<f32>
}

// -----

// expected-error @+1 {{loom-offload-optimizer: needs @forward_backward and @train_step (run loom-attach-optimizer first)}}
module {
  loom.param @w : tensor<4xf32> init #loom.init<ones>
}
