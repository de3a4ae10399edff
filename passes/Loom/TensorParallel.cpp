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
// all-reduce. Norms stay whole on every rank; the embedding and the head
// are split by vocabulary (splitVocabulary) and, with sequence-parallel,
// the ops between the branches run on each rank's tokens (splitSequence).
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

  /// What sequence parallelism rewrites (splitSequence, below): each
  /// branch's f (the tp_enter before its column products), its g (the
  /// all-reduce after its row product) and the ops between (the branch's
  /// interior, whole-value tp_enters included).
  llvm::SetVector<Operation *> entries, exits, interior;

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
    if (vocabParallel && failed(splitVocabulary(fwd)))
      return failure();
    if (failed(finishParams()))
      return failure();
    return sequenceParallel ? splitSequence(fwd) : success();
  }

  // The vocabulary-parallel embedding and cross-entropy (below the struct).
  LogicalResult splitVocabulary(func::FuncOp fwd);
  /// `v` reduced over the group on the comm stream, waited for at once.
  AllReduceOp reduceOver(OpBuilder &b, Location loc, Value v, ReduceKind k = ReduceKind::sum);
  Value rankOffset(OpBuilder &b, Location loc, int64_t per);
  Value inRange(OpBuilder &b, Location loc, Value ids, int64_t per, Value &local);
  void splitEmbedding(EmbeddingOp e, int64_t per);
  void splitLoss(MatmulOp head, CrossEntropyOp ce, int64_t per);

  // Sequence parallelism (below the struct).
  int64_t tokens = 0; // P: the tokens of a step, every rank's P / N
  DenseMap<Value, RankedTensorType> whole; // a shard's full type
  DenseMap<Value, Value> shardOf, enteredOf;
  LogicalResult splitSequence(func::FuncOp fwd);
  LogicalResult shardOp(Operation *op);
  LogicalResult shardLoss(CrossEntropyOp ce);
  LogicalResult shardOperands(Operation *op, RankedTensorType full, int64_t k);
  bool isShard(Value v) const { return whole.count(v) > 0; }
  int64_t tokenDims(RankedTensorType t);
  RankedTensorType flatType(RankedTensorType t);
  RankedTensorType shardType(RankedTensorType t);
  Value sharded(Value v);
  Value entered(Value v);
  Value gathered(Value v, Operation *before);

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
        entries.insert(e.getDefiningOp());
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
          interior.insert(e.getDefiningOp());
        }
        use.set(e);
      }
    interior.insert(region.begin(), region.end());
    // P: this rank's columns of the weight, its partial sums summed.
    auto in = split.lookup(r.getLhs());
    int64_t last = tensorOf(r.getLhs()).getRank() - 1;
    if (in.dim != last || in.groups != 1)
      return fail(r, "its input is not split along its last dimension in one group");
    if (failed(slice(r.getRhs().getDefiningOp<LoadOp>(), inputDim(r), 1, r)))
      return failure();
    OpBuilder b(r->getContext());
    b.setInsertionPointAfter(r);
    AllReduceOp sum = reduceOver(b, r.getLoc(), r.getResult());
    r.getResult().replaceAllUsesExcept(sum.getResult(), sum);
    exits.insert(sum);
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
    // Rotary embeddings rotate within a head's row: split heads stay split.
    if (isa<RotaryOp>(op)) {
      if (in[0].dim < 0 || in[0].dim >= tensorOf(op->getResult(0)).getRank() - 2 ||
          in[1].dim >= 0 || in[2].dim >= 0)
        return fail(op, "rotates along the split dimension, or its tables are split");
      return setResult(in[0]);
    }
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


//===----------------------------------------------------------------------===//
// The vocabulary-parallel embedding and cross-entropy (Shoeybi et al. 2019,
// section 3: "parallelize the input embedding weight matrix ... along the
// vocabulary dimension", and the output layer's cross-entropy fused so
// that no rank gathers the logits)
//===----------------------------------------------------------------------===//
//
// Rank r keeps rows [r V/N, (r+1) V/N) of the embedding table and of the
// LM head (GPT's tied weight is both). The embedding looks up the ids in
// its rows, zeroes the others' and sums over the group (an exit, g: with
// sequence parallelism a reduce-scatter). The head is a column-parallel
// product of the whole hidden state (an entry, f: with sequence
// parallelism an all-gather), and the loss is computed from the ranks'
// logits of their own rows: the maximum, the sum of exponentials and the
// target's logit each reduced over the group, so each rank holds [tokens,
// V/N] logits, never [tokens, V]. A table or head read in any other way
// stays whole.

AllReduceOp TensorParallel::reduceOver(OpBuilder &b, Location loc, Value v, ReduceKind k) {
  auto op = AllReduceOp::create(b, loc, v.getType(), TokenType::get(b.getContext()), v,
                                ValueRange{}, group, k,
                                StreamAttr::get(b.getContext(), StreamKind::comm, 0));
  WaitOp::create(b, loc, ValueRange{op.getToken()});
  return op;
}

/// This rank's first row: element r of [0, per, 2 per, ...].
Value TensorParallel::rankOffset(OpBuilder &b, Location loc, int64_t per) {
  auto i64 = b.getI64Type();
  SmallVector<int64_t> firsts;
  for (int64_t r = 0; r < n; ++r)
    firsts.push_back(r * per);
  auto all = RankedTensorType::get({n}, i64);
  Value c = arith::ConstantOp::create(b, loc, all, DenseElementsAttr::get(all, ArrayRef(firsts)));
  return ShardOp::create(b, loc, RankedTensorType::get({1}, i64), c, group);
}

/// 1 where `ids` falls in this rank's rows, else 0; `local` is the row
/// within them (0 outside).
Value TensorParallel::inRange(OpBuilder &b, Location loc, Value ids, int64_t per, Value &local) {
  auto t = tensorOf(ids);
  auto one = RankedTensorType::get({1}, t.getElementType());
  auto scalar = [&](int64_t v) -> Value {
    return arith::ConstantOp::create(b, loc, one, DenseElementsAttr::get(one, ArrayRef(v)));
  };
  Value rel = SubOp::create(b, loc, t, ids, rankOffset(b, loc, per));
  Value in = MulOp::create(b, loc, t, LeOp::create(b, loc, t, scalar(0), rel),
                           LtOp::create(b, loc, t, rel, scalar(per)));
  local = MulOp::create(b, loc, t, rel, in);
  return in;
}

/// The masked lookup of this rank's rows, summed over the group.
void TensorParallel::splitEmbedding(EmbeddingOp e, int64_t per) {
  OpBuilder b(e);
  Location loc = e.getLoc();
  auto ids = tensorOf(e.getIndices()), out = tensorOf(e.getResult());
  Value local;
  Value in = inRange(b, loc, e.getIndices(), per, local);
  e.getIndicesMutable().assign(local);
  b.setInsertionPointAfter(e);
  SmallVector<int64_t> col(ids.getShape());
  col.push_back(1);
  Value mask = CastOp::create(b, loc, RankedTensorType::get(ids.getShape(), out.getElementType()),
                              in);
  mask = ReshapeOp::create(b, loc, RankedTensorType::get(col, out.getElementType()), mask);
  Value part = MulOp::create(b, loc, out, e.getResult(), mask);
  AllReduceOp sum = reduceOver(b, loc, part);
  e.getResult().replaceAllUsesExcept(sum.getResult(), part.getDefiningOp());
  exits.insert(sum);
  for (Operation *op = e.getIndices().getDefiningOp(); op != sum; op = op->getNextNode())
    if (!exits.contains(op))
      interior.insert(op);
}

/// The cross-entropy of the ranks' logits of their own rows of the
/// vocabulary: mean_i(log sum_v exp(z_iv - m_i) + m_i - z_i,target), with
/// m_i the row's maximum over the group (a shift without a gradient).
void TensorParallel::splitLoss(MatmulOp head, CrossEntropyOp ce, int64_t per) {
  OpBuilder b(head);
  Location loc = head.getLoc();
  Operation *first = &*b.getInsertionPoint();
  Value h = TpEnterOp::create(b, loc, head.getLhs().getType(), head.getLhs(), group);
  entries.insert(h.getDefiningOp());
  head.getLhsMutable().assign(h);
  auto narrow = [per](Value v, int64_t dim) {
    auto t = tensorOf(v);
    SmallVector<int64_t> shape(t.getShape());
    shape[dim] = per;
    v.setType(RankedTensorType::get(shape, t.getElementType(), t.getEncoding()));
  };
  // A transposed weight's transpose: its rows of the vocabulary too.
  if (auto t = head.getRhs().getDefiningOp<TransposeOp>())
    narrow(t.getResult(), outputDim(head));
  // The head's logits and the reshapes to the loss: V/N wide.
  for (Value v = head.getResult();; v = (*v.getUsers().begin())->getResult(0)) {
    narrow(v, tensorOf(v).getRank() - 1);
    if (v == ce.getLogits())
      break;
  }
  auto lt = tensorOf(ce.getLogits());
  b.setInsertionPoint(ce);
  loc = ce.getLoc();
  auto labels = tensorOf(ce.getLabels());
  int64_t rows = labels.getNumElements();
  Type f32 = b.getF32Type(), i64 = labels.getElementType();
  auto ty = [&](ArrayRef<int64_t> s, Type e) { return RankedTensorType::get(s, e); };
  auto over = [&](Value r, ReduceKind k) { return reduceOver(b, loc, r, k).getResult(); };
  // In fp32 whatever the logits' type (as the fused loss computes).
  Value z = ReshapeOp::create(b, loc, ty({rows, per}, lt.getElementType()), ce.getLogits());
  Operation *stats = z.getDefiningOp();
  if (lt.getElementType() != f32)
    z = CastOp::create(b, loc, ty({rows, per}, f32), z);
  Value lm = ReduceOp::create(b, loc, ty({rows, 1}, f32), ReduceKind::max, z,
                              b.getDenseI64ArrayAttr({1}), true);
  Value m = StopGradientOp::create(b, loc, over(lm, ReduceKind::max));
  Value e = ExpOp::create(b, loc, ty({rows, per}, f32), SubOp::create(b, loc, ty({rows, per}, f32), z, m));
  Value s = over(ReduceOp::create(b, loc, ty({rows, 1}, f32), ReduceKind::sum, e,
                                  b.getDenseI64ArrayAttr({1}), true),
                 ReduceKind::sum);
  // The target's logit: row i's element at its local column, read as
  // element i * V/N + column of the flattened logits (zero off this rank).
  Value lab = ReshapeOp::create(b, loc, ty({rows}, i64), ce.getLabels());
  Value col;
  Value in = inRange(b, loc, lab, per, col);
  SmallVector<int64_t> starts;
  for (int64_t i = 0; i < rows; ++i)
    starts.push_back(i * per);
  Value base = arith::ConstantOp::create(b, loc, ty({rows}, i64),
                                         DenseElementsAttr::get(ty({rows}, i64), ArrayRef(starts)));
  Value at = AddOp::create(b, loc, ty({rows}, i64), base, col);
  Value flat = ReshapeOp::create(b, loc, ty({rows * per, 1}, f32), z);
  Value zt = EmbeddingOp::create(b, loc, ty({rows, 1}, f32), flat, at);
  Value mask = ReshapeOp::create(b, loc, ty({rows, 1}, f32), CastOp::create(b, loc, ty({rows}, f32), in));
  zt = over(MulOp::create(b, loc, ty({rows, 1}, f32), zt, mask), ReduceKind::sum);
  Value tok = SubOp::create(b, loc, ty({rows, 1}, f32),
                            AddOp::create(b, loc, ty({rows, 1}, f32),
                                          LogOp::create(b, loc, ty({rows, 1}, f32), s), m),
                            zt);
  Value loss = ReduceOp::create(b, loc, ty({}, f32), ReduceKind::mean, tok,
                                b.getDenseI64ArrayAttr({0, 1}), false);
  if (tensorOf(ce.getResult()).getElementType() != f32)
    loss = CastOp::create(b, loc, ce.getResult().getType(), loss);
  ce.getResult().replaceAllUsesWith(loss);
  for (Operation *op = first; op != loss.getDefiningOp()->getNextNode();) {
    Operation *next = op->getNextNode();
    if (op != ce && !entries.contains(op))
      interior.insert(op);
    // The statistics in fp32 under mixed precision (from the reshape of
    // the logits on; the head's product stays a bf16 GEMM).
    if (op != ce && !op->isBeforeInBlock(stats) &&
        llvm::any_of(op->getResultTypes(),
                     [](Type t) { return isa<FloatType>(getElementTypeOrSelf(t)); }))
      op->setAttr(LoomDialect::Fp32AttrHelper::getNameStr(), UnitAttr::get(op->getContext()));
    op = next;
  }
  ce.erase();
}

LogicalResult TensorParallel::splitVocabulary(func::FuncOp fwd) {
  // The head: one cross-entropy, of a linear layer's logits (through
  // reshapes that keep the vocabulary last), each read once.
  SmallVector<CrossEntropyOp> losses;
  fwd.walk([&](CrossEntropyOp ce) { losses.push_back(ce); });
  MatmulOp head;
  if (losses.size() == 1) {
    Value z = losses[0].getLogits();
    int64_t v = tensorOf(z).getShape().back();
    while (z.hasOneUse() && z.getDefiningOp<ReshapeOp>() &&
           tensorOf(z.getDefiningOp<ReshapeOp>().getInput()).getShape().back() == v)
      z = z.getDefiningOp<ReshapeOp>().getInput();
    head = z.hasOneUse() ? z.getDefiningOp<MatmulOp>() : MatmulOp();
    // Its weight: a load, or (an exporter's tied head) the transpose of one.
    Value w = head ? head.getRhs() : Value();
    if (auto t = w ? w.getDefiningOp<TransposeOp>() : TransposeOp();
        t && t.getResult().hasOneUse() && tensorOf(w).getRank() == 2)
      w = t.getInput();
    auto load = w ? w.getDefiningOp<LoadOp>() : LoadOp();
    if (head && (head.getTransposeLhs() || !load || tensorOf(w).getRank() != 2 ||
                 claimed.contains(load)))
      head = {};
  }
  // A table or head weight is split when each of its loads is read only as
  // an embedding's table (split by rows) or as the head's weight, along its
  // vocabulary, which N divides, with integer ids of 64 bits.
  llvm::MapVector<ParamOp, SmallVector<OpOperand *>> uses;
  fwd.walk([&](LoadOp l) {
    ParamOp p = symtab->lookup<ParamOp>(l.getName());
    if (!p || tensorOf(l.getResult()).getRank() != 2 || slices.count(p))
      return;
    for (OpOperand &u : l.getResult().getUses())
      uses[p].push_back(&u);
  });
  SmallVector<std::pair<ParamOp, int64_t>> split;
  bool headSplit = false;
  for (auto &[p, us] : uses) {
    int64_t dim = -1;
    bool ok = true, embeds = false, heads = false;
    for (OpOperand *u : us) {
      int64_t d = -1;
      if (auto e = dyn_cast<EmbeddingOp>(u->getOwner());
          e && u->getOperandNumber() == 0 &&
          tensorOf(e.getIndices()).getElementType().isInteger(64))
        d = 0, embeds = true;
      else if (head && u->getOwner() == head && u->getOperandNumber() == 1)
        d = outputDim(head), heads = true;
      else if (head && isa<TransposeOp>(u->getOwner()) &&
               u->getOwner()->getResult(0) == head.getRhs())
        d = 1 - outputDim(head), heads = true; // the head reads it transposed
      ok &= d >= 0 && (dim < 0 || d == dim);
      dim = d;
    }
    if (!ok || !(embeds || heads) ||
        cast<RankedTensorType>(p.getType()).getDimSize(dim) % n != 0)
      continue;
    split.push_back({p, dim});
    headSplit |= heads;
  }
  for (auto [p, dim] : split) {
    int64_t per = cast<RankedTensorType>(p.getType()).getDimSize(dim) / n;
    for (OpOperand *u : uses[p]) {
      if (failed(slice(cast<LoadOp>(u->get().getDefiningOp()), dim, 1, u->getOwner())))
        return failure();
      if (auto e = dyn_cast<EmbeddingOp>(u->getOwner()))
        splitEmbedding(e, per);
    }
  }
  if (headSplit) {
    auto w = cast<RankedTensorType>(head.getRhs().getType());
    splitLoss(head, losses[0], w.getDimSize(outputDim(head)) / n);
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Sequence parallelism (Korthikanti et al., "Reducing Activation
// Recomputation in Large Transformer Models", MLSys 2023, section 4.2.2)
//===----------------------------------------------------------------------===//
//
// Outside the branches every op is per token (embeddings, norms, residual
// adds, the LM head, the loss), so each rank of the group keeps 1/N of the
// step's tokens there: the contiguous block r of the P tokens in the order
// the inputs hold them (a shard of [B*T, ...], which Megatron cuts along
// the sequence of its [T, B, D] layout). A sharded value's type is [P/N,
// rest...]: its leading dimensions that span the P tokens fold into one.
// f, a branch's entry, becomes an all-gather of the shards (its gradient a
// reduce-scatter); g, its exit, a reduce-scatter of the row product's
// partial sums (its gradient an all-gather): the same bytes as the
// all-reduce, which is a reduce-scatter and an all-gather.
//
// Gradients. The step's loss is the sum over the group of each rank's
// share (its tokens' mean over N), summed by an all-reduce whose gradient
// passes through. A whole value read by a per-token op on shards (a norm's
// weight, the LM head, the embedding table) enters through tp_enter, whose
// gradient sums the ranks' shares; a whole value spanning the tokens (the
// position embedding) is sharded by loom.shard, whose gradient is the
// all-gather of the shards' gradients: every rank then holds its whole
// gradient, as it holds its whole value.

/// How many leading dimensions of `t` span the step's tokens (their
/// product is P); 0 if none do.
int64_t TensorParallel::tokenDims(RankedTensorType t) {
  int64_t prod = 1;
  for (int64_t k = 0; k < t.getRank(); ++k) {
    prod *= t.getDimSize(k);
    if (prod == tokens)
      return k + 1;
    if (prod > tokens)
      return 0;
  }
  return 0;
}

/// A full type spanning the tokens, its token dimensions folded: [P,
/// rest...] (what the collectives and loom.shard cut along dimension 0).
RankedTensorType TensorParallel::flatType(RankedTensorType t) {
  SmallVector<int64_t> shape{tokens};
  llvm::append_range(shape, t.getShape().drop_front(tokenDims(t)));
  return RankedTensorType::get(shape, t.getElementType());
}

/// A full type spanning the tokens -> this rank's [P/N, rest...].
RankedTensorType TensorParallel::shardType(RankedTensorType t) {
  SmallVector<int64_t> shape(flatType(t).getShape());
  shape[0] /= n;
  return RankedTensorType::get(shape, t.getElementType(), t.getEncoding());
}

/// This rank's tokens of a value every rank holds whole (made once, after
/// its definition).
Value TensorParallel::sharded(Value v) {
  Value &s = shardOf[v];
  if (s)
    return s;
  auto t = tensorOf(v);
  OpBuilder b(module.getContext());
  b.setInsertionPointAfterValue(v);
  Value x = v;
  if (tokenDims(t) != 1)
    x = ReshapeOp::create(b, v.getLoc(), flatType(t), v);
  s = ShardOp::create(b, v.getLoc(), shardType(t), x, group);
  whole[s] = t;
  return s;
}

/// A whole value read on shards: its gradient summed over the group.
Value TensorParallel::entered(Value v) {
  if (!isa<FloatType>(getElementTypeOrSelf(v.getType())) ||
      (v.getDefiningOp() && isa<arith::ConstantOp, TpEnterOp>(v.getDefiningOp())))
    return v;
  Value &e = enteredOf[v];
  if (!e) {
    OpBuilder b(module.getContext());
    b.setInsertionPointAfterValue(v);
    e = TpEnterOp::create(b, v.getLoc(), v.getType(), v, group);
  }
  return e;
}

/// Every rank's shards of `v`, gathered before `before` into `v`'s full
/// type.
Value TensorParallel::gathered(Value v, Operation *before) {
  auto full = whole.lookup(v);
  OpBuilder b(before);
  Location loc = before->getLoc();
  RankedTensorType flat = flatType(full);
  auto g = AllGatherOp::create(b, loc, flat, TokenType::get(b.getContext()), v, ValueRange{}, group,
                               StreamAttr::get(b.getContext(), StreamKind::comm, 0));
  WaitOp::create(b, loc, ValueRange{g.getToken()});
  Value out = g.getResult();
  if (full.getShape() != flat.getShape())
    out = ReshapeOp::create(b, loc, full, out);
  return out;
}

LogicalResult TensorParallel::splitSequence(func::FuncOp fwd) {
  // P: every integer input (the tokens, the targets) holds one per token.
  for (BlockArgument a : fwd.getArguments()) {
    auto t = dyn_cast<RankedTensorType>(a.getType());
    if (!t || !isa<IntegerType>(t.getElementType()))
      continue;
    if (tokens && t.getNumElements() != tokens)
      return fail(fwd, "--sequence-parallel: the integer inputs hold different numbers of "
                       "tokens (" + Twine(tokens) + " and " + Twine(t.getNumElements()) + ")");
    tokens = t.getNumElements();
  }
  if (!tokens)
    return fail(fwd, "--sequence-parallel splits a language model's tokens: @forward has no "
                     "integer (token) input");
  if (tokens % n)
    return fail(fwd, "--sequence-parallel: the " + Twine(tokens) + " tokens of a step do not "
                     "divide over " + Twine(n) + " ranks");
  SmallVector<Operation *> ops;
  for (Operation &op : fwd.front())
    ops.push_back(&op);
  for (Operation *op : ops)
    if (failed(shardOp(op)))
      return failure();
  module->setAttr(LoomDialect::SequenceParallelAttrHelper::getNameStr(),
                  UnitAttr::get(module.getContext()));
  return success();
}

/// The loss: each rank's mean over its tokens, over N, summed over the
/// group (the mean over all P).
LogicalResult TensorParallel::shardLoss(CrossEntropyOp ce) {
  Operation *op = ce;
  Value res = ce.getResult();
  auto full = tensorOf(res);
  auto lt = whole.lookup(ce.getLogits());
  if (!lt || tokenDims(lt) != lt.getRank() - 1)
    return fail(op, "--sequence-parallel: its logits are not split by token");
  if (!isShard(ce.getLabels())) {
    if (tokenDims(tensorOf(ce.getLabels())) != tensorOf(ce.getLabels()).getRank())
      return fail(op, "--sequence-parallel: its labels do not hold one per token");
    ce.getLabelsMutable().assign(sharded(ce.getLabels()));
  }
  OpBuilder b(op->getContext());
  b.setInsertionPointAfter(op);
  Location loc = op->getLoc();
  auto plain = RankedTensorType::get({}, full.getElementType());
  Value inv = arith::ConstantOp::create(
      b, loc, full,
      DenseElementsAttr::get(plain, FloatAttr::get(full.getElementType(), 1.0 / double(n))
                                        .getValue()));
  Value part = MulOp::create(b, loc, full, res, inv);
  AllReduceOp sum = reduceOver(b, loc, part);
  res.replaceAllUsesExcept(sum.getResult(), part.getDefiningOp());
  return success();
}

/// An elementwise op's operands that are not shards: whole weights enter
/// through tp_enter, ones along the tokens are dropped, and a value whole
/// along the tokens (the position embedding) is stretched and sharded.
LogicalResult TensorParallel::shardOperands(Operation *op, RankedTensorType full, int64_t k) {
  for (OpOperand &use : op->getOpOperands()) {
    Value v = use.get();
    if (isShard(v)) {
      if (whole.lookup(v).getShape() != full.getShape())
        return fail(op, "--sequence-parallel: combines shards of different shapes");
      continue;
    }
    auto t = tensorOf(v);
    int64_t lead = full.getRank() - t.getRank();
    if (lead >= k) { // features only: whole on every rank
      use.set(entered(v));
      continue;
    }
    bool spans = false;
    for (int64_t d = std::max<int64_t>(lead, 0); d < k; ++d)
      spans |= t.getDimSize(d - lead) != 1;
    OpBuilder b(op);
    if (!spans) { // ones along the tokens: drop them
      auto feat = RankedTensorType::get(t.getShape().drop_front(k - lead), t.getElementType(),
                                        t.getEncoding());
      use.set(entered(ReshapeOp::create(b, op->getLoc(), feat, v)));
      continue;
    }
    // Whole along the tokens (the position embedding): stretched to the
    // result's shape, then this rank's tokens.
    auto stretched = RankedTensorType::get(full.getShape(), t.getElementType(), t.getEncoding());
    use.set(sharded(BroadcastOp::create(b, op->getLoc(), stretched, v)));
  }
  return success();
}

/// Rewrites `op` for the shards it reads (ops before any shard are left
/// whole: the position embedding's slice, say).
LogicalResult TensorParallel::shardOp(Operation *op) {
  // f: the branch's input gathered (a whole value read inside the branch
  // from the shards too).
  if (auto e = dyn_cast<TpEnterOp>(op); e && (entries.contains(op) || interior.contains(op))) {
    if (!isShard(e.getInput()))
      return success();
    e.getResult().replaceAllUsesWith(gathered(e.getInput(), op));
    op->erase();
    return success();
  }
  if (interior.contains(op)) {
    for (Value v : op->getOperands())
      if (isShard(v))
        return fail(op, "--sequence-parallel: reads the sequence shards inside a branch");
    return success();
  }
  // g: the row product's partial sums, each rank keeping its tokens' sum.
  if (exits.contains(op)) {
    auto sum = cast<AllReduceOp>(op);
    auto full = tensorOf(sum.getInput());
    if (!tokenDims(full))
      return fail(op, "--sequence-parallel: the branch's result does not span the step's "
                      "tokens in its leading dimensions");
    OpBuilder b(op);
    Location loc = op->getLoc();
    Value in = sum.getInput();
    if (tokenDims(full) != 1)
      in = ReshapeOp::create(b, loc, flatType(full), in);
    auto rs = ReduceScatterOp::create(b, loc, shardType(full), TokenType::get(b.getContext()),
                                      in, ValueRange{}, group, ReduceKind::sum,
                                      sum.getStream());
    auto wait = cast<WaitOp>(op->getNextNode());
    wait.getTokensMutable().assign(rs.getToken());
    whole[rs.getResult()] = full;
    sum.getResult().replaceAllUsesWith(rs.getResult());
    op->erase();
    return success();
  }
  // The embedding's token ids: this rank's tokens.
  if (auto e = dyn_cast<EmbeddingOp>(op); e && !isShard(e.getIndices()) &&
                                          tokenDims(tensorOf(e.getIndices())) ==
                                              tensorOf(e.getIndices()).getRank())
    e.getIndicesMutable().assign(sharded(e.getIndices()));
  if (llvm::none_of(op->getOperands(), [&](Value v) { return isShard(v); }))
    return success();
  if (isa<func::ReturnOp>(op))
    return fail(op, "--sequence-parallel: returns a value split over the ranks' tokens");
  if (op->getNumResults() != 1)
    return fail(op, "--sequence-parallel: has no sequence-parallel rule");
  Value res = op->getResult(0);
  auto full = tensorOf(res);
  int64_t k = tokenDims(full);
  auto finish = [&] {
    whole[res] = full;
    res.setType(shardType(full));
    return success();
  };
  if (auto ce = dyn_cast<CrossEntropyOp>(op))
    return shardLoss(ce);
  if (!k || k == full.getRank())
    return fail(op, "--sequence-parallel: its result does not hold the step's tokens in its "
                    "leading dimensions and features after them");
  if (isa<AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp, SelectOp>(op)) {
    if (failed(shardOperands(op, full, k)))
      return failure();
    return finish();
  }
  if (isa<DropoutOp>(op))
    return fail(op, "--sequence-parallel: dropout on the ranks' tokens would draw other masks "
                    "than one rank does (not built: --dropout=off)");
  if (isa<NegOp, SiluOp, GeluOp, ExpOp, TanhOp, SigmoidOp, CastOp, ReluOp, SqrtOp, RsqrtOp, ErfOp,
          SinOp, CosOp, LogOp>(op))
    return finish();
  if (isa<LayerNormOp, RmsNormOp>(op)) {
    if (!isShard(op->getOperand(0)))
      return fail(op, "--sequence-parallel: normalises a whole value by a split one");
    for (OpOperand &use : llvm::drop_begin(op->getOpOperands()))
      use.set(entered(use.get()));
    return finish();
  }
  if (auto m = dyn_cast<MatmulOp>(op)) {
    if (!isShard(m.getLhs()) || isShard(m.getRhs()) || m.getTransposeLhs() ||
        tensorOf(m.getRhs()).getRank() != 2)
      return fail(op, "--sequence-parallel: only a linear layer (split tokens times a whole "
                      "weight) has a rule");
    m.getRhsMutable().assign(entered(m.getRhs()));
    return finish();
  }
  if (auto e = dyn_cast<EmbeddingOp>(op)) {
    e.getTableMutable().assign(entered(e.getTable()));
    return finish();
  }
  if (isa<ReshapeOp>(op))
    return finish(); // the leading dimensions span the tokens (k > 0)
  return fail(op, "--sequence-parallel: has no sequence-parallel rule");
}

} // namespace
