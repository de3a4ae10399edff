// RUN: loom-opt %s --loom-data-parallel=zero-stage=0 | FileCheck %s --check-prefixes=ALL,Z0
// RUN: loom-opt %s --loom-data-parallel=zero-stage=1 | FileCheck %s --check-prefixes=ALL,Z1
// RUN: loom-opt %s --loom-data-parallel=zero-stage=2 | FileCheck %s --check-prefixes=ALL,Z2
// RUN: loom-opt %s --loom-data-parallel=zero-stage=3 | FileCheck %s --check-prefixes=ALL,Z3
// RUN: loom-opt %s --loom-data-parallel="zero-stage=1 bucket-size=6" | FileCheck %s --check-prefix=BUCKETS
// RUN: sed 's/\["rank" = 2\]/["rank" = 2, "replica" = 3]/' %s | loom-opt --loom-data-parallel="zero-stage=0 exclude=replica" --loom-lower-to-runtime | FileCheck %s --check-prefix=GROUP
// RUN: sed 's/\["rank" = 2\]/["rank" = 1, "replica" = 3]/' %s | loom-opt --loom-data-parallel="zero-stage=0 exclude=replica" | FileCheck %s --check-prefix=NOTHING
// RUN: sed 's/\["rank" = 2\]/["rank" = 2, "node" = 2]/' %s | loom-opt --loom-data-parallel="zero-stage=3 secondary=rank" | FileCheck %s --check-prefix=HPZ
// RUN: sed 's/\["rank" = 2\]/["rank" = 2, "node" = 2]/' %s | not loom-opt --loom-data-parallel="zero-stage=2 secondary=rank" 2>&1 | FileCheck %s --check-prefix=HPZ-STAGE
// RUN: sed 's/\["rank" = 2\]/["rank" = 2, "node" = 2]/' %s | not loom-opt --loom-data-parallel="zero-stage=3 secondary=rank,node" 2>&1 | FileCheck %s --check-prefix=HPZ-ALL
// RUN: sed 's/\["rank" = 2\]/["rank" = 2, "node" = 2]/' %s | not loom-opt --loom-data-parallel="zero-stage=3 secondary=gcd" 2>&1 | FileCheck %s --check-prefix=HPZ-LEVEL
// RUN: loom-opt %s --loom-data-parallel="zero-stage=2 bucket-size=6 reductions-in-flight=1" | FileCheck %s --check-prefix=INFLIGHT
// RUN: not loom-opt %s --loom-data-parallel="reductions-in-flight=-1" 2>&1 | FileCheck %s --check-prefix=INFLIGHT-BAD
// RUN: loom-opt %s --loom-data-parallel="zero-stage=2 master-shards=1" | FileCheck %s --check-prefix=MASTER
// RUN: not loom-opt %s --loom-data-parallel="zero-stage=0 master-shards=1" 2>&1 | FileCheck %s --check-prefix=MASTER-STAGE

// reductions-in-flight=1 with two buckets: the compute stream waits for the
// bias bucket's reduce-scatter (issued first, the backward's first gradient)
// before the weight bucket's starts, so the bias bucket's full gradient is
// freed then; only the last is waited before the return, each token once.
// INFLIGHT-LABEL: func.func @forward_backward(
// INFLIGHT: %{{.*}}, %[[T0:.*]] = loom.reduce_scatter {{.*}} -> tensor<2xf32>
// INFLIGHT: loom.wait %[[T0]]
// INFLIGHT-NEXT: loom.reshape
// INFLIGHT-NEXT: %{{.*}}, %[[T1:.*]] = loom.reduce_scatter {{.*}} -> tensor<3xf32>
// INFLIGHT-NEXT: loom.wait %[[T1]]{{$}}
// INFLIGHT-NEXT: return
// INFLIGHT-BAD: reductions-in-flight must be 0 (no bound) or positive

// master-shards (stage 2): the update reads and writes a shard of its own,
// declared after its members (which stay whole parameters), and the
// all-gather reads the stored shard back.
// MASTER: loom.param @w : tensor<3x2xf32>
// MASTER-NEXT: loom.param @b : tensor<3xf32>
// MASTER-NEXT: loom.param @zero.bucket0.params : tensor<5xf32> init #loom.init<zeros> {loom.padded = 10 : i64, loom.shard_of = [@w, @b]}
// MASTER-LABEL: func.func @train_step(
// MASTER: %[[P:.*]] = loom.load @zero.bucket0.params : tensor<5xf32>
// MASTER: %[[NEW:.*]], %{{.*}}, %{{.*}} = loom.adam %[[P]],
// MASTER: loom.store %[[NEW]] to @zero.bucket0.params : tensor<5xf32>
// MASTER-NEXT: %[[R:.*]] = loom.load @zero.bucket0.params : tensor<5xf32>
// MASTER-NEXT: loom.all_gather %[[R]]
// MASTER: loom.store {{.*}} to @w : tensor<3x2xf32>
// MASTER-STAGE: master-shards partitions the optimizer's master weights: it needs zero-stage 1, 2 or 3

// hpZ (secondary=rank over ["rank" = 2, "node" = 2]): the forward gathers
// the bucket over all 4 ranks and keeps this rank's block within its node
// (12 / 2 = 6); the backward gathers that block over the node's 2 ranks.
// HPZ-LABEL: func.func @forward_backward(
// HPZ: %[[P:.*]] = loom.load @zero.bucket0.params : tensor<3xf32>
// HPZ-NEXT: %[[F:.*]], %{{.*}} = loom.all_gather %[[P]] over #loom.group<@world, ["rank", "node"]> on comm : tensor<3xf32> -> tensor<12xf32>
// HPZ: %[[K:.*]] = loom.shard over #loom.group<@world, ["rank"]> %[[F]] : tensor<12xf32> -> tensor<6xf32>
// HPZ: loom.all_gather %[[K]] over #loom.group<@world, ["rank"]> on comm : tensor<6xf32> -> tensor<12xf32>
// HPZ-STAGE: secondary (hpZ) partitions ZeRO-3's parameters: it needs zero-stage=3
// HPZ-ALL: spans every level: hpZ's secondary partition is a part of the world
// HPZ-LEVEL: secondary=gcd names a level the topology lacks

// exclude=replica: data parallelism inside each replica, over the "rank"
// level only; its collectives get the communicator of that level (index 0
// of the topology's 2 levels, sizes [2, 3]), split from the world's. The
// driver's world stays all 6 ranks.
// GROUP: func.func @train_step(
// GROUP-SAME: loom.data_parallel = #loom.data_parallel<world = 6, zero_stage = 0>
// GROUP: %[[G:.*]] = loomrt.comm levels [0] of [2, 3]
// GROUP: loomrt.all_reduce mean f32 {{.*}} over %[[G]]
// Replicas of one rank: nothing to do.
// NOTHING-NOT: loom.all_reduce
// NOTHING-NOT: loom.data_parallel

// Two parameters (6 + 3 elements) in one bucket over 2 ranks: padded to 10,
// a shard of 5 per rank at stages 1-3.

// Stages 1-3 replace the per-parameter Adam state by shard-sized state.
// Z0-NOT: @zero.bucket0
// Stages 1-2 keep the parameters whole; the moment shards record their
// bucket's layout (loom.layout_of: what a re-sharding resume reads).
// Z1: loom.state @zero.bucket0.exp_avg : tensor<5xf32> role adam_m {{.*}}{loom.layout_of = [@w, @b], loom.padded = 10 : i64}
// Z1: loom.state @zero.bucket0.exp_avg_sq : tensor<5xf32> role adam_v {{.*}}{loom.layout_of = [@w, @b], loom.padded = 10 : i64}
// Z3-NOT: loom.layout_of
// Z1-NOT: @w.exp_avg
// Z3: loom.param @zero.bucket0.params : tensor<5xf32> {{.*}}{loom.padded = 10 : i64, loom.shard_of = [@w, @b]}
// Z3: loom.param @w : {{.*}}{loom.sharded_into = @zero.bucket0.params}

// Gradients are reduced inside @forward_backward as soon as a bucket's last
// gradient exists (overlapping the rest of the backward), waited before the
// return, and handed to @train_step instead of the full gradients (which so
// die at their bucket's flatten).
// ALL-LABEL: func.func @forward_backward
// Z0-SAME: -> (tensor<f32>, tensor<9xf32>) {
// Z1-SAME: -> (tensor<f32>, tensor<10xf32>) {
// Z2-SAME: -> (tensor<f32>, tensor<5xf32>) {

// Stage 3: the forward gathers the bucket before its first use and the
// backward gathers it again.
// Z3: %[[S1:.*]] = loom.load @zero.bucket0.params : tensor<5xf32>
// Z3: %[[F1:.*]], %[[T1:.*]] = loom.all_gather %[[S1]] over #loom.group<@world, ["rank"]> on comm : tensor<5xf32> -> tensor<10xf32>
// Z3: loom.wait %[[T1]]
// Z3: loom.slice %[[F1]] [0] [6] [1]
// Z3: loom.matmul %arg0
// Z3: loom.cross_entropy_grad
// Z3: %[[S2:.*]] = loom.load @zero.bucket0.params : tensor<5xf32>
// Z3: loom.all_gather %[[S2]]
// Z3-NOT: loom.load @w

// ALL: %[[GW:.*]] = loom.matmul %{{.*}}, %arg0 transpose_lhs
// ALL: %[[FW:.*]] = loom.reshape %[[GW]] : tensor<3x2xf32> to tensor<6xf32>
// Z0: %[[C:.*]] = loom.concat %[[FW]], %{{.*}} dim 0 : tensor<6xf32>, tensor<3xf32> -> tensor<9xf32>
// Z0: %[[A:.*]], %[[AT:.*]] = loom.all_reduce %[[C]] over #loom.group<@world, ["rank"]> reduce mean on comm : tensor<9xf32> -> tensor<9xf32>
// Z1: %[[C:.*]] = loom.concat %[[FW]], %{{.*}}, %{{.*}} dim 0 : tensor<6xf32>, tensor<3xf32>, tensor<1xf32> -> tensor<10xf32>
// Z1: %[[A:.*]], %[[AT:.*]] = loom.all_reduce %[[C]] {{.*}} : tensor<10xf32> -> tensor<10xf32>
// Z2: %[[A:.*]], %[[AT:.*]] = loom.reduce_scatter {{.*}} reduce mean on comm : tensor<10xf32> -> tensor<5xf32>
// Z3: %[[A:.*]], %[[AT:.*]] = loom.reduce_scatter {{.*}} reduce mean on comm : tensor<10xf32> -> tensor<5xf32>
// ALL: loom.wait %[[AT]]
// ALL: return %{{.*}}, %[[A]] :

// ALL-LABEL: func.func @train_step
// ALL-SAME: loom.data_parallel = #loom.data_parallel<world = 2, zero_stage = [[STAGE:[0-3]]]>
// ALL: %[[R:.*]]:2 = call @forward_backward
// ALL: %[[LOSS:.*]], %[[LT:.*]] = loom.all_reduce %[[R]]#0 over #loom.group<@world, ["rank"]> reduce mean on comm : tensor<f32> -> tensor<f32>
// ALL: loom.wait %[[LT]]

// Z0: %[[GW:.*]] = loom.slice %[[R]]#1 [0] [6] [1]
// Z0: %[[GW2:.*]] = loom.reshape %[[GW]] : tensor<6xf32> to tensor<3x2xf32>
// Z0: %[[GB:.*]] = loom.slice %[[R]]#1 [6] [9] [1]
// Z0: loom.adam %{{.*}}, %[[GW2]], {{.*}} : tensor<3x2xf32>
// Z0: loom.adam %{{.*}}, %[[GB]], {{.*}} : tensor<3xf32>

// Z1: %[[GS:.*]] = loom.shard over #loom.group<@world, ["rank"]> %[[R]]#1 : tensor<10xf32> -> tensor<5xf32>
// Z1: %[[PS:.*]] = loom.shard over {{.*}} : tensor<10xf32> -> tensor<5xf32>
// Z1: loom.adam %[[PS]], %[[GS]], {{.*}} : tensor<5xf32>
// Z1: %[[P:.*]], %{{.*}} = loom.all_gather %new_param {{.*}} : tensor<5xf32> -> tensor<10xf32>
// Z1: loom.store {{.*}} to @w : tensor<3x2xf32>
// Z1: loom.store {{.*}} to @b : tensor<3xf32>

// Z2: loom.adam %{{.*}}, %[[R]]#1, {{.*}} : tensor<5xf32>
// Z2: loom.all_gather

// Z3: %[[PS:.*]] = loom.load @zero.bucket0.params : tensor<5xf32>
// Z3: %[[NP:.*]], %{{.*}}, %{{.*}} = loom.adam %[[PS]], %[[R]]#1
// Z3: loom.store %[[NP]] to @zero.bucket0.params
// Z3-NOT: loom.all_gather

// ALL: return %[[LOSS]] : tensor<f32>

// bucket-size=6: @w fills a bucket (6 elements, 3 per rank), @b gets its
// own (3 elements padded to 4). @b's gradient is computed first, so its
// bucket is reduced while @w's gradient is still being computed.
// BUCKETS: loom.state @zero.bucket0.exp_avg : tensor<3xf32>
// BUCKETS: loom.state @zero.bucket1.exp_avg : tensor<2xf32>
// BUCKETS-LABEL: func.func @forward_backward
// BUCKETS: loom.reduce sum
// BUCKETS: %{{.*}}, %[[T1:.*]] = loom.all_reduce {{.*}} : tensor<4xf32> -> tensor<4xf32>
// BUCKETS-NEXT: loom.matmul %{{.*}}, %arg0 transpose_lhs
// BUCKETS: %{{.*}}, %[[T0:.*]] = loom.all_reduce {{.*}} : tensor<6xf32> -> tensor<6xf32>
// BUCKETS: loom.wait %[[T0]], %[[T1]]

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
