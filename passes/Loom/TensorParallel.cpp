//===- TensorParallel.cpp - loom-tensor-parallel --------------------------===//
//
// Megatron-LM's tensor parallelism (Shoeybi et al. 2019, section 3) as a
// rewrite of the forward graph, before loom-autodiff. Each residual branch
// of a transformer block, x + P(...), is found from its last product P: a
// linear layer whose input has no norm, embedding or residual between it and
// the products that read the block's (normed) residual stream. Those first
// products are column-parallel (rank r keeps rows r of N of each weight
// [out, in], and of its bias), P is row-parallel (rank r keeps columns r of
// N), and everything between runs on every rank's share of the columns: the
// heads of attention, the hidden units of the MLP. The sharding is
// propagated op by op from those anchors (a split dimension a value, kept
// through slices, reshapes, transposes, broadcasts and elementwise ops); an
// op with no rule, or a dimension that does not divide, is refused with one
// line naming it. P's partial sums are summed over the group by an
// all-reduce (Megatron's g), whose gradient passes through; the branch's
// input enters through loom.tp_enter (Megatron's f), whose gradient is an
// all-reduce. Norms, embeddings, the head and the loss stay whole on every
// rank (the vocabulary-parallel embedding and cross-entropy, and sequence
// parallelism, are not built).
//
// A sliced parameter keeps its name and gets `loom.tp_slice = [dim,
// groups]`: along `dim` its full tensor is `groups` equal groups, and rank
// r of N keeps part r of each (a fused QKV weight is 3 groups, so each rank
// holds its heads' queries, keys and values). The training binary draws the
// full tensor's initial values from the seed's stream and keeps its part,
// so the ranks together start from the one-rank model's weights.
//
//===----------------------------------------------------------------------===//
#include "loom/Passes/Loom.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"

#include <numeric>

namespace mlir::loom {
#define GEN_PASS_DEF_TENSORPARALLEL
#include "passes/Loom/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

/// How a value of the branch is split: along `dim`, in `groups` equal
/// groups, each divided over the ranks.
struct Split {
  int64_t dim = -1;
  int64_t groups = 1;
};

RankedTensorType tensorOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// The dimension of a linear layer's weight that holds its outputs (split
/// by a column-parallel layer) and the one that holds its inputs (split by
/// a row-parallel one).
int64_t outputDim(MatmulOp m) { return m.getTransposeRhs() ? 0 : 1; }
int64_t inputDim(MatmulOp m) { return m.getTransposeRhs() ? 1 : 0; }

struct TensorParallel : public mlir::loom::impl::TensorParallelBase<TensorParallel> {
  using Base::Base;

  ModuleOp module;
  GroupAttr group;
  int64_t n = 1;
  DenseMap<Value, Split> split;
  /// Each sliced parameter's [dim, groups], and the loads that read this
  /// rank's part (every load of a sliced parameter must be one).
  llvm::MapVector<ParamOp, std::pair<int64_t, int64_t>> slices;
  llvm::SetVector<Operation *> claimed;
  SymbolTable *symtab = nullptr;

  /// The row-parallel weight of the branch being split: named in refusals,
  /// since a generator's ops carry no source location.
  std::string branch;

  /// A linear layer's weight: matmul(x, load @w) with @w rank 2, stored
  /// [out, in] (nn.Linear, applied with transpose_rhs) or [in, out] (as
  /// exporters write it).
  ParamOp linearWeight(MatmulOp m) {
    if (m.getTransposeLhs())
      return {};
    auto load = m.getRhs().getDefiningOp<LoadOp>();
    if (!load || tensorOf(load.getResult()).getRank() != 2)
      return {};
    return symtab->lookup<ParamOp>(load.getName());
  }

  LogicalResult fail(Operation *at, const Twine &msg) {
    auto d = at->emitError() << "loom-tensor-parallel: " << msg;
    if (!branch.empty())
      d << " (in the branch that ends at '" << branch << "')";
    return failure();
  }

  void runOnOperation() override {
    module = getOperation();
    if (failed(run()))
      signalPassFailure();
  }

  LogicalResult run() {
    if (size <= 1)
      return success();
    n = size;
    FailureOr<TopologyOp> found = findTopology(module, topology, "loom-tensor-parallel");
    if (failed(found))
      return failure();
    TopologyOp topo = *found;
    if (!topo)
      return fail(module, "no loom.topology (loomc --topology)");
    if (topo.getLevels().empty())
      return fail(topo, "the topology has no levels");
    // The innermost level: its ranks are numbered fastest, so a group of
    // them is the closest-linked ranks (the GPUs of a node).
    auto inner = cast<StringAttr>(topo.getLevels()[0]);
    if (topo.getLevelSize(inner.getValue()) != n)
      return fail(topo, "size=" + Twine(n) + " must equal the innermost level '" +
                            inner.getValue() + "' of the topology (" +
                            Twine(topo.getLevelSize(inner.getValue())) + " ranks)");
    group = GroupAttr::get(module.getContext(), FlatSymbolRefAttr::get(topo.getSymNameAttr()),
                           ArrayAttr::get(module.getContext(), {inner}));
    auto fwd = module.lookupSymbol<func::FuncOp>(LoomDialect::kForward);
    if (!fwd || !fwd.getBody().hasOneBlock())
      return fail(module, "needs @forward with one block (run it before loom-autodiff)");
    SymbolTable symbols(module);
    symtab = &symbols;
    SmallVector<MatmulOp> rows;
    fwd.walk([&](MatmulOp m) {
      if (isRowParallel(m))
        rows.push_back(m);
    });
    if (rows.empty())
      return fail(fwd, "found no residual branch (x + linear(...)) to split: the model's "
                       "blocks are not ones it recognises (docs/tensor-parallel.md)");
    for (MatmulOp r : rows)
      if (failed(splitBranch(r)))
        return failure();
    branch.clear();
    return finishParams();
  }

  /// P of a residual branch: a linear layer whose result (plus a bias,
  /// reshaped) is added to a value of its own shape, the residual stream.
  bool isRowParallel(MatmulOp m) {
    if (!linearWeight(m) || !m.getResult().hasOneUse())
      return false;
    Operation *user = *m.getResult().getUsers().begin();
    auto add = dyn_cast<AddOp>(user);
    if (add && isBias(add.getLhs() == m.getResult() ? add.getRhs() : add.getLhs()) &&
        add.getResult().hasOneUse()) {
      user = *add.getResult().getUsers().begin();
      add = dyn_cast<AddOp>(user);
    }
    // GPT-2's Conv1D as exported: the product on [B*T, D], reshaped back.
    if (auto r = dyn_cast<ReshapeOp>(user); r && r.getResult().hasOneUse())
      add = dyn_cast<AddOp>(*r.getResult().getUsers().begin());
    return add && add.getLhs().getType() == add.getRhs().getType() &&
           add.getResult().getType() == add.getLhs().getType();
  }

  static bool isBias(Value v) {
    auto load = v.getDefiningOp<LoadOp>();
    return load && tensorOf(v).getRank() == 1;
  }

  /// The ops between the row-parallel product `r` and the column-parallel
  /// products feeding it, in block order, and those products.
  LogicalResult collect(MatmulOp r, SmallVectorImpl<Operation *> &region,
                        SmallVectorImpl<MatmulOp> &columns) {
    llvm::SetVector<Operation *> seen;
    SmallVector<Value> work{r.getLhs()};
    while (!work.empty()) {
      Value v = work.pop_back_val();
      Operation *def = v.getDefiningOp();
      if (!def)
        return fail(r, "the input of this row-parallel product reaches the function's "
                       "arguments without a column-parallel product between");
      if (isa<LoadOp, arith::ConstantOp>(def) || !seen.insert(def))
        continue;
      if (auto m = dyn_cast<MatmulOp>(def); m && linearWeight(m)) {
        columns.push_back(m);
        continue; // its input is the replicated stream
      }
      if (isa<LayerNormOp, RmsNormOp, EmbeddingOp, CrossEntropyOp, TpEnterOp>(def))
        return fail(def, "lies between a residual stream and the row-parallel product of "
                         "its branch with no column-parallel product between: the block "
                         "is not one loom-tensor-parallel recognises");
      for (Value operand : def->getOperands())
        work.push_back(operand);
    }
    if (columns.empty())
      return fail(r, "no column-parallel product feeds this row-parallel one");
    Block *block = r->getBlock();
    for (Operation &op : *block)
      if (seen.contains(&op))
        region.push_back(&op);
    return success();
  }

  /// Full shape -> this rank's: `s.dim` divided by N.
  RankedTensorType local(RankedTensorType t, Split s) {
    SmallVector<int64_t> shape(t.getShape());
    shape[s.dim] /= n;
    return RankedTensorType::get(shape, t.getElementType(), t.getEncoding());
  }

  /// Marks `load`'s parameter to be split along `dim` in `groups` groups.
  LogicalResult slice(LoadOp load, int64_t dim, int64_t groups, Operation *at) {
    ParamOp p = symtab->lookup<ParamOp>(load.getName());
    if (!p)
      return fail(at, "reads '" + load.getName() + "', which is not a loom.param");
    claimed.insert(load);
    auto it = slices.find(p);
    if (it != slices.end() && it->second != std::make_pair(dim, groups))
      return fail(at, "parameter '" + p.getSymName() + "' would be split two ways");
    int64_t size = cast<RankedTensorType>(p.getType()).getDimSize(dim);
    if (size % (groups * n) != 0)
      return fail(at, "parameter '" + p.getSymName() + "': dimension " + Twine(dim) + " (" +
                          Twine(size) + ") does not divide into " + Twine(groups) +
                          " group(s) of " + Twine(n) + " ranks (--tensor-parallel)");
    slices[p] = {dim, groups};
    return success();
  }

  /// The groups of a column product's output: what the slices that read
  /// it cut (GPT's fused QKV is read as three slices: three groups).
  int64_t groupsOf(Value v) {
    int64_t full = tensorOf(v).getShape().back(), g = full;
    // Through its bias and reshapes that keep the last dimension (an
    // exporter's [B*T, N] product reshaped to [B, T, N]).
    SmallVector<Value> readers{v};
    for (size_t k = 0; k < readers.size(); ++k)
      for (Operation *u : readers[k].getUsers())
        if (isa<AddOp>(u) || (isa<ReshapeOp>(u) && tensorOf(u->getResult(0)).getShape().back() == full))
          readers.push_back(u->getResult(0));
    for (Value x : readers)
      for (Operation *u : x.getUsers())
        if (auto s = dyn_cast<SliceOp>(u)) {
          int64_t last = tensorOf(x).getRank() - 1;
          g = std::gcd(g, s.getStart()[last]);
          g = std::gcd(g, s.getLimit()[last]);
        }
    return g ? full / g : 1;
  }

  LogicalResult splitBranch(MatmulOp r) {
    branch = linearWeight(r).getSymName().str();
    SmallVector<Operation *> region;
    SmallVector<MatmulOp> columns;
    if (failed(collect(r, region, columns)))
      return failure();
    // f: one tp_enter per replicated input, before its first reader.
    DenseMap<Value, Value> entered;
    for (Operation *op : region) {
      auto m = dyn_cast<MatmulOp>(op);
      if (!m || !llvm::is_contained(columns, m))
        continue;
      Value h = m.getLhs();
      Value &e = entered[h];
      if (!e) {
        OpBuilder b(m);
        e = TpEnterOp::create(b, m.getLoc(), h.getType(), h, group);
      }
      m.getLhsMutable().assign(e);
    }
    for (Operation *op : region)
      if (failed(propagate(op, columns)))
        return failure();
    // A whole value read inside the branch (an exporter's rotary tables
    // kept as parameters, a norm's weight inside attention) gets from each
    // rank the gradient of that rank's share only: it enters through f as
    // the branch's input does, so the shares are summed.
    DenseMap<Value, Value> whole;
    for (Operation *op : region)
      for (OpOperand &use : op->getOpOperands()) {
        Value v = use.get();
        Operation *def = v.getDefiningOp();
        if (split.lookup(v).dim >= 0 || !isa<FloatType>(getElementTypeOrSelf(v.getType())) ||
            (def && (isa<arith::ConstantOp, TpEnterOp>(def) || claimed.contains(def))))
          continue; // split, without a gradient (integers, masks, constants), or done
        Value &e = whole[v];
        if (!e) {
          OpBuilder b(op);
          e = TpEnterOp::create(b, op->getLoc(), v.getType(), v, group);
        }
        use.set(e);
      }
    // P: this rank's columns of the weight, its partial sums summed.
    auto in = split.lookup(r.getLhs());
    int64_t last = tensorOf(r.getLhs()).getRank() - 1;
    if (in.dim != last || in.groups != 1)
      return fail(r, "its input is not split along its last dimension in one group");
    if (failed(slice(r.getRhs().getDefiningOp<LoadOp>(), inputDim(r), 1, r)))
      return failure();
    OpBuilder b(r->getContext());
    b.setInsertionPointAfter(r);
    auto sum = AllReduceOp::create(b, r.getLoc(), r.getType(), TokenType::get(b.getContext()),
                                   r.getResult(), ValueRange{}, group, ReduceKind::sum,
                                   StreamAttr::get(b.getContext(), StreamKind::comm, 0));
    WaitOp::create(b, r.getLoc(), ValueRange{sum.getToken()});
    r.getResult().replaceAllUsesExcept(sum.getResult(), sum);
    return success();
  }

  /// Retypes `op` for this rank's share, from its operands' splits.
  LogicalResult propagate(Operation *op, ArrayRef<MatmulOp> columns) {
    auto setResult = [&](Split s) {
      Value res = op->getResult(0);
      res.setType(local(tensorOf(res), s));
      split[res] = s;
      return success();
    };
    if (auto m = dyn_cast<MatmulOp>(op); m && llvm::is_contained(columns, m)) {
      int64_t groups = groupsOf(m.getResult());
      if (failed(slice(m.getRhs().getDefiningOp<LoadOp>(), outputDim(m), groups, op)))
        return failure();
      return setResult({tensorOf(m.getResult()).getRank() - 1, groups});
    }
    SmallVector<Split> in;
    bool any = false;
    for (Value v : op->getOperands()) {
      in.push_back(split.lookup(v));
      any |= in.back().dim >= 0;
    }
    if (!any)
      return fail(op, "reads nothing split: it lies in a branch but off its path");
    if (isa<AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp, SelectOp>(op))
      return binary(op, in, setResult);
    if (isa<NegOp, SiluOp, GeluOp, ExpOp, TanhOp, SigmoidOp, CastOp, ReluOp, SqrtOp, RsqrtOp,
            ErfOp, SinOp, CosOp, LogOp>(op) &&
        op->getNumOperands() == 1)
      return setResult(in[0]);
    if (auto s = dyn_cast<SliceOp>(op))
      return sliceOp(s, in[0], setResult);
    if (auto t = dyn_cast<TransposeOp>(op)) {
      ArrayRef<int64_t> perm = t.getPerm();
      int64_t at = std::find(perm.begin(), perm.end(), in[0].dim) - perm.begin();
      return setResult({at, in[0].groups});
    }
    if (auto rs = dyn_cast<ReshapeOp>(op))
      return reshape(rs, in[0], setResult);
    if (auto bc = dyn_cast<BroadcastOp>(op)) {
      int64_t d = in[0].dim + tensorOf(bc.getResult()).getRank() - tensorOf(bc.getInput()).getRank();
      if (tensorOf(bc.getResult()).getDimSize(d) != tensorOf(bc.getInput()).getDimSize(in[0].dim) * n)
        return fail(op, "broadcasts along the dimension the ranks split");
      return setResult({d, in[0].groups});
    }
    if (auto c = dyn_cast<ConcatOp>(op)) {
      for (Split s : in)
        if (s.dim != in[0].dim || s.groups != in[0].groups || s.dim == int64_t(c.getDim()))
          return fail(op, "concatenates along the split dimension, or values split "
                          "differently");
      return setResult(in[0]);
    }
    if (isa<AttentionOp>(op)) {
      for (Split s : in)
        if (s.dim != 1 || s.groups != 1)
          return fail(op, "needs its query, key and value split by heads (dimension 1)");
      return setResult(in[0]);
    }
    if (auto sm = dyn_cast<SoftmaxOp>(op)) {
      if (int64_t(sm.getDim()) == in[0].dim)
        return fail(op, "normalises along the split dimension");
      return setResult(in[0]);
    }
    if (auto m = dyn_cast<MatmulOp>(op)) {
      // Batched products over split batch dimensions (attention written
      // as products).
      int64_t rank = tensorOf(m.getResult()).getRank();
      if (in[0].dim == in[1].dim && in[0].dim >= 0 && in[0].dim < rank - 2 &&
          tensorOf(m.getLhs()).getRank() == rank && tensorOf(m.getRhs()).getRank() == rank)
        return setResult(in[0]);
      return fail(op, "is a product whose operands are not split along one batch dimension");
    }
    return fail(op, "has no tensor-parallel rule (loom-tensor-parallel)");
  }

  template <typename F> LogicalResult binary(Operation *op, ArrayRef<Split> in, F setResult) {
    auto out = tensorOf(op->getResult(0));
    int64_t rank = out.getRank();
    Split s;
    for (auto [k, v] : llvm::enumerate(op->getOperands())) {
      if (in[k].dim < 0)
        continue;
      Split here{in[k].dim + rank - tensorOf(v).getRank(), in[k].groups};
      if (s.dim >= 0 && (s.dim != here.dim || s.groups != here.groups))
        return fail(op, "combines values split along different dimensions");
      s = here;
    }
    for (auto [k, v] : llvm::enumerate(op->getOperands())) {
      if (in[k].dim >= 0)
        continue;
      auto t = tensorOf(v);
      int64_t d = s.dim - (rank - t.getRank());
      if (d < 0 || t.getDimSize(d) == 1)
        continue; // broadcast along the split dimension: the same on every rank
      // A bias of the column product: this rank's part of it.
      Value operand = v;
      auto load = operand.getDefiningOp<LoadOp>();
      if (!load || t.getRank() != 1 || !isa<AddOp>(op) || t.getDimSize(0) != out.getDimSize(s.dim))
        return fail(op, "reads a value that is whole on every rank along the split dimension");
      if (failed(this->slice(load, 0, s.groups, op)))
        return failure();
    }
    return setResult(s);
  }

  template <typename F> LogicalResult sliceOp(SliceOp s, Split in, F setResult) {
    int64_t d = in.dim, full = tensorOf(s.getInput()).getDimSize(d) * n; // (already local)
    int64_t lo = s.getStart()[d], hi = s.getLimit()[d], step = s.getStep()[d];
    int64_t per = full / in.groups;
    if (step != 1 || lo % per || hi % per)
      return fail(s, "cuts the split dimension inside a group (" + Twine(lo) + ":" + Twine(hi) +
                         " of " + Twine(in.groups) + " groups of " + Twine(per) + ")");
    SmallVector<int64_t> start(s.getStart()), limit(s.getLimit());
    start[d] = lo / n;
    limit[d] = hi / n;
    s.setStart(start);
    s.setLimit(limit);
    return setResult({d, (hi - lo) / per});
  }

  template <typename F> LogicalResult reshape(ReshapeOp r, Split in, F setResult) {
    ArrayRef<int64_t> from = tensorOf(r.getInput()).getShape(),
                      to = tensorOf(r.getResult()).getShape();
    int64_t before = 1;
    for (int64_t k = 0; k < in.dim; ++k)
      before *= from[k];
    int64_t prefix = 1;
    for (int64_t o = 0; o < int64_t(to.size()); ++o) {
      if (prefix == before && to[o] > 1) {
        // Groups survive only a reshape that leaves the split dimension as
        // it is (an exporter's [B*T, 3D] to [B, T, 3D]).
        if (in.groups != 1 && to[o] != from[in.dim] * n)
          return fail(r, "reshapes a value split in several groups");
        if (to[o] % n)
          return fail(r, "dimension " + Twine(o) + " (" + Twine(to[o]) +
                             ", the heads or units it splits) does not divide by " + Twine(n) +
                             " ranks (--tensor-parallel)");
        return setResult({o, in.groups});
      }
      prefix *= to[o];
    }
    return fail(r, "moves the split dimension where the ranks' shares are not contiguous");
  }

  /// The sliced parameters' declarations and every load of them.
  LogicalResult finishParams() {
    MLIRContext *ctx = module.getContext();
    DenseMap<StringAttr, RankedTensorType> localType;
    for (auto &[p, dg] : slices) {
      auto [dim, groups] = dg;
      auto t = local(cast<RankedTensorType>(p.getType()), {dim, groups});
      localType[p.getSymNameAttr()] = t;
      if (p.getValue())
        return fail(p, "parameter '" + p.getSymName() +
                           "' has imported values: splitting them is not built (give "
                           "loomc --init=random, or leave --tensor-parallel off)");
      p.setType(t);
      p->setAttr(LoomDialect::TpSliceAttrHelper::getNameStr(), DenseI64ArrayAttr::get(ctx, {dim, groups}));
    }
    LogicalResult result = success();
    module.walk([&](LoadOp l) {
      auto it = localType.find(l.getNameAttr().getAttr());
      if (it == localType.end() || failed(result))
        return;
      if (!claimed.contains(l)) {
        result = fail(l, "loads '" + l.getName() + "', which the ranks split, where its whole "
                         "value is read (a tied weight, or a use outside its branch)");
        return;
      }
      l.getResult().setType(it->second);
    });
    if (failed(result))
      return failure();
    module->setAttr(LoomDialect::TensorParallelAttrHelper::getNameStr(),
                    IntegerAttr::get(IntegerType::get(ctx, 64), n));
    return success();
  }
};

} // namespace
