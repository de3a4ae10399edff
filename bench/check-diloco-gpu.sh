#!/usr/bin/env bash
# On a host with two GPUs: Streaming DiLoCo's generated binaries on NCCL, one
# GPU a replica (a small GPT, H=4, P=2; fp32 and fp4 exchanges with blocks
# of 32), and the runtime's CUDA tests (the block codecs among them).
# Sources from loomc --target=cuda --compile-to=cpp into .carry/diloco (see
# the commands in bench/RESULTS.md). Prints each run's losses last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 MASTER_ADDR=127.0.0.1
source bench/gpu-runtime.sh
build_runtime all -DLOOMRT_NCCL_ROOT="$(nccl_root)" -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLOOM_GTEST_SOURCE_DIR="$PWD/.carry/googletest"
T=$(find build-bench -name loomrt-tests -type f | head -1)
$T --gtest_filter='*uda*' --gtest_brief=1 2>&1 | tail -3
source bench/launch.sh
for q in fp32 fp4; do
  link_binary ".carry/diloco/dl_$q.cpp" "/tmp/dl_$q" 2> "$OUT/dl_$q.compile.log" || tail -5 "$OUT/dl_$q.compile.log"
  run_logged 2 dl_$q "/tmp/dl_$q" --data .carry/diloco/tok.bin --steps 12
  python3 -c "import json,sys; print('$q', ' '.join(f\"{json.loads(l)['loss']:.4f}\" for l in open(sys.argv[1])), 'bytes', [json.loads(l)['comm_bytes'] for l in open(sys.argv[1])][:4])" "$OUT/dl_$q.jsonl"
done
