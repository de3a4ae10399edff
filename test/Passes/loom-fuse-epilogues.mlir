// RUN: loom-opt %s --loom-fuse-epilogues --split-input-file | FileCheck %s
// loom-fuse-epilogues: a matmul followed by a bias add of its whole result
// becomes loomrt.matmul_bias; the add's buffer goes and its readers read
// the matmul's.

// CHECK-LABEL: func.func @linear
// CHECK: %[[Y:.+]] = loomrt.alloc 12288
// CHECK-NEXT: loomrt.matmul_bias bf16 %arg0, %arg1 bias %arg2 -> bf16 %[[Y]] on %{{.+}} {batch = 2 : i64, k = 64 : i64, m = 16 : i64, n = 192 : i64, stride_a = 1024 : i64, stride_b = 0 : i64, stride_c = 3072 : i64, trans_b}
// CHECK-NEXT: loomrt.comment "the add"
// CHECK-NEXT: %[[G:.+]] = loomrt.alloc 12288
// CHECK-NEXT: loomrt.unary gelu bf16 %[[Y]] -> %[[G]], 6144
// CHECK-NEXT: loomrt.free %[[Y]]
// CHECK-NOT: loomrt.binary
func.func @linear(%x: !loomrt.buffer, %w: !loomrt.buffer, %b: !loomrt.buffer) -> !loomrt.buffer {
  %s = loomrt.stream compute
  %y = loomrt.alloc 12288
  loomrt.matmul bf16 %x, %w -> bf16 %y on %s {batch = 2 : i64, k = 64 : i64, m = 16 : i64, n = 192 : i64, stride_a = 1024 : i64, stride_b = 0 : i64, stride_c = 3072 : i64, trans_b}
  loomrt.comment "the add"
  %z = loomrt.alloc 12288
  loomrt.binary add bf16 %y [2, 16, 192], %b [1, 1, 192] -> %z [2, 16, 192] on %s
  loomrt.free %y
  %g = loomrt.alloc 12288
  loomrt.unary gelu bf16 %z -> %g, 6144 on %s
  loomrt.free %z
  return %g : !loomrt.buffer
}

// -----

// The bias first in the add is the same add.
// CHECK-LABEL: func.func @bias_first
// CHECK: loomrt.matmul_bias f32 %arg0, %arg1 bias %arg2 -> f32
// CHECK-NOT: loomrt.binary
func.func @bias_first(%x: !loomrt.buffer, %w: !loomrt.buffer, %b: !loomrt.buffer) -> !loomrt.buffer {
  %s = loomrt.stream compute
  %y = loomrt.alloc 512
  loomrt.matmul f32 %x, %w -> f32 %y on %s {batch = 1 : i64, k = 8 : i64, m = 8 : i64, n = 16 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 128 : i64}
  %z = loomrt.alloc 512
  loomrt.binary add f32 %b [1, 16], %y [8, 16] -> %z [8, 16] on %s
  loomrt.free %y
  return %z : !loomrt.buffer
}

// -----

// Left alone: the matmul's result is read again (a residual), the add is
// not a row broadcast of n elements, the add is a subtraction, and the add
// runs on another stream.
// CHECK-LABEL: func.func @not_fused
// CHECK-NOT: loomrt.matmul_bias
// CHECK-COUNT-4: loomrt.binary
func.func @not_fused(%x: !loomrt.buffer, %w: !loomrt.buffer, %b: !loomrt.buffer, %col: !loomrt.buffer) -> (!loomrt.buffer, !loomrt.buffer, !loomrt.buffer, !loomrt.buffer) {
  %s = loomrt.stream compute
  %h = loomrt.stream host
  %y = loomrt.alloc 512
  loomrt.matmul f32 %x, %w -> f32 %y on %s {batch = 1 : i64, k = 8 : i64, m = 8 : i64, n = 16 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 128 : i64}
  %z = loomrt.alloc 512
  loomrt.binary add f32 %y [8, 16], %b [1, 16] -> %z [8, 16] on %s
  %y2 = loomrt.alloc 512
  loomrt.matmul f32 %x, %w -> f32 %y2 on %s {batch = 1 : i64, k = 8 : i64, m = 8 : i64, n = 16 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 128 : i64}
  %z2 = loomrt.alloc 512
  loomrt.binary add f32 %y2 [8, 16], %col [8, 1] -> %z2 [8, 16] on %s
  loomrt.free %y2
  %y3 = loomrt.alloc 512
  loomrt.matmul f32 %x, %w -> f32 %y3 on %s {batch = 1 : i64, k = 8 : i64, m = 8 : i64, n = 16 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 128 : i64}
  %z3 = loomrt.alloc 512
  loomrt.binary sub f32 %y3 [8, 16], %b [1, 16] -> %z3 [8, 16] on %s
  loomrt.free %y3
  %y4 = loomrt.alloc 512
  loomrt.matmul f32 %x, %w -> f32 %y4 on %s {batch = 1 : i64, k = 8 : i64, m = 8 : i64, n = 16 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 128 : i64}
  %z4 = loomrt.alloc 512
  loomrt.binary add f32 %y4 [8, 16], %b [1, 16] -> %z4 [8, 16] on %h
  loomrt.free %y4
  return %y, %z2, %z3, %z4 : !loomrt.buffer, !loomrt.buffer, !loomrt.buffer, !loomrt.buffer
}

// -----

// A weight gradient under mixed precision and data parallelism: the bf16
// product cast up into its slot of the fp32 bucket becomes one product
// writing fp32 into the slot (the bucket's allocation and the view move up);
// the bf16 buffer and the cast go.
// CHECK-LABEL: func.func @upcast_into_bucket
// CHECK: %[[B:.+]] = loomrt.alloc 8192
// CHECK-NEXT: %[[V:.+]] = loomrt.view %[[B]][4096]
// CHECK-NEXT: loomrt.matmul bf16 %arg0, %arg1 -> f32 %[[V]] on %{{.+}} {batch = 1 : i64, k = 16 : i64, m = 32 : i64, n = 32 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 1024 : i64, trans_a}
// CHECK-NOT: loomrt.cast
// CHECK: return %[[B]]
func.func @upcast_into_bucket(%dy: !loomrt.buffer, %x: !loomrt.buffer) -> !loomrt.buffer {
  %s = loomrt.stream compute
  %g = loomrt.alloc 2048
  loomrt.matmul bf16 %dy, %x -> bf16 %g on %s {batch = 1 : i64, k = 16 : i64, m = 32 : i64, n = 32 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 1024 : i64, trans_a}
  loomrt.comment "the cast"
  %bucket = loomrt.alloc 8192
  %slot = loomrt.view %bucket[4096]
  loomrt.cast bf16 %g -> f32 %slot, 1024 on %s
  loomrt.free %g
  return %bucket : !loomrt.buffer
}

// -----

// Cast into a buffer of its own (an update reads it; offload feeds that
// update the bf16 gradient itself): left alone.
// CHECK-LABEL: func.func @upcast_alone
// CHECK: loomrt.matmul bf16 %arg0, %arg1 -> bf16
// CHECK: loomrt.cast bf16
func.func @upcast_alone(%dy: !loomrt.buffer, %x: !loomrt.buffer) -> !loomrt.buffer {
  %s = loomrt.stream compute
  %g = loomrt.alloc 2048
  loomrt.matmul bf16 %dy, %x -> bf16 %g on %s {batch = 1 : i64, k = 16 : i64, m = 32 : i64, n = 32 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 1024 : i64, trans_a}
  %f = loomrt.alloc 4096
  loomrt.cast bf16 %g -> f32 %f, 1024 on %s
  loomrt.free %g
  return %f : !loomrt.buffer
}

// -----

// GELU (tanh form) joins its GEMMs: the bias GEMM writes the activation
// into the unary's buffer and keeps the pre-activation in its own (aux);
// the gradient's GEMM applies the derivative at aux and writes the
// gradient's buffer, whose allocation moves up; the product's buffer goes.
// CHECK-LABEL: func.func @gelu_pair
// CHECK: %[[H:.+]] = loomrt.alloc 12288
// CHECK-NEXT: %[[G:.+]] = loomrt.alloc 12288
// CHECK-NEXT: loomrt.matmul_bias_act gelu_tanh bf16 %arg0, %arg1 bias %arg2 -> bf16 %[[G]] aux %[[H]] on %{{.+}} {batch = 2 : i64, k = 64 : i64, m = 16 : i64, n = 192 : i64, stride_a = 1024 : i64, stride_b = 0 : i64, stride_c = 3072 : i64, trans_b}
// CHECK-NOT: loomrt.unary
// CHECK: %[[DH:.+]] = loomrt.alloc 12288
// CHECK-NEXT: loomrt.matmul_act_grad gelu_tanh bf16 %arg3, %arg4 aux %[[H]] -> bf16 %[[DH]] on %{{.+}} {batch = 2 : i64, k = 64 : i64, m = 16 : i64, n = 192 : i64, stride_a = 1024 : i64, stride_b = 0 : i64, stride_c = 3072 : i64}
// CHECK-NEXT: loomrt.comment "the gradient"
// CHECK-NOT: loomrt.unary_grad
// CHECK: return %[[G]], %[[DH]]
func.func @gelu_pair(%x: !loomrt.buffer, %w: !loomrt.buffer, %b: !loomrt.buffer, %dy: !loomrt.buffer, %w2: !loomrt.buffer) -> (!loomrt.buffer, !loomrt.buffer) {
  %s = loomrt.stream compute
  %y = loomrt.alloc 12288
  loomrt.matmul bf16 %x, %w -> bf16 %y on %s {batch = 2 : i64, k = 64 : i64, m = 16 : i64, n = 192 : i64, stride_a = 1024 : i64, stride_b = 0 : i64, stride_c = 3072 : i64, trans_b}
  %z = loomrt.alloc 12288
  loomrt.binary add bf16 %y [2, 16, 192], %b [1, 1, 192] -> %z [2, 16, 192] on %s
  loomrt.free %y
  %g = loomrt.alloc 12288
  loomrt.unary gelu_tanh bf16 %z -> %g, 6144 on %s
  %dg = loomrt.alloc 12288
  loomrt.matmul bf16 %dy, %w2 -> bf16 %dg on %s {batch = 2 : i64, k = 64 : i64, m = 16 : i64, n = 192 : i64, stride_a = 1024 : i64, stride_b = 0 : i64, stride_c = 3072 : i64}
  loomrt.comment "the gradient"
  %dh = loomrt.alloc 12288
  loomrt.unary_grad gelu_tanh bf16 %dg, %z -> %dh, 6144 on %s
  loomrt.free %dg
  loomrt.free %z
  return %g, %dh : !loomrt.buffer, !loomrt.buffer
}

// -----

// Left alone: the erf form (no epilogue), a GELU over part of the result,
// and a gradient whose product is read again.
// CHECK-LABEL: func.func @gelu_not_fused
// CHECK-NOT: matmul_bias_act
// CHECK-NOT: matmul_act_grad
// CHECK-COUNT-2: loomrt.unary
// CHECK: loomrt.unary_grad
func.func @gelu_not_fused(%x: !loomrt.buffer, %w: !loomrt.buffer, %b: !loomrt.buffer, %h: !loomrt.buffer) -> (!loomrt.buffer, !loomrt.buffer, !loomrt.buffer, !loomrt.buffer) {
  %s = loomrt.stream compute
  %y = loomrt.alloc 512
  loomrt.matmul f32 %x, %w -> f32 %y on %s {batch = 1 : i64, k = 8 : i64, m = 8 : i64, n = 16 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 128 : i64}
  %z = loomrt.alloc 512
  loomrt.binary add f32 %y [8, 16], %b [1, 16] -> %z [8, 16] on %s
  loomrt.free %y
  %g = loomrt.alloc 512
  loomrt.unary gelu f32 %z -> %g, 128 on %s
  %y2 = loomrt.alloc 512
  loomrt.matmul f32 %x, %w -> f32 %y2 on %s {batch = 1 : i64, k = 8 : i64, m = 8 : i64, n = 16 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 128 : i64}
  %z2 = loomrt.alloc 512
  loomrt.binary add f32 %y2 [8, 16], %b [1, 16] -> %z2 [8, 16] on %s
  loomrt.free %y2
  %g2 = loomrt.alloc 512
  loomrt.unary gelu_tanh f32 %z2 -> %g2, 64 on %s
  %d = loomrt.alloc 512
  loomrt.matmul f32 %x, %w -> f32 %d on %s {batch = 1 : i64, k = 8 : i64, m = 8 : i64, n = 16 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 128 : i64}
  %dh = loomrt.alloc 512
  loomrt.unary_grad gelu_tanh f32 %d, %h -> %dh, 128 on %s
  return %g, %g2, %d, %dh : !loomrt.buffer, !loomrt.buffer, !loomrt.buffer, !loomrt.buffer
}

// -----

// Left alone: the gradient's buffer is written between the product and the
// GELU gradient (the fused product would write it before that write).
// CHECK-LABEL: func.func @gelu_grad_output_touched
// CHECK-NOT: matmul_act_grad
// CHECK: loomrt.unary_grad
func.func @gelu_grad_output_touched(%dy: !loomrt.buffer, %w2: !loomrt.buffer, %h: !loomrt.buffer) -> !loomrt.buffer {
  %s = loomrt.stream compute
  %dg = loomrt.alloc 512
  loomrt.matmul f32 %dy, %w2 -> f32 %dg on %s {batch = 1 : i64, k = 8 : i64, m = 8 : i64, n = 16 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 128 : i64}
  %dh = loomrt.alloc 512
  loomrt.fill f32 %dh, 0.0, 128 on %s
  loomrt.unary_grad gelu_tanh f32 %dg, %h -> %dh, 128 on %s
  loomrt.free %dg
  return %dh : !loomrt.buffer
}

// -----

// A weight gradient's GEMM (dW = dY^T X) sums its bias's gradient from dY:
// the reduce over dY's rows goes, whether it came before the product (a
// product reading dY between is fine) or after it (its buffer moves up).
// CHECK-LABEL: func.func @bias_grad
// CHECK-NOT: loomrt.reduce
// CHECK: loomrt.matmul bf16 %arg0, %arg2 -> bf16
// CHECK-NOT: loomrt.reduce
// CHECK: loomrt.matmul_bgrad bf16 %arg0, %arg1 -> bf16 %{{.+}} bgrad %{{.+}} on %{{.+}} {batch = 1 : i64, k = 32 : i64, m = 192 : i64, n = 64 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 12288 : i64, trans_a}
// CHECK-NOT: loomrt.reduce
// CHECK: loomrt.matmul_bgrad bf16 %arg0, %arg1 -> bf16 %{{.+}} bgrad
// CHECK-NOT: loomrt.reduce
func.func @bias_grad(%dy: !loomrt.buffer, %x: !loomrt.buffer, %w: !loomrt.buffer) -> (!loomrt.buffer, !loomrt.buffer, !loomrt.buffer, !loomrt.buffer, !loomrt.buffer) {
  %s = loomrt.stream compute
  %db = loomrt.alloc 384
  loomrt.reduce sum bf16 %dy -> %db[1, 32, 192] on %s
  %dx = loomrt.alloc 4096
  loomrt.matmul bf16 %dy, %w -> bf16 %dx on %s {batch = 1 : i64, k = 192 : i64, m = 32 : i64, n = 64 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 2048 : i64}
  %dw = loomrt.alloc 24576
  loomrt.matmul bf16 %dy, %x -> bf16 %dw on %s {batch = 1 : i64, k = 32 : i64, m = 192 : i64, n = 64 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 12288 : i64, trans_a}
  %dw2 = loomrt.alloc 24576
  loomrt.matmul bf16 %dy, %x -> bf16 %dw2 on %s {batch = 1 : i64, k = 32 : i64, m = 192 : i64, n = 64 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 12288 : i64, trans_a}
  loomrt.comment "the second bias"
  %db2 = loomrt.alloc 384
  loomrt.reduce sum bf16 %dy -> %db2[1, 32, 192] on %s
  return %db, %dx, %dw, %dw2, %db2 : !loomrt.buffer, !loomrt.buffer, !loomrt.buffer, !loomrt.buffer, !loomrt.buffer
}

// -----

// Left alone: the bias gradient is read before the product, the product
// is an upcast (in and out differ), and the reduce does not sum dY's rows.
// CHECK-LABEL: func.func @bias_grad_not_fused
// CHECK-NOT: loomrt.matmul_bgrad
// CHECK-COUNT-3: loomrt.reduce
func.func @bias_grad_not_fused(%dy: !loomrt.buffer, %x: !loomrt.buffer) -> (!loomrt.buffer, !loomrt.buffer, !loomrt.buffer, !loomrt.buffer, !loomrt.buffer, !loomrt.buffer) {
  %s = loomrt.stream compute
  %db = loomrt.alloc 384
  loomrt.reduce sum bf16 %dy -> %db[1, 32, 192] on %s
  %c = loomrt.alloc 768
  loomrt.cast bf16 %db -> f32 %c, 192 on %s
  %dw = loomrt.alloc 24576
  loomrt.matmul bf16 %dy, %x -> bf16 %dw on %s {batch = 1 : i64, k = 32 : i64, m = 192 : i64, n = 64 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 12288 : i64, trans_a}
  %db2 = loomrt.alloc 768
  loomrt.reduce sum f32 %x -> %db2[1, 32, 192] on %s
  %dw2 = loomrt.alloc 49152
  loomrt.matmul f32 %x, %dy -> bf16 %dw2 on %s {batch = 1 : i64, k = 32 : i64, m = 192 : i64, n = 64 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 12288 : i64, trans_a}
  %db3 = loomrt.alloc 64
  loomrt.reduce sum bf16 %dy -> %db3[192, 32, 1] on %s
  return %c, %dw, %db2, %dw2, %db3, %db : !loomrt.buffer, !loomrt.buffer, !loomrt.buffer, !loomrt.buffer, !loomrt.buffer, !loomrt.buffer
}

// Under recompute every bias add still joins its GEMM (on CUDA the bias is
// added before the product is rounded to bf16, so a bias add left apart
// changes the bits): in full recompute the cloned block releases the
// product's inputs and casts its bias between the product and the add;
// in selective recompute the bias add is kept with its product. No bias
// add is left as a loomrt.binary over a [1, 1, N] broadcast, and the
// steps with and without recompute gave identical bf16 losses on an H200
// (bench/check-recompute-bits-gpu.sh).
// RUN: loomc --model gpt:layers=2,d_model=64,heads=2,vocab=100,seq=16,batch=2 --precision=bf16 --target=cuda --recompute=none --compile-to=lowered -o %t.none.mlir 2>/dev/null
// RUN: loomc --model gpt:layers=2,d_model=64,heads=2,vocab=100,seq=16,batch=2 --precision=bf16 --target=cuda --recompute=full --compile-to=lowered -o %t.full.mlir 2>/dev/null
// RUN: loomc --model gpt:layers=2,d_model=64,heads=2,vocab=100,seq=16,batch=2 --precision=bf16 --target=cuda --recompute=selective --compile-to=lowered -o %t.sel.mlir 2>/dev/null
// RUN: for f in none full sel; do echo "$f $(grep -c loomrt.matmul_bias %t.$f.mlir) $(grep 'loomrt.binary add' %t.$f.mlir | grep -c '\[1, 1, [0-9]*\]')"; done | FileCheck %s --check-prefix=RECOMPUTE
// RECOMPUTE: none 8 0
// RECOMPUTE-NEXT: full 15 0
// RECOMPUTE-NEXT: sel 8 0

// ZeRO-3: each weight gradient's product writes fp32 into its bucket's
// slot with and without recompute (the bias gradient's upcast into
// another slot between the product and its own upcast no longer stops
// the fusion), so the bucket holds the same bits either way.
// RUN: loomc --model gpt:layers=2,d_model=64,heads=2,vocab=100,seq=16,batch=4 --precision=bf16 --target=cuda --topology=gpu=2 --zero-stage=3 --recompute=none --compile-to=lowered -o %t.z-none.mlir 2>/dev/null
// RUN: loomc --model gpt:layers=2,d_model=64,heads=2,vocab=100,seq=16,batch=4 --precision=bf16 --target=cuda --topology=gpu=2 --zero-stage=3 --recompute=full --compile-to=lowered -o %t.z-full.mlir 2>/dev/null
// RUN: for f in none full; do echo "zero3 $f $(grep 'loomrt.matmul ' %t.z-$f.mlir | grep -c 'bf16 .* -> f32')"; done | FileCheck %s --check-prefix=UPCAST
// UPCAST: zero3 none 8
// UPCAST-NEXT: zero3 full 8
