// loom-fuse: chains of elementwise calls in the lowered step become
// loomrt.fused_elementwise regions (their intermediates gone); what must be
// left alone is.
// RUN: loom-opt %s --loom-fuse | FileCheck %s

// CHECK-LABEL: func.func @swiglu
// CHECK: %[[GATE:.+]] = loomrt.alloc 8192
// CHECK-NEXT: %[[X:.+]] = loomrt.alloc 8192
// CHECK-NEXT: %[[W:.+]] = loomrt.global @w
// CHECK-NEXT: %[[UP:.+]] = loomrt.alloc 8192
// CHECK-NEXT: loomrt.matmul bf16 %[[X]], %[[W]] -> bf16 %[[UP]]
// CHECK-NEXT: %[[Y:.+]] = loomrt.alloc 8192
// CHECK-NEXT: loomrt.fused_elementwise "silu_mul_exp_0"(%[[GATE]], %[[UP]]) -> (%[[Y]], %[[X]]), 4096 on %{{.+}} {in_types = array<i32: 1, 1>, out_types = array<i32: 1, 1>, program = array<i32: 0, 0, 0, 0, 0, 0, 1, 0, 1, 11, 0, 0, 5, 0, 2, 0, 2, 2, 3, 1, 5, 0, 4, 0, 1, 1, 5, 0, 5, 0, 6, 0, 4, 0, 0, 5, 4, 0, 1, 7>}
// CHECK-NEXT: loomrt.free %[[UP]]
// CHECK-NEXT: loomrt.free %[[GATE]]
// CHECK-NEXT: return

// CHECK-LABEL: func.func @cast_grad
// CHECK: %[[XB:.+]] = loomrt.alloc 2048
// CHECK-NEXT: %[[DY:.+]] = loomrt.alloc 4096
// CHECK-NEXT: %[[DX:.+]] = loomrt.alloc 4096
// CHECK-NEXT: loomrt.fused_elementwise "cast_gelu_tanh_grad_1"(%[[XB]], %[[DY]]) -> (%[[DX]]), 1024 on %{{.+}} {in_types = array<i32: 1, 0>, out_types = array<i32: 0>, program = array<i32: 0, 0, 0, 0, 0, 0, 1, 0, 3, 13, 1, 0, 4, 0, 0, 2>}
// CHECK-NEXT: loomrt.free %[[DY]]
// CHECK-NEXT: return

// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: loomrt.fused_elementwise
// CHECK: loomrt.unary neg
// CHECK-NEXT: loomrt.binary add f32 %{{.+}} [16, 64], %{{.+}} [1, 64]
// CHECK-NEXT: loomrt.unary exp f32 %{{.+}} -> %{{.+}}, 512
// CHECK-NEXT: loomrt.unary exp f32 %{{.+}} -> %{{.+}}, 1024
// CHECK-NEXT: loomrt.record
// CHECK-NEXT: loomrt.unary tanh
// CHECK-NEXT: loomrt.view
// CHECK-NEXT: loomrt.unary relu
// CHECK-NOT: loomrt.fused_elementwise

module {
  loom.param @w : tensor<64x64xf32> init #loom.init<zeros>
  // A SwiGLU: silu of the gate, the up projection (a GEMM that touches none
  // of the chain's buffers: the chain goes on past it), their product, then
  // exp of it written over the GEMM's input (read by the GEMM before: the
  // region runs after the GEMM). The silu's result is freed and used by
  // nothing else: an intermediate, its allocation and free gone. The gate's
  // free moves after the region.
  func.func @swiglu() {
    %s = loomrt.stream compute
    %gate = loomrt.alloc 8192
    %x = loomrt.alloc 8192
    %g = loomrt.alloc 8192
    loomrt.unary silu bf16 %gate -> %g, 4096 on %s
    loomrt.free %gate
    %w = loomrt.global @w
    %up = loomrt.alloc 8192
    loomrt.matmul bf16 %x, %w -> bf16 %up on %s {batch = 1 : i64, k = 64 : i64, m = 64 : i64, n = 64 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 4096 : i64, trans_b}
    %y = loomrt.alloc 8192
    loomrt.binary mul bf16 %g [4096], %up [4096] -> %y [4096] on %s
    loomrt.free %g
    loomrt.free %up
    loomrt.unary exp bf16 %y -> %x, 4096 on %s
    return
  }

  // A cast to f32 and a gradient: the region reads bf16 and f32 and writes
  // f32; the cast is no instruction (values are fp32 inside). The free
  // after the chain's last call stays where it is.
  func.func @cast_grad() {
    %s = loomrt.stream compute
    %x = loomrt.alloc 2048
    %dy = loomrt.alloc 4096
    %xf = loomrt.alloc 4096
    loomrt.cast bf16 %x -> f32 %xf, 1024 on %s
    %dx = loomrt.alloc 4096
    loomrt.unary_grad gelu_tanh f32 %dy, %xf -> %dx, 1024 on %s
    loomrt.free %xf
    loomrt.free %dy
    return
  }

  // Not fused: a broadcasting add, calls over different element counts, a
  // chain broken by an event record, and a view of a buffer the chain has
  // written.
  func.func @left_alone() {
    %s = loomrt.stream compute
    %a = loomrt.alloc 4096
    %b = loomrt.alloc 64
    %c = loomrt.alloc 4096
    loomrt.unary neg f32 %a -> %c, 1024 on %s
    loomrt.binary add f32 %c [16, 64], %b [1, 64] -> %a [16, 64] on %s
    loomrt.unary exp f32 %a -> %c, 512 on %s
    loomrt.unary exp f32 %c -> %a, 1024 on %s
    %e = loomrt.record %s
    loomrt.unary tanh f32 %a -> %c, 1024 on %s
    %v = loomrt.view %c[0]
    loomrt.unary relu f32 %v -> %a, 1024 on %s
    return
  }
}
