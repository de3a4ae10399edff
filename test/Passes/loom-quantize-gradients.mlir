// ZeRO++ qgZ on loom-data-parallel's reduce-scatter (the model of
// loom-data-parallel.mlir): 9 gradient elements, 4 ranks as ["rank" = 2,
// "node" = 2], padded to 16 so each shard (4) is whole blocks of 2.
// RUN: sed 's/\["rank" = 2\]/["rank" = 2, "node" = 2]/' %S/loom-data-parallel.mlir | loom-opt --loom-data-parallel="zero-stage=2 shard-multiple=2" --loom-quantize-gradients=block=2 | FileCheck %s
// One level (2 ranks, shards of 6): a single all-to-all over it.
// RUN: loom-opt %S/loom-data-parallel.mlir --loom-data-parallel="zero-stage=2 shard-multiple=2" --loom-quantize-gradients=block=2 | FileCheck %s --check-prefix=ONE
// Shards of 3 (no shard-multiple) are not whole blocks of 2: the plain
// reduce-scatter stays, and says why.
// RUN: sed 's/\["rank" = 2\]/["rank" = 2, "node" = 2]/' %S/loom-data-parallel.mlir | loom-opt --loom-data-parallel="zero-stage=3" --loom-quantize-gradients=block=2 | FileCheck %s --check-prefix=FALLBACK
// It lowers to int4 block codecs and byte all-to-alls on the two groups'
// communicators.
// RUN: sed 's/\["rank" = 2\]/["rank" = 2, "node" = 2]/' %S/loom-data-parallel.mlir | loom-opt --loom-data-parallel="zero-stage=2 shard-multiple=2" --loom-quantize-gradients=block=2 --loom-lower-to-runtime | FileCheck %s --check-prefix=LOWER
// RUN: not loom-opt %S/loom-data-parallel.mlir --loom-quantize-gradients=block=3 2>&1 | FileCheck %s --check-prefix=BLOCK
// Three levels, the first stage inside "rank" only (the plan's choice on a
// machine whose innermost link is the fast one): the second stage spans
// the other two levels.
// RUN: sed 's/\["rank" = 2\]/["rank" = 2, "gpu" = 2, "node" = 2]/' %S/loom-data-parallel.mlir | loom-opt --loom-data-parallel="zero-stage=2 shard-multiple=2" --loom-quantize-gradients="block=2 inner=rank" | FileCheck %s --check-prefix=INNER
// RUN: sed 's/\["rank" = 2\]/["rank" = 2, "node" = 2]/' %S/loom-data-parallel.mlir | not loom-opt --loom-data-parallel="zero-stage=2 shard-multiple=2" --loom-quantize-gradients="block=2 inner=node" 2>&1 | FileCheck %s --check-prefix=NOTINNER

// CHECK-LABEL: func.func @forward_backward(
// Chunks n·2 + l reordered so inner rank l's lie together.
// CHECK: %[[R:.*]] = loom.reshape %{{.*}} : tensor<16xf32> to tensor<2x2x4xf32>
// CHECK-NEXT: %[[T:.*]] = loom.transpose %[[R]] [1, 0, 2] : tensor<2x2x4xf32> to tensor<2x2x4xf32>
// CHECK-NEXT: %[[F:.*]] = loom.reshape %[[T]] : tensor<2x2x4xf32> to tensor<16xf32>
// CHECK-NEXT: %[[Q:.*]] = loom.compress %[[F]] : tensor<16xf32> -> !loom.packed<tensor<16xf32>, #loom.codec<int4, block = 2>>
// CHECK-NEXT: %[[A:.*]], %[[T1:.*]] = loom.all_to_all %[[Q]] over #loom.group<@world, ["rank"]> on comm
// CHECK-NEXT: loom.wait %[[T1]]
// CHECK-NEXT: %[[D:.*]] = loom.decompress %[[A]] : {{.*}} -> tensor<16xf32>
// CHECK-NEXT: %[[D2:.*]] = loom.reshape %[[D]] : tensor<16xf32> to tensor<2x8xf32>
// CHECK-NEXT: %[[M:.*]] = loom.reduce mean %[[D2]] [0] : tensor<2x8xf32> to tensor<8xf32>
// CHECK-NEXT: %[[Q2:.*]] = loom.compress %[[M]] : tensor<8xf32> -> !loom.packed<tensor<8xf32>, #loom.codec<int4, block = 2>>
// CHECK-NEXT: %[[B:.*]], %[[T2:.*]] = loom.all_to_all %[[Q2]] over #loom.group<@world, ["node"]> on comm
// CHECK-NEXT: loom.wait %[[T2]]
// CHECK-NEXT: %[[E:.*]] = loom.decompress %[[B]] : {{.*}} -> tensor<8xf32>
// CHECK-NEXT: %[[E2:.*]] = loom.reshape %[[E]] : tensor<8xf32> to tensor<2x4xf32>
// CHECK-NEXT: %[[S:.*]] = loom.reduce mean %[[E2]] [0] : tensor<2x4xf32> to tensor<4xf32>
// CHECK-NEXT: return %{{.*}}, %[[S]] : tensor<f32>, tensor<4xf32>
// CHECK-NOT: loom.reduce_scatter

// ONE-LABEL: func.func @forward_backward(
// ONE-NOT: loom.transpose
// ONE: loom.compress %{{.*}} : tensor<12xf32> -> !loom.packed<tensor<12xf32>, #loom.codec<int4, block = 2>>
// ONE-NEXT: %[[A:.*]], %[[T:.*]] = loom.all_to_all %{{.*}} over #loom.group<@world, ["rank"]> on comm
// ONE-NEXT: loom.wait %[[T]]
// ONE-NEXT: loom.decompress %[[A]]
// ONE-NEXT: loom.reshape %{{.*}} : tensor<12xf32> to tensor<2x6xf32>
// ONE-NEXT: loom.reduce mean %{{.*}} [0] : tensor<2x6xf32> to tensor<6xf32>

// FALLBACK: loom.reduce_scatter {{.*}} {loom.note = "qgZ: a shard of 3 elements is not a whole number of blocks of 2 (loom-data-parallel shard-multiple=); plain reduce-scatter"}
// FALLBACK-NOT: loom.all_to_all

// LOWER-DAG: %[[IN:.*]] = loomrt.comm levels [0] of [2, 2]
// LOWER-DAG: %[[OUT:.*]] = loomrt.comm levels [1] of [2, 2]
// LOWER: loomrt.block_compress int4 %{{.*}} -> %[[P:.*]], 16 block 2
// To each of the 2 ranks: its 4 scales (16 bytes), then its 8 codes (4 bytes).
// LOWER: loomrt.all_to_all %[[P]] -> %{{.*}}, 16 bytes over %[[IN]]
// LOWER: loomrt.all_to_all {{.*}}, 4 bytes over %[[IN]]
// LOWER: loomrt.block_decompress int4 {{.*}}, 16 block 2
// LOWER: loomrt.block_compress int4 {{.*}}, 8 block 2
// LOWER: loomrt.all_to_all {{.*}}, 8 bytes over %[[OUT]]
// LOWER: loomrt.all_to_all {{.*}}, 2 bytes over %[[OUT]]
// LOWER: loomrt.block_decompress int4 {{.*}}, 8 block 2

// BLOCK: loom-quantize-gradients: block must be even and at least 2, got 3

// 16 elements over 8 ranks, shards of 2: [4 (gpu, node), 2 (rank), 2].
// INNER: loom.reshape %{{.*}} : tensor<16xf32> to tensor<4x2x2xf32>
// INNER-NEXT: loom.transpose %{{.*}} [1, 0, 2] : tensor<4x2x2xf32> to tensor<2x4x2xf32>
// INNER: loom.all_to_all %{{.*}} over #loom.group<@world, ["rank"]> on comm
// INNER: loom.reduce mean %{{.*}} [0] : tensor<2x8xf32> to tensor<8xf32>
// INNER: loom.all_to_all %{{.*}} over #loom.group<@world, ["gpu", "node"]> on comm
// INNER: loom.reduce mean %{{.*}} [0] : tensor<4x2xf32> to tensor<2xf32>

// NOTINNER: loom-quantize-gradients: inner=node must name the group's innermost levels, not all of them
