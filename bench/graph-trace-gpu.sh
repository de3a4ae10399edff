#!/usr/bin/env bash
# On a GPU host, after bench/graph-sources.sh: Loom's GraphSAGE (each
# placement) on the R-MAT graph of bench/run-graph-gpu.sh, and one traced
# run (--trace) whose train_step spans (GPU events) split a step into GPU
# time and the host's share.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
source bench/gpu-runtime.sh
build_runtime loomrt_shared
ninja -C build-bench loom-graphgen > /dev/null 2>&1
C=.carry/graph
for p in device zero-copy host-gather; do link_binary "$C/sage-$p.cpp" /tmp/sage-$p -O1 || exit 1; done
build-bench/bin/loom-graphgen /tmp/rmat --nodes 20000000 --edges 200000000 --features 128 --classes 32 --train-fraction 0.1 > /dev/null
for p in device zero-copy host-gather; do
  rm -f $OUT/loom-$p.jsonl
  /tmp/sage-$p --graph /tmp/rmat --steps 60 --log-json $OUT/loom-$p.jsonl > $OUT/loom-$p.txt 2>&1 || tail -3 $OUT/loom-$p.txt
  python3 -c "import json; r=[json.loads(l) for l in open('$OUT/loom-$p.jsonl')][10:]; print('$p step_ms %.2f data_wait_ms %.2f' % (sum(x['step_ms'] for x in r)/len(r), sum(x['data_wait_ms'] for x in r)/len(r)))"
done
/tmp/sage-device --graph /tmp/rmat --steps 30 --trace $OUT/trace.json > /dev/null 2>&1
python3 - $OUT/trace.json <<'PY'
import json, sys
ev = json.load(open(sys.argv[1]))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
by = {}
for e in ev:
    if e.get("ph") == "X":
        by.setdefault(e["name"], []).append(e["dur"])
for k, v in by.items():
    v = v[10:] or v
    print(f"trace {k}: {sum(v) / len(v) / 1e3:.3f} ms mean over {len(v)}")
PY
