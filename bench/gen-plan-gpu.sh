#!/usr/bin/env bash
# On the development machine (it has MLIR): loomc --plan=auto for one model
# (MODEL, default l67) in bf16, 8 x 1024 tokens a step on 2 H200s
# (--topology=gpu=2, the HW description, default h200x2-plan-2026-11-30),
# then CUDA sources of the chosen plan, the next 4 that fit, and the hand
# plan of the scale issue (`--zero-stage=3`, its other choices left to
# loomc) where it is not among them, into .carry/plan-MODEL (plan1 ..,
# with plan.json, the report, and rows.txt) for bench/run-plan-gpu.sh.
#   l67   Llama 6.7B (32 layers, d 4096, ffn 11008, vocabulary 32000)
#   g625  GPT 6.25B (30 layers, d 4096, vocabulary 50304)
#   l13   Llama 13B (40 layers, d 5120, ffn 13824, vocabulary 32000)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
MODEL="${MODEL:-l67}"
declare -A SPECS=(
  [l67]=llama:layers=32,d_model=4096,heads=32,ffn=11008,vocab=32000,seq=1024,batch=8
  [g625]=gpt:layers=30,d_model=4096,heads=32,vocab=50304,seq=1024,batch=8
  [l13]=llama:layers=40,d_model=5120,heads=40,ffn=13824,vocab=32000,seq=1024,batch=8
)
S="${SPECS[$MODEL]:?MODEL is one of ${!SPECS[*]}}"
C=.carry/plan-$MODEL
rm -rf "$C" && mkdir -p "$C"
HW="${HW:-bench/hardware/h200x2-plan-2026-11-30.json}"
COMMON=(--model "$S" --lr=3e-4 --target=cuda --precision=bf16 --hardware="$HW" --topology=gpu=2)
time "$BIN/loomc" "${COMMON[@]}" --plan=auto --plan-report="$C/plan.json" --compile-to=import \
  -o /dev/null 2> "$C/search.txt"
grep -A14 "plans predicted" "$C/search.txt"
python3 - "$C/plan.json" > "$C/rows.txt" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ok = sorted((c for c in d["candidates"] if c.get("ok") and c.get("fits")), key=lambda c: c["step_s"])
rows = ok[:5]
for i, c in enumerate(rows):
    # name, predicted step, predicted MFU (2 GPUs), flags
    print(f"plan{i + 1} {c['step_s']:.4f} {c.get('mfu', 0):.4f} {' '.join(c['flags'])}")
PY
echo "$S" > "$C/spec.txt"
# The hand plan, where the search did not rank it in its top 5 (or did not
# compile it: bounded out by a plan's kernels), predicted on its own.
if ! grep -q " --zero-stage=3$" "$C/rows.txt"; then
  "$BIN/loomc" "${COMMON[@]}" --zero-stage=3 --compile-to=schedule -o /dev/null \
    --prediction-json="$C/hand.json" 2> /dev/null
  python3 - "$C/hand.json" "$(($(wc -l < "$C/rows.txt") + 1))" >> "$C/rows.txt" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
mfu = 6 * p["params"] * p["tokens"] / p["step_s"] / (2 * 989e12)
print(f"plan{sys.argv[2]} {p['step_s']:.4f} {mfu:.4f} --zero-stage=3")
PY
fi
while read -r name step mfu flags; do
  # shellcheck disable=SC2086
  "$BIN/loomc" "${COMMON[@]}" $flags --compile-to=cpp -o "$C/$name.cpp" 2> "$C/$name.predicted.txt"
  rm -f "$C/$name.cpp.kernels.cu"
  gzip -f "$C/$name.cpp"
  echo "$name: predicted $step s (MFU $mfu): $flags"
done < "$C/rows.txt"
