// RUN: loom-opt %s -split-input-file --loom-autodiff -verify-diagnostics | FileCheck %s
// RUN: loom-opt %s -split-input-file --loom-autodiff=recompute=full -verify-diagnostics | FileCheck %s --check-prefix=RECOMPUTE
// RUN: loom-opt %s -split-input-file --loom-autodiff=recompute=selective -verify-diagnostics | FileCheck %s --check-prefix=SELECTIVE
// RUN: loom-opt %s -split-input-file "--loom-autodiff=recompute=full recompute-units=2" -verify-diagnostics | FileCheck %s --check-prefix=FIRST2

loom.param @w : tensor<4x3xf32>
loom.param @b : tensor<4xf32>

// A linear layer and cross-entropy: the weight's gradient folds the batch
// into one product, the bias's sums the broadcast rows, and nothing is spent
// on the input's gradient.
// CHECK-LABEL: func.func @forward_backward
// CHECK-SAME: (%[[X:.+]]: tensor<2x3xf32>, %[[Y:.+]]: tensor<2xi64>) -> (tensor<f32>, tensor<4x3xf32>, tensor<4xf32>)
// CHECK-SAME: attributes {loom.grad_params = [@w, @b]}
// CHECK: %[[H:.+]] = loom.add
// CHECK: %[[L:.+]] = loom.cross_entropy %[[H]], %[[Y]]
// CHECK: %[[ONE:.+]] = arith.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[DH:.+]] = loom.cross_entropy_grad %[[H]], %[[Y]], %[[ONE]]
// CHECK-DAG: %[[DB:.+]] = loom.reduce sum %[[DH]] [0] : tensor<2x4xf32> to tensor<4xf32>
// CHECK-DAG: %[[DW:.+]] = loom.matmul %[[DH]], %[[X]] transpose_lhs : tensor<2x4xf32>, tensor<2x3xf32> -> tensor<4x3xf32>
// CHECK-NOT: loom.matmul
// CHECK: return %[[L]], %[[DW]], %[[DB]]

// With recompute the backward reads a second forward pass made after the
// loss, not the first one's activations.
// RECOMPUTE-LABEL: func.func @forward_backward
// RECOMPUTE: %[[M1:.+]] = loom.matmul
// RECOMPUTE: %[[L1:.+]] = loom.cross_entropy
// RECOMPUTE: %[[M2:.+]] = loom.matmul
// RECOMPUTE: %[[H2:.+]] = loom.add %[[M2]]
// RECOMPUTE: loom.cross_entropy_grad %[[H2]]
// RECOMPUTE: return %[[L1]]
func.func @forward(%x: tensor<2x3xf32>, %y: tensor<2xi64>) -> tensor<f32> {
  %w = loom.load @w : tensor<4x3xf32>
  %b = loom.load @b : tensor<4xf32>
  %m = loom.matmul %x, %w transpose_rhs : tensor<2x3xf32>, tensor<4x3xf32> -> tensor<2x4xf32>
  %h = loom.add %m, %b : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %l = loom.cross_entropy %h, %y : tensor<2x4xf32>, tensor<2xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

loom.param @emb : tensor<10x4xf32>

// A tied embedding: one parameter loaded twice gets one gradient, the sum
// of the gather's scatter-add and the head's product.
// CHECK-LABEL: func.func @forward_backward
// CHECK-SAME: attributes {loom.grad_params = [@emb]}
// CHECK-DAG: %[[HEAD:.+]] = loom.matmul %{{.+}}, %{{.+}} transpose_lhs : tensor<6x10xf32>, tensor<6x4xf32> -> tensor<10x4xf32>
// CHECK-DAG: %[[GATHER:.+]] = loom.embedding_grad %{{.+}}[%{{.+}}] : tensor<2x3x4xf32>, tensor<2x3xi64> -> tensor<10x4xf32>
// CHECK: %[[SUM:.+]] = loom.add %{{.+}}, %{{.+}} : tensor<10x4xf32>
// CHECK: return %{{.+}}, %[[SUM]] : tensor<f32>, tensor<10x4xf32>
func.func @forward(%tok: tensor<2x3xi64>) -> tensor<f32> {
  %e1 = loom.load @emb : tensor<10x4xf32>
  %x = loom.embedding %e1[%tok] : tensor<10x4xf32>, tensor<2x3xi64> -> tensor<2x3x4xf32>
  %e2 = loom.load @emb : tensor<10x4xf32>
  %logits = loom.matmul %x, %e2 transpose_rhs : tensor<2x3x4xf32>, tensor<10x4xf32> -> tensor<2x3x10xf32>
  %l = loom.cross_entropy %logits, %tok : tensor<2x3x10xf32>, tensor<2x3xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

loom.param @p : tensor<2x6xf32>

// A slice's gradient is the adjoint padded with zeros back to the input's
// shape; a mean's is the adjoint spread over the reduced elements.
// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[G:.+]] = loom.broadcast_to %{{.+}} : tensor<2x1xf32> to tensor<2x2xf32>
// CHECK: %[[S:.+]] = loom.mul %[[G]], %{{.+}} : tensor<2x2xf32>, tensor<f32> -> tensor<2x2xf32>
// CHECK: %[[Z0:.+]] = arith.constant dense<0.000000e+00> : tensor<2x3xf32>
// CHECK: %[[Z1:.+]] = arith.constant dense<0.000000e+00> : tensor<2x1xf32>
// CHECK: loom.concat %[[Z0]], %[[S]], %[[Z1]] dim 1 : tensor<2x3xf32>, tensor<2x2xf32>, tensor<2x1xf32> -> tensor<2x6xf32>
func.func @forward() -> tensor<f32> {
  %p = loom.load @p : tensor<2x6xf32>
  %s = loom.slice %p [0, 3] [2, 5] [1, 1] : tensor<2x6xf32> to tensor<2x2xf32>
  %m = loom.reduce mean %s [1] : tensor<2x2xf32> to tensor<2xf32>
  %l = loom.reduce sum %m [0] : tensor<2xf32> to tensor<f32>
  return %l : tensor<f32>
}

// -----

loom.param @p : tensor<2x6xf32>

// Disjoint slices of one tensor (a fused q/k/v projection's split): their
// zero-padded gradients are merged into one concat of the adjoints, in
// place of the zeros and two adds; overlapping slices still add.
// CHECK-LABEL: func.func @forward_backward
// CHECK-NOT: loom.add
// CHECK: loom.concat %[[A:[^,]+]], %[[Z:[^,]+]], %[[C:[^ ]+]] dim 1 : tensor<2x2xf32>, tensor<2x1xf32>, tensor<2x3xf32> -> tensor<2x6xf32>
// CHECK-NOT: loom.add
// CHECK: return
func.func @forward() -> tensor<f32> {
  %p = loom.load @p : tensor<2x6xf32>
  %a = loom.slice %p [0, 0] [2, 2] [1, 1] : tensor<2x6xf32> to tensor<2x2xf32>
  %c = loom.slice %p [0, 3] [2, 6] [1, 1] : tensor<2x6xf32> to tensor<2x3xf32>
  %sa = loom.reduce sum %a [0, 1] : tensor<2x2xf32> to tensor<f32>
  %sc = loom.reduce sum %c [0, 1] : tensor<2x3xf32> to tensor<f32>
  %l = loom.mul %sa, %sc : tensor<f32>, tensor<f32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

loom.param @p : tensor<2x6xf32>

// CHECK-LABEL: func.func @forward_backward
// CHECK: loom.concat
// CHECK: loom.concat
// CHECK: loom.add %{{.+}}, %{{.+}} : tensor<2x6xf32>, tensor<2x6xf32> -> tensor<2x6xf32>
func.func @forward() -> tensor<f32> {
  %p = loom.load @p : tensor<2x6xf32>
  %a = loom.slice %p [0, 0] [2, 4] [1, 1] : tensor<2x6xf32> to tensor<2x4xf32>
  %c = loom.slice %p [0, 3] [2, 6] [1, 1] : tensor<2x6xf32> to tensor<2x3xf32>
  %sa = loom.reduce sum %a [0, 1] : tensor<2x4xf32> to tensor<f32>
  %sc = loom.reduce sum %c [0, 1] : tensor<2x3xf32> to tensor<f32>
  %l = loom.mul %sa, %sc : tensor<f32>, tensor<f32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

loom.param @q : tensor<1x2x4x8xf32>

// Attention differentiates through one loom.attention_grad; the three
// adjoints of the same parameter add up.
// CHECK-LABEL: func.func @forward_backward
// CHECK: %{{.+}}, %{{.+}}, %{{.+}} = loom.attention_grad %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} causal scale
// CHECK: loom.add
// CHECK: loom.add
func.func @forward() -> tensor<f32> {
  %q = loom.load @q : tensor<1x2x4x8xf32>
  %o = loom.attention %q, %q, %q causal scale 0.35 : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  %l = loom.reduce sum %o [0, 1, 2, 3] : tensor<1x2x4x8xf32> to tensor<f32>
  return %l : tensor<f32>
}

// -----

loom.param @w : tensor<4xf32>

func.func @forward(%x: tensor<4xf32>) -> tensor<f32> {
  %w = loom.load @w : tensor<4xf32>
  // expected-error@+1 {{'loom.max' op has no gradient rule (loom-autodiff), but it lies on the path from a parameter to the loss}}
  %m = loom.max %w, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  %l = loom.reduce sum %m [0] : tensor<4xf32> to tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error@+1 {{loom-autodiff: @forward must return one floating-point scalar (the loss)}}
func.func @forward(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// expected-error@+1 {{loom-autodiff: no function @forward to differentiate}}
module {
  func.func @loss() {
    return
  }
}

// -----

// A parameter loaded inside a callee is invisible to the forward function:
// differentiating past the call would give no gradient (issue 14).
loom.param @w : tensor<4xf32>
func.func private @layer(%x: tensor<4xf32>) -> tensor<4xf32> {
  %w = loom.load @w : tensor<4xf32>
  %y = loom.mul %w, %x : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func @forward(%x: tensor<4xf32>) -> tensor<f32> {
  // expected-error@+1 {{loom-autodiff: @forward calls another function; differentiation does not cross calls (inline it first, e.g. loom-opt --inline)}}
  %y = call @layer(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %l = loom.reduce sum %y [0] : tensor<4xf32> to tensor<f32>
  return %l : tensor<f32>
}

// -----

// Units: the parameters h.0.* and h.1.* make two blocks (units 1 and 2;
// unit 0, before the first block, is empty here); the head joins the last.
// With full recompute each unit's backward starts by running the unit
// again from what enters it: unit 2 from unit 1's output %[[A0]], which is
// all that lives from the forward to unit 2's backward; unit 1 after
// unit 2's backward, from the input. Each recomputed unit loads its
// parameters again (ZeRO-3 gathers them again there).
// RECOMPUTE-LABEL: func.func @forward_backward(%arg0: tensor<2x4xf32>
// RECOMPUTE: %[[M0:.+]] = loom.matmul %arg0
// RECOMPUTE: %[[A0:.+]] = loom.tanh %[[M0]]
// RECOMPUTE: loom.cross_entropy
// RECOMPUTE: %[[W1:.+]] = loom.load @h.1.w
// RECOMPUTE: %[[M1R:.+]] = loom.matmul %[[A0]], %[[W1]]
// RECOMPUTE: %[[A1R:.+]] = loom.tanh %[[M1R]]
// RECOMPUTE: loom.cross_entropy_grad
// RECOMPUTE: loom.matmul %{{.+}}, %[[A0]] transpose_lhs
// RECOMPUTE: %[[W0:.+]] = loom.load @h.0.w
// RECOMPUTE: %[[M0R:.+]] = loom.matmul %arg0, %[[W0]]
// RECOMPUTE: loom.tanh %[[M0R]]
// RECOMPUTE: loom.matmul %{{.+}}, %arg0 transpose_lhs
// RECOMPUTE: return

// Selective keeps the products' outputs and recomputes only the tanh.
// SELECTIVE-LABEL: func.func @forward_backward(%arg0: tensor<2x4xf32>
// SELECTIVE: %[[M0:.+]] = loom.matmul %arg0
// SELECTIVE: %[[M1:.+]] = loom.matmul
// SELECTIVE: %[[LG:.+]] = loom.matmul
// SELECTIVE: loom.cross_entropy
// SELECTIVE: loom.tanh %[[M1]]
// SELECTIVE: loom.cross_entropy_grad %[[LG]]
// SELECTIVE: loom.tanh %[[M0]]
// SELECTIVE-NOT: loom.matmul %arg0, %{{.+}} transpose_rhs
// SELECTIVE: return

// recompute-units=2: units 0 and 1 recompute, unit 2 keeps its activations
// (the backward reads the forward's tanh %[[A1]]).
// FIRST2-LABEL: func.func @forward_backward(%arg0: tensor<2x4xf32>
// FIRST2: %[[A1:.+]] = loom.tanh
// FIRST2: %[[A1B:.+]] = loom.tanh
// FIRST2: loom.cross_entropy_grad
// FIRST2: loom.mul %[[A1B]], %[[A1B]]
// FIRST2: loom.load @h.0.w
// FIRST2: return
loom.param @h.0.w : tensor<4x4xf32>
loom.param @h.1.w : tensor<4x4xf32>
loom.param @head : tensor<5x4xf32>
func.func @forward(%x: tensor<2x4xf32>, %y: tensor<2xi64>) -> tensor<f32> {
  %w0 = loom.load @h.0.w : tensor<4x4xf32>
  %m0 = loom.matmul %x, %w0 transpose_rhs : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %a0 = loom.tanh %m0 : tensor<2x4xf32>
  %w1 = loom.load @h.1.w : tensor<4x4xf32>
  %m1 = loom.matmul %a0, %w1 transpose_rhs : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %a1 = loom.tanh %m1 : tensor<2x4xf32>
  %hw = loom.load @head : tensor<5x4xf32>
  %lg = loom.matmul %a1, %hw transpose_rhs : tensor<2x4xf32>, tensor<5x4xf32> -> tensor<2x5xf32>
  %l = loom.cross_entropy %lg, %y : tensor<2x5xf32>, tensor<2xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

loom.param @w : tensor<2x8x16xf32>

// Rotary embeddings: the gradient is the transposed rotation of dy, with
// the same tables.
// CHECK-LABEL: func.func @forward_backward
// CHECK: loom.rotary %{{.+}}, %[[C:.+]], %[[S:.+]] : tensor<2x8x16xf32>, tensor<8x16xf32>
// CHECK: loom.rotary %{{.+}}, %[[C]], %[[S]] transpose : tensor<2x8x16xf32>, tensor<8x16xf32>
func.func @forward() -> tensor<f32> {
  %w = loom.load @w : tensor<2x8x16xf32>
  %c = arith.constant dense<0.5> : tensor<8x16xf32>
  %s = arith.constant dense<0.25> : tensor<8x16xf32>
  %y = loom.rotary %w, %c, %s : tensor<2x8x16xf32>, tensor<8x16xf32>
  %l = loom.reduce sum %y [0, 1, 2] : tensor<2x8x16xf32> to tensor<f32>
  return %l : tensor<f32>
}

// -----

loom.param @w : tensor<2x8x16xf32>
loom.param @c : tensor<8x16xf32>

func.func @forward() -> tensor<f32> {
  %w = loom.load @w : tensor<2x8x16xf32>
  %c = loom.load @c : tensor<8x16xf32>
  %s = arith.constant dense<0.25> : tensor<8x16xf32>
  // expected-error@+1 {{'loom.rotary' op has a gradient rule for its input only, but its cos or sin table depends on a parameter (loom-autodiff)}}
  %y = loom.rotary %w, %c, %s : tensor<2x8x16xf32>, tensor<8x16xf32>
  %l = loom.reduce sum %y [0, 1, 2] : tensor<2x8x16xf32> to tensor<f32>
  return %l : tensor<f32>
}
