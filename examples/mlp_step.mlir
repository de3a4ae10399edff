// A hand-written training step of a two-layer MLP classifier (batch 8,
// 16 → 32 → 4), as the compiler's passes will emit it once import, autodiff
// and the offload schedule land: forward, loss, backward, and an AdamW update
// whose placement is mixed - the first layer's optimizer state stays in pinned
// host memory and is updated by the CPU, the second layer's is streamed to
// the GPU, updated there and written back (the two paths of Deep Optimizer
// States). `scripts/run-example.sh` verifies it and runs the passes on it.

loom.param @w1 : tensor<16x32xf32, #loom.mem<device>> init #loom.init<normal(0.0, 0.25)>
loom.param @w2 : tensor<32x4xf32, #loom.mem<device>> init #loom.init<normal(0.0, 0.18)>
loom.state @w1.master : tensor<16x32xf32, #loom.mem<pinned>> role master of @w1
loom.state @w1.m : tensor<16x32xf32, #loom.mem<pinned>> role adam_m of @w1
loom.state @w1.v : tensor<16x32xf32, #loom.mem<pinned>> role adam_v of @w1
loom.state @w2.m : tensor<32x4xf32, #loom.mem<pinned>> role adam_m of @w2
loom.state @w2.v : tensor<32x4xf32, #loom.mem<pinned>> role adam_v of @w2
loom.state @step : tensor<i64, #loom.mem<pinned>> role step

func.func @train_step(%x: tensor<8x16xf32, #loom.mem<device>>,
                      %y: tensor<8xi64, #loom.mem<device>>) -> tensor<f32, #loom.mem<device>> {
  // Forward.
  %w1 = loom.load @w1 : tensor<16x32xf32, #loom.mem<device>>
  %w2 = loom.load @w2 : tensor<32x4xf32, #loom.mem<device>>
  %h = loom.matmul %x, %w1 : tensor<8x16xf32, #loom.mem<device>>, tensor<16x32xf32, #loom.mem<device>> -> tensor<8x32xf32, #loom.mem<device>>
  %a = loom.gelu %h : tensor<8x32xf32, #loom.mem<device>>
  %logits = loom.matmul %a, %w2 : tensor<8x32xf32, #loom.mem<device>>, tensor<32x4xf32, #loom.mem<device>> -> tensor<8x4xf32, #loom.mem<device>>
  %loss = loom.cross_entropy %logits, %y : tensor<8x4xf32, #loom.mem<device>>, tensor<8xi64, #loom.mem<device>> -> tensor<f32, #loom.mem<device>>

  // Backward.
  %one = arith.constant dense<1.0> : tensor<f32, #loom.mem<device>>
  %dlogits = loom.cross_entropy_grad %logits, %y, %one : tensor<8x4xf32, #loom.mem<device>>, tensor<8xi64, #loom.mem<device>>, tensor<f32, #loom.mem<device>> -> tensor<8x4xf32, #loom.mem<device>>
  %dw2 = loom.matmul %a, %dlogits transpose_lhs : tensor<8x32xf32, #loom.mem<device>>, tensor<8x4xf32, #loom.mem<device>> -> tensor<32x4xf32, #loom.mem<device>>
  %da = loom.matmul %dlogits, %w2 transpose_rhs : tensor<8x4xf32, #loom.mem<device>>, tensor<32x4xf32, #loom.mem<device>> -> tensor<8x32xf32, #loom.mem<device>>
  loom.release %logits : tensor<8x4xf32, #loom.mem<device>>
  %dh = loom.gelu_grad %da, %h : tensor<8x32xf32, #loom.mem<device>>
  loom.release %a : tensor<8x32xf32, #loom.mem<device>>
  %dw1 = loom.matmul %x, %dh transpose_lhs : tensor<8x16xf32, #loom.mem<device>>, tensor<8x32xf32, #loom.mem<device>> -> tensor<16x32xf32, #loom.mem<device>>

  // The step counter lives on the host.
  %t = loom.load @step : tensor<i64, #loom.mem<pinned>>

  // Layer 2: stream its state to the GPU while layer 1's gradient is still
  // being computed, update there, write back.
  %m2h = loom.load @w2.m : tensor<32x4xf32, #loom.mem<pinned>>
  %v2h = loom.load @w2.v : tensor<32x4xf32, #loom.mem<pinned>>
  %m2, %tm = loom.copy %m2h on h2d : tensor<32x4xf32, #loom.mem<pinned>> -> tensor<32x4xf32, #loom.mem<device>>
  %v2, %tv = loom.copy %v2h after [%tm] on h2d : tensor<32x4xf32, #loom.mem<pinned>> -> tensor<32x4xf32, #loom.mem<device>>
  %td, %ttd = loom.copy %t on h2d : tensor<i64, #loom.mem<pinned>> -> tensor<i64, #loom.mem<device>>
  loom.wait %tv, %ttd
  %w2n, %m2n, %v2n = loom.adam %w2, %dw2, %m2, %v2 step %td {lr = 1.0e-2 : f64, weight_decay = 0.01 : f64, decoupled}
      : tensor<32x4xf32, #loom.mem<device>>, tensor<32x4xf32, #loom.mem<device>>, tensor<32x4xf32, #loom.mem<device>>, tensor<32x4xf32, #loom.mem<device>>, tensor<i64, #loom.mem<device>>
  %m2o, %to1 = loom.copy %m2n on d2h : tensor<32x4xf32, #loom.mem<device>> -> tensor<32x4xf32, #loom.mem<pinned>>
  %v2o, %to2 = loom.copy %v2n on d2h[1] : tensor<32x4xf32, #loom.mem<device>> -> tensor<32x4xf32, #loom.mem<pinned>>

  // Layer 1: flush the gradient to the host and update there on the CPU.
  %dw1h, %tg = loom.copy %dw1 on d2h : tensor<16x32xf32, #loom.mem<device>> -> tensor<16x32xf32, #loom.mem<pinned>>
  loom.wait %tg
  %p1 = loom.load @w1.master : tensor<16x32xf32, #loom.mem<pinned>>
  %m1 = loom.load @w1.m : tensor<16x32xf32, #loom.mem<pinned>>
  %v1 = loom.load @w1.v : tensor<16x32xf32, #loom.mem<pinned>>
  %p1n, %m1n, %v1n = loom.adam %p1, %dw1h, %m1, %v1 step %t {lr = 1.0e-2 : f64, weight_decay = 0.01 : f64, decoupled}
      : tensor<16x32xf32, #loom.mem<pinned>>, tensor<16x32xf32, #loom.mem<pinned>>, tensor<16x32xf32, #loom.mem<pinned>>, tensor<16x32xf32, #loom.mem<pinned>>, tensor<i64, #loom.mem<pinned>>
  // Refresh the GPU copy of layer 1 from the updated master weights.
  %w1n, %tw = loom.copy %p1n on h2d : tensor<16x32xf32, #loom.mem<pinned>> -> tensor<16x32xf32, #loom.mem<device>>
  loom.wait %to1, %to2, %tw
  loom.store %w1n to @w1 : tensor<16x32xf32, #loom.mem<device>>
  loom.store %p1n to @w1.master : tensor<16x32xf32, #loom.mem<pinned>>
  loom.store %m1n to @w1.m : tensor<16x32xf32, #loom.mem<pinned>>
  loom.store %v1n to @w1.v : tensor<16x32xf32, #loom.mem<pinned>>
  loom.store %w2n to @w2 : tensor<32x4xf32, #loom.mem<device>>
  loom.store %m2o to @w2.m : tensor<32x4xf32, #loom.mem<pinned>>
  loom.store %v2o to @w2.v : tensor<32x4xf32, #loom.mem<pinned>>
  return %loss : tensor<f32, #loom.mem<device>>
}
