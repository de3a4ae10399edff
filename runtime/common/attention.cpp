// attention.cpp: scaled dot-product attention and its gradient, composed
// from the backend's GEMM and softmax kernels, so every backend has it and
// it is exactly as correct as those kernels.
//
// Forward:  P = softmax(scale Q K^T + causal mask);  O = P V.
// Backward: P recomputed;  dV = P^T dO;  dP = dO V^T;
//           dS = scale * P (dP - rowsum(dP P));  dQ = dS K;  dK = dS^T Q.
// P and dP live in the caller's workspace ([bh, t, s] each), in the call's
// dtype. A backend's fused kernel (the GPU's flash attention for bf16, head
// dim 64; LOOMRT_ATTENTION=composed turns it off) runs instead where it
// covers the shape; this is the reference it is tested against.
#include "common/backend.h"

#include <cstdlib>
#include <string>

extern "C" {

} // extern "C"

namespace loomrt {
namespace {
int fusedMode = -1; // -1: not decided yet
} // namespace
// Backends' fused kernels (the GPU's flash attention) run where they cover
// the shape; LOOMRT_ATTENTION=composed turns them off (comparisons, bisecting).
bool fusedAttentionEnabled() {
  if (fusedMode < 0) {
    const char *v = std::getenv("LOOMRT_ATTENTION");
    fusedMode = !(v && std::string(v) == "composed");
  }
  return fusedMode == 1;
}
void setFusedAttention(bool on) { fusedMode = on; }
} // namespace loomrt

extern "C" {

static loomrt_status checkAttention(const char *fn, loomrt_stream st,
                                    int64_t bh, int64_t t, int64_t s,
                                    int64_t dh, int causal,
                                    std::initializer_list<const void *> bufs) {
  if (!st)
    return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT,
                        std::string(fn) + ": null stream");
  if (bh < 1 || t < 1 || s < 1 || dh < 1)
    return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT,
                        std::string(fn) + ": sizes must be positive");
  if (causal && t > s)
    return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT,
                        std::string(fn) +
                            ": a causal mask needs at least as many keys as "
                            "queries");
  for (const void *b : bufs)
    if (!b)
      return loomrt::fail(LOOMRT_ERR_INVALID_ARGUMENT,
                          std::string(fn) + ": null buffer");
  return LOOMRT_OK;
}

/// The forward: the backend's fused kernel where it covers the shape
/// (writing each row's log-sum-exp to `lse` unless null), else composed.
static loomrt_status attentionForward(loomrt_stream st, loomrt_dtype dt, int64_t bh, int64_t t,
                                      int64_t s, int64_t dh, float scale, int causal,
                                      const void *q, const void *k, const void *v, void *o,
                                      void *workspace, float *lse) {
  const loomrt::KernelOps *kernels = st->dev->ops->kernels;
  if (kernels->attention && loomrt::fusedAttentionEnabled()) {
    loomrt_status e = kernels->attention(st->dev->state, st->impl, dt, bh, t, s, dh, scale,
                                         causal, q, k, v, o, workspace, lse);
    if (e != LOOMRT_ERR_UNSUPPORTED)
      return e;
  }
  // P = Q K^T  ([t, dh] x [s, dh]^T per block)
  loomrt_gemm g1{0, 1, bh, t, s, dh, t * dh, s * dh, t * s, 1.0f, 0.0f, dt, dt};
  if (loomrt_status e = loomrt_matmul(st, &g1, q, k, workspace))
    return e;
  if (loomrt_status e = loomrt_softmax(st, dt, workspace, workspace, bh * t, s,
                                       scale, 0, causal ? t : 0))
    return e;
  // O = P V  ([t, s] x [s, dh])
  loomrt_gemm g2{0, 0, bh, t, dh, s, t * s, s * dh, t * dh, 1.0f, 0.0f, dt, dt};
  return loomrt_matmul(st, &g2, workspace, v, o);
}

loomrt_status loomrt_attention(loomrt_stream st, loomrt_dtype dt, int64_t bh,
                               int64_t t, int64_t s, int64_t dh, float scale,
                               int causal, const void *q, const void *k,
                               const void *v, void *o, void *workspace) {
  if (loomrt_status e = checkAttention("attention", st, bh, t, s, dh, causal,
                                       {q, k, v, o, workspace}))
    return e;
  return attentionForward(st, dt, bh, t, s, dh, scale, causal, q, k, v, o, workspace, nullptr);
}

loomrt_status loomrt_attention_save(loomrt_stream st, loomrt_dtype dt, int64_t bh, int64_t t,
                                    int64_t s, int64_t dh, float scale, int causal,
                                    const void *q, const void *k, const void *v, void *o,
                                    void *saved, void *workspace) {
  if (loomrt_status e = checkAttention("attention_save", st, bh, t, s, dh, causal,
                                       {q, k, v, o, saved, workspace}))
    return e;
  return attentionForward(st, dt, bh, t, s, dh, scale, causal, q, k, v, o, workspace,
                          static_cast<float *>(saved));
}

/// The gradient: the backend's fused kernels where they cover the shape
/// (reading the forward's output and log-sum-exp instead of running it
/// again where `o` and `lse` are given), else composed (which recomputes
/// the probabilities either way).
static loomrt_status attentionBackward(loomrt_stream st, loomrt_dtype dt, int64_t bh, int64_t t,
                                       int64_t s, int64_t dh, float scale, int causal,
                                       const void *q, const void *k, const void *v,
                                       const void *o, const float *lse, const void *dout,
                                       void *dq, void *dk, void *dv, void *workspace) {
  const loomrt::KernelOps *kernels = st->dev->ops->kernels;
  if (kernels->attention_grad && loomrt::fusedAttentionEnabled()) {
    loomrt_status e = kernels->attention_grad(st->dev->state, st->impl, dt, bh, t, s, dh,
                                              scale, causal, q, k, v, dout, dq, dk, dv,
                                              workspace, o, lse);
    if (e != LOOMRT_ERR_UNSUPPORTED)
      return e;
  }
  size_t es = dt == LOOMRT_BF16 ? 2 : 4;
  void *P = workspace;
  void *dP = static_cast<char *>(workspace) + size_t(bh * t * s) * es;
  loomrt_gemm qk{0, 1, bh, t, s, dh, t * dh, s * dh, t * s, 1.0f, 0.0f, dt, dt};
  if (loomrt_status e = loomrt_matmul(st, &qk, q, k, P))
    return e;
  if (loomrt_status e = loomrt_softmax(st, dt, P, P, bh * t, s, scale, 0,
                                       causal ? t : 0))
    return e;
  // dV = P^T dO  ([t, s]^T x [t, dh])
  loomrt_gemm gv{1, 0, bh, s, dh, t, t * s, t * dh, s * dh, 1.0f, 0.0f, dt, dt};
  if (loomrt_status e = loomrt_matmul(st, &gv, P, dout, dv))
    return e;
  // dP = dO V^T  ([t, dh] x [s, dh]^T)
  loomrt_gemm gp{0, 1, bh, t, s, dh, t * dh, s * dh, t * s, 1.0f, 0.0f, dt, dt};
  if (loomrt_status e = loomrt_matmul(st, &gp, dout, v, dP))
    return e;
  // dS = scale * P (dP - rowsum(dP P)); masked entries have P = 0.
  if (loomrt_status e =
          loomrt_softmax_grad(st, dt, dP, P, dP, bh * t, s, scale, 0))
    return e;
  // dQ = dS K  ([t, s] x [s, dh]);  dK = dS^T Q  ([t, s]^T x [t, dh])
  loomrt_gemm gq{0, 0, bh, t, dh, s, t * s, s * dh, t * dh, 1.0f, 0.0f, dt, dt};
  if (loomrt_status e = loomrt_matmul(st, &gq, dP, k, dq))
    return e;
  loomrt_gemm gk{1, 0, bh, s, dh, t, t * s, t * dh, s * dh, 1.0f, 0.0f, dt, dt};
  return loomrt_matmul(st, &gk, dP, q, dk);
}

loomrt_status loomrt_attention_grad(loomrt_stream st, loomrt_dtype dt,
                                    int64_t bh, int64_t t, int64_t s,
                                    int64_t dh, float scale, int causal,
                                    const void *q, const void *k,
                                    const void *v, const void *dout, void *dq,
                                    void *dk, void *dv, void *workspace) {
  if (loomrt_status e =
          checkAttention("attention_grad", st, bh, t, s, dh, causal,
                         {q, k, v, dout, dq, dk, dv, workspace}))
    return e;
  return attentionBackward(st, dt, bh, t, s, dh, scale, causal, q, k, v, nullptr, nullptr, dout,
                           dq, dk, dv, workspace);
}

loomrt_status loomrt_attention_grad_saved(loomrt_stream st, loomrt_dtype dt, int64_t bh,
                                          int64_t t, int64_t s, int64_t dh, float scale,
                                          int causal, const void *q, const void *k,
                                          const void *v, const void *o, const void *saved,
                                          const void *dout, void *dq, void *dk, void *dv,
                                          void *workspace) {
  if (loomrt_status e = checkAttention("attention_grad_saved", st, bh, t, s, dh, causal,
                                       {q, k, v, o, saved, dout, dq, dk, dv, workspace}))
    return e;
  return attentionBackward(st, dt, bh, t, s, dh, scale, causal, q, k, v, o,
                           static_cast<const float *>(saved), dout, dq, dk, dv, workspace);
}

} // extern "C"
