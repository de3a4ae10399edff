#!/usr/bin/env bash
# On the single-H100 host: issue 20's single-GPU rows (sources and
# predictions from bench/gen-offload-1gpu.sh here), each run for STEPS steps
# with --trace, one after another (the 6.7B runs hold most of the host's
# memory pinned), then a table: median step of steps 3 on, the predicted
# step, pred/meas, and the CPU updates' start and busy time predicted and
# measured (bench/compare-timeline.py).
#   ROWS="l67-cpu l67-int" bench/run-offload-1gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
STEPS="${STEPS:-6}"
C=.carry/off1
mkdir -p "$OUT"
source bench/gpu-runtime.sh
[ -n "${RT:-}" ] || build_runtime
ROWS="${ROWS:-$(ls $C/*.cpp.gz | xargs -n1 basename | sed 's/.cpp.gz//' | tr '\n' ' ')}"
for r in $ROWS; do
  [ -x "/tmp/$r" ] && continue
  { gunzip -c "$C/$r.cpp.gz" > "/tmp/$r.cpp" && link_binary "/tmp/$r.cpp" "/tmp/$r" -O1 \
      2> "$OUT/$r.compile.log" || echo "compiling $r failed"; } &
done
wait
[ -f /tmp/tok32k.bin ] || write_tokens 32000 "/tmp/tok32k.bin" 2_000_000
for r in $ROWS; do
  rm -f "$OUT/$r.jsonl"
  /usr/bin/time -f "%e s wall, %M KB host peak" "/tmp/$r" --data /tmp/tok32k.bin --steps "$STEPS" \
    --log-json "$OUT/$r.jsonl" --trace "$OUT/$r.trace.json" > "$OUT/$r.txt" 2>&1 ||
    echo "  $r failed: $(grep -v '^step' "$OUT/$r.txt" | tail -2 | tr '\n' ' ')"
done
python3 - "$OUT" "$C" $ROWS <<'PY'
import json, re, statistics, subprocess, sys
out, c, rows = sys.argv[1], sys.argv[2], sys.argv[3:]
print("| row | measured s | predicted s | pred/meas | CPU start meas/pred ms | CPU busy meas/pred ms | plan |")
print("|---|---|---|---|---|---|---|")
meas = {}
for r in rows:
    pred = open(f"{c}/{r}.predicted.txt").read()
    p = float(re.search(r": ([0-9.]+) s \(last gradient", pred)[1])
    plan = re.search(r"offload plan: (.*)", pred)
    try:
        steps = [json.loads(l) for l in open(f"{out}/{r}.jsonl")][2:]
        m = statistics.median(s["step_ms"] for s in steps) / 1000
        cs = statistics.median(s.get("cpu_update_start_ms", float("nan")) for s in steps)
        cb = statistics.median(s.get("cpu_update_ms", float("nan")) for s in steps)
    except Exception:
        print(f"| {r} | failed | {p:.3f} | | | | |")
        continue
    meas[r] = m
    t = json.load(open(f"{c}/{r}.timeline.json"))["traceEvents"]
    cpu = {e["tid"] for e in t if e.get("ph") == "M" and e.get("args", {}).get("name") == "predicted cpu"}
    spans = [e for e in t if e.get("ph") == "X" and e.get("tid") in cpu]
    ps = min((e["ts"] for e in spans), default=float("nan")) / 1000
    pb = sum(e["dur"] for e in spans) / 1000
    print(f"| {r} | {m:.3f} | {p:.3f} | {p / m:.2f} | {cs:.0f} / {ps:.0f} | {cb:.0f} / {pb:.0f} | {plan[1] if plan else ''} |")
for model in ("l67", "l43", "g5b"):
    for suffix in ("", "-off"):
        if f"{model}-cpu{suffix}" in meas and f"{model}-int{suffix}" in meas:
            print(f"{model}{suffix or ' (host thread)'}: interleaved vs cpu "
                  f"{meas[f'{model}-cpu{suffix}'] / meas[f'{model}-int{suffix}']:.2f}x")
    if f"{model}-int" in meas and f"{model}-int-online" in meas:
        print(f"{model}: interleaved with the planned arena vs the online one "
              f"{meas[f'{model}-int-online'] / meas[f'{model}-int']:.2f}x")
    if f"{model}-int" in meas and f"{model}-int-off" in meas:
        print(f"{model}: interleaved with the host thread vs without "
              f"{meas[f'{model}-int-off'] / meas[f'{model}-int']:.2f}x")
PY
