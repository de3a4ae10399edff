set -uo pipefail
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
source bench/gpu-runtime.sh
build_runtime loomrt_shared
ninja -C build-bench loom-graphgen > /dev/null 2>&1
C=.carry/graph
for p in host-gather device; do link_binary "$C/karate-$p.cpp" /tmp/karate-$p -O1; link_binary "$C/sage-$p.cpp" /tmp/sage-$p -O1; done
rm -f $OUT/karate-host-gather.jsonl; /tmp/karate-host-gather --graph $C/karate --steps 10 --log-json $OUT/karate-host-gather.jsonl > /dev/null 2>&1 || echo karate-hg failed
python3 -c "import json; print('karate host-gather GPU', [round(json.loads(l)['loss'],6) for l in open('$OUT/karate-host-gather.jsonl')])"
grep host-gather $C/karate-cpu-losses.txt | cut -c1-120
build-bench/bin/loom-graphgen /tmp/rmat --nodes 20000000 --edges 200000000 --features 128 --classes 32 --train-fraction 0.1 > /dev/null
/tmp/sage-host-gather --graph /tmp/rmat --steps 60 --log-json $OUT/loom-host-gather.jsonl > $OUT/hg.txt 2>&1 || tail -3 $OUT/hg.txt
python3 -c "import json; r=[json.loads(l) for l in open('$OUT/loom-host-gather.jsonl')][10:]; print('host-gather step_ms %.2f wait %.2f' % (sum(x['step_ms'] for x in r)/len(r), sum(x['data_wait_ms'] for x in r)/len(r)))"
NSYS=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems*/bin/nsys 2>/dev/null | head -1)
echo "nsys: $NSYS"
if [ -n "$NSYS" ]; then
  $NSYS profile -o /tmp/prof --force-overwrite true -t cuda /tmp/sage-device --graph /tmp/rmat --steps 30 > /dev/null 2>&1
  $NSYS stats -r cuda_gpu_kern_sum,cuda_gpu_mem_time_sum,cuda_api_sum -f csv /tmp/prof.nsys-rep > $OUT/nsys.csv 2>/dev/null
  python3 - $OUT/nsys.csv <<'PY'
import sys, csv, io
text = open(sys.argv[1]).read()
for block in text.split("\n\n"):
    lines = [l for l in block.strip().splitlines() if l]
    if len(lines) < 2: continue
    rows = list(csv.reader(lines))
    hdr = rows[0]
    if "Total Time (ns)" not in hdr: continue
    ti, ni = hdr.index("Total Time (ns)"), hdr.index("Name") if "Name" in hdr else hdr.index("Operation")
    ci = hdr.index("Instances") if "Instances" in hdr else hdr.index("Num Calls") if "Num Calls" in hdr else None
    print("---", len(rows) - 1, "rows")
    for r in rows[1:12]:
        print(f"{int(float(r[ti]))/30/1e3:9.1f} us/step  {r[ci] if ci is not None else '':>6}  {r[ni][:90]}")
PY
fi
