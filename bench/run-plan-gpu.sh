#!/usr/bin/env bash
# On nvidia-h200-x2, after MODEL=... bench/gen-plan-gpu.sh: each plan of
# .carry/plan-MODEL (the one loomc --plan=auto chose, the next 4 by
# predicted step, the hand plan) trains STEPS steps (default 8) on 2 ranks,
# one a GPU. A table: the median step of steps 3 on beside the plan's
# prediction, tokens/s, MFU (6 x parameters x tokens/s over 2 x 989
# TFLOP/s: the predicted MFU scaled by predicted over measured step), rank
# 0's card use; then whether the chosen plan is within 5% of the fastest
# measured and the largest prediction error. MODELS="l67 g625 l13" runs
# several in one call.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
export MASTER_ADDR=127.0.0.1
source bench/gpu-runtime.sh
source bench/launch.sh
MODELS="${MODELS:-${MODEL:-l67}}"
for model in $MODELS; do
  C=.carry/plan-$model
  for row in $(cut -d' ' -f1 "$C/rows.txt"); do compile_gz "$C/$row.cpp.gz" "/tmp/$model-$row" & done
done
build_runtime loomrt_shared -DCMAKE_CUDA_ARCHITECTURES=90
wait
write_tokens 50304 "$OUT/tok.bin"  # (ids below every model's vocabulary: 32000 or 50304)
write_tokens 32000 "$OUT/tok32k.bin"
for model in $MODELS; do
  C=.carry/plan-$model
  tok="$OUT/tok.bin"; grep -q "vocab=32000" "$C/spec.txt" && tok="$OUT/tok32k.bin"
  for row in $(cut -d' ' -f1 "$C/rows.txt"); do
    r=$model-$row
    link_gz "$C/$row.cpp.gz" "/tmp/$r"
    rm -f "$OUT/$r.jsonl"
    launch 2 "$OUT/$r" timeout "${TIMEOUT:-200}" "/tmp/$r" --data "$tok" \
      --steps "${STEPS:-8}" --seed 1 --log-json "$OUT/$r.jsonl" ||
      { echo "$r failed:"; tail -n 4 "$OUT/$r".{0,1}; }
  done
done
for model in $MODELS; do
python3 - "$OUT" ".carry/plan-$model" "$model" <<'PY'
import json, statistics, sys
out, c, model = sys.argv[1], sys.argv[2], sys.argv[3]
rows = [l.split(" ", 3) + [""] * (4 - len(l.split(" ", 3))) for l in open(f"{c}/rows.txt").read().splitlines()]
spec = open(f"{c}/spec.txt").read().strip()
print(f"{model}: {spec}")
print("| plan | flags | step s | predicted | pred/meas | tokens/s | MFU (2 GPUs) | rank 0's card GiB |")
print("|---|---|---|---|---|---|---|---|")
kv = dict(p.split("=") for p in spec.split(":")[1].split(","))
TOK = int(kv["seq"]) * int(kv["batch"])
measured, errs = {}, []
for name, pred, mfu, flags in rows:
    try:
        log = [json.loads(l) for l in open(f"{out}/{model}-{name}.jsonl")]
        log = [s for s in log if "loss" in s]
        m = statistics.median(s["step_ms"] for s in log[2:]) / 1000
    except Exception as e:
        print(f"| {name} | {flags} | failed ({e}) | {pred} | | | | |")
        continue
    measured[name] = m
    errs.append(float(pred) / m - 1)
    used = max(s.get("card_used_mib", float("nan")) for s in log) / 1024
    print(f"| {name} | {flags} | {m:.4f} | {float(pred):.4f} | {float(pred) / m:.3f} | "
          f"{TOK / m:,.0f} | {float(mfu) * float(pred) / m:.1%} | {used:.1f} |")
if measured:
    best = min(measured.values())
    if "plan1" in measured:
        print(f"{model}: chosen plan (plan1) / fastest measured: {measured['plan1'] / best:.3f} "
              f"({'within' if measured['plan1'] <= 1.05 * best else 'NOT within'} 5%); "
              f"largest prediction error {max(abs(e) for e in errs):.1%}")
PY
done
