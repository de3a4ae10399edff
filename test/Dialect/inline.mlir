// RUN: loom-opt %s --inline | FileCheck %s --check-prefix=INLINED
// RUN: loom-opt %s --inline --loom-autodiff | FileCheck %s
// Loom ops inline (the dialect's inliner interface), so a forward function
// that calls helpers is prepared for loom-autodiff, which does not cross
// calls, with --inline: the callee's parameter then gets its gradient.
loom.param @w : tensor<4xf32>
func.func private @layer(%x: tensor<4xf32>) -> tensor<4xf32> {
  %w = loom.load @w : tensor<4xf32>
  %y = loom.mul %w, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func @forward(%x: tensor<4xf32>) -> tensor<f32> {
  %y = call @layer(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %l = loom.reduce sum %y [0] : tensor<4xf32> to tensor<f32>
  return %l : tensor<f32>
}
// INLINED-LABEL: func.func @forward
// INLINED-NOT: call
// INLINED: loom.load @w
// CHECK-LABEL: func.func @forward_backward
// CHECK-SAME: loom.grad_params = [@w]
