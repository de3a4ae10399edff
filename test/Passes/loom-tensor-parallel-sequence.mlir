// RUN: loom-opt %s --split-input-file --verify-diagnostics --loom-tensor-parallel="size=2 sequence-parallel=1" | FileCheck %s
// Sequence parallelism (issue 47): a GPT-style block over 2 ranks. Between
// the branches every rank holds its 4 of the step's 8 tokens: the token ids
// and targets are sharded, the position embedding (whole along the tokens)
// stretched and sharded, whole weights read on shards (the tied embedding,
// the norm's, the row product's bias) enter through tp_enter; the branch's
// f is an all-gather of the normed shards, its g a reduce-scatter of the
// partial sums; the loss is each rank's mean over 2, summed.
// CHECK: module attributes {loom.sequence_parallel, loom.tensor_parallel = 2 : i64}
// CHECK-LABEL: func.func @forward
// CHECK: %[[T0:.*]] = loom.reshape %arg1 : tensor<2x4xi64> to tensor<8xi64>
// CHECK-NEXT: %[[TGT:.*]] = loom.shard over #loom.group<@world, ["gpu"]> %[[T0]] : tensor<8xi64> -> tensor<4xi64>
// CHECK: %[[I0:.*]] = loom.reshape %arg0 : tensor<2x4xi64> to tensor<8xi64>
// CHECK-NEXT: %[[IDS:.*]] = loom.shard over #loom.group<@world, ["gpu"]> %[[I0]] : tensor<8xi64> -> tensor<4xi64>
// CHECK: %[[WTE:.*]] = loom.tp_enter over #loom.group<@world, ["gpu"]> %{{.*}} : tensor<32x16xf32>
// CHECK: %[[EMB:.*]] = loom.embedding %[[WTE]][%[[IDS]]] : tensor<32x16xf32>, tensor<4xi64> -> tensor<4x16xf32>
// CHECK: %[[B:.*]] = loom.broadcast_to %{{.*}} : tensor<4x16xf32> to tensor<2x4x16xf32>
// CHECK-NEXT: %[[BF:.*]] = loom.reshape %[[B]] : tensor<2x4x16xf32> to tensor<8x16xf32>
// CHECK-NEXT: %[[POS:.*]] = loom.shard over #loom.group<@world, ["gpu"]> %[[BF]] : tensor<8x16xf32> -> tensor<4x16xf32>
// CHECK-NEXT: %[[X:.*]] = loom.add %[[EMB]], %[[POS]] : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<4x16xf32>
// CHECK: loom.tp_enter over #loom.group<@world, ["gpu"]> %{{.*}} : tensor<16xf32>
// CHECK: %[[LN:.*]] = loom.layer_norm %[[X]], {{.*}} : tensor<4x16xf32>, tensor<16xf32>, tensor<16xf32> -> tensor<4x16xf32>
// CHECK: %[[G:.*]], %[[GT:.*]] = loom.all_gather %[[LN]] over #loom.group<@world, ["gpu"]> on comm : tensor<4x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: loom.wait %[[GT]]
// CHECK-NEXT: %[[H:.*]] = loom.reshape %[[G]] : tensor<8x16xf32> to tensor<2x4x16xf32>
// CHECK-NEXT: loom.matmul %[[H]], %{{.*}} transpose_rhs : tensor<2x4x16xf32>, tensor<32x16xf32> -> tensor<2x4x32xf32>
// CHECK: %[[P:.*]] = loom.matmul %{{.*}}, %{{.*}} transpose_rhs : tensor<2x4x32xf32>, tensor<16x32xf32> -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[PF:.*]] = loom.reshape %[[P]] : tensor<2x4x16xf32> to tensor<8x16xf32>
// CHECK-NEXT: %[[RS:.*]], %[[RT:.*]] = loom.reduce_scatter %[[PF]] over #loom.group<@world, ["gpu"]> on comm : tensor<8x16xf32> -> tensor<4x16xf32>
// CHECK-NEXT: loom.wait %[[RT]]
// CHECK-NEXT: %[[Y:.*]] = loom.add %[[RS]], %{{.*}} : tensor<4x16xf32>, tensor<16xf32> -> tensor<4x16xf32>
// CHECK-NEXT: %[[R:.*]] = loom.add %[[X]], %[[Y]] : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<4x16xf32>
// CHECK-NEXT: %[[L:.*]] = loom.matmul %[[R]], %[[WTE]] transpose_rhs : tensor<4x16xf32>, tensor<32x16xf32> -> tensor<4x32xf32>
// CHECK-NEXT: %[[CE:.*]] = loom.cross_entropy %[[L]], %[[TGT]] : tensor<4x32xf32>, tensor<4xi64> -> tensor<f32>
// CHECK-NEXT: %[[HALF:.*]] = arith.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT: %[[PART:.*]] = loom.mul %[[CE]], %[[HALF]]
// CHECK-NEXT: %[[LOSS:.*]], %[[LT:.*]] = loom.all_reduce %[[PART]] over #loom.group<@world, ["gpu"]> on comm : tensor<f32> -> tensor<f32>
// CHECK-NEXT: loom.wait %[[LT]]
// CHECK-NEXT: return %[[LOSS]]
module {
  loom.topology @world ["gpu" = 2]
  loom.param @wte : tensor<32x16xf32> init #loom.init<normal(0.0, 0.02)>
  loom.param @wpe : tensor<4x16xf32> init #loom.init<normal(0.0, 0.02)>
  loom.param @h.ln.weight : tensor<16xf32> init #loom.init<ones>
  loom.param @h.ln.bias : tensor<16xf32> init #loom.init<zeros>
  loom.param @h.mlp.c_fc.weight : tensor<64x16xf32> init #loom.init<normal(0.0, 0.02)>
  loom.param @h.mlp.c_proj.weight : tensor<16x64xf32> init #loom.init<normal(0.0, 0.02)>
  loom.param @h.mlp.c_proj.bias : tensor<16xf32> init #loom.init<zeros>
  func.func @forward(%arg0: tensor<2x4xi64>, %arg1: tensor<2x4xi64>) -> tensor<f32> {
    %0 = loom.load @wte : tensor<32x16xf32>
    %1 = loom.load @wpe : tensor<4x16xf32>
    %2 = loom.embedding %0[%arg0] : tensor<32x16xf32>, tensor<2x4xi64> -> tensor<2x4x16xf32>
    %3 = loom.add %2, %1 : tensor<2x4x16xf32>, tensor<4x16xf32> -> tensor<2x4x16xf32>
    %4 = loom.load @h.ln.weight : tensor<16xf32>
    %5 = loom.load @h.ln.bias : tensor<16xf32>
    %6 = loom.layer_norm %3, %4, %5 eps 1.000000e-05 : tensor<2x4x16xf32>, tensor<16xf32>, tensor<16xf32> -> tensor<2x4x16xf32>
    %7 = loom.load @h.mlp.c_fc.weight : tensor<64x16xf32>
    %8 = loom.matmul %6, %7 transpose_rhs : tensor<2x4x16xf32>, tensor<64x16xf32> -> tensor<2x4x64xf32>
    %9 = loom.gelu %8 approximate : tensor<2x4x64xf32>
    %10 = loom.load @h.mlp.c_proj.weight : tensor<16x64xf32>
    %11 = loom.load @h.mlp.c_proj.bias : tensor<16xf32>
    %12 = loom.matmul %9, %10 transpose_rhs : tensor<2x4x64xf32>, tensor<16x64xf32> -> tensor<2x4x16xf32>
    %13 = loom.add %12, %11 : tensor<2x4x16xf32>, tensor<16xf32> -> tensor<2x4x16xf32>
    %14 = loom.add %3, %13 : tensor<2x4x16xf32>, tensor<2x4x16xf32> -> tensor<2x4x16xf32>
    %15 = loom.matmul %14, %0 transpose_rhs : tensor<2x4x16xf32>, tensor<32x16xf32> -> tensor<2x4x32xf32>
    %16 = loom.cross_entropy %15, %arg1 : tensor<2x4x32xf32>, tensor<2x4xi64> -> tensor<f32>
    return %16 : tensor<f32>
  }
}

// -----

// Dropout on the shards would draw other masks than one rank: refused.
module {
  loom.topology @world ["gpu" = 2]
  loom.param @wte : tensor<32x16xf32> init #loom.init<normal(0.0, 0.02)>
  loom.param @fc : tensor<64x16xf32> init #loom.init<normal(0.0, 0.02)>
  loom.param @proj : tensor<16x64xf32> init #loom.init<normal(0.0, 0.02)>
  func.func @forward(%arg0: tensor<2x4xi64>, %arg1: tensor<2x4xi64>) -> tensor<f32> {
    %0 = loom.load @wte : tensor<32x16xf32>
    %1 = loom.embedding %0[%arg0] : tensor<32x16xf32>, tensor<2x4xi64> -> tensor<2x4x16xf32>
    // expected-error @below {{loom-tensor-parallel: --sequence-parallel: dropout on the ranks' tokens would draw other masks than one rank does (not built: --dropout=off)}}
    %2 = loom.dropout %1 ratio 1.000000e-01 key 7 : tensor<2x4x16xf32>
    %3 = loom.load @fc : tensor<64x16xf32>
    %4 = loom.matmul %2, %3 transpose_rhs : tensor<2x4x16xf32>, tensor<64x16xf32> -> tensor<2x4x64xf32>
    %5 = loom.load @proj : tensor<16x64xf32>
    %6 = loom.matmul %4, %5 transpose_rhs : tensor<2x4x64xf32>, tensor<16x64xf32> -> tensor<2x4x16xf32>
    %7 = loom.add %2, %6 : tensor<2x4x16xf32>, tensor<2x4x16xf32> -> tensor<2x4x16xf32>
    %8 = loom.matmul %7, %0 transpose_rhs : tensor<2x4x16xf32>, tensor<32x16xf32> -> tensor<2x4x32xf32>
    %9 = loom.cross_entropy %8, %arg1 : tensor<2x4x32xf32>, tensor<2x4xi64> -> tensor<f32>
    return %9 : tensor<f32>
  }
}

// -----

// The tokens must divide over the group: 3 tokens over 2 ranks.
module {
  loom.topology @world ["gpu" = 2]
  loom.param @wte : tensor<32x16xf32> init #loom.init<normal(0.0, 0.02)>
  loom.param @fc : tensor<64x16xf32> init #loom.init<normal(0.0, 0.02)>
  loom.param @proj : tensor<16x64xf32> init #loom.init<normal(0.0, 0.02)>
  // expected-error @below {{loom-tensor-parallel: --sequence-parallel: the 3 tokens of a step do not divide over 2 ranks}}
  func.func @forward(%arg0: tensor<1x3xi64>, %arg1: tensor<1x3xi64>) -> tensor<f32> {
    %0 = loom.load @wte : tensor<32x16xf32>
    %1 = loom.embedding %0[%arg0] : tensor<32x16xf32>, tensor<1x3xi64> -> tensor<1x3x16xf32>
    %3 = loom.load @fc : tensor<64x16xf32>
    %4 = loom.matmul %1, %3 transpose_rhs : tensor<1x3x16xf32>, tensor<64x16xf32> -> tensor<1x3x64xf32>
    %5 = loom.load @proj : tensor<16x64xf32>
    %6 = loom.matmul %4, %5 transpose_rhs : tensor<1x3x64xf32>, tensor<16x64xf32> -> tensor<1x3x16xf32>
    %7 = loom.add %1, %6 : tensor<1x3x16xf32>, tensor<1x3x16xf32> -> tensor<1x3x16xf32>
    %8 = loom.matmul %7, %0 transpose_rhs : tensor<1x3x16xf32>, tensor<32x16xf32> -> tensor<1x3x32xf32>
    %9 = loom.cross_entropy %8, %arg1 : tensor<1x3x32xf32>, tensor<1x3xi64> -> tensor<f32>
    return %9 : tensor<f32>
  }
}
