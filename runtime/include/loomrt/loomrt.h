/* loomrt.h: the one C interface that Loom-generated training binaries call.
 *
 * Design (see runtime/README.md):
 *   - opaque handles (device, stream, event), a C ABI, no LLVM/MLIR dependency;
 *   - every call returns a loomrt_status; loomrt_last_error() gives a one-line
 *     message for the calling thread;
 *   - memory is allocated in an explicit space (GPU, pinned host, pageable host)
 *     and moved with asynchronous copies ordered on streams; events order
 *     streams against each other (the IR's tokens lower to events);
 *   - backends: CPU (always built; its "device memory" is a second host arena so
 *     that GPU schedules run unchanged on CPU-only machines) and one GPU vendor:
 *     CUDA (built when nvcc is found) or HIP (-DLOOMRT_ENABLE_HIP=ON, AMD
 *     gfx90a / gfx942), from the same single-source kernels (docs/hip.md).
 */
#ifndef LOOMRT_LOOMRT_H
#define LOOMRT_LOOMRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Enumerations are ints on the C ABI, and a C caller may pass any int: in
 * C++ they get int as their fixed underlying type, so an out-of-range value
 * is a value the runtime refuses with an error, not undefined behaviour. */
#ifdef __cplusplus
#define LOOMRT_ENUM(name) enum name : int
#else
#define LOOMRT_ENUM(name) enum name
#endif

typedef LOOMRT_ENUM(loomrt_status) {
  LOOMRT_OK = 0,
  LOOMRT_ERR_INVALID_ARGUMENT = 1,
  LOOMRT_ERR_OUT_OF_MEMORY = 2,
  LOOMRT_ERR_UNSUPPORTED = 3, /* backend not built in or not present */
  LOOMRT_ERR_BACKEND = 4,     /* the vendor library reported an error */
  LOOMRT_ERR_IO = 5
} loomrt_status;

typedef LOOMRT_ENUM(loomrt_backend) {
  LOOMRT_BACKEND_CPU = 0,
  LOOMRT_BACKEND_CUDA = 1,
  LOOMRT_BACKEND_HIP = 2
} loomrt_backend;

/* Where a buffer lives. Matches the dialect's #loom.mem<...> spaces. */
typedef LOOMRT_ENUM(loomrt_mem_space) {
  LOOMRT_MEM_DEVICE = 0,  /* GPU memory (CPU backend: a separate host arena) */
  LOOMRT_MEM_PINNED = 1,  /* page-locked host memory, DMA- and zero-copy-able */
  LOOMRT_MEM_PAGEABLE = 2 /* ordinary host memory */
} loomrt_mem_space;

typedef struct loomrt_device_t *loomrt_device;
typedef struct loomrt_stream_t *loomrt_stream;
typedef struct loomrt_event_t *loomrt_event;

/* --- errors ------------------------------------------------------------- */
const char *loomrt_status_string(loomrt_status s);
/* The message of the last failed call on this thread ("" when none). */
const char *loomrt_last_error(void);

/* --- devices ------------------------------------------------------------ */
/* 1 when the backend was built in and at least one device is present. */
int loomrt_backend_available(loomrt_backend backend);
const char *loomrt_backend_name(loomrt_backend backend);
loomrt_status loomrt_device_open(loomrt_backend backend, int ordinal,
                                 loomrt_device *out);
void loomrt_device_close(loomrt_device dev);
loomrt_backend loomrt_device_backend(loomrt_device dev);
/* Device memory (the CPU backend: physical host memory): free now, total. */
loomrt_status loomrt_device_memory(loomrt_device dev, size_t *free_bytes,
                                   size_t *total_bytes);
/* Makes dev the calling thread's device: a thread other than the one that
 * opened it calls this before it enqueues work (a GPU runtime keeps a
 * current device per thread, and a stream of another device is refused). */
loomrt_status loomrt_device_bind(loomrt_device dev);

/* --- memory ------------------------------------------------------------- */
loomrt_status loomrt_alloc(loomrt_device dev, loomrt_mem_space space,
                           size_t bytes, void **out);
loomrt_status loomrt_free(loomrt_device dev, loomrt_mem_space space, void *ptr);
/* Pins host memory the caller owns (e.g. a shared-memory mapping that
 * several processes hold) and maps it for the device, so copies from it
 * run at the pinned rate and kernels read it zero-copy, as memory from
 * loomrt_alloc(LOOMRT_MEM_PINNED); the CPU backend takes it as it is.
 * Unregister before unmapping it. */
loomrt_status loomrt_host_register(loomrt_device dev, void *ptr, size_t bytes);
loomrt_status loomrt_host_unregister(loomrt_device dev, void *ptr);

/* --- streams and events ------------------------------------------------- */
loomrt_status loomrt_stream_create(loomrt_device dev, loomrt_stream *out);
void loomrt_stream_destroy(loomrt_stream s);
loomrt_status loomrt_stream_synchronize(loomrt_stream s);
/* Copy between any two spaces, ordered on stream `s`. */
loomrt_status loomrt_memcpy_async(loomrt_stream s, void *dst, const void *src,
                                  size_t bytes);
loomrt_status loomrt_event_create(loomrt_device dev, loomrt_event *out);
void loomrt_event_destroy(loomrt_event e);
loomrt_status loomrt_event_record(loomrt_event e, loomrt_stream s);
/* Work queued on `s` after this call waits for `e` (cudaStreamWaitEvent). */
loomrt_status loomrt_stream_wait_event(loomrt_stream s, loomrt_event e);
loomrt_status loomrt_event_synchronize(loomrt_event e);
/* Milliseconds between two recorded, completed events. */
loomrt_status loomrt_event_elapsed_ms(loomrt_event start, loomrt_event end,
                                      float *ms);

/* --- graphs --------------------------------------------------------------
 * Work issued to a stream between begin_capture and end_capture is recorded,
 * not run, and end_capture returns it as a graph that graph_launch replays
 * on any stream of the device (CUDA graphs, hipGraph). The capture is the
 * calling thread's: a call on that thread that cannot be captured (a
 * synchronisation, a copy from pageable memory) invalidates it, and
 * end_capture then fails, leaving nothing run. LOOMRT_ERR_UNSUPPORTED on
 * backends without graphs (the CPU), with no error recorded. */
typedef struct loomrt_graph_t *loomrt_graph;
loomrt_status loomrt_stream_begin_capture(loomrt_stream s);
/* Ends the capture begun on `s`; *nodes (when not null): the graph's nodes. */
loomrt_status loomrt_stream_end_capture(loomrt_stream s, loomrt_graph *out, size_t *nodes);
loomrt_status loomrt_graph_launch(loomrt_graph g, loomrt_stream s);
void loomrt_graph_destroy(loomrt_graph g);

/* --- optimizer updates -------------------------------------------------- */
typedef struct loomrt_adam_config {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
  int decoupled_weight_decay; /* 1: AdamW (Loshchilov & Hutter); 0: L2 in grad */
  int64_t step;               /* 1-based step used for bias correction */
  /* > 0: 1-bit Adam's update after its freeze step (Tang et al. 2021,
   * Algorithm 1): `grad` is the momentum, already updated and averaged
   * across ranks; m becomes it, v stays frozen and its bias correction
   * stays at this step; decoupled weight decay only. 0: plain Adam. */
  int64_t freeze_step;
  /* Plain Adam only: > 1 makes this update of v stand for that many steps,
   * v = beta2^k v + (1 - beta2^k) g^2 (1-bit Adam's variance refresh: the
   * steps since v was last updated); 0 or 1: one step, as usual. */
  int64_t variance_steps;
} loomrt_adam_config;

/* One Adam/AdamW step over n fp32 elements, in place on param, m and v:
 * the PyTorch formulation (torch.optim.AdamW, foreach=False), i.e.
 *   g' = g (+ wd*p if L2);  p *= 1 - lr*wd (if decoupled)
 *   m = b1*m + (1-b1) g';   v = b2*v + (1-b2) g'^2
 *   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
 * With freeze_step F > 0 (1-bit Adam after the freeze):
 *   p *= 1 - lr*wd;  m = g;  p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^F) + eps)
 * All pointers must be accessible from the stream's device. */
loomrt_status loomrt_adam_f32(loomrt_stream s, const loomrt_adam_config *cfg,
                              float *param, const float *grad, float *m,
                              float *v, size_t n);

/* --- compute kernels ----------------------------------------------------
 * One entry point per op family of the loom dialect. Tensors are dense,
 * row-major and contiguous unless strides are given; every tensor argument
 * of a call has the call's dtype except where noted (indices are int64,
 * losses fp32). Arithmetic is fp32 whatever the storage type (bf16 values
 * are widened on load and rounded to nearest even on store). Kernels are
 * ordered on the stream like copies. Row ops (norms, softmax, cross-entropy)
 * work on the last dimension of a [rows, D] view. */
/* I64 is the storage type of token ids and labels (kernels take it where an
 * argument says int64, checkpoints store it) and of integer tensors computed
 * on the device (position ids from a mask): binary, select, cast, fill and
 * cumsum take it as their dtype, with exact int64 arithmetic; the other
 * kernels refuse it. */
typedef LOOMRT_ENUM(loomrt_dtype) {
  LOOMRT_F32 = 0,
  LOOMRT_BF16 = 1,
  LOOMRT_I64 = 2
} loomrt_dtype;

/* Narrow float and symmetric integer codecs with one fp32 scale per block
 * of elements (scale = the block's largest magnitude / the codec's top). */
typedef LOOMRT_ENUM(loomrt_block_codec) {
  LOOMRT_CODEC_FP8_E4M3 = 0, /* OCP FP8 E4M3, a byte an element, at most 448 */
  LOOMRT_CODEC_FP4_E2M1 = 1, /* OCP MX FP4 E2M1, half a byte, at most 6 */
  LOOMRT_CODEC_INT8 = 2,     /* symmetric int8, a byte, -127..127 (ZeRO++ qwZ) */
  LOOMRT_CODEC_INT4 = 3      /* symmetric int4, half a byte, -7..7 (ZeRO++ qgZ) */
} loomrt_block_codec;

typedef LOOMRT_ENUM(loomrt_unary_op) {
  LOOMRT_NEG, LOOMRT_EXP, LOOMRT_LOG, LOOMRT_SQRT, LOOMRT_RSQRT, LOOMRT_TANH,
  LOOMRT_ERF, LOOMRT_SIN, LOOMRT_COS, LOOMRT_SIGMOID, LOOMRT_RELU,
  LOOMRT_SILU, LOOMRT_GELU, LOOMRT_GELU_TANH, LOOMRT_UNARY_OP_COUNT
} loomrt_unary_op;

/* EQ, NE, LT, LE: 1 where the comparison holds, else 0, in the call's
 * dtype. */
typedef LOOMRT_ENUM(loomrt_binary_op) {
  LOOMRT_ADD, LOOMRT_SUB, LOOMRT_MUL, LOOMRT_DIV, LOOMRT_POW, LOOMRT_MAX,
  LOOMRT_MIN, LOOMRT_EQ, LOOMRT_NE, LOOMRT_LT, LOOMRT_LE,
  LOOMRT_BINARY_OP_COUNT
} loomrt_binary_op;

typedef LOOMRT_ENUM(loomrt_reduce_op) {
  LOOMRT_REDUCE_SUM, LOOMRT_REDUCE_MEAN, LOOMRT_REDUCE_MAX, LOOMRT_REDUCE_MIN
} loomrt_reduce_op;

#define LOOMRT_MAX_RANK 8

/* y = op(x) over n elements. */
loomrt_status loomrt_unary(loomrt_stream s, loomrt_unary_op op,
                           loomrt_dtype dt, const void *x, void *y, size_t n);
/* dx = dy * op'(x) for op in RELU, SILU, GELU, GELU_TANH, SIGMOID, TANH, EXP. */
loomrt_status loomrt_unary_grad(loomrt_stream s, loomrt_unary_op op,
                                loomrt_dtype dt, const void *dy, const void *x,
                                void *dx, size_t n);
/* out = a op b with NumPy broadcasting. All three shapes have `rank` dims
 * (pad with leading 1s); each a/b dim is 1 or out's dim. On I64, every op
 * but DIV and POW, wrapping modulo 2^64 as two's complement does. */
loomrt_status loomrt_binary(loomrt_stream s, loomrt_binary_op op,
                            loomrt_dtype dt, const void *a,
                            const int64_t *a_shape, const void *b,
                            const int64_t *b_shape, void *out,
                            const int64_t *out_shape, int rank);
/* out = cond ? a : b with broadcasting as loomrt_binary; cond is uint8. */
loomrt_status loomrt_select(loomrt_stream s, loomrt_dtype dt,
                            const uint8_t *cond, const int64_t *c_shape,
                            const void *a, const int64_t *a_shape,
                            const void *b, const int64_t *b_shape, void *out,
                            const int64_t *out_shape, int rank);
/* Inverted dropout of n elements: y[i] = x[i] / (1 - ratio) where element
 * offset + i of the stream `key` is kept, else 0. An element is kept when
 * the uniform draw splitmix64(key ^ splitmix64(offset + i)), mapped to
 * (0, 1], exceeds `ratio`: a counter-based mask, so every backend, every
 * thread count and a resumed run draw the same one, and the backward
 * (the same call on dy, with the same key and offset) reuses it without
 * storing it. 0 <= ratio < 1. */
loomrt_status loomrt_dropout(loomrt_stream s, loomrt_dtype dt, const void *x,
                             void *y, size_t n, float ratio, uint64_t key,
                             uint64_t offset);
/* Row gather: out[i] = row rows[i] of `table` (rows of row_bytes bytes),
 * i < n. The table may be device memory or pinned host memory: a GPU then
 * reads the host's rows across PCIe itself (zero-copy, Min et al., "Large
 * GCN training with GPU-oriented data communication", §4): a warp a row,
 * each warp's reads starting on the 128-byte boundary at or below its
 * row's start (the bytes before it are read and dropped) so requests are
 * whole PCIe-sized segments, 16-byte words where the row size allows.
 * rows and out are the stream's device's memory; a row index outside
 * [0, num_rows) is an error on the CPU backend and undefined on a GPU
 * (check them where they are made). With LOOMRT_GATHER_SORTED in flags a
 * GPU first sorts the indices (a radix sort on the device, keeping each
 * one's place) and reads the rows in ascending order, writing each to its
 * place: random rows of a large host table then read at the rate of
 * sorted ones (measured on an H100: 512-byte rows 19.8 GB/s random, 52.1
 * sorted; the GPU's address translation of host memory misses less), for
 * the price of the sort. The result is the same either way. */
#define LOOMRT_GATHER_SORTED 1
loomrt_status loomrt_gather_rows(loomrt_stream s, const void *table, size_t num_rows,
                                 size_t row_bytes, const int64_t *rows, size_t n, void *out,
                                 int flags);
/* The key of dropout `op` at training step `step` of a run seeded `seed`
 * (steps count from 0; a resumed run passes the step it resumes at). */
uint64_t loomrt_random_key(uint64_t seed, int64_t step, uint64_t op);
/* 1-bit compression with error feedback (1-bit Adam: Tang et al. 2021,
 * Algorithm 1, as DeepSpeed's compressed_allreduce computes it), over n
 * fp32 elements, n a multiple of 8:
 *   c = x + error;  scale = ||c||_2 / sqrt(n);
 *   bit i = (c_i >= 0) (sign(0) = +1), packed 8 per byte, element 8j+k in
 *   bit 7-k of byte j (numpy.packbits' order);
 *   error = c - scale * sign(c).
 * packed holds n/8 bytes, *scale one float (device memory, like the rest:
 * nothing is read back to the host). x and packed may not overlap error. */
loomrt_status loomrt_onebit_compress(loomrt_stream s, const float *x, float *error,
                                     uint8_t *packed, float *scale, size_t n);
/* out[c·n + i] = scales[c] · (bit i of chunk c ? +1 : -1) for `chunks`
 * chunks of n elements (n a multiple of 8) packed one after another. */
loomrt_status loomrt_onebit_decompress(loomrt_stream s, const uint8_t *packed,
                                       const float *scales, float *out,
                                       size_t chunks, size_t n);
/* The server's average of `world` workers' chunks of n elements:
 * out_i = (1/world) Σ_w scales[w] · sign_w,i, the workers' packed chunks
 * one after another. */
loomrt_status loomrt_onebit_average(loomrt_stream s, const uint8_t *packed,
                                    const float *scales, float *out,
                                    size_t world, size_t n);
/* Block-scaled narrow floats (Streaming DiLoCo's quantised exchange): n
 * elements (a multiple of block, block even) in blocks of `block`:
 *   scale_b = max |x_i| over block b / M (M the codec's largest value; 1
 *   for a block of zeros), code_i = x_i / scale_b rounded to the nearest
 *   value of the codec (ties to even, saturating at +-M).
 * packed holds the n/block fp32 scales, then the codes: a byte each (E4M3)
 * or two a byte (E2M1, element 2j in the low nibble). Inputs must be
 * finite. Decompression writes code value * scale. */
loomrt_status loomrt_block_compress(loomrt_stream s, loomrt_block_codec codec, const float *x,
                                    void *packed, size_t n, size_t block);
loomrt_status loomrt_block_decompress(loomrt_stream s, loomrt_block_codec codec,
                                      const void *packed, float *out, size_t n, size_t block);
/* The packed size of n elements in blocks of `block`: 4·n/block bytes of
 * scales, then n (E4M3) or n/2 (E2M1) bytes of codes. */
size_t loomrt_block_packed_bytes(loomrt_block_codec codec, size_t n, size_t block);
/* y = a + weight * (b - a) over n elements, as torch.lerp computes it:
 * b - (b - a) * (1 - weight) when weight >= 0.5. */
loomrt_status loomrt_lerp(loomrt_stream s, loomrt_dtype dt, const void *a, const void *b,
                          void *y, size_t n, float weight);
/* Rotary position embeddings in the rotate-half form (Llama's, GPT-NeoX's):
 * x is `rows` rows of d elements (d even; [..., T, d] with row r at
 * position r % period), cos and sin are [period, d];
 *   y = x cos + rotate_half(x) sin,  rotate_half(x) = [-x2, x1]
 * with x1, x2 the halves of a row. `backward`: the product with the
 * transpose, the gradient of that (dx = dy cos + [ (dy sin)2, -(dy sin)1 ]).
 * One rounding to dt per element (fp32 inside). */
loomrt_status loomrt_rotary(loomrt_stream s, loomrt_dtype dt, const void *x, const void *cos,
                            const void *sin, void *y, size_t rows, size_t period, size_t d,
                            int backward);
/* A fused elementwise region (loomc's loom-fuse): a straight-line program
 * over n elements, evaluated per element in fp32. Instruction k defines
 * register k (STORE defines none):
 *   LOAD        r_k = inputs[a][i] (its dtype: in_types[a])
 *   UNARY       r_k = kind(r_a)                     (a loomrt_unary_op)
 *   BINARY      r_k = r_a kind r_b                  (a loomrt_binary_op)
 *   UNARY_GRAD  r_k = r_a * kind'(r_b)              (dy, x: as loomrt_unary_grad)
 *   STORE       outputs[a][i] = r_b, rounded to out_types[a]
 *   ROUND       r_k = r_a rounded to bf16 (nearest, ties to even) and back
 * Each op computes what the unfused call computes on one element in fp32;
 * a program that rounds after each op an unfused bf16 call would have
 * written as bf16 (loom-fuse's) gives the unfused calls' bits.
 * Outputs may alias inputs of the same element type (element i is read
 * before it is written). */
typedef LOOMRT_ENUM(loomrt_fused_opcode) {
  LOOMRT_FUSED_LOAD, LOOMRT_FUSED_UNARY, LOOMRT_FUSED_BINARY,
  LOOMRT_FUSED_UNARY_GRAD, LOOMRT_FUSED_STORE, LOOMRT_FUSED_ROUND, LOOMRT_FUSED_OPCODE_COUNT
} loomrt_fused_opcode;
typedef struct loomrt_fused_inst {
  int32_t opcode, kind, a, b;
} loomrt_fused_inst;
/* At most LOOMRT_FUSED_MAX_INSTS instructions and LOOMRT_FUSED_MAX_IO inputs
 * and outputs each. `name` names the region's generated kernel. */
#define LOOMRT_FUSED_MAX_INSTS 48
#define LOOMRT_FUSED_MAX_IO 8
typedef struct loomrt_fused_program {
  const char *name;
  int32_t n_inputs, n_outputs, n_insts;
  const loomrt_dtype *in_types, *out_types;
  const loomrt_fused_inst *insts;
} loomrt_fused_program;
/* Runs program `p` over n elements. On CUDA the region runs as its own
 * kernel, generated from the program (loomrt_fused_source) and compiled
 * at its first call with NVRTC; elsewhere (the CPU, HIP, or CUDA without
 * NVRTC) the backend's interpreter of the same program runs it. */
loomrt_status loomrt_fused_elementwise(loomrt_stream s, const loomrt_fused_program *p,
                                       const void *const *inputs, void *const *outputs,
                                       size_t n);
/* The single-source CUDA/HIP kernel of program `p` (null-terminated, with
 * its #include of the runtime's common/kernel_math.h), written into `buf`
 * when it fits in `cap` bytes; returns the length without the terminator,
 * or 0 for an invalid program (loomrt_last_error says why). */
size_t loomrt_fused_source(const loomrt_fused_program *p, char *buf, size_t cap);

/* Element-type conversion of n elements. Float to I64 truncates toward
 * zero, saturates at the int64 range and maps NaN to 0. */
loomrt_status loomrt_cast(loomrt_stream s, loomrt_dtype from, const void *x,
                          loomrt_dtype to, void *y, size_t n);
/* Set n elements to `value`. */
loomrt_status loomrt_fill(loomrt_stream s, loomrt_dtype dt, void *x,
                          float value, size_t n);
/* Generic strided copy (permute, slice, concat into a slot, broadcast):
 * for every index i of `shape`, dst[i . dst_strides] = src[i . src_strides];
 * strides in elements, may be 0 on the source. */
loomrt_status loomrt_copy_strided(loomrt_stream s, size_t elem_size,
                                  const void *src, const int64_t *src_strides,
                                  void *dst, const int64_t *dst_strides,
                                  const int64_t *shape, int rank);
/* Inclusive (or, with `exclusive`, exclusive) prefix sum along the middle
 * axis of an [outer, len, inner] view, from the end with `reverse` (ONNX
 * CumSum): y[o, r, i] = sum of x[o, r', i] over r' <= r (r' < r; r' >= r;
 * r' > r). Floats accumulate in fp32 in that order; I64 exactly. */
loomrt_status loomrt_cumsum(loomrt_stream s, loomrt_dtype dt, const void *x,
                            void *y, int64_t outer, int64_t len, int64_t inner,
                            int exclusive, int reverse);
/* Reduce the middle axis of an [outer, len, inner] view:
 * y[o, i] = reduce_r x[o, r, i]. */
loomrt_status loomrt_reduce(loomrt_stream s, loomrt_reduce_op op,
                            loomrt_dtype dt, const void *x, void *y,
                            int64_t outer, int64_t len, int64_t inner);

/* Batched GEMM: for b in [0, batch): C_b = alpha op(A_b) op(B_b) + beta C_b,
 * op = transpose when trans_* is set; A_b is M x K after op, B_b is K x N,
 * C_b is M x N; batch strides in elements (0 broadcasts an operand).
 * A and B have dtype `in`, C has dtype `out`; accumulation is fp32. */
typedef struct loomrt_gemm {
  int trans_a, trans_b;
  int64_t batch, m, n, k;
  int64_t stride_a, stride_b, stride_c;
  float alpha, beta;
  loomrt_dtype in, out;
} loomrt_gemm;
loomrt_status loomrt_matmul(loomrt_stream s, const loomrt_gemm *g,
                            const void *a, const void *b, void *c);
/* loomrt_matmul with a bias added to every row of each C_b (a GEMM
 * epilogue): C_b = alpha op(A_b) op(B_b) + bias, `bias` n elements of dtype
 * `out`; beta must be 0. Where the backend fuses it (cuBLASLt on CUDA) the
 * bias is added to the fp32 accumulator before C is rounded to `out`;
 * elsewhere it is loomrt_matmul followed by loomrt_binary's add. */
loomrt_status loomrt_matmul_bias(loomrt_stream s, const loomrt_gemm *g,
                                 const void *a, const void *b, const void *bias, void *c);
/* loomrt_matmul_bias followed by an activation, as one GEMM epilogue where
 * the backend has it: aux_b = op(A_b) op(B_b) + bias (the activation's
 * input, kept for the gradient) and C_b = act(aux_b), both of dtype `out`
 * and laid out as C. `act` is LOOMRT_GELU_TANH (cuBLASLt's GELU epilogue
 * on CUDA, from the fp32 accumulator); elsewhere, or where the backend
 * cannot, it is loomrt_matmul_bias into aux and loomrt_unary into C. */
loomrt_status loomrt_matmul_bias_act(loomrt_stream s, const loomrt_gemm *g,
                                     loomrt_unary_op act, const void *a, const void *b,
                                     const void *bias, void *aux, void *c);
/* The gradient through that activation, in the GEMM that computes the
 * activation's output gradient: C_b = (op(A_b) op(B_b)) * act'(aux_b),
 * `aux` laid out as C (dtype `out`). beta must be 0. On CUDA cuBLASLt's
 * DGELU epilogue (the product is not rounded before the multiply);
 * elsewhere loomrt_matmul into C, then loomrt_unary_grad in place. */
loomrt_status loomrt_matmul_act_grad(loomrt_stream s, const loomrt_gemm *g,
                                     loomrt_unary_op act, const void *a, const void *b,
                                     const void *aux, void *c);

/* A weight's gradient GEMM with its bias's gradient in the epilogue: C =
 * alpha op(A) op(B) (one batch, beta 0) and db[i] = sum over k of op(A)[i, k]
 * (m elements of dtype `out`; `in` must equal `out`): for a linear layer's
 * weight stored [out, in], op(A) = dY^T and db is the column sum of dY. On
 * CUDA cuBLASLt's BGRADB epilogue (the sum accumulates in fp32 beside the
 * product); elsewhere loomrt_matmul, then loomrt_reduce over A. */
loomrt_status loomrt_matmul_bgrad(loomrt_stream s, const loomrt_gemm *g, const void *a,
                                  const void *b, void *c, void *db);

/* Layer norm over the last dim of [rows, d]; bias may be NULL. */
loomrt_status loomrt_layer_norm(loomrt_stream s, loomrt_dtype dt,
                                const void *x, const void *w, const void *b,
                                void *y, int64_t rows, int64_t d, float eps);
/* dx, and dw / db accumulated over rows (overwritten, not added to). */
loomrt_status loomrt_layer_norm_grad(loomrt_stream s, loomrt_dtype dt,
                                     const void *dy, const void *x,
                                     const void *w, void *dx, void *dw,
                                     void *db, int64_t rows, int64_t d,
                                     float eps);
loomrt_status loomrt_rms_norm(loomrt_stream s, loomrt_dtype dt, const void *x,
                              const void *w, void *y, int64_t rows, int64_t d,
                              float eps);
loomrt_status loomrt_rms_norm_grad(loomrt_stream s, loomrt_dtype dt,
                                   const void *dy, const void *x,
                                   const void *w, void *dx, void *dw,
                                   int64_t rows, int64_t d, float eps);
/* Softmax (or log-softmax) of scale*x over the last dim; with `causal`, row
 * r of each [t, d] block sees columns <= r + (d - t) (keys after the query
 * are masked), t = rows_per_block (0: no mask). */
loomrt_status loomrt_softmax(loomrt_stream s, loomrt_dtype dt, const void *x,
                             void *y, int64_t rows, int64_t d, float scale,
                             int log, int64_t causal_block);
/* Given the output y: dx = scale * y (dy - sum(dy y)); log: dy - exp(y) sum dy. */
loomrt_status loomrt_softmax_grad(loomrt_stream s, loomrt_dtype dt,
                                  const void *dy, const void *y, void *dx,
                                  int64_t rows, int64_t d, float scale,
                                  int log);
/* out[i, :] = table[idx[i], :]; an index outside [0, vocab) is an error on
 * the CPU and gives a zero row on the GPU. */
loomrt_status loomrt_embedding(loomrt_stream s, loomrt_dtype dt,
                               const void *table, const int64_t *idx,
                               void *out, int64_t n, int64_t d, int64_t vocab);
/* dtable (fp32, vocab x d) = 0, then dtable[idx[i], :] += dy[i, :]. */
loomrt_status loomrt_embedding_grad(loomrt_stream s, loomrt_dtype dt,
                                    const void *dy, const int64_t *idx,
                                    float *dtable, int64_t n, int64_t d,
                                    int64_t vocab);
/* loss (one fp32) = mean_r (logsumexp(logits[r]) - logits[r, labels[r]]). */
loomrt_status loomrt_cross_entropy(loomrt_stream s, loomrt_dtype dt,
                                   const void *logits, const int64_t *labels,
                                   float *loss, int64_t rows, int64_t classes);
/* dlogits = (softmax(logits) - onehot(labels)) * dloss[0] / rows. */
loomrt_status loomrt_cross_entropy_grad(loomrt_stream s, loomrt_dtype dt,
                                        const void *logits,
                                        const int64_t *labels,
                                        const float *dloss, void *dlogits,
                                        int64_t rows, int64_t classes);
/* CSR sparse x dense: y[r, :] = sum_j vals[j] x[col[j], :]. */
loomrt_status loomrt_spmm(loomrt_stream s, loomrt_dtype dt,
                          const int64_t *row_ptr, const int64_t *col_idx,
                          const void *vals, const void *x, void *y,
                          int64_t rows, int64_t features);
/* Mixture of experts (see the loom ops of the same names).
 * top_k: values[r, j] = the j-th largest of x[r, 0..n), indices[r, j] its
 * position (i64), equal values in order of position; 1 <= k <= n. */
loomrt_status loomrt_top_k(loomrt_stream s, loomrt_dtype dt, const void *x,
                           void *values, int64_t *indices, int64_t rows,
                           int64_t n, int64_t k);
/* dx [rows, n] = 0, then dx[r, indices[r, j]] = dv[r, j]. */
loomrt_status loomrt_top_k_grad(loomrt_stream s, loomrt_dtype dt,
                                const void *dv, const int64_t *indices,
                                void *dx, int64_t rows, int64_t n, int64_t k);
/* Each choice's row in its expert's buffer: experts[t, j] in [0, num_experts)
 * gets slot e * capacity + p, p the number of earlier choices of e in the
 * order (j, t), or -1 when p >= capacity; counts[e] (f32) the choices of e. */
loomrt_status loomrt_moe_slots(loomrt_stream s, const int64_t *experts,
                               int64_t *slots, float *counts, int64_t n,
                               int64_t k, int64_t num_experts,
                               int64_t capacity);
/* out [rows, d] = 0, then out[slots[t, j]] = x[t] * (weights ? weights[t, j]
 * : 1) for slots[t, j] >= 0 (each row taken at most once). */
loomrt_status loomrt_moe_dispatch(loomrt_stream s, loomrt_dtype dt,
                                  const void *x, const int64_t *slots,
                                  const void *weights, void *out, int64_t n,
                                  int64_t k, int64_t d, int64_t rows);
/* out[t] = sum over j with slots[t, j] >= 0 of (weights ? weights[t, j] : 1)
 * * y[slots[t, j]]; y has `rows` rows. */
loomrt_status loomrt_moe_combine(loomrt_stream s, loomrt_dtype dt,
                                 const void *y, const int64_t *slots,
                                 const void *weights, void *out, int64_t n,
                                 int64_t k, int64_t d, int64_t rows);
/* out[t, j] = dot(a[t], b[slots[t, j]]), 0 where slots[t, j] < 0. */
loomrt_status loomrt_moe_slot_dot(loomrt_stream s, loomrt_dtype dt,
                                  const void *a, const void *b,
                                  const int64_t *slots, void *out, int64_t n,
                                  int64_t k, int64_t d, int64_t rows);
/* SGD with momentum (torch.optim.SGD, dampening 0) over n fp32 elements. */
loomrt_status loomrt_sgd_f32(loomrt_stream s, float lr, float momentum,
                             int nesterov, float *param, const float *grad,
                             float *momentum_buf, size_t n);

/* Scaled dot-product attention over bh = batch*heads independent blocks:
 * q [bh, t, dh], k and v [bh, s, dh], o [bh, t, dh]:
 *   o = softmax(scale q k^T + mask) v,
 * with `causal` hiding from query i the keys after position i + (s - t).
 * Composed from GEMMs and the softmax kernel; `workspace` (device memory of
 * loomrt_attention_workspace_bytes) holds the probabilities. */
size_t loomrt_attention_workspace_bytes(loomrt_dtype dt, int64_t bh, int64_t t,
                                        int64_t s, int backward);
loomrt_status loomrt_attention(loomrt_stream st, loomrt_dtype dt, int64_t bh,
                               int64_t t, int64_t s, int64_t dh, float scale,
                               int causal, const void *q, const void *k,
                               const void *v, void *o, void *workspace);
/* Gradients of loomrt_attention (probabilities recomputed, not stored). */
loomrt_status loomrt_attention_grad(loomrt_stream st, loomrt_dtype dt,
                                    int64_t bh, int64_t t, int64_t s,
                                    int64_t dh, float scale, int causal,
                                    const void *q, const void *k,
                                    const void *v, const void *dout, void *dq,
                                    void *dk, void *dv, void *workspace);
/* loomrt_attention that also keeps what its gradient would recompute:
 * where the backend's fused kernel runs, `saved` (device memory of
 * loomrt_attention_saved_bytes) receives each query row's log-sum-exp, and
 * loomrt_attention_grad_saved, given the same q, k, v, this call's output
 * `o` and `saved`, skips the forward its gradient otherwise runs again
 * (FlashAttention-2's backward, Dao 2023, Algorithm 2, reads the forward's
 * L). Where the fused kernel does not run (the composed path) `saved` is
 * not written and the gradient recomputes, as loomrt_attention_grad does:
 * the results are the same either way. */
size_t loomrt_attention_saved_bytes(int64_t bh, int64_t t);
loomrt_status loomrt_attention_save(loomrt_stream st, loomrt_dtype dt, int64_t bh,
                                    int64_t t, int64_t s, int64_t dh, float scale,
                                    int causal, const void *q, const void *k,
                                    const void *v, void *o, void *saved, void *workspace);
loomrt_status loomrt_attention_grad_saved(loomrt_stream st, loomrt_dtype dt,
                                          int64_t bh, int64_t t, int64_t s,
                                          int64_t dh, float scale, int causal,
                                          const void *q, const void *k,
                                          const void *v, const void *o,
                                          const void *saved, const void *dout,
                                          void *dq, void *dk, void *dv,
                                          void *workspace);

/* --- collectives -----------------------------------------------------------
 * A communicator is a group of ranks; collectives are ordered on a stream
 * like kernels. loomrt_comm_init_from_env bootstraps from mpirun's
 * OMPI_COMM_WORLD_RANK/SIZE or the usual RANK/WORLD_SIZE variables; with
 * neither set, the world is this process alone (every collective is then a
 * copy or nothing). Several ranks: MPI for CPU ranks under mpirun, NCCL for
 * GPUs, and elastic TCP for CPU ranks started with MASTER_ADDR and
 * MASTER_PORT (or any device with LOOMRT_TRANSPORT=tcp), where a rank that
 * dies leaves the group: its blocks of later all-gathers and all-to-alls
 * are zeros and reductions (MEAN included) run over the ranks that remain.
 * A transport the build lacks is LOOMRT_ERR_UNSUPPORTED with a message. */
typedef struct loomrt_comm_t *loomrt_comm;
loomrt_status loomrt_comm_init_from_env(loomrt_device dev, loomrt_comm *out);
/* This process's rank on its node (LOCAL_RANK, else mpirun's
 * OMPI_COMM_WORLD_LOCAL_RANK; 0 without either): the GPU ordinal a rank
 * opens. */
int loomrt_local_rank(void);
int loomrt_comm_rank(loomrt_comm c);
int loomrt_comm_size(loomrt_comm c);
/* The rank `offset` after this one in c (before it when negative), or -1
 * past either end: the peers of loomrt_send_recv between pipeline stages. */
int loomrt_comm_peer(loomrt_comm c, int offset);
/* Ranks with equal `color` form a sub-communicator, ordered by `key`
 * (MPI_Comm_split): how topology levels become groups. */
loomrt_status loomrt_comm_split(loomrt_comm c, int color, int key,
                                loomrt_comm *out);
/* The group of the ranks that differ from this one only in the levels of
 * `levels` (bit i: level i) of a topology of `num_levels` levels of the
 * given sizes, innermost first (ranks number with the innermost level
 * fastest), split from c (collective over c): the levels' digits order a
 * rank in its group, the other levels' digits name the group. The sizes'
 * product must be c's size. *spans_outer, when not null, is set to 1 when
 * the group's ranks span more than one block of `outer_ranks` consecutive
 * ranks (a "node" of that many), else 0. */
loomrt_status loomrt_comm_split_levels(loomrt_comm c, uint64_t levels, int num_levels,
                                       const int64_t *sizes, int64_t outer_ranks,
                                       int *spans_outer, loomrt_comm *out);
/* A communicator of the same ranks that works independently of c
 * (collective over c's ranks, like a split with one color). */
loomrt_status loomrt_comm_dup(loomrt_comm c, loomrt_comm *out);
/* 1 when two host threads may run collectives at the same time on c and on
 * a duplicate of it: the one-rank world, elastic TCP, MPI with
 * MPI_THREAD_MULTIPLE; not NCCL. */
int loomrt_comm_concurrent(loomrt_comm c);
/* Whether c goes on when a rank is lost (elastic TCP only; MPI and NCCL end
 * the job): `allowed` = 1 for programs whose every rank holds the whole
 * state (plain data parallelism, DiLoCo replicas compiled elastic); 0, the
 * default, makes a loss fail the collective that finds it and every one
 * after, so a program holding shards on every rank never trains on. */
loomrt_status loomrt_comm_set_elastic(loomrt_comm c, int allowed);
/* The ranks still in c (its size but on elastic TCP after a loss). */
int loomrt_comm_live(loomrt_comm c);
void loomrt_comm_destroy(loomrt_comm c);
/* Emulates a slower link under c (bench runs on one host standing for
 * several): each collective's stream is held until the bytes the rank sends
 * (loomrt_comm_bytes_sent's count) would have crossed a link of
 * `bytes_per_second`, from when the stream reached the collective; a
 * faster real transfer ends early and waits, a slower one is not slowed
 * further. 0 turns it off. GPU (the comm stream held by one spinning
 * thread) and CPU (a sleep) backends; the driver sets it from
 * LOOMRT_SLOW_LINK. */
loomrt_status loomrt_comm_shape(loomrt_comm c, double bytes_per_second);
/* recv = op over ranks of send (count elements each). MEAN divides by size. */
loomrt_status loomrt_all_reduce(loomrt_comm c, loomrt_stream s,
                                loomrt_dtype dt, const void *send, void *recv,
                                size_t count, loomrt_reduce_op op);
/* Rank r receives block r (recv_count elements) of the reduction. */
loomrt_status loomrt_reduce_scatter(loomrt_comm c, loomrt_stream s,
                                    loomrt_dtype dt, const void *send,
                                    void *recv, size_t recv_count,
                                    loomrt_reduce_op op);
/* recv = concatenation over ranks of send (send_count elements each). */
loomrt_status loomrt_all_gather(loomrt_comm c, loomrt_stream s,
                                loomrt_dtype dt, const void *send, void *recv,
                                size_t send_count);
/* recv = concatenation over ranks of send (bytes each): packed payloads. */
loomrt_status loomrt_all_gather_bytes(loomrt_comm c, loomrt_stream s, const void *send,
                                      void *recv, size_t bytes);
/* Block j (count bytes) of send goes to rank j, arriving as block r. Bytes,
 * so packed (compressed) payloads travel as they are. */
loomrt_status loomrt_all_to_all(loomrt_comm c, loomrt_stream s,
                                const void *send, void *recv,
                                size_t bytes_per_rank);
loomrt_status loomrt_broadcast(loomrt_comm c, loomrt_stream s, void *buf,
                               size_t bytes, int root);
/* Point to point (pipeline stages): sends send_bytes of `send` to rank
 * `dest` of c and receives recv_bytes into `recv` from rank `src`, both at
 * once, ordered on s like a collective (either side may be absent: dest or
 * src -1). Each pair of ranks must exchange in the same order with the same
 * sizes (a mismatch fails on TCP, hangs NCCL). The two directions proceed
 * together, so stages that send to each other do not wait on each other
 * (NCCL group, MPI_Sendrecv, one poll loop on TCP). A rank may name itself
 * (a copy). Not elastic: losing the peer fails the call. */
loomrt_status loomrt_send_recv(loomrt_comm c, loomrt_stream s, const void *send,
                               size_t send_bytes, int dest, void *recv, size_t recv_bytes,
                               int src);
/* Bytes this rank has sent through c since it was created, per kind of
 * collective (kind < 0: all of them), counted as the bandwidth-optimal
 * algorithms send them (NCCL's bus-bandwidth convention), so they compare
 * across transports: all-reduce 2(W-1)/W of the buffer, reduce-scatter and
 * all-gather (W-1) blocks, all-to-all (W-1) blocks, broadcast the buffer,
 * send_recv what it sends to another rank (W ranks; 0 on a communicator of
 * one). */
typedef LOOMRT_ENUM(loomrt_collective_kind) {
  LOOMRT_COLL_ALL_REDUCE, LOOMRT_COLL_REDUCE_SCATTER, LOOMRT_COLL_ALL_GATHER,
  LOOMRT_COLL_ALL_TO_ALL, LOOMRT_COLL_BROADCAST, LOOMRT_COLL_SEND_RECV,
  LOOMRT_COLL_KIND_COUNT
} loomrt_collective_kind;
uint64_t loomrt_comm_bytes_sent(loomrt_comm c, int kind);
/* What one collective adds to loomrt_comm_bytes_sent on a communicator of
 * `ranks` ranks, `bytes` being the buffer of an all-reduce or broadcast,
 * a rank's block of a reduce-scatter or all-gather, or the bytes to each
 * rank of an all-to-all (the runtime counts with this; loomc's step
 * simulation predicts the bytes per level with it too). */
uint64_t loomrt_collective_bytes_sent(loomrt_collective_kind kind, uint64_t bytes, int ranks);

/* --- parameter initialisation ----------------------------------------------
 * One random stream per run (seeded), drawn in declaration order, so the
 * reference executor and generated binaries produce the same initial
 * weights for the same seed. kind: 0 zeros, 1 ones, 2 normal(a, b),
 * 3 uniform(a, b) (the dialect's #loom.init kinds). */
typedef struct loomrt_rng_t *loomrt_rng;
loomrt_rng loomrt_rng_create(uint64_t seed);
void loomrt_rng_destroy(loomrt_rng r);
/* Fills n host floats. */
loomrt_status loomrt_rng_fill(loomrt_rng r, int kind, double a, double b,
                              float *dst, size_t n);
/* The same draw of n elements, of which only elements [begin, begin +
 * count) are written to dst[0, count) (a ZeRO-3 rank keeps its block of a
 * shard without drawing the rest); the stream advances by the whole n. */
loomrt_status loomrt_rng_fill_part(loomrt_rng r, int kind, double a, double b, float *dst,
                                   size_t n, size_t begin, size_t count);
/* Tensor parallelism: the draw of a whole tensor of shape full[0, rank), of
 * which part `part` of `parts` of each of `groups` equal groups along
 * dimension `dim` is kept (the slice a rank of the group holds); elements
 * [begin, begin + count) of that slice, in its row-major order, are written
 * to dst[0, count). The stream advances by the whole tensor. */
loomrt_status loomrt_rng_fill_slice(loomrt_rng r, int kind, double a, double b, float *dst,
                                    const int64_t *full, int rank, int dim, int64_t groups,
                                    int64_t parts, int64_t part, size_t begin, size_t count);

/* --- traces --------------------------------------------------------------
 * Spans of work on streams, written as Chrome trace JSON (Perfetto and
 * chrome://tracing open it). Spans are timed with events on their stream, so
 * GPU work is timed where it runs; times are relative to the trace's start. */
typedef struct loomrt_trace_t *loomrt_trace;
/* Starts a trace; its time origin is an event recorded on `s`. */
loomrt_status loomrt_trace_create(loomrt_stream s, loomrt_trace *out);
/* Opens a span of work queued on `s`, drawn on lane `lane` as `name`. */
loomrt_status loomrt_trace_begin(loomrt_trace t, loomrt_stream s,
                                 const char *lane, const char *name,
                                 int64_t *span);
loomrt_status loomrt_trace_end(loomrt_trace t, loomrt_stream s, int64_t span);
/* A span of work the host does itself (the CPU's optimizer updates), timed
 * on the host's clock, which the trace set against its origin when it
 * started (it waited for the origin event then: the two clocks agree to
 * within the synchronisation's latency, microseconds). */
loomrt_status loomrt_trace_host_begin(loomrt_trace t, const char *lane,
                                      const char *name, int64_t *span);
loomrt_status loomrt_trace_host_end(loomrt_trace t, int64_t span);
/* Waits for the spans' events and writes the JSON file atomically. */
loomrt_status loomrt_trace_write(loomrt_trace t, const char *path);
void loomrt_trace_destroy(loomrt_trace t);

/* --- checkpoints -----------------------------------------------------------
 * The safetensors format (readable by safetensors.torch.load_file): an 8-byte
 * little-endian header length, a JSON header (dtype, shape, data_offsets of
 * each tensor, string metadata), then the data. Saving writes a temporary
 * file in the same folder, fsyncs it, renames it over `path` and fsyncs the
 * folder, so a crash at any moment leaves the previous checkpoint intact.
 * Loading checks that the file holds exactly the tensors asked for, with the
 * same dtypes and shapes, and names the first one that differs. */
typedef struct loomrt_tensor_ref {
  const char *name;
  loomrt_dtype dtype;
  int rank;
  int64_t shape[LOOMRT_MAX_RANK];
  void *data; /* host memory: read by save, filled by load */
} loomrt_tensor_ref;
loomrt_status loomrt_checkpoint_save(const char *path,
                                     const loomrt_tensor_ref *tensors,
                                     size_t count, const char *const *meta_keys,
                                     const char *const *meta_values,
                                     size_t meta_count);
loomrt_status loomrt_checkpoint_load(const char *path,
                                     const loomrt_tensor_ref *tensors,
                                     size_t count);
/* Copies metadata value `key` into buf (NUL-terminated). */
loomrt_status loomrt_checkpoint_metadata(const char *path, const char *key,
                                         char *buf, size_t len);

/* The mixed-precision step in one pass over memory: fp32 master weights and
 * moments, a bf16 gradient (as the GPU's backward produced it) read directly,
 * and, when param_bf16 is not NULL, the updated weights also written as bf16
 * (what the GPU computes with next step). Same update as loomrt_adam_f32 on
 * the gradient's exact fp32 value; bf16 outputs round to nearest even.
 * bf16 values are passed as their 16-bit patterns. */
loomrt_status loomrt_adam_bf16grad(loomrt_stream s, const loomrt_adam_config *cfg,
                                   float *master, const uint16_t *grad_bf16,
                                   float *m, float *v, uint16_t *param_bf16,
                                   size_t n);

/* Many Adam/AdamW updates with one config (one step, one set of
 * hyperparameters) in one call: each tensor as loomrt_adam_f32 (grad_dtype
 * F32) or loomrt_adam_bf16grad (BF16, param_bf16 optional) would update it,
 * bit for bit. The GPU runs up to LOOMRT_ADAM_MULTI_BATCH tensors a launch
 * (a step of 148 small updates is launch-bound otherwise); elsewhere it is
 * the per-tensor calls in order. */
#define LOOMRT_ADAM_MULTI_BATCH 48
typedef struct loomrt_adam_tensor {
  float *param;
  const void *grad; /* fp32 or bf16 bits, as grad_dtype says */
  float *exp_avg;
  float *exp_avg_sq;
  uint16_t *param_bf16; /* BF16 gradients only; NULL: no bf16 copy */
  size_t n;
} loomrt_adam_tensor;
loomrt_status loomrt_adam_multi(loomrt_stream s, const loomrt_adam_config *cfg,
                                loomrt_dtype grad_dtype, const loomrt_adam_tensor *tensors,
                                size_t count);

/* --- planning: what the compiler prices a step with ---------------------- */
/* Commands (kernel launches and stream-ordered scratch allocations) the GPU
 * backend issues for loomrt_reduce and for loomrt_attention(_grad) (whether
 * the fused kernels take the op; backward: 0 the forward, 1 the gradient,
 * 2 loomrt_attention_grad_saved). loomc's step simulation fills the launch
 * queue with these instead of copying the backend's thresholds. */
int loomrt_gpu_reduce_commands(int64_t outer, int64_t len, int64_t inner);
int loomrt_gpu_attention_commands(loomrt_dtype dt, int64_t t, int64_t s,
                                  int64_t dh, int backward);
/* 1 where the GPU backend's fused (flash) kernels take an attention of
 * this shape, so that keeping its statistics (loomrt_attention_save) spares
 * its gradient a forward; 0 where the composed path runs. */
int loomrt_attention_fused(loomrt_dtype dt, int64_t t, int64_t s, int64_t dh);

/* The step arena's placement policy without memory (the driver's arena
 * runs the same one): placements are handles, reserved() the bytes the
 * arena would hold, fragmentation included. */
typedef struct loomrt_arena_model_t *loomrt_arena_model;
loomrt_arena_model loomrt_arena_model_create(void);
void loomrt_arena_model_destroy(loomrt_arena_model m);
int64_t loomrt_arena_model_alloc(loomrt_arena_model m, size_t bytes);
void loomrt_arena_model_release(loomrt_arena_model m, int64_t placement);
size_t loomrt_arena_model_reserved(loomrt_arena_model m);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LOOMRT_LOOMRT_H */
