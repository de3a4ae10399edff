#!/usr/bin/env bash
# On the development machine (it has MLIR): CUDA sources and predictions
# for bench/run-convergence-gpu.sh into .carry/conv (issue 53: does each
# codec keep the loss within 1% of the uncompressed run at ~1B parameters?).
# The model: a Llama-style 1.1B (TinyLlama's shape: 22 layers, d 2048, 32
# heads over 4 key/value heads, ffn 5632, vocabulary 32000), bf16, lr 3e-4,
# 16 x 1024 tokens a step over 2 H200s, trained on the Python standard
# library's sources as byte tokens (bench/make_corpus.py). Rows:
#   flat    ZeRO-3, every collective full precision (the baseline)
#   qwz     ZeRO-3 with qwZ alone (int8 weight gathers, blocks of 2048)
#   qgz     ZeRO-3 with qgZ alone (int4 gradient all-to-all, blocks of 128)
#   zpp     qwZ + qgZ
#   onebit  1-bit Adam over ZeRO-0, freeze after 75 steps (15% of 500)
#   diloco  Streaming DiLoCo, two replicas of one GPU, H=100, P=2, tau=10, fp4
#   obr10   onebit with --variance-refresh=10 (refreshes 10, 20, 40, ... steps
#           apart after the freeze: optimizer steps 85, 105, 145, 225, 385)
#   obr25   the same with --variance-refresh=25 (steps 100, 150, 250, 450)
#   dl32    diloco with its exchanges in fp32 (what the fp4 codec costs)
#   dl8     diloco with fp8 exchanges
#   flat4   (nvidia-h200-x4) flat ZeRO-3 on 4 ranks as --topology=node=2,gpu=2
#   zpp4    (nvidia-h200-x4) qwZ + qgZ on the same, --hierarchy=auto: qgZ's two
#           stages (inside the "node", then across), issue 53's first setting
#   dp      ZeRO-0 data parallelism (the speed baseline of onebit and diloco)
#   ob5     onebit with its freeze after 5 steps (for the speed after the freeze)
# ROW.predicted.txt is loomc's prediction on NVLink (h200x2-plan-2026-11-30),
# ROW.slow.txt on the same host with the ranks joined by an emulated 6.25
# GB/s link (LOOMRT_SLOW_LINK=1:6.25 in the run; the issue's link).
#   bench/gen-convergence-gpu.sh [BUILD_DIR] [ROW...]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-build}/bin"
shift $(($# > 0 ? 1 : 0))
C=.carry/conv
rows=("$@")
[ ${#rows[@]} -gt 0 ] || rows=(flat qwz qgz zpp onebit diloco dp ob5)
rm -rf "$C" && mkdir -p "$C"
python3 bench/make_corpus.py "$C/corpus.bin"
python3 examples/make_tokens.py /usr/share/common-licenses/GPL-3 "$C/gpl3.bin" > /dev/null
HW=bench/hardware/h200x2-plan-2026-11-30.json
python3 - "$HW" "$C/slow.json" <<'PY'
import json, sys
h = json.load(open(sys.argv[1]))
nv = h["links"][-1]
h["name"] = "h200x2-plan-2026-11-30 with its two GPUs joined by an emulated 6.25 GB/s link"
h["links"] = [{"name": "replica", "bandwidth": 6.25e9, "latency": 1e-5},
              {"name": "gpu", "bandwidth": 6.25e9, "latency": 1e-5}]
json.dump(h, open(sys.argv[2], "w"), indent=1)
PY
# The 4-GPU rows: h200x4-fitted-2026-11-27 with NVLink inside a "node" of
# two GPUs and the emulated 6.25 GB/s link between (LOOMRT_SLOW_LINK=2:6.25).
# Unchecked (written 2026-11-30 without a 4-GPU machine): flat4 on it
# predicts 1.06 s where issue 53's own description predicted 1.882 s and
# measured 1.874 s; find which link convention that run used before
# committing these predictions.
HW4=bench/hardware/h200x4-fitted-2026-11-27.json
python3 - "$HW4" "$C/slow4.json" <<'PY'
import json, sys
h = json.load(open(sys.argv[1]))
nv = h["links"][0]
h["name"] = "h200x4-fitted-2026-11-27 with two nodes of 2 GPUs joined by an emulated 6.25 GB/s link"
h["links"] = [dict(nv, name="gpu"), {"name": "node", "bandwidth": 6.25e9, "latency": 1e-5}]
json.dump(h, open(sys.argv[2], "w"), indent=1)
PY
model=llama:layers=22,d_model=2048,heads=32,kv_heads=4,ffn=5632,vocab=32000,seq=1024,batch=16
flags() {
  case $1 in
    flat) echo --topology=gpu=2 --zero-stage=3 ;;
    qwz) echo --topology=gpu=2 --zero-stage=3 --zeropp=qwz ;;
    qgz) echo --topology=gpu=2 --zero-stage=3 --zeropp=qgz ;;
    zpp) echo --topology=gpu=2 --zero-stage=3 --zeropp=qwz,qgz ;;
    onebit) echo --topology=gpu=2 --zero-stage=0 --optimizer=onebit-adam --freeze-step=75 ;;
    obr10) echo --topology=gpu=2 --zero-stage=0 --optimizer=onebit-adam --freeze-step=75 --variance-refresh=10 ;;
    obr25) echo --topology=gpu=2 --zero-stage=0 --optimizer=onebit-adam --freeze-step=75 --variance-refresh=25 ;;
    dl8) echo --topology=replica=2,gpu=1 --diloco=inner-steps=100,fragments=2,overlap=10,quant=fp8 ;;
    flat4) echo --topology=node=2,gpu=2 --zero-stage=3 --hierarchy=flat ;;
    zpp4) echo --topology=node=2,gpu=2 --zero-stage=3 --zeropp=qwz,qgz ;;
    dl32) echo --topology=replica=2,gpu=1 --diloco=inner-steps=100,fragments=2,overlap=10,quant=fp32 ;;
    ob5) echo --topology=gpu=2 --zero-stage=0 --optimizer=onebit-adam --freeze-step=5 ;;
    dp) echo --topology=gpu=2 --zero-stage=0 ;;
    diloco) echo --topology=replica=2,gpu=1 --diloco=inner-steps=100,fragments=2,overlap=10,quant=fp4 ;;
    *) echo "unknown row $1" >&2; exit 1 ;;
  esac
}
for r in "${rows[@]}"; do
  f=$(flags "$r")
  hw=$HW slow=$C/slow.json
  case $r in *4) hw=$HW4 slow=$C/slow4.json ;; esac
  # shellcheck disable=SC2086
  "$BIN/loomc" --model "$model" --precision=bf16 --lr=3e-4 --target=cuda $f --hardware="$hw" \
    --compile-to=cpp -o "$C/$r.cpp" 2> "$C/$r.predicted.txt"
  rm -f "$C/$r.cpp.kernels.cu"
  gzip -f "$C/$r.cpp"
  # shellcheck disable=SC2086
  "$BIN/loomc" --model "$model" --precision=bf16 --lr=3e-4 --target=cuda $f --hardware="$slow" \
    --compile-to=cpp -o "$C/scratch.cpp" 2> "$C/$r.slow.txt"
  rm -f "$C"/scratch.cpp*
  # The prediction lines without the hardware's name (which holds quotes).
  for k in predicted slow; do
    python3 -c "import re, sys
for l in open(sys.argv[1]):
    if re.search(r'predicted (step|Streaming)', l):
        print(sys.argv[2], re.sub(r\" on '.*?': \", ': ', l.split('loomc: ', 1)[1].strip())[:200])" \
      "$C/$r.$k.txt" "$r ($k):"
  done
done
ls -la "$C"
