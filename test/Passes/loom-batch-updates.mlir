// RUN: loom-opt %s --loom-batch-updates --split-input-file | FileCheck %s
// loom-batch-updates: a run of loomrt.adam calls with one config becomes one
// loomrt.adam_multi where the run's last update stood; releases between of
// the run's buffers move after it.

// CHECK-LABEL: func.func @run
// CHECK: %[[P0:.+]] = loomrt.global @w0
// CHECK: %[[P1:.+]] = loomrt.global @w1
// CHECK: %[[P2:.+]] = loomrt.global @w2
// CHECK-NOT: loomrt.adam %
// CHECK: loomrt.adam_multi(%[[P0]], %[[P1]], %[[P2]]), (%arg0, %arg1, %arg2), (%{{.+}}, %{{.+}}, %{{.+}}), (%{{.+}}, %{{.+}}, %{{.+}}) step %arg3 grad f32 on %{{.+}} {beta1 = 9.000000e-01 : f64, beta2 = 0.99899999999999999 : f64, decoupled, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, sizes = array<i64: 768, 64, 3>, weight_decay = 0.000000e+00 : f64}
// CHECK-NEXT: loomrt.free %arg0
// CHECK-NEXT: loomrt.free %arg1
// CHECK-NEXT: loomrt.free %arg2
loom.param @w0 : tensor<768xf32>
loom.state @w0.m : tensor<768xf32> role other init #loom.init<zeros>
loom.state @w0.v : tensor<768xf32> role other init #loom.init<zeros>
loom.param @w1 : tensor<64xf32>
loom.state @w1.m : tensor<64xf32> role other init #loom.init<zeros>
loom.state @w1.v : tensor<64xf32> role other init #loom.init<zeros>
loom.param @w2 : tensor<3xf32>
loom.state @w2.m : tensor<3xf32> role other init #loom.init<zeros>
loom.state @w2.v : tensor<3xf32> role other init #loom.init<zeros>
func.func @run(%g0: !loomrt.buffer, %g1: !loomrt.buffer, %g2: !loomrt.buffer, %t: i64) {
  %s = loomrt.stream compute
  %p0 = loomrt.global @w0
  %m0 = loomrt.global @w0.m
  %v0 = loomrt.global @w0.v
  loomrt.adam %p0, %g0, %m0, %v0 step %t grad f32 on %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, n = 768 : i64, weight_decay = 0.0 : f64}
  loomrt.free %g0
  loomrt.comment "the next parameter"
  %p1 = loomrt.global @w1
  %m1 = loomrt.global @w1.m
  %v1 = loomrt.global @w1.v
  loomrt.adam %p1, %g1, %m1, %v1 step %t grad f32 on %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, n = 64 : i64, weight_decay = 0.0 : f64}
  loomrt.free %g1
  %p2 = loomrt.global @w2
  %m2 = loomrt.global @w2.m
  %v2 = loomrt.global @w2.v
  loomrt.adam %p2, %g2, %m2, %v2 step %t grad f32 on %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, n = 3 : i64, weight_decay = 0.0 : f64}
  loomrt.free %g2
  return
}

// -----

// bf16 gradients with bf16 refreshes batch too.
// CHECK-LABEL: func.func @refresh
// CHECK: loomrt.adam_multi(%{{.+}}, %{{.+}}), (%arg0, %arg1), (%{{.+}}, %{{.+}}), (%{{.+}}, %{{.+}}) refresh(%arg2, %arg3) step %arg4 grad bf16
loom.param @w0 : tensor<768xf32>
loom.state @w0.m : tensor<768xf32> role other init #loom.init<zeros>
loom.state @w0.v : tensor<768xf32> role other init #loom.init<zeros>
loom.param @w1 : tensor<64xf32>
loom.state @w1.m : tensor<64xf32> role other init #loom.init<zeros>
loom.state @w1.v : tensor<64xf32> role other init #loom.init<zeros>
loom.param @w2 : tensor<3xf32>
loom.state @w2.m : tensor<3xf32> role other init #loom.init<zeros>
loom.state @w2.v : tensor<3xf32> role other init #loom.init<zeros>
func.func @refresh(%g0: !loomrt.buffer, %g1: !loomrt.buffer, %r0: !loomrt.buffer, %r1: !loomrt.buffer, %t: i64) {
  %s = loomrt.stream compute
  %p0 = loomrt.global @w0
  %m0 = loomrt.global @w0.m
  %v0 = loomrt.global @w0.v
  loomrt.adam %p0, %g0, %m0, %v0 step %t refresh %r0 grad bf16 on %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, n = 8 : i64, weight_decay = 0.0 : f64}
  %p1 = loomrt.global @w1
  %m1 = loomrt.global @w1.m
  %v1 = loomrt.global @w1.v
  loomrt.adam %p1, %g1, %m1, %v1 step %t refresh %r1 grad bf16 on %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, n = 16 : i64, weight_decay = 0.0 : f64}
  return
}

// -----

// Left alone: another learning rate starts a new run (of one), an update
// the host runs (timed) joins none, work between two updates (a cast)
// ends a run, and so does an update of a buffer the run already updates.
// CHECK-LABEL: func.func @apart
// CHECK-NOT: loomrt.adam_multi
// CHECK-COUNT-5: loomrt.adam %
loom.param @w0 : tensor<768xf32>
loom.state @w0.m : tensor<768xf32> role other init #loom.init<zeros>
loom.state @w0.v : tensor<768xf32> role other init #loom.init<zeros>
loom.param @w1 : tensor<64xf32>
loom.state @w1.m : tensor<64xf32> role other init #loom.init<zeros>
loom.state @w1.v : tensor<64xf32> role other init #loom.init<zeros>
loom.param @w2 : tensor<3xf32>
loom.state @w2.m : tensor<3xf32> role other init #loom.init<zeros>
loom.state @w2.v : tensor<3xf32> role other init #loom.init<zeros>
func.func @apart(%g0: !loomrt.buffer, %g1: !loomrt.buffer, %g2: !loomrt.buffer, %g3: !loomrt.buffer, %x: !loomrt.buffer, %t: i64) {
  %s = loomrt.stream compute
  %h = loomrt.stream host
  %p0 = loomrt.global @w0
  %m0 = loomrt.global @w0.m
  %v0 = loomrt.global @w0.v
  loomrt.adam %p0, %g0, %m0, %v0 step %t grad f32 on %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, n = 8 : i64, weight_decay = 0.0 : f64}
  loomrt.adam %p0, %g1, %m0, %v0 step %t grad f32 on %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 2.0e-3 : f64, n = 8 : i64, weight_decay = 0.0 : f64}
  loomrt.adam %p0, %g2, %m0, %v0 step %t grad f32 on %h {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 2.0e-3 : f64, n = 8 : i64, timed, weight_decay = 0.0 : f64}
  loomrt.cast f32 %x -> bf16 %x, 8 on %s
  loomrt.adam %p0, %g3, %m0, %v0 step %t grad f32 on %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 2.0e-3 : f64, n = 8 : i64, weight_decay = 0.0 : f64}
  loomrt.adam %p0, %g0, %m0, %v0 step %t grad f32 on %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 2.0e-3 : f64, n = 8 : i64, weight_decay = 0.0 : f64}
  return
}

// -----

// A bf16 gradient the function returns cast up to fp32 for updates alone:
// it returns the bf16 buffer, the cast and the fp32 buffer go, and the
// update reads bf16 (loomrt_adam_bf16grad widens each element as the cast
// did). The second result is read by more than an update: left alone.
// CHECK-LABEL: func.func @grads
// CHECK: %[[X:.+]] = loomrt.alloc 16
// CHECK-NOT: loomrt.cast bf16 %[[X]]
// CHECK-NOT: loomrt.free %[[X]]
// CHECK: return %[[X]], %{{.+}}
// CHECK-LABEL: func.func @update
// CHECK: loomrt.adam %{{.+}}, %[[G:.+]]#0, %{{.+}}, %{{.+}} step %arg0 grad bf16
// CHECK: loomrt.adam %{{.+}}, %[[G]]#1, %{{.+}}, %{{.+}} step %arg0 grad f32
loom.param @w0 : tensor<768xf32>
loom.state @w0.m : tensor<768xf32> role other init #loom.init<zeros>
loom.state @w0.v : tensor<768xf32> role other init #loom.init<zeros>
func.func @grads() -> (!loomrt.buffer, !loomrt.buffer) {
  %s = loomrt.stream compute
  %x = loomrt.alloc 16
  loomrt.fill bf16 %x, 1.0, 8 on %s
  %y = loomrt.alloc 32
  loomrt.cast bf16 %x -> f32 %y, 8 on %s
  loomrt.free %x
  %x2 = loomrt.alloc 16
  loomrt.fill bf16 %x2, 1.0, 8 on %s
  %y2 = loomrt.alloc 32
  loomrt.cast bf16 %x2 -> f32 %y2, 8 on %s
  loomrt.free %x2
  return %y, %y2 : !loomrt.buffer, !loomrt.buffer
}
func.func @update(%t: i64, %other: !loomrt.buffer) {
  %s = loomrt.stream compute
  %g:2 = call @grads() : () -> (!loomrt.buffer, !loomrt.buffer)
  %p0 = loomrt.global @w0
  %m0 = loomrt.global @w0.m
  %v0 = loomrt.global @w0.v
  loomrt.adam %p0, %g#0, %m0, %v0 step %t grad f32 on %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, n = 8 : i64, weight_decay = 0.0 : f64}
  loomrt.free %g#0
  loomrt.cast f32 %g#1 -> bf16 %other, 8 on %s
  loomrt.adam %p0, %g#1, %m0, %v0 step %t grad f32 on %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, n = 8 : i64, weight_decay = 0.0 : f64}
  return
}
