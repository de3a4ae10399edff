// A forward cut into four chunks for two stages (interleaved: chunk c on
// stage c mod 2): the embedding and block 0 in chunk 0, blocks 1 and 2 in
// chunks 1 and 2, block 3, the head and the loss in chunk 3.
loom.topology @world ["stage" = 2]
loom.param @emb : tensor<8x4xf32> init #loom.init<normal(0.0, 0.02)> {loom.stage = 0 : i64}
loom.param @h.0.w : tensor<4x4xf32> init #loom.init<normal(0.0, 0.02)> {loom.stage = 0 : i64}
loom.param @h.1.w : tensor<4x4xf32> init #loom.init<normal(0.0, 0.02)> {loom.stage = 1 : i64}
loom.param @h.2.w : tensor<4x4xf32> init #loom.init<normal(0.0, 0.02)> {loom.stage = 2 : i64}
loom.param @h.3.w : tensor<4x4xf32> init #loom.init<normal(0.0, 0.02)> {loom.stage = 3 : i64}
loom.param @head : tensor<8x4xf32> init #loom.init<normal(0.0, 0.02)> {loom.stage = 3 : i64}
func.func @forward(%x: tensor<4x3xi64>, %y: tensor<4x3xi64>) -> tensor<f32> {
  %e = loom.load @emb : tensor<8x4xf32>
  %w0 = loom.load @h.0.w : tensor<4x4xf32>
  %w1 = loom.load @h.1.w : tensor<4x4xf32>
  %w2 = loom.load @h.2.w : tensor<4x4xf32>
  %w3 = loom.load @h.3.w : tensor<4x4xf32>
  %hd = loom.load @head : tensor<8x4xf32>
  %a = loom.embedding %e[%x] {loom.stage = 0 : i64} : tensor<8x4xf32>, tensor<4x3xi64> -> tensor<4x3x4xf32>
  %b0 = loom.matmul %a, %w0 {loom.stage = 0 : i64} : tensor<4x3x4xf32>, tensor<4x4xf32> -> tensor<4x3x4xf32>
  %b1 = loom.matmul %b0, %w1 {loom.stage = 1 : i64} : tensor<4x3x4xf32>, tensor<4x4xf32> -> tensor<4x3x4xf32>
  %b2 = loom.matmul %b1, %w2 {loom.stage = 2 : i64} : tensor<4x3x4xf32>, tensor<4x4xf32> -> tensor<4x3x4xf32>
  %b3 = loom.matmul %b2, %w3 {loom.stage = 3 : i64} : tensor<4x3x4xf32>, tensor<4x4xf32> -> tensor<4x3x4xf32>
  %logits = loom.matmul %b3, %hd transpose_rhs {loom.stage = 3 : i64} : tensor<4x3x4xf32>, tensor<8x4xf32> -> tensor<4x3x8xf32>
  %l = loom.cross_entropy %logits, %y {loom.stage = 3 : i64} : tensor<4x3x8xf32>, tensor<4x3xi64> -> tensor<f32>
  return %l : tensor<f32>
}
