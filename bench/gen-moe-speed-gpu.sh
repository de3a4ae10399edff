#!/usr/bin/env bash
# On the development machine: the CUDA sources and predictions of a first
# mixture-of-experts speed measurement on one H200 (issue 52; one GPU, no
# expert parallelism), into .carry/moesp. Model: 8 layers, d 2048, 16 heads
# over 8 key/value heads, 8 experts of width 2816, top-2, vocabulary 32000,
# 8 x 1024 tokens, bf16 (Mixtral's shape scaled down, ~1.3B parameters):
#   cap   capacity factor 1.25 (each expert 2560 rows)
#   full  dropless (each expert all 8192 rows: 4x the useful products)
# The step loomc predicts with the H200 description (h200x1-fitted) goes to
# ROW.predicted.txt and is printed; bench/run-moe-speed-gpu.sh measures.
#   bench/gen-moe-speed-gpu.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
GEN=.carry/moesp
rm -rf "$GEN" && mkdir -p "$GEN"
base=layers=8,d_model=2048,heads=16,kv_heads=8,ffn=2816,vocab=32000,seq=1024,batch=8,experts=8,top_k=2
HW=bench/hardware/h200x1-fitted-2026-11-29.json
for row in cap full; do
  model="moe:$base"
  [ "$row" = cap ] && model="$model,capacity=1.25"
  "$BIN/loomc" --model "$model" --target=cuda --precision=bf16 --hardware="$HW" \
    --compile-to=cpp -o "$GEN/$row.cpp" 2> "$GEN/$row.predicted.txt"
  rm -f "$GEN/$row.cpp.kernels.cu"
  gzip -f "$GEN/$row.cpp"
  echo "$row: $(grep -E 'step|device memory' "$GEN/$row.predicted.txt" | head -3 | tr '\n' ' ')"
done
ls -la "$GEN"
