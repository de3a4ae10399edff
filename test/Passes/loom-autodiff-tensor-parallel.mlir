// RUN: loom-opt %s --loom-autodiff | FileCheck %s
// Megatron's f and g (loom-tensor-parallel's output): the gradient of the
// row-parallel sum passes through it, the gradient of tp_enter's input is
// all-reduced over the group; tp_enter itself is gone afterwards.
// CHECK-NOT: loom.tp_enter
// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[S:.*]], %[[T:.*]] = loom.all_reduce %{{.*}} over #loom.group<@world, ["gpu"]> on comm
// CHECK-NEXT: loom.wait %[[T]]
// The backward: the column slice's input gradient summed over the group,
// then the scale's gradient from it.
// CHECK: %[[DX:.*]] = loom.matmul %{{.*}}, %{{.*}} : tensor<1x4x8xf32>, tensor<8x16xf32> -> tensor<1x4x16xf32>
// CHECK: %[[G:.*]], %[[GT:.*]] = loom.all_reduce %[[DX]] over #loom.group<@world, ["gpu"]> on comm : tensor<1x4x16xf32> -> tensor<1x4x16xf32>
// CHECK-NEXT: loom.wait %[[GT]]
// CHECK: loom.mul %[[G]], %arg0
// CHECK-NOT: loom.tp_enter
loom.topology @world ["gpu" = 2]
loom.param @scale : tensor<16xf32> init #loom.init<ones>
loom.param @fc : tensor<8x16xf32> init #loom.init<normal(0.0, 0.02)>
loom.param @proj : tensor<16x8xf32> init #loom.init<normal(0.0, 0.02)>
func.func @forward(%x: tensor<1x4x16xf32>, %y: tensor<1x4xi64>) -> tensor<f32> {
  %sc = loom.load @scale : tensor<16xf32>
  %h = loom.mul %x, %sc : tensor<1x4x16xf32>, tensor<16xf32> -> tensor<1x4x16xf32>
  %e = loom.tp_enter over #loom.group<@world, ["gpu"]> %h : tensor<1x4x16xf32>
  %w = loom.load @fc : tensor<8x16xf32>
  %u = loom.matmul %e, %w transpose_rhs : tensor<1x4x16xf32>, tensor<8x16xf32> -> tensor<1x4x8xf32>
  %g = loom.gelu %u approximate : tensor<1x4x8xf32>
  %pw = loom.load @proj : tensor<16x8xf32>
  %p = loom.matmul %g, %pw transpose_rhs : tensor<1x4x8xf32>, tensor<16x8xf32> -> tensor<1x4x16xf32>
  %s, %t = loom.all_reduce %p over #loom.group<@world, ["gpu"]> on comm : tensor<1x4x16xf32> -> tensor<1x4x16xf32>
  loom.wait %t
  %r = loom.add %x, %s : tensor<1x4x16xf32>, tensor<1x4x16xf32> -> tensor<1x4x16xf32>
  %l = loom.cross_entropy %r, %y : tensor<1x4x16xf32>, tensor<1x4xi64> -> tensor<f32>
  return %l : tensor<f32>
}
