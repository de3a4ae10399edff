// Folders of the loom dialect.
// RUN: loom-opt %s -canonicalize -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @double_negation_folds
// CHECK-SAME: (%[[X:.+]]: tensor<4xf32>)
// CHECK-NEXT: return %[[X]]
func.func @double_negation_folds(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = loom.neg %x : tensor<4xf32>
  %1 = loom.neg %0 : tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @cast_to_same_type_folds
// CHECK-NOT: loom.cast
func.func @cast_to_same_type_folds(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = loom.cast %x : tensor<4xf32> to tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @reshape_chain_collapses
// CHECK-SAME: (%[[X:.+]]: tensor<2x8xf32>)
// CHECK-NEXT: %[[R:.+]] = loom.reshape %[[X]] : tensor<2x8xf32> to tensor<4x4xf32>
// CHECK-NEXT: return %[[R]]
func.func @reshape_chain_collapses(%x: tensor<2x8xf32>) -> tensor<4x4xf32> {
  %0 = loom.reshape %x : tensor<2x8xf32> to tensor<16xf32>
  %1 = loom.reshape %0 : tensor<16xf32> to tensor<4x4xf32>
  return %1 : tensor<4x4xf32>
}

// -----

// CHECK-LABEL: func.func @reshape_round_trip_vanishes
// CHECK-SAME: (%[[X:.+]]: tensor<2x8xf32>)
// CHECK-NEXT: return %[[X]]
func.func @reshape_round_trip_vanishes(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %0 = loom.reshape %x : tensor<2x8xf32> to tensor<16xf32>
  %1 = loom.reshape %0 : tensor<16xf32> to tensor<2x8xf32>
  return %1 : tensor<2x8xf32>
}

// -----

// CHECK-LABEL: func.func @transposes_compose
// CHECK-SAME: (%[[X:.+]]: tensor<2x3x4xf32>)
// CHECK-NEXT: %[[T:.+]] = loom.transpose %[[X]] [2, 0, 1] : tensor<2x3x4xf32> to tensor<4x2x3xf32>
// CHECK-NEXT: return %[[T]]
func.func @transposes_compose(%x: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
  %0 = loom.transpose %x [1, 0, 2] : tensor<2x3x4xf32> to tensor<3x2x4xf32>
  %1 = loom.transpose %0 [2, 1, 0] : tensor<3x2x4xf32> to tensor<4x2x3xf32>
  return %1 : tensor<4x2x3xf32>
}

// -----

// CHECK-LABEL: func.func @transpose_inverse_vanishes
// CHECK-SAME: (%[[X:.+]]: tensor<2x3xf32>)
// CHECK-NEXT: return %[[X]]
func.func @transpose_inverse_vanishes(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = loom.transpose %x [1, 0] : tensor<2x3xf32> to tensor<3x2xf32>
  %1 = loom.transpose %0 [1, 0] : tensor<3x2xf32> to tensor<2x3xf32>
  return %1 : tensor<2x3xf32>
}

// -----

// Codecs are lossy: decompress(compress(x)) must stay.
// CHECK-LABEL: func.func @lossy_round_trip_stays
// CHECK: loom.compress
// CHECK: loom.decompress
func.func @lossy_round_trip_stays(%x: tensor<8xf32>) -> tensor<8xf32> {
  %p = loom.compress %x : tensor<8xf32> -> !loom.packed<tensor<8xf32>, #loom.codec<sign_scale>>
  %y = loom.decompress %p : !loom.packed<tensor<8xf32>, #loom.codec<sign_scale>> -> tensor<8xf32>
  return %y : tensor<8xf32>
}
