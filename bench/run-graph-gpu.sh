#!/usr/bin/env bash
# On a GPU host: GraphSAGE end to end (issue 21). loomc ran on the
# development machine and wrote the CUDA training programs into
# .carry/graph/ (bench/graph-sources.sh); here the runtime and
# loom-graphgen are built, then:
#   1. the karate-club programs (every feature placement) train 10 steps on
#      the GPU: their losses against the CPU backend's (karate-cpu-losses.txt);
#   2. loom-graphgen writes an R-MAT graph (GRAPH_NODES nodes, GRAPH_EDGES
#      edges drawn, 128 features, 32 classes, 10% training nodes);
#   3. Loom's GraphSAGE (batch 1024, fan-outs 15-10, hidden 256) trains with
#      the table on the device, read by zero-copy from pinned memory, and
#      gathered by the CPU (each a program of its own);
#   4. PyG's NeighborLoader + SAGEConv on the same graph (bench/graph_pyg.py).
# Prints a table last (bench/graph_table.py).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
source bench/gpu-runtime.sh
build_runtime loomrt_shared
ninja -C build-bench loom-graphgen > "$OUT/ninja-graphgen.log" 2>&1 || { tail "$OUT/ninja-graphgen.log"; exit 1; }
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
C=.carry/graph
for p in device zero-copy host-gather; do
  link_binary "$C/karate-$p.cpp" "/tmp/karate-$p" -O1 || exit 1
  link_binary "$C/sage-$p.cpp" "/tmp/sage-$p" -O1 || exit 1
  rm -f "$OUT/karate-$p.jsonl"
  /tmp/karate-$p --graph "$C/karate" --steps 10 --log-json "$OUT/karate-$p.jsonl" > "$OUT/karate-$p.txt" 2>&1 ||
    { echo "karate $p failed"; tail -3 "$OUT/karate-$p.txt"; }
done
G=/tmp/rmat
/usr/bin/time -v build-bench/bin/loom-graphgen $G --nodes "${GRAPH_NODES:-20000000}" \
  --edges "${GRAPH_EDGES:-200000000}" --features 128 --classes 32 --train-fraction 0.1 \
  > "$OUT/graphgen.txt" 2> "$OUT/graphgen.err" || { tail "$OUT/graphgen.err"; exit 1; }
tail -2 "$OUT/graphgen.txt"; grep -E "Elapsed|Maximum resident" "$OUT/graphgen.err"
for p in device zero-copy host-gather; do
  rm -f "$OUT/loom-$p.jsonl"
  /tmp/sage-$p --graph $G --steps "${STEPS:-60}" --log-json "$OUT/loom-$p.jsonl" > "$OUT/loom-$p.txt" 2>&1 ||
    { echo "sage $p failed"; tail -3 "$OUT/loom-$p.txt"; }
  tail -2 "$OUT/loom-$p.txt"
done
# The device step split by --trace: GPU time of the step (events) and the rest.
/tmp/sage-device --graph $G --steps 30 --trace "$OUT/trace.json" > /dev/null 2>&1 &&
python3 - "$OUT/trace.json" <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))["traceEvents"]
by = {}
for e in ev:
    if e.get("ph") == "X":
        by.setdefault(e["name"], []).append(e["dur"])
for k, v in by.items():
    v = v[10:] or v
    print(f"device placement, GPU span {k}: {sum(v) / len(v) / 1e3:.3f} ms (mean of {len(v)})")
PY
rm -f "$OUT/trace.json"
python3 bench/graph_pyg.py --graph $G --steps 50 --warmup 10 > "$OUT/pyg.jsonl" 2> "$OUT/pyg.err" ||
  { echo "pyg failed"; tail -5 "$OUT/pyg.err"; }
python3 bench/graph_table.py "$OUT" "$C/karate-cpu-losses.txt"
