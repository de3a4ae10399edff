#!/usr/bin/env bash
# On the development machine (it has MLIR): CUDA sources for
# bench/run-zeropp-gpu.sh into .carry/zeropp, and the cost model's
# predictions for them (printed; committed to bench/RESULTS.md before the
# run). Issue 19: a GPT of 1.3B parameters (24 layers, width 2048,
# vocabulary 50304, 16 x 1024 tokens a step, bf16) with ZeRO-3 on 4 GPUs as
# two "nodes" of two GPUs, --topology=node=2,gpu=2:
#   flat  --hierarchy=flat: every collective over the 4 ranks
#   hier  --zeropp=qwz,qgz with --hierarchy=auto (hpZ where the plan wants
#         it): int8 weight gathers, int4 gradients reduced inside the node
#         then across
# Predicted on bench/hardware/h100-2node-emulated.json (the fitted H100
# description with NVLink inside a node and the emulated 12.5 GB/s link
# between, LOOMRT_SLOW_LINK=2:12.5) and on the same without the slow link
# (-nvlink: every level at NVLink's 2-GPU bus bandwidth).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
GEN=.carry/zeropp
rm -rf "$GEN" && mkdir -p "$GEN"
python3 examples/make_tokens.py /usr/share/common-licenses/GPL-3 "$GEN/gpl3.bin" > /dev/null
HW=bench/hardware/h100-2node-emulated.json
python3 - "$HW" "$GEN/nvlink.json" <<'PY'
import json, sys
h = json.load(open(sys.argv[1]))
h["name"] = "h100 host, 4 GPUs on NVLink (no emulated link)"
h["links"] = [dict(l, bandwidth=294e9, latency=10e-6) for l in h["links"]]
json.dump(h, open(sys.argv[2], "w"), indent=1)
PY
m=(--model gpt:layers=24,d_model=2048,heads=16,vocab=50304,seq=1024,batch=16 --precision=bf16
   --lr=3e-4 --target=cuda --topology=node=2,gpu=2 --zero-stage=3)
for hw in "$HW" "$GEN/nvlink.json"; do
  echo "== predictions on $(basename "$hw")"
  "$BIN/loomc" "${m[@]}" --hierarchy=flat --hardware="$hw" --compile-to=cpp -o "$GEN/flat.cpp" 2>&1 |
    sed 's/^/flat: /'
  "$BIN/loomc" "${m[@]}" --zeropp=qwz,qgz --hardware="$hw" --compile-to=cpp -o "$GEN/hier.cpp" 2>&1 |
    sed 's/^/hier: /'
done
ls -la "$GEN"
