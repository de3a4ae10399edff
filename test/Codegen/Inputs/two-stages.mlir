// Two pipeline stages by hand (test/Codegen/send-recv.test): the activation
// forward with shift 1, its gradient back with shift -1 (loom-autodiff).
loom.topology @world ["stage" = 2]
loom.param @scale : tensor<16xf32> init #loom.init<ones>
func.func @forward(%x: tensor<1x4x16xf32>, %y: tensor<1x4xi64>) -> tensor<f32> {
  %sc = loom.load @scale : tensor<16xf32>
  %h = loom.mul %x, %sc : tensor<1x4x16xf32>, tensor<16xf32> -> tensor<1x4x16xf32>
  %a, %t = loom.send_recv %h over #loom.group<@world, ["stage"]> shift 1 on comm : tensor<1x4x16xf32> -> tensor<1x4x16xf32>
  loom.wait %t
  %l = loom.cross_entropy %a, %y : tensor<1x4x16xf32>, tensor<1x4xi64> -> tensor<f32>
  return %l : tensor<f32>
}
