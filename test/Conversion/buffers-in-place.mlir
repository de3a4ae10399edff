// Buffers the lowering does not copy (passes/LoomToLoomRT/Plan.cpp):
// a concatenation's inputs made by kernels are computed in its buffer, a
// contiguous slice is a view of its input, and an update reads its state
// in place when the state's other readers come earlier on the compute
// stream. loom-run executes the result, so the aliasing is checked for
// values too.
// RUN: loom-opt %s --loom-lower-to-runtime=entry=concat | FileCheck %s --check-prefix=CONCAT
// RUN: loom-run %s --function=concat | FileCheck %s --check-prefix=CONCAT-EXEC
// RUN: loom-opt %s --loom-lower-to-runtime=entry=slices | FileCheck %s --check-prefix=SLICES
// RUN: loom-run %s --function=slices | FileCheck %s --check-prefix=SLICES-EXEC

// neg and exp write their ranges of the concatenation (a view at byte 24
// for the second); the constant is copied in; the transposed concat (its
// inputs are not contiguous ranges) copies as before.
// CONCAT-LABEL: func.func @concat
// CONCAT: %[[BUF:.+]] = loomrt.alloc 64
// CONCAT-NEXT: loomrt.unary neg f32 %{{.+}} -> %[[BUF]], 6
// CONCAT: %[[V:.+]] = loomrt.view %[[BUF]][24]
// CONCAT-NEXT: loomrt.unary exp f32 %{{.+}} -> %[[V]], 6
// CONCAT-NOT: loomrt.unary
// CONCAT: loomrt.copy_strided %{{.+}} [1] -> %{{.+}} [1] shape [4]
// CONCAT-NOT: shape [6] elem
// CONCAT: loomrt.copy_strided {{.*}} shape [2, 3] elem 4
// CONCAT: loomrt.copy_strided {{.*}} shape [2, 3] elem 4
// [-1..-6, e^1..e^6, 7, 8, 9, 10] summed: -21 + 636.6331 + 34; the second
// concatenation [2x | x] sums to 42 + 21
// CONCAT-EXEC: out0 = 649.63{{[0-9]*}}
// CONCAT-EXEC: out1 = 63
func.func @concat() -> (tensor<f32>, tensor<f32>) {
  %x = arith.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]> : tensor<2x3xf32>
  %k = arith.constant dense<[7.0, 8.0, 9.0, 10.0]> : tensor<4xf32>
  %a = loom.neg %x : tensor<2x3xf32>
  %fa = loom.reshape %a : tensor<2x3xf32> to tensor<6xf32>
  %b = loom.exp %x : tensor<2x3xf32>
  %fb = loom.reshape %b : tensor<2x3xf32> to tensor<6xf32>
  %o = loom.concat %fa, %fb, %k dim 0 : tensor<6xf32>, tensor<6xf32>, tensor<4xf32> -> tensor<16xf32>
  %s = loom.reduce sum %o [0] : tensor<16xf32> to tensor<f32>
  %y = loom.add %x, %x : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  %z = loom.concat %y, %x dim 1 : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x6xf32>
  %t = loom.reduce sum %z [0, 1] : tensor<2x6xf32> to tensor<f32>
  return %s, %t : tensor<f32>, tensor<f32>
}

// Rows 1-2 of a 4x3 matrix are one range (a view at byte 12); its column
// 1 is not (a strided copy).
// SLICES-LABEL: func.func @slices
// SLICES: %[[R:.+]] = loomrt.view %{{.+}}[12]
// SLICES-NOT: loomrt.copy_strided %[[R]]
// SLICES: loomrt.copy_strided %{{.+}} [3, 1] -> %{{.+}} [1, 1] shape [4, 1]
// rows [[4, 5, 6], [7, 8, 9]] sum to 39; column 1 is 2 + 5 + 8 + 11 = 26
// SLICES-EXEC: out0 = 39
// SLICES-EXEC: out1 = 26
func.func @slices() -> (tensor<f32>, tensor<f32>) {
  %m = arith.constant dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0], [10.0, 11.0, 12.0]]> : tensor<4x3xf32>
  %r = loom.slice %m [1, 0] [3, 3] [1, 1] : tensor<4x3xf32> to tensor<2x3xf32>
  %c = loom.slice %m [0, 1] [4, 2] [1, 1] : tensor<4x3xf32> to tensor<4x1xf32>
  %rs = loom.reduce sum %r [0, 1] : tensor<2x3xf32> to tensor<f32>
  %cs = loom.reduce sum %c [0, 1] : tensor<4x1xf32> to tensor<f32>
  return %rs, %cs : tensor<f32>, tensor<f32>
}
