// RUN: loom-opt %s --loom-micro-batches=count=2 | FileCheck %s
// The log's metrics under micro-batches: each micro-batch computes its own
// values, and one store a metric records the step's: the sum where the
// state is a count (loom.metric_sum), else the mean.

loom.param @w : tensor<3x2xf32> init #loom.init<normal(0.0, 0.02)>
loom.state @metrics.rows : tensor<2xf32> role other init #loom.init<zeros> {loom.metric_sum}
loom.state @metrics.err : tensor<f32> role other init #loom.init<zeros>

// CHECK-LABEL: func.func @forward
// CHECK-NOT: loom.store
// CHECK: %[[D1:.*]] = loom.sub
// CHECK: %[[S1:.*]] = loom.reduce sum %{{.*}} [0] : tensor<4x2xf32> to tensor<2xf32>
// CHECK: %[[E1:.*]] = loom.reduce mean %[[D1]]
// CHECK-NOT: loom.store
// CHECK: %[[D0:.*]] = loom.sub
// CHECK: %[[S0:.*]] = loom.reduce sum %{{.*}} [0] : tensor<4x2xf32> to tensor<2xf32>
// CHECK: %[[E0:.*]] = loom.reduce mean %[[D0]]
// CHECK: %[[RS:.*]] = loom.add %[[S0]], %[[S1]] : tensor<2xf32>, tensor<2xf32> -> tensor<2xf32>
// CHECK-NEXT: loom.store %[[RS]] to @metrics.rows : tensor<2xf32>
// CHECK-NEXT: %[[ES:.*]] = loom.add %[[E0]], %[[E1]] : tensor<f32>, tensor<f32> -> tensor<f32>
// CHECK-NEXT: %[[H:.*]] = arith.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT: %[[EM:.*]] = loom.mul %[[ES]], %[[H]] : tensor<f32>, tensor<f32> -> tensor<f32>
// CHECK-NEXT: loom.store %[[EM]] to @metrics.err : tensor<f32>
// CHECK-NOT: loom.store
// CHECK: return

func.func @forward(%x: tensor<4x3xf32>, %y: tensor<4x2xf32>) -> tensor<f32> {
  %w = loom.load @w : tensor<3x2xf32>
  %p = loom.matmul %x, %w : tensor<4x3xf32>, tensor<3x2xf32> -> tensor<4x2xf32>
  %d = loom.sub %p, %y : tensor<4x2xf32>, tensor<4x2xf32> -> tensor<4x2xf32>
  %rows = loom.reduce sum %y [0] : tensor<4x2xf32> to tensor<2xf32>
  loom.store %rows to @metrics.rows : tensor<2xf32>
  %sq = loom.mul %d, %d : tensor<4x2xf32>, tensor<4x2xf32> -> tensor<4x2xf32>
  %l = loom.reduce mean %sq [0, 1] : tensor<4x2xf32> to tensor<f32>
  %e = loom.reduce mean %d [0, 1] : tensor<4x2xf32> to tensor<f32>
  loom.store %e to @metrics.err : tensor<f32>
  return %l : tensor<f32>
}
