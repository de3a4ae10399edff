// Inputs of test/Passes/loom-micro-batches.mlir that the pass refuses.
// BAD: input 0 is not a device tensor with a static batch dimension
func.func @forward(%x: tensor<f32>) -> tensor<f32> {
  return %x : tensor<f32>
}

// -----
// BAD: each result must be a scalar loss
func.func @forward(%x: tensor<4x2xf32>) -> tensor<4x2xf32> {
  return %x : tensor<4x2xf32>
}

// -----
// BAD: a graph model samples its mini-batch as one tree
module attributes {loom.graph = #loom.graph<fanouts = [2], norm = mean>} {
  func.func @forward(%x: tensor<4x2xf32>) -> tensor<f32> {
    %l = loom.reduce mean %x [0, 1] : tensor<4x2xf32> to tensor<f32>
    return %l : tensor<f32>
  }
}

// -----
// BAD: no function @forward
func.func @other(%x: tensor<4x2xf32>) -> tensor<f32> {
  %l = loom.reduce mean %x [0, 1] : tensor<4x2xf32> to tensor<f32>
  return %l : tensor<f32>
}
