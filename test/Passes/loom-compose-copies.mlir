// RUN: loom-opt %s --loom-compose-copies --split-input-file | FileCheck %s
// loom-compose-copies: a strided copy into a dense temporary followed by a
// copy out of it is one copy; strides worked out by hand below.

// The forward: q's slice of the [2, 16, 192] qkv projection, then its head
// transpose [B, T, H, D] -> [B, H, T, D]; the projection's free (between
// the two copies) moves after the composed copy.
// CHECK-LABEL: func.func @slice_then_transpose
// CHECK: %[[V:.+]] = loomrt.view %arg0[256]
// CHECK-NEXT: %[[Q:.+]] = loomrt.alloc 4096
// CHECK-NEXT: loomrt.copy_strided %[[V]] [3072, 16, 192, 1] -> %[[Q]] [1024, 256, 16, 1] shape [2, 4, 16, 16] elem 2
// CHECK-NEXT: loomrt.free %arg0
// CHECK-NOT: loomrt.copy_strided
func.func @slice_then_transpose(%qkv: !loomrt.buffer) -> !loomrt.buffer {
  %s = loomrt.stream compute
  %v = loomrt.view %qkv[256]
  %t = loomrt.alloc 4096
  loomrt.copy_strided %v [3072, 192, 1] -> %t [1024, 64, 1] shape [2, 16, 64] elem 2 on %s
  loomrt.free %qkv
  %q = loomrt.alloc 4096
  loomrt.copy_strided %t [1024, 16, 64, 1] -> %q [1024, 256, 16, 1] shape [2, 4, 16, 16] elem 2 on %s
  loomrt.free %t
  return %q : !loomrt.buffer
}

// -----

// The backward: a gradient's head transpose back to [B, T, H, D], then its
// copy into its third of the qkv gradient, with other work between. The
// second copy's row of 64 spans two digits of the temporary (H = 4 and
// D = 16): split into [4, 16].
// CHECK-LABEL: func.func @transpose_then_concat
// CHECK: loomrt.unary neg f32 %arg1 -> %arg2, 8 on
// CHECK: %[[V:.+]] = loomrt.view %arg3[256]
// CHECK-NEXT: loomrt.copy_strided %arg0 [1024, 16, 256, 1] -> %[[V]] [3072, 192, 16, 1] shape [2, 16, 4, 16] elem 2
// CHECK-NEXT: loomrt.free %arg0
// CHECK-NOT: loomrt.copy_strided
func.func @transpose_then_concat(%dv: !loomrt.buffer, %x: !loomrt.buffer, %y: !loomrt.buffer, %dqkv: !loomrt.buffer) {
  %s = loomrt.stream compute
  %t = loomrt.alloc 4096
  loomrt.copy_strided %dv [1024, 16, 256, 1] -> %t [1024, 64, 16, 1] shape [2, 16, 4, 16] elem 2 on %s
  loomrt.free %dv
  loomrt.unary neg f32 %x -> %y, 8 on %s
  %v = loomrt.view %dqkv[256]
  loomrt.copy_strided %t [1024, 64, 1] -> %v [3072, 192, 1] shape [2, 16, 64] elem 2 on %s
  loomrt.free %t
  return
}

// -----

// A chain of three copies composes into one: a [3, 4] matrix transposed
// into a dense [4, 3], transposed back, then copied as it is.
// CHECK-LABEL: func.func @chain
// CHECK: loomrt.copy_strided %arg0 [4, 1] -> %arg1 [4, 1] shape [3, 4] elem 4
// CHECK-NOT: loomrt.copy_strided
// CHECK-NOT: loomrt.alloc
func.func @chain(%a: !loomrt.buffer, %d: !loomrt.buffer) {
  %s = loomrt.stream compute
  %t1 = loomrt.alloc 48
  loomrt.copy_strided %a [1, 4] -> %t1 [3, 1] shape [4, 3] elem 4 on %s
  %t2 = loomrt.alloc 48
  loomrt.copy_strided %t1 [1, 3] -> %t2 [4, 1] shape [3, 4] elem 4 on %s
  loomrt.free %t1
  loomrt.copy_strided %t2 [4, 1] -> %d [4, 1] shape [3, 4] elem 4 on %s
  loomrt.free %t2
  return
}

// -----

// Left alone: the temporary is read again; the copies run on two streams;
// the source is written between them; the temporary is not dense; a
// dimension steps across digits at a stride that is no unit (the second
// copy reads every other element of a [4, 4] temporary's rows of 8: a
// carry); the temporary is host memory.
// CHECK-LABEL: func.func @not_composed
// CHECK-COUNT-12: loomrt.copy_strided
func.func @not_composed(%a: !loomrt.buffer, %d: !loomrt.buffer, %e: !loomrt.buffer) {
  %s = loomrt.stream compute
  %h = loomrt.stream host
  %t1 = loomrt.alloc 64
  loomrt.copy_strided %a [1, 4] -> %t1 [4, 1] shape [4, 4] elem 4 on %s
  loomrt.copy_strided %t1 [4, 1] -> %d [4, 1] shape [4, 4] elem 4 on %s
  loomrt.unary neg f32 %t1 -> %e, 16 on %s
  loomrt.free %t1
  %t2 = loomrt.alloc 64
  loomrt.copy_strided %a [1, 4] -> %t2 [4, 1] shape [4, 4] elem 4 on %s
  loomrt.copy_strided %t2 [4, 1] -> %d [4, 1] shape [4, 4] elem 4 on %h
  loomrt.free %t2
  %t3 = loomrt.alloc 64
  loomrt.copy_strided %a [1, 4] -> %t3 [4, 1] shape [4, 4] elem 4 on %s
  loomrt.unary neg f32 %e -> %a, 16 on %s
  loomrt.copy_strided %t3 [4, 1] -> %d [4, 1] shape [4, 4] elem 4 on %s
  loomrt.free %t3
  %t4 = loomrt.alloc 128
  loomrt.copy_strided %a [1, 4] -> %t4 [8, 1] shape [4, 4] elem 4 on %s
  loomrt.copy_strided %t4 [8, 1] -> %d [4, 1] shape [4, 4] elem 4 on %s
  loomrt.free %t4
  %t5 = loomrt.alloc 128
  loomrt.copy_strided %a [8, 1] -> %t5 [8, 1] shape [4, 8] elem 4 on %s
  loomrt.copy_strided %t5 [2] -> %d [1] shape [16] elem 4 on %s
  loomrt.free %t5
  %t6 = loomrt.alloc 64 host
  loomrt.copy_strided %a [1, 4] -> %t6 [4, 1] shape [4, 4] elem 4 on %s
  loomrt.copy_strided %t6 [4, 1] -> %d [4, 1] shape [4, 4] elem 4 on %s
  loomrt.free %t6
  return
}

// -----

// Left alone: a parameter transposed, then written between the copies
// through another loomrt.global of the same symbol; and a global's copy
// with a call between (the callee may write it).
// CHECK-LABEL: func.func @globals
// CHECK-COUNT-4: loomrt.copy_strided
module {
  loom.param @w : tensor<4x4xf32> init #loom.init<zeros>
  func.func private @update()
  func.func @globals(%d: !loomrt.buffer, %e: !loomrt.buffer) {
    %s = loomrt.stream compute
    %w = loomrt.global @w
    %t = loomrt.alloc 64
    loomrt.copy_strided %w [1, 4] -> %t [4, 1] shape [4, 4] elem 4 on %s
    %w2 = loomrt.global @w
    loomrt.unary neg f32 %e -> %w2, 16 on %s
    loomrt.copy_strided %t [4, 1] -> %d [4, 1] shape [4, 4] elem 4 on %s
    loomrt.free %t
    %t2 = loomrt.alloc 64
    loomrt.copy_strided %w [1, 4] -> %t2 [4, 1] shape [4, 4] elem 4 on %s
    func.call @update() : () -> ()
    loomrt.copy_strided %t2 [4, 1] -> %d [4, 1] shape [4, 4] elem 4 on %s
    loomrt.free %t2
    return
  }
}

// -----

// Hand-written extremes are left alone, not overflowed: an empty copy and
// sizes near 2^62.
// CHECK-LABEL: func.func @extremes
// CHECK-COUNT-4: loomrt.copy_strided
func.func @extremes(%a: !loomrt.buffer, %d: !loomrt.buffer) {
  %s = loomrt.stream compute
  %t = loomrt.alloc 0
  loomrt.copy_strided %a [1, 4] -> %t [4, 1] shape [0, 4] elem 4 on %s
  loomrt.copy_strided %t [4, 1] -> %d [4, 1] shape [0, 4] elem 4 on %s
  loomrt.free %t
  %t2 = loomrt.alloc 64
  loomrt.copy_strided %a [4611686018427387904, 1] -> %t2 [4, 1] shape [4, 4] elem 4 on %s
  loomrt.copy_strided %t2 [4611686018427387904, 1] -> %d [4, 1] shape [4611686018427387904, 4] elem 4 on %s
  loomrt.free %t2
  return
}
