#!/usr/bin/env bash
# On a GPU host: the zero-copy row gather of issue 21. Builds the runtime
# and its conformance tests, runs the gather's (CUDA: tables in device and
# pinned host memory), then bench/gather_bench.cpp over a 4 GiB pinned
# table with 4 KiB and 2 MiB pages. Prints the table last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
source bench/gpu-runtime.sh
build_runtime all -DCMAKE_CUDA_ARCHITECTURES=90 -DLOOM_GTEST_SOURCE_DIR="$PWD/.carry/googletest"
T=$(find build-bench -name loomrt-tests -type f | head -1)
$T --gtest_filter='*GatherRows*' --gtest_brief=1 > "$OUT/gtest.txt" 2>&1
tail -n 3 "$OUT/gtest.txt"
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
grep -i hugepages /proc/meminfo | head -3; cat /sys/kernel/mm/transparent_hugepage/enabled
build-bench/bin/gather_bench --table-gib 4 --iters 5 > "$OUT/gather.jsonl" 2> "$OUT/gather.err"
tail -n 3 "$OUT/gather.err"
grep '^|' "$OUT/gather.jsonl"
