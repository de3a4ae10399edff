// The step simulation on hand-written loomrt IR, against times worked out
// by hand on a machine of round numbers (Inputs/slow-gpu.json: HBM 10 GB/s,
// 1 TFLOP/s, d2h 2 GB/s, CPU Adam 1e6 parameters/s, a 1 GB/s link; a
// launch costs the host 4 us and a kernel at least as long).
// RUN: not loom-opt %s -split-input-file --loom-simulate-step=hardware=%S/Inputs/slow-gpu.json -o /dev/null 2>&1 | FileCheck %s

// Host: read the step (0), fill issued at 4 us, runs 4-8 us (its 4 kB take
// 0.4 us: the launch floor); the event recorded at 8 us; the d2h copy runs
// 8 us - 1.008 ms (2 MB at 2 GB/s) while the matmul runs 12 us - 2.012 ms
// (2 GFLOP at 1 TFLOP/s beats 12 MB at 10 GB/s). The host waits for the
// copy (1.008 ms), runs the CPU Adam of 1000 parameters (1 ms, to
// 2.008 ms), records on the compute stream (4 us) and issues the
// all-reduce (4 us): it starts at 2.016 ms and, over two ranks, sends
// 2·(2-1)/2 of its 4 MB at 1 GB/s, so the step ends at 6.016 ms. Persistent: @m's 1 MB (the pinned @w is host
// memory); the arena holds both 100 MB buffers at once.
// CHECK: @train_step on 'slow': step 6.016e-03 s, last gradient 2.012e-03 s, cpu updates 1.000e-03 s, gpu updates 0.000e+00 s, h2d 0.000e+00 s, d2h 1.000e-03 s; device memory 201000000 B (1000000 B persistent, 200000000 B step arena)
module {
  loom.topology @world ["rank" = 2]
  loom.param @w : tensor<1000xf32, #loom.mem<pinned>> init #loom.init<zeros>
  loom.state @m : tensor<250000xf32> role other init #loom.init<zeros>
  func.func @train_step() {
    %s = loomrt.stream compute
    %h = loomrt.stream host
    %y = loomrt.stream d2h
    %cs = loomrt.stream comm
    %c = loomrt.comm
    %sb = loomrt.alloc 8 host
    %t = loomrt.read_i64 %sb on %h
    %a = loomrt.alloc 100000000
    loomrt.fill f32 %a, 0.0, 1000 on %s
    %e = loomrt.record %s
    loomrt.wait %y for %e
    %hb = loomrt.alloc 2000000 host
    loomrt.memcpy %hb, %a, 2000000 on %y
    %b = loomrt.alloc 100000000
    loomrt.matmul f32 %a, %a -> f32 %b on %s {batch = 1 : i64, m = 1000 : i64, n = 1000 : i64, k = 1000 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 0 : i64}
    loomrt.backward_done
    %done = loomrt.record %y
    loomrt.sync %done
    %p = loomrt.alloc 4000 host
    loomrt.adam %p, %hb, %p, %p step %t grad f32 on %h {lr = 1.0e-03 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, n = 1000 : i64, timed}
    %r = loomrt.record %s
    loomrt.wait %cs for %r
    loomrt.all_reduce sum f32 %b -> %b, 1000000 over %c on %cs
    loomrt.free %a
    loomrt.free %b
    return
  }
}

// -----

// Buffer reuse: the second 100 MB buffer takes the first one's place, so
// the arena is one buffer; two kernels in order, each at its launch floor.
// CHECK: @train_step on 'slow': step 1.200e-05 s, {{.*}}; device memory 100000000 B (0 B persistent, 100000000 B step arena)
module {
  func.func @train_step() {
    %s = loomrt.stream compute
    %a = loomrt.alloc 100000000
    loomrt.fill f32 %a, 0.0, 1000 on %s
    loomrt.free %a
    %b = loomrt.alloc 100000000
    loomrt.fill f32 %b, 0.0, 1000 on %s
    loomrt.free %b
    return
  }
}

// -----

// A call the simulation cannot follow says so (and loom-opt fails).
// CHECK: error: step simulation: unknown callee @ext
module {
  func.func private @ext()
  func.func @train_step() {
    func.call @ext() : () -> ()
    return
  }
}

// -----

// A loom module is lowered (on a copy) and priced: one exp of 1 MB in and
// out at 10 GB/s (200 us) after a 4 us launch; its result in the region
// loom-plan-arena plans (1000000 B rounded up to 256: the online arena
// would have reserved a 64 MiB block).
// CHECK: @train_step on 'slow': step 2.040e-04 s, {{.*}}; device memory 1000192 B (0 B persistent, 1000192 B step arena)
module {
  func.func @train_step(%x: tensor<250000xf32>) -> tensor<250000xf32> {
    %y = loom.exp %x : tensor<250000xf32>
    return %y : tensor<250000xf32>
  }
}

// -----

// Point to point between pipeline stages is one hop, both directions at
// once: 2 MB at 1 GB/s (no latency in the description), issued at 4 us.
// Its bytes are what goes to the peer.
// CHECK: @train_step on 'slow': step 2.004e-03 s
module {
  loom.topology @world ["stage" = 2]
  func.func @train_step() {
    %cs = loomrt.stream comm
    %c = loomrt.comm
    %a = loomrt.alloc 2000000
    %b = loomrt.alloc 2000000
    loomrt.send_recv %a -> %b, 2000000 bytes shift 1 over %c on %cs
    loomrt.free %a
    loomrt.free %b
    return
  }
}
