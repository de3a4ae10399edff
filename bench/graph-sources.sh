#!/usr/bin/env bash
# On the development machine (loomc): writes the CUDA programs and
# predictions bench/run-graph-gpu.sh runs into .carry/graph/.
set -euo pipefail
cd "$(dirname "$0")/.."
C=.carry/graph
L=${LOOMC:-build/bin/loomc}
mkdir -p "$C"
SAGE="sage:nodes=${GRAPH_NODES:-20000000},in=128,hidden=256,classes=32,batch=1024,fanout=15-10"
echo "{" > "$C/predictions.json"
for p in device zero-copy host-gather; do
  "$L" --model sage:nodes=34,in=8,hidden=16,classes=2,batch=8,fanout=3-2 --target=cuda \
    --graph-features=$p --compile-to=cpp -o "$C/karate-$p.cpp" > /dev/null
  "$L" --model "$SAGE" --target=cuda --hardware=h100 --graph-features=$p --lr=3e-3 \
    --compile-to=cpp --timeline="$C/timeline-$p.json" -o "$C/sage-$p.cpp"
  python3 -c "import json,sys; print('  \"$p\": %.4f,' % (json.load(open('$C/timeline-$p.json'))['loom_prediction']['step_s'] * 1e3))" >> "$C/predictions.json"
done
echo '  "unit": "ms"}' >> "$C/predictions.json"
# Two GPUs of one host sharing one pinned table (zero-copy), ZeRO-0 data
# parallelism: the global batch 2048, 1024 seeds a rank (the one-GPU runs'
# batch), and the karate check of the same program shape.
"$L" --model "${SAGE/batch=1024/batch=2048}" --target=cuda --hardware=h100 --graph-features=zero-copy \
  --lr=3e-3 --topology=gpu=2 --compile-to=cpp -o "$C/sage2-zero-copy.cpp" > /dev/null
"$L" --model sage:nodes=34,in=8,hidden=16,classes=2,batch=8,fanout=3-2 --target=cuda \
  --graph-features=zero-copy --topology=gpu=2 --compile-to=cpp -o "$C/karate2-zero-copy.cpp" > /dev/null
# The karate club (networkx) and the CPU backend's losses on it.
/usr/bin/python3 - "$C" <<'PY'
import json, os, subprocess, sys
import networkx as nx, numpy as np
c = sys.argv[1]
G = nx.karate_club_graph()
d = os.path.join(c, "karate")
os.makedirs(d, exist_ok=True)
indptr, indices = [0], []
for v in range(34):
    indices += sorted(G.neighbors(v)); indptr.append(len(indices))
np.save(f"{d}/indptr.npy", np.array(indptr, np.int64))
np.save(f"{d}/indices.npy", np.array(indices, np.int64))
np.save(f"{d}/features.npy", np.random.default_rng(0).standard_normal((34, 8)).astype(np.float32))
np.save(f"{d}/labels.npy", np.array([int(G.nodes[v]["club"] != "Mr. Hi") for v in range(34)], np.int64))
PY
: > "$C/karate-cpu-losses.txt"
for p in device zero-copy host-gather; do
  "$L" --model sage:nodes=34,in=8,hidden=16,classes=2,batch=8,fanout=3-2 --graph-features=$p \
    -o "/tmp/karate-cpu-$p" > /dev/null
  rm -f "/tmp/karate-cpu-$p.jsonl"
  "/tmp/karate-cpu-$p" --graph "$C/karate" --steps 10 --log-json "/tmp/karate-cpu-$p.jsonl" > /dev/null
  echo "$p $(python3 -c "import json; print(json.dumps([json.loads(l)['loss'] for l in open('/tmp/karate-cpu-$p.jsonl')]))")" >> "$C/karate-cpu-losses.txt"
done
"$L" --model sage:nodes=34,in=8,hidden=16,classes=2,batch=8,fanout=3-2 --graph-features=zero-copy \
  --topology=gpu=2 -o /tmp/karate-cpu-2 > /dev/null
rm -f /tmp/karate-cpu-2.jsonl
mpirun --allow-run-as-root --oversubscribe -np 2 /tmp/karate-cpu-2 --graph "$C/karate" --steps 10 \
  --log-json /tmp/karate-cpu-2.jsonl > /dev/null
echo "$(python3 -c "import json; print(json.dumps([json.loads(l)['loss'] for l in open('/tmp/karate-cpu-2.jsonl')]))")" \
  > "$C/karate2-cpu-losses.txt"
cat "$C/predictions.json"
