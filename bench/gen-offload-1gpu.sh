#!/usr/bin/env bash
# On the development machine: the CUDA programs of bench/run-offload-1gpu.sh
# (issue 20's single-H100 rows) into .carry/off1/, each with loomc's
# prediction on the H100 host's description beside it (NAME.predicted.txt)
# and its predicted timeline (NAME.timeline.json).
#   l67: Llama-style 6.7B (32 layers, d 4096, ffn 11008), batch 2 x 1024
#   l43: Llama-style 4.3B (20 layers, same width), batch 4 x 1024
#   g5b: GPT 5B (24 layers, d 4096), batch 2 x 1024
# each in --optimizer-offload=cpu and interleaved, with the CPU's updates on
# the step's host thread (the default for CUDA) and without it
# (--host-thread=off: the schedule before it, the in-call baseline), and
# with the runtime's online arena instead of loom-plan-arena's planned one
# (suffix -online: --arena=online, the plans before it).
# ROWS="l67-int l67-int-off" makes only those.
set -euo pipefail
cd "$(dirname "$0")/.."
C=.carry/off1
mkdir -p "$C"
L=${LOOMC:-build/bin/loomc}
HW=${HW:-bench/hardware/h100-fitted-2026-11-26.json}
declare -A SPEC=(
  [l67]=llama:layers=32,d_model=4096,heads=32,vocab=32000,seq=1024,batch=2,ffn=11008
  [l43]=llama:layers=20,d_model=4096,heads=32,vocab=32000,seq=1024,batch=4,ffn=11008
  [g5b]=gpt:layers=24,d_model=4096,heads=32,vocab=32000,seq=1024,batch=2
)
ALL="l67-cpu l67-cpu-off l67-int l67-int-off l43-cpu l43-int l43-int-off g5b-cpu g5b-int g5b-int-off"
for row in ${ROWS:-$ALL}; do
  IFS=- read -r model mode off <<< "$row"
  o=$([ "$mode" = int ] && echo interleaved || echo cpu)
  "$L" --model "${SPEC[$model]}" --target=cuda --precision=bf16 --optimizer-offload=$o \
    --host-thread=$([ "$off" = off ] && echo off || echo on) \
    --arena=$([ "$off" = online ] && echo online || echo planned) --hardware="$HW" \
    --timeline "$C/$row.timeline.json" --compile-to=cpp -o "$C/$row.cpp" 2> "$C/$row.predicted.txt"
  gzip -f "$C/$row.cpp"
  echo "$row: $(grep -h 'predicted step\|offload plan' "$C/$row.predicted.txt" | sed 's/ on .h100[^:]*//' | tr '\n' ' ')"
done
