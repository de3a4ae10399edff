// kernels_api.cpp: the C entry points of the compute kernels. Arguments are
// checked here once (null buffers, dtypes, ops, shapes), so every backend
// gets only valid work and bad calls from generated code fail with a message.
#include "common/backend.h"
#include "common/kernel_math.h"

#include <cmath>
#include <cstdint>
#include <string>

using loomrt::fail;

namespace {

loomrt_status bad(const char *fn, const std::string &msg) {
  return fail(LOOMRT_ERR_INVALID_ARGUMENT, std::string(fn) + ": " + msg);
}

bool validDtype(loomrt_dtype dt) { return dt == LOOMRT_F32 || dt == LOOMRT_BF16; }

/// Shared checks: stream, dtype (F32 or BF16; with `intToo`, I64 as well),
/// non-null buffers (when there is work).
loomrt_status common(const char *fn, loomrt_stream s, loomrt_dtype dt,
                     bool work, std::initializer_list<const void *> bufs,
                     bool intToo = false) {
  if (!s)
    return bad(fn, "null stream");
  if (!validDtype(dt) && !(intToo && dt == LOOMRT_I64))
    return bad(fn, "unknown dtype " + std::to_string(int(dt)) +
                       (dt == LOOMRT_I64 ? " (int64 is not a dtype of this kernel)" : ""));
  if (work)
    for (const void *b : bufs)
      if (!b)
        return bad(fn, "null buffer");
  return LOOMRT_OK;
}

loomrt_status checkRows(const char *fn, int64_t rows, int64_t d) {
  if (rows < 0 || d < 0)
    return bad(fn, "negative size");
  return LOOMRT_OK;
}

loomrt_status checkEmbedding(const char *fn, int64_t n, int64_t d, int64_t vocab) {
  if (n < 0 || d < 0 || vocab < 1)
    return bad(fn, "needs n >= 0, d >= 0, vocab >= 1");
  return LOOMRT_OK;
}

/// Every input dim is 1 or the output's; ranks in [0, LOOMRT_MAX_RANK].
loomrt_status checkBroadcast(const char *fn, const int64_t *in,
                             const int64_t *out, int rank, const char *which) {
  for (int d = 0; d < rank; ++d)
    if (in[d] < 0 || out[d] < 0 || (in[d] != 1 && in[d] != out[d]))
      return bad(fn, std::string(which) + " dimension " + std::to_string(d) +
                         " (" + std::to_string(in[d]) +
                         ") does not broadcast to " + std::to_string(out[d]));
  return LOOMRT_OK;
}

const loomrt::KernelOps &K(loomrt_stream s) { return *s->dev->ops->kernels; }
void *ST(loomrt_stream s) { return s->dev->state; }

} // namespace

#define LOOMRT_TRY(expr)                                                       \
  do {                                                                         \
    if (loomrt_status st_ = (expr))                                            \
      return st_;                                                              \
  } while (0)

extern "C" {

loomrt_status loomrt_unary(loomrt_stream s, loomrt_unary_op op,
                           loomrt_dtype dt, const void *x, void *y, size_t n) {
  LOOMRT_TRY(common("unary", s, dt, n > 0, {x, y}));
  if (op < 0 || op >= LOOMRT_UNARY_OP_COUNT)
    return bad("unary", "unknown op " + std::to_string(int(op)));
  return n ? K(s).unary(ST(s), s->impl, op, dt, x, y, n) : LOOMRT_OK;
}

loomrt_status loomrt_unary_grad(loomrt_stream s, loomrt_unary_op op,
                                loomrt_dtype dt, const void *dy, const void *x,
                                void *dx, size_t n) {
  LOOMRT_TRY(common("unary_grad", s, dt, n > 0, {dy, x, dx}));
  if (op < 0 || op >= LOOMRT_UNARY_OP_COUNT || !loomrt::hasUnaryGrad(op))
    return bad("unary_grad", "no gradient kernel for op " +
                                 std::to_string(int(op)));
  return n ? K(s).unary_grad(ST(s), s->impl, op, dt, dy, x, dx, n)
           : LOOMRT_OK;
}

loomrt_status loomrt_gather_rows(loomrt_stream s, const void *table, size_t numRows,
                                 size_t rowBytes, const int64_t *rows, size_t n, void *out,
                                 int flags) {
  if (!s)
    return bad("gather_rows", "null stream");
  if (rowBytes == 0)
    return bad("gather_rows", "rows of 0 bytes");
  if (n == 0)
    return LOOMRT_OK;
  if (!table || !rows || !out)
    return bad("gather_rows", "null buffer");
  if (!K(s).gather_rows)
    return fail(LOOMRT_ERR_UNSUPPORTED, "gather_rows: no kernel on this backend");
  if (flags & ~LOOMRT_GATHER_SORTED)
    return bad("gather_rows", "unknown flags " + std::to_string(flags));
  return K(s).gather_rows(ST(s), s->impl, table, numRows, rowBytes, rows, n, out, flags);
}

loomrt_status loomrt_dropout(loomrt_stream s, loomrt_dtype dt, const void *x,
                             void *y, size_t n, float ratio, uint64_t key,
                             uint64_t offset) {
  LOOMRT_TRY(common("dropout", s, dt, n > 0, {x, y}));
  if (!(ratio >= 0.0f && ratio < 1.0f))
    return bad("dropout", "ratio " + std::to_string(ratio) + " is not in [0, 1)");
  if (!n)
    return LOOMRT_OK;
  if (!K(s).dropout)
    return fail(LOOMRT_ERR_UNSUPPORTED, "dropout: no kernel on this backend");
  return K(s).dropout(ST(s), s->impl, dt, x, y, n, ratio, key, offset);
}

static loomrt_status onebitCheck(const char *fn, loomrt_stream s, size_t n,
                                 std::initializer_list<const void *> bufs) {
  if (!s)
    return bad(fn, "null stream");
  if (n % 8)
    return bad(fn, "n (" + std::to_string(n) + ") must be a multiple of 8 (whole bytes of signs)");
  if (n)
    for (const void *b : bufs)
      if (!b)
        return bad(fn, "null buffer");
  return LOOMRT_OK;
}

loomrt_status loomrt_onebit_compress(loomrt_stream s, const float *x, float *error,
                                     uint8_t *packed, float *scale, size_t n) {
  LOOMRT_TRY(onebitCheck("onebit_compress", s, n, {x, error, packed, scale}));
  if (!n)
    return LOOMRT_OK;
  if (!K(s).onebit_compress)
    return fail(LOOMRT_ERR_UNSUPPORTED, "onebit_compress: no kernel on this backend");
  return K(s).onebit_compress(ST(s), s->impl, x, error, packed, scale, n);
}

loomrt_status loomrt_onebit_decompress(loomrt_stream s, const uint8_t *packed,
                                       const float *scales, float *out, size_t chunks,
                                       size_t n) {
  LOOMRT_TRY(onebitCheck("onebit_decompress", s, n, {packed, scales, out}));
  if (!n || !chunks)
    return LOOMRT_OK;
  if (!K(s).onebit_decompress)
    return fail(LOOMRT_ERR_UNSUPPORTED, "onebit_decompress: no kernel on this backend");
  return K(s).onebit_decompress(ST(s), s->impl, packed, scales, out, chunks, n);
}

size_t loomrt_block_packed_bytes(loomrt_block_codec codec, size_t n, size_t block) {
  return (block ? 4 * (n / block) : 0) + (loomrt::blockCodecNibbles(codec) ? n / 2 : n);
}

static loomrt_status blockCheck(const char *fn, loomrt_stream s, loomrt_block_codec codec,
                                size_t n, size_t block, std::initializer_list<const void *> bufs) {
  if (!s)
    return bad(fn, "null stream");
  if (codec < LOOMRT_CODEC_FP8_E4M3 || codec > LOOMRT_CODEC_INT4)
    return bad(fn, "unknown codec " + std::to_string(int(codec)));
  if (block == 0 || block % 2 || n % block)
    return bad(fn, "n (" + std::to_string(n) + ") must be a multiple of the block (" +
                       std::to_string(block) + "), an even number above 0");
  if (n)
    for (const void *b : bufs)
      if (!b)
        return bad(fn, "null buffer");
  return LOOMRT_OK;
}

loomrt_status loomrt_block_compress(loomrt_stream s, loomrt_block_codec codec, const float *x,
                                    void *packed, size_t n, size_t block) {
  LOOMRT_TRY(blockCheck("block_compress", s, codec, n, block, {x, packed}));
  if (!n)
    return LOOMRT_OK;
  if (!K(s).block_compress)
    return fail(LOOMRT_ERR_UNSUPPORTED, "block_compress: no kernel on this backend");
  return K(s).block_compress(ST(s), s->impl, codec, x, packed, n, block);
}

loomrt_status loomrt_block_decompress(loomrt_stream s, loomrt_block_codec codec,
                                      const void *packed, float *out, size_t n, size_t block) {
  LOOMRT_TRY(blockCheck("block_decompress", s, codec, n, block, {packed, out}));
  if (!n)
    return LOOMRT_OK;
  if (!K(s).block_decompress)
    return fail(LOOMRT_ERR_UNSUPPORTED, "block_decompress: no kernel on this backend");
  return K(s).block_decompress(ST(s), s->impl, codec, packed, out, n, block);
}

loomrt_status loomrt_onebit_average(loomrt_stream s, const uint8_t *packed,
                                    const float *scales, float *out, size_t world, size_t n) {
  LOOMRT_TRY(onebitCheck("onebit_average", s, n, {packed, scales, out}));
  if (!world)
    return bad("onebit_average", "world must be at least 1");
  if (!n)
    return LOOMRT_OK;
  if (!K(s).onebit_average)
    return fail(LOOMRT_ERR_UNSUPPORTED, "onebit_average: no kernel on this backend");
  return K(s).onebit_average(ST(s), s->impl, packed, scales, out, world, n);
}

static int64_t numel(const int64_t *shape, int rank) {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d)
    n *= shape[d];
  return n;
}

loomrt_status loomrt_binary(loomrt_stream s, loomrt_binary_op op,
                            loomrt_dtype dt, const void *a,
                            const int64_t *aShape, const void *b,
                            const int64_t *bShape, void *out,
                            const int64_t *outShape, int rank) {
  if (rank < 0 || rank > LOOMRT_MAX_RANK)
    return bad("binary", "rank must be in [0, 8]");
  if (rank && (!aShape || !bShape || !outShape))
    return bad("binary", "null shape");
  LOOMRT_TRY(common("binary", s, dt, true, {a, b, out}, /*intToo=*/true));
  if (op < 0 || op >= LOOMRT_BINARY_OP_COUNT)
    return bad("binary", "unknown op " + std::to_string(int(op)));
  if (dt == LOOMRT_I64 && (op == LOOMRT_DIV || op == LOOMRT_POW))
    return bad("binary", "DIV and POW are not defined on int64");
  LOOMRT_TRY(checkBroadcast("binary", aShape, outShape, rank, "lhs"));
  LOOMRT_TRY(checkBroadcast("binary", bShape, outShape, rank, "rhs"));
  if (numel(outShape, rank) == 0)
    return LOOMRT_OK;
  return K(s).binary(ST(s), s->impl, op, dt, nullptr, nullptr, a, aShape, b,
                     bShape, out, outShape, rank);
}

loomrt_status loomrt_select(loomrt_stream s, loomrt_dtype dt,
                            const uint8_t *cond, const int64_t *cShape,
                            const void *a, const int64_t *aShape,
                            const void *b, const int64_t *bShape, void *out,
                            const int64_t *outShape, int rank) {
  if (rank < 0 || rank > LOOMRT_MAX_RANK)
    return bad("select", "rank must be in [0, 8]");
  if (rank && (!cShape || !aShape || !bShape || !outShape))
    return bad("select", "null shape");
  LOOMRT_TRY(common("select", s, dt, true, {cond, a, b, out}, /*intToo=*/true));
  LOOMRT_TRY(checkBroadcast("select", cShape, outShape, rank, "condition"));
  LOOMRT_TRY(checkBroadcast("select", aShape, outShape, rank, "lhs"));
  LOOMRT_TRY(checkBroadcast("select", bShape, outShape, rank, "rhs"));
  if (numel(outShape, rank) == 0)
    return LOOMRT_OK;
  return K(s).binary(ST(s), s->impl, LOOMRT_ADD, dt, cond, cShape, a, aShape,
                     b, bShape, out, outShape, rank);
}

loomrt_status loomrt_cast(loomrt_stream s, loomrt_dtype from, const void *x,
                          loomrt_dtype to, void *y, size_t n) {
  LOOMRT_TRY(common("cast", s, from, n > 0, {x, y}, /*intToo=*/true));
  if (!validDtype(to) && to != LOOMRT_I64)
    return bad("cast", "unknown dtype " + std::to_string(int(to)));
  return n ? K(s).cast(ST(s), s->impl, from, x, to, y, n) : LOOMRT_OK;
}

loomrt_status loomrt_fill(loomrt_stream s, loomrt_dtype dt, void *x,
                          float value, size_t n) {
  LOOMRT_TRY(common("fill", s, dt, n > 0, {x}, /*intToo=*/true));
  return n ? K(s).fill(ST(s), s->impl, dt, x, value, n) : LOOMRT_OK;
}

loomrt_status loomrt_copy_strided(loomrt_stream s, size_t elemSize,
                                  const void *src, const int64_t *srcStrides,
                                  void *dst, const int64_t *dstStrides,
                                  const int64_t *shape, int rank) {
  if (!s)
    return bad("copy_strided", "null stream");
  if (rank < 0 || rank > LOOMRT_MAX_RANK)
    return bad("copy_strided", "rank must be in [0, 8]");
  if (elemSize != 1 && elemSize != 2 && elemSize != 4 && elemSize != 8)
    return bad("copy_strided", "element size must be 1, 2, 4 or 8 bytes");
  if (rank && (!srcStrides || !dstStrides || !shape))
    return bad("copy_strided", "null shape or strides");
  for (int d = 0; d < rank; ++d)
    if (shape[d] < 0)
      return bad("copy_strided", "negative dimension");
  if (numel(shape, rank) == 0)
    return LOOMRT_OK;
  if (!src || !dst)
    return bad("copy_strided", "null buffer");
  return K(s).copy_strided(ST(s), s->impl, elemSize, src, srcStrides, dst,
                           dstStrides, shape, rank);
}

loomrt_status loomrt_rotary(loomrt_stream s, loomrt_dtype dt, const void *x, const void *cos,
                            const void *sin, void *y, size_t rows, size_t period, size_t d,
                            int backward) {
  size_t n = rows * d;
  LOOMRT_TRY(common("rotary", s, dt, n > 0, {x, cos, sin, y}));
  if (d % 2 || (rows && !d) || (rows && !period) || (d && rows > SIZE_MAX / d))
    return bad("rotary", "rows of an even, nonzero length and a nonzero period are needed (d " +
                             std::to_string(d) + ", period " + std::to_string(period) + ")");
  if (x == y && n)
    return bad("rotary", "x and y must be different buffers");
  return n ? K(s).rotary(ST(s), s->impl, dt, x, cos, sin, y, rows, period, d, backward != 0)
           : LOOMRT_OK;
}

loomrt_status loomrt_lerp(loomrt_stream s, loomrt_dtype dt, const void *a, const void *b,
                          void *y, size_t n, float weight) {
  LOOMRT_TRY(common("lerp", s, dt, n > 0, {a, b, y}));
  if (!std::isfinite(weight))
    return bad("lerp", "weight must be finite");
  return n ? K(s).lerp(ST(s), s->impl, dt, a, b, y, n, weight) : LOOMRT_OK;
}

loomrt_status loomrt_cumsum(loomrt_stream s, loomrt_dtype dt, const void *x,
                            void *y, int64_t outer, int64_t len, int64_t inner,
                            int exclusive, int reverse) {
  if (outer < 0 || len < 0 || inner < 0)
    return bad("cumsum", "needs outer, len and inner >= 0");
  if (outer && inner && len > INT64_MAX / outer / inner)
    return bad("cumsum", "size overflows");
  int64_t n = outer * len * inner;
  LOOMRT_TRY(common("cumsum", s, dt, n > 0, {x, y}, /*intToo=*/true));
  return n ? K(s).cumsum(ST(s), s->impl, dt, x, y, outer, len, inner, exclusive != 0,
                         reverse != 0)
           : LOOMRT_OK;
}

loomrt_status loomrt_reduce(loomrt_stream s, loomrt_reduce_op op,
                            loomrt_dtype dt, const void *x, void *y,
                            int64_t outer, int64_t len, int64_t inner) {
  if (outer < 0 || len < 1 || inner < 0)
    return bad("reduce", "needs outer >= 0, len >= 1, inner >= 0");
  LOOMRT_TRY(common("reduce", s, dt, outer * inner > 0, {x, y}));
  if (op < LOOMRT_REDUCE_SUM || op > LOOMRT_REDUCE_MIN)
    return bad("reduce", "unknown op " + std::to_string(int(op)));
  return (outer * inner) != 0
             ? K(s).reduce(ST(s), s->impl, op, dt, x, y, outer, len, inner)
             : LOOMRT_OK;
}

/// loomrt_matmul's checks, shared with loomrt_matmul_bias; `empty` is set
/// when there is nothing to compute.
static loomrt_status checkGemm(const char *what, loomrt_stream s, const loomrt_gemm *g,
                               std::initializer_list<const void *> buffers, bool &empty) {
  if (!s || !g)
    return bad(what, "null stream or gemm description");
  if (!validDtype(g->in) || !validDtype(g->out))
    return bad(what, "unknown dtype");
  if (g->batch < 0 || g->m < 0 || g->n < 0 || g->k < 0)
    return bad(what, "negative size");
  if (g->stride_a < 0 || g->stride_b < 0 || g->stride_c < 0)
    return bad(what, "negative batch stride");
  if (g->batch > 1 && g->stride_c < g->m * g->n)
    return bad(what, "batches of C overlap (stride_c < m*n)");
  empty = g->batch * g->m * g->n == 0;
  for (const void *p : buffers)
    if (!empty && !p)
      return bad(what, "null buffer");
  return LOOMRT_OK;
}

loomrt_status loomrt_matmul(loomrt_stream s, const loomrt_gemm *g,
                            const void *a, const void *b, void *c) {
  bool empty = false;
  LOOMRT_TRY(checkGemm("matmul", s, g, {a, b, c}, empty));
  return empty ? LOOMRT_OK : K(s).matmul(ST(s), s->impl, g, a, b, c);
}

loomrt_status loomrt_matmul_bias(loomrt_stream s, const loomrt_gemm *g, const void *a,
                                 const void *b, const void *bias, void *c) {
  bool empty = false;
  LOOMRT_TRY(checkGemm("matmul_bias", s, g, {a, b, bias, c}, empty));
  if (g->beta != 0.0f)
    return bad("matmul_bias", "beta must be 0 (the bias takes C's place)");
  if (empty)
    return LOOMRT_OK;
  if (K(s).matmul_bias) {
    loomrt_status st = K(s).matmul_bias(ST(s), s->impl, g, a, b, bias, c);
    if (st != LOOMRT_ERR_UNSUPPORTED)
      return st;
  }
  // C_b += bias over each batch's [m, n] block; C's batches may be strided.
  LOOMRT_TRY(K(s).matmul(ST(s), s->impl, g, a, b, c));
  const int64_t stride = g->batch > 1 ? g->stride_c : g->m * g->n;
  const size_t es = g->out == LOOMRT_BF16 ? 2 : 4;
  const int64_t shape[3] = {g->batch, g->m, g->n}, bs[3] = {1, 1, g->n};
  if (stride == g->m * g->n)
    return loomrt_binary(s, LOOMRT_ADD, g->out, c, shape, bias, bs, c, shape, 3);
  for (int64_t z = 0; z < g->batch; ++z) {
    void *cz = static_cast<char *>(c) + size_t(z * stride) * es;
    LOOMRT_TRY(loomrt_binary(s, LOOMRT_ADD, g->out, cz, shape + 1, bias, bs + 1, cz,
                             shape + 1, 2));
  }
  return LOOMRT_OK;
}

/// The checks loomrt_matmul_bias_act and loomrt_matmul_act_grad share:
/// the GEMM's, an activation the fused epilogues and the composed path
/// both have, beta 0 and one contiguous C (its elements, `count`, are
/// what the composed path's elementwise call covers).
static loomrt_status checkActGemm(const char *what, loomrt_stream s, const loomrt_gemm *g,
                                  loomrt_unary_op act,
                                  std::initializer_list<const void *> buffers, bool &empty,
                                  size_t &count) {
  LOOMRT_TRY(checkGemm(what, s, g, buffers, empty));
  if (act != LOOMRT_GELU_TANH)
    return bad(what, "activation " + std::to_string(int(act)) +
                         " has no GEMM epilogue (GELU_TANH has)");
  if (g->beta != 0.0f)
    return bad(what, "beta must be 0");
  if (g->batch > 1 && g->stride_c != g->m * g->n)
    return bad(what, "C must be contiguous (stride_c = m*n)");
  count = size_t(g->batch * g->m * g->n);
  return LOOMRT_OK;
}

loomrt_status loomrt_matmul_bias_act(loomrt_stream s, const loomrt_gemm *g,
                                     loomrt_unary_op act, const void *a, const void *b,
                                     const void *bias, void *aux, void *c) {
  bool empty = false;
  size_t count = 0;
  LOOMRT_TRY(checkActGemm("matmul_bias_act", s, g, act, {a, b, bias, aux, c}, empty, count));
  if (empty)
    return LOOMRT_OK;
  if (aux == c)
    return bad("matmul_bias_act", "aux and C must be different buffers");
  if (K(s).matmul_bias_act) {
    loomrt_status st = K(s).matmul_bias_act(ST(s), s->impl, g, act, a, b, bias, aux, c);
    if (st != LOOMRT_ERR_UNSUPPORTED)
      return st;
  }
  LOOMRT_TRY(loomrt_matmul_bias(s, g, a, b, bias, aux));
  return loomrt_unary(s, act, g->out, aux, c, count);
}

loomrt_status loomrt_matmul_act_grad(loomrt_stream s, const loomrt_gemm *g,
                                     loomrt_unary_op act, const void *a, const void *b,
                                     const void *aux, void *c) {
  bool empty = false;
  size_t count = 0;
  LOOMRT_TRY(checkActGemm("matmul_act_grad", s, g, act, {a, b, aux, c}, empty, count));
  if (empty)
    return LOOMRT_OK;
  if (aux == c)
    return bad("matmul_act_grad", "aux and C must be different buffers");
  if (K(s).matmul_act_grad) {
    loomrt_status st = K(s).matmul_act_grad(ST(s), s->impl, g, act, a, b, aux, c);
    if (st != LOOMRT_ERR_UNSUPPORTED)
      return st;
  }
  LOOMRT_TRY(K(s).matmul(ST(s), s->impl, g, a, b, c));
  return loomrt_unary_grad(s, act, g->out, c, aux, c, count);
}

loomrt_status loomrt_matmul_bgrad(loomrt_stream s, const loomrt_gemm *g, const void *a,
                                  const void *b, void *c, void *db) {
  bool empty = false;
  LOOMRT_TRY(checkGemm("matmul_bgrad", s, g, {a, b, c, db}, empty));
  if (g->batch > 1)
    return bad("matmul_bgrad", "one batch only");
  if (g->beta != 0.0f)
    return bad("matmul_bgrad", "beta must be 0");
  if (g->in != g->out)
    return bad("matmul_bgrad", "the bias gradient needs in = out dtypes");
  if (g->m == 0)
    return LOOMRT_OK;
  if (g->k == 0) { // C and db are empty sums
    if (!empty)
      LOOMRT_TRY(loomrt_fill(s, g->out, c, 0.0, size_t(g->m * g->n)));
    return loomrt_fill(s, g->out, db, 0.0, size_t(g->m));
  }
  if (K(s).matmul_bgrad) {
    loomrt_status st = K(s).matmul_bgrad(ST(s), s->impl, g, a, b, c, db);
    if (st != LOOMRT_ERR_UNSUPPORTED)
      return st;
  }
  if (!empty)
    LOOMRT_TRY(K(s).matmul(ST(s), s->impl, g, a, b, c));
  // op(A) is m x k: stored [k, m] when transposed (sum the middle axis of
  // [1, k, m]), else [m, k] (of [m, k, 1]).
  return g->trans_a ? loomrt_reduce(s, LOOMRT_REDUCE_SUM, g->in, a, db, 1, g->k, g->m)
                    : loomrt_reduce(s, LOOMRT_REDUCE_SUM, g->in, a, db, g->m, g->k, 1);
}

loomrt_status loomrt_layer_norm(loomrt_stream s, loomrt_dtype dt,
                                const void *x, const void *w, const void *b,
                                void *y, int64_t rows, int64_t d, float eps) {
  LOOMRT_TRY(checkRows("layer_norm", rows, d));
  LOOMRT_TRY(common("layer_norm", s, dt, rows * d > 0, {x, w, y}));
  if (!(eps > 0))
    return bad("layer_norm", "eps must be positive");
  return (rows * d) != 0
 ? K(s).layer_norm(ST(s), s->impl, dt, x, w, b, y, rows, d,
                                    eps, false)
                  : LOOMRT_OK;
}

loomrt_status loomrt_layer_norm_grad(loomrt_stream s, loomrt_dtype dt,
                                     const void *dy, const void *x,
                                     const void *w, void *dx, void *dw,
                                     void *db, int64_t rows, int64_t d,
                                     float eps) {
  LOOMRT_TRY(checkRows("layer_norm_grad", rows, d));
  LOOMRT_TRY(common("layer_norm_grad", s, dt, d > 0, {dy, x, w, dx, dw}));
  if (!(eps > 0))
    return bad("layer_norm_grad", "eps must be positive");
  return d ? K(s).layer_norm_grad(ST(s), s->impl, dt, dy, x, w, dx, dw, db,
                                  rows, d, eps, false)
           : LOOMRT_OK;
}

loomrt_status loomrt_rms_norm(loomrt_stream s, loomrt_dtype dt, const void *x,
                              const void *w, void *y, int64_t rows, int64_t d,
                              float eps) {
  LOOMRT_TRY(checkRows("rms_norm", rows, d));
  LOOMRT_TRY(common("rms_norm", s, dt, rows * d > 0, {x, w, y}));
  if (!(eps > 0))
    return bad("rms_norm", "eps must be positive");
  return (rows * d) != 0
 ? K(s).layer_norm(ST(s), s->impl, dt, x, w, nullptr, y,
                                    rows, d, eps, true)
                  : LOOMRT_OK;
}

loomrt_status loomrt_rms_norm_grad(loomrt_stream s, loomrt_dtype dt,
                                   const void *dy, const void *x,
                                   const void *w, void *dx, void *dw,
                                   int64_t rows, int64_t d, float eps) {
  LOOMRT_TRY(checkRows("rms_norm_grad", rows, d));
  LOOMRT_TRY(common("rms_norm_grad", s, dt, d > 0, {dy, x, w, dx, dw}));
  if (!(eps > 0))
    return bad("rms_norm_grad", "eps must be positive");
  return d ? K(s).layer_norm_grad(ST(s), s->impl, dt, dy, x, w, dx, dw,
                                  nullptr, rows, d, eps, true)
           : LOOMRT_OK;
}

loomrt_status loomrt_softmax(loomrt_stream s, loomrt_dtype dt, const void *x,
                             void *y, int64_t rows, int64_t d, float scale,
                             int log, int64_t causalBlock) {
  LOOMRT_TRY(checkRows("softmax", rows, d));
  LOOMRT_TRY(common("softmax", s, dt, rows * d > 0, {x, y}));
  if (causalBlock < 0 || (causalBlock && (rows % causalBlock || causalBlock > d)))
    return bad("softmax", "causal block must divide rows and be <= d");
  return (rows * d) != 0
 ? K(s).softmax(ST(s), s->impl, dt, x, y, rows, d, scale,
                                 log, causalBlock)
                  : LOOMRT_OK;
}

loomrt_status loomrt_softmax_grad(loomrt_stream s, loomrt_dtype dt,
                                  const void *dy, const void *y, void *dx,
                                  int64_t rows, int64_t d, float scale,
                                  int log) {
  LOOMRT_TRY(checkRows("softmax_grad", rows, d));
  LOOMRT_TRY(common("softmax_grad", s, dt, rows * d > 0, {dy, y, dx}));
  return (rows * d) != 0
 ? K(s).softmax_grad(ST(s), s->impl, dt, dy, y, dx, rows, d,
                                      scale, log)
                  : LOOMRT_OK;
}

loomrt_status loomrt_embedding(loomrt_stream s, loomrt_dtype dt,
                               const void *table, const int64_t *idx,
                               void *out, int64_t n, int64_t d,
                               int64_t vocab) {
  LOOMRT_TRY(checkEmbedding("embedding", n, d, vocab));
  LOOMRT_TRY(common("embedding", s, dt, n * d > 0, {table, idx, out}));
  return (n * d) != 0
 ? K(s).embedding(ST(s), s->impl, dt, table, idx, out, n, d,
                                vocab)
               : LOOMRT_OK;
}

loomrt_status loomrt_embedding_grad(loomrt_stream s, loomrt_dtype dt,
                                    const void *dy, const int64_t *idx,
                                    float *dtable, int64_t n, int64_t d,
                                    int64_t vocab) {
  LOOMRT_TRY(checkEmbedding("embedding_grad", n, d, vocab));
  LOOMRT_TRY(common("embedding_grad", s, dt, d > 0, {dtable}));
  if (n * d > 0 && (!dy || !idx))
    return bad("embedding_grad", "null buffer");
  return d ? K(s).embedding_grad(ST(s), s->impl, dt, dy, idx, dtable, n, d,
                                 vocab)
           : LOOMRT_OK;
}

loomrt_status loomrt_cross_entropy(loomrt_stream s, loomrt_dtype dt,
                                   const void *logits, const int64_t *labels,
                                   float *loss, int64_t rows,
                                   int64_t classes) {
  if (rows < 1 || classes < 1)
    return bad("cross_entropy", "needs rows >= 1 and classes >= 1");
  LOOMRT_TRY(common("cross_entropy", s, dt, true, {logits, labels, loss}));
  return K(s).cross_entropy(ST(s), s->impl, dt, logits, labels, loss, rows,
                            classes);
}

loomrt_status loomrt_cross_entropy_grad(loomrt_stream s, loomrt_dtype dt,
                                        const void *logits,
                                        const int64_t *labels,
                                        const float *dloss, void *dlogits,
                                        int64_t rows, int64_t classes) {
  if (rows < 1 || classes < 1)
    return bad("cross_entropy_grad", "needs rows >= 1 and classes >= 1");
  LOOMRT_TRY(common("cross_entropy_grad", s, dt, true,
                    {logits, labels, dloss, dlogits}));
  return K(s).cross_entropy_grad(ST(s), s->impl, dt, logits, labels, dloss,
                                 dlogits, rows, classes);
}

loomrt_status loomrt_spmm(loomrt_stream s, loomrt_dtype dt,
                          const int64_t *rowPtr, const int64_t *colIdx,
                          const void *vals, const void *x, void *y,
                          int64_t rows, int64_t features) {
  LOOMRT_TRY(checkRows("spmm", rows, features));
  LOOMRT_TRY(common("spmm", s, dt, rows * features > 0, {rowPtr, x, y}));
  return (rows * features) != 0
 ? K(s).spmm(ST(s), s->impl, dt, rowPtr, colIdx, vals,
                                     x, y, rows, features)
                         : LOOMRT_OK;
}

loomrt_status loomrt_top_k(loomrt_stream s, loomrt_dtype dt, const void *x, void *values,
                           int64_t *indices, int64_t rows, int64_t n, int64_t k) {
  if (rows < 0 || n < 1 || k < 1 || k > n)
    return bad("top_k", "needs rows >= 0 and 1 <= k <= n, got rows " + std::to_string(rows) +
                            ", n " + std::to_string(n) + ", k " + std::to_string(k));
  LOOMRT_TRY(common("top_k", s, dt, rows > 0, {x, values, indices}));
  return rows ? K(s).top_k(ST(s), s->impl, dt, x, values, indices, rows, n, k) : LOOMRT_OK;
}

loomrt_status loomrt_top_k_grad(loomrt_stream s, loomrt_dtype dt, const void *dv,
                                const int64_t *indices, void *dx, int64_t rows, int64_t n,
                                int64_t k) {
  if (rows < 0 || n < 1 || k < 1 || k > n)
    return bad("top_k_grad", "needs rows >= 0 and 1 <= k <= n");
  LOOMRT_TRY(common("top_k_grad", s, dt, rows > 0, {dv, indices, dx}));
  return rows ? K(s).top_k_grad(ST(s), s->impl, dt, dv, indices, dx, rows, n, k) : LOOMRT_OK;
}

loomrt_status loomrt_moe_slots(loomrt_stream s, const int64_t *experts, int64_t *slots,
                               float *counts, int64_t n, int64_t k, int64_t numExperts,
                               int64_t capacity) {
  if (n < 0 || k < 1 || numExperts < 1 || capacity < 1 || k > numExperts)
    return bad("moe_slots", "needs n >= 0, 1 <= k <= experts, capacity >= 1");
  LOOMRT_TRY(common("moe_slots", s, LOOMRT_F32, true, {counts}));
  if (n && (!experts || !slots))
    return bad("moe_slots", "null buffer");
  return K(s).moe_slots(ST(s), s->impl, experts, slots, counts, n, k, numExperts, capacity);
}

namespace {
loomrt_status moeMove(const char *fn, bool combine, loomrt_stream s, loomrt_dtype dt,
                      const void *x, const int64_t *slots, const void *weights, void *out,
                      int64_t n, int64_t k, int64_t d, int64_t rows) {
  if (n < 0 || k < 1 || d < 0 || rows < 0)
    return bad(fn, "needs n, d, rows >= 0 and k >= 1");
  int64_t outRows = combine ? n : rows;
  LOOMRT_TRY(common(fn, s, dt, outRows * d > 0, {out}));
  if (n * d > 0 && (!x || !slots))
    return bad(fn, "null buffer");
  return outRows * d > 0 ? K(s).moe_move(ST(s), s->impl, dt, combine, x, slots, weights, out, n,
                                         k, d, rows)
                         : LOOMRT_OK;
}
} // namespace

loomrt_status loomrt_moe_dispatch(loomrt_stream s, loomrt_dtype dt, const void *x,
                                  const int64_t *slots, const void *weights, void *out, int64_t n,
                                  int64_t k, int64_t d, int64_t rows) {
  return moeMove("moe_dispatch", false, s, dt, x, slots, weights, out, n, k, d, rows);
}

loomrt_status loomrt_moe_combine(loomrt_stream s, loomrt_dtype dt, const void *y,
                                 const int64_t *slots, const void *weights, void *out, int64_t n,
                                 int64_t k, int64_t d, int64_t rows) {
  return moeMove("moe_combine", true, s, dt, y, slots, weights, out, n, k, d, rows);
}

loomrt_status loomrt_moe_slot_dot(loomrt_stream s, loomrt_dtype dt, const void *a, const void *b,
                                  const int64_t *slots, void *out, int64_t n, int64_t k, int64_t d,
                                  int64_t rows) {
  if (n < 0 || k < 1 || d < 0 || rows < 0)
    return bad("moe_slot_dot", "needs n, d, rows >= 0 and k >= 1");
  LOOMRT_TRY(common("moe_slot_dot", s, dt, n > 0, {a, slots, out}));
  if (n * d > 0 && rows > 0 && !b)
    return bad("moe_slot_dot", "null buffer");
  return n ? K(s).moe_slot_dot(ST(s), s->impl, dt, a, b, slots, out, n, k, d, rows) : LOOMRT_OK;
}

loomrt_status loomrt_sgd_f32(loomrt_stream s, float lr, float momentum,
                             int nesterov, float *p, const float *g,
                             float *buf, size_t n) {
  LOOMRT_TRY(common("sgd_f32", s, LOOMRT_F32, n > 0, {p, g, buf}));
  if (!(lr > 0) || momentum < 0)
    return bad("sgd_f32", "needs lr > 0 and momentum >= 0");
  return n ? K(s).sgd(ST(s), s->impl, lr, momentum, nesterov, p, g, buf, n)
           : LOOMRT_OK;
}

} // extern "C"
