#!/usr/bin/env bash
# On a GPU host, one call: the runtime's CUDA conformance (every *cuda*
# test and the fused regions, through NVRTC), then GPT-2 124M bf16 (vocab
# 50304, batch 16 x 1024) for STEPS steps as three binaries of one model:
# fused with the planned arena (loomc's default), fused with the online
# arena (--arena=online), and unfused with the planned arena (--no-fuse):
# the planned and online binaries must train to the same losses, the fused
# and unfused ones within bf16 tolerance (issue 22: 50 steps).
#   here:  bench/gen-fuse-arena.sh      (sources into .carry/fa/)
#   there: bench/run-fuse-arena-gpu.sh  (carry .carry/fa and .carry/googletest)
set -uo pipefail
cd "$(dirname "$0")/.."
source bench/gpu-runtime.sh
STEPS=${STEPS:-50}
OUT=${OUT:-/tmp/fa}; mkdir -p "$OUT"
cmake -G Ninja -S bench -B build-tests -DLOOM_BUILD_TESTS=ON \
  -DLOOM_GTEST_SOURCE_DIR="$PWD/.carry/googletest" > "$OUT/cmake.log" 2>&1 &&
  ninja -C build-tests loomrt-tests loomrt_shared > "$OUT/ninja.log" 2>&1 ||
  { echo "build failed"; tail -20 "$OUT/ninja.log"; exit 1; }
RT=$PWD/build-tests/runtime
for b in planned online nofuse; do
  c++ -O1 -std=c++17 -I runtime/include ".carry/fa/gpt2_$b.cpp" -o "/tmp/gpt2_$b" -L"$RT" -lloomrt \
    -Wl,-rpath,"$RT" 2> "$OUT/$b.compile.log" || echo "compiling $b failed" &
done
build-tests/runtime/tests/loomrt-tests --gtest_filter='*cuda*:Fused*' > "$OUT/tests.log" 2>&1
echo "conformance: $(grep -E '^\[  (PASSED|FAILED)  \]' "$OUT/tests.log" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$OUT/tests.log" | head
wait
write_tokens 50257 "/tmp/tok50k.bin"
for b in planned online nofuse; do
  "/tmp/gpt2_$b" --data /tmp/tok50k.bin --steps "$STEPS" --seed 1 --log-json "$OUT/$b.jsonl" \
    > "$OUT/$b.txt" 2>&1 || echo "$b failed: $(tail -3 "$OUT/$b.txt")"
done
python3 - "$OUT" <<'PY'
import json, re, statistics, sys
out = sys.argv[1]
runs = {}
for b in ("planned", "online", "nofuse"):
    try:
        runs[b] = [json.loads(l) for l in open(f"{out}/{b}.jsonl")]
    except OSError:
        continue
    mem = re.search(r"step memory: ([0-9.]+) MiB", open(f"{out}/{b}.txt").read())
    print(f"| {b} | {statistics.median(x['step_ms'] for x in runs[b][2:]):.1f} ms/step | "
          f"{mem[1] if mem else '?'} MiB of step buffers | last loss {runs[b][-1]['loss']:.4f} |")
def diff(a, b):
    la, lb = [x["loss"] for x in runs[a]], [x["loss"] for x in runs[b]]
    return len(la), max(abs(x - y) / abs(y) for x, y in zip(la, lb))
if "planned" in runs and "online" in runs:
    print("planned vs online arena: %d steps, max rel. loss diff %.2e" % diff("planned", "online"))
if "planned" in runs and "nofuse" in runs:
    print("fused vs --no-fuse: %d steps, max rel. loss diff %.2e" % diff("planned", "nofuse"))
PY
