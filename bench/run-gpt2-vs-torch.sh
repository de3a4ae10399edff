#!/usr/bin/env bash
# On a GPU host: GPT-2 124M training throughput, Loom's binary beside
# PyTorch eager and torch.compile (bf16 autocast, SDPA, fused AdamW) in one
# call, at the vocabulary the carried source was generated for (issue 22's
# table: 50304, nanoGPT's padded size).
#   here:  loomc --model gpt:layers=12,d_model=768,heads=12,vocab=50304,seq=1024,batch=16 \
#            --target=cuda --precision=bf16 --compile-to=cpp -o .carry/gpt2/gpt2_bf16.cpp
#   there: VOCAB=50304 bench/run-gpt2-vs-torch.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=/tmp/gpt2-vs-torch; mkdir -p "$OUT"
VOCAB=${VOCAB:-50304}
source bench/gpu-runtime.sh
build_runtime
link_binary .carry/gpt2/gpt2_bf16.cpp /tmp/gpt2_bf16 -O1 || { echo "link failed"; exit 1; }
write_tokens 50257 /tmp/tok50k.bin
/tmp/gpt2_bf16 --data /tmp/tok50k.bin --steps 20 --seed 1 --log-json "$OUT/loom.jsonl" > "$OUT/loom.txt" 2>&1 ||
  echo "loom failed: $(tail -2 "$OUT/loom.txt")"
python3 bench/gpt2_torch.py --vocab "$VOCAB" --steps 20 > "$OUT/eager.json" 2> "$OUT/eager.err" ||
  echo "eager failed: $(tail -2 "$OUT/eager.err")"
python3 bench/gpt2_torch.py --vocab "$VOCAB" --steps 25 --compile > "$OUT/compile.json" 2> "$OUT/compile.err" ||
  echo "compile failed: $(tail -2 "$OUT/compile.err")"
python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
r = [json.loads(l) for l in open(out + "/loom.jsonl")]
loom = statistics.median(x["tokens_per_s"] for x in r[2:])
rows = [("Loom", loom)]
for name in ("eager", "compile"):
    try:
        d = json.loads(open(f"{out}/{name}.json").read().strip().splitlines()[-1])
        rows.append((d["impl"], d["tokens_per_s"]))
    except Exception as e:
        rows.append((name + " (failed)", float("nan")))
print("| implementation | tokens/s | Loom / it |")
print("|---|---|---|")
for name, tps in rows:
    print(f"| {name} | {tps / 1e3:.1f}k | {loom / tps:.2f}x |")
PY
