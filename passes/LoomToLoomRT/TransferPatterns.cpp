//===- TransferPatterns.cpp - lowering patterns: copies, collectives and their waits ---===//
//
// The lowering of copies, collectives and their waits: one `lower(Op, Adaptor, Emit &)` per op.
//
//===----------------------------------------------------------------------===//
#include "passes/LoomToLoomRT/Lowering.h"

using namespace mlir;
using namespace mlir::loom;

namespace mlir::loom::lowering {

//--- Transfers: copies and collectives, and their waits --------------------//

LogicalResult lower(CopyOp o, CopyOp::Adaptor a, Emit &e) {
  // A copy whose only use stores it to a global lands in the global's
  // buffer directly (the offload schedules' state coming back to host
  // memory): no second copy.
  Value st = e.asyncStream();
  Value out = e.allocOrGlobal(o.getResult());
  Value token = e.async(st, [&] {
    rt::MemcpyOp::create(e.rw, e.loc, st, out, a.getInput(), bytesOf(o.getResult()));
  });
  // Rows the CPU gathered (loom-place-features' host-gather): the host
  // stream runs as it is issued, so they are there before the copy is
  // queued; the host then waits for the upload, since the gather's pinned
  // buffer goes back to the host arena and the next gather may reuse it.
  auto gather = o.getInput().getDefiningOp<EmbeddingOp>();
  if (gather && isHostMemory(gather.getType()))
    rt::SyncOp::create(e.rw, e.loc, token);
  return e.done({out, token});
}
/// A reduction over the communicator: `n` elements of the input
/// (all-reduce) or of each rank's output (reduce-scatter).
template <typename RtOp, typename OpT>
LogicalResult lowerReduction(OpT o, Value in, int64_t n, Emit &e) {
  Value out = e.alloc(o.getResult());
  Value token = e.async(e.f.collectives, [&] {
    RtOp::create(e.rw, e.loc, e.comm(o.getGroup()), e.f.collectives, dt(o.getInput()), in, out, n,
                 reduceOf(o.getReduce()));
  });
  return e.done({out, token});
}
LogicalResult lower(AllReduceOp o, AllReduceOp::Adaptor a, Emit &e) {
  return lowerReduction<rt::AllReduceOp>(o, a.getInput(), numel(o.getInput()), e);
}
LogicalResult lower(ReduceScatterOp o, ReduceScatterOp::Adaptor a, Emit &e) {
  return lowerReduction<rt::ReduceScatterOp>(o, a.getInput(), numel(o.getResult()), e);
}
/// The packed collectives of 1-bit Adam (a sign_scale payload with one
/// scale in, the same tensor with one scale per chunk out): the scales
/// (first in the payload) and the sign bytes (after them) travel as two
/// byte collectives on the comm stream.
Value packedView(Emit &e, Value buf, int64_t offset) {
  return rt::ViewOp::create(e.rw, e.loc, e.rw.getType<rt::BufferType>(), buf, offset);
}
/// A block-codec payload of n elements (the scales, then the codes) sent as
/// `world` parts, each part's scales and codes: the all-to-all sends part j
/// of both regions to rank j, the all-gather puts rank j's part j; either
/// way the result is the payload of world parts laid out as one.
Value blockCollective(Emit &e, Value comm, Value in, Value out, PackedType whole, int64_t world,
                      bool gather) {
  int64_t n = whole.getLogical().getNumElements(), block = whole.getCodec().getBlock();
  int64_t part = n / world, bits = whole.getCodec().getBitsPerElement();
  int64_t scaleBytes = 4 * (part / block), codeBytes = part * bits / 8;
  int64_t inScales = gather ? 4 * (part / block) : 4 * (n / block);
  return e.async(e.f.collectives, [&] {
    if (gather) {
      rt::AllGatherBytesOp::create(e.rw, e.loc, comm, e.f.collectives, in, out, scaleBytes);
      rt::AllGatherBytesOp::create(e.rw, e.loc, comm, e.f.collectives, packedView(e, in, inScales),
                                   packedView(e, out, 4 * (n / block)), codeBytes);
    } else {
      rt::AllToAllOp::create(e.rw, e.loc, comm, e.f.collectives, in, out, scaleBytes);
      rt::AllToAllOp::create(e.rw, e.loc, comm, e.f.collectives, packedView(e, in, inScales),
                             packedView(e, out, 4 * (n / block)), codeBytes);
    }
  });
}
LogicalResult lower(AllToAllOp o, AllToAllOp::Adaptor a, Emit &e) {
  // A tensor (a mixture of experts' token rows): chunk j of dimension 0 to
  // rank j, as bytes.
  if (isa<RankedTensorType>(o.getInput().getType())) {
    Value buf = e.alloc(o.getResult());
    Value token = e.async(e.f.collectives, [&] {
      rt::AllToAllOp::create(e.rw, e.loc, e.comm(o.getGroup()), e.f.collectives, a.getInput(), buf,
                             bytesOf(o.getInput()) / chunksOf(o));
    });
    return e.done({buf, token});
  }
  if (auto in = cast<PackedType>(o.getInput().getType()); isBlockCodec(in)) {
    Value buf = e.alloc(o.getResult());
    return e.done({buf, blockCollective(e, e.comm(o.getGroup()), a.getInput(), buf, in, chunksOf(o), false)});
  }
  auto out = cast<PackedType>(o.getResult().getType());
  int64_t n = out.getLogical().getNumElements(), chunk = out.getCodec().getBlock();
  int64_t world = n / chunk;
  Value buf = e.alloc(o.getResult());
  Value token = e.async(e.f.collectives, [&] {
    rt::AllToAllOp::create(e.rw, e.loc, e.comm(o.getGroup()), e.f.collectives, packedView(e, a.getInput(), 4),
                           packedView(e, buf, 4 * world), chunk / 8);
    rt::AllGatherBytesOp::create(e.rw, e.loc, e.comm(o.getGroup()), e.f.collectives, a.getInput(), buf, 4);
  });
  return e.done({buf, token});
}
LogicalResult lower(AllGatherOp o, AllGatherOp::Adaptor a, Emit &e) {
  if (auto in = dyn_cast<PackedType>(o.getInput().getType()); in && isBlockCodec(in)) {
    auto whole = cast<PackedType>(o.getResult().getType());
    Value buf = e.alloc(o.getResult());
    int64_t world = whole.getLogical().getNumElements() / in.getLogical().getNumElements();
    return e.done({buf, blockCollective(e, e.comm(o.getGroup()), a.getInput(), buf, whole, world, true)});
  }
  if (auto in = dyn_cast<PackedType>(o.getInput().getType())) {
    int64_t chunk = in.getLogical().getNumElements();
    int64_t world = cast<PackedType>(o.getResult().getType()).getLogical().getNumElements() / chunk;
    Value buf = e.alloc(o.getResult());
    Value token = e.async(e.f.collectives, [&] {
      rt::AllGatherBytesOp::create(e.rw, e.loc, e.comm(o.getGroup()), e.f.collectives, a.getInput(), buf, 4);
      rt::AllGatherBytesOp::create(e.rw, e.loc, e.comm(o.getGroup()), e.f.collectives, packedView(e, a.getInput(), 4),
                                   packedView(e, buf, 4 * world), chunk / 8);
    });
    return e.done({buf, token});
  }
  Value out = e.alloc(o.getResult());
  Value token = e.async(e.f.collectives, [&] {
    rt::AllGatherOp::create(e.rw, e.loc, e.comm(o.getGroup()), e.f.collectives, dt(o.getInput()), a.getInput(), out,
                            numel(o.getInput()));
  });
  return e.done({out, token});
}
/// Zeros first (a rank with no sender keeps them), then the exchange, both
/// on the collectives' stream.
LogicalResult lower(SendRecvOp o, SendRecvOp::Adaptor a, Emit &e) {
  Value out = e.alloc(o.getResult());
  Value token = e.async(e.f.collectives, [&] {
    rt::FillOp::create(e.rw, e.loc, e.f.collectives, dt(o.getInput()), out,
                       APFloat(0.0), numel(o.getInput()));
    rt::SendRecvOp::create(e.rw, e.loc, e.comm(o.getGroup()), e.f.collectives, a.getInput(), out,
                           bytesOf(o.getResult()), int64_t(o.getShift()));
  });
  return e.done({out, token});
}
/// A pipeline transfer: the received buffer is written whole by the peer
/// (a stage's program names only neighbours that exist), so no zeros first.
LogicalResult lower(P2POp o, P2POp::Adaptor a, Emit &e) {
  Value out = o.getResult() ? e.alloc(o.getResult()) : Value();
  Value moved = o.getInput() ? o.getInput() : o.getResult();
  Value token = e.async(e.f.collectives, [&] {
    rt::P2POp::create(e.rw, e.loc, e.comm(o.getGroup()), e.f.collectives, a.getInput(), out,
                      bytesOf(moved), o.getToAttr(), o.getFromAttr());
  });
  if (!out)
    return e.done({token});
  return e.done({out, token});
}
/// A view: this rank's block of the input.
LogicalResult lower(ShardOp o, ShardOp::Adaptor a, Emit &e) {
  return e.done(rt::RankViewOp::create(e.rw, e.loc, e.rw.getType<rt::BufferType>(), a.getInput(),
                                       e.comm(o.getGroup()), bytesOf(o.getResult()))
                    .getResult());
}
/// A copy into host memory is waited by the host (the CPU reads it next);
/// everything else by the compute stream.
LogicalResult lower(WaitOp o, WaitOp::Adaptor a, Emit &e) {
  for (auto [orig, token] : llvm::zip(o.getTokens(), a.getTokens())) {
    auto copy = orig.getDefiningOp<CopyOp>();
    if (copy && isHostMemory(copy.getResult().getType()))
      rt::SyncOp::create(e.rw, e.loc, token);
    else
      rt::WaitOp::create(e.rw, e.loc, e.f.compute, token);
  }
  e.rw.eraseOp(o);
  return success();
}

void populateTransferPatterns(RewritePatternSet &patterns, const TypeConverter &tc, Plan &plan) {
  addPatterns<CopyOp, AllReduceOp, ReduceScatterOp, AllGatherOp, AllToAllOp, SendRecvOp, P2POp, ShardOp,
              WaitOp>(patterns, tc, plan);
}

} // namespace mlir::loom::lowering
