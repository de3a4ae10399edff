// RUN: loom-opt %s --loom-print-schedule -o /dev/null 2>&1 | FileCheck %s
// RUN: loom-opt %s --loom-print-schedule=output=%t -o /dev/null && FileCheck %s < %t
// RUN: not loom-opt %s --loom-print-schedule=output=/nonexistent/dir/x 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: loom-print-schedule: {{.*}}/nonexistent/dir/x

loom.topology @t ["gpu" = 2]
loom.param @w : tensor<256xf32, #loom.mem<device>>

// The pass leaves the IR alone and numbers each lane's work in order.
// CHECK-LABEL: schedule of @prefetch_overlaps_compute
// CHECK-NEXT: host          loom.load                 @w
// CHECK-NEXT: h2d#0         loom.copy                 tensor<256xf32> pinned -> device, 1024 B
// CHECK-NEXT: gpu#0         loom.exp                  tensor<256xf32>
// CHECK-NEXT: comm#0        loom.all_reduce           tensor<256xf32>, 1024 B
// CHECK-NEXT: h2d[1]#0      loom.copy                 packed sign_scale tensor<256xf32> pinned -> device, 36 B after h2d#0
// CHECK-NEXT: host          loom.wait                 comm#0, h2d[1]#0
// CHECK-NEXT: cpu#0         loom.exp                  tensor<256xf32>
// CHECK-NEXT: gpu#1         loom.add                  tensor<256xf32>
// CHECK-NEXT: bytes moved: h2d 1024 comm 1024 h2d[1] 36
func.func @prefetch_overlaps_compute(%h: tensor<256xf32, #loom.mem<pinned>>,
    %p: !loom.packed<tensor<256xf32, #loom.mem<pinned>>, #loom.codec<sign_scale>>) {
  %w = loom.load @w : tensor<256xf32, #loom.mem<device>>
  %d, %t0 = loom.copy %h on h2d : tensor<256xf32, #loom.mem<pinned>> -> tensor<256xf32, #loom.mem<device>>
  %e = loom.exp %w : tensor<256xf32, #loom.mem<device>>
  %r, %t1 = loom.all_reduce %e over #loom.group<@t, ["gpu"]> on comm : tensor<256xf32, #loom.mem<device>> -> tensor<256xf32, #loom.mem<device>>
  %pd, %t2 = loom.copy %p after [%t0] on h2d[1] : !loom.packed<tensor<256xf32, #loom.mem<pinned>>, #loom.codec<sign_scale>> -> !loom.packed<tensor<256xf32, #loom.mem<device>>, #loom.codec<sign_scale>>
  loom.wait %t1, %t2
  %c = loom.exp %h : tensor<256xf32, #loom.mem<pinned>>
  %s = loom.add %d, %r : tensor<256xf32, #loom.mem<device>>, tensor<256xf32, #loom.mem<device>> -> tensor<256xf32, #loom.mem<device>>
  return
}
