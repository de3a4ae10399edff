// loom.compress / loom.decompress with the sign_scale codec (1-bit Adam's
// payload) lower to the runtime's 1-bit kernels: the payload is its fp32
// scale, then the packed signs; the error-feedback buffer is updated in
// place where only the compression reads it (else in a copy). loom-run executes the lowering: for
// c = x + e = [1.5, -1, 1, -1, 2, -2, 2, -2.5], scale = sqrt(23.5 / 8) =
// 1.7139137, so sum(decompress * [1..8]) = -4 * scale = -6.8556547 and the
// new error c - scale * sign(c) weighted by [1..8] sums to -2.6443453
// (worked out by hand from the definition).
// RUN: loom-opt %s --loom-lower-to-runtime=entry=roundtrip | FileCheck %s
// RUN: loom-run %s --function=roundtrip | FileCheck %s --check-prefix=EXEC
// RUN: not loom-opt %s --loom-lower-to-runtime=entry=blocks 2>&1 | FileCheck %s --check-prefix=BLOCKS
// RUN: loom-opt %s --loom-lower-to-runtime=entry=average | FileCheck %s --check-prefix=AVERAGE
// RUN: loom-opt %s --loom-lower-to-runtime=entry=fp4 | FileCheck %s --check-prefix=FP4
// RUN: loom-run %s --function=fp4 | FileCheck %s --check-prefix=FP4-EXEC

// CHECK-LABEL: func.func @roundtrip
// The incoming error is a constant only the compression reads: updated in
// its own buffer (as a state's error buffer is updated in place), no copy.
// CHECK: loomrt.write_const
// CHECK: %[[E:.+]] = loomrt.alloc 32
// CHECK-NEXT: loomrt.write_const %[[E]], dense<[5.000000e-01
// CHECK: %[[P:.+]] = loomrt.alloc 5
// CHECK-NEXT: loomrt.onebit_compress %{{.+}}, %[[E]] -> %[[P]], 8 on
// CHECK: loomrt.onebit_decompress %[[P]] -> %{{.+}}, 8 on
// EXEC: out0 = -6.85565{{[0-9]*}}
// EXEC: out1 = -2.64434{{[0-9]*}}
func.func @roundtrip() -> (tensor<f32>, tensor<f32>) {
  %x = arith.constant dense<[1.0, -1.0, 1.0, -1.0, 2.0, -2.0, 2.0, -2.0]> : tensor<8xf32>
  %e = arith.constant dense<[0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -0.5]> : tensor<8xf32>
  %w = arith.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]> : tensor<8xf32>
  %p, %e2 = loom.compress %x feedback(%e : tensor<8xf32>) : tensor<8xf32> -> !loom.packed<tensor<8xf32>, #loom.codec<sign_scale>>, tensor<8xf32>
  %y = loom.decompress %p : !loom.packed<tensor<8xf32>, #loom.codec<sign_scale>> -> tensor<8xf32>
  %yw = loom.mul %y, %w : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %ew = loom.mul %e2, %w : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
  %ys = loom.reduce sum %yw [0] : tensor<8xf32> to tensor<f32>
  %es = loom.reduce sum %ew [0] : tensor<8xf32> to tensor<f32>
  return %ys, %es : tensor<f32>, tensor<f32>
}

// BLOCKS: error: code generation : sign_scale needs one scale for the whole tensor (block 0) and a multiple of 8 elements (pad first), got 16 elements, block 8
func.func @blocks(%x: tensor<16xf32>) -> tensor<16xf32> {
  %p = loom.compress %x : tensor<16xf32> -> !loom.packed<tensor<16xf32>, #loom.codec<sign_scale, block = 8>>
  %y = loom.decompress %p : !loom.packed<tensor<16xf32>, #loom.codec<sign_scale, block = 8>> -> tensor<16xf32>
  return %y : tensor<16xf32>
}

// 1-bit Adam's server step: the W chunks of an exchanged payload
// decompressed, viewed as [W, C] and averaged over the workers is one
// loomrt.onebit_average on the payload (the W·C floats are never written).
// AVERAGE-LABEL: func.func @average(
// AVERAGE-NOT: loomrt.onebit_decompress
// AVERAGE-NOT: loomrt.reduce
// AVERAGE: loomrt.onebit_average %arg0 -> %{{.+}}, 8 of 2 on
// AVERAGE-NOT: loomrt.reduce
func.func @average(%p: !loom.packed<tensor<16xf32>, #loom.codec<sign_scale, block = 8>>) -> tensor<8xf32> {
  %all = loom.decompress %p : !loom.packed<tensor<16xf32>, #loom.codec<sign_scale, block = 8>> -> tensor<16xf32>
  %rows = loom.reshape %all : tensor<16xf32> to tensor<2x8xf32>
  %avg = loom.reduce mean %rows [0] : tensor<2x8xf32> to tensor<8xf32>
  return %avg : tensor<8xf32>
}

// Block-scaled FP4 (E2M1, blocks of 2): [3, -6] has scale 1 and is exact;
// [2.6, -0.3] has scale 2.6/6, so -0.3 becomes the nearest code, -0.5,
// times the scale: -0.21667; [1, 0.5] is exact at scale 1/6. Weighted by
// [1..6]: 3 - 12 + 7.8 - 0.86667 + 5 + 3 = 5.93333 (by hand from the
// format: magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6).
// FP4-LABEL: func.func @fp4
// FP4: loomrt.block_compress fp4_e2m1 %{{.+}} -> %{{.+}}, 6 block 2 on
// FP4: loomrt.block_decompress fp4_e2m1 %{{.+}} -> %{{.+}}, 6 block 2 on
// FP4-EXEC: out0 = 5.9333{{[0-9]*}}
func.func @fp4() -> tensor<f32> {
  %x = arith.constant dense<[3.0, -6.0, 2.6, -0.3, 1.0, 0.5]> : tensor<6xf32>
  %w = arith.constant dense<[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]> : tensor<6xf32>
  %p = loom.compress %x : tensor<6xf32> -> !loom.packed<tensor<6xf32>, #loom.codec<fp4_e2m1, block = 2>>
  %y = loom.decompress %p : !loom.packed<tensor<6xf32>, #loom.codec<fp4_e2m1, block = 2>> -> tensor<6xf32>
  %yw = loom.mul %y, %w : tensor<6xf32>, tensor<6xf32> -> tensor<6xf32>
  %s = loom.reduce sum %yw [0] : tensor<6xf32> to tensor<f32>
  return %s : tensor<f32>
}
