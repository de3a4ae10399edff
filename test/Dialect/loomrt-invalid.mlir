// RUN: loom-opt %s -split-input-file -verify-diagnostics

func.func @f() {
  // expected-error @+1 {{'loomrt.global' op 'nope' does not name a loom.param or loom.state}}
  %w = loomrt.global @nope
  return
}

// -----

func.func @f(%x: !loomrt.buffer) {
  %s = loomrt.stream compute
  // expected-error @+1 {{needs shapes of one rank (at most 8), aligned to the output's}}
  loomrt.binary add f32 %x [4, 4], %x [4] -> %x [4, 4] on %s
  return
}

// -----

func.func @f(%x: !loomrt.buffer) {
  %s = loomrt.stream compute
  // expected-error @+1 {{one stride per dimension}}
  loomrt.copy_strided %x [1] -> %x [4, 1] shape [4, 4] elem 4 on %s
  return
}

// -----

func.func @f(%x: !loomrt.buffer) {
  %s = loomrt.stream compute
  // expected-error @+1 {{writes dense f32, bf16, i64 or i1 constants}}
  loomrt.write_const %x, dense<1> : tensor<2xi32> on %s
  return
}

// -----

func.func @f(%x: !loomrt.buffer) {
  // expected-error @+1 {{attribute 'bytes' failed to satisfy constraint}}
  %a = loomrt.alloc -4
  return
}

// -----

func.func @f(%x: !loomrt.buffer) attributes {loomrt.arena = 1024 : i64} {
  // expected-error @+1 {{a planned offset ('at') places a device buffer; host buffers are the runtime's to place}}
  %a = loomrt.alloc 64 host at 0
  return
}

// -----

func.func @f(%x: !loomrt.buffer) attributes {loomrt.arena = 1024 : i64} {
  // expected-error @+1 {{offset 100 is not a multiple of 256}}
  %a = loomrt.alloc 64 at 100
  return
}

// -----

func.func @f(%x: !loomrt.buffer) attributes {loomrt.arena = 1024 : i64} {
  // expected-error @+1 {{bytes [768, 1280) lie outside the function's planned region of 1024 bytes}}
  %a = loomrt.alloc 512 at 768
  return
}

// -----

func.func @f(%x: !loomrt.buffer) {
  // expected-error @+1 {{has a planned offset but its function has no 'loomrt.arena'}}
  %a = loomrt.alloc 64 at 0
  return
}

// -----

// expected-error @+1 {{'loomrt.arena' must be an integer >= 0, a multiple of 256, on a function}}
func.func @f(%x: !loomrt.buffer) attributes {loomrt.arena = 1000 : i64} {
  return
}

// -----

// expected-error @+1 {{'loomrt.arena' must be an integer >= 0, a multiple of 256, on a function}}
module attributes {loomrt.arena = 1024 : i64} {
}

// -----

func.func @f(%x: !loomrt.buffer, %t: i64) {
  %s = loomrt.stream compute
  // expected-error @+1 {{writes a bf16 refresh only with a bf16 gradient}}
  loomrt.adam %x, %x, %x, %x step %t refresh %x grad f32 on %s {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, n = 16 : i64}
  return
}

// -----

// expected-error @+1 {{'loomrt.program' must be a dictionary with integers batch, seq, vocab, world (>= 0), zero_stage (>= -1) and task (0 tokens, 1 arrays or 2 graph); 'vocab' is missing or out of range}}
func.func @train_step() attributes {loomrt.program = {batch = 2, seq = 8, world = 1, zero_stage = -1, task = 0}} {
  return
}

// -----

// expected-error @+1 {{'loomrt.program' inputs: each must be {name (a string), dtype (f32 0 or i64 2), shape (1 to 8 sizes >= 0), limit (>= 0)}}}
func.func @train_step() attributes {loomrt.program = {batch = 2, seq = 0, vocab = 0, world = 1, zero_stage = -1, task = 1, inputs = [{name = "x", dtype = 1, shape = array<i64: 2, 3>, limit = 0}]}} {
  return
}

// -----

// expected-error @+1 {{'loomrt.program' inputs: expected a non-empty array of {name, dtype, shape, limit}}}
func.func @train_step() attributes {loomrt.program = {batch = 2, seq = 0, vocab = 0, world = 1, zero_stage = -1, task = 1}} {
  return
}

// -----

// expected-error @+1 {{unknown loomrt attribute 'loomrt.other'}}
func.func @f() attributes {loomrt.other = 1} {
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{levels must be increasing indices into sizes}}
  %g = loomrt.comm levels [1, 0] of [2, 2]
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{levels must be increasing indices into sizes}}
  %g = loomrt.comm levels [2] of [2, 2]
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{sizes must be 1 to 16 positive level sizes}}
  %g = loomrt.comm levels [0] of [0, 2]
  return
}

// -----

// A host task's event is the issuing thread's only after a join.
func.func @f() {
  %xs = loomrt.stream h2d
  %s = loomrt.stream compute
  %e = loomrt.host_task -> !loomrt.event {
    %r = loomrt.record %xs
    loomrt.yield %r
  }
  // expected-error @+1 {{uses an event of a loomrt.host_task before a loomrt.join}}
  loomrt.wait %s for %e
  return
}

// -----

// Buffers are taken by the issuing thread, in program order.
func.func @f() {
  loomrt.host_task {
    // expected-error @+1 {{inside loomrt.host_task: allocate, join and nest on the issuing thread}}
    %b = loomrt.alloc 64 host
    loomrt.yield
  }
  return
}

// -----

func.func @f() {
  %xs = loomrt.stream h2d
  // expected-error @+1 {{yields 0 events but has 1 results}}
  %e = loomrt.host_task -> !loomrt.event {
    %r = loomrt.record %xs
    loomrt.yield
  }
  loomrt.join
  return
}

// -----

// A fused region's program is checked by the runtime's own checks.
func.func @f() {
  %s = loomrt.stream compute
  %x = loomrt.alloc 64
  // expected-error @+1 {{region 'r': instruction 1: needs a unary op and an earlier register}}
  loomrt.fused_elementwise "r" (%x) -> (%x), 16 on %s {in_types = array<i32: 0>, out_types = array<i32: 0>, program = array<i32: 0, 0, 0, 0, 1, 11, 1, 0, 4, 0, 0, 1>}
  return
}

// -----

func.func @f() {
  %s = loomrt.stream compute
  %x = loomrt.alloc 64
  // expected-error @+1 {{the region's name must be an identifier}}
  loomrt.fused_elementwise "a\"b" (%x) -> (%x), 16 on %s {in_types = array<i32: 0>, out_types = array<i32: 0>, program = array<i32: 0, 0, 0, 0, 4, 0, 0, 0>}
  return
}

// -----

func.func @f() {
  %s = loomrt.stream compute
  %x = loomrt.alloc 64
  // expected-error @+1 {{program: four integers an instruction, got 5}}
  loomrt.fused_elementwise "r" (%x) -> (%x), 16 on %s {in_types = array<i32: 0>, out_types = array<i32: 0>, program = array<i32: 0, 0, 0, 0, 4>}
  return
}

// -----

func.func @f() {
  %s = loomrt.stream compute
  %x = loomrt.alloc 64
  // expected-error @+1 {{one type for each input and output}}
  loomrt.fused_elementwise "r" (%x) -> (%x), 16 on %s {in_types = array<i32: 0, 0>, out_types = array<i32: 0>, program = array<i32: 0, 0, 0, 0, 4, 0, 0, 0>}
  return
}

// -----

func.func @f(%x: !loomrt.buffer, %y: !loomrt.buffer) {
  %s = loomrt.stream comm
  %c = loomrt.comm
  // expected-error @+1 {{'loomrt.send_recv' op shift is 0: a rank would send to itself (a copy is loomrt.memcpy)}}
  loomrt.send_recv %x -> %y, 16 bytes shift 0 over %c on %s
  return
}

// -----

func.func @f(%x: !loomrt.buffer) {
  %s = loomrt.stream comm
  %c = loomrt.comm
  // expected-error @+1 {{'loomrt.p2p' op a peer offset of 0 names the rank itself (a copy is loomrt.memcpy)}}
  loomrt.p2p send %x to 0, 16 bytes over %c on %s
  return
}

// -----

func.func @f(%x: !loomrt.buffer, %y: !loomrt.buffer) {
  %s = loomrt.stream compute
  // expected-error @+1 {{activation 'silu' has no GEMM epilogue (gelu_tanh has)}}
  loomrt.matmul_bias_act silu f32 %x, %x bias %x -> f32 %y aux %x on %s {batch = 1 : i64, k = 4 : i64, m = 4 : i64, n = 4 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 16 : i64}
  return
}

// -----

func.func @f(%x: !loomrt.buffer, %y: !loomrt.buffer) {
  %s = loomrt.stream compute
  // expected-error @+1 {{needs a contiguous C (stride_c = m * n)}}
  loomrt.matmul_act_grad gelu_tanh f32 %x, %x aux %x -> f32 %y on %s {batch = 2 : i64, k = 4 : i64, m = 4 : i64, n = 4 : i64, stride_a = 16 : i64, stride_b = 0 : i64, stride_c = 20 : i64}
  return
}

// -----

func.func @f(%x: !loomrt.buffer, %y: !loomrt.buffer) {
  %s = loomrt.stream compute
  // expected-error @+1 {{aux and c must be different buffers}}
  loomrt.matmul_act_grad gelu_tanh f32 %x, %x aux %y -> f32 %y on %s {batch = 1 : i64, k = 4 : i64, m = 4 : i64, n = 4 : i64, stride_a = 0 : i64, stride_b = 0 : i64, stride_c = 16 : i64}
  return
}

// -----

func.func @f(%x: !loomrt.buffer, %t: i64) {
  %s = loomrt.stream compute
  // expected-error @+1 {{needs one param, grad, exp_avg and exp_avg_sq for each of its 2 sizes}}
  loomrt.adam_multi (%x), (%x), (%x), (%x) step %t grad f32 on %s {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, sizes = array<i64: 4, 4>}
  return
}

// -----

func.func @f(%x: !loomrt.buffer, %t: i64) {
  %s = loomrt.stream compute
  // expected-error @+1 {{writes bf16 refreshes only with bf16 gradients}}
  loomrt.adam_multi (%x), (%x), (%x), (%x) refresh(%x) step %t grad f32 on %s {lr = 1.0e-3 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64, sizes = array<i64: 4>}
  return
}
