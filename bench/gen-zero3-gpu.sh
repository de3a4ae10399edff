#!/usr/bin/env bash
# On the development machine (it has MLIR): CUDA sources for
# bench/run-zero3-gpu.sh into .carry/zero3, and loomc's predictions for
# them (printed; committed to bench/RESULTS.md before the run). Issue 43,
# ZeRO-3 per block with bf16 gathers and prefetch on 2 H200s
# (--topology=gpu=2), bf16, 4 x 1024 tokens a rank, vocabulary 32000:
#   l7       Llama 6.7B (L32, d4096, 32 heads, ffn 11008), no recompute
#   l7-nopf  the same with --prefetch=0 (each gather at its use)
#   l13      Llama 13B (L40, d5120, 40 heads, ffn 13824), --recompute=auto
#   l13-full the same with --recompute=full (FSDP2 + AC per layer's policy)
# Predicted on bench/hardware/h200x4-fitted-2026-11-27.json (its NVLink
# link is the 2-GPU bus bandwidth measured on that host).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
GEN=.carry/zero3
rm -rf "$GEN" && mkdir -p "$GEN"
HW=bench/hardware/h200x4-fitted-2026-11-27.json
common=(--precision=bf16 --lr=3e-4 --target=cuda --topology=gpu=2 --zero-stage=3 --hardware="$HW")
L7=llama:layers=32,d_model=4096,heads=32,ffn=11008,vocab=32000,seq=1024,batch=8
L13=llama:layers=40,d_model=5120,heads=40,ffn=13824,vocab=32000,seq=1024,batch=8
gen() {
  local name=$1; shift
  echo "== $name: loomc $*"
  "$BIN/loomc" "$@" "${common[@]}" --compile-to=cpp -o "$GEN/$name.cpp" 2>&1 | sed "s/^/$name: /"
}
gen l7 --model "$L7" --recompute=none
gen l7-nopf --model "$L7" --recompute=none --prefetch=0
gen l13 --model "$L13" --recompute=auto
gen l13-full --model "$L13" --recompute=full
ls -la "$GEN"
