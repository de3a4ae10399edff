// RUN: loom-opt %s -split-input-file -verify-diagnostics --loom-expert-parallel="rank=1" | FileCheck %s
// The later cases fail on purpose; the first still prints its output.
// RUN: not loom-opt %s -split-input-file --loom-expert-parallel="rank=1" --loom-autodiff 2>/dev/null | FileCheck %s --check-prefix=AD
// Expert parallelism, rank 1 of 2: 4 experts of 4 rows; this rank keeps
// experts 2 and 3 (their parameters; the others' draws are skipped: 2 x
// (64 + 64) elements), the buffer goes to the experts' ranks and comes back
// by two all-to-alls, and each kept expert runs on both sources' rows.
// The module records the rank and level, the kept experts' parameters
// `loom.expert` (the router's is shared).
// CHECK: module attributes {loom.expert_parallel = array<i64: 1, 2, 0>}
// CHECK-NOT: loom.param @e0
// CHECK-NOT: loom.param @e1
// CHECK: loom.param @e2.up : tensor<4x16xf32> init #loom.init<normal(0.000000e+00, 2.000000e-02)> {loom.expert, loom.init_skip = 256 : i64}
// CHECK: loom.param @e3.down {{.*}} {loom.expert}
// CHECK: loom.param @router : tensor<4x16xf32> init #loom.init<normal(0.000000e+00, 2.000000e-02)>{{$}}
// CHECK-LABEL: func.func @forward
// CHECK: %[[BUF:.*]] = loom.moe_dispatch
// CHECK: %[[R:.*]], %[[T:.*]] = loom.all_to_all %[[BUF]] over #loom.group<@world, ["gpu"]> on comm : tensor<16x16xf32> -> tensor<16x16xf32>
// CHECK-NEXT: loom.wait %[[T]]
// CHECK: loom.slice %[[R]] [0, 0] [4, 16]
// CHECK: loom.slice %[[R]] [4, 0] [8, 16]
// CHECK: loom.slice %[[R]] [8, 0] [12, 16]
// CHECK: loom.slice %[[R]] [12, 0] [16, 16]
// CHECK: %[[OUT:.*]] = loom.concat {{.*}} dim 0 : {{.*}} -> tensor<16x16xf32>
// CHECK: %[[B:.*]], %[[T2:.*]] = loom.all_to_all %[[OUT]]
// CHECK-NEXT: loom.wait %[[T2]]
// CHECK: loom.moe_combine %[[B]][
// The backward moves the experts' output gradients back by an all-to-all (the
// dispatch side needs none here: %h is an input, not a parameter's work).
// AD-LABEL: func.func @forward_backward
// AD-COUNT-3: loom.all_to_all
loom.topology @world ["gpu" = 2]
loom.param @e0.up : tensor<4x16xf32> init #loom.init<normal(0.0, 0.02)>
loom.param @e0.down : tensor<16x4xf32> init #loom.init<normal(0.0, 0.02)>
loom.param @e1.up : tensor<4x16xf32> init #loom.init<normal(0.0, 0.02)>
loom.param @e1.down : tensor<16x4xf32> init #loom.init<normal(0.0, 0.02)>
loom.param @e2.up : tensor<4x16xf32> init #loom.init<normal(0.0, 0.02)>
loom.param @e2.down : tensor<16x4xf32> init #loom.init<normal(0.0, 0.02)>
loom.param @e3.up : tensor<4x16xf32> init #loom.init<normal(0.0, 0.02)>
loom.param @e3.down : tensor<16x4xf32> init #loom.init<normal(0.0, 0.02)>
loom.param @router : tensor<4x16xf32> init #loom.init<normal(0.0, 0.02)>
func.func @forward(%h: tensor<4x16xf32>, %y: tensor<4xi64>) -> tensor<f32> {
  %wr = loom.load @router : tensor<4x16xf32>
  %logits = loom.matmul %h, %wr transpose_rhs : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<4x4xf32>
  %p = loom.softmax %logits dim 1 : tensor<4x4xf32>
  %v, %i = loom.top_k %p k 1 : tensor<4x4xf32> -> tensor<4x1xf32>, tensor<4x1xi64>
  %slots, %counts = loom.moe_slots %i experts 4 capacity 4 : tensor<4x1xi64> -> tensor<4x1xi64>, tensor<4xf32>
  %buf = loom.moe_dispatch %h[%slots] : tensor<4x16xf32>, tensor<4x1xi64> -> tensor<16x16xf32>
  %x0 = loom.slice %buf [0, 0] [4, 16] [1, 1] : tensor<16x16xf32> to tensor<4x16xf32>
  %u0 = loom.load @e0.up : tensor<4x16xf32>
  %a0 = loom.matmul %x0, %u0 transpose_rhs : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<4x4xf32>
  %s0 = loom.silu %a0 : tensor<4x4xf32>
  %d0 = loom.load @e0.down : tensor<16x4xf32>
  %y0 = loom.matmul %s0, %d0 transpose_rhs : tensor<4x4xf32>, tensor<16x4xf32> -> tensor<4x16xf32>
  %x1 = loom.slice %buf [4, 0] [8, 16] [1, 1] : tensor<16x16xf32> to tensor<4x16xf32>
  %u1 = loom.load @e1.up : tensor<4x16xf32>
  %a1 = loom.matmul %x1, %u1 transpose_rhs : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<4x4xf32>
  %s1 = loom.silu %a1 : tensor<4x4xf32>
  %d1 = loom.load @e1.down : tensor<16x4xf32>
  %y1 = loom.matmul %s1, %d1 transpose_rhs : tensor<4x4xf32>, tensor<16x4xf32> -> tensor<4x16xf32>
  %x2 = loom.slice %buf [8, 0] [12, 16] [1, 1] : tensor<16x16xf32> to tensor<4x16xf32>
  %u2 = loom.load @e2.up : tensor<4x16xf32>
  %a2 = loom.matmul %x2, %u2 transpose_rhs : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<4x4xf32>
  %s2 = loom.silu %a2 : tensor<4x4xf32>
  %d2 = loom.load @e2.down : tensor<16x4xf32>
  %y2 = loom.matmul %s2, %d2 transpose_rhs : tensor<4x4xf32>, tensor<16x4xf32> -> tensor<4x16xf32>
  %x3 = loom.slice %buf [12, 0] [16, 16] [1, 1] : tensor<16x16xf32> to tensor<4x16xf32>
  %u3 = loom.load @e3.up : tensor<4x16xf32>
  %a3 = loom.matmul %x3, %u3 transpose_rhs : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<4x4xf32>
  %s3 = loom.silu %a3 : tensor<4x4xf32>
  %d3 = loom.load @e3.down : tensor<16x4xf32>
  %y3 = loom.matmul %s3, %d3 transpose_rhs : tensor<4x4xf32>, tensor<16x4xf32> -> tensor<4x16xf32>
  %ys = loom.concat %y0, %y1, %y2, %y3 dim 0 : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32> -> tensor<16x16xf32>
  %out = loom.moe_combine %ys[%slots] weights %v : tensor<16x16xf32>, tensor<4x1xi64>, tensor<4x1xf32> -> tensor<4x16xf32>
  %l = loom.cross_entropy %out, %y : tensor<4x16xf32>, tensor<4xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// 3 experts do not divide over 2 ranks.
loom.topology @world ["gpu" = 2]
func.func @forward(%h: tensor<4x16xf32>, %i: tensor<4x1xi64>) -> tensor<f32> {
  %slots, %counts = loom.moe_slots %i experts 3 capacity 4 : tensor<4x1xi64> -> tensor<4x1xi64>, tensor<3xf32>
  // expected-error@+1 {{loom-expert-parallel: 3 experts do not divide over 2 ranks}}
  %buf = loom.moe_dispatch %h[%slots] : tensor<4x16xf32>, tensor<4x1xi64> -> tensor<12x16xf32>
  %x0 = loom.slice %buf [0, 0] [4, 16] [1, 1] : tensor<12x16xf32> to tensor<4x16xf32>
  %x1 = loom.slice %buf [4, 0] [8, 16] [1, 1] : tensor<12x16xf32> to tensor<4x16xf32>
  %x2 = loom.slice %buf [8, 0] [12, 16] [1, 1] : tensor<12x16xf32> to tensor<4x16xf32>
  %ys = loom.concat %x0, %x1, %x2 dim 0 : tensor<4x16xf32>, tensor<4x16xf32>, tensor<4x16xf32> -> tensor<12x16xf32>
  %out = loom.moe_combine %ys[%slots] : tensor<12x16xf32>, tensor<4x1xi64> -> tensor<4x16xf32>
  %r = loom.reduce sum %out [0, 1] : tensor<4x16xf32> to tensor<f32>
  return %r : tensor<f32>
}

// -----

// expected-error@+1 {{loom-expert-parallel: has no mixture-of-experts layer (loom.moe_dispatch)}}
func.func @forward(%h: tensor<4x16xf32>) -> tensor<f32> {
  %r = loom.reduce sum %h [0, 1] : tensor<4x16xf32> to tensor<f32>
  return %r : tensor<f32>
}
loom.topology @world ["gpu" = 2]

// -----

// A layer that is not the generator's: no combine of the experts' outputs.
loom.topology @world ["gpu" = 2]
func.func @forward(%h: tensor<4x16xf32>, %i: tensor<4x1xi64>) -> tensor<f32> {
  %slots, %counts = loom.moe_slots %i experts 2 capacity 4 : tensor<4x1xi64> -> tensor<4x1xi64>, tensor<2xf32>
  // expected-error@+1 {{loom-expert-parallel: needs its loom.moe_combine to read a concat of the 2 experts' outputs (the generator's layer)}}
  %buf = loom.moe_dispatch %h[%slots] : tensor<4x16xf32>, tensor<4x1xi64> -> tensor<8x16xf32>
  %r = loom.reduce sum %buf [0, 1] : tensor<8x16xf32> to tensor<f32>
  return %r : tensor<f32>
}

// -----

// The dispatch buffer read other than by the experts' slices.
loom.topology @world ["gpu" = 2]
func.func @forward(%h: tensor<4x16xf32>, %i: tensor<4x1xi64>) -> tensor<f32> {
  %slots, %counts = loom.moe_slots %i experts 2 capacity 4 : tensor<4x1xi64> -> tensor<4x1xi64>, tensor<2xf32>
  %buf = loom.moe_dispatch %h[%slots] : tensor<4x16xf32>, tensor<4x1xi64> -> tensor<8x16xf32>
  %x0 = loom.slice %buf [0, 0] [4, 16] [1, 1] : tensor<8x16xf32> to tensor<4x16xf32>
  %x1 = loom.slice %buf [4, 0] [8, 16] [1, 1] : tensor<8x16xf32> to tensor<4x16xf32>
  %ys = loom.concat %x0, %x1 dim 0 : tensor<4x16xf32>, tensor<4x16xf32> -> tensor<8x16xf32>
  %out = loom.moe_combine %ys[%slots] : tensor<8x16xf32>, tensor<4x1xi64> -> tensor<4x16xf32>
  // expected-error@+1 {{loom-expert-parallel: reads the dispatch buffer other than as one expert's 4 rows}}
  %r = loom.reduce sum %buf [0, 1] : tensor<8x16xf32> to tensor<f32>
  %q = loom.reduce sum %out [0, 1] : tensor<4x16xf32> to tensor<f32>
  %l = loom.add %r, %q : tensor<f32>, tensor<f32> -> tensor<f32>
  return %l : tensor<f32>
}
