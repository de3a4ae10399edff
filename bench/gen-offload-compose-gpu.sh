#!/usr/bin/env bash
# On the development machine: the CUDA programs
# bench/run-offload-compose-gpu.sh runs (issue 44: offload composed with
# 1-bit Adam at ZeRO 0-2, and with Streaming DiLoCo; AdamW at ZeRO 1-2
# beside them), each with and
# without --optimizer-offload, into .carry/offcomp/.
set -euo pipefail
cd "$(dirname "$0")/.."
C=.carry/offcomp
mkdir -p "$C"
L=${LOOMC:-build/bin/loomc}
SPEC="gpt:layers=6,d_model=512,heads=8,vocab=50304,seq=512,batch=16"
gen() { # NAME FLAGS...
  local name=$1; shift
  "$L" --model "$SPEC" --target=cuda --precision=bf16 --lr=6e-4 "$@" --compile-to=cpp \
    -o "$C/$name.cpp" 2>&1 | grep -v "^features" || true
}
for s in 0 1 2; do
  for o in none cpu static:0.5; do
    gen "ob$s-${o%:*}" --topology=gpu=2 --zero-stage=$s --optimizer=onebit-adam --freeze-step=5 \
      --optimizer-offload=$o
  done
done
for s in 1 2; do # the same ZeRO stages with AdamW throughout
  for o in none cpu; do
    gen "z$s-$o" --topology=gpu=2 --zero-stage=$s --optimizer-offload=$o
  done
done
for o in none cpu static:0.5; do
  gen "dl-${o%:*}" --topology=replica=2 --diloco=inner-steps=4,fragments=2,overlap=1,quant=fp4 \
    --optimizer-offload=$o
done
ls "$C"
