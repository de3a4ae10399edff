// fused_rtc.h: compiling a fused region's generated kernel with NVRTC
// (cuda/fused_rtc.cpp), apart from loading it, so tests can compile
// without a GPU.
#ifndef LOOMRT_CUDA_FUSED_RTC_H
#define LOOMRT_CUDA_FUSED_RTC_H

#include <string>
#include <vector>

namespace loomrt {

/// Compiles `src` (loomrt_fused_source's text, its kernel loom_fused_`name`)
/// for sm_`arch` into `cubin`; false with NVRTC's log in `log` when it
/// does not compile.
bool compileFusedSource(const std::string &src, const std::string &name, int arch,
                        std::vector<char> &cubin, std::string &log);

} // namespace loomrt

#endif // LOOMRT_CUDA_FUSED_RTC_H
