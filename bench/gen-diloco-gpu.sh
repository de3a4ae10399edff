#!/usr/bin/env bash
# On the development machine (it has MLIR): the CUDA sources of the
# Streaming DiLoCo speed measurement (bench/run-diloco-gpu.sh), into
# .carry/dlgpu. GPT-2 124M (vocabulary 50304), bf16, 16 x 1024 tokens a
# replica (global batch 32), two replicas of one GPU:
#   dl    Streaming DiLoCo, H=100, P=2, tau=10, fp4 (blocks of 128)
#   none  the same with H=100000: no outer step in the run (the compute and
#         the 4-byte loss all-reduce a step alone)
#   dp    ZeRO-0 data parallelism over the same ranks and batch
#   bench/gen-diloco-gpu.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
GEN=.carry/dlgpu
rm -rf "$GEN" && mkdir -p "$GEN"
python3 examples/make_tokens.py /usr/share/common-licenses/GPL-3 "$GEN/gpl3.bin" > /dev/null
gpt2=gpt:layers=12,d_model=768,heads=12,vocab=50304,seq=1024,batch=32
common=(--model "$gpt2" --target=cuda --precision=bf16 --compile-to=cpp)
"$BIN/loomc" "${common[@]}" --topology=replica=2,gpu=1 \
  --diloco=inner-steps=100,fragments=2,overlap=10,quant=fp4 -o "$GEN/dl.cpp"
"$BIN/loomc" "${common[@]}" --topology=replica=2,gpu=1 \
  --diloco=inner-steps=100000,fragments=2,overlap=10,quant=fp4 -o "$GEN/none.cpp"
"$BIN/loomc" "${common[@]}" --topology=gpu=2 --zero-stage=0 -o "$GEN/dp.cpp"
ls -la "$GEN"
