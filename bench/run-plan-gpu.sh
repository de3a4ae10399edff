#!/usr/bin/env bash
# On nvidia-h200-x2, after bench/gen-plan-gpu.sh: each plan of .carry/plan
# (the one loomc --plan=auto chose, then the next 4 by predicted step)
# trains STEPS steps (default 8) on 2 ranks, one a GPU. A table: the
# median step of steps 3 on beside the plan's prediction, tokens/s, MFU
# (6 x 6.74e9 parameters x tokens/s over 2 x 989 TFLOP/s), rank 0's card
# use; then whether the chosen plan is within 5% of the fastest measured.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
C=.carry/plan
export MASTER_ADDR=127.0.0.1
source bench/gpu-runtime.sh
source bench/launch.sh
ROWS=$(cut -d' ' -f1 "$C/rows.txt")
for row in $ROWS; do compile_gz "$C/$row.cpp.gz" "/tmp/$row" & done
build_runtime loomrt_shared -DCMAKE_CUDA_ARCHITECTURES=90
wait
write_tokens 32000 "$OUT/tok.bin"
for row in $ROWS; do
  link_gz "$C/$row.cpp.gz" "/tmp/$row"
  rm -f "$OUT/$row.jsonl"
  launch 2 "$OUT/$row" timeout "${TIMEOUT:-200}" "/tmp/$row" --data "$OUT/tok.bin" \
    --steps "${STEPS:-8}" --seed 1 --log-json "$OUT/$row.jsonl" ||
    { echo "$row failed:"; tail -n 4 "$OUT/$row".{0,1}; }
done
python3 - "$OUT" "$C/rows.txt" <<'PY'
import json, statistics, sys
out, rows = sys.argv[1], [l.split(" ", 2) for l in open(sys.argv[2]).read().splitlines()]
N, TOK = 6.74e9, 8 * 1024
print("| plan | flags | step s | predicted | pred/meas | tokens/s | MFU (2 GPUs) | rank 0's card GiB |")
print("|---|---|---|---|---|---|---|---|")
measured = {}
for name, pred, flags in rows:
    try:
        log = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
        log = [s for s in log if "loss" in s]
        m = statistics.median(s["step_ms"] for s in log[2:]) / 1000
    except Exception as e:
        print(f"| {name} | {flags} | failed ({e}) | {pred} | | | | |")
        continue
    measured[name] = m
    used = max(s.get("card_used_mib", float("nan")) for s in log) / 1024
    print(f"| {name} | {flags} | {m:.4f} | {float(pred):.4f} | {float(pred) / m:.2f} | "
          f"{TOK / m:,.0f} | {6 * N * TOK / m / (2 * 989e12):.1%} | {used:.1f} |")
if measured:
    best = min(measured.values())
    if "plan1" in measured:
        print(f"chosen plan (plan1) / fastest measured: {measured['plan1'] / best:.3f} "
              f"({'within' if measured['plan1'] <= 1.05 * best else 'NOT within'} 5%)")
PY
