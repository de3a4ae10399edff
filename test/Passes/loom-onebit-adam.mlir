// RUN: loom-opt %s --loom-onebit-adam=freeze-step=5 | FileCheck %s
// RUN: loom-opt %s --loom-onebit-adam=freeze-step=5 --loom-data-parallel | FileCheck %s --check-prefix=DP
// RUN: loom-opt %s --loom-onebit-adam=freeze-step=5 --loom-data-parallel --loom-lower-to-runtime | FileCheck %s --check-prefix=RT
// RUN: not loom-opt %s --loom-onebit-adam=freeze-step=0 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: loom-opt %s --loom-onebit-adam="freeze-step=5 variance-refresh=10" --loom-data-parallel --loom-lower-to-runtime | FileCheck %s --check-prefix=REFRESH
// RUN: not loom-opt %s --loom-onebit-adam="freeze-step=5 variance-refresh=-1" 2>&1 | FileCheck %s --check-prefix=BADREFRESH
// RUN: loom-opt %s --loom-onebit-adam="freeze-step=5 bucket-size=16" | FileCheck %s --check-prefix=BUCKET
// RUN: loom-opt %s --loom-onebit-adam="freeze-step=5 bucket-size=16" --loom-data-parallel --loom-lower-to-runtime | FileCheck %s --check-prefix=BUCKET-RT
// RUN: loom-opt %s --loom-onebit-adam=freeze-step=5 --loom-data-parallel=zero-stage=1 | FileCheck %s --check-prefix=Z1
// RUN: loom-opt %s --loom-onebit-adam=freeze-step=5 --loom-data-parallel=zero-stage=2 | FileCheck %s --check-prefix=Z1
// RUN: loom-opt %s --loom-onebit-adam=freeze-step=5 --loom-data-parallel="zero-stage=1 frozen-variance=replicated" | FileCheck %s --check-prefix=REP
// RUN: loom-opt %s --loom-onebit-adam=freeze-step=5 --loom-data-parallel=zero-stage=1 --loom-lower-to-runtime | FileCheck %s --check-prefix=Z1RT
// RUN: not loom-opt %s --loom-onebit-adam=freeze-step=5 --loom-data-parallel=zero-stage=3 2>&1 | FileCheck %s --check-prefix=Z3
// RUN: not loom-opt %s --loom-onebit-adam=freeze-step=5 --loom-data-parallel="zero-stage=1 frozen-variance=halved" 2>&1 | FileCheck %s --check-prefix=BADVAR

// Two parameters (6 and 3 elements) over 2 ranks: each padded to a
// multiple of 2 * lcm(2, 8) = 16 elements, chunks of 8 per rank.
// CHECK: loom.param @w : tensor<3x2xf32>
// CHECK-NEXT: loom.state @w.onebit.worker_error : tensor<16xf32> role error_feedback init #loom.init<zeros>
// CHECK-NEXT: loom.state @w.onebit.server_error : tensor<8xf32> role error_feedback init #loom.init<zeros>
// CHECK: func.func @forward_backward_local(
// CHECK-LABEL: func.func @train_step_frozen(
// CHECK-SAME: attributes {loom.freeze_step = 5 : i64}
// The step counter advances as in @train_step.
// CHECK: %[[S:.*]] = arith.addi
// CHECK: loom.store %[[S]] to @optimizer.step
// This rank's own gradients, and the reported loss averaged.
// CHECK: %[[R:.*]]:3 = call @forward_backward_local(
// CHECK: loom.all_reduce %[[R]]#0 {{.*}} reduce mean
// The worker: the momentum from this rank's gradient, padded, compressed
// with its error, chunks exchanged.
// CHECK: %[[M:.*]] = loom.load @w.exp_avg
// CHECK: loom.lerp %[[M]], %[[R]]#1 weight {{0.09999+[0-9]*}} : tensor<3x2xf32>
// CHECK: loom.concat {{.*}} : tensor<6xf32>, tensor<10xf32> -> tensor<16xf32>
// CHECK: %[[WE:.*]] = loom.load @w.onebit.worker_error : tensor<16xf32>
// CHECK: %[[P:.*]], %[[NE:.*]] = loom.compress %{{.*}} feedback(%[[WE]] : tensor<16xf32>) : tensor<16xf32> -> !loom.packed<tensor<16xf32>, #loom.codec<sign_scale>>, tensor<16xf32>
// CHECK: loom.store %[[NE]] to @w.onebit.worker_error
// CHECK: loom.all_to_all %[[P]] over #loom.group<@world, ["rank"]> on comm : !loom.packed<tensor<16xf32>, #loom.codec<sign_scale>> -> !loom.packed<tensor<16xf32>, #loom.codec<sign_scale, block = 8>>
// The server: its chunk averaged over the workers, compressed with its
// error, gathered.
// CHECK: loom.decompress {{.*}} -> tensor<16xf32>
// CHECK: loom.reshape {{.*}} : tensor<16xf32> to tensor<2x8xf32>
// CHECK: loom.reduce mean {{.*}} [0] : tensor<2x8xf32> to tensor<8xf32>
// CHECK: loom.compress {{.*}} feedback({{.*}} : tensor<8xf32>) : tensor<8xf32> -> !loom.packed<tensor<8xf32>, #loom.codec<sign_scale>>, tensor<8xf32>
// CHECK: loom.store {{.*}} to @w.onebit.server_error
// CHECK: loom.all_gather {{.*}} : !loom.packed<tensor<8xf32>, #loom.codec<sign_scale>> -> !loom.packed<tensor<16xf32>, #loom.codec<sign_scale, block = 8>>
// CHECK: loom.slice {{.*}} [0] [6] [1] : tensor<16xf32> to tensor<6xf32>
// The update: the averaged momentum, the variance frozen.
// CHECK: loom.adam {{.*}} {decoupled, freeze_step = 5 : i64
// CHECK: loom.store {{.*}} to @w.exp_avg

// Data parallelism changes @train_step (the warm-up) and leaves the frozen
// step's own gradients alone.
// DP-LABEL: func.func @train_step(
// DP: loom.data_parallel
// DP-LABEL: func.func @train_step_frozen(
// DP-NOT: loom.all_reduce {{.*}}tensor<9xf32>
// DP: call @forward_backward_local(
// DP-NOT: call @forward_backward(

// The lowering keeps both entries and names the second in the program.
// RT: loomrt.program = {{{.*}}freeze_step = 5 : i64
// RT-LABEL: func.func @train_step_frozen(
// RT: loomrt.onebit_compress
// RT: loomrt.all_to_all %{{.*}} -> %{{.*}}, 1 bytes over
// RT: loomrt.onebit_average %{{.*}} -> %{{.*}}, 8 of 2 on
// RT: loomrt.all_gather_bytes %{{.*}} -> %{{.*}}, 4 bytes over
// RT: loomrt.onebit_decompress %{{.*}} -> %{{.*}}, 8 chunks 2
// The update runs in place on the globals (the momentum's load also feeds
// the local momentum, earlier on the compute stream) with no copies in or
// out.
// RT-NOT: loomrt.memcpy
// RT: loomrt.adam {{.*}}freeze_step = 5 : i64
// RT-NOT: loomrt.memcpy
// RT: return

// ZERO: loom-onebit-adam: freeze-step must be at least 1

// variance-refresh=K: recorded on @train_step_frozen and in the program the
// binary reads (which then runs @train_step at the refresh steps).
// REFRESH: loomrt.program = {{{.*}}freeze_step = 5 : i64{{.*}}variance_refresh = 10 : i64
// REFRESH: func.func @train_step_frozen({{.*}}loom.freeze_step = 5 : i64, loom.variance_refresh = 10 : i64
// BADREFRESH: loom-onebit-adam: variance-refresh must be 0 (never) or a positive number of steps

// bucket-size=16: both parameters (6 + 3 elements) in one compressed
// all-reduce with one scale, its error buffers named after the first.
// BUCKET: loom.state @w.onebit.worker_error : tensor<16xf32>
// BUCKET-NOT: @b.onebit
// BUCKET: loom.concat {{.*}} : tensor<6xf32>, tensor<3xf32>, tensor<7xf32> -> tensor<16xf32>
// BUCKET-COUNT-1: loom.all_to_all
// BUCKET: loom.slice {{.*}} [0] [6] [1] : tensor<16xf32> to tensor<6xf32>
// BUCKET: loom.adam
// BUCKET: loom.slice {{.*}} [6] [9] [1] : tensor<16xf32> to tensor<3xf32>
// BUCKET: loom.adam
// Lowered, each member's slice of the averaged momentum is read where it
// lies (a contiguous slice is a view), by an update in place.
// BUCKET-RT-LABEL: func.func @train_step_frozen(
// BUCKET-RT: loomrt.onebit_compress
// BUCKET-RT: loomrt.onebit_compress
// BUCKET-RT: loomrt.onebit_decompress %{{.*}} -> %[[AVG:[0-9]+]], 8 chunks 2
// BUCKET-RT-NOT: loomrt.copy_strided
// BUCKET-RT-NOT: loomrt.memcpy
// BUCKET-RT: loomrt.adam %{{.*}}, %[[AVG]], %{{.*}}
// BUCKET-RT: %[[B:.*]] = loomrt.view %[[AVG]][24]
// BUCKET-RT: loomrt.adam %{{.*}}, %[[B]], %{{.*}}
// BUCKET-RT-NOT: loomrt.memcpy
// BUCKET-RT: return
// ZeRO 1 and 2 (both: no gradient is reduced after the freeze), the
// default frozen-variance=sharded: the full momentum stays a state of every
// rank, the variance only as ZeRO's shard; @train_step_frozen steps this
// rank's shard of the bucket (w and b, 9 elements padded to 10, 5 a rank)
// with the averaged momentum and all-gathers fp32 parameters.
// Z1-NOT: loom.state @w.exp_avg_sq
// Z1: loom.state @w.exp_avg : tensor<3x2xf32> role adam_m
// Z1-NOT: loom.state @b.exp_avg_sq
// Z1-LABEL: func.func @train_step_frozen(
// Z1-NOT: @w.exp_avg_sq
// Z1: loom.load @w.exp_avg : tensor<3x2xf32>
// Z1: loom.all_to_all
// Z1: loom.all_gather {{.*}} -> !loom.packed
// Z1: loom.all_gather {{.*}} -> !loom.packed
// Z1: %[[MS:.*]] = loom.load @zero.bucket0.exp_avg : tensor<5xf32>
// Z1: %[[VS:.*]] = loom.load @zero.bucket0.exp_avg_sq : tensor<5xf32>
// Z1: %[[PS:.*]] = loom.shard over {{.*}} : tensor<10xf32> -> tensor<5xf32>
// Z1: %[[MOM:.*]] = loom.shard over {{.*}} : tensor<10xf32> -> tensor<5xf32>
// Z1: %[[NP:.*]], %[[NM:.*]], %{{.*}} = loom.adam %[[PS]], %[[MOM]], %[[MS]], %[[VS]] step {{.*}}freeze_step = 5 : i64
// Z1: loom.store %[[NM]] to @zero.bucket0.exp_avg
// Z1: loom.all_gather %[[NP]] {{.*}} : tensor<5xf32> -> tensor<10xf32>
// Z1: loom.store {{.*}} to @w : tensor<3x2xf32>
// Z1: loom.store {{.*}} to @w.exp_avg : tensor<3x2xf32>
// Z1: loom.store {{.*}} to @b : tensor<3xf32>
// Z1: loom.store {{.*}} to @b.exp_avg : tensor<3xf32>
// Z1-NEXT: return
// The once-only entry: the warm-up's momentum shards gathered whole.
// Z1-LABEL: func.func @enter_frozen()
// Z1: loom.load @zero.bucket0.exp_avg : tensor<5xf32>
// Z1: loom.all_gather {{.*}} : tensor<5xf32> -> tensor<10xf32>
// Z1: loom.store {{.*}} to @w.exp_avg
// Z1: loom.store {{.*}} to @b.exp_avg
// Z1-NEXT: return

// frozen-variance=replicated: the variance is gathered too, once, and the
// frozen step is stage 0's, with no parameter all-gather.
// REP: loom.state @w.exp_avg : tensor<3x2xf32>
// REP: loom.state @w.exp_avg_sq : tensor<3x2xf32>
// REP-LABEL: func.func @train_step_frozen(
// REP-NOT: loom.all_gather {{.*}} : tensor<
// REP-NOT: @zero.bucket
// REP: loom.adam {{.*}}freeze_step = 5
// REP-LABEL: func.func @enter_frozen()
// REP: loom.load @zero.bucket0.exp_avg :
// REP: loom.store {{.*}} to @b.exp_avg :
// REP: loom.load @zero.bucket0.exp_avg_sq :
// REP: loom.store {{.*}} to @b.exp_avg_sq :

// The lowering keeps the third entry.
// Z1RT-LABEL: func.func @train_step_frozen(
// Z1RT-LABEL: func.func @enter_frozen(
// Z1RT: loomrt.all_gather

// Z3: loom-data-parallel: 1-bit Adam composes with ZeRO stages 0-2
// BADVAR: for the --frozen-variance option: Cannot find option named 'halved'!

loom.topology @world ["rank" = 2]
loom.param @w : tensor<3x2xf32> init #loom.init<ones>
loom.state @w.exp_avg : tensor<3x2xf32> role adam_m of @w init #loom.init<zeros>
loom.state @w.exp_avg_sq : tensor<3x2xf32> role adam_v of @w init #loom.init<zeros>
loom.param @b : tensor<3xf32> init #loom.init<zeros>
loom.state @b.exp_avg : tensor<3xf32> role adam_m of @b init #loom.init<zeros>
loom.state @b.exp_avg_sq : tensor<3xf32> role adam_v of @b init #loom.init<zeros>
loom.state @optimizer.step : tensor<i64> role step init #loom.init<zeros>
func.func @forward_backward(%x: tensor<4x2xf32>, %y: tensor<4xi64>) -> (tensor<f32>, tensor<3x2xf32>, tensor<3xf32>) attributes {loom.grad_params = [@w, @b]} {
  %w = loom.load @w : tensor<3x2xf32>
  %b = loom.load @b : tensor<3xf32>
  %h = loom.matmul %x, %w transpose_rhs : tensor<4x2xf32>, tensor<3x2xf32> -> tensor<4x3xf32>
  %o = loom.add %h, %b : tensor<4x3xf32>, tensor<3xf32> -> tensor<4x3xf32>
  %l = loom.cross_entropy %o, %y : tensor<4x3xf32>, tensor<4xi64> -> tensor<f32>
  %one = arith.constant dense<1.0> : tensor<f32>
  %g = loom.cross_entropy_grad %o, %y, %one : tensor<4x3xf32>, tensor<4xi64>, tensor<f32> -> tensor<4x3xf32>
  %dx = loom.matmul %g, %w : tensor<4x3xf32>, tensor<3x2xf32> -> tensor<4x2xf32>
  %gb = loom.reduce sum %g [0] : tensor<4x3xf32> to tensor<3xf32>
  %gw = loom.matmul %g, %x transpose_lhs : tensor<4x3xf32>, tensor<4x2xf32> -> tensor<3x2xf32>
  return %l, %gw, %gb : tensor<f32>, tensor<3x2xf32>, tensor<3xf32>
}
func.func @train_step(%x: tensor<4x2xf32>, %y: tensor<4xi64>) -> tensor<f32> {
  %r:3 = call @forward_backward(%x, %y) : (tensor<4x2xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<3x2xf32>, tensor<3xf32>)
  %s0 = loom.load @optimizer.step : tensor<i64>
  %c1 = arith.constant dense<1> : tensor<i64>
  %s = arith.addi %s0, %c1 : tensor<i64>
  loom.store %s to @optimizer.step : tensor<i64>
  %w = loom.load @w : tensor<3x2xf32>
  %wm = loom.load @w.exp_avg : tensor<3x2xf32>
  %wv = loom.load @w.exp_avg_sq : tensor<3x2xf32>
  %w2, %wm2, %wv2 = loom.adam %w, %r#1, %wm, %wv step %s {decoupled, lr = 1.0e-03 : f64, weight_decay = 1.0e-02 : f64} : tensor<3x2xf32>, tensor<3x2xf32>, tensor<3x2xf32>, tensor<3x2xf32>, tensor<i64>
  loom.store %w2 to @w : tensor<3x2xf32>
  loom.store %wm2 to @w.exp_avg : tensor<3x2xf32>
  loom.store %wv2 to @w.exp_avg_sq : tensor<3x2xf32>
  %b = loom.load @b : tensor<3xf32>
  %bm = loom.load @b.exp_avg : tensor<3xf32>
  %bv = loom.load @b.exp_avg_sq : tensor<3xf32>
  %b2, %bm2, %bv2 = loom.adam %b, %r#2, %bm, %bv step %s {decoupled, lr = 1.0e-03 : f64, weight_decay = 1.0e-02 : f64} : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<i64>
  loom.store %b2 to @b : tensor<3xf32>
  loom.store %bm2 to @b.exp_avg : tensor<3xf32>
  loom.store %bv2 to @b.exp_avg_sq : tensor<3xf32>
  return %r#0 : tensor<f32>
}
