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
 *     that GPU schedules run unchanged on CPU-only machines) and CUDA (built
 *     when nvcc is found). HIP uses the same single-source kernels later.
 */
#ifndef LOOMRT_LOOMRT_H
#define LOOMRT_LOOMRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum loomrt_status {
  LOOMRT_OK = 0,
  LOOMRT_ERR_INVALID_ARGUMENT = 1,
  LOOMRT_ERR_OUT_OF_MEMORY = 2,
  LOOMRT_ERR_UNSUPPORTED = 3, /* backend not built in or not present */
  LOOMRT_ERR_BACKEND = 4,     /* the vendor library reported an error */
  LOOMRT_ERR_IO = 5
} loomrt_status;

typedef enum loomrt_backend {
  LOOMRT_BACKEND_CPU = 0,
  LOOMRT_BACKEND_CUDA = 1,
  LOOMRT_BACKEND_HIP = 2
} loomrt_backend;

/* Where a buffer lives. Matches the dialect's #loom.mem<...> spaces. */
typedef enum loomrt_mem_space {
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

/* --- memory ------------------------------------------------------------- */
loomrt_status loomrt_alloc(loomrt_device dev, loomrt_mem_space space,
                           size_t bytes, void **out);
loomrt_status loomrt_free(loomrt_device dev, loomrt_mem_space space, void *ptr);

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

/* --- optimizer updates -------------------------------------------------- */
typedef struct loomrt_adam_config {
  float lr;
  float beta1;
  float beta2;
  float eps;
  float weight_decay;
  int decoupled_weight_decay; /* 1: AdamW (Loshchilov & Hutter); 0: L2 in grad */
  int64_t step;               /* 1-based step used for bias correction */
} loomrt_adam_config;

/* One Adam/AdamW step over n fp32 elements, in place on param, m and v:
 * the PyTorch formulation (torch.optim.AdamW, foreach=False), i.e.
 *   g' = g (+ wd*p if L2);  p *= 1 - lr*wd (if decoupled)
 *   m = b1*m + (1-b1) g';   v = b2*v + (1-b2) g'^2
 *   p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
 * All pointers must be accessible from the stream's device. */
loomrt_status loomrt_adam_f32(loomrt_stream s, const loomrt_adam_config *cfg,
                              float *param, const float *grad, float *m,
                              float *v, size_t n);

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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LOOMRT_LOOMRT_H */
