// RUN: loom-opt %s --split-input-file --verify-diagnostics --loom-tensor-parallel="size=2 sequence-parallel=1" | FileCheck %s
// RUN: loom-opt %s --split-input-file --verify-diagnostics --loom-tensor-parallel="size=2 sequence-parallel=1 vocab-parallel=0" | FileCheck %s --check-prefix=WHOLE
// Sequence parallelism (issue 47): a GPT-style block over 2 ranks, first
// with the embedding and the head whole (vocab-parallel=0). Between
// the branches every rank holds its 4 of the step's 8 tokens: the token ids
// and targets are sharded, the position embedding (whole along the tokens)
// stretched and sharded, whole weights read on shards (the tied embedding,
// the norm's, the row product's bias) enter through tp_enter; the branch's
// f is an all-gather of the normed shards, its g a reduce-scatter of the
// partial sums; the loss is each rank's mean over 2, summed.
// WHOLE: module attributes {loom.sequence_parallel, loom.tensor_parallel = 2 : i64}
// WHOLE-LABEL: func.func @forward
// WHOLE: %[[T0:.*]] = loom.reshape %arg1 : tensor<2x4xi64> to tensor<8xi64>
// WHOLE-NEXT: %[[TGT:.*]] = loom.shard over #loom.group<@world, ["gpu"]> %[[T0]] : tensor<8xi64> -> tensor<4xi64>
// WHOLE: %[[I0:.*]] = loom.reshape %arg0 : tensor<2x4xi64> to tensor<8xi64>
// WHOLE-NEXT: %[[IDS:.*]] = loom.shard over #loom.group<@world, ["gpu"]> %[[I0]] : tensor<8xi64> -> tensor<4xi64>
// WHOLE: %[[WTE:.*]] = loom.tp_enter over #loom.group<@world, ["gpu"]> %{{.*}} : tensor<32x16xf32>
// WHOLE: %[[EMB:.*]] = loom.embedding %[[WTE]][%[[IDS]]] : tensor<32x16xf32>, tensor<4xi64> -> tensor<4x16xf32>
// WHOLE: %[[B:.*]] = loom.broadcast_to %{{.*}} : tensor<4x16xf32> to tensor<2x4x16xf32>
// WHOLE-NEXT: %[[BF:.*]] = loom.reshape %[[B]] : tensor<2x4x16xf32> to tensor<8x16xf32>
// WHOLE-NEXT: %[[POS:.*]] = loom.shard over #loom.group<@world, ["gpu"]> %[[BF]] : tensor<8x16xf32> -> tensor<4x16xf32>
// WHOLE-NEXT: %[[X:.*]] = loom.add %[[EMB]], %[[POS]] : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<4x16xf32>
// WHOLE: loom.tp_enter over #loom.group<@world, ["gpu"]> %{{.*}} : tensor<16xf32>
// WHOLE: %[[LN:.*]] = loom.layer_norm %[[X]], {{.*}} : tensor<4x16xf32>, tensor<16xf32>, tensor<16xf32> -> tensor<4x16xf32>
// WHOLE: %[[G:.*]], %[[GT:.*]] = loom.all_gather %[[LN]] over #loom.group<@world, ["gpu"]> on comm : tensor<4x16xf32> -> tensor<8x16xf32>
// WHOLE-NEXT: loom.wait %[[GT]]
// WHOLE-NEXT: %[[H:.*]] = loom.reshape %[[G]] : tensor<8x16xf32> to tensor<2x4x16xf32>
// WHOLE-NEXT: loom.matmul %[[H]], %{{.*}} transpose_rhs : tensor<2x4x16xf32>, tensor<32x16xf32> -> tensor<2x4x32xf32>
// WHOLE: %[[P:.*]] = loom.matmul %{{.*}}, %{{.*}} transpose_rhs : tensor<2x4x32xf32>, tensor<16x32xf32> -> tensor<2x4x16xf32>
// WHOLE-NEXT: %[[PF:.*]] = loom.reshape %[[P]] : tensor<2x4x16xf32> to tensor<8x16xf32>
// WHOLE-NEXT: %[[RS:.*]], %[[RT:.*]] = loom.reduce_scatter %[[PF]] over #loom.group<@world, ["gpu"]> on comm : tensor<8x16xf32> -> tensor<4x16xf32>
// WHOLE-NEXT: loom.wait %[[RT]]
// WHOLE-NEXT: %[[Y:.*]] = loom.add %[[RS]], %{{.*}} : tensor<4x16xf32>, tensor<16xf32> -> tensor<4x16xf32>
// WHOLE-NEXT: %[[R:.*]] = loom.add %[[X]], %[[Y]] : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<4x16xf32>
// WHOLE-NEXT: %[[L:.*]] = loom.matmul %[[R]], %[[WTE]] transpose_rhs : tensor<4x16xf32>, tensor<32x16xf32> -> tensor<4x32xf32>
// WHOLE-NEXT: %[[CE:.*]] = loom.cross_entropy %[[L]], %[[TGT]] : tensor<4x32xf32>, tensor<4xi64> -> tensor<f32>
// WHOLE-NEXT: %[[HALF:.*]] = arith.constant dense<5.000000e-01> : tensor<f32>
// WHOLE-NEXT: %[[PART:.*]] = loom.mul %[[CE]], %[[HALF]]
// WHOLE-NEXT: %[[LOSS:.*]], %[[LT:.*]] = loom.all_reduce %[[PART]] over #loom.group<@world, ["gpu"]> on comm : tensor<f32> -> tensor<f32>
// WHOLE-NEXT: loom.wait %[[LT]]
// WHOLE-NEXT: return %[[LOSS]]
// With the vocabulary split (the default): each rank looks up the ids in
// its 16 of the 32 rows of the tied table, zeroes the others and
// reduce-scatters the sums to the ranks' tokens; the head reads the
// gathered hidden state and the loss is made of the ranks' statistics of
// their 16 columns of the logits, in fp32 under mixed precision.
// CHECK: loom.param @wte : tensor<16x16xf32> {{.*}} {loom.tp_slice = array<i64: 0, 1>}
// CHECK-LABEL: func.func @forward
// CHECK: %[[FIRST:.*]] = arith.constant dense<[0, 16]> : tensor<2xi64>
// CHECK-NEXT: %[[OFF:.*]] = loom.shard over #loom.group<@world, ["gpu"]> %[[FIRST]] : tensor<2xi64> -> tensor<1xi64>
// CHECK-NEXT: %[[REL:.*]] = loom.sub %arg0, %[[OFF]]
// CHECK: %[[EMB:.*]] = loom.embedding %{{.*}}[%{{.*}}] : tensor<16x16xf32>, tensor<2x4xi64> -> tensor<2x4x16xf32>
// CHECK: %[[PART:.*]] = loom.mul %[[EMB]], %{{.*}} : tensor<2x4x16xf32>, tensor<2x4x1xf32> -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[PF:.*]] = loom.reshape %[[PART]] : tensor<2x4x16xf32> to tensor<8x16xf32>
// CHECK-NEXT: %[[X0:.*]], %[[XT:.*]] = loom.reduce_scatter %[[PF]] over #loom.group<@world, ["gpu"]> on comm : tensor<8x16xf32> -> tensor<4x16xf32>
// The block's branch, then the head's f:
// CHECK: loom.all_gather
// CHECK: loom.reduce_scatter
// CHECK: %[[H:.*]], %[[HT:.*]] = loom.all_gather %{{.*}} over #loom.group<@world, ["gpu"]> on comm : tensor<4x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: loom.wait %[[HT]]
// CHECK-NEXT: %[[H3:.*]] = loom.reshape %[[H]] : tensor<8x16xf32> to tensor<2x4x16xf32>
// CHECK-NEXT: %[[Z:.*]] = loom.matmul %[[H3]], %{{.*}} transpose_rhs : tensor<2x4x16xf32>, tensor<16x16xf32> -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[Z2:.*]] = loom.reshape %[[Z]] {loom.fp32} : tensor<2x4x16xf32> to tensor<8x16xf32>
// CHECK-NEXT: %[[ML:.*]] = loom.reduce max %[[Z2]] [1] keepdim {loom.fp32}
// CHECK-NEXT: %[[M:.*]], %[[MT:.*]] = loom.all_reduce %[[ML]] over #loom.group<@world, ["gpu"]> reduce max on comm {loom.fp32}
// CHECK-NEXT: loom.wait %[[MT]]
// CHECK-NEXT: %[[MS:.*]] = loom.stop_gradient %[[M]] {loom.fp32} : tensor<8x1xf32>
// CHECK-NEXT: loom.sub %[[Z2]], %[[MS]]
// CHECK-NEXT: loom.exp
// CHECK-NEXT: loom.reduce sum
// CHECK-NEXT: %[[S:.*]], %{{.*}} = loom.all_reduce %{{.*}} over #loom.group<@world, ["gpu"]> on comm {loom.fp32} : tensor<8x1xf32> -> tensor<8x1xf32>
// CHECK: %[[AT:.*]] = loom.add %{{.*}}, %{{.*}} : tensor<8xi64>, tensor<8xi64> -> tensor<8xi64>
// CHECK-NEXT: %[[FLAT:.*]] = loom.reshape %[[Z2]] {loom.fp32} : tensor<8x16xf32> to tensor<128x1xf32>
// CHECK-NEXT: loom.embedding %[[FLAT]][%[[AT]]] {loom.fp32} : tensor<128x1xf32>, tensor<8xi64> -> tensor<8x1xf32>
// CHECK: %[[ZT:.*]], %{{.*}} = loom.all_reduce %{{.*}} over #loom.group<@world, ["gpu"]> on comm {loom.fp32} : tensor<8x1xf32> -> tensor<8x1xf32>
// CHECK: %[[LOG:.*]] = loom.log %[[S]]
// CHECK-NEXT: %[[LM:.*]] = loom.add %[[LOG]], %[[MS]]
// CHECK-NEXT: %[[TOK:.*]] = loom.sub %[[LM]], %[[ZT]]
// CHECK-NEXT: %[[LOSS:.*]] = loom.reduce mean %[[TOK]] [0, 1] {loom.fp32} : tensor<8x1xf32> to tensor<f32>
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
