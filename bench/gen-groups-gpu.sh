#!/usr/bin/env bash
# On the development machine (it has MLIR): CUDA sources for
# bench/check-groups-gpu.sh, into .carry/groups: collectives over groups
# smaller than the world on NCCL (ncclCommSplit through loomrt_step_group).
#   dl21  Streaming DiLoCo, 2 replicas of 1 GPU (H=4, P=2, fp32)
#   dl22  the same, 2 replicas of 2 GPUs (data parallelism inside each)
#   z3    ZeRO-3 over node=2,gpu=2
#   hpz   the same with --zeropp=hpz (the backward gathers inside a node)
# A small GPT (global batch 8), so every run is a few seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
GEN=.carry/groups
rm -rf "$GEN" && mkdir -p "$GEN"
python3 examples/make_tokens.py /usr/share/common-licenses/GPL-3 "$GEN/gpl3.bin" > /dev/null
m=(--model gpt:layers=2,d_model=64,heads=4,vocab=50304,seq=64,batch=8 --lr=3e-3 --target=cuda
   --compile-to=cpp)
dl=(--diloco=inner-steps=4,fragments=2,quant=fp32)
"$BIN/loomc" "${m[@]}" --topology=replica=2,gpu=1 "${dl[@]}" -o "$GEN/dl21.cpp"
"$BIN/loomc" "${m[@]}" --topology=replica=2,gpu=2 "${dl[@]}" -o "$GEN/dl22.cpp"
"$BIN/loomc" "${m[@]}" --topology=node=2,gpu=2 --zero-stage=3 -o "$GEN/z3.cpp"
"$BIN/loomc" "${m[@]}" --topology=node=2,gpu=2 --zero-stage=3 --zeropp=hpz -o "$GEN/hpz.cpp"
ls -la "$GEN"
