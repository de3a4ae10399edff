// gpu_state.h: per-device state of the GPU backend, shared by its files.
#ifndef LOOMRT_GPU_GPU_STATE_H
#define LOOMRT_GPU_GPU_STATE_H

#include "common/backend.h"
#include "gpu/gpu_api.h"

namespace loomrt {
struct GpuState {
  int ordinal;
  gpublasHandle_t blas = nullptr; // created on first GEMM
};
loomrt_status gpuCheck(gpuError_t e, const char *what);
} // namespace loomrt

#endif
