// A 4-block GPT (its head tied to the embedding) cut into 2 stages: the
// head and the loss make the last block the slowest unit, so the first
// stage takes the embedding and two blocks.
// RUN: loomc --model gpt:layers=4,d_model=256,heads=4,vocab=4096,seq=256,batch=4 --compile-to=import -o %t.mlir
// RUN: loom-opt %t.mlir --loom-pipeline-cut="stages=2 micro-batches=4" -o %t.cut.mlir 2>&1 | FileCheck %s --check-prefix=PLAN
// RUN: FileCheck %s --input-file=%t.cut.mlir
// RUN: loom-opt %t.mlir --loom-pipeline-cut="stages=5 micro-batches=8" -o /dev/null 2>&1 | FileCheck %s --check-prefix=FIVE
// RUN: not loom-opt %t.mlir --mlir-print-op-on-diagnostic=false --loom-pipeline-cut=stages=6 -o /dev/null 2>&1 | FileCheck %s --check-prefix=MANY
// RUN: not loom-opt %t.mlir --mlir-print-op-on-diagnostic=false --loom-pipeline-cut="stages=2 device-memory=0.01" -o /dev/null 2>&1 | FileCheck %s --check-prefix=FIT
// RUN: not loom-opt %t.mlir --mlir-print-op-on-diagnostic=false --loom-pipeline-cut="stages=2 hardware=nope" -o /dev/null 2>&1 | FileCheck %s --check-prefix=HW

// PLAN: loom-pipeline-cut: 2 stages on 'h100', 4 micro-batches (1F1B):
// PLAN-NEXT: stage 0: embedding .. transformer.h.1 (3 units), {{[0-9.]+}} ms a micro-batch (forward and backward), {{[0-9.]+}} GiB
// PLAN-NEXT: stage 1: transformer.h.2 .. transformer.h.3 (2 units), {{[0-9.]+}} ms a micro-batch (forward and backward), {{[0-9.]+}} GiB
// PLAN-NEXT: step about {{[0-9.]+}} ms, bubble {{[0-9.]+}}% ((P-1)/(M+P-1) = 20.0% for balanced stages)
// PLAN-NEXT: read on several stages (a copy on each, their gradients summed): transformer.wte.weight (stages 0 1)

// Parameters and ops carry their stage; loads and other free ops do not.
// CHECK: loom.param @transformer.wte.weight {{.*}} {loom.stage = 0 : i64}
// CHECK: loom.param @transformer.h.1.mlp.c_proj.bias {{.*}} {loom.stage = 0 : i64}
// CHECK: loom.param @transformer.h.2.ln_1.weight {{.*}} {loom.stage = 1 : i64}
// CHECK: loom.param @transformer.ln_f.bias {{.*}} {loom.stage = 1 : i64}
// CHECK: loom.load @transformer.wte.weight : tensor<4096x256xf32>
// CHECK: loom.embedding {{.*}} {loom.stage = 0 : i64}
// CHECK: loom.layer_norm {{.*}} {loom.stage = 1 : i64}
// CHECK: loom.cross_entropy {{.*}} {loom.stage = 1 : i64}

// One unit a stage: the embedding alone on the first.
// FIVE: stage 0: embedding .. embedding (1 unit)
// FIVE: stage 4: transformer.h.3 .. transformer.h.3 (1 unit)
// FIVE: ((P-1)/(M+P-1) = 33.3% for balanced stages)

// MANY: loom-pipeline-cut: 6 stages but the forward has 5 units (the embedding and 4 blocks): a stage needs one
// FIT: loom-pipeline-cut: no cut into 2 stages fits 0.0 GiB a stage with 1 micro-batches in flight
// HW: loom-pipeline-cut: hardware 'nope' is neither a preset
