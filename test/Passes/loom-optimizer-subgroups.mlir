// RUN: loom-opt %s -split-input-file --loom-optimizer-subgroups=sub-group-size=1000 | FileCheck %s
// RUN: loom-opt %s -split-input-file --loom-optimizer-subgroups | FileCheck %s --check-prefix=DEFAULT
// RUN: not loom-opt %s -split-input-file --loom-optimizer-subgroups=sub-group-size=0 2>&1 | FileCheck %s --check-prefix=BAD

// A subgroup closes once it reaches the limit; the last one may be smaller.
// CHECK: loom.param @a
// CHECK: loom.param @c
// CHECK-NEXT: loom.subgroup @sg0 [@a, @b] numel 1200
// CHECK-NEXT: loom.subgroup @sg1 [@c] numel 100
// DEFAULT: loom.subgroup @sg0 [@a, @b, @c] numel 1300
// BAD: sub-group-size must be positive, got 0
loom.param @a : tensor<600xf32>
loom.param @b : tensor<20x30xf32>
loom.param @c : tensor<100xf32>

// -----

// A parameter larger than the limit is a subgroup of its own, and existing
// subgroups are replaced.
// CHECK-NOT: @old
// CHECK: loom.subgroup @sg0 [@big] numel 5000
// CHECK-NEXT: loom.subgroup @sg1 [@small] numel 10
loom.param @big : tensor<50x100xf32>
loom.param @small : tensor<10xf32>
loom.subgroup @old [@big, @small] numel 5010

// -----

// No parameters: nothing to group.
// CHECK: module {
// CHECK-NEXT: }
module {
}
