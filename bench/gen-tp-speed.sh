#!/usr/bin/env bash
# On the development machine: the CUDA source of issue 47's speed row into
# .carry/tpspeed/ and loomc's prediction beside it (committed to
# bench/RESULTS.md before bench/run-tp-speed-gpu.sh measures it). The
# landed Llama 6.7B (32 layers, d 4096, 32 heads, ffn 11008, vocabulary
# 32000), bf16, 8 x 1024 tokens a step, --tensor-parallel=2
# --sequence-parallel on the two GPUs of nvidia-h200-x2.
set -euo pipefail
cd "$(dirname "$0")/.."
C=.carry/tpspeed
mkdir -p "$C"
L=${LOOMC:-build/bin/loomc}
HW=${HW:-bench/hardware/h200x2-derived-2026-11-29.json}
"$L" --model llama:layers=32,d_model=4096,heads=32,ffn=11008,vocab=32000,seq=1024,batch=8 \
  --target=cuda --precision=bf16 --lr=3e-4 --topology=gpu=2 --tensor-parallel=2 \
  --sequence-parallel --hardware="$HW" --compile-to=cpp -o "$C/l67-tp2sp.cpp" \
  2> "$C/l67-tp2sp.predicted.txt"
gzip -f "$C/l67-tp2sp.cpp"
grep -h "predicted" "$C/l67-tp2sp.predicted.txt"
