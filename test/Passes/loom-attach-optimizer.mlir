// RUN: loom-opt %s -split-input-file --loom-attach-optimizer -verify-diagnostics | FileCheck %s
// RUN: loom-opt %s -split-input-file --loom-attach-optimizer="optimizer=sgd lr=0.7 momentum=0.9 nesterov=true" -verify-diagnostics | FileCheck %s --check-prefix=SGD
// RUN: not loom-opt %s -split-input-file --loom-attach-optimizer="optimizer=lion" 2>&1 | FileCheck %s --check-prefix=BAD

loom.param @w : tensor<4x3xf32>

// AdamW: two moments per parameter beside it, one step counter, and a
// training step that calls the gradient function and applies the update.
// CHECK: loom.param @w : tensor<4x3xf32>
// CHECK-NEXT: loom.state @w.exp_avg : tensor<4x3xf32> role adam_m of @w init #loom.init<zeros>
// CHECK-NEXT: loom.state @w.exp_avg_sq : tensor<4x3xf32> role adam_v of @w init #loom.init<zeros>
// CHECK-NEXT: loom.state @optimizer.step : tensor<i64> role step init #loom.init<zeros>
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:.+]]: tensor<2x3xf32>) -> tensor<f32>
// The step counter first (code generation reads it back to the host).
// CHECK: %[[T0:.+]] = loom.load @optimizer.step : tensor<i64>
// CHECK: %[[T:.+]] = arith.addi %[[T0]], %{{.+}} : tensor<i64>
// CHECK: loom.store %[[T]] to @optimizer.step
// CHECK: %[[R:.+]]:2 = call @forward_backward(%[[X]])
// CHECK: %[[W:.+]] = loom.load @w
// CHECK: %[[P:.+]], %[[M:.+]], %[[V:.+]] = loom.adam %[[W]], %[[R]]#1, %{{.+}}, %{{.+}} step %[[T]] {decoupled, lr = 1.000000e-03 : f64, weight_decay = 1.000000e-02 : f64}
// CHECK: loom.store %[[P]] to @w
// CHECK: loom.store %[[M]] to @w.exp_avg
// CHECK: loom.store %[[V]] to @w.exp_avg_sq
// CHECK: return %[[R]]#0

// With sgd: one momentum buffer, Nesterov, no step counter.
// SGD: loom.state @w.momentum_buffer : tensor<4x3xf32> role momentum of @w
// SGD-NOT: optimizer.step
// SGD: loom.sgd %{{.+}}, %{{.+}}, %{{.+}} {lr = 0.69999999999999996 : f64, momentum = 9.000000e-01 : f64, nesterov}
// BAD: for the --optimizer option: Cannot find option named 'lion'!
func.func @forward_backward(%x: tensor<2x3xf32>) -> (tensor<f32>, tensor<4x3xf32>) attributes {loom.grad_params = [@w]} {
  %w = loom.load @w : tensor<4x3xf32>
  %l = loom.reduce sum %x [0, 1] : tensor<2x3xf32> to tensor<f32>
  return %l, %w : tensor<f32>, tensor<4x3xf32>
}

// -----

// expected-error@+1 {{loom-attach-optimizer: @forward_backward must return the loss and one gradient per entry of its loom.grad_params}}
func.func @forward_backward(%x: tensor<2x3xf32>) -> tensor<f32> {
  %l = loom.reduce sum %x [0, 1] : tensor<2x3xf32> to tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error@+1 {{loom-attach-optimizer: no function @forward_backward (run loom-autodiff first)}}
module {
}
