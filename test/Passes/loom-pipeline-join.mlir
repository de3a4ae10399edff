// RUN: loom-opt %S/Inputs/two-stages.mlir --loom-pipeline-split="stage=0 stages=2" --loom-autodiff --loom-attach-optimizer --loom-pipeline-join | FileCheck %s
// RUN: loom-opt %S/Inputs/two-stages.mlir --loom-autodiff --loom-attach-optimizer --loom-pipeline-join | FileCheck %s --check-prefix=NONE

// The tied embedding's gradient is summed with stage 1's copy's at the end
// of @forward_backward (after the activations' transfers), and the loss
// stage 0 reports (zero) is summed over the stages.
// CHECK-LABEL: func.func @forward_backward
// CHECK: loom.p2p send %{{.*}} to 1 over
// CHECK: loom.p2p recv from 1 over
// CHECK: %[[X:.*]], %[[T:.*]] = loom.p2p send %[[G:.*]] to 1 recv from 1 over #loom.group<@world, ["stage"]> on comm : tensor<8x4xf32> -> tensor<8x4xf32>
// CHECK-NEXT: loom.wait %[[T]]
// CHECK-NEXT: %[[S:.*]] = loom.add %[[G]], %[[X]] : tensor<8x4xf32>
// CHECK: return %{{.*}}, %[[S]],
// CHECK-LABEL: func.func @train_step
// CHECK: %[[L:.*]], %[[LT:.*]] = loom.all_reduce %{{.*}}#0 over #loom.group<@world, ["stage"]> on comm : tensor<f32> -> tensor<f32>
// CHECK-NEXT: loom.wait %[[LT]]
// CHECK: return %[[L]]

// Not a stage's program: nothing changes.
// NONE-NOT: loom.all_reduce
// NONE-NOT: loom.p2p
