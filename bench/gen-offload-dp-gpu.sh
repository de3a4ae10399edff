#!/usr/bin/env bash
# On the development machine: the CUDA programs bench/run-offload-dp-gpu.sh
# runs (ZeRO-3 on 2 GPUs with and without --optimizer-offload=cpu, fp32 and
# bf16; cpu with the CPU's updates on the host thread, CUDA's default, and
# without it: cpuoff) into .carry/offdp/.
set -euo pipefail
cd "$(dirname "$0")/.."
C=.carry/offdp
mkdir -p "$C"
L=${LOOMC:-build/bin/loomc}
SPEC="gpt:layers=12,d_model=768,heads=12,vocab=50304,seq=1024,batch=16"
for p in fp32 bf16; do
  for o in none cpu cpuoff; do
    "$L" --model "$SPEC" --target=cuda --topology=gpu=2 --zero-stage=3 --precision=$p \
      --optimizer-offload=${o%off} --host-thread=$([ "$o" = cpuoff ] && echo off || echo auto) \
      --lr=6e-4 --compile-to=cpp -o "$C/z3-$p-$o.cpp" 2>&1 | grep -v "^features" || true
  done
done
