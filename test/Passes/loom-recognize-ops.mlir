// RUN: loom-opt %s --loom-recognize-ops | FileCheck %s

// CHECK-LABEL: func.func @eager_causal
// CHECK-NOT: loom.softmax
// CHECK-NOT: arith.constant
// CHECK: %[[O:.+]] = loom.attention %arg0, %arg1, %arg2 causal scale 0.3535533{{[0-9]+}} :
// CHECK-NEXT: return %[[O]]
func.func @eager_causal(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = loom.matmul %q, %k transpose_rhs : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x4xf32>
  %c = arith.constant dense<0.353553385> : tensor<f32>
  %t = loom.mul %s, %c : tensor<1x2x4x4xf32>, tensor<f32> -> tensor<1x2x4x4xf32>
  %m = arith.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %a = loom.add %t, %m : tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x2x4x4xf32>
  %p = loom.softmax %a dim -1 : tensor<1x2x4x4xf32>
  %o = loom.matmul %p, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// CHECK-LABEL: func.func @sdpa_transposed_key
// CHECK: %[[K:.+]] = loom.transpose %arg1 [0, 1, 3, 2] : tensor<1x2x8x4xf32> to tensor<1x2x4x8xf32>
// CHECK-NEXT: loom.attention %arg0, %[[K]], %arg2 causal scale 0.3500000{{[0-9]+}} :
func.func @sdpa_transposed_key(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %c = arith.constant dense<0.5916079783> : tensor<f32>
  %qs = loom.mul %q, %c : tensor<1x2x4x8xf32>, tensor<f32> -> tensor<1x2x4x8xf32>
  %ks = loom.mul %k, %c : tensor<1x2x8x4xf32>, tensor<f32> -> tensor<1x2x8x4xf32>
  %s = loom.matmul %qs, %ks : tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x4x4xf32>
  %m = arith.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %a = loom.add %m, %s : tensor<1x1x4x4xf32>, tensor<1x2x4x4xf32> -> tensor<1x2x4x4xf32>
  %p = loom.softmax %a dim 3 : tensor<1x2x4x4xf32>
  %o = loom.matmul %p, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// CHECK-LABEL: func.func @zero_mask_is_no_mask
// CHECK-NOT: arith.constant
// CHECK: loom.attention %arg0, %arg1, %arg2 scale 1.000000e+00 :
func.func @zero_mask_is_no_mask(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = loom.matmul %q, %k transpose_rhs : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x4xf32>
  %z = arith.constant dense<0.0> : tensor<1x1x4x4xf32>
  %a = loom.add %s, %z : tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x2x4x4xf32>
  %p = loom.softmax %a dim -1 : tensor<1x2x4x4xf32>
  %o = loom.matmul %p, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// CHECK-LABEL: func.func @padding_mask_stays
// CHECK-NOT: loom.attention
// CHECK: loom.softmax
func.func @padding_mask_stays(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = loom.matmul %q, %k transpose_rhs : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x4xf32>
  %m = arith.constant dense<[[[[0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38]]]]> : tensor<1x1x4x4xf32>
  %a = loom.add %s, %m : tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x2x4x4xf32>
  %p = loom.softmax %a dim -1 : tensor<1x2x4x4xf32>
  %o = loom.matmul %p, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// CHECK-LABEL: func.func @softcap_stays
// CHECK-NOT: loom.attention
// CHECK: loom.tanh
func.func @softcap_stays(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = loom.matmul %q, %k transpose_rhs : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x4xf32>
  %t = loom.tanh %s : tensor<1x2x4x4xf32>
  %p = loom.softmax %t dim -1 : tensor<1x2x4x4xf32>
  %o = loom.matmul %p, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// CHECK-LABEL: func.func @probabilities_read_elsewhere_stay
// CHECK-NOT: loom.attention
// CHECK: loom.softmax
func.func @probabilities_read_elsewhere_stay(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = loom.matmul %q, %k transpose_rhs : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x4xf32>
  %p = loom.softmax %s dim -1 : tensor<1x2x4x4xf32>
  %o0 = loom.matmul %p, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  %e = loom.reduce sum %p [3] keepdim : tensor<1x2x4x4xf32> to tensor<1x2x4x1xf32>
  %o = loom.mul %o0, %e : tensor<1x2x4x8xf32>, tensor<1x2x4x1xf32> -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// CHECK-LABEL: func.func @softmax_over_queries_stays
// CHECK-NOT: loom.attention
func.func @softmax_over_queries_stays(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = loom.matmul %q, %k transpose_rhs : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x4xf32>
  %p = loom.softmax %s dim 2 : tensor<1x2x4x4xf32>
  %o = loom.matmul %p, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// CHECK-LABEL: func.func @scale_by_a_tensor_stays
// CHECK-NOT: loom.attention
func.func @scale_by_a_tensor_stays(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>, %w: tensor<f32>) -> tensor<1x2x4x8xf32> {
  %s = loom.matmul %q, %k transpose_rhs : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x4xf32>
  %t = loom.mul %s, %w : tensor<1x2x4x4xf32>, tensor<f32> -> tensor<1x2x4x4xf32>
  %p = loom.softmax %t dim -1 : tensor<1x2x4x4xf32>
  %o = loom.matmul %p, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// Llama's RMSNorm as exported: pow, mean, add eps, sqrt, 1/x, two products.
// CHECK-LABEL: func.func @rms_norm
// CHECK-NEXT: %[[Y:.+]] = loom.rms_norm %arg0, %arg1 eps 9.99999997{{[0-9]*}}E-7 : tensor<2x3x8xf32>, tensor<8xf32> -> tensor<2x3x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @rms_norm(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>) -> tensor<2x3x8xf32> {
  %two = arith.constant dense<2.0> : tensor<f32>
  %p = loom.pow %x, %two : tensor<2x3x8xf32>, tensor<f32> -> tensor<2x3x8xf32>
  %m = loom.reduce mean %p [2] keepdim : tensor<2x3x8xf32> to tensor<2x3x1xf32>
  %eps = arith.constant dense<9.99999997E-7> : tensor<f32>
  %a = loom.add %m, %eps : tensor<2x3x1xf32>, tensor<f32> -> tensor<2x3x1xf32>
  %s = loom.sqrt %a : tensor<2x3x1xf32>
  %one = arith.constant dense<1.0> : tensor<f32>
  %i = loom.div %one, %s : tensor<f32>, tensor<2x3x1xf32> -> tensor<2x3x1xf32>
  %n = loom.mul %x, %i : tensor<2x3x8xf32>, tensor<2x3x1xf32> -> tensor<2x3x8xf32>
  %o = loom.mul %w, %n : tensor<8xf32>, tensor<2x3x8xf32> -> tensor<2x3x8xf32>
  return %o : tensor<2x3x8xf32>
}

// x * x and rsqrt are the same norm.
// CHECK-LABEL: func.func @rms_norm_square_rsqrt
// CHECK-NEXT: loom.rms_norm %arg0, %arg1 eps 9.99999{{[0-9]+}}E-6 :
func.func @rms_norm_square_rsqrt(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %p = loom.mul %x, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %m = loom.reduce mean %p [1] keepdim : tensor<4x8xf32> to tensor<4x1xf32>
  %eps = arith.constant dense<1.0e-5> : tensor<f32>
  %a = loom.add %eps, %m : tensor<f32>, tensor<4x1xf32> -> tensor<4x1xf32>
  %i = loom.rsqrt %a : tensor<4x1xf32>
  %n = loom.mul %i, %x : tensor<4x1xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %o = loom.mul %n, %w : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  return %o : tensor<4x8xf32>
}

// A mean over another axis, or a statistic read elsewhere, is not the norm.
// CHECK-LABEL: func.func @rms_norm_other_axis_stays
// CHECK-NOT: loom.rms_norm
// CHECK: loom.reduce mean
func.func @rms_norm_other_axis_stays(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %p = loom.mul %x, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %m = loom.reduce mean %p [0] keepdim : tensor<4x8xf32> to tensor<1x8xf32>
  %i = loom.rsqrt %m : tensor<1x8xf32>
  %n = loom.mul %i, %x : tensor<1x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %o = loom.mul %n, %w : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  return %o : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @silu
// CHECK-NEXT: %[[Y:.+]] = loom.silu %arg0 : tensor<2x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @silu(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %s = loom.sigmoid %x : tensor<2x8xf32>
  %o = loom.mul %x, %s : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  return %o : tensor<2x8xf32>
}

// A gate on another tensor (x * sigmoid(g)) is not SiLU.
// CHECK-LABEL: func.func @gate_stays
// CHECK: loom.sigmoid
func.func @gate_stays(%x: tensor<2x8xf32>, %g: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %s = loom.sigmoid %g : tensor<2x8xf32>
  %o = loom.mul %x, %s : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x8xf32>
  return %o : tensor<2x8xf32>
}

// The dynamo exporter's SDPA transposes the key itself (reshape to
// [B*H, S, D], transpose, reshape back): the key from before that is used,
// and the copies go.
// CHECK-LABEL: func.func @sdpa_key_transposed_by_the_exporter
// CHECK-NOT: loom.transpose
// CHECK: loom.attention %arg0, %arg1, %arg2 causal scale
// CHECK-NOT: loom.transpose
func.func @sdpa_key_transposed_by_the_exporter(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %r1 = loom.reshape %k : tensor<1x2x4x8xf32> to tensor<2x4x8xf32>
  %t = loom.transpose %r1 [0, 2, 1] : tensor<2x4x8xf32> to tensor<2x8x4xf32>
  %kt = loom.reshape %t : tensor<2x8x4xf32> to tensor<1x2x8x4xf32>
  %s = loom.matmul %q, %kt : tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32> -> tensor<1x2x4x4xf32>
  %m = arith.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %a = loom.add %s, %m : tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32> -> tensor<1x2x4x4xf32>
  %p = loom.softmax %a dim -1 : tensor<1x2x4x4xf32>
  %o = loom.matmul %p, %v : tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}
