// RUN: loom-opt %s --loom-recognize-ops --split-input-file | FileCheck %s
// loom-recognize-ops: rotary embeddings as exporters write them,
// x · cos + concat(-x[..., D/2:], x[..., :D/2]) · sin, become loom.rotary.

// CHECK-LABEL: func.func @rope
// CHECK-SAME: (%[[X:.+]]: tensor<2x4x8x16xf32>, %[[C:.+]]: tensor<8x16xf32>, %[[S:.+]]: tensor<8x16xf32>)
// CHECK-NEXT: %[[R:.+]] = loom.rotary %[[X]], %[[C]], %[[S]] : tensor<2x4x8x16xf32>, tensor<8x16xf32>
// CHECK-NEXT: return %[[R]]
func.func @rope(%x: tensor<2x4x8x16xf32>, %c: tensor<8x16xf32>, %s: tensor<8x16xf32>) -> tensor<2x4x8x16xf32> {
  %x1 = loom.slice %x [0, 0, 0, 0] [2, 4, 8, 8] [1, 1, 1, 1] : tensor<2x4x8x16xf32> to tensor<2x4x8x8xf32>
  %x2 = loom.slice %x [0, 0, 0, 8] [2, 4, 8, 16] [1, 1, 1, 1] : tensor<2x4x8x16xf32> to tensor<2x4x8x8xf32>
  %n = loom.neg %x2 : tensor<2x4x8x8xf32>
  %rot = loom.concat %n, %x1 dim 3 : tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32> -> tensor<2x4x8x16xf32>
  %xc = loom.mul %x, %c : tensor<2x4x8x16xf32>, tensor<8x16xf32> -> tensor<2x4x8x16xf32>
  %rs = loom.mul %rot, %s : tensor<2x4x8x16xf32>, tensor<8x16xf32> -> tensor<2x4x8x16xf32>
  %y = loom.add %xc, %rs : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x16xf32>
  return %y : tensor<2x4x8x16xf32>
}

// -----

// The halves swapped the other way (rotate_half's transpose) is not the
// rotation: left alone.
// CHECK-LABEL: func.func @not_rope
// CHECK-NOT: loom.rotary
// CHECK: loom.concat
func.func @not_rope(%x: tensor<2x8x16xf32>, %c: tensor<8x16xf32>, %s: tensor<8x16xf32>) -> tensor<2x8x16xf32> {
  %x1 = loom.slice %x [0, 0, 0] [2, 8, 8] [1, 1, 1] : tensor<2x8x16xf32> to tensor<2x8x8xf32>
  %x2 = loom.slice %x [0, 0, 8] [2, 8, 16] [1, 1, 1] : tensor<2x8x16xf32> to tensor<2x8x8xf32>
  %n = loom.neg %x1 : tensor<2x8x8xf32>
  %rot = loom.concat %x2, %n dim 2 : tensor<2x8x8xf32>, tensor<2x8x8xf32> -> tensor<2x8x16xf32>
  %xc = loom.mul %x, %c : tensor<2x8x16xf32>, tensor<8x16xf32> -> tensor<2x8x16xf32>
  %rs = loom.mul %rot, %s : tensor<2x8x16xf32>, tensor<8x16xf32> -> tensor<2x8x16xf32>
  %y = loom.add %xc, %rs : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<2x8x16xf32>
  return %y : tensor<2x8x16xf32>
}

// -----

// Tables per batch ([B, 1, T, D], Hugging Face's with position ids) do not
// fit loom.rotary's [T, D]: left alone.
// CHECK-LABEL: func.func @per_batch_tables
// CHECK-NOT: loom.rotary
func.func @per_batch_tables(%x: tensor<2x4x8x16xf32>, %c: tensor<2x1x8x16xf32>, %s: tensor<2x1x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %x1 = loom.slice %x [0, 0, 0, 0] [2, 4, 8, 8] [1, 1, 1, 1] : tensor<2x4x8x16xf32> to tensor<2x4x8x8xf32>
  %x2 = loom.slice %x [0, 0, 0, 8] [2, 4, 8, 16] [1, 1, 1, 1] : tensor<2x4x8x16xf32> to tensor<2x4x8x8xf32>
  %n = loom.neg %x2 : tensor<2x4x8x8xf32>
  %rot = loom.concat %n, %x1 dim 3 : tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32> -> tensor<2x4x8x16xf32>
  %xc = loom.mul %x, %c : tensor<2x4x8x16xf32>, tensor<2x1x8x16xf32> -> tensor<2x4x8x16xf32>
  %rs = loom.mul %rot, %s : tensor<2x4x8x16xf32>, tensor<2x1x8x16xf32> -> tensor<2x4x8x16xf32>
  %y = loom.add %xc, %rs : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32> -> tensor<2x4x8x16xf32>
  return %y : tensor<2x4x8x16xf32>
}

// -----

// Tables loaded from parameters would take a gradient loom.rotary does not
// give: left alone.
// CHECK-LABEL: func.func @table_parameters
// CHECK-NOT: loom.rotary
loom.param @cos : tensor<8x16xf32>
func.func @table_parameters(%x: tensor<2x8x16xf32>, %s: tensor<8x16xf32>) -> tensor<2x8x16xf32> {
  %c = loom.load @cos : tensor<8x16xf32>
  %x1 = loom.slice %x [0, 0, 0] [2, 8, 8] [1, 1, 1] : tensor<2x8x16xf32> to tensor<2x8x8xf32>
  %x2 = loom.slice %x [0, 0, 8] [2, 8, 16] [1, 1, 1] : tensor<2x8x16xf32> to tensor<2x8x8xf32>
  %n = loom.neg %x2 : tensor<2x8x8xf32>
  %rot = loom.concat %n, %x1 dim 2 : tensor<2x8x8xf32>, tensor<2x8x8xf32> -> tensor<2x8x16xf32>
  %xc = loom.mul %x, %c : tensor<2x8x16xf32>, tensor<8x16xf32> -> tensor<2x8x16xf32>
  %rs = loom.mul %rot, %s : tensor<2x8x16xf32>, tensor<8x16xf32> -> tensor<2x8x16xf32>
  %y = loom.add %xc, %rs : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<2x8x16xf32>
  return %y : tensor<2x8x16xf32>
}
