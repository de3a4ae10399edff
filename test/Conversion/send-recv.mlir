// loom-lower-to-runtime: a loom.send_recv between pipeline stages becomes
// zeros (what a rank with no sender keeps) and a loomrt.send_recv of the
// tensor's bytes on the stages' communicator, both on the comm stream,
// which the compute stream waits for before it reads the result.
// RUN: loom-opt %s --loom-lower-to-runtime="comments=false" | FileCheck %s
// RUN: not loom-opt %S/Inputs/send-recv-int.mlir --loom-lower-to-runtime 2>&1 | FileCheck %s --check-prefix=INT
// INT: error: code generation passes f32 and bf16 tensors between ranks (activations and their gradients), not integer tensors or packed payloads

// CHECK-LABEL: func.func @train_step
// CHECK: %[[CS:.*]] = loomrt.stream comm
// CHECK: loomrt.fill f32 %[[OUT:.*]], 0.0{{.*}}, 8 on %[[CS]]
// CHECK-NEXT: loomrt.send_recv %{{.*}} -> %[[OUT]], 32 bytes shift 1 over %{{.*}} on %[[CS]]
// CHECK-NEXT: %[[E:.*]] = loomrt.record %[[CS]]
// CHECK: loomrt.wait %{{.*}} for %[[E]]
module {
  loom.topology @world ["stage" = 2]
  func.func @train_step(%x: tensor<8xf32>) -> tensor<8xf32> {
    %y, %t = loom.send_recv %x over #loom.group<@world, ["stage"]> shift 1 on comm
        : tensor<8xf32> -> tensor<8xf32>
    loom.wait %t
    %z = loom.add %y, %y : tensor<8xf32>, tensor<8xf32> -> tensor<8xf32>
    return %z : tensor<8xf32>
  }
}
