// Refused by code generation (test/Conversion/send-recv.mlir): token ids
// passed between stages (every stage reads its own from the data).
module {
  loom.topology @world ["stage" = 2]
  func.func @train_step(%x: tensor<8xi64>) -> tensor<8xi64> {
    %y, %t = loom.send_recv %x over #loom.group<@world, ["stage"]> shift 1 on comm
        : tensor<8xi64> -> tensor<8xi64>
    loom.wait %t
    return %y : tensor<8xi64>
  }
}
