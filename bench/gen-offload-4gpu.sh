#!/usr/bin/env bash
# On the development machine: the CUDA programs of bench/run-offload-4gpu.sh
# into .carry/off4/.
#   PART=small: GPT-2 124M (bf16, batch 16 x 1024, 4 a rank) on 4 GPUs with
#               ZeRO 1, 2 and 3, without offload and with
#               --optimizer-offload=cpu and static:0.5 (same losses?).
#   PART=big:   a 20B GPT-style model (44 layers, d 6144, 48 heads, vocab
#               50304, seq 1024, batch 4: one sequence a rank) with ZeRO-3 over
#               4 GPUs and --optimizer-offload=cpu and interleaved, planned and
#               predicted for HW (the 4-GPU host as loom-calibrate measured
#               it) and interleaved again for HW80 (the same host with 80 GB
#               cards); each one's prediction beside it (*.predicted.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
C=.carry/off4
mkdir -p "$C"
L=${LOOMC:-build/bin/loomc}
case "${PART:-small}" in
small)
  SPEC="gpt:layers=12,d_model=768,heads=12,vocab=50304,seq=1024,batch=16"
  for z in 1 2 3; do
    for o in none cpu static:0.5; do
      "$L" --model "$SPEC" --target=cuda --topology=gpu=4 --zero-stage=$z --precision=bf16 \
        --optimizer-offload=$o --lr=6e-4 --compile-to=cpp -o "$C/small-z$z-${o/:/}.cpp" 2>/dev/null
    done
  done ;;
big)
  # The 4-GPU host as calibrated (its cards came as H200s, 143 GB: the
  # 20B model's 320 GB of weights and Adam state fit four of them), and the
  # same host planned as if its cards had an H100's 80 GB (the issue's
  # premise: the state does not fit the cards), which the run then keeps to.
  HW=${HW:-bench/hardware/h200x4-fitted-2026-11-27.json}
  HW80=${HW80:-bench/hardware/h200x4-as-h100-memory-2026-11-27.json}
  SPEC="gpt:layers=44,d_model=6144,heads=48,vocab=50304,seq=1024,batch=4"
  for run in cpu:cpu:$HW interleaved:interleaved:$HW interleaved80:interleaved:$HW80; do
    IFS=: read -r name o hw <<< "$run"
    "$L" --model "$SPEC" --target=cuda --topology=gpu=4 --zero-stage=3 --precision=bf16 \
      --optimizer-offload=$o --lr=1e-4 --hardware="$hw" --compile-to=cpp \
      -o "$C/big-$name.cpp" 2> "$C/big-$name.predicted.txt"
    gzip -f "$C/big-$name.cpp"
    echo "big-$name: $(grep -h 'predicted step\|offload plan' "$C/big-$name.predicted.txt" | tr '\n' ' ')"
  done ;;
esac
