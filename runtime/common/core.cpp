// core.cpp: the C entry points of loomrt. Argument checks live here once;
// the work is dispatched to the backend table of the handle's device.
#include "common/backend.h"

#include <new>

namespace loomrt {
static const BackendOps *lookup(loomrt_backend b) {
  switch (b) {
  case LOOMRT_BACKEND_CPU:
    return cpuBackend();
  case LOOMRT_BACKEND_CUDA:
#ifdef LOOMRT_HAVE_CUDA
    return gpuBackend();
#else
    return nullptr;
#endif
  case LOOMRT_BACKEND_HIP:
#ifdef LOOMRT_HAVE_HIP
    return gpuBackend();
#else
    return nullptr;
#endif
  }
  return nullptr;
}
} // namespace loomrt

using loomrt::fail;

extern "C" {

const char *loomrt_backend_name(loomrt_backend b) {
  switch (b) {
  case LOOMRT_BACKEND_CPU: return "cpu";
  case LOOMRT_BACKEND_CUDA: return "cuda";
  case LOOMRT_BACKEND_HIP: return "hip";
  }
  return "unknown";
}

int loomrt_backend_available(loomrt_backend b) {
  const loomrt::BackendOps *ops = loomrt::lookup(b);
  return ops && ops->device_count() > 0;
}

loomrt_status loomrt_device_open(loomrt_backend b, int ordinal,
                                 loomrt_device *out) {
  if (!out)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "device_open: null output handle");
  *out = nullptr;
  const loomrt::BackendOps *ops = loomrt::lookup(b);
  if (!ops)
    return fail(LOOMRT_ERR_UNSUPPORTED,
                std::string("backend '") + loomrt_backend_name(b) +
                    "' was not built into this runtime");
  int count = ops->device_count();
  if (ordinal < 0 || ordinal >= count)
    return fail(LOOMRT_ERR_UNSUPPORTED,
                std::string("no ") + ops->name + " device " +
                    std::to_string(ordinal) + " (found " +
                    std::to_string(count) + ")");
  void *state = nullptr;
  if (loomrt_status s = ops->device_init(ordinal, &state))
    return s;
  *out = new (std::nothrow) loomrt_device_t{b, ops, state};
  if (!*out) {
    ops->device_fini(state);
    return fail(LOOMRT_ERR_OUT_OF_MEMORY, "device_open: out of host memory");
  }
  return LOOMRT_OK;
}

void loomrt_device_close(loomrt_device dev) {
  if (!dev)
    return;
  dev->ops->device_fini(dev->state);
  delete dev;
}

loomrt_backend loomrt_device_backend(loomrt_device dev) { return dev->kind; }

loomrt_status loomrt_device_memory(loomrt_device dev, size_t *freeBytes,
                                   size_t *total) {
  if (!dev || !freeBytes || !total)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "device_memory: null argument");
  return dev->ops->memory_info(dev->state, freeBytes, total);
}

loomrt_status loomrt_device_bind(loomrt_device dev) {
  if (!dev)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "device_bind: null device");
  return dev->ops->bind(dev->state);
}

loomrt_status loomrt_alloc(loomrt_device dev, loomrt_mem_space space,
                           size_t bytes, void **out) {
  if (!dev || !out)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "alloc: null device or output");
  if (space > LOOMRT_MEM_PAGEABLE)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "alloc: unknown memory space");
  *out = nullptr;
  if (bytes == 0)
    return LOOMRT_OK;
  return dev->ops->alloc(dev->state, space, bytes, out);
}

loomrt_status loomrt_host_register(loomrt_device dev, void *ptr, size_t bytes) {
  if (!dev || (!ptr && bytes))
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "host_register: null device or memory");
  return bytes ? dev->ops->host_register(dev->state, ptr, bytes) : LOOMRT_OK;
}

loomrt_status loomrt_host_unregister(loomrt_device dev, void *ptr) {
  if (!dev)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "host_unregister: null device");
  return ptr ? dev->ops->host_unregister(dev->state, ptr) : LOOMRT_OK;
}

loomrt_status loomrt_free(loomrt_device dev, loomrt_mem_space space,
                          void *ptr) {
  if (!dev)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "free: null device");
  if (!ptr)
    return LOOMRT_OK;
  return dev->ops->free(dev->state, space, ptr);
}

loomrt_status loomrt_stream_create(loomrt_device dev, loomrt_stream *out) {
  if (!dev || !out)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "stream_create: null argument");
  void *impl = nullptr;
  if (loomrt_status s = dev->ops->stream_create(dev->state, &impl))
    return s;
  *out = new loomrt_stream_t{dev, impl};
  return LOOMRT_OK;
}

void loomrt_stream_destroy(loomrt_stream s) {
  if (!s)
    return;
  s->dev->ops->stream_destroy(s->impl);
  delete s;
}

loomrt_status loomrt_stream_synchronize(loomrt_stream s) {
  if (!s)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "stream_synchronize: null stream");
  return s->dev->ops->stream_synchronize(s->impl);
}

loomrt_status loomrt_memcpy_async(loomrt_stream s, void *dst, const void *src,
                                  size_t bytes) {
  if (!s)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "memcpy_async: null stream");
  if (bytes == 0)
    return LOOMRT_OK;
  if (!dst || !src)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "memcpy_async: null pointer");
  return s->dev->ops->memcpy_async(s->impl, dst, src, bytes);
}

loomrt_status loomrt_stream_begin_capture(loomrt_stream s) {
  if (!s)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "stream_begin_capture: null stream");
  if (!s->dev->ops->capture_begin)
    return LOOMRT_ERR_UNSUPPORTED;
  return s->dev->ops->capture_begin(s->impl);
}

loomrt_status loomrt_stream_end_capture(loomrt_stream s, loomrt_graph *out, size_t *nodes) {
  if (!s || !out)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "stream_end_capture: null argument");
  if (!s->dev->ops->capture_end)
    return LOOMRT_ERR_UNSUPPORTED;
  void *exec = nullptr;
  size_t n = 0;
  if (loomrt_status e = s->dev->ops->capture_end(s->impl, &exec, &n))
    return e;
  *out = new loomrt_graph_t{s->dev, exec};
  if (nodes)
    *nodes = n;
  return LOOMRT_OK;
}

loomrt_status loomrt_graph_launch(loomrt_graph g, loomrt_stream s) {
  if (!g || !s)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "graph_launch: null argument");
  if (g->dev != s->dev)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "graph_launch: the graph and the stream belong to different devices");
  return g->dev->ops->graph_launch(g->impl, s->impl);
}

void loomrt_graph_destroy(loomrt_graph g) {
  if (!g)
    return;
  g->dev->ops->graph_destroy(g->impl);
  delete g;
}

loomrt_status loomrt_event_create(loomrt_device dev, loomrt_event *out) {
  if (!dev || !out)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "event_create: null argument");
  void *impl = nullptr;
  if (loomrt_status s = dev->ops->event_create(dev->state, &impl))
    return s;
  *out = new loomrt_event_t{dev, impl, false};
  return LOOMRT_OK;
}

void loomrt_event_destroy(loomrt_event e) {
  if (!e)
    return;
  e->dev->ops->event_destroy(e->impl);
  delete e;
}

loomrt_status loomrt_event_record(loomrt_event e, loomrt_stream s) {
  if (!e || !s)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "event_record: null argument");
  if (e->dev != s->dev)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "event_record: event and stream belong to different devices");
  e->recorded = true;
  return e->dev->ops->event_record(e->impl, s->impl);
}

loomrt_status loomrt_stream_wait_event(loomrt_stream s, loomrt_event e) {
  if (!e || !s)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "stream_wait_event: null argument");
  if (!e->recorded)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "stream_wait_event: the event was never recorded");
  return s->dev->ops->stream_wait_event(s->impl, e->impl);
}

loomrt_status loomrt_event_synchronize(loomrt_event e) {
  if (!e)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "event_synchronize: null event");
  if (!e->recorded)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "event_synchronize: the event was never recorded");
  return e->dev->ops->event_synchronize(e->impl);
}

loomrt_status loomrt_event_elapsed_ms(loomrt_event a, loomrt_event b,
                                      float *ms) {
  if (!a || !b || !ms)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "event_elapsed_ms: null argument");
  if (!a->recorded || !b->recorded)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                "event_elapsed_ms: both events must be recorded");
  return a->dev->ops->event_elapsed_ms(a->impl, b->impl, ms);
}

/// Checks shared by every Adam entry point.
static loomrt_status checkAdam(const char *fn, loomrt_stream s,
                               const loomrt_adam_config *cfg, bool buffers) {
  std::string name(fn);
  if (!s || !cfg)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, name + ": null stream or config");
  if (!buffers)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, name + ": null buffer");
  if (cfg->step < 1)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                name + ": step must be >= 1 (bias correction is 1-based)");
  if (!(cfg->beta1 >= 0.f && cfg->beta1 < 1.f && cfg->beta2 >= 0.f &&
        cfg->beta2 < 1.f))
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                name + ": beta1 and beta2 must be in [0, 1)");
  if (cfg->freeze_step < 0 || (cfg->freeze_step > 0 && !cfg->decoupled_weight_decay))
    return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                name + ": freeze_step must be >= 0, and 1-bit Adam's frozen update "
                       "decays weights decoupled (AdamW)");
  return LOOMRT_OK;
}

loomrt_status loomrt_adam_f32(loomrt_stream s, const loomrt_adam_config *cfg,
                              float *p, const float *g, float *m, float *v,
                              size_t n) {
  if (n == 0 && s && cfg)
    return LOOMRT_OK;
  if (loomrt_status st = checkAdam("adam_f32", s, cfg, p && g && m && v))
    return st;
  return s->dev->ops->adam_f32(s->impl, cfg, p, g, m, v, n);
}

loomrt_status loomrt_adam_bf16grad(loomrt_stream s,
                                   const loomrt_adam_config *cfg, float *p,
                                   const uint16_t *g, float *m, float *v,
                                   uint16_t *pOut, size_t n) {
  if (n == 0 && s && cfg)
    return LOOMRT_OK;
  if (loomrt_status st = checkAdam("adam_bf16grad", s, cfg, p && g && m && v))
    return st;
  return s->dev->ops->adam_bf16grad(s->impl, cfg, p, g, m, v, pOut, n);
}

loomrt_status loomrt_adam_multi(loomrt_stream s, const loomrt_adam_config *cfg,
                                loomrt_dtype grad_dtype, const loomrt_adam_tensor *tensors,
                                size_t count) {
  if (count == 0 && s && cfg)
    return LOOMRT_OK;
  if (loomrt_status st = checkAdam("adam_multi", s, cfg, tensors != nullptr))
    return st;
  if (grad_dtype != LOOMRT_F32 && grad_dtype != LOOMRT_BF16)
    return fail(LOOMRT_ERR_INVALID_ARGUMENT, "adam_multi: gradients must be F32 or BF16");
  for (size_t i = 0; i < count; ++i) {
    const loomrt_adam_tensor &t = tensors[i];
    if (t.n && (!t.param || !t.grad || !t.exp_avg || !t.exp_avg_sq))
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  "adam_multi: null buffer in tensor " + std::to_string(i));
    if (t.param_bf16 && grad_dtype != LOOMRT_BF16)
      return fail(LOOMRT_ERR_INVALID_ARGUMENT,
                  "adam_multi: a bf16 copy needs BF16 gradients (tensor " + std::to_string(i) +
                      ")");
  }
  if (s->dev->ops->adam_multi)
    return s->dev->ops->adam_multi(s->impl, cfg, grad_dtype, tensors, count);
  for (size_t i = 0; i < count; ++i) {
    const loomrt_adam_tensor &t = tensors[i];
    if (!t.n)
      continue;
    loomrt_status st =
        grad_dtype == LOOMRT_BF16
            ? s->dev->ops->adam_bf16grad(s->impl, cfg, t.param,
                                         static_cast<const uint16_t *>(t.grad), t.exp_avg,
                                         t.exp_avg_sq, t.param_bf16, t.n)
            : s->dev->ops->adam_f32(s->impl, cfg, t.param, static_cast<const float *>(t.grad),
                                    t.exp_avg, t.exp_avg_sq, t.n);
    if (st != LOOMRT_OK)
      return st;
  }
  return LOOMRT_OK;
}

} // extern "C"
