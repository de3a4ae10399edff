#!/usr/bin/env bash
# On the development machine (it has MLIR): CUDA sources for
# bench/check-recompute-bits-gpu.sh into .carry/rbits. Does activation
# recompute change a bit on the GPU? The 13B interleaved run (full
# recompute, chosen by --recompute=auto) and its cpu peer (no recompute)
# parted at step 2 by 2e-6 on 2 H200s, while on CPU ranks none, full and
# selective give identical losses. A GPT (4 layers, d 1024, vocabulary
# 50304, batch 2 x 1024), one GPU:
#   rb-{none,full,sel}-bf16   --recompute=none|full|selective, bf16
#   rb-{none,full}-fp32       the same in fp32
#   rb-cpu-full, rb-int-full  bf16, full recompute, --optimizer-offload=cpu
#                             and interleaved at --device-memory=4 (one
#                             subgroup resident, one on the CPU)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
G=.carry/rbits
rm -rf "$G" && mkdir -p "$G"
S=gpt:layers=4,d_model=1024,heads=16,vocab=50304,seq=1024,batch=2
HW=bench/hardware/h200x2-derived-2026-11-29.json
c=(--model "$S" --lr=3e-4 --target=cuda --hardware="$HW" --compile-to=cpp)
"$BIN/loomc" "${c[@]}" --precision=bf16 --recompute=none -o "$G/rb-none-bf16.cpp"
"$BIN/loomc" "${c[@]}" --precision=bf16 --recompute=full -o "$G/rb-full-bf16.cpp"
"$BIN/loomc" "${c[@]}" --precision=bf16 --recompute=selective -o "$G/rb-sel-bf16.cpp"
"$BIN/loomc" "${c[@]}" --precision=fp32 --recompute=none -o "$G/rb-none-fp32.cpp"
"$BIN/loomc" "${c[@]}" --precision=fp32 --recompute=full -o "$G/rb-full-fp32.cpp"
"$BIN/loomc" "${c[@]}" --precision=bf16 --recompute=full --optimizer-offload=cpu -o "$G/rb-cpu-full.cpp"
"$BIN/loomc" "${c[@]}" --precision=bf16 --recompute=full --optimizer-offload=interleaved \
  --device-memory=4 -o "$G/rb-int-full.cpp" 2>&1 | grep "offload plan"
gzip -f "$G"/*.cpp
ls "$G"
