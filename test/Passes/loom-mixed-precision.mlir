// RUN: loom-opt %s --split-input-file --verify-diagnostics --loom-mixed-precision | FileCheck %s
// The last case fails on purpose; the cases before it still print their output.
// RUN: not loom-opt %s --split-input-file --loom-mixed-precision --loom-autodiff 2>/dev/null | FileCheck %s --check-prefix=AD

// Arguments, loads and activations become bf16; constants are rebuilt as
// bf16 constants (not casts, so autodiff still sees constants); embedding
// tables are gathered in fp32 and the rows cast down; the loss stays fp32.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[T:.*]]: tensor<4xi64>, %[[Y:.*]]: tensor<4xi64>) -> tensor<f32>
// CHECK: %[[XB:.*]] = loom.cast %[[X]] : tensor<4x8xf32> to tensor<4x8xbf16>
// CHECK: %[[E:.*]] = loom.load @emb : tensor<10x8xf32>
// CHECK: %[[W:.*]] = loom.load @w : tensor<3x8xf32>
// CHECK: %[[WB:.*]] = loom.cast %[[W]] : tensor<3x8xf32> to tensor<3x8xbf16>
// CHECK: %[[R:.*]] = loom.embedding %[[E]][%[[T]]] : tensor<10x8xf32>, tensor<4xi64> -> tensor<4x8xf32>
// CHECK: %[[RB:.*]] = loom.cast %[[R]] : tensor<4x8xf32> to tensor<4x8xbf16>
// CHECK: %[[S:.*]] = loom.add %[[XB]], %[[RB]] : tensor<4x8xbf16>, tensor<4x8xbf16> -> tensor<4x8xbf16>
// CHECK: %[[C:.*]] = arith.constant dense<5.000000e-01> : tensor<bf16>
// CHECK: %[[M:.*]] = loom.mul %[[S]], %[[C]] : tensor<4x8xbf16>, tensor<bf16> -> tensor<4x8xbf16>
// CHECK: %[[H:.*]] = loom.matmul %[[M]], %[[WB]] transpose_rhs : tensor<4x8xbf16>, tensor<3x8xbf16> -> tensor<4x3xbf16>
// CHECK: %[[L:.*]] = loom.cross_entropy %[[H]], %[[Y]] : tensor<4x3xbf16>, tensor<4xi64> -> tensor<f32>
// CHECK: return %[[L]] : tensor<f32>

// The optimizer still sees fp32 gradients: the VJP of each cast widens.
// AD-LABEL: func.func @forward_backward
// AD-SAME: -> (tensor<f32>, tensor<10x8xf32>, tensor<3x8xf32>)
// AD: loom.embedding_grad {{.*}} : tensor<4x8xf32>, tensor<4xi64> -> tensor<10x8xf32>
// AD: loom.cast {{.*}} : tensor<3x8xbf16> to tensor<3x8xf32>
loom.param @emb : tensor<10x8xf32> init #loom.init<normal(0.0, 1.0)>
loom.param @w : tensor<3x8xf32> init #loom.init<normal(0.0, 1.0)>
func.func @forward(%x: tensor<4x8xf32>, %t: tensor<4xi64>, %y: tensor<4xi64>) -> tensor<f32> {
  %e = loom.load @emb : tensor<10x8xf32>
  %w = loom.load @w : tensor<3x8xf32>
  %r = loom.embedding %e[%t] : tensor<10x8xf32>, tensor<4xi64> -> tensor<4x8xf32>
  %s = loom.add %x, %r : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %c = arith.constant dense<0.5> : tensor<f32>
  %m = loom.mul %s, %c : tensor<4x8xf32>, tensor<f32> -> tensor<4x8xf32>
  %h = loom.matmul %m, %w transpose_rhs : tensor<4x8xf32>, tensor<3x8xf32> -> tensor<4x3xf32>
  %l = loom.cross_entropy %h, %y : tensor<4x3xf32>, tensor<4xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A metric stored in the forward keeps its state's type (the value is cast
// back up); a mixture's expert counts stay f32.
// CHECK-LABEL: func.func @forward
// CHECK: %[[SL:.*]], %[[CNT:.*]] = loom.moe_slots {{.*}} -> tensor<4x1xi64>, tensor<2xf32>
// CHECK: loom.store %[[CNT]] to @metrics.counts : tensor<2xf32>
// CHECK: %[[MB:.*]] = loom.reduce mean {{.*}} : tensor<4x3xbf16> to tensor<bf16>
// CHECK: %[[MF:.*]] = loom.cast %[[MB]] : tensor<bf16> to tensor<f32>
// CHECK: loom.store %[[MF]] to @metrics.mean : tensor<f32>
loom.param @w : tensor<3x8xf32> init #loom.init<normal(0.0, 1.0)>
loom.state @metrics.counts : tensor<2xf32> role other init #loom.init<zeros>
loom.state @metrics.mean : tensor<f32> role other init #loom.init<zeros>
func.func @forward(%x: tensor<4x8xf32>, %e: tensor<4x1xi64>) -> tensor<f32> {
  %slots, %counts = loom.moe_slots %e experts 2 capacity 4 : tensor<4x1xi64> -> tensor<4x1xi64>, tensor<2xf32>
  loom.store %counts to @metrics.counts : tensor<2xf32>
  %w = loom.load @w : tensor<3x8xf32>
  %h = loom.matmul %x, %w transpose_rhs : tensor<4x8xf32>, tensor<3x8xf32> -> tensor<4x3xf32>
  %m = loom.reduce mean %h [0, 1] : tensor<4x3xf32> to tensor<f32>
  loom.store %m to @metrics.mean : tensor<f32>
  return %m : tensor<f32>
}

// -----

// A loss built from other ops is computed in bf16 and returned as fp32.
// CHECK-LABEL: func.func @forward
// CHECK: %[[R:.*]] = loom.reduce mean {{.*}} : tensor<4x3xbf16> to tensor<bf16>
// CHECK: %[[F:.*]] = loom.cast %[[R]] : tensor<bf16> to tensor<f32>
// CHECK: return %[[F]] : tensor<f32>
loom.param @w : tensor<3x8xf32> init #loom.init<normal(0.0, 1.0)>
func.func @forward(%x: tensor<4x8xf32>) -> tensor<f32> {
  %w = loom.load @w : tensor<3x8xf32>
  %h = loom.matmul %x, %w transpose_rhs : tensor<4x8xf32>, tensor<3x8xf32> -> tensor<4x3xf32>
  %q = loom.mul %h, %h : tensor<4x3xf32>, tensor<4x3xf32> -> tensor<4x3xf32>
  %l = loom.reduce mean %q [0, 1] : tensor<4x3xf32> to tensor<f32>
  return %l : tensor<f32>
}

// -----

// Ops marked loom.fp32 stay fp32, their bf16 operands cast up (the
// vocabulary-parallel loss's statistics); the product before them is bf16.
// CHECK-LABEL: func.func @forward
// CHECK: %[[H:.*]] = loom.matmul {{.*}} -> tensor<4x3xbf16>
// CHECK: %[[HF:.*]] = loom.cast %[[H]] : tensor<4x3xbf16> to tensor<4x3xf32>
// CHECK: %[[E:.*]] = loom.exp %[[HF]] {loom.fp32} : tensor<4x3xf32>
// CHECK: %[[L:.*]] = loom.reduce mean %[[E]] [0, 1] {loom.fp32} : tensor<4x3xf32> to tensor<f32>
// CHECK: return %[[L]] : tensor<f32>
loom.param @w : tensor<3x8xf32> init #loom.init<normal(0.0, 1.0)>
func.func @forward(%x: tensor<4x8xf32>) -> tensor<f32> {
  %w = loom.load @w : tensor<3x8xf32>
  %h = loom.matmul %x, %w transpose_rhs : tensor<4x8xf32>, tensor<3x8xf32> -> tensor<4x3xf32>
  %e = loom.exp %h {loom.fp32} : tensor<4x3xf32>
  %l = loom.reduce mean %e [0, 1] {loom.fp32} : tensor<4x3xf32> to tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error @+1 {{loom-mixed-precision: no function @forward}}
module {
  func.func @other() {
    return
  }
}
