// RUN: loom-opt %s -split-input-file --loom-plan-arena | FileCheck %s
// RUN: loom-opt %s -split-input-file --loom-plan-arena="functions=other" | FileCheck %s --check-prefix=OTHER

// Largest first, each at the lowest offset free over its lifetime: %a
// (4096) at 0; %b (2048) is alive with %a, so after it; %c (1024, sizes
// rounded up to 256) comes after %a's free and takes %a's bytes; %d (100
// bytes: 256) is alive with %b and %c only.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: loomrt.arena = 6144 : i64
// CHECK: %[[A:.*]] = loomrt.alloc 4096 at 0
// CHECK: loomrt.alloc 2048 at 4096
// CHECK: loomrt.free %[[A]]
// CHECK: loomrt.alloc 1000 at 0
// CHECK: loomrt.alloc 100 at 1024
// Host buffers are the runtime's.
// CHECK: loomrt.alloc 64 host
// CHECK-NOT: at
// CHECK: return
// Only the functions named: @train_step is left as it was.
// OTHER-LABEL: func.func @train_step
// OTHER-NOT: loomrt.arena
// OTHER-NOT: at 0
// OTHER: return
func.func @train_step(%x: !loomrt.buffer) -> !loomrt.buffer {
  %s = loomrt.stream compute
  %a = loomrt.alloc 4096
  %b = loomrt.alloc 2048
  loomrt.unary exp f32 %x -> %a, 16 on %s
  loomrt.free %a
  %c = loomrt.alloc 1000
  %d = loomrt.alloc 100
  loomrt.free %b
  loomrt.free %c
  %h = loomrt.alloc 64 host
  loomrt.free %h
  return %d : !loomrt.buffer
}

// -----

// A callee called once runs where it is called: its buffers are planned
// with the caller's, in one region both functions ask for. Its result is
// the caller's %r, freed by the caller after %late is made: %late (largest,
// at 0) and %r cannot share bytes; %ret reuses %r's once the caller frees
// it, %after %late's.
// CHECK-LABEL: func.func @callee
// CHECK-SAME: loomrt.arena = 1536 : i64
// CHECK: loomrt.alloc 512 at 1024
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: loomrt.arena = 1536 : i64
// CHECK: loomrt.alloc 1024 at 0
// CHECK: loomrt.alloc 512 at 1024
// CHECK: loomrt.alloc 256 at 0
func.func @callee(%x: !loomrt.buffer) -> !loomrt.buffer {
  %r = loomrt.alloc 512
  return %r : !loomrt.buffer
}
func.func @train_step(%x: !loomrt.buffer) -> !loomrt.buffer {
  %r = call @callee(%x) : (!loomrt.buffer) -> !loomrt.buffer
  %late = loomrt.alloc 1024
  loomrt.free %r
  %ret = loomrt.alloc 512
  loomrt.free %late
  %after = loomrt.alloc 256
  loomrt.free %after
  return %ret : !loomrt.buffer
}

// -----

// A callee called from two places cannot have one plan for both: the
// runtime places everything.
// CHECK-LABEL: func.func @shared
// CHECK-NOT: loomrt.arena
// CHECK: loomrt.alloc 512
// CHECK-NOT: at
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: loomrt.arena
// CHECK: loomrt.alloc 64
// CHECK-NOT: at
// CHECK: return
func.func @shared(%x: !loomrt.buffer) -> !loomrt.buffer {
  %r = loomrt.alloc 512
  return %r : !loomrt.buffer
}
func.func @train_step(%x: !loomrt.buffer) -> !loomrt.buffer {
  %a = call @shared(%x) : (!loomrt.buffer) -> !loomrt.buffer
  %b = call @shared(%x) : (!loomrt.buffer) -> !loomrt.buffer
  %c = loomrt.alloc 64
  loomrt.free %a
  return %b : !loomrt.buffer
}

// -----

// A buffer a host task frees goes back on the host thread, later than the
// task's place in the block: its bytes are not reused by %next.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: loomrt.arena = 1024 : i64
// CHECK: loomrt.alloc 512 at 0
// CHECK: loomrt.alloc 512 at 512
func.func @train_step(%x: !loomrt.buffer) {
  %s = loomrt.stream compute
  %g = loomrt.alloc 512
  %e = loomrt.host_task -> !loomrt.event {
    loomrt.free %g
    %r = loomrt.record %s
    loomrt.yield %r
  }
  %next = loomrt.alloc 512
  loomrt.join
  loomrt.free %next
  return
}
