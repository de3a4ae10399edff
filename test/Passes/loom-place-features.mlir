// loom-place-features: a graph model's feature table stays on the GPU when
// it fits, else goes to pinned host memory, read by zero-copy or gathered
// by the CPU, whichever the cost model prices faster; forcing each.
// RUN: loom-opt %s --split-input-file --loom-place-features | FileCheck %s --check-prefix=AUTO
// RUN: loom-opt %s --split-input-file --loom-place-features=placement=zero-copy | FileCheck %s --check-prefix=ZC
// RUN: loom-opt %s --split-input-file --loom-place-features=placement=host-gather | FileCheck %s --check-prefix=HG
// RUN: loom-opt %s --split-input-file --loom-place-features="hardware=%S/Inputs/slow-zero-copy.json" | FileCheck %s --check-prefix=SLOWZC

// A 51 KB table fits any GPU: every placement but a forced one keeps it.
// AUTO: loom.graph = #loom.graph<fanouts = [2], norm = mean, placement = device>
// AUTO: func.func @forward(%arg0: tensor<100x128xf32>, %arg1: tensor<4xi64>, %arg2: tensor<8xi64>
// SLOWZC: placement = device

// ZC: placement = zero_copy
// ZC: func.func @forward(%[[F:.*]]: tensor<100x128xf32, #loom.mem<pinned>>, %[[I0:.*]]: tensor<4xi64>, %[[I1:.*]]: tensor<8xi64>
// ZC-NEXT: %[[M:.*]] = loom.zero_copy %[[F]] : tensor<100x128xf32, #loom.mem<pinned>> -> tensor<100x128xf32, #loom.mem<mapped>>
// ZC-NEXT: loom.embedding %[[M]][%[[I0]]] : tensor<100x128xf32, #loom.mem<mapped>>, tensor<4xi64> -> tensor<4x128xf32>
// ZC-NEXT: loom.embedding %[[M]][%[[I1]]] : tensor<100x128xf32, #loom.mem<mapped>>, tensor<8xi64> -> tensor<8x128xf32>

// HG: placement = host_gather
// HG: func.func @forward(%[[F:.*]]: tensor<100x128xf32, #loom.mem<pinned>>, %[[I0:.*]]: tensor<4xi64, #loom.mem<pinned>>, %[[I1:.*]]: tensor<8xi64, #loom.mem<pinned>>
// HG-NEXT: %[[R0:.*]] = loom.embedding %[[F]][%[[I0]]] : tensor<100x128xf32, #loom.mem<pinned>>, tensor<4xi64, #loom.mem<pinned>> -> tensor<4x128xf32, #loom.mem<pinned>>
// HG-NEXT: %[[D0:.*]], %[[T0:.*]] = loom.copy %[[R0]] on h2d : tensor<4x128xf32, #loom.mem<pinned>> -> tensor<4x128xf32>{{$}}
// HG-NEXT: loom.wait %[[T0]]
module attributes {loom.graph = #loom.graph<fanouts = [2], norm = mean>,
                   loom.input_names = ["features", "nodes0", "nodes1", "weights1", "labels"]} {
  func.func @forward(%f: tensor<100x128xf32>, %n0: tensor<4xi64>, %n1: tensor<8xi64>,
                     %w1: tensor<8x1xf32>, %l: tensor<4xi64>) -> tensor<f32> {
    %h0 = loom.embedding %f[%n0] : tensor<100x128xf32>, tensor<4xi64> -> tensor<4x128xf32>
    %h1 = loom.embedding %f[%n1] : tensor<100x128xf32>, tensor<8xi64> -> tensor<8x128xf32>
    %m = loom.mul %h1, %w1 : tensor<8x128xf32>, tensor<8x1xf32> -> tensor<8x128xf32>
    %r = loom.reshape %m : tensor<8x128xf32> to tensor<4x2x128xf32>
    %s = loom.reduce sum %r [1] : tensor<4x2x128xf32> to tensor<4x128xf32>
    %y = loom.add %s, %h0 : tensor<4x128xf32>, tensor<4x128xf32> -> tensor<4x128xf32>
    %loss = loom.cross_entropy %y, %l : tensor<4x128xf32>, tensor<4xi64> -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// A 102 GB table (ogbn-papers100M's 111M nodes would be 57 GB) does not fit
// an 80 GiB H100: 512-byte rows read by zero-copy (0.70 ns + 10.4 ns a row)
// beat the CPU's gather and upload (6.6 + 14.8 + 9.3 ns); where zero-copy
// is slow (the description's fitted rates) the CPU gathers.
// AUTO: placement = zero_copy
// AUTO: loom.zero_copy
// SLOWZC: placement = host_gather
// SLOWZC: loom.copy
module attributes {loom.graph = #loom.graph<fanouts = [2], norm = gcn>,
                   loom.input_names = ["features", "nodes0", "nodes1", "labels"]} {
  func.func @forward(%f: tensor<200000000x128xf32>, %n0: tensor<4xi64>, %n1: tensor<8xi64>,
                     %l: tensor<4xi64>) -> tensor<f32> {
    %h0 = loom.embedding %f[%n0] : tensor<200000000x128xf32>, tensor<4xi64> -> tensor<4x128xf32>
    %h1 = loom.embedding %f[%n1] : tensor<200000000x128xf32>, tensor<8xi64> -> tensor<8x128xf32>
    %r = loom.reshape %h1 : tensor<8x128xf32> to tensor<4x2x128xf32>
    %s = loom.reduce sum %r [1] : tensor<4x2x128xf32> to tensor<4x128xf32>
    %y = loom.add %s, %h0 : tensor<4x128xf32>, tensor<4x128xf32> -> tensor<4x128xf32>
    %loss = loom.cross_entropy %y, %l : tensor<4x128xf32>, tensor<4xi64> -> tensor<f32>
    return %loss : tensor<f32>
  }
}

