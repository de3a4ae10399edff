#!/usr/bin/env python3
"""Checks that the single-source GPU kernels stay portable (CUDA and HIP).

Outside the portability headers (runtime/gpu/gpu_device.h for device code,
runtime/gpu/gpu_api.h and the vendor folders it includes for host code), a
kernel source may use neither a CUDA-only name (warp intrinsics with lane
masks, WMMA, CUB, inline PTX, cuda*/cuBLAS calls) nor a literal warp width:
a bare 32 (name it: kWarp for the warp, a constexpr for anything else),
`& 31`, `>> 5` or a full 32-lane mask. Comments and string literals are not
code and are skipped. Exit status 1 with one line per finding.

  scripts/check-portable-kernels.py            # the runtime's kernel sources
  scripts/check-portable-kernels.py FILE...    # just these
"""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from cpp_text import strip  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT = sorted(
    [p for p in (ROOT / "runtime" / "gpu").iterdir()
     if p.suffix in (".cu", ".h") and p.name not in ("gpu_device.h", "gpu_api.h")]
    + [ROOT / "runtime" / "common" / "kernel_math.h", ROOT / "runtime" / "common" / "adam_math.h"])

CUDA_ONLY = re.compile(
    r"\b(cuda[A-Z_]\w*|cublas\w*|CUBLAS_\w+|CUDA_R_\w+|nvcuda|wmma|cub::|__nv_\w+"
    r"|__shfl(?:_xor|_up|_down)?_sync|__ballot_sync|__all_sync|__any_sync|__syncwarp"
    r"|__activemask|__nanosleep|__match_\w+_sync|__reduce_\w+_sync|__CUDA_ARCH__"
    r"|__CUDACC__)\b|\basm\s*(?:volatile\s*)?\(|%globaltimer")
WARP_LITERAL = re.compile(r"(?<![\w.])32(?![\w.])|&\s*31\b|>>\s*5\b|0x[fF]{8}u?\b")
CONSTEXPR = re.compile(r"^\s*(static\s+)?constexpr\b")


def check(path):
    findings = []
    code = strip(path.read_text())
    for no, line in enumerate(code.splitlines(), 1):
        m = CUDA_ONLY.search(line)
        if m:
            findings.append(f"{path}:{no}: CUDA-only '{m.group(0)}': use gpu/gpu_device.h")
        m = WARP_LITERAL.search(line)
        if m and not CONSTEXPR.match(line):
            findings.append(f"{path}:{no}: literal warp width '{m.group(0)}': use kWarp "
                            "(or a named constexpr if it is not the warp)")
    return findings


def main(argv):
    files = [pathlib.Path(a) for a in argv[1:]] or DEFAULT
    findings = [f for p in files for f in check(p)]
    for f in findings:
        print(f)
    print(f"check-portable-kernels: {len(files)} files, {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
