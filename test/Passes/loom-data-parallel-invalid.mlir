// RUN: loom-opt %s --split-input-file --verify-diagnostics --loom-data-parallel=zero-stage=1

// expected-error @+1 {{loom-data-parallel: no loom.topology (loomc --topology)}}
module {
  func.func @train_step() {
    return
  }
}

// -----

// expected-error @+1 {{loom-data-parallel: needs @train_step (run loom-attach-optimizer first)}}
module {
  loom.topology @world ["rank" = 2]
}

// -----

// ZeRO stages 1-3 partition Adam's state: SGD is refused by name.
module {
  loom.topology @world ["rank" = 2]
  loom.param @w : tensor<4xf32> init #loom.init<ones>
  func.func @forward_backward(%x: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>) attributes {loom.grad_params = [@w]} {
    %w = loom.load @w : tensor<4xf32>
    %p = loom.mul %x, %w : tensor<4xf32>, tensor<4xf32> -> tensor<4xf32>
    %l = loom.reduce sum %p [0] : tensor<4xf32> to tensor<f32>
    return %l, %x : tensor<f32>, tensor<4xf32>
  }
  // expected-error @+1 {{zero-stage 1 partitions Adam state: the gradient of '@w' does not feed a loom.adam}}
  func.func @train_step(%x: tensor<4xf32>) -> tensor<f32> {
    %r:2 = call @forward_backward(%x) : (tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>)
    %w = loom.load @w : tensor<4xf32>
    %m = loom.load @w : tensor<4xf32>
    %w2, %m2 = loom.sgd %w, %r#1, %m {lr = 0.1 : f64, momentum = 0.9 : f64} : tensor<4xf32>
    return %r#0 : tensor<f32>
  }
}
