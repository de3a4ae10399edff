// RUN: loom-opt %s --loom-diloco="inner-steps=4 fragments=2 quant=bf16" | FileCheck %s
// RUN: loom-opt %s --loom-diloco="inner-steps=4 fragments=2 quant=fp32 outer-momentum=0" | FileCheck %s --check-prefix=FP32
// RUN: loom-opt %s --loom-diloco="inner-steps=4 fragments=2 quant=bf16" --loom-lower-to-runtime | FileCheck %s --check-prefix=RT
// RUN: loom-opt %s --loom-diloco="inner-steps=4 fragments=2 quant-block=4" | FileCheck %s --check-prefix=FP4
// RUN: loom-opt %s --loom-diloco="inner-steps=4 fragments=2 quant-block=4" --loom-lower-to-runtime | FileCheck %s --check-prefix=FP4-RT
// RUN: loom-opt %s --loom-diloco="inner-steps=4 fragments=2 quant-block=4 elastic=true" | FileCheck %s --check-prefix=ELASTIC
// RUN: loom-opt %s --loom-diloco="inner-steps=4 fragments=2 quant-block=4 elastic=true" --loom-lower-to-runtime | FileCheck %s --check-prefix=ELASTIC-RT
// The binary lets the replicas that remain go on only when the exchanges
// count them (elastic); otherwise a lost replica ends the job.
// RUN: loom-opt %s --loom-diloco="inner-steps=4 fragments=2 quant-block=4 elastic=true" --loom-lower-to-runtime | FileCheck %s --check-prefix=ELASTIC-PROG
// RUN: loom-opt %s --loom-diloco="inner-steps=4 fragments=2 quant-block=4" --loom-lower-to-runtime | FileCheck %s --check-prefix=STRICT-PROG
// ELASTIC-PROG: loomrt.program = {{{.*}}elastic = 1 : i64
// ELASTIC-PROG: loom.diloco = #loom.diloco<every = 4, offset = {{[0-9]+}}, elastic = true>
// STRICT-PROG: loomrt.program = {{{.*}}elastic = 0 : i64
// STRICT-PROG-NOT: elastic = true
// RUN: not loom-opt %s --loom-diloco="quant=int3" 2>&1 | FileCheck %s --check-prefix=BADQUANT
// RUN: not loom-opt %s --loom-diloco="inner-steps=4 fragments=2 overlap=2" 2>&1 | FileCheck %s --check-prefix=OVERLAP
// RUN: loom-opt %s --loom-diloco="inner-steps=4 fragments=2 overlap=1 quant=fp32" | FileCheck %s --check-prefix=TAU
// RUN: not loom-opt %s --loom-diloco="inner-steps=2 fragments=3" 2>&1 | FileCheck %s --check-prefix=FRAGS
// RUN: sed 's/"replica" = 2/"rank" = 2/' %s | not loom-opt --loom-diloco 2>&1 | FileCheck %s --check-prefix=NOREPLICA

// Two replicas of one rank; the embedding @wte goes to fragment 0 (before
// the first block), @h.0.w to 0 and @h.1.w to 1 (block index mod 2), @ln_f
// to 1 (after the last block). Each has a global copy and an outer momentum.
// CHECK: loom.param @wte
// CHECK-NEXT: loom.state @wte.diloco.momentum : tensor<4xf32> role momentum of @wte init #loom.init<zeros>
// CHECK-NEXT: loom.state @wte.diloco.global : tensor<4xf32> role master of @wte init #loom.init<zeros>
// The loss reported is the mean over the replicas.
// CHECK-LABEL: func.func @train_step(
// CHECK-SAME: loom.data_parallel = #loom.data_parallel<world = 2, zero_stage = 0>
// CHECK: loom.all_reduce {{.*}} over #loom.group<@world, ["replica"]> reduce mean on comm : tensor<f32> -> tensor<f32>
// The global copy starts as the parameters.
// CHECK-LABEL: func.func @diloco_start()
// CHECK: %[[W:.*]] = loom.load @wte
// CHECK-NEXT: loom.store %[[W]] to @wte.diloco.global
// Fragment 0 synchronises after steps t with (t + 1) mod 4 = 2.
// CHECK-LABEL: func.func @diloco_outer_0()
// CHECK-SAME: loom.diloco = #loom.diloco<every = 4, offset = 2>
// The pseudo-gradient: global minus local.
// CHECK: %[[L:.*]] = loom.load @wte : tensor<4xf32>
// CHECK-NEXT: %[[G:.*]] = loom.load @wte.diloco.global : tensor<4xf32>
// CHECK-NEXT: loom.sub %[[G]], %[[L]]
// CHECK: loom.load @h.0.w
// CHECK-NOT: loom.load @h.1.w
// CHECK: loom.concat {{.*}} -> tensor<10xf32>
// CHECK-NEXT: loom.cast {{.*}} : tensor<10xf32> to tensor<10xbf16>
// CHECK-NEXT: loom.all_reduce {{.*}} over #loom.group<@world, ["replica"]> reduce mean on comm : tensor<10xbf16> -> tensor<10xbf16>
// The outer Nesterov step on the global copy, then the merge
// lerp(global, local, 0.5) into the parameter.
// CHECK: %[[NG:.*]], %[[NB:.*]] = loom.sgd %[[G]], %{{.*}}, %{{.*}} {lr = 0.69{{.*}}, momentum = 9.000000e-01 : f64, nesterov}
// CHECK-NEXT: loom.store %[[NG]] to @wte.diloco.global
// CHECK-NEXT: loom.store %[[NB]] to @wte.diloco.momentum
// CHECK-NEXT: %[[M:.*]] = loom.lerp %[[NG]], %[[L]] weight 5.000000e-01
// CHECK-NEXT: loom.store %[[M]] to @wte
// CHECK-LABEL: func.func @diloco_outer_1()
// CHECK-SAME: loom.diloco = #loom.diloco<every = 4, offset = 4>
// CHECK: loom.load @h.1.w
// CHECK: loom.load @ln_f
// CHECK-NOT: loom.load @wte

// FP32: loom.all_reduce {{.*}} : tensor<10xf32> -> tensor<10xf32>
// FP32-NOT: nesterov

// The lowering keeps the start and the outer steps and lists them.
// RT: loomrt.program = {{{.*}}outer = [{async = false, every = 4 : i64, name = "diloco_outer_0", offset = 2 : i64}, {async = false, every = 4 : i64, name = "diloco_outer_1", offset = 4 : i64}]
// RT-LABEL: func.func @diloco_start(
// RT-LABEL: func.func @diloco_outer_0(
// RT: loomrt.all_reduce mean bf16
// RT: loomrt.sgd
// RT: loomrt.lerp

// The default exchange, fp4 (E2M1) with a scale every quant-block
// elements: fragment 0's 10 elements padded to whole blocks for both
// replicas (16), quantised, reduce-scattered by an all-to-all, averaged in
// fp32, quantised again, all-gathered.
// FP4-LABEL: func.func @diloco_outer_0()
// FP4: loom.concat {{.*}} -> tensor<16xf32>
// FP4-NEXT: %[[Q:.*]] = loom.compress {{.*}} : tensor<16xf32> -> !loom.packed<tensor<16xf32>, #loom.codec<fp4_e2m1, block = 4>>
// FP4-NEXT: loom.all_to_all %[[Q]] over #loom.group<@world, ["replica"]> on comm
// FP4: loom.decompress
// FP4-NEXT: loom.reshape {{.*}} : tensor<16xf32> to tensor<2x8xf32>
// FP4-NEXT: loom.reduce mean {{.*}} [0] : tensor<2x8xf32> to tensor<8xf32>
// FP4-NEXT: loom.compress {{.*}} : tensor<8xf32> -> !loom.packed<tensor<8xf32>, #loom.codec<fp4_e2m1, block = 4>>
// FP4-NEXT: loom.all_gather {{.*}} -> !loom.packed<tensor<16xf32>, #loom.codec<fp4_e2m1, block = 4>>
// Lowered: the scales and the codes of each replica's part move separately
// (2 scales and 4 bytes of codes a part).
// FP4-RT-LABEL: func.func @diloco_outer_0(
// FP4-RT: loomrt.block_compress fp4_e2m1 %{{.*}} -> %{{.*}}, 16 block 4
// FP4-RT: loomrt.all_to_all %{{.*}} -> %{{.*}}, 8 bytes over
// FP4-RT: loomrt.all_to_all %{{.*}} -> %{{.*}}, 4 bytes over
// FP4-RT: loomrt.block_decompress fp4_e2m1
// FP4-RT: loomrt.block_compress fp4_e2m1 %{{.*}} -> %{{.*}}, 8 block 4
// FP4-RT: loomrt.all_gather_bytes %{{.*}} -> %{{.*}}, 8 bytes over
// FP4-RT: loomrt.all_gather_bytes %{{.*}} -> %{{.*}}, 4 bytes over
// FP4-RT: loomrt.block_decompress fp4_e2m1 %{{.*}} -> %{{.*}}, 16 block 4
// elastic: every replica all-gathers its whole fragment (10 elements padded
// to 12, whole blocks of 4) and a block of ones; the sum over the rows that
// arrived divides by the ones' sum, the replicas present (a lost replica's
// row is zeros).
// ELASTIC-LABEL: func.func @diloco_outer_0()
// ELASTIC: %[[ONES:.*]] = arith.constant dense<1.000000e+00> : tensor<4xf32>
// ELASTIC-NEXT: %[[W:.*]] = loom.concat %{{.*}}, %{{.*}}, %{{.*}}, %[[ONES]] dim 0 : tensor<4xf32>, tensor<6xf32>, tensor<2xf32>, tensor<4xf32> -> tensor<16xf32>
// ELASTIC-NEXT: %[[Q:.*]] = loom.compress %[[W]] : tensor<16xf32> -> !loom.packed<tensor<16xf32>, #loom.codec<fp4_e2m1, block = 4>>
// ELASTIC-NEXT: %[[G:.*]], %[[T:.*]] = loom.all_gather %[[Q]] over #loom.group<@world, ["replica"]> on comm : {{.*}} -> !loom.packed<tensor<32xf32>, #loom.codec<fp4_e2m1, block = 4>>
// ELASTIC-NEXT: loom.wait %[[T]]
// ELASTIC-NEXT: %[[D:.*]] = loom.decompress %[[G]]
// ELASTIC-NEXT: %[[R:.*]] = loom.reshape %[[D]] : tensor<32xf32> to tensor<2x16xf32>
// ELASTIC-NEXT: %[[S:.*]] = loom.reduce sum %[[R]] [0] : tensor<2x16xf32> to tensor<16xf32>
// ELASTIC-NEXT: %[[X:.*]] = loom.slice %[[S]] [0] [12] [1] : tensor<16xf32> to tensor<12xf32>
// ELASTIC-NEXT: %[[N:.*]] = loom.slice %[[S]] [12] [13] [1] : tensor<16xf32> to tensor<1xf32>
// ELASTIC-NEXT: loom.div %[[X]], %[[N]] : tensor<12xf32>, tensor<1xf32> -> tensor<12xf32>
// ELASTIC-NOT: loom.all_to_all
// ELASTIC-LABEL: func.func @diloco_outer_1()
// Lowered: 4 scales then 8 bytes of codes a replica, gathered.
// ELASTIC-RT-LABEL: func.func @diloco_outer_0(
// ELASTIC-RT: loomrt.block_compress fp4_e2m1 %{{.*}} -> %{{.*}}, 16 block 4
// ELASTIC-RT-NOT: loomrt.all_to_all
// ELASTIC-RT: loomrt.all_gather_bytes %{{.*}} -> %{{.*}}, 16 bytes over
// ELASTIC-RT: loomrt.all_gather_bytes %{{.*}} -> %{{.*}}, 8 bytes over
// ELASTIC-RT: loomrt.block_decompress fp4_e2m1 %{{.*}} -> %{{.*}}, 32 block 4
// BADQUANT: for the --quant option: Cannot find option named 'int3'!
// OVERLAP: loom-diloco: overlap (tau) must be at least 0 and below inner-steps / fragments
// overlap=1: a snapshot of the pseudo-gradients at offset 2, an exchange
// (async: the binary may run it beside the next step) into a state; the
// outer step and the merge run one step later, on the parameters as they
// are then.
// TAU: loom.state @diloco.delta_0 : tensor<10xf32> role other
// TAU-NEXT: loom.state @diloco.pending_0 : tensor<10xf32> role other
// TAU-LABEL: func.func @diloco_outer_0()
// TAU-SAME: #loom.diloco<every = 4, offset = 2>
// TAU: loom.store %{{.*}} to @diloco.delta_0
// TAU-NOT: loom.all_reduce
// TAU-LABEL: func.func @diloco_exchange_0()
// TAU-SAME: #loom.diloco<every = 4, offset = 2, async = true>
// TAU: %[[D:.*]] = loom.load @diloco.delta_0
// TAU-NEXT: loom.all_reduce %[[D]]
// TAU: loom.store %{{.*}} to @diloco.pending_0
// TAU-NOT: loom.sgd
// TAU-LABEL: func.func @diloco_apply_0()
// TAU-SAME: #loom.diloco<every = 4, offset = 3>
// TAU: %[[L:.*]] = loom.load @wte : tensor<4xf32>
// TAU: %[[P:.*]] = loom.load @diloco.pending_0
// TAU: loom.sgd
// TAU: loom.lerp %{{.*}}, %[[L]]
// FRAGS: loom-diloco: needs inner-steps >= 1 and 1 <= fragments <= inner-steps
// NOREPLICA: loom-diloco: needs a loom.topology whose outermost level is 'replica'
loom.topology @world ["gpu" = 1, "replica" = 2]
loom.param @wte : tensor<4xf32> init #loom.init<ones>
loom.state @wte.exp_avg : tensor<4xf32> role adam_m of @wte init #loom.init<zeros>
loom.state @wte.exp_avg_sq : tensor<4xf32> role adam_v of @wte init #loom.init<zeros>
loom.param @h.0.w : tensor<6xf32> init #loom.init<ones>
loom.state @h.0.w.exp_avg : tensor<6xf32> role adam_m of @h.0.w init #loom.init<zeros>
loom.state @h.0.w.exp_avg_sq : tensor<6xf32> role adam_v of @h.0.w init #loom.init<zeros>
loom.param @h.1.w : tensor<6xf32> init #loom.init<ones>
loom.state @h.1.w.exp_avg : tensor<6xf32> role adam_m of @h.1.w init #loom.init<zeros>
loom.state @h.1.w.exp_avg_sq : tensor<6xf32> role adam_v of @h.1.w init #loom.init<zeros>
loom.param @ln_f : tensor<4xf32> init #loom.init<ones>
loom.state @ln_f.exp_avg : tensor<4xf32> role adam_m of @ln_f init #loom.init<zeros>
loom.state @ln_f.exp_avg_sq : tensor<4xf32> role adam_v of @ln_f init #loom.init<zeros>
loom.state @optimizer.step : tensor<i64> role step init #loom.init<zeros>
func.func @forward_backward(%x: tensor<2x4xf32>, %y: tensor<2x4xf32>) -> (tensor<f32>, tensor<4xf32>, tensor<6xf32>, tensor<6xf32>, tensor<4xf32>) attributes {loom.grad_params = [@wte, @h.0.w, @h.1.w, @ln_f]} {
  %a = loom.load @wte : tensor<4xf32>
  %b = loom.load @h.0.w : tensor<6xf32>
  %c = loom.load @h.1.w : tensor<6xf32>
  %d = loom.load @ln_f : tensor<4xf32>
  %s = loom.mul %x, %a : tensor<2x4xf32>, tensor<4xf32> -> tensor<2x4xf32>
  %t = loom.sub %s, %y : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %l = loom.reduce mean %t [0, 1] : tensor<2x4xf32> to tensor<f32>
  return %l, %a, %b, %c, %d : tensor<f32>, tensor<4xf32>, tensor<6xf32>, tensor<6xf32>, tensor<4xf32>
}
func.func @train_step(%x: tensor<2x4xf32>, %y: tensor<2x4xf32>) -> tensor<f32> {
  %r:5 = call @forward_backward(%x, %y) : (tensor<2x4xf32>, tensor<2x4xf32>) -> (tensor<f32>, tensor<4xf32>, tensor<6xf32>, tensor<6xf32>, tensor<4xf32>)
  %s0 = loom.load @optimizer.step : tensor<i64>
  %c1 = arith.constant dense<1> : tensor<i64>
  %s = arith.addi %s0, %c1 : tensor<i64>
  loom.store %s to @optimizer.step : tensor<i64>
  return %r#0 : tensor<f32>
}
