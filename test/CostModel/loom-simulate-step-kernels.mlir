// The step simulation's kernel roofs on Inputs/slow-gpu-kernels.json (the
// machine of loom-simulate-step.mlir, HBM 10 GB/s and 1 TFLOP/s, with
// gpu_flops_efficiency 1.0, gpu_kernel_efficiency 0.5 and a 1 us gap
// after each kernel): a product at its full rate, a memory-bound one at
// half of HBM, each followed by the gap.
// RUN: loom-opt %s --loom-simulate-step=hardware=%S/Inputs/slow-gpu-kernels.json -o /dev/null 2>&1 | FileCheck %s

// Issued at 4 us: the first product's 8 GFLOP take 8 ms at the full rate
// (its 36 MB at half of HBM would take 7.2 ms), then 1 us of gap; the
// second (k = 1) is memory-bound: 4.008 MB at 5 GB/s, 0.8016 ms, then 1 us.
// 4 us + 8.001 ms + 0.8026 ms = 8.8076 ms. (With one efficiency of 0.5
// for both roofs the first product would take 16 ms.)
// CHECK: @train_step on 'slow-kernels': step 8.808e-03 s
module {
  func.func @train_step() {
    %s = loomrt.stream compute
    %a = loomrt.alloc 16000000
    %b = loomrt.alloc 4000000
    loomrt.matmul f32 %a, %a -> f32 %b on %s {batch = 1 : i64, m = 1000 : i64, n = 1000 : i64, k = 4000 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 0 : i64}
    loomrt.matmul f32 %a, %a -> f32 %b on %s {batch = 1 : i64, m = 1000 : i64, n = 1000 : i64, k = 1 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 0 : i64}
    loomrt.free %a
    loomrt.free %b
    return
  }
}
