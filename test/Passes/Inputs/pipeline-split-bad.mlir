// Cuts loom-pipeline-split refuses, one a split.
loom.topology @world ["stage" = 3]
loom.param @w : tensor<4x4xf32> init #loom.init<normal(0.0, 0.02)>
func.func @forward(%x: tensor<2x4xf32>, %y: tensor<2xi64>) -> tensor<f32> {
  %w = loom.load @w : tensor<4x4xf32>
  %a = loom.matmul %x, %w {loom.stage = 0 : i64} : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %b = loom.matmul %a, %w {loom.stage = 1 : i64} : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  // Stage 2 reads stage 0's value: a skip over stage 1.
  %c = loom.add %b, %a {loom.stage = 2 : i64} : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %l = loom.cross_entropy %c, %y {loom.stage = 2 : i64} : tensor<2x4xf32>, tensor<2xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

loom.topology @world ["stage" = 2]
loom.param @w : tensor<4x4xf32> init #loom.init<normal(0.0, 0.02)>
func.func @forward(%x: tensor<2x4xf32>, %y: tensor<2xi64>) -> tensor<f32> {
  %w = loom.load @w : tensor<4x4xf32>
  %a = loom.matmul %x, %w {loom.stage = 0 : i64} : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  %b = loom.matmul %a, %w {loom.stage = 0 : i64} : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  // Two values cross the cut.
  %c = loom.add %b, %a {loom.stage = 1 : i64} : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %l = loom.cross_entropy %c, %y {loom.stage = 1 : i64} : tensor<2x4xf32>, tensor<2xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

loom.topology @world ["gpu" = 2]
func.func @forward(%x: tensor<2x4xf32>, %y: tensor<2xi64>) -> tensor<f32> {
  %l = loom.cross_entropy %x, %y {loom.stage = 1 : i64} : tensor<2x4xf32>, tensor<2xi64> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

loom.topology @world ["stage" = 2]
loom.param @w : tensor<4x4xf32> init #loom.init<normal(0.0, 0.02)>
func.func @forward(%x: tensor<2x4xf32>, %y: tensor<2xi64>) -> tensor<f32> {
  %w = loom.load @w : tensor<4x4xf32>
  %a = loom.matmul %x, %w {loom.stage = 0 : i64} : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>
  // Not marked, and it reads a stage's value.
  %b = loom.mul %a, %a : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<2x4xf32>
  %l = loom.cross_entropy %b, %y {loom.stage = 1 : i64} : tensor<2x4xf32>, tensor<2xi64> -> tensor<f32>
  return %l : tensor<f32>
}
