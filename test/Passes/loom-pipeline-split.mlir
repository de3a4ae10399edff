// RUN: loom-opt %S/Inputs/two-stages.mlir --loom-pipeline-split="stage=0 stages=2" | FileCheck %s --check-prefix=S0
// RUN: loom-opt %S/Inputs/two-stages.mlir --loom-pipeline-split="stage=1 stages=2" | FileCheck %s --check-prefix=S1
// RUN: not loom-opt %S/Inputs/pipeline-split-bad.mlir --split-input-file --mlir-print-op-on-diagnostic=false --loom-pipeline-split="stage=1 stages=3" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not loom-opt %S/Inputs/pipeline-split-bad.mlir --split-input-file --mlir-print-op-on-diagnostic=false --loom-pipeline-split="stage=1 stages=2" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BAD2
// RUN: not loom-opt %S/Inputs/two-stages.mlir --mlir-print-op-on-diagnostic=false --loom-pipeline-split="stage=2 stages=2" -o /dev/null 2>&1 | FileCheck %s --check-prefix=RANGE

// Stage 0 keeps the embedding and block 0, sends block 0's output on and
// reports a zero loss; the embedding's table is tied to stage 1's copy.
// S0: module attributes {loom.pipeline = array<i64: 0, 2, 0>}
// S0: loom.param @emb {{.*}}loom.tied_peer = 1 : i64
// S0: loom.param @h.0.w
// S0: loom.param @h.0.g
// S0-NOT: loom.param @h.1.w
// S0: loom.embedding
// S0: %[[C:.*]] = loom.mul
// S0-NEXT: %[[T:.*]] = loom.p2p send %[[C]] to 1 over #loom.group<@world, ["stage"]> on comm : tensor<2x3x4xf32>
// S0-NEXT: loom.wait %[[T]]
// S0-NEXT: %[[Z:.*]] = arith.constant dense<0.000000e+00> : tensor<f32>
// S0-NEXT: return %[[Z]]

// Stage 1 receives it first, holds the tied table and block 1 (the 16
// elements the one-rank model draws before it for h.0.w skipped: h.0.g is
// ones, drawn from no stream), and computes the loss.
// S1: module attributes {loom.pipeline = array<i64: 1, 2, 0>}
// S1: loom.param @emb {{.*}}loom.tied_peer = -1 : i64
// S1-NOT: loom.param @h.0
// S1: loom.param @h.1.w {{.*}}loom.init_skip = 16 : i64
// S1: %[[R:.*]], %[[T:.*]] = loom.p2p recv from -1 over #loom.group<@world, ["stage"]> on comm -> tensor<2x3x4xf32>
// S1-NEXT: loom.wait %[[T]]
// S1-NOT: loom.embedding
// S1: loom.matmul %[[R]]
// S1: loom.cross_entropy

// BAD: error: loom-pipeline-split: reads a value of stage 0 on stage 2: only the next stage may read a stage's values
// BAD2: error: loom-pipeline-split: needs a loom.topology with a level 'stage' of 2 ranks
// BAD2: error: loom-pipeline-split: 2 values go into stage 1 (loom.matmul, loom.matmul); one activation a cut is built: cut at a block boundary, with no value carried across the layers (a mixture of experts: aux=0)
// BAD2: error: loom-pipeline-split: needs a loom.topology with a level 'stage' of 2 ranks
// BAD2: error: loom-pipeline-split: has no loom.stage (run loom-pipeline-cut first)
// RANGE: error: loom-pipeline-split: stages must be at least 2, stage in [0, stages) and chunks positive

// Interleaved (chunks=2): stage 0 keeps chunks 0 and 2, stage 1 chunks 1
// and 3. Each transfer carries its chunk and sits where its value is read
// or computed; chunk 1 -> 2 goes from stage 1 back to stage 0 (peer -1).
// RUN: loom-opt %S/Inputs/four-chunks.mlir --loom-pipeline-split="stage=0 stages=2 chunks=2" | FileCheck %s --check-prefix=C0
// RUN: loom-opt %S/Inputs/four-chunks.mlir --loom-pipeline-split="stage=1 stages=2 chunks=2" | FileCheck %s --check-prefix=C1
// C0: module attributes {loom.pipeline = array<i64: 0, 2, 0, 2>}
// C0-NOT: @h.1.w
// C0: loom.param @h.2.w {{.*}}loom.init_skip = 16 : i64
// C0-NOT: @h.3.w
// C0: %[[B0:.*]] = loom.matmul {{.*}} {loom.stage = 0 : i64}
// C0-NEXT: loom.p2p send %[[B0]] to 1 {{.*}} {loom.stage = 0 : i64}
// C0-NEXT: loom.wait
// C0-NEXT: %[[R:.*]], %{{.*}} = loom.p2p recv from 1 {{.*}} {loom.stage = 2 : i64}
// C0-NEXT: loom.wait
// C0-NEXT: %[[B2:.*]] = loom.matmul %[[R]], {{.*}} {loom.stage = 2 : i64}
// C0-NEXT: loom.p2p send %[[B2]] to 1 {{.*}} {loom.stage = 2 : i64}
// C0: return %cst
// C1: module attributes {loom.pipeline = array<i64: 1, 2, 0, 2>}
// C1: loom.p2p recv from -1 {{.*}} {loom.stage = 1 : i64}
// C1: loom.p2p send %{{.*}} to -1 {{.*}} {loom.stage = 1 : i64}
// C1: loom.p2p recv from -1 {{.*}} {loom.stage = 3 : i64}
// C1: loom.cross_entropy
