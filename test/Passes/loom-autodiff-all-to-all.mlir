// RUN: loom-opt %s --loom-autodiff | FileCheck %s
// RUN: loom-opt %s --loom-autodiff --loom-attach-optimizer --loom-lower-to-runtime | FileCheck %s --check-prefix=RT
// Expert parallelism's exchange of token rows: an all-to-all of a tensor
// (chunk j of dimension 0 to rank j) is its own inverse, so its gradient is
// another all-to-all over the same group, waited before the gradient is
// used; lowered, each is one loomrt.all_to_all of the chunk's bytes on the
// collectives' stream.
// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[D:.*]], %[[T:.*]] = loom.all_to_all %{{.*}} over #loom.group<@world, ["gpu"]> on comm : tensor<8x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: loom.wait %[[T]]
// CHECK: return {{.*}} : tensor<f32>, tensor<16x16xf32>
// RT-LABEL: func.func @forward_backward
// RT-COUNT-2: loomrt.all_to_all %{{.*}} -> %{{.*}}, 256 bytes over %{{.*}} on
loom.topology @world ["gpu" = 2]
loom.param @w : tensor<16x16xf32> init #loom.init<normal(0.0, 0.02)>
func.func @forward(%x: tensor<8x16xf32>, %y: tensor<8xi64>) -> tensor<f32> {
  %w = loom.load @w : tensor<16x16xf32>
  %h = loom.matmul %x, %w transpose_rhs : tensor<8x16xf32>, tensor<16x16xf32> -> tensor<8x16xf32>
  %a, %t = loom.all_to_all %h over #loom.group<@world, ["gpu"]> on comm : tensor<8x16xf32> -> tensor<8x16xf32>
  loom.wait %t
  %l = loom.cross_entropy %a, %y : tensor<8x16xf32>, tensor<8xi64> -> tensor<f32>
  return %l : tensor<f32>
}
