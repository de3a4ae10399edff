#!/usr/bin/env bash
# On the development machine (it has MLIR): the CUDA sources of the 1-bit
# Adam measurement (bench/run-onebit-gpu.sh), into .carry/onebit.
# GPT-2 124M (vocabulary 50304), bf16, global batch 16 x 1024 on 2 GPUs:
#   z0    ZeRO-0 data parallelism (bf16 gradients all-reduced a step)
#   ob    1-bit Adam, freeze step 5, one compressed all-reduce per parameter
#         (DeepSpeed OnebitAdam's numerics)
#   obb   the same with --onebit-bucket-size=16777216 (consecutive
#         parameters share a compressed all-reduce and a scale)
#   one   one GPU with one rank's batch (8 x 1024): the compute alone
#   obbM  1-bit Adam with M-million-element buckets (M = 4, 64, 256)
#   bench/gen-onebit-gpu.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
GEN=.carry/onebit
rm -rf "$GEN" && mkdir -p "$GEN"
python3 examples/make_tokens.py /usr/share/common-licenses/GPL-3 "$GEN/gpl3.bin" > /dev/null
gpt2=gpt:layers=12,d_model=768,heads=12,vocab=50304,seq=1024
common=(--target=cuda --precision=bf16 --compile-to=cpp)
"$BIN/loomc" --model "$gpt2,batch=16" "${common[@]}" --topology=gpu=2 --zero-stage=0 -o "$GEN/z0.cpp"
"$BIN/loomc" --model "$gpt2,batch=16" "${common[@]}" --topology=gpu=2 --optimizer=onebit-adam \
  --freeze-step=5 -o "$GEN/ob.cpp"
"$BIN/loomc" --model "$gpt2,batch=16" "${common[@]}" --topology=gpu=2 --optimizer=onebit-adam \
  --freeze-step=5 --onebit-bucket-size=16777216 -o "$GEN/obb.cpp"
"$BIN/loomc" --model "$gpt2,batch=8" "${common[@]}" -o "$GEN/one.cpp"
# Bucket sizes for bench/run-onebit-sweep.sh: 4M, 64M and 256M elements (the
# last one bucket for the whole model).
for m in 4 64 256; do
  "$BIN/loomc" --model "$gpt2,batch=16" "${common[@]}" --topology=gpu=2 \
    --optimizer=onebit-adam --freeze-step=5 --onebit-bucket-size=$((m << 20)) -o "$GEN/obb$m.cpp"
done
ls -la "$GEN"
