// A block index from the model file that does not fit 64 bits is no block
// index (the parameter goes to fragment 0, before any block), not a crash.
// RUN: loom-opt %s --loom-diloco="inner-steps=4 fragments=3" | FileCheck %s
// CHECK-LABEL: func.func @diloco_outer_0()
// CHECK: loom.load @h.99999999999999999999999999.w
// CHECK-NOT: func.func @diloco_outer_1
loom.topology @world ["gpu" = 1, "replica" = 2]
loom.param @h.99999999999999999999999999.w : tensor<4xf32> init #loom.init<ones>
loom.state @optimizer.step : tensor<i64> role step init #loom.init<zeros>
func.func @forward_backward(%x: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>) attributes {loom.grad_params = [@h.99999999999999999999999999.w]} {
  %a = loom.load @h.99999999999999999999999999.w : tensor<4xf32>
  %s = loom.mul %x, %a : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %l = loom.reduce mean %s [0] : tensor<4xf32> to tensor<f32>
  return %l, %a : tensor<f32>, tensor<4xf32>
}
func.func @train_step(%x: tensor<4xf32>) -> tensor<f32> {
  %r:2 = call @forward_backward(%x) : (tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>)
  return %r#0 : tensor<f32>
}
