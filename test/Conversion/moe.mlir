// RUN: loom-opt %s --loom-lower-to-runtime --loom-insert-frees | FileCheck %s
// A mixture-of-experts layer's routing and moves lowered: each op one
// runtime call on the compute stream, the [tokens, choices] tables i64
// buffers (8 bytes an entry), a move without weights passing no buffer.

func.func @train_step(%probs: tensor<16x4xf32>, %x: tensor<16x8xf32>) -> (tensor<16x8xf32>, tensor<4xf32>, tensor<16x4xf32>) {
  %v, %i = loom.top_k %probs k 2 : tensor<16x4xf32> -> tensor<16x2xf32>, tensor<16x2xi64>
  %slots, %counts = loom.moe_slots %i experts 4 capacity 10 : tensor<16x2xi64> -> tensor<16x2xi64>, tensor<4xf32>
  %buf = loom.moe_dispatch %x[%slots] : tensor<16x8xf32>, tensor<16x2xi64> -> tensor<40x8xf32>
  %y = loom.moe_combine %buf[%slots] weights %v : tensor<40x8xf32>, tensor<16x2xi64>, tensor<16x2xf32> -> tensor<16x8xf32>
  %dw = loom.moe_slot_dot %y, %buf[%slots] : tensor<16x8xf32>, tensor<40x8xf32>, tensor<16x2xi64> -> tensor<16x2xf32>
  %dp = loom.top_k_grad %dw[%i] : tensor<16x2xf32>, tensor<16x2xi64> -> tensor<16x4xf32>
  return %y, %counts, %dp : tensor<16x8xf32>, tensor<4xf32>, tensor<16x4xf32>
}

// CHECK-LABEL: func.func @train_step
// CHECK: %[[V:.+]] = loomrt.alloc 128
// CHECK-NEXT: %[[I:.+]] = loomrt.alloc 256
// CHECK-NEXT: loomrt.top_k f32 %{{.+}} -> %[[V]], %[[I]] rows 16 n 4 k 2 on %[[S:.+]]
// CHECK: %[[SL:.+]] = loomrt.alloc 256
// CHECK-NEXT: %[[C:.+]] = loomrt.alloc 16
// CHECK-NEXT: loomrt.moe_slots %[[I]] -> %[[SL]], %[[C]] tokens 16 k 2 experts 4 capacity 10 on %[[S]]
// CHECK: %[[B:.+]] = loomrt.alloc 1280
// CHECK-NEXT: loomrt.moe_dispatch f32 %{{.+}}[%[[SL]]] -> %[[B]] tokens 16 k 2 d 8 rows 40 on %[[S]]
// CHECK: loomrt.moe_combine f32 %[[B]][%[[SL]]] weights %[[V]] -> %[[Y:.+]] tokens 16 k 2 d 8 rows 40 on %[[S]]
// CHECK: loomrt.moe_slot_dot f32 %[[Y]], %[[B]][%[[SL]]] -> %[[DW:.+]] tokens 16 k 2 d 8 rows 40 on %[[S]]
// CHECK: loomrt.top_k_grad f32 %[[DW]][%[[I]]] -> %{{.+}} rows 16 n 4 k 2 on %[[S]]
