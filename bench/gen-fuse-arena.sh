#!/usr/bin/env bash
# On the development machine: the three GPT-2 124M sources of
# bench/run-fuse-arena-gpu.sh (fused + planned arena, fused + online arena,
# unfused + planned arena) into .carry/fa/.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .carry/fa
L=${LOOMC:-build/bin/loomc}
M=gpt:layers=12,d_model=768,heads=12,vocab=50304,seq=1024,batch=16
"$L" --model $M --target=cuda --precision=bf16 --compile-to=cpp -o .carry/fa/gpt2_planned.cpp
"$L" --model $M --target=cuda --precision=bf16 --arena=online --compile-to=cpp -o .carry/fa/gpt2_online.cpp
"$L" --model $M --target=cuda --precision=bf16 --no-fuse --compile-to=cpp -o .carry/fa/gpt2_nofuse.cpp
