#!/usr/bin/env bash
# On the development machine: a small fp32 mixture with Qwen2-MoE's shared
# expert and the router z-loss (issue 52), as CUDA and as CPU sources, into
# .carry/moeshared for bench/run-moe-shared-gpu.sh (the CUDA binary's losses
# against the CPU binary's on the same host).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
C=.carry/moeshared
rm -rf "$C" && mkdir -p "$C"
M=moe:layers=2,d_model=256,heads=4,kv_heads=2,ffn=512,vocab=32000,seq=128,batch=8,experts=8,top_k=2,capacity=1.25,aux=0.01,shared=384,z=0.001
for t in cuda cpu; do
  "$BIN/loomc" --model "$M" --lr=3e-4 --target=$t --compile-to=cpp -o "$C/$t.cpp" 2> /dev/null
  rm -f "$C/$t.cpp.kernels.cu"
  gzip -f "$C/$t.cpp"
done
ls -la "$C"
