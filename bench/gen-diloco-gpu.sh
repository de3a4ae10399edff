#!/usr/bin/env bash
# On the development machine (it has MLIR): the CUDA sources of the
# Streaming DiLoCo speed measurement (bench/run-diloco-gpu.sh), into
# .carry/dlgpu. GPT-2 124M (vocabulary 50304), bf16, 16 x 1024 tokens a
# replica (global batch 32), two replicas of one GPU:
#   dl    Streaming DiLoCo, H=100, P=2, tau=10, fp4 (blocks of 128)
#   none  the same with H=100000: no outer step in the run (the compute and
#         the 4-byte loss all-reduce a step alone)
#   dp    ZeRO-0 data parallelism over the same ranks and batch
#   dl60  H=60, P=3, tau=5, fp8 (issue 49: its exchanges do not hide)
#   dl60t15  the same with tau=15
# Each row's prediction on the link (h200x2-tcp1g-2026-11-30: loomc's
# Streaming DiLoCo line, the mean step over the outer period) goes to
# .carry/dlgpu/ROW.predicted.txt and is printed.
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
"$BIN/loomc" "${common[@]}" --topology=replica=2,gpu=1 \
  --diloco=inner-steps=60,fragments=3,overlap=5,quant=fp8,elastic=1 -o "$GEN/dl60.cpp"
"$BIN/loomc" "${common[@]}" --topology=replica=2,gpu=1 \
  --diloco=inner-steps=60,fragments=3,overlap=15,quant=fp8,elastic=1 -o "$GEN/dl60t15.cpp"
# The predictions on the capped link (the exchanges beside the steps: the
# TCP transport runs them on a thread of their own).
HW=bench/hardware/h200x2-tcp1g-2026-11-30.json
predict() {
  "$BIN/loomc" --model "$gpt2" --target=cuda --precision=bf16 --hardware="$HW" \
    --topology=replica=2,gpu=1 --diloco="$2" --compile-to=schedule -o /dev/null \
    2> "$GEN/$1.predicted.txt"
  echo "$1: $(grep -o 'mean step [0-9.]* s over [0-9]* inner steps ([0-9.]*% over the inner step)' "$GEN/$1.predicted.txt")"
}
predict none inner-steps=100000,fragments=2,overlap=10,quant=fp4,elastic=1
predict dl inner-steps=100,fragments=2,overlap=10,quant=fp4,elastic=1
predict dl60 inner-steps=60,fragments=3,overlap=5,quant=fp8,elastic=1
predict dl60t15 inner-steps=60,fragments=3,overlap=15,quant=fp8,elastic=1
ls -la "$GEN"
