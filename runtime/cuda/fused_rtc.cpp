// fused_rtc.cpp: a fused region's own CUDA kernel. The kernel's text is
// generated from the region's program (loomrt_fused_source), compiled with
// NVRTC for the device's architecture at the region's first call, loaded
// with cudaLibraryLoadData and cached by its text. NVRTC rather than nvcc at
// loomc's build: generated training binaries stay one C++ file linked with
// -lloomrt, built on GPU hosts that have the CUDA runtime but not Loom's
// compiler, and the code is compiled for the card it runs on. The runtime's
// math headers travel inside the library (fused_headers.inc, written by
// CMake from common/kernel_math.h and its includes), so the kernel computes
// exactly the unfused kernels' per-element functions.
//
// LOOMRT_FUSED=interpret makes every region run the interpreter kernel
// instead (gpu_ops.cu), the path HIP builds always take.
#include "common/backend.h"
#include "common/fused_eval.h"
#include "cuda/fused_rtc.h"

#include <cuda_runtime.h>
#include <nvrtc.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace loomrt {
namespace {

struct Header {
  const char *name, *text;
};
// {name, text} of the headers the generated source includes, and stubs of
// the C headers they include (NVRTC has none; its built-ins provide the
// math functions and fixed-width types' underlying types).
#include "fused_headers.inc"

std::mutex mu;
std::map<std::string, cudaKernel_t> kernels; // by source text and architecture

bool interpretOnly() {
  const char *e = std::getenv("LOOMRT_FUSED");
  return e && std::strcmp(e, "interpret") == 0;
}

/// The kernel of `src`, compiled and loaded on first use.
loomrt_status kernelFor(const std::string &src, const std::string &name, cudaKernel_t &out) {
  int dev = 0, major = 0, minor = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
  int arch = major * 10 + minor;
  std::string key = std::to_string(arch) + "\n" + src;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = kernels.find(key); it != kernels.end()) {
    out = it->second;
    return LOOMRT_OK;
  }
  std::vector<char> cubin;
  std::string log;
  if (!compileFusedSource(src, name, arch, cubin, log))
    return fail(LOOMRT_ERR_BACKEND, "fused_elementwise: NVRTC could not compile region '" +
                                        name + "': " + log);
  cudaLibrary_t lib;
  cudaError_t e = cudaLibraryLoadData(&lib, cubin.data(), nullptr, nullptr, 0, nullptr,
                                      nullptr, 0);
  if (e == cudaSuccess)
    e = cudaLibraryGetKernel(&out, lib, ("loom_fused_" + name).c_str());
  if (e != cudaSuccess)
    return fail(LOOMRT_ERR_BACKEND, "fused_elementwise: loading region '" + name +
                                        "': " + cudaGetErrorString(e));
  kernels.emplace(key, out);
  return LOOMRT_OK;
}

} // namespace

bool compileFusedSource(const std::string &src, const std::string &name, int arch,
                        std::vector<char> &cubin, std::string &log) {
  std::vector<const char *> names, texts;
  for (const Header &h : kHeaders) {
    names.push_back(h.name);
    texts.push_back(h.text);
  }
  nvrtcProgram prog;
  nvrtcResult r = nvrtcCreateProgram(&prog, src.c_str(), (name + ".cu").c_str(),
                                     int(names.size()), texts.data(), names.data());
  if (r != NVRTC_SUCCESS) {
    log = nvrtcGetErrorString(r);
    return false;
  }
  std::string archOpt = "--gpu-architecture=sm_" + std::to_string(arch);
  const char *opts[] = {archOpt.c_str(), "-std=c++17", "-default-device"};
  r = nvrtcCompileProgram(prog, 3, opts);
  size_t n = 0;
  nvrtcGetProgramLogSize(prog, &n);
  log.assign(n, '\0');
  nvrtcGetProgramLog(prog, log.data());
  while (!log.empty() && log.back() == '\0')
    log.pop_back();
  if (r == NVRTC_SUCCESS) {
    nvrtcGetCUBINSize(prog, &n);
    cubin.resize(n);
    nvrtcGetCUBIN(prog, cubin.data());
  }
  nvrtcDestroyProgram(&prog);
  return r == NVRTC_SUCCESS;
}

/// Runs the generated kernel of the checked program `p` (named `name`);
/// LOOMRT_ERR_UNSUPPORTED (no error recorded) when the interpreter is asked
/// for instead.
loomrt_status fusedGeneratedG(void *, void *stream, const char *name, const FusedProgram *p,
                              const FusedBuffers *b, size_t n, unsigned grid, int threads) {
  if (interpretOnly())
    return LOOMRT_ERR_UNSUPPORTED;
  cudaKernel_t k;
  if (loomrt_status s = kernelFor(fusedKernelText(name, *p), name, k))
    return s;
  // The kernel's parameters: inputs, outputs, n (loomrt_fused_source's order).
  void *args[2 * LOOMRT_FUSED_MAX_IO + 1];
  const void *in[LOOMRT_FUSED_MAX_IO];
  void *out[LOOMRT_FUSED_MAX_IO];
  int a = 0;
  for (int i = 0; i < p->nIn; ++i) {
    in[i] = b->in[i];
    args[a++] = &in[i];
  }
  for (int i = 0; i < p->nOut; ++i) {
    out[i] = b->out[i];
    args[a++] = &out[i];
  }
  unsigned long long count = n;
  args[a++] = &count;
  cudaError_t e = cudaLaunchKernel(reinterpret_cast<const void *>(k), dim3(grid), dim3(threads),
                                   args, 0, static_cast<cudaStream_t>(stream));
  return e == cudaSuccess ? LOOMRT_OK
                          : fail(LOOMRT_ERR_BACKEND, std::string("fused_elementwise: ") +
                                                         cudaGetErrorString(e));
}

} // namespace loomrt
