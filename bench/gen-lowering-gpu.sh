#!/usr/bin/env bash
# Run here (where loomc is built): the sources of bench/run-lowering-gpu.sh,
# the same models compiled by two loomc builds: BASE (the commit before the
# loomrt lowering) and NEW (this tree), into .carry/lower/{base,new} with
# each one's predicted step. GPT-2 124M (bf16, batch 16) and the 5B GPT of
# the offload benchmark in the cpu, static:0.5 and interleaved modes (the
# `none` mode does not fit an H100).
#   BASE=/path/to/old/build/bin bench/gen-lowering-gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
NEW=${NEW:-build/bin}
BASE=${BASE:?set BASE to the bin folder of a loomc built from the commit before the lowering}
OUT=.carry/lower
HW=bench/hardware/h100-fitted-2026-11-26.json
gpt2=gpt:layers=12,d_model=768,heads=12,vocab=50257,seq=1024,batch=16
big=gpt:layers=24,d_model=4096,heads=32,vocab=32000,seq=1024,batch=2
for which in base new; do
  bin=$NEW; [ $which = base ] && bin=$BASE
  mkdir -p "$OUT/$which"
  "$bin/loomc" --model "$gpt2" --target=cuda --precision=bf16 --compile-to=cpp \
    -o "$OUT/$which/gpt2_bf16.cpp"
  for m in cpu static:0.5 interleaved; do
    f=5b_${m/:/}
    "$bin/loomc" --model "$big" --target=cuda --precision=bf16 --optimizer-offload=$m --hardware=$HW \
      --compile-to=cpp -o "$OUT/$which/$f.cpp" 2> "$OUT/$which/$f.predicted.txt"
  done
  gzip -f "$OUT/$which"/*.cpp
done
# The step simulation's predictions, old and new (unchanged within 1%).
for f in 5b_cpu 5b_static0.5 5b_interleaved; do
  echo "$f: base $(grep -o 'predicted step[^;]*' "$OUT/base/$f.predicted.txt")"
  echo "$f: new  $(grep -o 'predicted step[^;]*' "$OUT/new/$f.predicted.txt")"
done
