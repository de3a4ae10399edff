#!/usr/bin/env bash
# On the development machine (it has MLIR): CUDA sources for
# bench/run-micro-batches-gpu.sh into .carry/mb, and loomc's predictions
# (NAME.predicted.txt; committed to bench/RESULTS.md before the run).
# Issue 48's first floor: gradient accumulation (--micro-batches) and its
# order (--pipeline-schedule). GPT-2 124M (12 layers, d 768, vocabulary
# 50304), bf16, 32 x 1024 tokens a step on one H200:
#   mb1         one step on the whole batch
#   mb4-gpipe   4 micro-batches of 8, every forward first
#   mb4-1f1b    4 micro-batches, each backward after its forward
#   mb8-1f1b    8 micro-batches of 4
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
C=.carry/mb
rm -rf "$C" && mkdir -p "$C"
S=gpt:layers=12,d_model=768,heads=12,vocab=50304,seq=1024,batch=32
HW=bench/hardware/h200x1-kernels-2026-11-29.json
declare -A FLAGS=(
  [mb1]=""
  [mb4-gpipe]="--micro-batches=4 --pipeline-schedule=gpipe"
  [mb4-1f1b]="--micro-batches=4"
  [mb8-1f1b]="--micro-batches=8"
)
for r in mb1 mb4-gpipe mb4-1f1b mb8-1f1b; do
  # shellcheck disable=SC2086
  "$BIN/loomc" --model "$S" --lr=3e-4 --target=cuda --precision=bf16 --hardware="$HW" \
    ${FLAGS[$r]} --compile-to=cpp -o "$C/$r.cpp" 2> "$C/$r.predicted.txt"
  gzip -f "$C/$r.cpp"
  echo "$r: $(grep -o 'predicted step.*' "$C/$r.predicted.txt" | sed "s/ on '1x H200[^:]*'//")"
done
