// Integer tensors computed on the device (RoBERTa's position ids:
// cumsum(ids != pad) * (ids != pad) + pad) lower to the runtime's int64
// kernels, and loom-run executes them. For ids [[1, 5, 1, 7], [3, 3, 1, 2]]
// and pad 1 the positions are [[1, 2, 1, 3], [2, 3, 1, 4]] (worked out by
// hand), whose sum weighted by [1..8] is 87; casts truncate toward zero:
// cast(cast([2.7, -2.7, 3.9]) to i64) weighted by [1, 2, 3] is 2 - 4 + 9 = 7.
// RUN: loom-opt %s --loom-lower-to-runtime=entry=positions | FileCheck %s
// RUN: loom-run %s --function=positions | FileCheck %s --check-prefix=EXEC
// RUN: not loom-opt %s --loom-lower-to-runtime=entry=int_div 2>&1 | FileCheck %s --check-prefix=DIV
// RUN: not loom-opt %s --loom-lower-to-runtime=entry=bool_cast 2>&1 | FileCheck %s --check-prefix=BOOL

// CHECK-LABEL: func.func @positions
// CHECK: loomrt.binary ne i64 %{{.+}} [2, 4], %{{.+}} [1, 1] -> %{{.+}} [2, 4]
// CHECK: loomrt.cumsum i64 %{{.+}} -> %{{.+}}[2, 4, 1]
// CHECK: loomrt.binary mul i64
// CHECK: loomrt.binary add i64
// CHECK: loomrt.cast i64 %{{.+}} -> f32
// CHECK: loomrt.cast f32 %{{.+}} -> i64
// EXEC: out0 = 87
// EXEC: out1 = 7
func.func @positions() -> (tensor<f32>, tensor<f32>) {
  %ids = arith.constant dense<[[1, 5, 1, 7], [3, 3, 1, 2]]> : tensor<2x4xi64>
  %pad = arith.constant dense<1> : tensor<i64>
  %m = loom.ne %ids, %pad : tensor<2x4xi64>, tensor<i64> -> tensor<2x4xi64>
  %c = loom.cumsum %m dim 1 : tensor<2x4xi64>
  %k = loom.mul %c, %m : tensor<2x4xi64>, tensor<2x4xi64> -> tensor<2x4xi64>
  %p = loom.add %k, %pad : tensor<2x4xi64>, tensor<i64> -> tensor<2x4xi64>
  %pf = loom.cast %p : tensor<2x4xi64> to tensor<2x4xf32>
  %w = arith.constant dense<[[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]]> : tensor<2x4xf32>
  %pw = loom.mul %pf, %w : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %s = loom.reduce sum %pw [0, 1] : tensor<2x4xf32> to tensor<f32>
  %x = arith.constant dense<[2.7, -2.7, 3.9]> : tensor<3xf32>
  %xi = loom.cast %x : tensor<3xf32> to tensor<3xi64>
  %xf = loom.cast %xi : tensor<3xi64> to tensor<3xf32>
  %w3 = arith.constant dense<[1.0, 2.0, 3.0]> : tensor<3xf32>
  %xw = loom.mul %xf, %w3 : tensor<3xf32>, tensor<3xf32> -> tensor<3xf32>
  %t = loom.reduce sum %xw [0] : tensor<3xf32> to tensor<f32>
  return %s, %t : tensor<f32>, tensor<f32>
}

// DIV: error: code generation divides, raises and negates floating-point tensors only
func.func @int_div(%a: tensor<4xi64>, %b: tensor<4xi64>) -> tensor<4xi64> {
  %q = loom.div %a, %b : tensor<4xi64>, tensor<4xi64> -> tensor<4xi64>
  return %q : tensor<4xi64>
}

// BOOL: error: code generation casts between f32, bf16 and i64; an i1 tensor computed at run time has no runtime dtype
func.func @bool_cast(%a: tensor<4xi1>) -> tensor<4xi64> {
  %q = loom.cast %a : tensor<4xi1> to tensor<4xi64>
  return %q : tensor<4xi64>
}
