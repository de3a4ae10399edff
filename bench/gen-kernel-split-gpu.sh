#!/usr/bin/env bash
# On the development machine: the Llama 6.7B and the GPT 6.25B of issue 49's
# plan table at --zero-stage=0 on 2 H200s (bf16, 8 x 1024 tokens a step),
# CUDA sources and each step's predicted kernel time by kind
# (bench/kernel_split.py predict, the plan description) into .carry/ksplit,
# for bench/run-kernel-split-gpu.sh: where the GPT's data-parallel plans
# are predicted 8% slow and the Llama's within 4%.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
C=.carry/ksplit
rm -rf "$C" && mkdir -p "$C"
HW=bench/hardware/h200x2-plan-2026-11-30.json
declare -A SPECS=(
  [l67]=llama:layers=32,d_model=4096,heads=32,ffn=11008,vocab=32000,seq=1024,batch=8
  [g625]=gpt:layers=30,d_model=4096,heads=32,vocab=50304,seq=1024,batch=8
)
for m in l67 g625; do
  "$BIN/loomc" --model "${SPECS[$m]}" --lr=3e-4 --target=cuda --precision=bf16 --hardware="$HW" \
    --topology=gpu=2 --zero-stage=0 --timeline "$C/$m.timeline.json" --compile-to=cpp \
    -o "$C/$m.cpp" 2> "$C/$m.predicted.txt"
  rm -f "$C/$m.cpp.kernels.cu"
  gzip -f "$C/$m.cpp"
  python3 bench/kernel_split.py predict "$C/$m.timeline.json" > "$C/$m.pred.json"
  rm "$C/$m.timeline.json"
  echo "$m: $(cat "$C/$m.pred.json")"
done
