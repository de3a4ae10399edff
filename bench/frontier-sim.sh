#!/usr/bin/env bash
# Issue 19 by simulation: the cost model's step for a 20B GPT (GPT-NeoX
# shape: 44 layers, width 6144, 64 heads, vocabulary 50432, sequence 2048;
# bf16 with --recompute, one sequence a GCD) with ZeRO-3 on Frontier
# (--hardware=frontier: one MI250X GCD a rank; docs/cost-model.md has every
# number and its source) at 48 nodes (384 GCDs) and at 1 node (8 GCDs):
#   flat      --hierarchy=flat
#   zero++    --zeropp=qwz,hpz,qgz (hpZ's secondary partition in the node)
#   3-level   --zeropp=qwz,qgz with --hierarchy=auto (the plan picks the
#             secondary partition's level: none, the GCD pair or the node)
# Prints one line per run: the predicted step and TFLOPS a GCD (6 x
# parameters x tokens a GCD / step, recompute not counted, as papers count).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
PARAMS=20.6e9 # 44 x 12 x 6144^2 + 50432 x 6144 + 2048 x 6144
for nodes in 1 48; do
  m=(--model "gpt:layers=44,d_model=6144,heads=64,vocab=50432,seq=2048,batch=$((nodes * 8))"
     --precision=bf16 --recompute --topology=node=$nodes,gpu=4,gcd=2 --zero-stage=3
     --hardware=frontier --compile-to=lowered -o /dev/null)
  for run in flat:--hierarchy=flat zero++:--zeropp=qwz,hpz,qgz 3-level:--zeropp=qwz,qgz; do
    step=$("$BIN/loomc" "${m[@]}" "${run#*:}" 2>&1 | sed -n "s/^loomc: predicted step on 'frontier': \([0-9.]*\) s.*/\1/p")
    python3 -c "s=float('$step'); print(f'{$nodes * 8:4d} GCDs  {\"${run%%:*}\":8s} step {s:7.3f} s  '
                f'{6 * $PARAMS * 2048 / s / 1e12:6.1f} TFLOPS a GCD')"
  done
done
