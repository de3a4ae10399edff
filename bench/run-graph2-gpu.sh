#!/usr/bin/env bash
# On a host with two GPUs, after bench/graph-sources.sh: two ranks share one
# pinned feature table (local rank 0 reads it into shared memory, both pin
# it and read it by zero-copy). The karate program on 2 GPUs against the 2
# CPU ranks' losses; then GraphSAGE on the R-MAT graph of run-graph-gpu.sh,
# one GPU (batch 1024) beside two (1024 a rank), seeds a second, and the
# host memory the table takes (one copy).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 MASTER_ADDR=127.0.0.1
source bench/gpu-runtime.sh
build_runtime loomrt_shared -DLOOMRT_NCCL_ROOT="$(nccl_root)" -DCMAKE_CUDA_ARCHITECTURES=90
ninja -C build-bench loom-graphgen > /dev/null 2>&1
source bench/launch.sh
C=.carry/graph
for b in karate2-zero-copy sage2-zero-copy sage-zero-copy; do link_binary "$C/$b.cpp" "/tmp/$b" -O1 || exit 1; done
nvidia-smi --query-gpu=name --format=csv,noheader
run_logged 2 karate2 /tmp/karate2-zero-copy --graph "$C/karate" --steps 10
python3 -c "
import json
gpu = [json.loads(l)['loss'] for l in open('$OUT/karate2.jsonl')]
cpu = json.loads(open('$C/karate2-cpu-losses.txt').read())
print('karate, 2 GPUs sharing the table: max rel. error vs 2 CPU ranks %.1e over %d steps' % (max(abs(a-b)/abs(b) for a, b in zip(gpu, cpu)), len(gpu)))"
grep -h "shared by" "$OUT"/karate2.0
build-bench/bin/loom-graphgen /tmp/rmat --nodes 20000000 --edges 200000000 --features 128 --classes 32 --train-fraction 0.1 > /dev/null
free -g | head -2
rm -f "$OUT/one.jsonl"
/tmp/sage-zero-copy --graph /tmp/rmat --steps 60 --log-json "$OUT/one.jsonl" > "$OUT/one.txt" 2>&1 || tail -3 "$OUT/one.txt"
( sleep 40; free -g | sed -n 2p | sed 's/^/during the 2-GPU run: /'; ls /dev/shm ) &
run_logged 2 two /tmp/sage2-zero-copy --graph /tmp/rmat --steps 60
wait
grep -h "shared by" "$OUT"/two.0; echo "left in /dev/shm: $(ls /dev/shm | grep -c loomrt)"
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def mean(name):
    r = [json.loads(l) for l in open(f"{out}/{name}.jsonl")][10:]
    return sum(x["step_ms"] + x.get("data_wait_ms", 0) for x in r) / len(r), r[-1]["loss"]
one, l1 = mean("one")
two, l2 = mean("two")
print("| run | step (wall) | seeds/s | last loss |")
print("|---|---|---|---|")
print(f"| 1 GPU, zero-copy, batch 1024 | {one:.2f} ms | {1024 / one * 1e3:.0f} | {l1:.3f} |")
print(f"| 2 GPUs, one shared zero-copy table, 1024 a rank | {two:.2f} ms | {2048 / two * 1e3:.0f} | {l2:.3f} |")
print(f"scaling: {1024 / one and (2048 / two) / (1024 / one):.2f}x the seeds/s of one GPU")
PY
