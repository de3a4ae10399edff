// RUN: loom-opt %s --split-input-file --verify-diagnostics --loom-tensor-parallel=size=2 | FileCheck %s
// A GPT block (fused QKV, 2 heads) over 2 ranks: c_attn's rows split in 3
// groups (each rank: its head's query, key and value), c_fc's rows and
// biases, both c_proj's columns; each branch's input enters through
// tp_enter, each c_proj's partial sums are all-reduced before the bias.
// CHECK: module attributes {{{.*}}loom.tensor_parallel = 2 : i64}
// CHECK: loom.param @h.attn.c_attn.weight : tensor<24x16xf32> {{.*}} {loom.tp_slice = array<i64: 0, 3>}
// CHECK: loom.param @h.attn.c_attn.bias : tensor<24xf32> {{.*}} {loom.tp_slice = array<i64: 0, 3>}
// CHECK: loom.param @h.attn.c_proj.weight : tensor<16x8xf32> {{.*}} {loom.tp_slice = array<i64: 1, 1>}
// CHECK: loom.param @h.attn.c_proj.bias : tensor<16xf32> init #loom.init<zeros>{{$}}
// CHECK: loom.param @h.mlp.c_fc.weight : tensor<32x16xf32> {{.*}} {loom.tp_slice = array<i64: 0, 1>}
// CHECK: loom.param @h.mlp.c_proj.weight : tensor<16x32xf32> {{.*}} {loom.tp_slice = array<i64: 1, 1>}
// CHECK-LABEL: func.func @forward
// CHECK: %[[LN:.*]] = loom.layer_norm
// CHECK: %[[E:.*]] = loom.tp_enter over #loom.group<@world, ["gpu"]> %[[LN]] : tensor<1x4x16xf32>
// CHECK: loom.matmul %[[E]], %{{.*}} transpose_rhs : tensor<1x4x16xf32>, tensor<24x16xf32> -> tensor<1x4x24xf32>
// CHECK: loom.slice %{{.*}} [0, 0, 0] [1, 4, 8] [1, 1, 1] : tensor<1x4x24xf32> to tensor<1x4x8xf32>
// CHECK: loom.reshape %{{.*}} : tensor<1x4x8xf32> to tensor<1x4x1x8xf32>
// CHECK: loom.slice %{{.*}} [0, 0, 8] [1, 4, 16] [1, 1, 1]
// CHECK: loom.slice %{{.*}} [0, 0, 16] [1, 4, 24] [1, 1, 1]
// CHECK: loom.attention {{.*}} : tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32> -> tensor<1x1x4x8xf32>
// CHECK: %[[P:.*]] = loom.matmul %{{.*}}, %{{.*}} transpose_rhs : tensor<1x4x8xf32>, tensor<16x8xf32> -> tensor<1x4x16xf32>
// CHECK-NEXT: %[[S:.*]], %[[T:.*]] = loom.all_reduce %[[P]] over #loom.group<@world, ["gpu"]> on comm : tensor<1x4x16xf32> -> tensor<1x4x16xf32>
// CHECK-NEXT: loom.wait %[[T]]
// CHECK-NEXT: loom.add %[[S]], %{{.*}} : tensor<1x4x16xf32>, tensor<16xf32>
// CHECK: loom.tp_enter
// CHECK: loom.matmul {{.*}} : tensor<1x4x16xf32>, tensor<32x16xf32> -> tensor<1x4x32xf32>
// CHECK: loom.add {{.*}} : tensor<1x4x32xf32>, tensor<32xf32> -> tensor<1x4x32xf32>
// CHECK: loom.gelu {{.*}} : tensor<1x4x32xf32>
// CHECK: loom.matmul {{.*}} : tensor<1x4x32xf32>, tensor<16x32xf32> -> tensor<1x4x16xf32>
// CHECK-NEXT: loom.all_reduce
module {
  loom.topology @world ["gpu" = 2]
  loom.param @wte : tensor<32x16xf32> init #loom.init<normal(0.0, 0.02)>
  loom.param @h.ln_1.weight : tensor<16xf32> init #loom.init<ones>
  loom.param @h.ln_1.bias : tensor<16xf32> init #loom.init<zeros>
  loom.param @h.attn.c_attn.weight : tensor<48x16xf32> init #loom.init<normal(0.0, 0.02)>
  loom.param @h.attn.c_attn.bias : tensor<48xf32> init #loom.init<zeros>
  loom.param @h.attn.c_proj.weight : tensor<16x16xf32> init #loom.init<normal(0.0, 0.02)>
  loom.param @h.attn.c_proj.bias : tensor<16xf32> init #loom.init<zeros>
  loom.param @h.mlp.c_fc.weight : tensor<64x16xf32> init #loom.init<normal(0.0, 0.02)>
  loom.param @h.mlp.c_fc.bias : tensor<64xf32> init #loom.init<zeros>
  loom.param @h.mlp.c_proj.weight : tensor<16x64xf32> init #loom.init<normal(0.0, 0.02)>
  func.func @forward(%arg0: tensor<1x4xi64>, %arg1: tensor<1x4xi64>) -> tensor<f32> {
    %0 = loom.load @wte : tensor<32x16xf32>
    %3 = loom.embedding %0[%arg0] : tensor<32x16xf32>, tensor<1x4xi64> -> tensor<1x4x16xf32>
    %4 = loom.load @h.ln_1.weight : tensor<16xf32>
    %5 = loom.load @h.ln_1.bias : tensor<16xf32>
    %6 = loom.layer_norm %3, %4, %5 eps 1.000000e-05 : tensor<1x4x16xf32>, tensor<16xf32>, tensor<16xf32> -> tensor<1x4x16xf32>
    %7 = loom.load @h.attn.c_attn.weight : tensor<48x16xf32>
    %8 = loom.load @h.attn.c_attn.bias : tensor<48xf32>
    %9 = loom.matmul %6, %7 transpose_rhs : tensor<1x4x16xf32>, tensor<48x16xf32> -> tensor<1x4x48xf32>
    %10 = loom.add %9, %8 : tensor<1x4x48xf32>, tensor<48xf32> -> tensor<1x4x48xf32>
    %11 = loom.slice %10 [0, 0, 0] [1, 4, 16] [1, 1, 1] : tensor<1x4x48xf32> to tensor<1x4x16xf32>
    %12 = loom.reshape %11 : tensor<1x4x16xf32> to tensor<1x4x2x8xf32>
    %13 = loom.transpose %12 [0, 2, 1, 3] : tensor<1x4x2x8xf32> to tensor<1x2x4x8xf32>
    %14 = loom.slice %10 [0, 0, 16] [1, 4, 32] [1, 1, 1] : tensor<1x4x48xf32> to tensor<1x4x16xf32>
    %15 = loom.reshape %14 : tensor<1x4x16xf32> to tensor<1x4x2x8xf32>
    %16 = loom.transpose %15 [0, 2, 1, 3] : tensor<1x4x2x8xf32> to tensor<1x2x4x8xf32>
    %17 = loom.slice %10 [0, 0, 32] [1, 4, 48] [1, 1, 1] : tensor<1x4x48xf32> to tensor<1x4x16xf32>
    %18 = loom.reshape %17 : tensor<1x4x16xf32> to tensor<1x4x2x8xf32>
    %19 = loom.transpose %18 [0, 2, 1, 3] : tensor<1x4x2x8xf32> to tensor<1x2x4x8xf32>
    %20 = loom.attention %13, %16, %19 causal scale 0.35355339059327373 : tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32> -> tensor<1x2x4x8xf32>
    %21 = loom.transpose %20 [0, 2, 1, 3] : tensor<1x2x4x8xf32> to tensor<1x4x2x8xf32>
    %22 = loom.reshape %21 : tensor<1x4x2x8xf32> to tensor<1x4x16xf32>
    %23 = loom.load @h.attn.c_proj.weight : tensor<16x16xf32>
    %24 = loom.load @h.attn.c_proj.bias : tensor<16xf32>
    %25 = loom.matmul %22, %23 transpose_rhs : tensor<1x4x16xf32>, tensor<16x16xf32> -> tensor<1x4x16xf32>
    %26 = loom.add %25, %24 : tensor<1x4x16xf32>, tensor<16xf32> -> tensor<1x4x16xf32>
    %27 = loom.add %3, %26 : tensor<1x4x16xf32>, tensor<1x4x16xf32> -> tensor<1x4x16xf32>
    %31 = loom.load @h.mlp.c_fc.weight : tensor<64x16xf32>
    %32 = loom.load @h.mlp.c_fc.bias : tensor<64xf32>
    %33 = loom.matmul %27, %31 transpose_rhs : tensor<1x4x16xf32>, tensor<64x16xf32> -> tensor<1x4x64xf32>
    %34 = loom.add %33, %32 : tensor<1x4x64xf32>, tensor<64xf32> -> tensor<1x4x64xf32>
    %35 = loom.gelu %34 approximate : tensor<1x4x64xf32>
    %36 = loom.load @h.mlp.c_proj.weight : tensor<16x64xf32>
    %38 = loom.matmul %35, %36 transpose_rhs : tensor<1x4x64xf32>, tensor<16x64xf32> -> tensor<1x4x16xf32>
    %40 = loom.add %27, %38 : tensor<1x4x16xf32>, tensor<1x4x16xf32> -> tensor<1x4x16xf32>
    %44 = loom.matmul %40, %0 transpose_rhs : tensor<1x4x16xf32>, tensor<32x16xf32> -> tensor<1x4x32xf32>
    %45 = loom.cross_entropy %44, %arg1 : tensor<1x4x32xf32>, tensor<1x4xi64> -> tensor<f32>
    return %45 : tensor<f32>
  }
}

// -----

// One head cannot be split over two ranks: refused at the attention.
module {
  loom.topology @world ["gpu" = 2]
  loom.param @q : tensor<8x8xf32> init #loom.init<normal(0.0, 0.02)>
  loom.param @o : tensor<8x8xf32> init #loom.init<normal(0.0, 0.02)>
  func.func @forward(%x: tensor<1x4x8xf32>, %y: tensor<1x4xi64>) -> tensor<f32> {
    %q = loom.load @q : tensor<8x8xf32>
    %h = loom.matmul %x, %q transpose_rhs : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32>
    %r = loom.reshape %h : tensor<1x4x8xf32> to tensor<1x4x1x8xf32>
    %t = loom.transpose %r [0, 2, 1, 3] : tensor<1x4x1x8xf32> to tensor<1x1x4x8xf32>
    // expected-error @+1 {{loom-tensor-parallel: needs its query, key and value split by heads (dimension 1)}}
    %a = loom.attention %t, %t, %t causal scale 0.35 : tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32> -> tensor<1x1x4x8xf32>
    %m = loom.transpose %a [0, 2, 1, 3] : tensor<1x1x4x8xf32> to tensor<1x4x1x8xf32>
    %b = loom.reshape %m : tensor<1x4x1x8xf32> to tensor<1x4x8xf32>
    %o = loom.load @o : tensor<8x8xf32>
    %p = loom.matmul %b, %o transpose_rhs : tensor<1x4x8xf32>, tensor<8x8xf32> -> tensor<1x4x8xf32>
    %s = loom.add %x, %p : tensor<1x4x8xf32>, tensor<1x4x8xf32> -> tensor<1x4x8xf32>
    %l = loom.cross_entropy %s, %y : tensor<1x4x8xf32>, tensor<1x4xi64> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// The size must be the innermost level's.
module {
  // expected-error @+1 {{loom-tensor-parallel: size=2 must equal the innermost level 'gpu' of the topology (4 ranks)}}
  loom.topology @world ["gpu" = 4]
  func.func @forward(%x: tensor<1x4x8xf32>, %y: tensor<1x4xi64>) -> tensor<f32> {
    %l = loom.cross_entropy %x, %y : tensor<1x4x8xf32>, tensor<1x4xi64> -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// A weight a branch splits, read whole elsewhere (tied): refused.
module {
  loom.topology @world ["gpu" = 2]
  loom.param @fc : tensor<16x8xf32> init #loom.init<normal(0.0, 0.02)>
  loom.param @proj : tensor<8x16xf32> init #loom.init<normal(0.0, 0.02)>
  func.func @forward(%x: tensor<1x4x8xf32>, %y: tensor<1x4xi64>) -> tensor<f32> {
    %w = loom.load @fc : tensor<16x8xf32>
    %u = loom.matmul %x, %w transpose_rhs : tensor<1x4x8xf32>, tensor<16x8xf32> -> tensor<1x4x16xf32>
    %g = loom.gelu %u approximate : tensor<1x4x16xf32>
    %pw = loom.load @proj : tensor<8x16xf32>
    %p = loom.matmul %g, %pw transpose_rhs : tensor<1x4x16xf32>, tensor<8x16xf32> -> tensor<1x4x8xf32>
    %s = loom.add %x, %p : tensor<1x4x8xf32>, tensor<1x4x8xf32> -> tensor<1x4x8xf32>
    // expected-error @+1 {{loom-tensor-parallel: loads 'fc', which the ranks split, where its whole value is read}}
    %w2 = loom.load @fc : tensor<16x8xf32>
    %l2 = loom.matmul %s, %w2 transpose_rhs : tensor<1x4x8xf32>, tensor<16x8xf32> -> tensor<1x4x16xf32>
    %l = loom.cross_entropy %l2, %y : tensor<1x4x16xf32>, tensor<1x4xi64> -> tensor<f32>
    return %l : tensor<f32>
  }
}
