// loom-offload-optimizer{mode=subgroups}: a resident (gpu) update runs as
// soon as its gradient is waited for, during the backward, so its gradient
// goes back then instead of at the step's end (what the offload planner
// sees as memory for more resident state). ZeRO-3 on 2 ranks, three
// buckets, a hand-written plan: bucket 2 (the first the backward
// finishes) resident, buckets 1 and 0 on the CPU.
// RUN: loomc --model gpt:layers=2,d_model=64,heads=2,vocab=100,seq=16,batch=4 --target=cuda --topology=gpu=2 --zero-stage=3 --recompute=none --compile-to=distribute -o %t.d.mlir 2>/dev/null
// RUN: loom-opt --loom-optimizer-subgroups=sub-group-size=1 %t.d.mlir -o %t.sg.mlir
// RUN: sed -E 's/(loom.subgroup @sg[01] \[[^]]*\] numel [0-9]+)/\1 update cpu/; s/(loom.subgroup @sg2 \[[^]]*\] numel [0-9]+)/\1 update gpu/' %t.sg.mlir > %t.plan.mlir
// RUN: loom-opt --loom-offload-optimizer=mode=subgroups %t.plan.mlir | FileCheck %s
// CHECK-LABEL: func.func @train_step
// Bucket 2's gradient, then bucket 1's (copied to the host).
// CHECK: %[[G2:[a-z_0-9]+]], %[[T2:[a-z_0-9]+]] = loom.reduce_scatter {{.*}} -> tensor<25056xf32>
// CHECK: loom.reduce_scatter {{.*}} -> tensor<24992xf32>
// CHECK-NEXT: loom.copy
// The resident update right after the wait for bucket 2's gradient,
// before bucket 0's gradient exists.
// CHECK: loom.wait %[[T2]]
// CHECK-NOT: loom.reduce_scatter
// CHECK: loom.adam %{{[0-9]+}}, %[[G2]],
// CHECK: loom.reduce_scatter {{.*}} -> tensor<3712xf32>

// Moving updates up never lets one overtake a reader of what it updates in
// place (the weights or moments it loaded, through views): fp32 without
// data parallelism (the backward reads the fp32 weights themselves), ZeRO-1
// and ZeRO-3 in bf16, each with half the updates resident.
// RUN: loomc --model gpt:layers=2,d_model=64,heads=2,vocab=100,seq=16,batch=4 --precision=fp32 --optimizer-offload=static:0.5 --compile-to=schedule -o %t.z0.mlir 2>/dev/null
// RUN: %python %S/Inputs/check_updates.py %t.z0.mlir | FileCheck %s --check-prefix=ORDER
// RUN: loomc --model gpt:layers=2,d_model=64,heads=2,vocab=100,seq=16,batch=4 --precision=bf16 --optimizer-offload=static:0.5 --topology=cpu=2 --zero-stage=1 --compile-to=schedule -o %t.z1.mlir 2>/dev/null
// RUN: %python %S/Inputs/check_updates.py %t.z1.mlir | FileCheck %s --check-prefix=ORDER
// RUN: loomc --model gpt:layers=2,d_model=64,heads=2,vocab=100,seq=16,batch=4 --precision=bf16 --optimizer-offload=static:0.5 --topology=cpu=2 --zero-stage=3 --compile-to=schedule -o %t.z3.mlir 2>/dev/null
// RUN: %python %S/Inputs/check_updates.py %t.z3.mlir | FileCheck %s --check-prefix=ORDER
// ORDER: {{[1-9][0-9]*}} updates checked, 0 reads after an update
