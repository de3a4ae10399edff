// loom-lower-to-runtime: the tokens an asynchronous op lists after `after`
// are waited by the stream it runs on (a copy's copy stream, a collective's
// comm stream), not only the compute stream's work issued before it: a
// gradient shard's copy to the host is ordered after its reduce-scatter
// (offload with ZeRO-3), which the compute stream has not waited for yet.
// RUN: loom-opt %s --loom-lower-to-runtime="comments=false" | FileCheck %s

// CHECK-LABEL: func.func @train_step
// CHECK: %[[CS:.*]] = loomrt.stream comm
// CHECK: %[[YS:.*]] = loomrt.stream d2h
// CHECK: loomrt.reduce_scatter mean f32 %{{.*}} -> %[[G:.*]], 4 over %{{.*}} on %[[CS]]
// CHECK-NEXT: %[[RS:.*]] = loomrt.record %[[CS]]
// CHECK-NEXT: loomrt.wait %[[YS]] for %[[RS]]
// CHECK-NEXT: %{{.*}} = loomrt.alloc 16 host
// CHECK: loomrt.memcpy %{{.*}}, %[[G]], 16 on %[[YS]]
// CHECK-NEXT: %[[C:.*]] = loomrt.record %[[YS]]
// CHECK-NEXT: loomrt.wait %[[CS]] for %[[RS]]
// CHECK-NEXT: loomrt.wait %[[CS]] for %[[C]]
// CHECK: loomrt.all_gather f32 %[[G]]
module {
  loom.topology @world ["gpu" = 2]
  func.func @train_step(%x: tensor<8xf32>) -> tensor<8xf32> {
    %g, %t = loom.reduce_scatter %x over #loom.group<@world, ["gpu"]> reduce mean on comm
        : tensor<8xf32> -> tensor<4xf32>
    %h, %t2 = loom.copy %g after [%t] on d2h : tensor<4xf32> -> tensor<4xf32, #loom.mem<pinned>>
    %y, %t3 = loom.all_gather %g after [%t, %t2] over #loom.group<@world, ["gpu"]> on comm
        : tensor<4xf32> -> tensor<8xf32>
    loom.wait %t3
    return %y : tensor<8xf32>
  }
}
