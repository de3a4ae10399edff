#!/usr/bin/env bash
# On the development machine (it has MLIR): CUDA sources for
# bench/run-offload80-gpu.sh into .carry/off80, and loomc's predictions
# (NAME.predicted.txt; committed to bench/RESULTS.md before the run).
# Issue 44: Deep Optimizer States planned for an 80 GB card and run on an
# H200 held to 80 GiB (--device-memory=80: the plan is for 80 GiB, the
# binary holds the rest of the card back). bf16, batch 2 x 1024:
#   g625  GPT 6.25B (30 layers, d 4096, vocabulary 50304)
#   l71   Llama 7.1B (28 layers, d 4096, ffn 14336, vocabulary 32000)
#   l67   Llama 6.7B (32 layers, d 4096, ffn 11008, vocabulary 32000)
# each with --optimizer-offload=cpu and interleaved, predicted on the
# one-GPU host as loom-calibrate measured it (bench/hardware/
# h200x1-fitted-2026-11-29.json).
#   ROWS="l71-int" bench/gen-offload80-gpu.sh makes only those.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
C=.carry/off80
mkdir -p "$C"
HW=${HW:-bench/hardware/h200x1-kernels-2026-11-29.json}
declare -A SPEC=(
  [g625]=gpt:layers=30,d_model=4096,heads=32,vocab=50304,seq=1024,batch=2
  [l71]=llama:layers=28,d_model=4096,heads=32,ffn=14336,vocab=32000,seq=1024,batch=2
  [l67]=llama:layers=32,d_model=4096,heads=32,ffn=11008,vocab=32000,seq=1024,batch=2
)
for row in ${ROWS:-g625-cpu g625-int l71-cpu l71-int l67-cpu l67-int}; do
  IFS=- read -r model mode <<< "$row"
  o=$([ "$mode" = int ] && echo interleaved || echo cpu)
  "$BIN/loomc" --model "${SPEC[$model]}" --target=cuda --precision=bf16 --lr=3e-4 \
    --optimizer-offload=$o --hardware="$HW" --device-memory=80 \
    --timeline "$C/$row.timeline.json" --compile-to=cpp -o "$C/$row.cpp" 2> "$C/$row.predicted.txt"
  gzip -f "$C/$row.cpp"
  echo "$row: $(grep -h 'predicted step\|offload plan' "$C/$row.predicted.txt" | sed 's/ on .1x H200[^:]*//' | tr '\n' ' ')"
done
