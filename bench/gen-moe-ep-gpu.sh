#!/usr/bin/env bash
# On the development machine (it has MLIR): CUDA sources and predictions
# for bench/run-moe-ep-gpu.sh into .carry/moeep (issue 52's GPU row, 2
# H200s). NAME.predicted.txt is loomc's prediction, committed to
# bench/RESULTS.md before the run.
#   ep2     a 6.93B-parameter 8-expert top-2 mixture (12 layers, d 2048, 16
#           heads over 8 key/value heads, experts of width 11264, vocabulary
#           32000; 1.94B parameters active a token), bf16, capacity 1.25,
#           load-balancing loss 0.001, 8 x 1024 tokens a rank,
#           --expert-parallel=2 (4 experts a GPU)
#   chk-ep2 a small fp32 mixture (2 layers, d 256, 8 experts, dropless, no
#           auxiliary loss) with --expert-parallel=2, 4 sequences of 128 a rank
#   chk-one the same model on one GPU with the global batch (8 x 128): the
#           losses chk-ep2 must give (NCCL's all-to-all checked on GPUs)
#   googletest/ for the runtime's MoE kernel tests on CUDA
#   bench/gen-moe-ep-gpu.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
C=.carry/moeep
rm -rf "$C" && mkdir -p "$C"
HW=bench/hardware/h200x2-plan-2026-11-30.json
big=moe:layers=12,d_model=2048,heads=16,kv_heads=8,ffn=11264,vocab=32000,seq=1024,batch=16,experts=8,top_k=2,capacity=1.25
small=moe:layers=2,d_model=256,heads=4,kv_heads=2,ffn=512,vocab=32000,seq=128,batch=8,experts=8,top_k=2,aux=0
gen() {
  local name=$1; shift
  "$BIN/loomc" "$@" --lr=3e-4 --target=cuda --compile-to=cpp -o "$C/$name.cpp" \
    2> "$C/$name.predicted.txt"
  rm -f "$C/$name.cpp.kernels.cu"
  gzip -f "$C/$name.cpp"
  grep -E "predicted" "$C/$name.predicted.txt" | sed -E "s/ on '[^']*'//; s/^/$name: /" || true
}
gen ep2 --model "$big" --precision=bf16 --hardware="$HW" --expert-parallel=2
gen chk-ep2 --model "$small" --expert-parallel=2
gen chk-one --model "$small"
# Debian's GoogleTest sources (the GPU hosts have none): the runtime's MoE
# kernel tests on CUDA.
cp -r /usr/src/googletest "$C/googletest"
ls -la "$C"
