#!/usr/bin/env bash
# Run here (where loomc is built): the sources of the offload benchmark
# (bench/run-offload-big.sh) for GPT models of about 1B, 3B and 5B
# parameters in the four --optimizer-offload modes, planned for the H100
# host as loom-calibrate measured it, with each one's predicted step
# (loomc's line) and timeline next to them in .carry/big. SIZES="5b" makes
# only those.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
OUT=.carry/big
# The calibrated description plus the two step efficiencies fitted on the
# 1B runs (docs/cost-model.md): 3B and 5B are predicted, not fitted.
HW=bench/hardware/h100-fitted-2026-11-26.json
mkdir -p "$OUT"
declare -A MODEL=(
  [1b]=gpt:layers=20,d_model=2048,heads=16,vocab=32000,seq=1024,batch=2
  [3b]=gpt:layers=26,d_model=3072,heads=24,vocab=32000,seq=1024,batch=2
  [5b]=gpt:layers=24,d_model=4096,heads=32,vocab=32000,seq=1024,batch=2
)
for size in ${SIZES:-1b 3b 5b}; do
  for m in none cpu static:0.5 interleaved; do
    f=${size}_${m/:/}
    "$BIN/loomc" --model "${MODEL[$size]}" --target=cuda --precision=bf16 --optimizer-offload=$m \
      --hardware=$HW --timeline "$OUT/$f.timeline.json" --compile-to=cpp -o "$OUT/$f.cpp" \
      2> "$OUT/$f.predicted.txt"
    gzip -f "$OUT/$f.cpp"
    echo "$f: $(head -1 "$OUT/$f.predicted.txt")"
  done
done
