// kernels_rows_test.cpp: the row ops (norms, softmax), embeddings, losses,
// sparse aggregation, optimizers, dropout and attention on every backend,
// against float64 references (kernels_harness.h says how and to what
// bound).
#include "kernels_harness.h"

namespace {

/// float64 layer/RMS norm of one [rows, d] input.
void normRef(const std::vector<float> &x, const std::vector<float> &w,
             const std::vector<float> *b, int64_t rows, int64_t d, double eps,
             bool rms, D &y) {
  y.assign(rows * d, 0);
  for (int64_t r = 0; r < rows; ++r) {
    double mean = 0, var = 0;
    if (!rms) {
      for (int64_t j = 0; j < d; ++j)
        mean += x[r * d + j];
      mean /= d;
    }
    for (int64_t j = 0; j < d; ++j)
      var += (x[r * d + j] - mean) * (x[r * d + j] - mean);
    double rstd = 1 / std::sqrt(var / d + eps);
    for (int64_t j = 0; j < d; ++j)
      y[r * d + j] = (x[r * d + j] - mean) * rstd * w[j] + (b ? (*b)[j] : 0.0);
  }
}

/// The same fixture under its own name (a suite is instantiated once).
class RowKernels : public Kernels {};

TEST_P(RowKernels, NormsForwardAndBackward) {
  // Rows the GPU keeps in one warp's registers one element a lane an access
  // (300), as whole 16-byte words with the gradient's column sums over
  // several chunks of rows (20 x 256), and rows too long for registers,
  // which the block kernels take (1100).
  for (auto shape : {std::pair<int64_t, int64_t>{6, 300}, {20, 256}, {3, 1100}}) {
  const int64_t rows = shape.first, d = shape.second; // captured below (no C++17 binding)
  SCOPED_TRACE("rows " + std::to_string(rows) + " x " + std::to_string(d));
  const double eps = 1e-5;
  for (int rms = 0; rms < 2; ++rms) {
    std::vector<float> x = randn(rows * d, 2.0f, 1.0f), w = randn(d, 0.5f, 1.0f),
                       b = randn(d), dy = randn(rows * d);
    Harness probe(dev, s, dt());
    auto X = probe.seen(x), W = probe.seen(w), Bv = probe.seen(b), G = probe.seen(dy);
    D y;
    normRef(X, W, rms ? nullptr : &Bv, rows, d, eps, rms, y);
    // Backward by central differences of L = sum(dy * y) in float64: an
    // independent check of the analytic formulas in the kernels.
    auto loss = [&](const std::vector<double> &xx, const std::vector<double> &ww,
                    const std::vector<double> &bb) {
      double L = 0;
      for (int64_t r = 0; r < rows; ++r) {
        double mean = 0, var = 0;
        if (!rms) {
          for (int64_t j = 0; j < d; ++j)
            mean += xx[r * d + j];
          mean /= d;
        }
        for (int64_t j = 0; j < d; ++j)
          var += (xx[r * d + j] - mean) * (xx[r * d + j] - mean);
        double rstd = 1 / std::sqrt(var / d + eps);
        for (int64_t j = 0; j < d; ++j)
          L += G[r * d + j] * ((xx[r * d + j] - mean) * rstd * ww[j] + (rms ? 0 : bb[j]));
      }
      return L;
    };
    std::vector<double> xd(X.begin(), X.end()), wd(W.begin(), W.end()),
        bd(Bv.begin(), Bv.end());
    D dx(rows * d), dw(d), db(d);
    const double h = 1e-6;
    for (size_t i = 0; i < xd.size(); ++i) {
      double o = xd[i];
      xd[i] = o + h; double lp = loss(xd, wd, bd);
      xd[i] = o - h; double lm = loss(xd, wd, bd);
      xd[i] = o;
      dx[i] = (lp - lm) / (2 * h);
    }
    for (int64_t j = 0; j < d; ++j) {
      double o = wd[j];
      wd[j] = o + h; double lp = loss(xd, wd, bd);
      wd[j] = o - h; double lm = loss(xd, wd, bd);
      wd[j] = o;
      dw[j] = (lp - lm) / (2 * h);
      db[j] = 0;
      for (int64_t r = 0; r < rows; ++r)
        db[j] += G[r * d + j];
    }
    SCOPED_TRACE(rms ? "rms_norm" : "layer_norm");
    // Finite differences carry ~1e-8 of their own error: the fp32 bound
    // stays 1e-5 (bf16: 1e-2).
    std::vector<D> refs = {y, dx, dw};
    if (!rms)
      refs.push_back(db);
    check(refs, [&](Harness &hh) {
      void *yo = hh.out(rows * d), *dxo = hh.out(rows * d), *dwo = hh.out(d),
           *dbo = hh.out(d);
      void *xi = hh.put(x), *wi = hh.put(w), *gi = hh.put(dy);
      if (rms) {
        EXPECT_EQ(LOOMRT_OK, loomrt_rms_norm(hh.s, hh.dt, xi, wi, yo, rows, d, eps));
        EXPECT_EQ(LOOMRT_OK, loomrt_rms_norm_grad(hh.s, hh.dt, gi, xi, wi, dxo,
                                                  dwo, rows, d, eps));
        return std::vector<std::vector<float>>{hh.get(yo, rows * d),
                                               hh.get(dxo, rows * d), hh.get(dwo, d)};
      }
      EXPECT_EQ(LOOMRT_OK, loomrt_layer_norm(hh.s, hh.dt, xi, wi, hh.put(b), yo,
                                             rows, d, eps));
      EXPECT_EQ(LOOMRT_OK, loomrt_layer_norm_grad(hh.s, hh.dt, gi, xi, wi, dxo,
                                                  dwo, dbo, rows, d, eps));
      return std::vector<std::vector<float>>{hh.get(yo, rows * d),
                                             hh.get(dxo, rows * d), hh.get(dwo, d),
                                             hh.get(dbo, d)};
    });
  }
  }
}

TEST_P(RowKernels, SoftmaxCausalScaledLogAndGrad) {
  // Two causal blocks of 4 query rows over 6 keys (the last 4 align with the
  // queries), scale 0.5; then rows the GPU keeps in registers: whole
  // 16-byte words per lane (256), a ragged end (300), and rows too long for
  // registers (1500).
  for (auto [rows, d, block] : {std::tuple<int64_t, int64_t, int64_t>{8, 6, 4},
                                {16, 256, 8}, {10, 300, 5}, {6, 1500, 3}}) {
  SCOPED_TRACE("rows " + std::to_string(rows) + " x " + std::to_string(d));
  const float scale = 0.5f;
  for (int log = 0; log < 2; ++log) {
    std::vector<float> x = randn(rows * d, 2.0f), dy = randn(rows * d);
    Harness probe(dev, s, dt());
    auto X = probe.seen(x);
    D y(rows * d);
    std::vector<double> yv(rows * d);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t vis = (r % block) + (d - block) + 1;
      auto [mx, sum] = rowExp(&X[r * d], vis, scale);
      for (int64_t j = 0; j < d; ++j) {
        double p = j < vis ? std::exp(scale * X[r * d + j] - mx) / sum : 0.0;
        y[r * d + j] = log ? (j < vis ? std::log(p) : -INFINITY) : p;
      }
    }
    SCOPED_TRACE(log ? "log_softmax" : "softmax");
    check({y}, [&](Harness &h) {
      void *yo = h.out(rows * d);
      EXPECT_EQ(LOOMRT_OK, loomrt_softmax(h.s, h.dt, h.put(x), yo, rows, d,
                                          scale, log, block));
      return std::vector<std::vector<float>>{h.get(yo, rows * d)};
    });
  }
  // Gradient given the (unmasked) output, with scale.
  std::vector<float> x = randn(rows * d), dy = randn(rows * d);
  for (int log = 0; log < 2; ++log) {
    Harness probe(dev, s, dt());
    auto X = probe.seen(x), G = probe.seen(dy);
    D dx(rows * d);
    std::vector<float> yin(rows * d);
    for (int64_t r = 0; r < rows; ++r) {
      auto [mx, sum] = rowExp(&X[r * d], d);
      for (int64_t j = 0; j < d; ++j) {
        double p = std::exp(X[r * d + j] - mx) / sum;
        yin[r * d + j] = float(log ? std::log(p) : p);
      }
    }
    auto Y = probe.seen(yin);
    for (int64_t r = 0; r < rows; ++r) {
      double acc = 0;
      for (int64_t j = 0; j < d; ++j)
        acc += log ? G[r * d + j] : double(G[r * d + j]) * Y[r * d + j];
      for (int64_t j = 0; j < d; ++j)
        dx[r * d + j] = scale * (log ? G[r * d + j] - std::exp(double(Y[r * d + j])) * acc
                                     : Y[r * d + j] * (G[r * d + j] - acc));
    }
    SCOPED_TRACE(log ? "log_softmax_grad" : "softmax_grad");
    check({dx}, [&](Harness &h) {
      void *o = h.out(rows * d);
      EXPECT_EQ(LOOMRT_OK, loomrt_softmax_grad(h.s, h.dt, h.put(dy), h.put(yin),
                                               o, rows, d, scale, log));
      return std::vector<std::vector<float>>{h.get(o, rows * d)};
    });
  }
  }
}

TEST_P(RowKernels, EmbeddingGathersAndScatterAdds) {
  const int64_t vocab = 11, d = 5, n = 9;
  std::vector<int64_t> idx = {3, 0, 10, 3, 3, 7, 0, 1, 9};
  std::vector<float> table = randn(vocab * d), dy = randn(n * d);
  Harness probe(dev, s, dt());
  auto T = probe.seen(table), G = probe.seen(dy);
  D out(n * d), grad(vocab * d, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      out[i * d + j] = T[idx[i] * d + j];
      grad[idx[i] * d + j] += G[i * d + j];
    }
  check({out, grad}, [&](Harness &h) {
    void *o = h.out(n * d);
    float *g = static_cast<float *>(h.alloc(vocab * d * 4));
    int64_t *ix = h.putT(idx);
    EXPECT_EQ(LOOMRT_OK, loomrt_embedding(h.s, h.dt, h.put(table), ix, o, n, d, vocab));
    EXPECT_EQ(LOOMRT_OK, loomrt_embedding_grad(h.s, h.dt, h.put(dy), ix, g, n, d, vocab));
    return std::vector<std::vector<float>>{h.get(o, n * d),
                                           h.get(g, vocab * d, LOOMRT_F32)};
  });
}

// The embedding gradient sums a repeated token's rows in position order on
// every backend (the GPU sorts the positions by token instead of adding
// atomically): the same bits on every run, and the CPU backend's bits.
TEST_P(RowKernels, EmbeddingGradIsDeterministic) {
  const int64_t vocab = 7, d = 64, n = 4096;
  std::vector<int64_t> idx(n);
  for (int64_t i = 0; i < n; ++i)
    idx[i] = (i * 5 + i / 3) % vocab;
  std::vector<float> dy = randn(n * d);
  auto run = [&](loomrt_device device, loomrt_stream stream) {
    Harness h(device, stream, dt());
    float *g = static_cast<float *>(h.alloc(vocab * d * 4));
    EXPECT_EQ(LOOMRT_OK, loomrt_embedding_grad(h.s, h.dt, h.put(dy), h.putT(idx), g, n, d, vocab))
        << loomrt_last_error();
    return h.get(g, vocab * d, LOOMRT_F32);
  };
  std::vector<float> first = run(dev, s);
  for (int k = 0; k < 3; ++k)
    EXPECT_EQ(run(dev, s), first) << "run " << k + 2;
  loomrt_device cpu = nullptr;
  loomrt_stream cs = nullptr;
  ASSERT_EQ(LOOMRT_OK, loomrt_device_open(LOOMRT_BACKEND_CPU, 0, &cpu));
  ASSERT_EQ(LOOMRT_OK, loomrt_stream_create(cpu, &cs));
  EXPECT_EQ(run(cpu, cs), first) << "against the CPU backend";
  loomrt_stream_destroy(cs);
  loomrt_device_close(cpu);
}

TEST_P(RowKernels, CrossEntropyAndGrad) {
  // Rows of whole 16-byte words in both dtypes (1000, and 4104: over two
  // words a thread of a 256-thread block, with a partial last round), rows
  // that are not (1001 classes: odd rows start off a word), and one row.
  const std::pair<int64_t, int64_t> shapes[] = {{12, 1000}, {5, 1001}, {3, 4104}, {1, 7}};
  for (auto [rows, classes] : shapes) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(classes));
    std::vector<float> logits = randn(rows * classes, 3.0f);
    std::vector<int64_t> labels(rows);
    for (int64_t r = 0; r < rows; ++r)
      labels[r] = (r * 379 + classes - 1) % classes; // the last class included
    std::vector<float> dloss = {0.75f};
    Harness probe(dev, s, dt());
    auto L = probe.seen(logits);
    double total = 0;
    D grad(rows * classes);
    for (int64_t r = 0; r < rows; ++r) {
      auto [mx, sum] = rowExp(&L[r * classes], classes);
      total += std::log(sum) + mx - L[r * classes + labels[r]];
      for (int64_t j = 0; j < classes; ++j)
        grad[r * classes + j] = (std::exp(L[r * classes + j] - mx) / sum -
                                 (j == labels[r])) * 0.75 / double(rows);
    }
    D loss = {total / double(rows)};
    // The loss is an fp32 scalar whatever the storage: fp32 bound for it.
    check({loss, grad}, [&, rows = rows, classes = classes](Harness &h) {
      float *lo = static_cast<float *>(h.alloc(4));
      void *g = h.out(rows * classes);
      void *li = h.put(logits);
      int64_t *lab = h.putT(labels);
      EXPECT_EQ(LOOMRT_OK, loomrt_cross_entropy(h.s, h.dt, li, lab, lo, rows, classes));
      EXPECT_EQ(LOOMRT_OK, loomrt_cross_entropy_grad(h.s, h.dt, li, lab, h.putT(dloss),
                                                     g, rows, classes));
      return std::vector<std::vector<float>>{h.get(lo, 1, LOOMRT_F32),
                                             h.get(g, rows * classes)};
    });
  }
}

TEST_P(RowKernels, SpmmAggregatesNeighbours) {
  // A 5-node graph with a self loop on each node, in CSR.
  std::vector<int64_t> rp = {0, 2, 5, 6, 8, 10};
  std::vector<int64_t> ci = {0, 1, 0, 1, 2, 2, 1, 3, 4, 0};
  std::vector<float> vals = randn(10, 0.3f, 0.5f), x = randn(5 * 33);
  Harness probe(dev, s, dt());
  auto V = probe.seen(vals), X = probe.seen(x);
  D ref(5 * 33, 0.0);
  for (int r = 0; r < 5; ++r)
    for (int64_t j = rp[r]; j < rp[r + 1]; ++j)
      for (int c = 0; c < 33; ++c)
        ref[r * 33 + c] += double(V[j]) * X[ci[j] * 33 + c];
  check({ref}, [&](Harness &h) {
    void *y = h.out(5 * 33);
    EXPECT_EQ(LOOMRT_OK, loomrt_spmm(h.s, h.dt, h.putT(rp), h.putT(ci), h.put(vals),
                                     h.put(x), y, 5, 33));
    return std::vector<std::vector<float>>{h.get(y, 5 * 33)};
  });
}

/// Mixture of experts: top-k routing and its gradient, each choice's slot
/// (GShard's order, a capacity that drops), and the moves into and out of
/// the experts' rows, against references written here.
TEST_P(RowKernels, MoeRoutingSlotsAndMoves) {
  const int64_t n = 37, e = 6, k = 2, d = 33, cap = 7, rows = e * cap;
  std::vector<float> probs = randn(n * e), dv = randn(n * k), x = randn(n * d),
                     w = randn(n * k, 0.5f, 0.5f), y = randn(rows * d);
  Harness probe(dev, s, dt());
  auto P = probe.seen(probs), DV = probe.seen(dv), X = probe.seen(x), W = probe.seen(w),
       Y = probe.seen(y);
  // top_k: descending, equal values by position (bf16 storage makes ties).
  std::vector<int64_t> idx(n * k);
  D vals(n * k), idxD(n * k), dprobs(n * e, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int64_t> order(e);
    for (int64_t c = 0; c < e; ++c)
      order[c] = c;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return P[t * e + a] > P[t * e + b]; });
    for (int64_t j = 0; j < k; ++j) {
      idx[t * k + j] = order[j];
      idxD[t * k + j] = double(order[j]);
      vals[t * k + j] = P[t * e + order[j]];
      dprobs[t * e + order[j]] = DV[t * k + j];
    }
  }
  // Slots: every first choice before any second, at most `cap` an expert.
  std::vector<int64_t> slots(n * k), used(e, 0);
  D slotsD(n * k), counts(e);
  for (int64_t j = 0; j < k; ++j)
    for (int64_t t = 0; t < n; ++t) {
      int64_t x0 = idx[t * k + j], p = used[x0]++;
      slots[t * k + j] = p < cap ? x0 * cap + p : -1;
      slotsD[t * k + j] = double(slots[t * k + j]);
    }
  int64_t dropped = 0;
  for (int64_t c = 0; c < e; ++c) {
    counts[c] = double(used[c]);
    dropped += std::max<int64_t>(0, used[c] - cap);
  }
  ASSERT_GT(dropped, 0) << "the capacity should drop some choices";
  D dispatched(rows * d, 0.0), weighted(rows * d, 0.0), combined(n * d, 0.0), dots(n * k, 0.0);
  for (int64_t i = 0; i < n * k; ++i) {
    int64_t r = slots[i], t = i / k;
    if (r < 0)
      continue;
    for (int64_t c = 0; c < d; ++c) {
      dispatched[r * d + c] = X[t * d + c];
      weighted[r * d + c] = double(X[t * d + c]) * W[i];
      combined[t * d + c] += double(W[i]) * Y[r * d + c];
      dots[i] += double(X[t * d + c]) * Y[r * d + c];
    }
  }
  auto asFloats = [](Harness &h, const int64_t *p, int64_t count) {
    std::vector<int64_t> v(count);
    EXPECT_EQ(LOOMRT_OK, loomrt_memcpy_async(h.s, v.data(), p, size_t(count) * 8));
    EXPECT_EQ(LOOMRT_OK, loomrt_stream_synchronize(h.s));
    return std::vector<float>(v.begin(), v.end());
  };
  check({vals, idxD, dprobs, slotsD, counts, dispatched, weighted, combined, dots},
        [&](Harness &h) {
          void *v = h.out(n * k), *dp = h.out(n * e), *buf = h.out(rows * d),
               *wbuf = h.out(rows * d), *comb = h.out(n * k * d), *dot = h.out(n * k);
          auto *ix = static_cast<int64_t *>(h.alloc(n * k * 8));
          auto *sl = static_cast<int64_t *>(h.alloc(n * k * 8));
          auto *cnt = static_cast<float *>(h.alloc(e * 4));
          void *xs = h.put(x), *ws = h.put(w), *ys = h.put(y);
          EXPECT_EQ(LOOMRT_OK, loomrt_top_k(h.s, h.dt, h.put(probs), v, ix, n, e, k));
          EXPECT_EQ(LOOMRT_OK, loomrt_top_k_grad(h.s, h.dt, h.put(dv), ix, dp, n, e, k));
          EXPECT_EQ(LOOMRT_OK, loomrt_moe_slots(h.s, ix, sl, cnt, n, k, e, cap));
          EXPECT_EQ(LOOMRT_OK, loomrt_moe_dispatch(h.s, h.dt, xs, sl, nullptr, buf, n, k, d, rows));
          EXPECT_EQ(LOOMRT_OK, loomrt_moe_dispatch(h.s, h.dt, xs, sl, ws, wbuf, n, k, d, rows));
          EXPECT_EQ(LOOMRT_OK, loomrt_moe_combine(h.s, h.dt, ys, sl, ws, comb, n, k, d, rows));
          EXPECT_EQ(LOOMRT_OK, loomrt_moe_slot_dot(h.s, h.dt, xs, ys, sl, dot, n, k, d, rows));
          return std::vector<std::vector<float>>{
              h.get(v, n * k), asFloats(h, ix, n * k), h.get(dp, n * e),
              asFloats(h, sl, n * k),  h.get(cnt, e, LOOMRT_F32), h.get(buf, rows * d),
              h.get(wbuf, rows * d),   h.get(comb, n * d), h.get(dot, n * k)};
        });
}

TEST_P(RowKernels, MoeBadArgumentsAreErrors) {
  Harness h(dev, s, dt());
  void *x = h.out(16);
  auto *ix = static_cast<int64_t *>(h.alloc(64));
  auto *cnt = static_cast<float *>(h.alloc(16));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_top_k(h.s, h.dt, x, x, ix, 4, 4, 5));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_top_k(h.s, h.dt, x, x, ix, 4, 4, 0));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_moe_slots(h.s, ix, ix, cnt, 4, 3, 2, 4));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_moe_slots(h.s, ix, ix, cnt, 4, 1, 2, 0));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_moe_dispatch(h.s, h.dt, nullptr, ix, nullptr, x, 4, 1, 4, 4));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_moe_combine(h.s, h.dt, x, ix, nullptr, x, 4, 0, 4, 4));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_moe_slot_dot(h.s, h.dt, x, nullptr, ix, x, 4, 1, 4, 4));
  if (GetParam().backend == LOOMRT_BACKEND_CPU) {
    // The CPU checks every table entry; the GPU drops a bad one.
    std::vector<int64_t> bad = {0, 1, 9, 2};
    auto *b = h.putT(bad);
    EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_moe_slots(h.s, b, ix, cnt, 4, 1, 4, 2));
    EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
              loomrt_moe_combine(h.s, h.dt, x, b, nullptr, x, 4, 1, 1, 4));
    EXPECT_NE(std::string(loomrt_last_error()).find("outside [-1, 4)"), std::string::npos)
        << loomrt_last_error();
  }
}

TEST_P(RowKernels, SgdWithNesterovMomentum) {
  if (dt() != LOOMRT_F32)
    GTEST_SKIP() << "SGD state is fp32 only";
  const size_t n = 4099;
  std::vector<float> p = randn(n), g = randn(n), buf = randn(n, 0.1f);
  for (int nesterov = 0; nesterov < 2; ++nesterov) {
    D rp(n), rb(n);
    for (size_t i = 0; i < n; ++i) {
      double b = 0.9 * buf[i] + g[i];
      rb[i] = b;
      rp[i] = p[i] - 0.7 * (nesterov ? g[i] + 0.9 * b : b);
    }
    check({rp, rb}, [&](Harness &h) {
      float *pp = static_cast<float *>(h.put(p)), *bb = static_cast<float *>(h.put(buf));
      EXPECT_EQ(LOOMRT_OK, loomrt_sgd_f32(h.s, 0.7f, 0.9f, nesterov, pp,
                                          static_cast<float *>(h.put(g)), bb, n));
      return std::vector<std::vector<float>>{h.get(pp, n), h.get(bb, n)};
    });
  }
}

/// The dropout mask as loomrt.h defines it, written again here: splitmix64
/// of the key and the element's counter, its top 53 bits as a draw in
/// (0, 1], kept above the ratio (in doubles; the kernels compare integers).
bool keptRef(uint64_t key, uint64_t i, double ratio) {
  auto mix = [](uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
  };
  return double((mix(key ^ mix(i)) >> 11) + 1) / 9007199254740992.0 > ratio;
}

TEST_P(RowKernels, DropoutMaskIsCounterBased) {
  const size_t n = 100003; // odd: no vector-width assumption
  std::vector<float> x = randn(n);
  const uint64_t key = loomrt_random_key(7, 3, 1);
  for (float ratio : {0.0f, 0.1f, 0.5f}) {
    Harness probe(dev, s, dt());
    std::vector<float> xs = probe.seen(x);
    D ref(n);
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i)
      if (keptRef(key, 5 + i, ratio))
        ++kept, ref[i] = xs[i] / (1.0 - ratio);
    // The kept fraction is a binomial draw: within 5 standard deviations.
    double sd = std::sqrt(n * ratio * (1 - ratio));
    EXPECT_NEAR(double(kept), n * (1 - ratio), 5 * sd + 0.5) << "ratio " << ratio;
    SCOPED_TRACE("ratio " + std::to_string(ratio));
    check({ref}, [&](Harness &h) {
      void *y = h.out(n);
      EXPECT_EQ(LOOMRT_OK, loomrt_dropout(h.s, h.dt, h.put(x), y, n, ratio, key, 5));
      return std::vector<std::vector<float>>{h.get(y, n)};
    });
  }
  // The offset is the element's place in a longer stream: a call on the
  // tail equals the tail of a call on the whole (a data-parallel rank's
  // rows of the global batch), and another step's key draws another mask.
  Harness h(dev, s, dt());
  void *xin = h.put(x), *whole = h.out(n), *tail = h.out(n - 1000), *other = h.out(n);
  ASSERT_EQ(LOOMRT_OK, loomrt_dropout(s, dt(), xin, whole, n, 0.3f, key, 0));
  ASSERT_EQ(LOOMRT_OK, loomrt_dropout(s, dt(), static_cast<char *>(xin) + 1000 * h.esize(),
                                      tail, n - 1000, 0.3f, key, 1000));
  ASSERT_EQ(LOOMRT_OK,
            loomrt_dropout(s, dt(), xin, other, n, 0.3f, loomrt_random_key(7, 4, 1), 0));
  std::vector<float> w = h.get(whole, n), t = h.get(tail, n - 1000), o = h.get(other, n);
  EXPECT_TRUE(std::equal(t.begin(), t.end(), w.begin() + 1000));
  size_t same = 0;
  for (size_t i = 0; i < n; ++i)
    same += (w[i] == 0) == (o[i] == 0);
  EXPECT_LT(double(same) / n, 0.7); // independent masks agree on 0.58 of elements
  // Bad ratios are errors with a message.
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_dropout(s, dt(), xin, whole, n, 1.0f, key, 0));
  EXPECT_NE(std::string(loomrt_last_error()).find("ratio"), std::string::npos);
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT, loomrt_dropout(s, dt(), xin, whole, n, -0.1f, key, 0));
}

/// float64 attention: o = softmax(scale q k^T + mask) v per block.
D attentionRef(const std::vector<double> &q, const std::vector<double> &k,
               const std::vector<double> &v, int64_t bh, int64_t t, int64_t s,
               int64_t dh, double scale, bool causal) {
  D o(bh * t * dh, 0.0);
  for (int64_t b = 0; b < bh; ++b)
    for (int64_t i = 0; i < t; ++i) {
      int64_t vis = causal ? i + (s - t) + 1 : s;
      std::vector<double> sc(vis);
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < vis; ++j) {
        double acc = 0;
        for (int64_t c = 0; c < dh; ++c)
          acc += q[(b * t + i) * dh + c] * k[(b * s + j) * dh + c];
        sc[j] = scale * acc;
        mx = std::max(mx, sc[j]);
      }
      for (int64_t j = 0; j < vis; ++j)
        sum += (sc[j] = std::exp(sc[j] - mx));
      for (int64_t j = 0; j < vis; ++j)
        for (int64_t c = 0; c < dh; ++c)
          o[(b * t + i) * dh + c] += sc[j] / sum * v[(b * s + j) * dh + c];
    }
  return o;
}

TEST_P(RowKernels, AttentionAndGradAgainstFiniteDifferences) {
  // Fewer queries than keys, so the causal mask's alignment is exercised.
  const int64_t bh = 2, t = 3, s = 4, dh = 5;
  const float scale = 0.4f;
  // bf16 keeps the probabilities in bf16 between the two GEMMs: 3e-2.
  const double bound = dt() == LOOMRT_BF16 ? 3e-2 : 1e-5;
  for (int causal = 0; causal < 2; ++causal) {
    std::vector<float> q = randn(bh * t * dh), k = randn(bh * s * dh),
                       v = randn(bh * s * dh), dout = randn(bh * t * dh);
    Harness probe(dev, s_(), dt());
    auto Q = probe.seen(q), K = probe.seen(k), V = probe.seen(v), G = probe.seen(dout);
    std::vector<double> qd(Q.begin(), Q.end()), kd(K.begin(), K.end()),
        vd(V.begin(), V.end());
    D o = attentionRef(qd, kd, vd, bh, t, s, dh, scale, causal);
    auto loss = [&]() {
      D oo = attentionRef(qd, kd, vd, bh, t, s, dh, scale, causal);
      double L = 0;
      for (size_t i = 0; i < oo.size(); ++i)
        L += G[i] * oo[i];
      return L;
    };
    auto fd = [&](std::vector<double> &x) {
      D g(x.size());
      for (size_t i = 0; i < x.size(); ++i) {
        double o0 = x[i];
        x[i] = o0 + 1e-6; double lp = loss();
        x[i] = o0 - 1e-6; double lm = loss();
        x[i] = o0;
        g[i] = (lp - lm) / 2e-6;
      }
      return g;
    };
    D dq = fd(qd), dk = fd(kd), dv = fd(vd);
    SCOPED_TRACE(causal ? "causal" : "full");
    check({o, dq, dk, dv}, [&](Harness &h) {
      void *ws = h.alloc(loomrt_attention_workspace_bytes(h.dt, bh, t, s, 1));
      void *qi = h.put(q), *ki = h.put(k), *vi = h.put(v), *oo = h.out(bh * t * dh);
      void *gq = h.out(bh * t * dh), *gk = h.out(bh * s * dh), *gv = h.out(bh * s * dh);
      EXPECT_EQ(LOOMRT_OK, loomrt_attention(h.s, h.dt, bh, t, s, dh, scale, causal,
                                            qi, ki, vi, oo, ws)) << loomrt_last_error();
      EXPECT_EQ(LOOMRT_OK, loomrt_attention_grad(h.s, h.dt, bh, t, s, dh, scale, causal,
                                                 qi, ki, vi, h.put(dout), gq, gk, gv, ws))
          << loomrt_last_error();
      return std::vector<std::vector<float>>{h.get(oo, bh * t * dh), h.get(gq, bh * t * dh),
                                             h.get(gk, bh * s * dh), h.get(gv, bh * s * dh)};
    }, bound);
  }
  float z = 0;
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_attention(s_(), dt(), 1, 5, 4, 2, 1.f, 1, &z, &z, &z, &z, &z));
  // The saved statistics are a buffer like the others.
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_attention_save(s_(), dt(), 1, 4, 4, 2, 1.f, 1, &z, &z, &z, &z, nullptr, &z));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_attention_grad_saved(s_(), dt(), 1, 4, 4, 2, 1.f, 1, &z, &z, &z, &z, nullptr,
                                        &z, &z, &z, &z, &z));
  EXPECT_EQ(16u, loomrt_attention_saved_bytes(2, 2));
}

// The shapes the GPU's fused (flash) kernels cover: bf16, head dim 64 or
// 128, t == s a multiple of 64 (two 64-row tiles here, so the online
// softmax rescales and the causal mask cuts inside a tile). Held to a float64 reference of
// the forward and of the analytic gradient (dV = P^T dO; dS = scale * P *
// (dP - rowsum(dP * P)) with dP = dO V^T; dQ = dS K; dK = dS^T Q). On the
// CPU, and on the GPU in fp32, this exercises the composed path.
TEST_P(RowKernels, AttentionTiledShapesAgainstFloat64) {
  const int64_t bh = 2, t = 128, s = 128;
  const double bound = dt() == LOOMRT_BF16 ? 3e-2 : 1e-5;
  // Head sizes 64 (GPT-2) and 128 (Llama): the fused kernels' two shapes.
  for (int64_t dh : {64, 128})
  for (int causal = 0; causal < 2; ++causal) {
    const float scale = 1.0f / std::sqrt(float(dh));
    std::vector<float> q = randn(bh * t * dh), k = randn(bh * s * dh),
                       v = randn(bh * s * dh), dout = randn(bh * t * dh);
    Harness probe(dev, s_(), dt());
    auto Q = probe.seen(q), K = probe.seen(k), V = probe.seen(v), G = probe.seen(dout);
    std::vector<double> qd(Q.begin(), Q.end()), kd(K.begin(), K.end()), vd(V.begin(), V.end());
    D o = attentionRef(qd, kd, vd, bh, t, s, dh, scale, causal);
    D dq(bh * t * dh, 0.0), dk(bh * s * dh, 0.0), dv(bh * s * dh, 0.0);
    for (int64_t b = 0; b < bh; ++b)
      for (int64_t i = 0; i < t; ++i) {
        int64_t vis = causal ? i + (s - t) + 1 : s;
        std::vector<double> p(vis), dp(vis);
        double mx = -INFINITY, sum = 0, dot = 0;
        for (int64_t j = 0; j < vis; ++j) {
          double acc = 0;
          for (int64_t c = 0; c < dh; ++c)
            acc += qd[(b * t + i) * dh + c] * kd[(b * s + j) * dh + c];
          p[j] = scale * acc;
          mx = std::max(mx, p[j]);
        }
        for (int64_t j = 0; j < vis; ++j)
          sum += (p[j] = std::exp(p[j] - mx));
        for (int64_t j = 0; j < vis; ++j) {
          p[j] /= sum;
          double acc = 0;
          for (int64_t c = 0; c < dh; ++c) {
            acc += G[(b * t + i) * dh + c] * vd[(b * s + j) * dh + c];
            dv[(b * s + j) * dh + c] += p[j] * G[(b * t + i) * dh + c];
          }
          dp[j] = acc;
          dot += acc * p[j];
        }
        for (int64_t j = 0; j < vis; ++j) {
          double ds = scale * p[j] * (dp[j] - dot);
          for (int64_t c = 0; c < dh; ++c) {
            dq[(b * t + i) * dh + c] += ds * kd[(b * s + j) * dh + c];
            dk[(b * s + j) * dh + c] += ds * qd[(b * t + i) * dh + c];
          }
        }
      }
    for (bool fused : {false, true})
    for (bool saved : {false, true}) {
    // Both the composed path and the backends' fused kernels; the gradient
    // recomputing the forward, and reading its saved output and row
    // statistics (loomrt_attention_save / _grad_saved).
    loomrt::setFusedAttention(fused);
    SCOPED_TRACE("head size " + std::to_string(dh) + (causal ? ", causal" : ", full") +
                 (fused ? ", fused kernels allowed" : "") +
                 (saved ? ", saved statistics" : ""));
    check({o, dq, dk, dv}, [&](Harness &h) {
      void *ws = h.alloc(loomrt_attention_workspace_bytes(h.dt, bh, t, s, 1));
      void *st = h.alloc(loomrt_attention_saved_bytes(bh, t));
      void *qi = h.put(q), *ki = h.put(k), *vi = h.put(v), *oo = h.out(bh * t * dh);
      void *gq = h.out(bh * t * dh), *gk = h.out(bh * s * dh), *gv = h.out(bh * s * dh);
      if (saved) {
        EXPECT_EQ(LOOMRT_OK, loomrt_attention_save(h.s, h.dt, bh, t, s, dh, scale, causal, qi,
                                                   ki, vi, oo, st, ws))
            << loomrt_last_error();
        EXPECT_EQ(LOOMRT_OK,
                  loomrt_attention_grad_saved(h.s, h.dt, bh, t, s, dh, scale, causal, qi, ki, vi,
                                              oo, st, h.put(dout), gq, gk, gv, ws))
            << loomrt_last_error();
      } else {
        EXPECT_EQ(LOOMRT_OK, loomrt_attention(h.s, h.dt, bh, t, s, dh, scale, causal, qi, ki, vi,
                                              oo, ws)) << loomrt_last_error();
        EXPECT_EQ(LOOMRT_OK, loomrt_attention_grad(h.s, h.dt, bh, t, s, dh, scale, causal, qi,
                                                   ki, vi, h.put(dout), gq, gk, gv, ws))
            << loomrt_last_error();
      }
      return std::vector<std::vector<float>>{h.get(oo, bh * t * dh), h.get(gq, bh * t * dh),
                                             h.get(gk, bh * s * dh), h.get(gv, bh * s * dh)};
    }, bound);
    }
    loomrt::setFusedAttention(true);
  }
}

TEST(KernelsCpu, BadIndicesAreErrorsNotCrashes) {
  loomrt_device dev;
  loomrt_stream s;
  LOOMRT_ASSERT_OK(loomrt_device_open(LOOMRT_BACKEND_CPU, 0, &dev));
  LOOMRT_ASSERT_OK(loomrt_stream_create(dev, &s));
  float table[4] = {1, 2, 3, 4}, out[2], loss;
  int64_t idx[2] = {1, 4};
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_embedding(s, LOOMRT_F32, table, idx, out, 2, 1, 4));
  EXPECT_NE(std::string(loomrt_last_error()).find("index 4"), std::string::npos);
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_cross_entropy(s, LOOMRT_F32, table, idx, &loss, 2, 2));
  EXPECT_NE(std::string(loomrt_last_error()).find("label"), std::string::npos);
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_softmax(s, LOOMRT_F32, table, out, 3, 1, 1.f, 0, 2));
  EXPECT_EQ(LOOMRT_ERR_INVALID_ARGUMENT,
            loomrt_unary(s, LOOMRT_EXP, loomrt_dtype(7), table, out, 1));
  loomrt_stream_destroy(s);
  loomrt_device_close(dev);
}


INSTANTIATE_TEST_SUITE_P(AllBackends, RowKernels, LOOMRT_KERNEL_PARAMS, paramName);

} // namespace
