// rocblas_loader.cpp: GEMM through rocBLAS, loaded with dlopen on first use.
// Debian packages neither rocBLAS nor hipBLAS(Lt), so the HIP build cannot
// link them; a ROCm installation has librocblas.so. The few declarations
// below are rocBLAS's C ABI (rocblas-types.h, rocblas-functions.h; the enum
// values are fixed by its documentation and have not changed since ROCm 3).
// Without the library, gpu_ops.cu's GEMM runs Loom's portable kernel
// (gpu/gpu_gemm.cu) and says so once; LOOMRT_GEMM=vendor makes it an error.
#include "gpu/gpu_state.h"

#include <dlfcn.h>

#include <cstdint>
#include <mutex>

namespace loomrt {
namespace {

using rocblas_handle = void *;
using rocblas_status = int;            // rocblas_status_success = 0
constexpr int kRocblasOpNone = 111;    // rocblas_operation_none
constexpr int kRocblasOpTranspose = 112;
constexpr int kRocblasF32 = 151;       // rocblas_datatype_f32_r
constexpr int kRocblasBf16 = 168;      // rocblas_datatype_bf16_r
constexpr int kRocblasAlgoStandard = 0;

struct Rocblas {
  rocblas_status (*create)(rocblas_handle *) = nullptr;
  rocblas_status (*destroy)(rocblas_handle) = nullptr;
  rocblas_status (*setStream)(rocblas_handle, hipStream_t) = nullptr;
  rocblas_status (*gemm)(rocblas_handle, int, int, int32_t, int32_t, int32_t, const void *,
                         const void *, int, int32_t, int64_t, const void *, int, int32_t,
                         int64_t, const void *, const void *, int, int32_t, int64_t, void *,
                         int, int32_t, int64_t, int32_t, int, int, int32_t,
                         uint32_t) = nullptr;
  std::string error; // why it did not load; empty once loaded
};

const Rocblas &rocblas() {
  static Rocblas lib;
  static std::once_flag once;
  std::call_once(once, [] {
    void *h = nullptr;
    for (const char *name : {"librocblas.so", "librocblas.so.4", "librocblas.so.0"})
      if ((h = dlopen(name, RTLD_NOW | RTLD_LOCAL)))
        break;
    if (!h) {
      const char *why = dlerror();
      lib.error = std::string("librocblas.so (ROCm's rocBLAS) could not be loaded: ") +
                  (why ? why : "not found") +
                  "; install rocBLAS or add its folder to LD_LIBRARY_PATH";
      return;
    }
    auto sym = [&](auto &fn, const char *name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
      if (!fn && lib.error.empty())
        lib.error = std::string("librocblas.so has no ") + name;
    };
    sym(lib.create, "rocblas_create_handle");
    sym(lib.destroy, "rocblas_destroy_handle");
    sym(lib.setStream, "rocblas_set_stream");
    sym(lib.gemm, "rocblas_gemm_strided_batched_ex");
  });
  return lib;
}

} // namespace

bool vendorGemmAvailable(std::string *why) {
  const Rocblas &lib = rocblas();
  if (why)
    *why = lib.error;
  return lib.error.empty();
}

void vendorGemmDestroy(GpuState *gs) {
  if (gs->blas && rocblas().destroy)
    rocblas().destroy(gs->blas);
  gs->blas = nullptr;
}

// rocBLAS's GEMM has no epilogues (hipBLASLt's has; Debian has neither):
// the caller runs the GEMM and the elementwise call.
loomrt_status vendorGemmEpilogue(GpuState *, gpuStream_t, const GpuGemm &,
                                 const GemmEpilogue &) {
  return LOOMRT_ERR_UNSUPPORTED;
}

loomrt_status vendorGemm(GpuState *gs, gpuStream_t st, const GpuGemm &g) {
  const Rocblas &lib = rocblas();
  if (!lib.error.empty())
    return fail(LOOMRT_ERR_UNSUPPORTED, "matmul: " + lib.error);
  if (!gs->blas && lib.create(&gs->blas) != 0)
    return fail(LOOMRT_ERR_BACKEND, "matmul: could not create the rocBLAS handle");
  if (lib.setStream(gs->blas, st) != 0)
    return fail(LOOMRT_ERR_BACKEND, "matmul: could not set the rocBLAS stream");
  const int in = g.in == LOOMRT_BF16 ? kRocblasBf16 : kRocblasF32;
  const int out = g.out == LOOMRT_BF16 ? kRocblasBf16 : kRocblasF32;
  // rocBLAS's _ex GEMM writes D; D = C in place, as cuBLAS does.
  rocblas_status r = lib.gemm(
      gs->blas, g.transA ? kRocblasOpTranspose : kRocblasOpNone,
      g.transB ? kRocblasOpTranspose : kRocblasOpNone, g.m, g.n, g.k, &g.alpha, g.a, in, g.lda,
      g.strideA, g.b, in, g.ldb, g.strideB, &g.beta, g.c, out, g.ldc, g.strideC, g.c, out, g.ldc,
      g.strideC, g.batch, kRocblasF32, kRocblasAlgoStandard, 0, 0);
  if (r != 0)
    return fail(LOOMRT_ERR_BACKEND,
                "matmul: rocBLAS GEMM failed with status " + std::to_string(r));
  return LOOMRT_OK;
}

} // namespace loomrt
