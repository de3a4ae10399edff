#!/usr/bin/env bash
# On the development machine: issue 44's two-GPU row. A 13B GPT-style
# model (40 layers, d 5120, 40 heads, vocabulary 50304; bf16, 2 x 1024
# tokens a rank) with ZeRO-3 over 2 GPUs (nvidia-h200-x2), planned for
# 80 GB cards (--device-memory=80) with --optimizer-offload=cpu and
# interleaved, for the x2 host as bench/hardware/h200x2-derived-2026-11-29.json
# describes it. CUDA sources into .carry/off13,
# loomc's predictions beside them (x2-13b-*.predicted.txt: committed to
# bench/RESULTS.md before the run). Run with bench/run-offload13b-x2.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
C=.carry/off13
mkdir -p "$C"
L=${LOOMC:-build/bin/loomc}
HW=${HW:-bench/hardware/h200x2-derived-2026-11-29.json}
# The first run on this host (2026-11-29 session 13) measured each rank's
# CPU Adam at 0.69x the description's rate (both ranks' updates share the
# host's DRAM), and the binary said so: plan with that (WHATIF= for none).
WHATIF=${WHATIF-dram=0.69}
SPEC="gpt:layers=40,d_model=5120,heads=40,vocab=50304,seq=1024,batch=4"
for o in cpu interleaved; do
  "$L" --model "$SPEC" --target=cuda --topology=gpu=2 --zero-stage=3 --precision=bf16 \
    --optimizer-offload=$o --lr=1e-4 --hardware="$HW" --device-memory=80 --compile-to=cpp \
    ${WHATIF:+--what-if=$WHATIF} \
    -o "$C/x2-13b-$o.cpp" 2> "$C/x2-13b-$o.predicted.txt"
  gzip -f "$C/x2-13b-$o.cpp"
  echo "x2-13b-$o: $(grep -h 'predicted step\|offload plan\|chosen' "$C/x2-13b-$o.predicted.txt" | tr '\n' ' ')"
done
