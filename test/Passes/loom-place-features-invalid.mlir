// loom-place-features refuses what it cannot place, with one message.
// RUN: loom-opt %s --split-input-file --verify-diagnostics --loom-place-features
// RUN: not loom-opt %s --split-input-file --loom-place-features=placement=somewhere 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: error: loom-place-features: unknown placement 'somewhere': expected auto, device, zero-copy or host-gather

// The table read other than by a gather.
module attributes {loom.graph = #loom.graph<fanouts = [2], norm = mean>,
                   loom.input_names = ["features", "labels"]} {
  func.func @forward(%f: tensor<4x3xf32>, %l: tensor<4xi64>) -> tensor<f32> {
    // expected-error @+1 {{loom-place-features: the features table may only be read as a loom.embedding's table}}
    %loss = loom.cross_entropy %f, %l : tensor<4x3xf32>, tensor<4xi64> -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// A table placed already.
module attributes {loom.graph = #loom.graph<fanouts = [2], norm = mean>,
                   loom.input_names = ["features", "nodes0", "labels"]} {
  // expected-error @+1 {{loom-place-features: the features table is placed already}}
  func.func @forward(%f: tensor<4x3xf32, #loom.mem<pinned>>, %n: tensor<2xi64, #loom.mem<pinned>>,
                     %l: tensor<2xi64>) -> tensor<f32> {
    %h = loom.embedding %f[%n] : tensor<4x3xf32, #loom.mem<pinned>>, tensor<2xi64, #loom.mem<pinned>> -> tensor<2x3xf32, #loom.mem<pinned>>
    %d, %t = loom.copy %h on h2d : tensor<2x3xf32, #loom.mem<pinned>> -> tensor<2x3xf32, #loom.mem<device>>
    loom.wait %t
    %loss = loom.cross_entropy %d, %l : tensor<2x3xf32, #loom.mem<device>>, tensor<2xi64> -> tensor<f32>
    return %loss : tensor<f32>
  }
}

// -----

// expected-error @+1 {{graph fanouts must be one or more hops, each in [1, 4096]}}
module attributes {loom.graph = #loom.graph<fanouts = [0], norm = mean>} {
}
