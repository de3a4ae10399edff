// RUN: loom-opt %s --loom-data-parallel=zero-stage=0 | FileCheck %s --check-prefix=Z0
// RUN: loom-opt %s --loom-data-parallel=zero-stage=3 | FileCheck %s --check-prefix=Z3
// RUN: sed 's/\["rank" = 2\]/["rank" = 2, "node" = 3]/' %s | loom-opt --loom-data-parallel=zero-stage=0 | FileCheck %s --check-prefix=REPLICAS
// RUN: sed 's/\["rank" = 2\]/["rank" = 2, "node" = 3]/' %s | not loom-opt --loom-data-parallel="zero-stage=0 exclude=rank" 2>&1 | FileCheck %s --check-prefix=LEVEL
// RUN: sed 's/\["rank" = 2\]/["rank" = 4]/' %s | not loom-opt --loom-data-parallel=zero-stage=0 2>&1 | FileCheck %s --check-prefix=SIZE
// RUN: loom-opt %s --loom-data-parallel=zero-stage=0 --loom-clip-gradients=max-norm=0.5 | FileCheck %s --check-prefix=CLIP

// Expert parallelism (loom.expert_parallel: rank 0 of the 2 ranks of
// level 0): @w is this rank's expert (loom.expert), @b is shared. The
// expert's gradient, the sum over the group's tokens, is scaled by 1/2 (the
// mean over the world's ranks) right after it is computed; with no other
// level it is not reduced, and @b is averaged over the world as ever.
// Z0-LABEL: func.func @forward_backward(
// Z0: loom.all_reduce %{{.*}} over #loom.group<@world, ["rank"]> reduce mean on comm : tensor<3xf32>
// Z0-NEXT: %[[GW:.*]] = loom.matmul %{{.*}}, %{{.*}} transpose_lhs
// Z0-NEXT: %[[HALF:.*]] = arith.constant dense<5.000000e-01> : tensor<f32>
// Z0-NEXT: %[[SW:.*]] = loom.mul %[[GW]], %[[HALF]]
// Z0-NOT: loom.all_reduce
// Z0: return %{{.*}}, %[[SW]], %{{.*}} : tensor<f32>, tensor<3x2xf32>, tensor<3xf32>
// Z0-LABEL: func.func @train_step(
// Z0: loom.adam %{{.*}}, %{{.*}}#1,

// ZeRO-3 partitions the shared @b only; the expert stays whole and its
// update is its own.
// Z3: loom.param @w : tensor<3x2xf32> init #loom.init<ones> {loom.expert}
// Z3: loom.param @zero.bucket0.params : tensor<2xf32> init #loom.init<zeros> {loom.padded = 4 : i64, loom.shard_of = [@b]}
// Z3-LABEL: func.func @train_step(
// Z3: loom.adam %{{.*}}, %{{.*}} : tensor<3x2xf32>
// Z3: loom.adam {{.*}} : tensor<2xf32>

// With a second level (3 replicas of the 2 ranks), the ranks holding the
// same experts average the scaled gradient over it.
// REPLICAS: loom.all_reduce %{{.*}} over #loom.group<@world, ["rank", "node"]> reduce mean on comm : tensor<3xf32>
// REPLICAS: %[[HALF:.*]] = arith.constant dense<5.000000e-01>
// REPLICAS: loom.all_reduce %{{.*}} over #loom.group<@world, ["node"]> reduce mean on comm : tensor<6xf32>

// loom-clip-gradients: the expert's squares (other experts on the other
// rank) are summed over the experts' level; the shared @b's, whole and the
// same on every rank at stage 0, are not.
// CLIP-LABEL: func.func @train_step(
// CLIP: %[[SW:.*]] = loom.reduce sum %{{.*}} [0, 1] : tensor<3x2xf32> to tensor<f32>
// CLIP: %[[SB:.*]] = loom.reduce sum %{{.*}} [0] : tensor<3xf32> to tensor<f32>
// CLIP-NEXT: %[[E:.*]], %[[T:.*]] = loom.all_reduce %[[SW]] over #loom.group<@world, ["rank"]> on comm
// CLIP-NEXT: loom.wait %[[T]]
// CLIP-NEXT: %[[ALL:.*]] = loom.add %[[SB]], %[[E]]
// CLIP-NEXT: loom.sqrt %[[ALL]]

// LEVEL: the experts' level 'rank' is not one data parallelism spans
// SIZE: loom.expert_parallel names a level of its loom.topology that does not have its ranks

module attributes {loom.expert_parallel = array<i64: 0, 2, 0>} {
  loom.topology @world ["rank" = 2]
  loom.param @w : tensor<3x2xf32> init #loom.init<ones> {loom.expert}
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
}
