// ZeRO++ qwZ on loom-data-parallel's ZeRO-3 gathers (the model of
// loom-data-parallel.mlir): 9 parameters, 4 ranks as ["rank" = 2,
// "node" = 2], padded to 16 so each shard (4) is one block of 4.
// RUN: sed 's/\["rank" = 2\]/["rank" = 2, "node" = 2]/' %S/loom-data-parallel.mlir | loom-opt --loom-data-parallel="zero-stage=3 shard-multiple=4" --loom-quantize-weights=block=4 | FileCheck %s
// With hpZ the backward's gather inside the node stays fp32 (ZeRO++).
// RUN: sed 's/\["rank" = 2\]/["rank" = 2, "node" = 2]/' %S/loom-data-parallel.mlir | loom-opt --loom-data-parallel="zero-stage=3 shard-multiple=4 secondary=rank" --loom-quantize-weights=block=4 | FileCheck %s --check-prefix=HPZ
// Shards of 3 are not whole blocks: the fp32 gather stays, and says why.
// RUN: sed 's/\["rank" = 2\]/["rank" = 2, "node" = 2]/' %S/loom-data-parallel.mlir | loom-opt --loom-data-parallel="zero-stage=3" --loom-quantize-weights=block=4 | FileCheck %s --check-prefix=FALLBACK
// RUN: sed 's/\["rank" = 2\]/["rank" = 2, "node" = 2]/' %S/loom-data-parallel.mlir | loom-opt --loom-data-parallel="zero-stage=3 shard-multiple=4" --loom-quantize-weights=block=4 --loom-lower-to-runtime | FileCheck %s --check-prefix=LOWER
// RUN: not loom-opt %S/loom-data-parallel.mlir --loom-quantize-weights=block=0 2>&1 | FileCheck %s --check-prefix=BLOCK

// The forward's and the backward's gathers, both int8.
// CHECK-LABEL: func.func @forward_backward(
// CHECK: %[[P:.*]] = loom.load @zero.bucket0.params : tensor<4xf32>
// CHECK-NEXT: %[[Q:.*]] = loom.compress %[[P]] : tensor<4xf32> -> !loom.packed<tensor<4xf32>, #loom.codec<int8, block = 4>>
// CHECK-NEXT: %[[G:.*]], %[[T:.*]] = loom.all_gather %[[Q]] over #loom.group<@world, ["rank", "node"]> on comm : !loom.packed<tensor<4xf32>, #loom.codec<int8, block = 4>> -> !loom.packed<tensor<16xf32>, #loom.codec<int8, block = 4>>
// CHECK-NEXT: loom.wait %[[T]]
// CHECK-NEXT: loom.decompress %[[G]] : !loom.packed<tensor<16xf32>, #loom.codec<int8, block = 4>> -> tensor<16xf32>
// CHECK: loom.compress
// CHECK: loom.all_gather {{.*}} : !loom.packed<tensor<4xf32>, #loom.codec<int8, block = 4>>
// CHECK-NOT: loom.all_gather

// HPZ-LABEL: func.func @forward_backward(
// HPZ: loom.all_gather {{.*}} over #loom.group<@world, ["rank", "node"]> on comm : !loom.packed<tensor<4xf32>, #loom.codec<int8, block = 4>>
// HPZ: %[[F:.*]] = loom.decompress
// HPZ: %[[K:.*]] = loom.shard over #loom.group<@world, ["rank"]> %[[F]] : tensor<16xf32> -> tensor<8xf32>
// HPZ: loom.all_gather %[[K]] over #loom.group<@world, ["rank"]> on comm : tensor<8xf32> -> tensor<16xf32>

// FALLBACK: loom.all_gather {{.*}} {loom.note = "qwZ: a shard of 3 elements is not a whole number of blocks of 4 (loom-data-parallel shard-multiple=)"} : tensor<3xf32> -> tensor<12xf32>
// FALLBACK-NOT: loom.compress

// LOWER: loomrt.block_compress int8
// LOWER: loomrt.all_gather_bytes
// LOWER: loomrt.all_gather_bytes
// LOWER: loomrt.block_decompress int8

// BLOCK: loom-quantize-weights: block must be even and at least 2, got 0
