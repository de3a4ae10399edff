// gpu_comm_overlap_slowdown: a kernel that runs beside a collective lasts
// the description's fraction of the overlap longer. Inputs/slow-gpu-overlap.json
// is the machine of loom-simulate-step-kernels.mlir (1 TFLOP/s products,
// HBM at 0.5 of 10 GB/s, a 1 GB/s link) with a slowdown of 0.5 and no gap.
// RUN: loom-opt %s -split-input-file --loom-simulate-step=hardware=%S/Inputs/slow-gpu-overlap.json -o /dev/null 2>&1 | FileCheck %s
// RUN: loom-opt %s -split-input-file --loom-simulate-step=hardware=%S/Inputs/slow-gpu-kernels.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=NONE

// The all-reduce is issued at 4 us and sends 2·(2-1)/2 of its 4 MB at
// 1 GB/s: 4 us - 4.004 ms. The product (8 GFLOP, 8 ms alone) is issued at
// 8 us and starts then: it overlaps the all-reduce for 3.996 ms, so it
// lasts 8 + 0.5 x 3.996 = 9.998 ms and ends at 10.006 ms. Without the
// slowdown (slow-gpu-kernels.json, its 1 us gap after the product) the
// step is 8 us + 8.001 ms.
// CHECK: @train_step on 'slow-overlap': step 1.001e-02 s
// NONE: @train_step on 'slow-kernels': step 8.009e-03 s
module {
  loom.topology @world ["rank" = 2]
  func.func @train_step() {
    %s = loomrt.stream compute
    %cs = loomrt.stream comm
    %c = loomrt.comm
    %g = loomrt.alloc 4000000
    loomrt.all_reduce sum f32 %g -> %g, 1000000 over %c on %cs
    %a = loomrt.alloc 16000000
    %b = loomrt.alloc 4000000
    loomrt.matmul f32 %a, %a -> f32 %b on %s {batch = 1 : i64, m = 1000 : i64, n = 1000 : i64, k = 4000 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 0 : i64}
    loomrt.free %a
    loomrt.free %b
    loomrt.free %g
    return
  }
}

// -----

// A kernel that starts after the collective ends is not slowed: the
// compute stream waits for the all-reduce (4 us - 4.004 ms), so the
// product runs its 8 ms alone, 4.004 - 12.004 ms, with or without the
// slowdown (12.005 ms with the other description's 1 us gap).
// CHECK: @train_step on 'slow-overlap': step 1.200e-02 s
// NONE: @train_step on 'slow-kernels': step 1.200e-02 s
module {
  loom.topology @world ["rank" = 2]
  func.func @train_step() {
    %s = loomrt.stream compute
    %cs = loomrt.stream comm
    %c = loomrt.comm
    %g = loomrt.alloc 4000000
    loomrt.all_reduce sum f32 %g -> %g, 1000000 over %c on %cs
    %e = loomrt.record %cs
    loomrt.wait %s for %e
    %a = loomrt.alloc 16000000
    %b = loomrt.alloc 4000000
    loomrt.matmul f32 %a, %a -> f32 %b on %s {batch = 1 : i64, m = 1000 : i64, n = 1000 : i64, k = 4000 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 0 : i64}
    loomrt.free %a
    loomrt.free %b
    loomrt.free %g
    return
  }
}
