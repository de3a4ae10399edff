#!/usr/bin/env bash
# On a GPU host (issue 23's acceptance on NVIDIA): after the kernels became
# single-source for CUDA and HIP, the CUDA backend's conformance suite and
# benchmarks must be unchanged. One call:
#   1. loomrt-tests '*cuda*' with cuBLAS, then with LOOMRT_GEMM=portable (Loom's
#      own tiled GEMM kernel, the HIP backend's fallback, run on the H100);
#   2. bench/run-driver-ab-gpu.sh: the generated sources in .carry/driver-ab
#      against the base commit's runtime (.carry/driver-ab/base) and this one;
#   3. GPT-2 bf16 trained for STEPS_PORTABLE steps with the portable GEMM,
#      its losses beside the cuBLAS run's.
#   here:  carry .carry/driver-ab and .carry/googletest (see run-driver-ab-gpu.sh)
#   there: bench/run-portability-gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=/tmp/portability
mkdir -p "$OUT"
( cmake -G Ninja -S bench -B build-tests -DLOOM_BUILD_TESTS=ON \
    -DLOOM_GTEST_SOURCE_DIR="$PWD/.carry/googletest" > "$OUT/cmake.log" 2>&1 &&
  ninja -C build-tests loomrt-tests > "$OUT/ninja.log" 2>&1 ) ||
  { echo "test build failed"; tail -20 "$OUT/ninja.log"; }
T=build-tests/runtime/tests/loomrt-tests
for gemm in vendor portable; do
  LOOMRT_GEMM=$gemm "$T" --gtest_filter='*cuda*' > "$OUT/tests-$gemm.log" 2>&1
  echo "conformance, LOOMRT_GEMM=$gemm: $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/tests-$gemm.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \] ' "$OUT/tests-$gemm.log" | head -10
done
LOOMRT_GEMM=bogus "$T" --gtest_filter='*Matmul*cuda*' 2>&1 | grep -m1 "LOOMRT_GEMM" || true
bench/run-driver-ab-gpu.sh
STEPS_PORTABLE=${STEPS_PORTABLE:-6}
LOOMRT_GEMM=portable /tmp/new_gpt2_bf16 --data /tmp/tok32k.bin --steps "$STEPS_PORTABLE" --seed 1 \
  --log-json "$OUT/portable.jsonl" > "$OUT/portable.txt" 2>&1 || tail -3 "$OUT/portable.txt"
python3 - "$OUT/portable.jsonl" /tmp/driver-ab/new_gpt2_bf16.1.jsonl <<'PY'
import json, statistics, sys
p = [json.loads(l) for l in open(sys.argv[1])]
v = [json.loads(l) for l in open(sys.argv[2])][:len(p)]
print("| step | cuBLAS loss | portable-GEMM loss | |diff| | cuBLAS ms | portable ms |")
print("|---|---|---|---|---|---|")
for a, b in zip(v, p):
    print(f"| {a['step']} | {a['loss']:.5f} | {b['loss']:.5f} | {abs(a['loss'] - b['loss']):.2e} "
          f"| {a['step_ms']:.1f} | {b['step_ms']:.1f} |")
print(f"portable GEMM: median {statistics.median(x['step_ms'] for x in p[1:]):.0f} ms/step")
PY
