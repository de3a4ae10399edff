#!/usr/bin/env bash
# On a GPU host (nvidia-h200-x2): issue 44's first call.
#  1. The runtime's tests (CUDA and CPU), CpuGpuAdam.SameBits among them:
#     the GPU's Adam gives the CPU's bits.
#  2. The streamed-subgroup check end to end (sources from
#     bench/gen-streamed-gpu.sh): st-cpu and st-hand (subgroups resident,
#     streamed and on the CPU in one step) trained 5 steps from one seed,
#     every loss bitwise equal; st-none beside them.
#  3. --device-memory: st-cpu capped at 16 GiB (the card's used memory in
#     the log stays under it) and at 1 GiB (refused: the plan cannot fit).
#  4. loom-calibrate on this host (one GPU; then NVLink between the two
#     GPUs with --links gpu=2): the description the 80 GB plans use.
# Prints a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
G=.carry/streamed
export NCCL_NVLS_ENABLE=0 MASTER_ADDR=127.0.0.1
source bench/gpu-runtime.sh
build_runtime loomrt_shared -DLOOMRT_NCCL_ROOT="$(nccl_root)" -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLOOM_GTEST_SOURCE_DIR="$PWD/.carry/googletest"
ninja -C build-bench loomrt-tests loom-calibrate >> "$OUT/ninja.log" 2>&1 || { echo "tests build failed"; tail -20 "$OUT/ninja.log"; }
ST="${ST:-st-cpu st-hand st-none st-hand-ht st-mix0 st-mix1}"
for f in $ST; do
  link_binary "$G/$f.cpp" "/tmp/$f" -O1 2> "$OUT/$f.compile.log" || echo "compiling $f failed" &
done
T=$(find build-bench -name loomrt-tests -type f | head -1)
# ONLY_STREAMED=1: the end-to-end comparison alone (parts 2).
[ -n "${ONLY_STREAMED:-}" ] && T=true
echo "== runtime tests"
$T --gtest_brief=1 > "$OUT/tests.txt" 2>&1; echo "rc $?"; tail -4 "$OUT/tests.txt"
$T --gtest_filter='CpuGpuAdam.*' 2>&1 | grep -E "^\[ +(OK|FAILED|SKIPPED) " | head -3
write_tokens 32000 "$OUT/tok.bin"
wait
echo "== streamed vs cpu"
for f in $ST; do
  rm -f "$OUT/$f.jsonl"
  "/tmp/$f" --data "$OUT/tok.bin" --steps 5 --seed 3 --log-json "$OUT/$f.jsonl" > "$OUT/$f.txt" 2>&1 ||
    echo "$f failed: $(tail -2 "$OUT/$f.txt")"
done
if [ -z "${ONLY_STREAMED:-}" ]; then
echo "== --device-memory"
rm -f "$OUT/cap16.jsonl"
/tmp/st-cpu --data "$OUT/tok.bin" --steps 3 --device-memory 16 --log-json "$OUT/cap16.jsonl" > "$OUT/cap16.txt" 2>&1; echo "cap 16: rc $?"
grep -h "loomrt:" "$OUT/cap16.txt" | head -2
/tmp/st-cpu --data "$OUT/tok.bin" --steps 3 --device-memory 1 > "$OUT/cap1.txt" 2>&1; echo "cap 1: rc $? $(tail -1 "$OUT/cap1.txt")"
echo "== loom-calibrate"
C=$(find build-bench -name loom-calibrate -type f | head -1)
timeout 300 $C -o "$OUT/h200x2-calibrate.json" > "$OUT/calibrate.txt" 2>&1; echo "calibrate rc $?"; tail -3 "$OUT/calibrate.txt"
source bench/launch.sh
launch 2 "$OUT/links" timeout 300 $C --links gpu=2 -o "$OUT/h200x2-links.json" || { echo "links failed"; tail -3 "$OUT/links.0"; }
fi
nproc; free -g | head -2; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | sort | uniq -c
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def losses(f):
    try:
        return [json.loads(l) for l in open(f"{out}/{f}.jsonl")]
    except OSError:
        return []
names = ("st-cpu", "st-hand", "st-none", "st-hand-ht", "st-mix0", "st-mix1")
rows = {f: losses(f) for f in names}
print("| step | st-cpu | st-hand (gpu/stream/cpu) | st-none (all on GPU) |")
print("|---|---|---|---|")
for i in range(5):
    cell = lambda f: f"{rows[f][i]['loss']:.8g}" if len(rows[f]) > i else "-"
    print(f"| {i + 1} | {cell('st-cpu')} | {cell('st-hand')} | {cell('st-none')} |")
a, b = [r["loss"] for r in rows["st-cpu"]], [r["loss"] for r in rows["st-hand"]]
print(f"st-hand vs st-cpu: {'bitwise equal' if a == b and len(a) == 5 else 'DIFFERENT'}")
c = [r["loss"] for r in rows["st-none"]]
print(f"st-none vs st-cpu: {'bitwise equal' if a == c and len(a) == 5 else 'different'}")
for f in names[3:]:
    d = [r["loss"] for r in rows[f]]
    print(f"{f} vs st-cpu: {'bitwise equal' if a == d and len(a) == 5 else 'DIFFERENT'} {d}")
cap = losses("cap16")
print("cap 16 GiB: card_used_mib", [r.get("card_used_mib") for r in cap], "device_mib",
      [r.get("device_mib") for r in cap])
for f in names:
    if rows[f]:
        print(f, "step_ms", [round(r["step_ms"], 1) for r in rows[f]], "card_used_mib",
              rows[f][-1].get("card_used_mib"))
PY
