// A forward cut into two stages (as loom-pipeline-cut marks it): the
// embedding and block 0 on stage 0, block 1 and the head on stage 1; the
// head reads the embedding's table (tied), the position table is data
// alone.
loom.topology @world ["stage" = 2]
loom.param @emb : tensor<8x4xf32> init #loom.init<normal(0.0, 0.02)> {loom.stage = 0 : i64}
loom.param @h.0.w : tensor<4x4xf32> init #loom.init<normal(0.0, 0.02)> {loom.stage = 0 : i64}
loom.param @h.0.g : tensor<4xf32> init #loom.init<ones> {loom.stage = 0 : i64}
loom.param @h.1.w : tensor<4x4xf32> init #loom.init<normal(0.0, 0.02)> {loom.stage = 1 : i64}
func.func @forward(%x: tensor<2x3xi64>, %y: tensor<2x3xi64>) -> tensor<f32> {
  %e = loom.load @emb : tensor<8x4xf32>
  %w0 = loom.load @h.0.w : tensor<4x4xf32>
  %g0 = loom.load @h.0.g : tensor<4xf32>
  %w1 = loom.load @h.1.w : tensor<4x4xf32>
  %a = loom.embedding %e[%x] {loom.stage = 0 : i64} : tensor<8x4xf32>, tensor<2x3xi64> -> tensor<2x3x4xf32>
  %b = loom.matmul %a, %w0 {loom.stage = 0 : i64} : tensor<2x3x4xf32>, tensor<4x4xf32> -> tensor<2x3x4xf32>
  %c = loom.mul %b, %g0 {loom.stage = 0 : i64} : tensor<2x3x4xf32>, tensor<4xf32> -> tensor<2x3x4xf32>
  %d = loom.matmul %c, %w1 {loom.stage = 1 : i64} : tensor<2x3x4xf32>, tensor<4x4xf32> -> tensor<2x3x4xf32>
  %logits = loom.matmul %d, %e transpose_rhs {loom.stage = 1 : i64} : tensor<2x3x4xf32>, tensor<8x4xf32> -> tensor<2x3x8xf32>
  %l = loom.cross_entropy %logits, %y {loom.stage = 1 : i64} : tensor<2x3x8xf32>, tensor<2x3xi64> -> tensor<f32>
  return %l : tensor<f32>
}
