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
# Prints one line per run: the predicted step, TFLOPS a GCD (6 x
# parameters x tokens a GCD / step, recompute not counted, as papers count),
# device memory a GCD and the bytes a GCD sends a step per communicator
# (level); then each plan's scaling efficiency from 8 to 384 GCDs.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
PARAMS=20.6e9 # 44 x 12 x 6144^2 + 50432 x 6144 + 2048 x 6144
declare -A tf
for nodes in 1 48; do
  m=(--model "gpt:layers=44,d_model=6144,heads=64,vocab=50432,seq=2048,batch=$((nodes * 8))"
     --precision=bf16 --recompute --topology=node=$nodes,gpu=4,gcd=2 --zero-stage=3
     --hardware=frontier --compile-to=lowered -o /dev/null)
  for run in flat:--hierarchy=flat zero++:--zeropp=qwz,hpz,qgz 3-level:--zeropp=qwz,qgz; do
    out=$("$BIN/loomc" "${m[@]}" "${run#*:}" 2>&1)
    step=$(sed -n "s/^loomc: predicted step on 'frontier': \([0-9.]*\) s.*/\1/p" <<< "$out")
    mem=$(sed -n "s/^loomc: predicted step on 'frontier': .*device memory \([0-9.]*\) GiB.*/\1/p" <<< "$out")
    bytes=$(sed -n "s/^loomc: predicted bytes this rank sends a step, per communicator: *//p" <<< "$out")
    tf[$nodes,${run%%:*}]=$(python3 -c "print(6 * $PARAMS * 2048 / float('$step') / 1e12)")
    python3 -c "s=float('$step'); print(f'{$nodes * 8:4d} GCDs  {\"${run%%:*}\":8s} step {s:7.3f} s  '
                f'{6 * $PARAMS * 2048 / s / 1e12:6.1f} TFLOPS a GCD  {float(\"$mem\"):6.1f} GiB a GCD  '
                f'bytes a GCD by level: $bytes')"
  done
done
# Scaling efficiency: TFLOPS a GCD at 384 GCDs over that at 8, each plan
# against itself (as Xu et al. count it for their scheme).
for run in flat zero++ 3-level; do
  python3 -c "print(f'scaling efficiency 8 -> 384 GCDs, {\"$run\":8s}: {${tf[48,$run]} / ${tf[1,$run]}:.2f}')"
done
