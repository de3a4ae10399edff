#!/usr/bin/env bash
# On the development machine (it has MLIR): loomc --plan=auto for the 6.7B
# Llama (32 layers, d 4096, ffn 11008, vocabulary 32000), bf16, 8 x 1024
# tokens a step on 2 H200s (--topology=gpu=2, the h200x2-kernels
# description), then CUDA sources of the chosen plan and the next 4 that
# fit into .carry/plan (plan1 .. plan5, with plan.json, the report) for
# bench/run-plan-gpu.sh. Prints each row's flags and predicted step.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
C=.carry/plan
rm -rf "$C" && mkdir -p "$C"
S=llama:layers=32,d_model=4096,heads=32,ffn=11008,vocab=32000,seq=1024,batch=8
HW=bench/hardware/h200x2-kernels-2026-11-30.json
COMMON=(--model "$S" --lr=3e-4 --target=cuda --precision=bf16 --hardware="$HW" --topology=gpu=2)
time "$BIN/loomc" "${COMMON[@]}" --plan=auto --plan-report="$C/plan.json" --compile-to=import \
  -o /dev/null 2> "$C/search.txt"
grep -A14 "plans predicted" "$C/search.txt"
python3 - "$C/plan.json" > "$C/rows.txt" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ok = sorted((c for c in d["candidates"] if c.get("ok") and c.get("fits")), key=lambda c: c["step_s"])
for i, c in enumerate(ok[:5]):
    print(f"plan{i + 1} {c['step_s']:.4f} {' '.join(c['flags'])}")
PY
while read -r name step flags; do
  # shellcheck disable=SC2086
  "$BIN/loomc" "${COMMON[@]}" $flags --compile-to=cpp -o "$C/$name.cpp" 2> "$C/$name.predicted.txt"
  rm -f "$C/$name.cpp.kernels.cu"
  gzip -f "$C/$name.cpp"
  echo "$name: predicted $step s: $flags"
done < "$C/rows.txt"
