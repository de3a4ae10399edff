// RUN: loom-opt %s --loom-autodiff | FileCheck %s
// Pipeline stages: the activation goes forward to the next stage (shift
// 1); its gradient comes back the other way (shift -1), and the previous
// stage's parameters get their gradient from it.
// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[A:.*]], %[[T:.*]] = loom.send_recv %{{.*}} over #loom.group<@world, ["stage"]> shift 1 on comm
// CHECK-NEXT: loom.wait %[[T]]
// CHECK: %[[G:.*]], %[[GT:.*]] = loom.send_recv %{{.*}} over #loom.group<@world, ["stage"]> shift -1 on comm : tensor<1x4x16xf32> -> tensor<1x4x16xf32>
// CHECK-NEXT: loom.wait %[[GT]]
// CHECK: loom.mul %[[G]], %arg0
loom.topology @world ["stage" = 2]
loom.param @scale : tensor<16xf32> init #loom.init<ones>
func.func @forward(%x: tensor<1x4x16xf32>, %y: tensor<1x4xi64>) -> tensor<f32> {
  %sc = loom.load @scale : tensor<16xf32>
  %h = loom.mul %x, %sc : tensor<1x4x16xf32>, tensor<16xf32> -> tensor<1x4x16xf32>
  %a, %t = loom.send_recv %h over #loom.group<@world, ["stage"]> shift 1 on comm : tensor<1x4x16xf32> -> tensor<1x4x16xf32>
  loom.wait %t
  %l = loom.cross_entropy %a, %y : tensor<1x4x16xf32>, tensor<1x4xi64> -> tensor<f32>
  return %l : tensor<f32>
}
