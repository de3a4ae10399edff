// The fused attention kernels priced at the rate the hardware description
// measured for them (gpu_attention_bf16_flops, bench/run-attention-gpu.sh)
// rather than at the product roofline: Inputs/slow-gpu-attention.json is
// Inputs/slow-gpu.json (HBM 10 GB/s, 1 TFLOP/s) with attention at 10
// GFLOP/s.
// RUN: loom-opt %s -split-input-file --loom-simulate-step=hardware=%S/Inputs/slow-gpu-attention.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=RATE
// RUN: loom-opt %s -split-input-file --loom-simulate-step=hardware=%S/Inputs/slow-gpu.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=ROOF

// bh 4, t = s = 128, head size 64, causal: FlashAttention's count is
// 4 * bh * t * s * dh / 2 = 8.389 MFLOP forward, 2.5x that backward. At
// the attention rate the forward runs 4 us (its launch) to 842.9 us and the
// gradient from the saved statistics 2.097 ms after it: the step ends at
// 2.940 ms. At the roofline the forward is its 264 kB over HBM (26.4 us),
// the gradient its 526 kB after it (52.6 us): 83.05 us.
// RATE: @train_step on 'slow-attention': step 2.940e-03 s
// ROOF: @train_step on 'slow': step 8.305e-05 s
module {
  func.func @train_step() {
    %s = loomrt.stream compute
    %q = loomrt.alloc 65536
    %k = loomrt.alloc 65536
    %v = loomrt.alloc 65536
    %o = loomrt.alloc 65536
    %l = loomrt.alloc 2048
    %g = loomrt.alloc 65536
    %dq = loomrt.alloc 65536
    %dk = loomrt.alloc 65536
    %dv = loomrt.alloc 65536
    %ws = loomrt.alloc 262144
    loomrt.attention_save bf16 %q, %k, %v -> %o, %l workspace %ws on %s {bh = 4 : i64, causal, dh = 64 : i64, s = 128 : i64, scale = 1.250000e-01 : f64, t = 128 : i64}
    loomrt.attention_grad_saved bf16 %q, %k, %v, %g from %o, %l -> %dq, %dk, %dv workspace %ws on %s {bh = 4 : i64, causal, dh = 64 : i64, s = 128 : i64, scale = 1.250000e-01 : f64, t = 128 : i64}
    return
  }
}

// -----

// Head size 32 is not a shape the fused kernels take (the composed GEMMs
// and softmax run): the roofline prices it with or without the rate, 128
// kB over HBM after the launch.
// RATE: @train_step on 'slow-attention': step 1.711e-05 s
// ROOF: @train_step on 'slow': step 1.711e-05 s
module {
  func.func @train_step() {
    %s = loomrt.stream compute
    %q = loomrt.alloc 32768
    %k = loomrt.alloc 32768
    %v = loomrt.alloc 32768
    %o = loomrt.alloc 32768
    %ws = loomrt.alloc 262144
    loomrt.attention bf16 %q, %k, %v -> %o workspace %ws on %s {bh = 4 : i64, causal, dh = 32 : i64, s = 128 : i64, scale = 1.250000e-01 : f64, t = 128 : i64}
    return
  }
}
