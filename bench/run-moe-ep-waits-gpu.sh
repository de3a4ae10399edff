#!/usr/bin/env bash
# On nvidia-h200-x2, after bench/gen-moe-ep-gpu.sh (.carry/moeep) and
# bench/carry-deps.sh (.carry/deps): where issue 52's EP=2 step waits. The
# runtime (with its CUDA tests of checkpoints and traces: the JSON and
# command-line parsers the runtime now builds with), then the 6.93B
# mixture with --expert-parallel=2 for 12 steps with CUPTI's kernel spans
# on each rank (bench/kernel_times.cpp), and bench/moe_ep_waits.py's table:
# per stream, each rank's wait for the other at every collective, and
# whether the late rank was computing or idle meanwhile.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
C=.carry/moeep
export MASTER_ADDR=127.0.0.1
source bench/gpu-runtime.sh
source bench/launch.sh
compile_gz "$C/ep2.cpp.gz" /tmp/ep2 &
build_runtime loomrt_shared -DCMAKE_CUDA_ARCHITECTURES=90 -DLOOM_GTEST_SOURCE_DIR="$PWD/$C/googletest"
ninja -C build-bench loomrt-tests > "$OUT/ninja-tests.log" 2>&1 || tail -5 "$OUT/ninja-tests.log"
T=$(find build-bench -name loomrt-tests -type f | head -1)
$T --gtest_filter='*Checkpoint*:*Trace*' > "$OUT/gtest.txt" 2>&1
grep -E "^\[  (PASSED|FAILED|SKIPPED) \]|FAILED \]" "$OUT/gtest.txt" | tail -6
build_kernel_times
wait
write_tokens 32000 "$OUT/tok.bin"
link_gz "$C/ep2.cpp.gz" /tmp/ep2
rm -f "$OUT/ep2.jsonl"
launch 2 "$OUT/ep2" bash -c 'export LD_PRELOAD=/tmp/libkt.so LOOM_KERNEL_TIMES=$0/kt.$RANK.csv \
  LOOM_KERNEL_GAPS=$0/gaps.$RANK.json LOOM_KERNEL_SPANS=$0/spans.$RANK; \
  exec /tmp/ep2 --data $0/tok.bin --steps 12 --log-json $0/ep2.jsonl' "$OUT" ||
  { echo "ep2 failed:"; tail -n 3 "$OUT"/ep2.{0,1}; }
cat "$OUT"/gaps.0.json "$OUT"/gaps.1.json 2>/dev/null
STEP=$(python3 -c "
import json, statistics
s = [json.loads(l) for l in open('$OUT/ep2.jsonl')]
print(statistics.median(x['step_ms'] for x in s if 'loss' in x and x['step'] >= 4) / 1e3)")
echo "median step: $STEP s"
python3 bench/moe_ep_waits.py "$OUT/spans.0" "$OUT/spans.1" "$STEP"
