// Round-trip of every op, attribute and type of the loom dialect: the printed
// form parses back to the same IR (and to the same IR in generic form).
// RUN: loom-opt %s | loom-opt | FileCheck %s
// RUN: loom-opt %s --mlir-print-op-generic | loom-opt | FileCheck %s

// CHECK: loom.topology @frontier ["gcd" = 2, "gpu" = 4, "node" = 16]
loom.topology @frontier ["gcd" = 2, "gpu" = 4, "node" = 16]

// CHECK: loom.param @wte : tensor<50x16xf32> init #loom.init<normal(0.000000e+00, 2.000000e-02)>
loom.param @wte : tensor<50x16xf32> init #loom.init<normal(0.0, 0.02)>
// CHECK: loom.param @ln.w : tensor<16xf32> value dense<1.000000e+00> : tensor<16xf32>
loom.param @ln.w : tensor<16xf32> value dense<1.0> : tensor<16xf32>
// CHECK: loom.param @u : tensor<16xf32, #loom.mem<device>> init #loom.init<uniform(-1.000000e-01, 1.000000e-01)>
loom.param @u : tensor<16xf32, #loom.mem<device>> init #loom.init<uniform(-0.1, 0.1)>
// CHECK: loom.param @z : tensor<16xf32, #loom.mem<pinned>> init #loom.init<zeros>
loom.param @z : tensor<16xf32, #loom.mem<pinned>> init #loom.init<zeros>
// CHECK: loom.state @z.m : tensor<16xf32, #loom.mem<pinned>> role adam_m of @z
loom.state @z.m : tensor<16xf32, #loom.mem<pinned>> role adam_m of @z
// CHECK: loom.state @z.v : tensor<16xf32, #loom.mem<pinned>> role adam_v of @z init #loom.init<ones>
loom.state @z.v : tensor<16xf32, #loom.mem<pinned>> role adam_v of @z init #loom.init<ones>
// CHECK: loom.state @u.err : tensor<16xf32, #loom.mem<device>> role error_feedback of @u
loom.state @u.err : tensor<16xf32, #loom.mem<device>> role error_feedback of @u
// CHECK: loom.state @step : tensor<i64> role step
loom.state @step : tensor<i64> role step
// CHECK: loom.subgroup @sg0 [@wte, @ln.w] numel 816
loom.subgroup @sg0 [@wte, @ln.w] numel 816

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%x: tensor<4x8xf32>, %b: tensor<8xf32>, %c: tensor<4x8xi1>) -> tensor<4x8xf32> {
  // CHECK: loom.neg %{{.*}} : tensor<4x8xf32>
  %0 = loom.neg %x : tensor<4x8xf32>
  // CHECK: loom.exp
  %1 = loom.exp %0 : tensor<4x8xf32>
  // CHECK: loom.log
  %2 = loom.log %1 : tensor<4x8xf32>
  // CHECK: loom.sqrt
  %3 = loom.sqrt %2 : tensor<4x8xf32>
  // CHECK: loom.rsqrt
  %4 = loom.rsqrt %3 : tensor<4x8xf32>
  // CHECK: loom.tanh
  %5 = loom.tanh %4 : tensor<4x8xf32>
  // CHECK: loom.erf
  %6 = loom.erf %5 : tensor<4x8xf32>
  // CHECK: loom.sin
  %7 = loom.sin %6 : tensor<4x8xf32>
  // CHECK: loom.cos
  %8 = loom.cos %7 : tensor<4x8xf32>
  // CHECK: loom.sigmoid
  %9 = loom.sigmoid %8 : tensor<4x8xf32>
  // CHECK: loom.relu
  %10 = loom.relu %9 : tensor<4x8xf32>
  // CHECK: loom.silu
  %11 = loom.silu %10 : tensor<4x8xf32>
  // CHECK: loom.gelu %{{.*}} approximate : tensor<4x8xf32>
  %12 = loom.gelu %11 approximate : tensor<4x8xf32>
  // CHECK: loom.gelu %{{.*}} : tensor<4x8xf32>
  %g13 = loom.gelu %12 : tensor<4x8xf32>
  // CHECK: loom.dropout %{{.*}} ratio 1.000000e-01 key 3 : tensor<4x8xf32>
  %13 = loom.dropout %g13 ratio 0.1 key 3 : tensor<4x8xf32>
  // CHECK: loom.add %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %14 = loom.add %13, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  // CHECK: loom.sub
  %15 = loom.sub %14, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  // CHECK: loom.mul
  %16 = loom.mul %15, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK: loom.div
  %17 = loom.div %16, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK: loom.pow
  %18 = loom.pow %17, %b : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  // CHECK: loom.max
  %19 = loom.max %18, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK: loom.min
  %20 = loom.min %19, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK: loom.select %{{.*}}, %{{.*}}, %{{.*}} : tensor<4x8xi1>, tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  %21 = loom.select %c, %20, %b : tensor<4x8xi1>, tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  // CHECK: loom.cast %{{.*}} : tensor<4x8xf32> to tensor<4x8xbf16>
  %22 = loom.cast %21 : tensor<4x8xf32> to tensor<4x8xbf16>
  %23 = loom.cast %22 : tensor<4x8xbf16> to tensor<4x8xf32>
  return %23 : tensor<4x8xf32>
}

// Integer tensors computed on the device: comparisons give 1 or 0 in the
// operands' type, cumsum counts.
// CHECK-LABEL: func.func @device_integers
func.func @device_integers(%ids: tensor<2x8xi64>, %x: tensor<4x8xf32>) -> tensor<2x8xi64> {
  %pad = arith.constant dense<1> : tensor<i64>
  // CHECK: loom.ne %{{.*}}, %{{.*}} : tensor<2x8xi64>, tensor<i64> -> tensor<2x8xi64>
  %m = loom.ne %ids, %pad : tensor<2x8xi64>, tensor<i64> -> tensor<2x8xi64>
  // CHECK: loom.eq
  %e = loom.eq %ids, %pad : tensor<2x8xi64>, tensor<i64> -> tensor<2x8xi64>
  // CHECK: loom.lt
  %l = loom.lt %m, %e : tensor<2x8xi64>, tensor<2x8xi64> -> tensor<2x8xi64>
  // CHECK: loom.le
  %f = loom.le %x, %x : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  // CHECK: loom.lerp %{{.*}}, %{{.*}} weight 1.000000e-01 : tensor<4x8xf32>
  %lp = loom.lerp %x, %x weight 1.0e-01 : tensor<4x8xf32>
  // CHECK: loom.rotary %{{.*}}, %{{.*}}, %{{.*}} : tensor<4x8xf32>, tensor<4x8xf32>
  %rt = loom.rotary %x, %x, %x : tensor<4x8xf32>, tensor<4x8xf32>
  // CHECK: loom.rotary %{{.*}}, %{{.*}}, %{{.*}} transpose : tensor<4x8xf32>, tensor<4x8xf32>
  %rtt = loom.rotary %rt, %x, %x transpose : tensor<4x8xf32>, tensor<4x8xf32>
  // CHECK: loom.cumsum %{{.*}} dim 1 : tensor<2x8xi64>
  %c = loom.cumsum %l dim 1 : tensor<2x8xi64>
  // CHECK: loom.cumsum %{{.*}} dim 0 exclusive reverse : tensor<4x8xf32>
  %g = loom.cumsum %f dim 0 exclusive reverse : tensor<4x8xf32>
  return %c : tensor<2x8xi64>
}

// CHECK-LABEL: func.func @layers
func.func @layers(%x: tensor<2x8x16xf32>, %w: tensor<16xf32>, %tok: tensor<2x8xi64>,
                  %q: tensor<2x4x8x4xf32>) -> tensor<f32> {
  %wte = loom.load @wte : tensor<50x16xf32>
  // CHECK: loom.embedding %{{.*}}[%{{.*}}] : tensor<50x16xf32>, tensor<2x8xi64> -> tensor<2x8x16xf32>
  %e = loom.embedding %wte[%tok] : tensor<50x16xf32>, tensor<2x8xi64> -> tensor<2x8x16xf32>
  // CHECK: loom.layer_norm %{{.*}}, %{{.*}}, %{{.*}} eps 1.000000e-05 : tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32> -> tensor<2x8x16xf32>
  %ln = loom.layer_norm %e, %w, %w eps 1.0e-05 : tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32> -> tensor<2x8x16xf32>
  // CHECK: loom.layer_norm %{{.*}}, %{{.*}} eps
  %ln2 = loom.layer_norm %ln, %w eps 1.0e-05 : tensor<2x8x16xf32>, tensor<16xf32> -> tensor<2x8x16xf32>
  // CHECK: loom.rms_norm %{{.*}}, %{{.*}} eps 9.9999999999999995E-7
  %rn = loom.rms_norm %ln2, %w eps 1.0e-06 : tensor<2x8x16xf32>, tensor<16xf32> -> tensor<2x8x16xf32>
  // CHECK: loom.matmul %{{.*}}, %{{.*}} transpose_rhs : tensor<2x8x16xf32>, tensor<50x16xf32> -> tensor<2x8x50xf32>
  %logits = loom.matmul %rn, %wte transpose_rhs : tensor<2x8x16xf32>, tensor<50x16xf32> -> tensor<2x8x50xf32>
  // CHECK: loom.matmul %{{.*}}, %{{.*}} transpose_lhs : tensor<16x8xf32>, tensor<16x50xf32> -> tensor<8x50xf32>
  %a = loom.reshape %rn : tensor<2x8x16xf32> to tensor<16x16xf32>
  %a2 = loom.slice %a [0, 0] [16, 8] [1, 1] : tensor<16x16xf32> to tensor<16x8xf32>
  %b2 = loom.transpose %wte [1, 0] : tensor<50x16xf32> to tensor<16x50xf32>
  %mm = loom.matmul %a2, %b2 transpose_lhs : tensor<16x8xf32>, tensor<16x50xf32> -> tensor<8x50xf32>
  // CHECK: loom.softmax %{{.*}} dim 1 log : tensor<8x50xf32>
  %ls = loom.softmax %mm dim 1 log : tensor<8x50xf32>
  // CHECK: loom.softmax %{{.*}} dim -1 : tensor<8x50xf32>
  %sm = loom.softmax %ls dim -1 : tensor<8x50xf32>
  // CHECK: loom.attention %{{.*}}, %{{.*}}, %{{.*}} causal scale 5.000000e-01
  %att = loom.attention %q, %q, %q causal scale 0.5 : tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32> -> tensor<2x4x8x4xf32>
  // CHECK: loom.concat %{{.*}}, %{{.*}} dim 3 : tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32> -> tensor<2x4x8x8xf32>
  %cat = loom.concat %att, %q dim 3 : tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32> -> tensor<2x4x8x8xf32>
  // CHECK: loom.broadcast_to %{{.*}} : tensor<16xf32> to tensor<8x16xf32>
  %bc = loom.broadcast_to %w : tensor<16xf32> to tensor<8x16xf32>
  // CHECK: loom.reduce sum %{{.*}} [0, 1] : tensor<2x4x8x8xf32> to tensor<8x8xf32>
  %r1 = loom.reduce sum %cat [0, 1] : tensor<2x4x8x8xf32> to tensor<8x8xf32>
  // CHECK: loom.reduce mean %{{.*}} [1] keepdim : tensor<8x8xf32> to tensor<8x1xf32>
  %r2 = loom.reduce mean %r1 [1] keepdim : tensor<8x8xf32> to tensor<8x1xf32>
  // CHECK: loom.cross_entropy %{{.*}}, %{{.*}} : tensor<2x8x50xf32>, tensor<2x8xi64> -> tensor<f32>
  %loss = loom.cross_entropy %logits, %tok : tensor<2x8x50xf32>, tensor<2x8xi64> -> tensor<f32>
  return %loss : tensor<f32>
}

// CHECK-LABEL: func.func @graph_layer
func.func @graph_layer(%rp: tensor<5xi64>, %ci: tensor<9xi64>, %v: tensor<9xf32>,
                       %x: tensor<4x3xf32>) -> tensor<4x3xf32> {
  // CHECK: loom.spmm %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<5xi64>, tensor<9xi64>, tensor<9xf32>, tensor<4x3xf32> -> tensor<4x3xf32>
  %h = loom.spmm %rp, %ci, %v, %x : tensor<5xi64>, tensor<9xi64>, tensor<9xf32>, tensor<4x3xf32> -> tensor<4x3xf32>
  return %h : tensor<4x3xf32>
}

// CHECK-LABEL: func.func @mixture_of_experts
func.func @mixture_of_experts(%probs: tensor<16x4xf32>, %x: tensor<16x8xf32>, %dy: tensor<16x8xf32>)
    -> (tensor<16x8xf32>, tensor<16x2xf32>, tensor<16x4xf32>, tensor<4xf32>) {
  // CHECK: loom.top_k %{{.*}} k 2 : tensor<16x4xf32> -> tensor<16x2xf32>, tensor<16x2xi64>
  %v, %i = loom.top_k %probs k 2 : tensor<16x4xf32> -> tensor<16x2xf32>, tensor<16x2xi64>
  // CHECK: loom.moe_slots %{{.*}} experts 4 capacity 10 : tensor<16x2xi64> -> tensor<16x2xi64>, tensor<4xf32>
  %slots, %counts = loom.moe_slots %i experts 4 capacity 10 : tensor<16x2xi64> -> tensor<16x2xi64>, tensor<4xf32>
  // CHECK: loom.moe_dispatch %{{.*}}[%{{.*}}] : tensor<16x8xf32>, tensor<16x2xi64> -> tensor<40x8xf32>
  %buf = loom.moe_dispatch %x[%slots] : tensor<16x8xf32>, tensor<16x2xi64> -> tensor<40x8xf32>
  // CHECK: loom.moe_dispatch %{{.*}}[%{{.*}}] weights %{{.*}} : tensor<16x8xf32>, tensor<16x2xi64>, tensor<16x2xf32> -> tensor<40x8xf32>
  %wbuf = loom.moe_dispatch %x[%slots] weights %v : tensor<16x8xf32>, tensor<16x2xi64>, tensor<16x2xf32> -> tensor<40x8xf32>
  // CHECK: loom.moe_combine %{{.*}}[%{{.*}}] weights %{{.*}} : tensor<40x8xf32>, tensor<16x2xi64>, tensor<16x2xf32> -> tensor<16x8xf32>
  %y = loom.moe_combine %wbuf[%slots] weights %v : tensor<40x8xf32>, tensor<16x2xi64>, tensor<16x2xf32> -> tensor<16x8xf32>
  // CHECK: loom.moe_slot_dot %{{.*}}, %{{.*}}[%{{.*}}] : tensor<16x8xf32>, tensor<40x8xf32>, tensor<16x2xi64> -> tensor<16x2xf32>
  %dw = loom.moe_slot_dot %dy, %buf[%slots] : tensor<16x8xf32>, tensor<40x8xf32>, tensor<16x2xi64> -> tensor<16x2xf32>
  // CHECK: loom.top_k_grad %{{.*}}[%{{.*}}] : tensor<16x2xf32>, tensor<16x2xi64> -> tensor<16x4xf32>
  %dp = loom.top_k_grad %dw[%i] : tensor<16x2xf32>, tensor<16x2xi64> -> tensor<16x4xf32>
  return %y, %dw, %dp, %counts : tensor<16x8xf32>, tensor<16x2xf32>, tensor<16x4xf32>, tensor<4xf32>
}

// CHECK-LABEL: func.func @gradients
func.func @gradients(%dy: tensor<16x8xf32>, %x: tensor<16x8xf32>, %w: tensor<8xf32>,
                     %logits: tensor<16x8xf32>, %lab: tensor<16xi64>, %dl: tensor<f32>,
                     %q: tensor<2x4x8x4xf32>) {
  // CHECK: loom.gelu_grad %{{.*}}, %{{.*}} approximate : tensor<16x8xf32>
  %0 = loom.gelu_grad %dy, %x approximate : tensor<16x8xf32>
  // CHECK: loom.silu_grad
  %1 = loom.silu_grad %dy, %x : tensor<16x8xf32>
  // CHECK: loom.relu_grad
  %2 = loom.relu_grad %dy, %x : tensor<16x8xf32>
  // CHECK: loom.softmax_grad %{{.*}}, %{{.*}} dim 1 log : tensor<16x8xf32>
  %3 = loom.softmax_grad %dy, %x dim 1 log : tensor<16x8xf32>
  // CHECK: loom.layer_norm_grad
  %4:3 = loom.layer_norm_grad %dy, %x, %w eps 1.0e-05 : tensor<16x8xf32>, tensor<16x8xf32>, tensor<8xf32> -> tensor<16x8xf32>, tensor<8xf32>, tensor<8xf32>
  // CHECK: loom.rms_norm_grad
  %5:2 = loom.rms_norm_grad %dy, %x, %w eps 1.0e-05 : tensor<16x8xf32>, tensor<16x8xf32>, tensor<8xf32> -> tensor<16x8xf32>, tensor<8xf32>
  // CHECK: loom.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} : tensor<16x8xf32>, tensor<16xi64>, tensor<f32> -> tensor<16x8xf32>
  %6 = loom.cross_entropy_grad %logits, %lab, %dl : tensor<16x8xf32>, tensor<16xi64>, tensor<f32> -> tensor<16x8xf32>
  // CHECK: loom.embedding_grad %{{.*}}[%{{.*}}] : tensor<16x8xf32>, tensor<16xi64> -> tensor<50x8xf32>
  %7 = loom.embedding_grad %dy[%lab] : tensor<16x8xf32>, tensor<16xi64> -> tensor<50x8xf32>
  // CHECK: loom.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} causal scale
  %8:3 = loom.attention_grad %q, %q, %q, %q causal scale 0.5 : tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32> -> tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>
  return
}

// CHECK-LABEL: func.func @cpu_adam_update
func.func @cpu_adam_update(%g: tensor<16xf32, #loom.mem<pinned>>, %t: tensor<i64>) {
  %p = loom.load @z : tensor<16xf32, #loom.mem<pinned>>
  %m = loom.load @z.m : tensor<16xf32, #loom.mem<pinned>>
  %v = loom.load @z.v : tensor<16xf32, #loom.mem<pinned>>
  // CHECK: loom.adam %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} step %{{.*}} {decoupled, lr = 1.000000e-03 : f64, subgroup = @sg0, weight_decay = 1.000000e-02 : f64}
  %p2, %m2, %v2 = loom.adam %p, %g, %m, %v step %t {lr = 1.0e-3 : f64, weight_decay = 0.01 : f64, decoupled, subgroup = @sg0}
      : tensor<16xf32, #loom.mem<pinned>>, tensor<16xf32, #loom.mem<pinned>>, tensor<16xf32, #loom.mem<pinned>>, tensor<16xf32, #loom.mem<pinned>>, tensor<i64>
  // CHECK: loom.store %{{.*}} to @z : tensor<16xf32, #loom.mem<pinned>>
  loom.store %p2 to @z : tensor<16xf32, #loom.mem<pinned>>
  loom.store %m2 to @z.m : tensor<16xf32, #loom.mem<pinned>>
  loom.store %v2 to @z.v : tensor<16xf32, #loom.mem<pinned>>
  // CHECK: loom.sgd %{{.*}}, %{{.*}}, %{{.*}} {lr = 0.69999999999999996 : f64, momentum = 9.000000e-01 : f64, nesterov} : tensor<16xf32, #loom.mem<pinned>>
  %p3, %b3 = loom.sgd %p2, %g, %m2 {lr = 0.7 : f64, momentum = 0.9 : f64, nesterov} : tensor<16xf32, #loom.mem<pinned>>
  return
}

// CHECK-LABEL: func.func @gpu_update_of_host_state
func.func @gpu_update_of_host_state(%g: tensor<16xf32, #loom.mem<device>>, %t: tensor<i64>) {
  %m = loom.load @z.m : tensor<16xf32, #loom.mem<pinned>>
  %v = loom.load @z.v : tensor<16xf32, #loom.mem<pinned>>
  %p = loom.load @z : tensor<16xf32, #loom.mem<pinned>>
  // CHECK: %[[MD:.+]], %[[T0:.+]] = loom.copy %{{.*}} on h2d : tensor<16xf32, #loom.mem<pinned>> -> tensor<16xf32, #loom.mem<device>>
  %md, %t0 = loom.copy %m on h2d : tensor<16xf32, #loom.mem<pinned>> -> tensor<16xf32, #loom.mem<device>>
  // CHECK: loom.copy %{{.*}} after [%[[T0]]] on h2d[1]
  %vd, %t1 = loom.copy %v after [%t0] on h2d[1] : tensor<16xf32, #loom.mem<pinned>> -> tensor<16xf32, #loom.mem<device>>
  %pd, %t2 = loom.copy %p on h2d : tensor<16xf32, #loom.mem<pinned>> -> tensor<16xf32, #loom.mem<device>>
  // CHECK: loom.wait %{{.*}}, %{{.*}}
  loom.wait %t1, %t2
  %p2, %m2, %v2 = loom.adam %pd, %g, %md, %vd step %t {lr = 1.0e-3 : f64}
      : tensor<16xf32, #loom.mem<device>>, tensor<16xf32, #loom.mem<device>>, tensor<16xf32, #loom.mem<device>>, tensor<16xf32, #loom.mem<device>>, tensor<i64>
  // CHECK: loom.release %{{.*}} : tensor<16xf32, #loom.mem<device>>
  loom.release %g : tensor<16xf32, #loom.mem<device>>
  // CHECK: loom.copy %{{.*}} on d2h
  %mh, %t3 = loom.copy %m2 on d2h : tensor<16xf32, #loom.mem<device>> -> tensor<16xf32, #loom.mem<pinned>>
  loom.wait %t3
  loom.store %mh to @z.m : tensor<16xf32, #loom.mem<pinned>>
  return
}

// CHECK-LABEL: func.func @zero_copy_gather
func.func @zero_copy_gather(%table: tensor<1000x32xf32, #loom.mem<pinned>>,
                            %ids: tensor<64xi64, #loom.mem<device>>) -> tensor<64x32xf32, #loom.mem<device>> {
  // CHECK: loom.zero_copy %{{.*}} : tensor<1000x32xf32, #loom.mem<pinned>> -> tensor<1000x32xf32, #loom.mem<mapped>>
  %m = loom.zero_copy %table : tensor<1000x32xf32, #loom.mem<pinned>> -> tensor<1000x32xf32, #loom.mem<mapped>>
  %rows = loom.embedding %m[%ids] : tensor<1000x32xf32, #loom.mem<mapped>>, tensor<64xi64, #loom.mem<device>> -> tensor<64x32xf32, #loom.mem<device>>
  return %rows : tensor<64x32xf32, #loom.mem<device>>
}

// CHECK-LABEL: func.func @collectives
func.func @collectives(%g: tensor<64x4xf32>, %e: tensor<64x4xf32>) -> tensor<64x4xf32> {
  // CHECK: loom.all_reduce %{{.*}} over #loom.group<@frontier, ["gcd", "gpu"]> reduce mean on comm : tensor<64x4xf32> -> tensor<64x4xf32>
  %a, %t0 = loom.all_reduce %g over #loom.group<@frontier, ["gcd", "gpu"]> reduce mean on comm : tensor<64x4xf32> -> tensor<64x4xf32>
  // CHECK: loom.reduce_scatter %{{.*}} after [%{{.*}}] over #loom.group<@frontier, ["node"]> on comm[1] : tensor<64x4xf32> -> tensor<4x4xf32>
  %rs, %t1 = loom.reduce_scatter %a after [%t0] over #loom.group<@frontier, ["node"]> on comm[1] : tensor<64x4xf32> -> tensor<4x4xf32>
  // CHECK: loom.all_gather %{{.*}} after [%{{.*}}] over #loom.group<@frontier, ["node"]> on comm : tensor<4x4xf32> -> tensor<64x4xf32>
  %ag, %t2 = loom.all_gather %rs after [%t1] over #loom.group<@frontier, ["node"]> on comm : tensor<4x4xf32> -> tensor<64x4xf32>
  loom.wait %t2
  // CHECK: loom.compress %{{.*}} feedback(%{{.*}} : tensor<64x4xf32>) : tensor<64x4xf32> -> !loom.packed<tensor<64x4xf32>, #loom.codec<sign_scale>>, tensor<64x4xf32>
  %p, %e2 = loom.compress %ag feedback(%e : tensor<64x4xf32>) : tensor<64x4xf32> -> !loom.packed<tensor<64x4xf32>, #loom.codec<sign_scale>>, tensor<64x4xf32>
  // CHECK: loom.all_to_all %{{.*}} over #loom.group<@frontier, ["gcd", "gpu"]> on comm : !loom.packed<tensor<64x4xf32>, #loom.codec<sign_scale>> -> !loom.packed<tensor<64x4xf32>, #loom.codec<sign_scale>>
  %x, %t3 = loom.all_to_all %p over #loom.group<@frontier, ["gcd", "gpu"]> on comm : !loom.packed<tensor<64x4xf32>, #loom.codec<sign_scale>> -> !loom.packed<tensor<64x4xf32>, #loom.codec<sign_scale>>
  // 1-bit Adam's exchange: a one-scale payload in chunks that keep their
  // sender's scale (8 ranks: chunks of 32).
  %flat1 = loom.reshape %ag : tensor<64x4xf32> to tensor<256xf32>
  %fp = loom.compress %flat1 : tensor<256xf32> -> !loom.packed<tensor<256xf32>, #loom.codec<sign_scale>>
  // CHECK: loom.all_to_all %{{.*}} : !loom.packed<tensor<256xf32>, #loom.codec<sign_scale>> -> !loom.packed<tensor<256xf32>, #loom.codec<sign_scale, block = 32>>
  %fc, %t5 = loom.all_to_all %fp over #loom.group<@frontier, ["gcd", "gpu"]> on comm : !loom.packed<tensor<256xf32>, #loom.codec<sign_scale>> -> !loom.packed<tensor<256xf32>, #loom.codec<sign_scale, block = 32>>
  %c32 = loom.slice %flat1 [0] [32] [1] : tensor<256xf32> to tensor<32xf32>
  %c32p = loom.compress %c32 : tensor<32xf32> -> !loom.packed<tensor<32xf32>, #loom.codec<sign_scale>>
  // CHECK: loom.all_gather %{{.*}} : !loom.packed<tensor<32xf32>, #loom.codec<sign_scale>> -> !loom.packed<tensor<256xf32>, #loom.codec<sign_scale, block = 32>>
  %gc, %t6 = loom.all_gather %c32p over #loom.group<@frontier, ["gcd", "gpu"]> on comm : !loom.packed<tensor<32xf32>, #loom.codec<sign_scale>> -> !loom.packed<tensor<256xf32>, #loom.codec<sign_scale, block = 32>>
  loom.wait %t5, %t6
  // CHECK: loom.broadcast %{{.*}} after [%{{.*}}] over #loom.group<@frontier, ["gcd"]> root 1 on comm
  %y, %t4 = loom.broadcast %x after [%t3] over #loom.group<@frontier, ["gcd"]> root 1 on comm : !loom.packed<tensor<64x4xf32>, #loom.codec<sign_scale>> -> !loom.packed<tensor<64x4xf32>, #loom.codec<sign_scale>>
  loom.wait %t4
  // CHECK: loom.send_recv %{{.*}} over #loom.group<@frontier, ["node"]> shift -1 on comm : tensor<64x4xf32> -> tensor<64x4xf32>
  %sr, %t7 = loom.send_recv %g over #loom.group<@frontier, ["node"]> shift -1 on comm : tensor<64x4xf32> -> tensor<64x4xf32>
  loom.wait %t7
  // CHECK: loom.p2p send %{{.*}} to 1 over #loom.group<@frontier, ["node"]> on comm : tensor<64x4xf32>
  %t8 = loom.p2p send %g to 1 over #loom.group<@frontier, ["node"]> on comm : tensor<64x4xf32>
  loom.wait %t8
  // CHECK: loom.p2p recv from -1 over #loom.group<@frontier, ["node"]> on comm -> tensor<64x4xf32>
  %pr, %t9 = loom.p2p recv from -1 over #loom.group<@frontier, ["node"]> on comm -> tensor<64x4xf32>
  loom.wait %t9
  // CHECK: loom.p2p send %{{.*}} to 1 recv from 1 over #loom.group<@frontier, ["node"]> on comm : tensor<64x4xf32> -> tensor<64x4xf32>
  %pb, %t10 = loom.p2p send %g to 1 recv from 1 over #loom.group<@frontier, ["node"]> on comm : tensor<64x4xf32> -> tensor<64x4xf32>
  loom.wait %t10
  // CHECK: loom.decompress %{{.*}} : !loom.packed<tensor<64x4xf32>, #loom.codec<sign_scale>> -> tensor<64x4xf32>
  %d = loom.decompress %y : !loom.packed<tensor<64x4xf32>, #loom.codec<sign_scale>> -> tensor<64x4xf32>
  // CHECK: loom.compress %{{.*}} : tensor<64x4xf32> -> !loom.packed<tensor<64x4xf32>, #loom.codec<int8, block = 4096>>
  %q = loom.compress %d : tensor<64x4xf32> -> !loom.packed<tensor<64x4xf32>, #loom.codec<int8, block = 4096>>
  // CHECK: #loom.codec<fp4_e2m1, block = 32>
  %f = loom.compress %d : tensor<64x4xf32> -> !loom.packed<tensor<64x4xf32>, #loom.codec<fp4_e2m1, block = 32>>
  // CHECK: #loom.codec<fp8_e4m3>
  %f8 = loom.compress %d : tensor<64x4xf32> -> !loom.packed<tensor<64x4xf32>, #loom.codec<fp8_e4m3>>
  %q2 = loom.decompress %q : !loom.packed<tensor<64x4xf32>, #loom.codec<int8, block = 4096>> -> tensor<64x4xf32>
  return %q2 : tensor<64x4xf32>
}

// A step as large as int64 allows keeps one element (its size is computed
// without overflow).
// CHECK-LABEL: func.func @huge_step
// CHECK: loom.slice %{{.*}} [0, 3] [16, 8] [1, 9223372036854775807] : tensor<16x16xf32> to tensor<16x1xf32>
func.func @huge_step(%a: tensor<16x16xf32>) -> tensor<16x1xf32> {
  %s = loom.slice %a [0, 3] [16, 8] [1, 9223372036854775807] : tensor<16x16xf32> to tensor<16x1xf32>
  return %s : tensor<16x1xf32>
}

// Tensor parallelism's entry (Megatron's f): identity forward.
// CHECK-LABEL: func.func @tp_enter
// CHECK: loom.tp_enter over #loom.group<@frontier, ["gcd"]> %{{.*}} : tensor<2x8x64xf32>
func.func @tp_enter(%h: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
  %e = loom.tp_enter over #loom.group<@frontier, ["gcd"]> %h : tensor<2x8x64xf32>
  return %e : tensor<2x8x64xf32>
}

// The vocabulary-parallel loss's shift: the identity, without a gradient;
// loom.fp32 keeps an op in fp32 under mixed precision.
// CHECK-LABEL: func.func @stop_gradient
// CHECK: loom.stop_gradient %{{.*}} : tensor<8x1xf32>
// CHECK: loom.exp %{{.*}} {loom.fp32} : tensor<8x1xf32>
func.func @stop_gradient(%m: tensor<8x1xf32>) -> tensor<8x1xf32> {
  %s = loom.stop_gradient %m : tensor<8x1xf32>
  %e = loom.exp %s {loom.fp32} : tensor<8x1xf32>
  return %e : tensor<8x1xf32>
}

// Pipeline marks: the micro-batch an input slice holds (loom-micro-batches)
// and the stage of an op or a parameter (loom-pipeline-cut).
// CHECK: loom.param @staged : tensor<4x2xf32> init #loom.init<zeros> {loom.stage = 1 : i64}
// CHECK-LABEL: func.func @pipeline_marks
// CHECK: loom.slice %{{.*}} [2, 0] [4, 2] [1, 1] {loom.micro_batch = 1 : i64, loom.stage = 0 : i64}
loom.param @staged : tensor<4x2xf32> init #loom.init<zeros> {loom.stage = 1 : i64}
func.func @pipeline_marks(%x: tensor<4x2xf32>) -> tensor<2x2xf32> {
  %s = loom.slice %x [2, 0] [4, 2] [1, 1] {loom.micro_batch = 1 : i64, loom.stage = 0 : i64} : tensor<4x2xf32> to tensor<2x2xf32>
  return %s : tensor<2x2xf32>
}
