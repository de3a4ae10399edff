// backend.h: the internal table each runtime backend fills in. The C entry
// points in common/core.cpp validate arguments once and dispatch here, so a
// backend only implements the work itself.
#ifndef LOOMRT_COMMON_BACKEND_H
#define LOOMRT_COMMON_BACKEND_H

#include "loomrt/loomrt.h"

#include <string>

namespace loomrt {

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
};

// Records `msg` as this thread's last error and returns `s`.
loomrt_status fail(loomrt_status s, const std::string &msg);

const BackendOps *cpuBackend();
#ifdef LOOMRT_HAVE_CUDA
const BackendOps *cudaBackend();
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

#endif // LOOMRT_COMMON_BACKEND_H
