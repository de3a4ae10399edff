#!/usr/bin/env bash
# A Llama-3-shaped 1B model as users bring it (a Hugging Face model
# exported by PyTorch 2.11's dynamo exporter, test/Zoo/make_llama1b.py)
# against the same shape from loomc's own generator: bf16 training on one
# GPU, tokens/s of each and their ratio (issue 16: within 5%).
#   on a GPU host:        python3 test/Zoo/make_llama1b.py /tmp/l1b   (the graph, 2.4 MB)
#   here (loomc built):   bench/llama1b-import-vs-generator.sh gen GRAPH.onnx
#   on a GPU host:        bench/llama1b-import-vs-generator.sh run   (prints a table last)
# Both compiled with --init=random (the export's 6.4 GB of weights stay on
# the host that made them; speed does not depend on their values).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=.carry/llama1b
GEN="llama:layers=16,d_model=2048,heads=32,vocab=128256,seq=1024,batch=4,ffn=8192"
STEPS=${STEPS:-14}
if [ "${1:-}" = gen ]; then
  BIN=${BIN:-build/bin}
  rm -rf "$SRC" && mkdir -p "$SRC"
  # The rotary table the exporter folded from inv_freq is a buffer.
  "$BIN/loomc" "$2" --init=random --frozen=transpose --target=cuda --precision=bf16 \
    --compile-to=cpp -o "$SRC/import.cpp" 2> "$SRC/import.loomc.log"
  "$BIN/loomc" --model "$GEN" --target=cuda --precision=bf16 --compile-to=cpp \
    -o "$SRC/generator.cpp" 2> "$SRC/generator.loomc.log"
  ls -la "$SRC"
  exit 0
fi
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
source bench/gpu-runtime.sh
build_runtime
for n in import generator; do
  link_binary "$SRC/$n.cpp" "/tmp/l1b_$n" -O1 &
done
wait
python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 65535, 4*1024*($STEPS+2)+2, dtype=np.uint16).tofile('/tmp/l1b_tokens.bin')"
# Alternating runs (generator, import, generator, import): drift on the
# card shows as a difference between a model's two runs.
for round in 1 2; do
  for n in generator import; do
    rm -f "$OUT/$n.$round.jsonl"
    "/tmp/l1b_$n" --data /tmp/l1b_tokens.bin --steps "$STEPS" --log-json "$OUT/$n.$round.jsonl" \
      > "$OUT/$n.$round.txt" 2>&1 || echo "$n failed: $(tail -2 "$OUT/$n.$round.txt" | tr '\n' ' ')"
  done
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
def rate(n):
    rs = []
    for r in (1, 2):
        steps = [json.loads(l) for l in open(f"{out}/{n}.{r}.jsonl")][3:]  # after warm-up
        rs.append(statistics.median(s["tokens_per_s"] for s in steps))
    return rs
g, i = rate("generator"), rate("import")
print(f"{'model (bf16, batch 4 x 1024)':34} {'tokens/s run 1':>15} {'run 2':>10} {'median ms/step':>15}")
for name, rs in (("loomc --model llama:... (generator)", g), ("Hugging Face export (dynamo)", i)):
    print(f"{name:34} {rs[0]:15.0f} {rs[1]:10.0f} {4096e3 / statistics.mean(rs):15.1f}")
ratio = statistics.mean(i) / statistics.mean(g)
print(f"import / generator tokens/s: {ratio:.3f} ({'within' if abs(1 - ratio) <= 0.05 else 'NOT within'} 5%)")
PY
