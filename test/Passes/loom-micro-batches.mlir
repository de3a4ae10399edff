// RUN: loom-opt %s --loom-micro-batches=count=2 | FileCheck %s
// RUN: loom-opt %s --loom-micro-batches=count=1 | FileCheck %s --check-prefix=ONE
// RUN: loom-opt %s --loom-micro-batches=count=2 --loom-autodiff | FileCheck %s --check-prefix=AD
// RUN: not loom-opt %s --loom-micro-batches=count=0 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not loom-opt %s --loom-autodiff --loom-micro-batches=count=2 2>&1 | FileCheck %s --check-prefix=LATE
// RUN: not loom-opt %S/Inputs/micro-batches-bad.mlir --split-input-file --loom-micro-batches=count=2 2>&1 | FileCheck %S/Inputs/micro-batches-bad.mlir --check-prefix=BAD

loom.param @w : tensor<3x2xf32> init #loom.init<normal(0.0, 0.02)>

// The inputs read two micro-batches' rows; each is a slice of them, marked
// with its micro-batch. The copies are written last micro-batch first (so
// that autodiff sums the gradients from micro-batch 0 upwards).
// CHECK-LABEL: func.func @forward(%arg0: tensor<8x3xf32>, %arg1: tensor<8x2xf32>) -> tensor<f32>
// CHECK: %[[X1:.*]] = loom.slice %arg0 [4, 0] [8, 3] [1, 1] {loom.micro_batch = 1 : i64} : tensor<8x3xf32> to tensor<4x3xf32>
// CHECK: %[[Y1:.*]] = loom.slice %arg1 [4, 0] [8, 2] [1, 1] {loom.micro_batch = 1 : i64} : tensor<8x2xf32> to tensor<4x2xf32>
// The parameter is loaded once and shared, so is what is computed from it alone.
// CHECK: %[[W:.*]] = loom.load @w
// CHECK: %[[WT:.*]] = loom.mul %[[W]], %[[W]]
// CHECK: %[[P1:.*]] = loom.matmul %[[X1]], %[[WT]]
// CHECK: %[[D1:.*]] = loom.sub %[[P1]], %[[Y1]]
// CHECK: %[[L1:.*]] = loom.reduce mean
// CHECK: %[[X0:.*]] = loom.slice %arg0 [0, 0] [4, 3] [1, 1] {loom.micro_batch = 0 : i64} : tensor<8x3xf32> to tensor<4x3xf32>
// CHECK: %[[Y0:.*]] = loom.slice %arg1 [0, 0] [4, 2] [1, 1] {loom.micro_batch = 0 : i64} : tensor<8x2xf32> to tensor<4x2xf32>
// CHECK-NOT: loom.load
// CHECK: %[[P0:.*]] = loom.matmul %[[X0]], %[[WT]]
// CHECK: %[[D0:.*]] = loom.sub %[[P0]], %[[Y0]]
// CHECK: %[[L0:.*]] = loom.reduce mean
// The loss: the mean of the micro-batches'.
// CHECK-DAG: %[[R0:.*]] = loom.reshape %[[L0]] : tensor<f32> to tensor<1xf32>
// CHECK-DAG: %[[R1:.*]] = loom.reshape %[[L1]] : tensor<f32> to tensor<1xf32>
// CHECK: %[[C:.*]] = loom.concat %[[R0]], %[[R1]] dim 0 : tensor<1xf32>, tensor<1xf32> -> tensor<2xf32>
// CHECK: %[[L:.*]] = loom.reduce mean %[[C]] [0] : tensor<2xf32> to tensor<f32>
// CHECK: return %[[L]] : tensor<f32>

// ONE-LABEL: func.func @forward(%arg0: tensor<4x3xf32>, %arg1: tensor<4x2xf32>) -> tensor<f32>
// ONE-NOT: loom.slice

// Autodiff: the parameter's gradient adds both micro-batches' parts.
// AD-LABEL: func.func @forward_backward(%arg0: tensor<8x3xf32>, %arg1: tensor<8x2xf32>) -> (tensor<f32>, tensor<3x2xf32>)
// AD-COUNT-2: loom.matmul %{{.*}}, %{{.*}} transpose_lhs
// AD: loom.add
// AD: return

// ZERO: loom-micro-batches: count must be a number of micro-batches in [1, 1024]
// LATE: loom-micro-batches: run before loom-autodiff

func.func @forward(%x: tensor<4x3xf32>, %y: tensor<4x2xf32>) -> tensor<f32> {
  %w = loom.load @w : tensor<3x2xf32>
  %w2 = loom.mul %w, %w : tensor<3x2xf32>, tensor<3x2xf32> -> tensor<3x2xf32>
  %p = loom.matmul %x, %w2 : tensor<4x3xf32>, tensor<3x2xf32> -> tensor<4x2xf32>
  %d = loom.sub %p, %y : tensor<4x2xf32>, tensor<4x2xf32> -> tensor<4x2xf32>
  %sq = loom.mul %d, %d : tensor<4x2xf32>, tensor<4x2xf32> -> tensor<4x2xf32>
  %l = loom.reduce mean %sq [0, 1] : tensor<4x2xf32> to tensor<f32>
  return %l : tensor<f32>
}
