//===- LoomInterfaces.td - interfaces of the loom dialect -----------------===//
#ifndef LOOM_INTERFACES_TD
#define LOOM_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Loom_AsyncOpInterface : OpInterface<"AsyncOpInterface"> {
  let cppNamespace = "::mlir::loom";
  let description = [{
    An op whose work is queued on a stream and completes later: it takes a
    list of tokens it must wait for (`[%t0, %t1]`, lowered to stream waits on
    events) and produces one `!loom.token` as its last result. The interface
    verifier enforces the token rules of `!loom.token`: the op's other results
    are read only after a `loom.wait` of its token (or by asynchronous ops
    that depend on it), and the token is consumed.
  }];
  let methods = [
    InterfaceMethod<"The token that completes with this op.",
      "::mlir::Value", "getAsyncToken">,
    InterfaceMethod<"Tokens this op waits for before it starts.",
      "::mlir::OperandRange", "getAsyncDeps">,
    InterfaceMethod<"The stream this op is ordered on.",
      "::mlir::loom::StreamAttr", "getStreamAttr">,
  ];
  let verify = [{ return ::mlir::loom::detail::verifyAsyncOp($_op); }];
}

#endif // LOOM_INTERFACES_TD
