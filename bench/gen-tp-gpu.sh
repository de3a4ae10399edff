#!/usr/bin/env bash
# On the development machine: CUDA programs for bench/run-tp-gpu.sh
# (issue 47: tensor parallelism's bits on the CUDA path) into .carry/tp/:
# a GPT and a Llama with grouped-query attention, fp32 and bf16, on one
# rank, with --tensor-parallel=2 (the embedding and head split by
# vocabulary) and with --tensor-parallel=2 --sequence-parallel.
set -euo pipefail
cd "$(dirname "$0")/.."
C=.carry/tp
mkdir -p "$C"
L=${LOOMC:-build/bin/loomc}
declare -A SPEC=(
  [gpt]="gpt:layers=4,d_model=256,heads=8,vocab=1024,seq=128,batch=8"
  [llama]="llama:layers=4,d_model=256,heads=8,kv_heads=2,vocab=1024,seq=128,batch=8"
)
for m in gpt llama; do
  for p in fp32 bf16; do
    n=$m; [ $p = fp32 ] || n=$m-$p
    "$L" --model "${SPEC[$m]}" --target=cuda --precision=$p --compile-to=cpp -o "$C/$n-1.cpp" 2>/dev/null
    "$L" --model "${SPEC[$m]}" --target=cuda --precision=$p --topology=gpu=2 --tensor-parallel=2 \
      --compile-to=cpp -o "$C/$n-tp2.cpp" 2>/dev/null
    "$L" --model "${SPEC[$m]}" --target=cuda --precision=$p --topology=gpu=2 --tensor-parallel=2 \
      --sequence-parallel --compile-to=cpp -o "$C/$n-sp2.cpp" 2>/dev/null
  done
done
ls "$C"
