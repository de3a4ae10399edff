// RUN: loom-opt %s --loom-capture-graphs --split-input-file | FileCheck %s
// loom-capture-graphs: a lowered function whose calls are issued the same way
// every step (kernels and copies on the compute stream, buffers at planned
// offsets, calls of such functions) is marked loomrt.graph; every other one
// says why not in loomrt.graph_declined.

// CHECK-LABEL: func.func @leaf
// CHECK-SAME: attributes {loomrt.arena = 512 : i64, loomrt.graph}
// CHECK-LABEL: func.func @caller
// CHECK-SAME: attributes {loomrt.graph}
loom.param @w : tensor<64xf32>
func.func @leaf(%x: !loomrt.buffer) -> !loomrt.buffer attributes {loomrt.arena = 512 : i64} {
  %s = loomrt.stream compute
  %w = loomrt.global @w
  loomrt.comment "a cast"
  %y = loomrt.alloc 128 at 0
  loomrt.cast f32 %w -> bf16 %y, 64 on %s
  %z = loomrt.alloc 256 at 256
  loomrt.memcpy %z, %x, 256 on %s
  loomrt.free %z
  return %y : !loomrt.buffer
}
func.func @caller(%x: !loomrt.buffer) -> !loomrt.buffer {
  %y = func.call @leaf(%x) : (!loomrt.buffer) -> !loomrt.buffer
  return %y : !loomrt.buffer
}

// -----

// A buffer the runtime places: its address is the arena's choice at run time.
// CHECK-LABEL: func.func @online
// CHECK-SAME: loomrt.graph_declined = "a buffer the runtime places (loom-plan-arena did not place it) ('loomrt.alloc')"
func.func @online() -> !loomrt.buffer {
  %y = loomrt.alloc 128
  return %y : !loomrt.buffer
}


// -----

// A constant is copied from the device copy the runtime keeps.
// CHECK-LABEL: func.func @constant
// CHECK-SAME: loomrt.graph}
func.func @constant() -> !loomrt.buffer attributes {loomrt.arena = 256 : i64} {
  %s = loomrt.stream compute
  %x = loomrt.alloc 8 at 0
  loomrt.write_const %x, dense<1> : tensor<i64> on %s
  return %x : !loomrt.buffer
}

// -----

// CHECK-LABEL: func.func @readback
// CHECK-SAME: loomrt.graph_declined = "the host reads a value back ('loomrt.read_i64')"
func.func @readback(%b: !loomrt.buffer) {
  %s = loomrt.stream compute
  %t = loomrt.read_i64 %b on %s
  return
}

// -----

// CHECK-LABEL: func.func @copy_stream
// CHECK-SAME: loomrt.graph_declined = "it uses the h2d stream ('loomrt.stream')"
func.func @copy_stream(%x: !loomrt.buffer) attributes {loomrt.arena = 256 : i64} {
  %s = loomrt.stream h2d
  %y = loomrt.alloc 64 at 0
  loomrt.memcpy %y, %x, 64 on %s
  return
}

// -----

// CHECK-LABEL: func.func @collective
// CHECK-SAME: loomrt.graph_declined = "a collective's communicator ('loomrt.comm')"
func.func @collective(%g: !loomrt.buffer) {
  %s = loomrt.stream compute
  %c = loomrt.comm
  loomrt.all_reduce sum f32 %g -> %g, 16 over %c on %s
  return
}

// -----

// The update reads the learning rate and the step count the host holds.
// CHECK-LABEL: func.func @update
// CHECK-SAME: loomrt.graph_declined = "an update with the step's learning rate and count ('loomrt.adam')"
loom.param @p : tensor<16xf32>
loom.state @p.m : tensor<16xf32> role other init #loom.init<zeros>
loom.state @p.v : tensor<16xf32> role other init #loom.init<zeros>
func.func @update(%g: !loomrt.buffer, %t: i64) {
  %s = loomrt.stream compute
  %p = loomrt.global @p
  %m = loomrt.global @p.m
  %v = loomrt.global @p.v
  loomrt.adam %p, %g, %m, %v step %t grad f32 on %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, decoupled, eps = 1.0e-8 : f64, lr = 1.0e-3 : f64, n = 16 : i64, weight_decay = 0.0 : f64}
  return
}

// -----

// A caller of a function that cannot be captured cannot be either.
// CHECK-LABEL: func.func @bad
// CHECK-SAME: loomrt.graph_declined = "a buffer the runtime places
// CHECK-LABEL: func.func @calls_bad
// CHECK-SAME: loomrt.graph_declined = "it calls @bad, which cannot be captured ('func.call')"
func.func @bad() -> !loomrt.buffer {
  %y = loomrt.alloc 128
  return %y : !loomrt.buffer
}
func.func @calls_bad() -> !loomrt.buffer {
  %y = func.call @bad() : () -> !loomrt.buffer
  return %y : !loomrt.buffer
}

// -----

// Dropout's key is drawn for each step.
// CHECK-LABEL: func.func @dropout_key
// CHECK-SAME: loomrt.graph_declined = "a dropout key drawn for each step ('loomrt.random_key')"
func.func @dropout_key() {
  %k = loomrt.random_key 3
  return
}

// -----

// Called twice a step (two micro-batches): not captured.
// CHECK-LABEL: func.func @micro
// CHECK-SAME: loomrt.graph_declined = "it is called 2 times a step, with other inputs each time (one graph a function)"
// CHECK-LABEL: func.func @step
// CHECK-SAME: loomrt.graph_declined = "it calls @micro, which cannot be captured ('func.call')"
func.func @micro(%x: !loomrt.buffer) attributes {loomrt.arena = 256 : i64} {
  %s = loomrt.stream compute
  %y = loomrt.alloc 64 at 0
  loomrt.memcpy %y, %x, 64 on %s
  return
}
func.func @step(%a: !loomrt.buffer, %b: !loomrt.buffer) {
  func.call @micro(%a) : (!loomrt.buffer) -> ()
  func.call @micro(%b) : (!loomrt.buffer) -> ()
  return
}
