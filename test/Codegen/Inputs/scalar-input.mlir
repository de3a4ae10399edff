loom.param @w : tensor<4xf32> init #loom.init<ones>
func.func @forward(%x: tensor<f32>) -> tensor<f32> {
  %w = loom.load @w : tensor<4xf32>
  %s = loom.reduce sum %w [0] : tensor<4xf32> to tensor<f32>
  %y = loom.mul %s, %x : tensor<f32>, tensor<f32> -> tensor<f32>
  return %y : tensor<f32>
}
