#!/usr/bin/env bash
# Builds the runtime, its conformance tests and the benchmarks on a GPU host
# (no MLIR needed), runs the tests, then the Adam and copy benchmarks beside
# PyTorch. Logs go to $OUT (or ./gpu-out); the last lines are a summary.
#   bench/run-gpu.sh [quick]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
GTEST_DIR="${LOOM_GTEST_SOURCE_DIR:-$PWD/.carry/googletest}"
N_GPU="${N_GPU:-1e9}"
N_CPU="${N_CPU:-1e9}"
{
  nvidia-smi -L; nproc; python3 -c 'import torch; print("torch", torch.__version__)'
  cmake -G Ninja -S bench -B build-bench -DLOOM_GTEST_SOURCE_DIR="$GTEST_DIR" >/dev/null &&
    ninja -C build-bench >/dev/null && echo "build ok"
} 2>&1 | tee "$OUT/build.log"
[ -x build-bench/bin/loomrt_bench ] || { echo "build failed"; exit 1; }

build-bench/runtime/tests/loomrt-tests 2>&1 > "$OUT/tests.log"
grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$OUT/tests.log" | tee "$OUT/summary.txt"
grep -E "^\[  FAILED  \]" "$OUT/tests.log" | head -20

if [ "${1:-}" != quick ]; then
  python3 bench/adam.py --bench build-bench/bin/loomrt_bench --backend cuda --n "$N_GPU" \
    --json "$OUT/adam.jsonl" 2>&1 | tee -a "$OUT/summary.txt"
  python3 bench/adam.py --bench build-bench/bin/loomrt_bench --backend cpu --n "$N_CPU" \
    --iters 5 --json "$OUT/adam.jsonl" 2>&1 | tee -a "$OUT/summary.txt"
  python3 bench/adam.py --bench build-bench/bin/loomrt_bench --backend cuda --n "$N_GPU" \
    --mixed --json "$OUT/adam.jsonl" 2>&1 | tee -a "$OUT/summary.txt"
  python3 bench/adam.py --bench build-bench/bin/loomrt_bench --backend cpu --n "$N_CPU" \
    --iters 5 --mixed --json "$OUT/adam.jsonl" 2>&1 | tee -a "$OUT/summary.txt"
  python3 bench/copy_bw.py --bench build-bench/bin/loomrt_bench --json "$OUT/copy.jsonl" \
    2>&1 | tee -a "$OUT/summary.txt"
fi
