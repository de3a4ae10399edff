// RUN: loom-opt %s | FileCheck %s
// RUN: loom-opt %s | loom-opt | FileCheck %s
// RUN: loom-opt %s -mlir-print-op-generic | loom-opt | FileCheck %s
// Every loomrt op, printed in its custom form and parsed back.

loom.param @w : tensor<4x4xf32> init #loom.init<zeros>
loom.state @t : tensor<i64> role step init #loom.init<zeros>

// CHECK-LABEL: func.func @all
// CHECK-SAME: loomrt.arena = 1024 : i64
func.func @all(%x: !loomrt.buffer, %i: !loomrt.buffer) -> !loomrt.buffer attributes {loomrt.arena = 1024 : i64} {
  // CHECK: %[[S:.+]] = loomrt.stream compute
  %s = loomrt.stream compute
  %hs = loomrt.stream host
  %cs = loomrt.stream comm
  %xs = loomrt.stream h2d
  // CHECK: %[[C:.+]] = loomrt.comm
  %c = loomrt.comm
  // A group of some levels: here the second of ["gpu" = 2, "node" = 4].
  // CHECK: loomrt.comm levels [1] of [2, 4]
  %g = loomrt.comm levels [1] of [2, 4]
  // CHECK: loomrt.comment "what follows"
  loomrt.comment "what follows"
  // CHECK: %[[A:.+]] = loomrt.alloc 64
  %a = loomrt.alloc 64
  // CHECK: loomrt.alloc 64 host
  %h = loomrt.alloc 64 host
  // CHECK: loomrt.alloc 512 at 512
  %p = loomrt.alloc 512 at 512
  // CHECK: loomrt.global @w
  %w = loomrt.global @w
  // CHECK: loomrt.view %[[A]][16]
  %v = loomrt.view %a[16]
  // CHECK: loomrt.rank_view %[[A]][32] of %[[C]]
  %r = loomrt.rank_view %a[32] of %c
  // CHECK: loomrt.memcpy %{{.+}}, %{{.+}}, 64 on %[[S]]
  loomrt.memcpy %h, %a, 64 on %s
  // CHECK: loomrt.write_const %{{.+}}, dense<[1.000000e+00, 2.000000e+00]> : tensor<2xf32> on
  loomrt.write_const %a, dense<[1.0, 2.0]> : tensor<2xf32> on %s
  // CHECK: loomrt.fill bf16 %{{.+}}, 5.000000e-01, 8 on
  loomrt.fill bf16 %a, 0.5, 8 on %s
  // CHECK: loomrt.copy_strided %{{.+}} [1, 4] -> %{{.+}} [4, 1] shape [4, 4] elem 4 on
  loomrt.copy_strided %w [1, 4] -> %a [4, 1] shape [4, 4] elem 4 on %s
  // CHECK: loomrt.unary gelu_tanh f32 %{{.+}} -> %{{.+}}, 16 on
  loomrt.unary gelu_tanh f32 %x -> %a, 16 on %s
  // CHECK: loomrt.onebit_compress %{{.+}}, %{{.+}} -> %{{.+}}, 16 on
  loomrt.onebit_compress %x, %a -> %v, 16 on %s
  // CHECK: loomrt.onebit_decompress %{{.+}} -> %{{.+}}, 16 on
  loomrt.onebit_decompress %v -> %a, 16 on %s
  // CHECK: %[[K:.+]] = loomrt.random_key 3
  // CHECK: loomrt.dropout f32 %{{.+}} -> %{{.+}}, 16 key %[[K]] ratio 1.000000e-01 of %{{.+}} on
  %k = loomrt.random_key 3
  loomrt.dropout f32 %x -> %a, 16 key %k ratio 0.1 of %c on %s
  // CHECK: loomrt.unary_grad silu f32
  loomrt.unary_grad silu f32 %x, %x -> %a, 16 on %s
  // CHECK: loomrt.binary pow f32 %{{.+}} [4, 4], %{{.+}} [1, 4] -> %{{.+}} [4, 4] on
  loomrt.binary pow f32 %x [4, 4], %w [1, 4] -> %a [4, 4] on %s
  // CHECK: loomrt.select f32
  loomrt.select f32 %i [4, 4], %x [4, 4], %w [4, 4] -> %a [4, 4] on %s
  // CHECK: loomrt.cast f32 %{{.+}} -> bf16
  loomrt.cast f32 %x -> bf16 %a, 16 on %s
  // CHECK: loomrt.matmul bf16 %{{.+}}, %{{.+}} -> f32 %{{.+}} on %[[S]] {batch = 1 : i64, k = 4 : i64, m = 4 : i64, n = 4 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 16 : i64, trans_b}
  loomrt.matmul bf16 %x, %w -> f32 %a on %s {batch = 1 : i64, k = 4 : i64, m = 4 : i64, n = 4 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 16 : i64, trans_b}
  // CHECK: loomrt.fused_elementwise "silu_mul_0"(%{{.+}}, %{{.+}}) -> (%{{.+}}), 16 on %[[S]] {in_types = array<i32: 0, 0>, out_types = array<i32: 1>, program = array<i32: 0, 0, 0, 0, 0, 0, 1, 0, 1, 11, 0, 0, 2, 2, 2, 1, 4, 0, 0, 3>}
  loomrt.fused_elementwise "silu_mul_0" (%x, %w) -> (%a), 16 on %s {in_types = array<i32: 0, 0>, out_types = array<i32: 1>, program = array<i32: 0, 0, 0, 0, 0, 0, 1, 0, 1, 11, 0, 0, 2, 2, 2, 1, 4, 0, 0, 3>}
  // CHECK: loomrt.matmul_bias f32 %{{.+}}, %{{.+}} bias %{{.+}} -> f32 %{{.+}} on %[[S]] {batch = 1 : i64, k = 4 : i64, m = 4 : i64, n = 4 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 16 : i64, trans_b}
  loomrt.matmul_bias f32 %x, %w bias %v -> f32 %a on %s {batch = 1 : i64, k = 4 : i64, m = 4 : i64, n = 4 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 16 : i64, trans_b}
  // CHECK: loomrt.matmul_bias_act gelu_tanh f32 %{{.+}}, %{{.+}} bias %{{.+}} -> f32 %{{.+}} aux %{{.+}} on %[[S]]
  loomrt.matmul_bias_act gelu_tanh f32 %x, %w bias %v -> f32 %a aux %x on %s {batch = 1 : i64, k = 4 : i64, m = 4 : i64, n = 4 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 16 : i64, trans_b}
  // CHECK: loomrt.matmul_act_grad gelu_tanh f32 %{{.+}}, %{{.+}} aux %{{.+}} -> f32 %{{.+}} on %[[S]]
  loomrt.matmul_act_grad gelu_tanh f32 %x, %w aux %x -> f32 %a on %s {batch = 1 : i64, k = 4 : i64, m = 4 : i64, n = 4 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 16 : i64}
  loomrt.layer_norm f32 %x, %w, %w -> %a on %s {rows = 4 : i64, d = 4 : i64, eps = 1.0e-5 : f64}
  // CHECK: loomrt.layer_norm f32 %{{.+}}, %{{.+}} -> %{{.+}} on
  loomrt.layer_norm f32 %x, %w -> %a on %s {rows = 4 : i64, d = 4 : i64, eps = 1.0e-5 : f64}
  // CHECK: loomrt.rotary f32 %{{.+}}, %{{.+}}, %{{.+}} -> %{{.+}} transpose on
  loomrt.rotary f32 %x, %w, %w -> %a transpose on %s {rows = 4 : i64, period = 1 : i64, d = 4 : i64}
  loomrt.layer_norm_grad f32 %x, %x, %w -> %a, %a, %a on %s {rows = 4 : i64, d = 4 : i64, eps = 1.0e-5 : f64}
  loomrt.rms_norm f32 %x, %w -> %a on %s {rows = 4 : i64, d = 4 : i64, eps = 1.0e-5 : f64}
  loomrt.rms_norm_grad f32 %x, %x, %w -> %a, %a on %s {rows = 4 : i64, d = 4 : i64, eps = 1.0e-5 : f64}
  // CHECK: loomrt.softmax f32 %{{.+}} -> %{{.+}} on %[[S]] {d = 4 : i64, log, rows = 4 : i64}
  loomrt.softmax f32 %x -> %a on %s {rows = 4 : i64, d = 4 : i64, log}
  loomrt.softmax_grad f32 %x, %x -> %a on %s {rows = 4 : i64, d = 4 : i64}
  // CHECK: loomrt.embedding f32 %{{.+}}[%{{.+}}] -> %{{.+}} on
  loomrt.embedding f32 %w[%i] -> %a on %s {n = 2 : i64, d = 4 : i64, vocab = 4 : i64}
  loomrt.embedding_grad f32 %x[%i] -> %a on %s {n = 2 : i64, d = 4 : i64, vocab = 4 : i64}
  // CHECK: loomrt.top_k f32 %{{.+}} -> %{{.+}}, %{{.+}} rows 2 n 4 k 2 on
  loomrt.top_k f32 %x -> %a, %i rows 2 n 4 k 2 on %s
  loomrt.top_k_grad f32 %x[%i] -> %a rows 2 n 4 k 2 on %s
  // CHECK: loomrt.moe_slots %{{.+}} -> %{{.+}}, %{{.+}} tokens 2 k 1 experts 4 capacity 1 on
  loomrt.moe_slots %i -> %i, %a tokens 2 k 1 experts 4 capacity 1 on %s
  // CHECK: loomrt.moe_dispatch f32 %{{.+}}[%{{.+}}] weights %{{.+}} -> %{{.+}} tokens 2 k 1 d 4 rows 4 on
  loomrt.moe_dispatch f32 %x[%i] weights %w -> %a tokens 2 k 1 d 4 rows 4 on %s
  // CHECK: loomrt.moe_combine f32 %{{.+}}[%{{.+}}] -> %{{.+}} tokens 2 k 1 d 4 rows 4 on
  loomrt.moe_combine f32 %x[%i] -> %a tokens 2 k 1 d 4 rows 4 on %s
  loomrt.moe_slot_dot f32 %x, %w[%i] -> %a tokens 2 k 1 d 4 rows 4 on %s
  // CHECK: loomrt.attention bf16 %{{.+}}, %{{.+}}, %{{.+}} -> %{{.+}} workspace %{{.+}} on
  loomrt.attention bf16 %x, %x, %x -> %a workspace %h on %s {bh = 2 : i64, t = 8 : i64, s = 8 : i64, dh = 64 : i64, scale = 0.125 : f64, causal}
  loomrt.attention_grad bf16 %x, %x, %x, %x -> %a, %a, %a workspace %h on %s {bh = 2 : i64, t = 8 : i64, s = 8 : i64, dh = 64 : i64, scale = 0.125 : f64}
  loomrt.cross_entropy f32 %x, %i -> %a on %s {rows = 2 : i64, classes = 8 : i64}
  loomrt.cross_entropy_grad f32 %x, %i, %a -> %a on %s {rows = 2 : i64, classes = 8 : i64}
  // CHECK: loomrt.reduce mean f32 %{{.+}} -> %{{[0-9]+}}[2, 3, 4] on
  loomrt.reduce mean f32 %x -> %a [2, 3, 4] on %s
  %tb = loomrt.global @t
  // CHECK: %[[T:.+]] = loomrt.add_i64
  %t = loomrt.add_i64 %tb, %tb -> %a on %s
  %t2 = loomrt.read_i64 %tb on %s
  // CHECK: loomrt.adam %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} step %[[T]] refresh %{{.+}} grad bf16 on
  loomrt.adam %w, %x, %a, %a step %t refresh %h grad bf16 on %hs {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, n = 16 : i64, timed}
  loomrt.adam %w, %x, %a, %a step %t2 grad f32 on %s {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, n = 16 : i64}
  // CHECK: loomrt.adam_multi(%{{.+}}, %{{.+}}), (%{{.+}}, %{{.+}}), (%{{.+}}, %{{.+}}), (%{{.+}}, %{{.+}}) step %{{.+}} grad f32 on %[[S]] {{.*}}sizes = array<i64: 16, 16>
  loomrt.adam_multi (%w, %a), (%x, %x), (%a, %w), (%a, %w) step %t2 grad f32 on %s {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, sizes = array<i64: 16, 16>}
  loomrt.sgd %w, %x, %a on %s {lr = 0.1 : f64, momentum = 0.9 : f64, nesterov, n = 16 : i64}
  // CHECK: %[[E:.+]] = loomrt.record %[[S]]
  %e = loomrt.record %s
  // CHECK: loomrt.wait %{{.+}} for %[[E]]
  loomrt.wait %cs for %e
  // CHECK: loomrt.all_reduce sum f32 %{{.+}} -> %{{.+}}, 16 over %[[C]] on
  loomrt.all_reduce sum f32 %x -> %a, 16 over %c on %cs
  // CHECK: loomrt.send_recv %{{.+}} -> %{{.+}}, 64 bytes shift -1 over %[[C]] on
  loomrt.send_recv %x -> %a, 64 bytes shift -1 over %c on %cs
  // CHECK: loomrt.p2p send %{{.+}} to 1 recv %{{.+}} from 1, 64 bytes over %[[C]] on
  loomrt.p2p send %x to 1 recv %a from 1, 64 bytes over %c on %cs
  // CHECK: loomrt.p2p recv %{{.+}} from -1, 64 bytes over %[[C]] on
  loomrt.p2p recv %a from -1, 64 bytes over %c on %cs
  loomrt.reduce_scatter mean bf16 %x -> %a, 8 over %c on %cs
  loomrt.all_gather f32 %x -> %a, 8 over %c on %cs
  %d = loomrt.record %xs
  // CHECK: loomrt.sync
  loomrt.sync %d
  // CHECK: %[[T:.+]] = loomrt.host_task -> !loomrt.event {
  // CHECK-NEXT: loomrt.sync
  // CHECK-NEXT: loomrt.memcpy
  // CHECK-NEXT: %[[R:.+]] = loomrt.record
  // CHECK-NEXT: loomrt.yield %[[R]]
  // CHECK-NEXT: }
  // CHECK-NEXT: loomrt.join
  // CHECK-NEXT: loomrt.wait %{{.+}} for %[[T]]
  %task = loomrt.host_task -> !loomrt.event {
    loomrt.sync %d
    loomrt.memcpy %a, %x, 64 on %xs
    %done = loomrt.record %xs
    loomrt.yield %done
  }
  loomrt.join
  loomrt.wait %s for %task
  loomrt.backward_done
  // CHECK: loomrt.free %[[A]]
  loomrt.free %a
  return %v : !loomrt.buffer
}
