#!/usr/bin/env bash
# Run here (where loomc is built): the step simulation's predictions from two
# loomc builds, BASE and NEW (this tree), side by side with their ratio:
# step time, time of the last gradient and peak device memory, for the
# models of bench/gen-lowering-gpu.sh (GPT-2 124M bf16; the 5B GPT in the
# cpu, static:0.5 and interleaved offload modes) on the fitted H100
# description, and a ZeRO-3 GPT on 4 ranks.
#   BASE=/path/to/old/build/bin bench/compare-simulation.sh
set -euo pipefail
cd "$(dirname "$0")/.."
NEW=${NEW:-build/bin}
BASE=${BASE:?set BASE to the bin folder of the loomc to compare with}
HW=${HW:-bench/hardware/h100-fitted-2026-11-26.json}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
gpt2=gpt:layers=12,d_model=768,heads=12,vocab=50257,seq=1024,batch=16
big=gpt:layers=24,d_model=4096,heads=32,vocab=32000,seq=1024,batch=2
dp=gpt:layers=12,d_model=1024,heads=16,vocab=32000,seq=1024,batch=4
configs=(
  "gpt2 bf16|--model $gpt2 --precision=bf16"
  "5b cpu|--model $big --precision=bf16 --optimizer-offload=cpu"
  "5b static:0.5|--model $big --precision=bf16 --optimizer-offload=static:0.5"
  "5b interleaved|--model $big --precision=bf16 --optimizer-offload=interleaved"
  "350m zero-3 x4|--model $dp --precision=bf16 --topology=gpu=4 --zero-stage=3"
)
printf '| model | base step s | new step s | new/base | base last grad s | new last grad s | base GiB | new GiB |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for c in "${configs[@]}"; do
  name=${c%%|*}
  read -r -a args <<< "${c#*|}"
  for w in base new; do
    bin=$NEW; [ $w = base ] && bin=$BASE
    "$bin/loomc" "${args[@]}" --hardware="$HW" --compile-to=optimizer --timeline="$T/$w.json" \
      -o /dev/null 2> "$T/$w.err" || { echo "$name: $w failed: $(tail -1 "$T/$w.err")"; exit 1; }
  done
  python3 - "$name" "$T/base.json" "$T/new.json" <<'PY'
import json, sys
b, n = (json.load(open(f))["loom_prediction"] for f in sys.argv[2:])
G = 2**30
print(f"| {sys.argv[1]} | {b['step_s']:.4f} | {n['step_s']:.4f} | {n['step_s']/b['step_s']:.4f} | "
      f"{b['backward_s']:.4f} | {n['backward_s']:.4f} | {b['peak_device_bytes']/G:.2f} | {n['peak_device_bytes']/G:.2f} |")
PY
done
