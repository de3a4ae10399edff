#!/usr/bin/env bash
# On the 4-GPU host, after bench/gen-offload-4gpu.sh (sources in
# .carry/off4). Prints a table last.
#   PART=small: loom-calibrate of the host (--links gpu=4,
#               --gpus-per-host=4: $OUT/h100x4.json), then GPT-2 124M with
#               ZeRO 1-3 on 4 GPUs, without offload and with cpu and
#               static:0.5, 20 steps on random tokens: losses against the
#               on-device ones and step times; and bench/fsdp2_offload.py on
#               GPT-2 124M (the peer's script, checked small first).
#   PART=big:   the 20B GPT-style model with ZeRO-3 on 4 GPUs, offload cpu
#               and interleaved (STEPS steps each, the median after 2), then
#               PyTorch FSDP2 with CPUOffloadPolicy on the same model and
#               batch; beside each Loom row its prediction (made before the
#               run: .carry/off4/big-*.predicted.txt).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 MASTER_ADDR=127.0.0.1
# Four ranks share the host's cores: each rank's OpenMP (CPU Adam, the
# initialisation) gets its quarter.
# (nproc itself answers OMP_NUM_THREADS when it is set: ask without it.)
CORES=$(env -u OMP_NUM_THREADS nproc)
export OMP_NUM_THREADS=$(( CORES / 4 ))
source bench/gpu-runtime.sh
build_runtime loomrt_shared -DLOOMRT_NCCL_ROOT="$(nccl_root)" -DCMAKE_CUDA_ARCHITECTURES=90
source bench/launch.sh
C=.carry/off4
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1
echo "host: $CORES cores ($OMP_NUM_THREADS threads a rank), $(free -g | awk '/Mem:/ {print $2}') GiB"
case "${PART:-small}" in
small)
  ninja -C build-bench loom-calibrate > "$OUT/ninja-calibrate.log" 2>&1 || tail -5 "$OUT/ninja-calibrate.log"
  CAL=$(find build-bench -name loom-calibrate -type f -perm -u+x | head -1)
  for f in "$C"/small-*.cpp; do
    b=$(basename "$f" .cpp); link_binary "$f" "/tmp/$b" -O1 2> "$OUT/$b.compile.log" || echo "compiling $b failed" &
  done
  # The links first, by all four ranks; then rank 0 measures the host with
  # every core.
  OMP_NUM_THREADS=$CORES launch 4 "$OUT/calibrate" "$CAL" --links gpu=4 --gpus-per-host=4 \
    -o "$OUT/h100x4.json" || { echo "calibrate failed"; tail -5 "$OUT/calibrate.0"; }
  cat "$OUT/calibrate.0" | tail -40
  wait
  python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 50304, 4_000_000).astype(np.uint16).tofile('/tmp/tok.bin')"
  for z in 1 2 3; do for o in none cpu static0.5; do
    run_logged 4 "small-z$z-$o" "/tmp/small-z$z-$o" --data /tmp/tok.bin --steps 20
  done; done
  timeout 300 python3 -m torch.distributed.run --nproc-per-node 4 bench/fsdp2_offload.py \
    --layers 12 --width 768 --heads 12 --vocab 50304 --batch 4 --steps 6 > "$OUT/small-fsdp2.txt" 2>&1 ||
    { echo "fsdp2 small failed"; tail -5 "$OUT/small-fsdp2.txt"; }
  python3 - "$OUT" <<'PY'
import sys
sys.path.insert(0, "bench")
from jsonlog import loss_table
out = sys.argv[1]
loss_table(out, ["ZeRO", "offload"], [((z, o), f"small-z{z}-{o}", f"small-z{z}-none")
                                      for z in (1, 2, 3) for o in ("none", "cpu", "static0.5")])
print("fsdp2 (GPT-2 124M, CPUOffloadPolicy):", open(f"{out}/small-fsdp2.txt").read().strip().splitlines()[-1:])
PY
  ;;
big)
  STEPS=${STEPS:-5}
  for o in ${MODES:-cpu interleaved interleaved80}; do
    { gunzip -c "$C/big-$o.cpp.gz" > "/tmp/big-$o.cpp" &&
      link_binary "/tmp/big-$o.cpp" "/tmp/big-$o" -O1 2> "$OUT/big-$o.compile.log" ||
      echo "compiling big-$o failed"; } &
  done
  wait
  python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 50304, 4_000_000).astype(np.uint16).tofile('/tmp/tok.bin')"
  for o in ${MODES:-cpu interleaved interleaved80}; do
    start=$(date +%s)
    run_logged 4 "big-$o" "/tmp/big-$o" --data /tmp/tok.bin --steps "$STEPS"
    echo "big-$o: $(( $(date +%s) - start )) s with start-up; $(grep -h -i "memory\|error" "$OUT/big-$o.0" | head -3 | tr '\n' ' ')"
  done
  [ -n "${NO_TORCH:-}" ] || timeout ${TORCH_TIMEOUT:-420} python3 -m torch.distributed.run --nproc-per-node 4 \
    bench/fsdp2_offload.py --layers 44 --width 6144 --heads 48 --vocab 50304 --batch 1 --steps 4 \
    > "$OUT/big-fsdp2.txt" 2>&1 || { echo "fsdp2 big failed"; tail -5 "$OUT/big-fsdp2.txt"; }
  python3 - "$OUT" "$C" <<'PY'
import json, os, re, statistics, sys
out, c = sys.argv[1], sys.argv[2]
rows = {}
for o in ("cpu", "interleaved", "interleaved80"):
    if not os.path.exists(f"{out}/big-{o}.jsonl"):
        continue
    pred = open(f"{c}/big-{o}.predicted.txt").read()
    p = re.search(r"predicted step on .*?: ([0-9.]+) s \(last gradient at ([0-9.]+) s, update ([0-9.]+) s\); device memory ([0-9.]+) GiB", pred)
    try:
        r = [json.loads(l) for l in open(f"{out}/big-{o}.jsonl")][2:]
        ms = statistics.median(x["step_ms"] for x in r) / 1000
    except Exception:
        ms = None
    rows[o] = (ms, float(p[1]) if p else None, float(p[4]) if p else None)
t = None
try:
    t = json.loads([l for l in open(f"{out}/big-fsdp2.txt") if l.startswith("{")][-1])
except Exception:
    pass
print("| run (20B GPT, ZeRO-3, 4 GPUs, 1 x 1024 a rank) | step | predicted | pred/meas | vs Loom cpu | vs FSDP2 |")
print("|---|---|---|---|---|---|")
for o, (ms, pr, gib) in rows.items():
    f = lambda x: f"{x:.3f} s" if x else "failed"
    vs = f"{rows['cpu'][0] / ms:.2f}x" if ms and rows.get("cpu", (None,))[0] else ""
    vt = f"{t['step_s'] / ms:.2f}x" if ms and t else ""
    ratio = f"{pr / ms:.2f}" if ms and pr else ""
    print(f"| Loom {o} | {f(ms)} | {f(pr)} ({gib} GiB) | {ratio} | {vs} | {vt} |")
print(f"| PyTorch FSDP2 + CPUOffloadPolicy | {t['step_s']:.3f} s |  |  |  |  |" if t else "| FSDP2 | failed |")
if t:
    print("fsdp2:", json.dumps(t))
PY
  ;;
esac
