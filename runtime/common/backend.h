// backend.h: the internal table each runtime backend fills in. The C entry
// points in common/core.cpp validate arguments once and dispatch here, so a
// backend only implements the work itself.
#ifndef LOOMRT_COMMON_BACKEND_H
#define LOOMRT_COMMON_BACKEND_H

#include "loomrt/loomrt.h"

#include <string>

namespace loomrt {

struct FusedProgram;
struct FusedBuffers;

/// Compute kernels. Arguments are validated by core.cpp before they get here;
/// `state` is the device state, `stream` the backend's stream.
struct KernelOps {
  loomrt_status (*unary)(void *state, void *stream, loomrt_unary_op op,
                         loomrt_dtype dt, const void *x, void *y, size_t n);
  loomrt_status (*unary_grad)(void *state, void *stream, loomrt_unary_op op,
                              loomrt_dtype dt, const void *dy, const void *x,
                              void *dx, size_t n);
  /// Broadcasting elementwise op; with cond set, a select (op ignored).
  loomrt_status (*binary)(void *state, void *stream, loomrt_binary_op op,
                          loomrt_dtype dt, const uint8_t *cond,
                          const int64_t *cShape, const void *a,
                          const int64_t *aShape, const void *b,
                          const int64_t *bShape, void *out,
                          const int64_t *outShape, int rank);
  loomrt_status (*cast)(void *state, void *stream, loomrt_dtype from,
                        const void *x, loomrt_dtype to, void *y, size_t n);
  loomrt_status (*rotary)(void *state, void *stream, loomrt_dtype dt, const void *x,
                          const void *cos, const void *sin, void *y, size_t rows,
                          size_t period, size_t d, bool backward);
  loomrt_status (*lerp)(void *state, void *stream, loomrt_dtype dt, const void *a,
                        const void *b, void *y, size_t n, float weight);
  loomrt_status (*cumsum)(void *state, void *stream, loomrt_dtype dt,
                          const void *x, void *y, int64_t outer, int64_t len,
                          int64_t inner, int exclusive, int reverse);
  loomrt_status (*fill)(void *state, void *stream, loomrt_dtype dt, void *x,
                        float value, size_t n);
  loomrt_status (*copy_strided)(void *state, void *stream, size_t elemSize,
                                const void *src, const int64_t *srcStrides,
                                void *dst, const int64_t *dstStrides,
                                const int64_t *shape, int rank);
  loomrt_status (*reduce)(void *state, void *stream, loomrt_reduce_op op,
                          loomrt_dtype dt, const void *x, void *y,
                          int64_t outer, int64_t len, int64_t inner);
  loomrt_status (*matmul)(void *state, void *stream, const loomrt_gemm *g,
                          const void *a, const void *b, void *c);
  loomrt_status (*layer_norm)(void *state, void *stream, loomrt_dtype dt,
                              const void *x, const void *w, const void *b,
                              void *y, int64_t rows, int64_t d, float eps,
                              bool rms);
  loomrt_status (*layer_norm_grad)(void *state, void *stream, loomrt_dtype dt,
                                   const void *dy, const void *x,
                                   const void *w, void *dx, void *dw, void *db,
                                   int64_t rows, int64_t d, float eps,
                                   bool rms);
  loomrt_status (*softmax)(void *state, void *stream, loomrt_dtype dt,
                           const void *x, void *y, int64_t rows, int64_t d,
                           float scale, int log, int64_t causalBlock);
  loomrt_status (*softmax_grad)(void *state, void *stream, loomrt_dtype dt,
                                const void *dy, const void *y, void *dx,
                                int64_t rows, int64_t d, float scale, int log);
  loomrt_status (*embedding)(void *state, void *stream, loomrt_dtype dt,
                             const void *table, const int64_t *idx, void *out,
                             int64_t n, int64_t d, int64_t vocab);
  loomrt_status (*embedding_grad)(void *state, void *stream, loomrt_dtype dt,
                                  const void *dy, const int64_t *idx,
                                  float *dtable, int64_t n, int64_t d,
                                  int64_t vocab);
  loomrt_status (*cross_entropy)(void *state, void *stream, loomrt_dtype dt,
                                 const void *logits, const int64_t *labels,
                                 float *loss, int64_t rows, int64_t classes);
  loomrt_status (*cross_entropy_grad)(void *state, void *stream,
                                      loomrt_dtype dt, const void *logits,
                                      const int64_t *labels,
                                      const float *dloss, void *dlogits,
                                      int64_t rows, int64_t classes);
  loomrt_status (*spmm)(void *state, void *stream, loomrt_dtype dt,
                        const int64_t *rowPtr, const int64_t *colIdx,
                        const void *vals, const void *x, void *y,
                        int64_t rows, int64_t features);
  /// Mixture of experts (arguments checked: slots within [-1, rows),
  /// experts within [0, num_experts) on the CPU; the GPU skips bad entries).
  loomrt_status (*top_k)(void *state, void *stream, loomrt_dtype dt, const void *x, void *values,
                         int64_t *indices, int64_t rows, int64_t n, int64_t k);
  loomrt_status (*top_k_grad)(void *state, void *stream, loomrt_dtype dt, const void *dv,
                              const int64_t *indices, void *dx, int64_t rows, int64_t n,
                              int64_t k);
  loomrt_status (*moe_slots)(void *state, void *stream, const int64_t *experts, int64_t *slots,
                             float *counts, int64_t n, int64_t k, int64_t numExperts,
                             int64_t capacity);
  /// combine = false: dispatch (x [n, d] -> out [rows, d]); true: combine
  /// (x [rows, d] -> out [n, d]).
  loomrt_status (*moe_move)(void *state, void *stream, loomrt_dtype dt, bool combine,
                            const void *x, const int64_t *slots, const void *weights, void *out,
                            int64_t n, int64_t k, int64_t d, int64_t rows);
  loomrt_status (*moe_slot_dot)(void *state, void *stream, loomrt_dtype dt, const void *a,
                                const void *b, const int64_t *slots, void *out, int64_t n,
                                int64_t k, int64_t d, int64_t rows);
  loomrt_status (*sgd)(void *state, void *stream, float lr, float momentum,
                       int nesterov, float *p, const float *g, float *buf,
                       size_t n);
  /// Fused attention and its gradient (null: none). They return
  /// LOOMRT_ERR_UNSUPPORTED, without recording an error, for shapes they do
  /// not cover; loomrt_attention then composes it from GEMMs and a softmax.
  /// `lse` (may be null): the forward writes each query row's log-sum-exp
  /// there; given it with the forward's output `o`, the gradient does not
  /// run the forward again (loomrt_attention_save / _grad_saved).
  loomrt_status (*attention)(void *state, void *stream, loomrt_dtype dt,
                             int64_t bh, int64_t t, int64_t s, int64_t dh,
                             float scale, int causal, const void *q,
                             const void *k, const void *v, void *o,
                             void *workspace, float *lse);
  loomrt_status (*attention_grad)(void *state, void *stream, loomrt_dtype dt,
                                  int64_t bh, int64_t t, int64_t s, int64_t dh,
                                  float scale, int causal, const void *q,
                                  const void *k, const void *v,
                                  const void *dout, void *dq, void *dk,
                                  void *dv, void *workspace, const void *o,
                                  const float *lse);
  /// 1-bit compression (loomrt_onebit_*); null: not on this backend.
  loomrt_status (*onebit_compress)(void *state, void *stream, const float *x, float *error,
                                   uint8_t *packed, float *scale, size_t n);
  loomrt_status (*onebit_decompress)(void *state, void *stream, const uint8_t *packed,
                                     const float *scales, float *out, size_t chunks, size_t n);
  loomrt_status (*onebit_average)(void *state, void *stream, const uint8_t *packed,
                                  const float *scales, float *out, size_t world, size_t n);
  /// loomrt_block_compress / _decompress (kernel_math.h: e4m3Code, e2m1Code).
  loomrt_status (*block_compress)(void *state, void *stream, loomrt_block_codec codec,
                                  const float *x, void *packed, size_t n, size_t block);
  loomrt_status (*block_decompress)(void *state, void *stream, loomrt_block_codec codec,
                                    const void *packed, float *out, size_t n, size_t block);
  /// loomrt_dropout (kernel_math.h: dropoutKeep).
  loomrt_status (*dropout)(void *state, void *stream, loomrt_dtype dt,
                           const void *x, void *y, size_t n, float ratio,
                           uint64_t key, uint64_t offset);
  /// loomrt_gather_rows (indices already checked on the CPU backend).
  loomrt_status (*gather_rows)(void *state, void *stream, const void *table, size_t numRows,
                               size_t rowBytes, const int64_t *rows, size_t n, void *out,
                               int flags);
  /// loomrt_matmul_bias fused (null: none). Returns LOOMRT_ERR_UNSUPPORTED,
  /// without recording an error, for GEMMs it does not cover; the caller
  /// then runs the matmul and the add.
  loomrt_status (*matmul_bias)(void *state, void *stream, const loomrt_gemm *g,
                               const void *a, const void *b, const void *bias, void *c);
  /// loomrt_matmul_bias_act and loomrt_matmul_act_grad fused (null: none;
  /// LOOMRT_ERR_UNSUPPORTED, no error recorded, where the backend cannot:
  /// the caller composes them from the matmul and the elementwise call).
  loomrt_status (*matmul_bias_act)(void *state, void *stream, const loomrt_gemm *g,
                                   loomrt_unary_op act, const void *a, const void *b,
                                   const void *bias, void *aux, void *c);
  loomrt_status (*matmul_act_grad)(void *state, void *stream, const loomrt_gemm *g,
                                   loomrt_unary_op act, const void *a, const void *b,
                                   const void *aux, void *c);
  /// loomrt_matmul_bgrad fused (null: none; LOOMRT_ERR_UNSUPPORTED as above).
  loomrt_status (*matmul_bgrad)(void *state, void *stream, const loomrt_gemm *g, const void *a,
                                const void *b, void *c, void *db);
  /// loomrt_fused_elementwise: `p` checked (common/fused_eval.h), `src` the
  /// caller's program (its name and text, for a backend that generates
  /// code from it).
  loomrt_status (*fused)(void *state, void *stream, const struct FusedProgram *p,
                         const loomrt_fused_program *src, const struct FusedBuffers *b,
                         size_t n);
};

const KernelOps *cpuKernels();
#if defined(LOOMRT_HAVE_CUDA) || defined(LOOMRT_HAVE_HIP)
// runtime/gpu: one source, built for CUDA or for HIP (one vendor a build).
const KernelOps *gpuKernels();
#endif

struct BackendOps {
  const char *name;
  int (*device_count)();
  loomrt_status (*device_init)(int ordinal, void **state);
  void (*device_fini)(void *state);
  loomrt_status (*alloc)(void *state, loomrt_mem_space space, size_t bytes,
                         void **out);
  loomrt_status (*free)(void *state, loomrt_mem_space space, void *ptr);
  loomrt_status (*stream_create)(void *state, void **out);
  void (*stream_destroy)(void *stream);
  loomrt_status (*stream_synchronize)(void *stream);
  loomrt_status (*memcpy_async)(void *stream, void *dst, const void *src,
                                size_t bytes);
  loomrt_status (*event_create)(void *state, void **out);
  void (*event_destroy)(void *event);
  loomrt_status (*event_record)(void *event, void *stream);
  loomrt_status (*stream_wait_event)(void *stream, void *event);
  loomrt_status (*event_synchronize)(void *event);
  loomrt_status (*event_elapsed_ms)(void *start, void *end, float *ms);
  loomrt_status (*adam_f32)(void *stream, const loomrt_adam_config *cfg,
                            float *p, const float *g, float *m, float *v,
                            size_t n);
  loomrt_status (*adam_bf16grad)(void *stream, const loomrt_adam_config *cfg,
                                 float *p, const uint16_t *g, float *m,
                                 float *v, uint16_t *pOut, size_t n);
  /// loomrt_adam_multi (null: the per-tensor calls); tensors checked.
  loomrt_status (*adam_multi)(void *stream, const loomrt_adam_config *cfg, loomrt_dtype gradDt,
                              const loomrt_adam_tensor *t, size_t count);
  loomrt_status (*memory_info)(void *state, size_t *free, size_t *total);
  /// Makes the device the calling thread's (GPU runtimes keep a current
  /// device per thread).
  loomrt_status (*bind)(void *state);
  /// Link shaping (loomrt_comm_shape): `stamp` writes the stream's clock
  /// (ns) to *slot when the stream reaches it; `hold` keeps the stream busy
  /// until `ns` after that stamp.
  loomrt_status (*shape_stamp)(void *stream, int64_t *slot);
  loomrt_status (*shape_hold)(void *stream, const int64_t *slot, int64_t ns);
  /// loomrt_host_register: pin (and map) host memory the caller owns.
  loomrt_status (*host_register)(void *state, void *ptr, size_t bytes);
  loomrt_status (*host_unregister)(void *state, void *ptr);
  /// Stream capture (loomrt_stream_begin_capture): null where the backend
  /// has no graphs (the CPU's streams run work as it is issued). Capture is
  /// the calling thread's (other threads' allocations go on); `capture_end`
  /// ends it, instantiates the graph and reports its nodes.
  loomrt_status (*capture_begin)(void *stream);
  loomrt_status (*capture_end)(void *stream, void **exec, size_t *nodes);
  loomrt_status (*graph_launch)(void *exec, void *stream);
  void (*graph_destroy)(void *exec);
  const KernelOps *kernels;
};

/// Whether loomrt_attention may use a backend's fused kernels (yes unless
/// LOOMRT_ATTENTION=composed; tests switch it with setFusedAttention).
bool fusedAttentionEnabled();
void setFusedAttention(bool on);

// Records `msg` as this thread's last error and returns `s`.
loomrt_status fail(loomrt_status s, const std::string &msg);

/// A switch read from the environment variable `name` (LOOMRT_EPILOGUES,
/// LOOMRT_GRAPHS): unset, empty or `on` is On; `off` and `report` as
/// named; anything else is named on stderr and taken as On.
enum class EnvSwitch { On, Off, Report };
EnvSwitch envSwitch(const char *name);

const BackendOps *cpuBackend();
#if defined(LOOMRT_HAVE_CUDA) || defined(LOOMRT_HAVE_HIP)
const BackendOps *gpuBackend();
#endif

} // namespace loomrt

struct loomrt_device_t {
  loomrt_backend kind;
  const loomrt::BackendOps *ops;
  void *state;
};
struct loomrt_stream_t {
  loomrt_device dev;
  void *impl;
};
struct loomrt_event_t {
  loomrt_device dev;
  void *impl;
  bool recorded;
};

struct loomrt_graph_t {
  loomrt_device dev;
  void *impl; // the backend's executable graph
};

#endif // LOOMRT_COMMON_BACKEND_H
