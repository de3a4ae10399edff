#!/usr/bin/env bash
# On a one-H200 host: where a 7B offload binary's start-up goes (issue 44:
# 60-100 s before its first step, most of it pinning ~100 GiB). Builds the
# runtime and pin_bench, times four ways of pinning GIB GiB (pin_bench's
# table), then runs ROWS (default l71-int, sources from
# bench/gen-offload80-gpu.sh) for 3 steps, printing the binary's
# "parameters and state ready" and "released" lines and its wall time.
#   OUT=/tmp/o GIB=32 bench/run-startup-gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
source bench/gpu-runtime.sh
build_runtime loomrt_shared -DCMAKE_CUDA_ARCHITECTURES=90
ninja -C build-bench pin_bench > "$OUT/pin-build.log" 2>&1 || { tail "$OUT/pin-build.log"; exit 1; }
for t in 8 16; do build-bench/bin/pin_bench "${GIB:-32}" 512 $t; done
export RT
ROWS="${ROWS:-l71-int}" STEPS=3 TIMEOUT=300 bash bench/run-offload80-gpu.sh > "$OUT/rows.txt" 2>&1
for r in ${ROWS:-l71-int}; do
  echo "== $r"; grep -h "pinning\|ready in\|released in\|wall" "$OUT/$r.txt"
done
