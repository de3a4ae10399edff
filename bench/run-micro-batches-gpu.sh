#!/usr/bin/env bash
# On one H200, after bench/gen-micro-batches-gpu.sh: each binary of
# .carry/mb trains STEPS steps (default 10) from one seed. A table: the
# median step of steps 3 on, the prediction, the most the card reported in
# use against the predicted device memory, and whether the micro-batch
# runs' losses follow one step's (fp32 master weights, bf16 products:
# within 1e-3) and 1F1B's equal GPipe's bit for bit.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
C=.carry/mb
ROWS="mb1 mb4-gpipe mb4-1f1b mb8-1f1b"
source bench/gpu-runtime.sh
for r in $ROWS; do compile_gz "$C/$r.cpp.gz" "/tmp/$r" & done
build_runtime loomrt_shared -DCMAKE_CUDA_ARCHITECTURES=90
wait
write_tokens 50304 "$OUT/tok.bin"
for r in $ROWS; do
  link_gz "$C/$r.cpp.gz" "/tmp/$r"
  rm -f "$OUT/$r.jsonl"
  timeout 120 "/tmp/$r" --data "$OUT/tok.bin" --steps "${STEPS:-10}" --seed 1 \
    --log-json "$OUT/$r.jsonl" > "$OUT/$r.txt" 2>&1 || echo "$r failed: $(tail -2 "$OUT/$r.txt")"
done
python3 - "$OUT" "$C" $ROWS <<'PY'
import json, re, statistics, sys
out, c, rows = sys.argv[1], sys.argv[2], sys.argv[3:]
print("| row | step s | predicted s | pred/meas | card used GiB (max) | predicted GiB | tokens/s | MFU |")
print("|---|---|---|---|---|---|---|---|")
loss = {}
for r in rows:
    pred = open(f"{c}/{r}.predicted.txt").read()
    ps = float(re.search(r"': ([0-9.]+) s", pred)[1])
    pm = float(re.search(r"device memory ([0-9.]+) GiB", pred)[1])
    try:
        log = [json.loads(l) for l in open(f"{out}/{r}.jsonl")]
        log = [s for s in log if "loss" in s]
        m = statistics.median(s["step_ms"] for s in log[2:]) / 1000
        used = max(s.get("card_used_mib", float("nan")) for s in log) / 1024
    except Exception as e:
        print(f"| {r} | failed ({e}) | {ps:.4f} | | | {pm:.1f} | | |")
        continue
    loss[r] = [s["loss"] for s in log]
    tok = 32 * 1024 / m
    print(f"| {r} | {m:.4f} | {ps:.4f} | {ps / m:.2f} | {used:.1f} | {pm:.1f} | {tok:,.0f} | "
          f"{6 * 124.4e6 * tok / 989e12:.1%} |")
ref = loss.get("mb1", [])
for r in rows[1:]:
    if r in loss and ref:
        d = max(abs(a - b) / abs(b) for a, b in zip(loss[r], ref))
        print(f"{r} vs mb1: max relative loss difference {d:.1e} over {len(ref)} steps")
if "mb4-gpipe" in loss and "mb4-1f1b" in loss:
    print("mb4-1f1b vs mb4-gpipe: " +
          ("identical losses" if loss["mb4-gpipe"] == loss["mb4-1f1b"] else "DIFFERENT losses"))
PY
