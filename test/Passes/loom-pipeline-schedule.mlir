// RUN: loom-opt %s --loom-micro-batches=count=2 --loom-autodiff --loom-pipeline-schedule | FileCheck %s
// RUN: loom-opt %s --loom-micro-batches=count=2 --loom-autodiff --loom-pipeline-schedule=schedule=gpipe | FileCheck %s --check-prefix=GPIPE
// RUN: not loom-opt %s --loom-micro-batches=count=2 --loom-autodiff --loom-pipeline-schedule=schedule=zb 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not loom-opt %s --loom-pipeline-schedule 2>&1 | FileCheck %s --check-prefix=EARLY

loom.param @w : tensor<3x2xf32> init #loom.init<normal(0.0, 0.02)>

// 1F1B on one stage: micro-batch 0's forward and backward, then micro-batch
// 1's; the parameter's gradient is micro-batch 0's part plus micro-batch
// 1's, summed as soon as the second exists.
// CHECK-LABEL: func.func @forward_backward
// CHECK: %[[X0:.*]] = loom.slice %arg0 [0, 0] [4, 3] [1, 1] {loom.micro_batch = 0 : i64}
// CHECK: loom.matmul %[[X0]], %{{.*}} :
// CHECK: %[[G0:.*]] = loom.matmul %[[X0]], %{{.*}} transpose_lhs
// CHECK: %[[X1:.*]] = loom.slice %arg0 [4, 0] [8, 3] [1, 1] {loom.micro_batch = 1 : i64}
// CHECK: loom.matmul %[[X1]], %{{.*}} :
// The loss: the mean of both, as soon as both exist.
// CHECK: loom.reduce mean %{{.*}} [0] : tensor<2xf32> to tensor<f32>
// CHECK: %[[G1:.*]] = loom.matmul %[[X1]], %{{.*}} transpose_lhs
// CHECK: loom.add %[[G0]], %[[G1]]
// CHECK: return

// GPipe: autodiff's order, every forward (the last micro-batch's first, as
// loom-micro-batches writes them), then the backwards.
// GPIPE-LABEL: func.func @forward_backward
// GPIPE: %[[X1:.*]] = loom.slice %arg0 [4, 0] [8, 3] [1, 1] {loom.micro_batch = 1 : i64}
// GPIPE: %[[X0:.*]] = loom.slice %arg0 [0, 0] [4, 3] [1, 1] {loom.micro_batch = 0 : i64}
// GPIPE: loom.matmul %[[X0]], %{{.*}} :
// GPIPE: loom.matmul %[[X0]], %{{.*}} transpose_lhs
// GPIPE: loom.matmul %[[X1]], %{{.*}} transpose_lhs

// BAD: loom-pipeline-schedule: unknown schedule 'zb': expected gpipe, 1f1b, zb-h1 or interleaved:V
// EARLY: loom-pipeline-schedule: no @forward_backward (run after loom-autodiff)

func.func @forward(%x: tensor<4x3xf32>, %y: tensor<4x2xf32>) -> tensor<f32> {
  %w = loom.load @w : tensor<3x2xf32>
  %p = loom.matmul %x, %w : tensor<4x3xf32>, tensor<3x2xf32> -> tensor<4x2xf32>
  %d = loom.sub %p, %y : tensor<4x2xf32>, tensor<4x2xf32> -> tensor<4x2xf32>
  %sq = loom.mul %d, %d : tensor<4x2xf32>, tensor<4x2xf32> -> tensor<4x2xf32>
  %l = loom.reduce mean %sq [0, 1] : tensor<4x2xf32> to tensor<f32>
  return %l : tensor<f32>
}

// A pipeline's stages (loom-pipeline-split, 4 micro-batches): 1F1B with
// P - s - 1 forwards first, and the steady state's transfers paired with
// the neighbour's (send forward + receive backward on stage 0, send
// backward + receive forward on stage 1); GPipe's order keeps them single.
// RUN: loom-opt %S/Inputs/two-stages.mlir --loom-pipeline-split="stage=0 stages=2" --loom-micro-batches=count=4 --loom-autodiff --loom-pipeline-schedule | FileCheck %s --check-prefix=S0
// RUN: loom-opt %S/Inputs/two-stages.mlir --loom-pipeline-split="stage=1 stages=2" --loom-micro-batches=count=4 --loom-autodiff --loom-pipeline-schedule | FileCheck %s --check-prefix=S1
// RUN: loom-opt %S/Inputs/two-stages.mlir --loom-pipeline-split="stage=0 stages=2" --loom-micro-batches=count=4 --loom-autodiff --loom-pipeline-schedule=schedule=gpipe | FileCheck %s --check-prefix=GP
// S0-LABEL: func.func @forward_backward
// S0: loom.p2p send %{{.*}} to 1 over {{.*}} {loom.micro_batch = 0 : i64}
// S0: loom.p2p send %{{.*}} to 1 recv from 1 over {{.*}} {loom.micro_batch = 1 : i64}
// S0: loom.p2p send %{{.*}} to 1 recv from 1 over {{.*}} {loom.micro_batch = 2 : i64}
// S0: loom.p2p send %{{.*}} to 1 recv from 1 over {{.*}} {loom.micro_batch = 3 : i64}
// S0: loom.p2p recv from 1 over {{.*}} {loom.micro_batch = 3 : i64}
// S0-NOT: loom.p2p
// S0: return
// S1-LABEL: func.func @forward_backward
// S1: loom.p2p recv from -1 over {{.*}} {loom.micro_batch = 0 : i64}
// S1: loom.p2p send %{{.*}} to -1 recv from -1 over {{.*}} {loom.micro_batch = 0 : i64}
// S1: loom.p2p send %{{.*}} to -1 recv from -1 over {{.*}} {loom.micro_batch = 1 : i64}
// S1: loom.p2p send %{{.*}} to -1 recv from -1 over {{.*}} {loom.micro_batch = 2 : i64}
// S1: loom.p2p send %{{.*}} to -1 over {{.*}} {loom.micro_batch = 3 : i64}
// S1-NOT: loom.p2p
// S1: return
// GP-LABEL: func.func @forward_backward
// GP-COUNT-4: loom.p2p send %{{.*}} to 1 over
// GP-COUNT-4: loom.p2p recv from 1 over
// GP-NOT: recv from 1 over {{.*}} send

// zb-h1: the last stage sends micro-batch 0's input gradient back before
// its weight gradients (the products with transpose_lhs), which 1f1b runs
// first (autodiff's order).
// RUN: loom-opt %S/Inputs/two-stages.mlir --loom-pipeline-split="stage=1 stages=2" --loom-micro-batches=count=2 --loom-autodiff --loom-pipeline-schedule=schedule=zb-h1 | FileCheck %s --check-prefix=ZB
// RUN: loom-opt %S/Inputs/two-stages.mlir --loom-pipeline-split="stage=1 stages=2" --loom-micro-batches=count=2 --loom-autodiff --loom-pipeline-schedule=schedule=1f1b | FileCheck %s --check-prefix=F1
// ZB-LABEL: func.func @forward_backward
// ZB: loom.p2p send %{{.*}} to -1 {{.*}}micro_batch = 0
// ZB-NOT: micro_batch = 1
// ZB: loom.matmul {{.*}} transpose_lhs
// ZB: loom.matmul {{.*}} transpose_lhs
// ZB: loom.p2p {{.*}}micro_batch = 1
// F1-LABEL: func.func @forward_backward
// F1: loom.matmul {{.*}} transpose_lhs
// F1: loom.matmul {{.*}} transpose_lhs
// F1: loom.p2p send %{{.*}} to -1 {{.*}}micro_batch = 0

// Interleaved 1F1B, 2 stages x 2 chunks, 4 micro-batches (Megatron-LM's
// order): stage 0 runs forwards (0, c0) (1, c0) (0, c2) (1, c2), then a
// forward and a backward in turn. Its transfers stay single and follow one
// clock both stages compute (a forward 1, a backward 2; ties by direction,
// micro-batch, chunk), so each of stage 0's transfers meets stage 1's in
// the same place: stage 0 sends (0, c0) while stage 1 receives it, and so on.
// RUN: loom-opt %S/Inputs/four-chunks.mlir --loom-pipeline-split="stage=0 stages=2 chunks=2" --loom-micro-batches=count=4 --loom-autodiff --loom-pipeline-schedule=schedule=interleaved:2 | FileCheck %s --check-prefix=IL0
// RUN: loom-opt %S/Inputs/four-chunks.mlir --loom-pipeline-split="stage=1 stages=2 chunks=2" --loom-micro-batches=count=4 --loom-autodiff --loom-pipeline-schedule=schedule=interleaved:2 | FileCheck %s --check-prefix=IL1
// RUN: not loom-opt %S/Inputs/four-chunks.mlir --loom-pipeline-split="stage=0 stages=2 chunks=2" --loom-micro-batches=count=3 --loom-autodiff --loom-pipeline-schedule=schedule=interleaved:2 2>&1 | FileCheck %s --check-prefix=ILBAD
// RUN: not loom-opt %S/Inputs/four-chunks.mlir --loom-pipeline-split="stage=0 stages=2 chunks=2" --loom-micro-batches=count=4 --loom-autodiff --loom-pipeline-schedule=schedule=1f1b 2>&1 | FileCheck %s --check-prefix=ILMIX
// IL0-LABEL: func.func @forward_backward
// IL0: loom.p2p send %{{.*}} to 1 {{.*}}{loom.micro_batch = 0 : i64, loom.stage = 0 : i64}
// IL0: loom.p2p recv from 1 {{.*}}{loom.micro_batch = 0 : i64, loom.stage = 2 : i64}
// IL0: loom.p2p send %{{.*}} to 1 {{.*}}{loom.micro_batch = 1 : i64, loom.stage = 0 : i64}
// IL0: loom.p2p send %{{.*}} to 1 {{.*}}{loom.micro_batch = 0 : i64, loom.stage = 2 : i64}
// IL0: loom.p2p recv from 1 {{.*}}{loom.micro_batch = 1 : i64, loom.stage = 2 : i64}
// IL0: loom.p2p send %{{.*}} to 1 {{.*}}{loom.micro_batch = 1 : i64, loom.stage = 2 : i64}
// IL0: loom.p2p send %{{.*}} to 1 {{.*}}{loom.micro_batch = 2 : i64, loom.stage = 0 : i64}
// The first backward: micro-batch 0's gradient into chunk 2, then out of it.
// IL0: loom.p2p recv from 1 {{.*}}{loom.micro_batch = 0 : i64, loom.stage = 2 : i64}
// IL0: loom.p2p send %{{.*}} to 1 {{.*}}{loom.micro_batch = 0 : i64, loom.stage = 2 : i64}
// IL0: return
// IL1-LABEL: func.func @forward_backward
// IL1: loom.p2p recv from -1 {{.*}}{loom.micro_batch = 0 : i64, loom.stage = 1 : i64}
// IL1: loom.p2p send %{{.*}} to -1 {{.*}}{loom.micro_batch = 0 : i64, loom.stage = 1 : i64}
// IL1: loom.p2p recv from -1 {{.*}}{loom.micro_batch = 1 : i64, loom.stage = 1 : i64}
// IL1: loom.p2p recv from -1 {{.*}}{loom.micro_batch = 0 : i64, loom.stage = 3 : i64}
// IL1: loom.p2p send %{{.*}} to -1 {{.*}}{loom.micro_batch = 1 : i64, loom.stage = 1 : i64}
// IL1: loom.p2p recv from -1 {{.*}}{loom.micro_batch = 1 : i64, loom.stage = 3 : i64}
// IL1: loom.p2p recv from -1 {{.*}}{loom.micro_batch = 2 : i64, loom.stage = 1 : i64}
// IL1: loom.p2p send %{{.*}} to -1 {{.*}}{loom.micro_batch = 0 : i64, loom.stage = 3 : i64}
// IL1: return
// ILBAD: loom-pipeline-schedule: the interleaved schedule runs micro-batches in groups of the 2 stages: --micro-batches=3 is not a multiple of 2
// ILMIX: loom-pipeline-schedule: this stage's program holds 2 model chunk(s) (loom.pipeline); schedule '1f1b' runs 1
