// RUN: loom-opt %s --loom-autodiff | FileCheck %s
// Sequence parallelism's collectives (loom-tensor-parallel
// sequence-parallel=1): the gradient of an all-gather is a reduce-scatter,
// of a reduce-scatter an all-gather, and of a shard of a value every rank
// holds whole the all-gather of the shards' gradients.
// CHECK-LABEL: func.func @forward_backward
// The backward, from the loss back: the reduce-scatter's gradient...
// CHECK: %[[DP:.*]], %[[T1:.*]] = loom.all_gather %{{.*}} over #loom.group<@world, ["gpu"]> on comm : tensor<4x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: loom.wait %[[T1]]
// ... the all-gather's ...
// CHECK: %[[DH:.*]], %[[T2:.*]] = loom.reduce_scatter %{{.*}} over #loom.group<@world, ["gpu"]> on comm : tensor<8x16xf32> -> tensor<4x16xf32>
// CHECK-NEXT: loom.wait %[[T2]]
// ... and the shard's: the position table's gradient, whole on every rank.
// CHECK: %[[DPOS:.*]], %[[T3:.*]] = loom.all_gather %{{.*}} over #loom.group<@world, ["gpu"]> on comm : tensor<4x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: loom.wait %[[T3]]
// CHECK: return {{.*}} : tensor<f32>, tensor<4x16xf32>, tensor<16x16xf32>
loom.topology @world ["gpu" = 2]
loom.param @wpe : tensor<4x16xf32> init #loom.init<normal(0.0, 0.02)>
loom.param @w : tensor<16x16xf32> init #loom.init<normal(0.0, 0.02)>
func.func @forward(%y: tensor<4xi64>) -> tensor<f32> {
  %p = loom.load @wpe : tensor<4x16xf32>
  %b = loom.broadcast_to %p : tensor<4x16xf32> to tensor<2x4x16xf32>
  %f = loom.reshape %b : tensor<2x4x16xf32> to tensor<8x16xf32>
  %x = loom.shard over #loom.group<@world, ["gpu"]> %f : tensor<8x16xf32> -> tensor<4x16xf32>
  %g, %gt = loom.all_gather %x over #loom.group<@world, ["gpu"]> on comm : tensor<4x16xf32> -> tensor<8x16xf32>
  loom.wait %gt
  %w = loom.load @w : tensor<16x16xf32>
  %h = loom.matmul %g, %w transpose_rhs : tensor<8x16xf32>, tensor<16x16xf32> -> tensor<8x16xf32>
  %s, %st = loom.reduce_scatter %h over #loom.group<@world, ["gpu"]> on comm : tensor<8x16xf32> -> tensor<4x16xf32>
  loom.wait %st
  %r = loom.add %x, %s : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<4x16xf32>
  %l = loom.cross_entropy %r, %y : tensor<4x16xf32>, tensor<4xi64> -> tensor<f32>
  return %l : tensor<f32>
}
