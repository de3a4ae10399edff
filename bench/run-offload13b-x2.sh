#!/usr/bin/env bash
# On nvidia-h200-x2 (2 H200s, 32 cores), after bench/gen-offload13b-x2.sh
# (sources and predictions in .carry/off13, committed first): issue 44's
# two-GPU row. The 13B GPT-style model with ZeRO-3 over both GPUs, each
# binary held to 80 GiB a card (--device-memory=80 at compile time),
# --optimizer-offload=cpu and interleaved (STEPS steps, the median of steps
# 3 on), then PyTorch FSDP2 with CPUOffloadPolicy on the same model, batch
# and cap (bench/fsdp2_offload.py --device-memory 80). Each rank's OpenMP
# gets half the cores. Prints a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 MASTER_ADDR=127.0.0.1
CORES=$(env -u OMP_NUM_THREADS nproc)
export OMP_NUM_THREADS=$(( CORES / 2 ))
STEPS=${STEPS:-6}
source bench/gpu-runtime.sh
build_runtime loomrt_shared -DLOOMRT_NCCL_ROOT="$(nccl_root)" -DCMAKE_CUDA_ARCHITECTURES=90
source bench/launch.sh
C=.carry/off13
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | head -1
echo "host: $CORES cores ($OMP_NUM_THREADS threads a rank), $(free -g | awk '/Mem:/ {print $2}') GiB"
for o in cpu interleaved; do
  { gunzip -c "$C/x2-13b-$o.cpp.gz" > "/tmp/x2-13b-$o.cpp" &&
    link_binary "/tmp/x2-13b-$o.cpp" "/tmp/x2-13b-$o" -O1 2> "$OUT/x2-13b-$o.compile.log" ||
    echo "compiling $o failed"; } &
done
write_tokens 50304 /tmp/tok.bin 2_000_000
wait
for o in cpu interleaved; do
  start=$(date +%s)
  run_logged 2 "x2-13b-$o" timeout "${TIMEOUT:-170}" "/tmp/x2-13b-$o" --data /tmp/tok.bin --steps "$STEPS" --seed 1
  echo "x2-13b-$o: $(( $(date +%s) - start )) s with start-up"
done
[ -n "${NO_TORCH:-}" ] || timeout "${TORCH_TIMEOUT:-200}" python3 -m torch.distributed.run \
  --nproc-per-node 2 bench/fsdp2_offload.py --layers 40 --width 5120 --heads 40 --vocab 50304 \
  --batch 2 --steps 5 --device-memory 80 > "$OUT/x2-13b-fsdp2.txt" 2>&1 ||
  { echo "fsdp2 failed"; tail -5 "$OUT/x2-13b-fsdp2.txt"; }
python3 - "$OUT" "$C" <<'PY'
import json, os, re, statistics, sys
out, c = sys.argv[1], sys.argv[2]
rows, losses = {}, {}
for o in ("cpu", "interleaved"):
    pred = open(f"{c}/x2-13b-{o}.predicted.txt").read()
    p = float(re.search(r": ([0-9.]+) s \(last gradient", pred)[1])
    try:
        r = [json.loads(l) for l in open(f"{out}/x2-13b-{o}.jsonl")]
        r = [x for x in r if "event" not in x]
        ms = statistics.median(x["step_ms"] for x in r[2:]) / 1000
        losses[o] = [x["loss"] for x in r]
        used = max(x.get("card_used_mib", float("nan")) for x in r) / 1024
    except Exception:
        ms, used = None, float("nan")
    rows[o] = (ms, p, used)
t = None
try:
    t = json.loads([l for l in open(f"{out}/x2-13b-fsdp2.txt") if l.startswith("{")][-1])
except Exception:
    pass
params = 12.9e9  # 40 x 12 x 5120^2 + (50304 + 1024) x 5120, tied head
print("| 13B GPT, ZeRO-3, 2 GPUs at 80 GiB, 2 x 1024 a rank | step | predicted | pred/meas | card used GiB | MFU |")
print("|---|---|---|---|---|---|")
for o, (ms, p, used) in rows.items():
    mfu = f"{6 * params * 4096 / ms / (2 * 989e12) * 100:.1f}%" if ms else ""
    print(f"| Loom {o} | {f'{ms:.3f} s' if ms else 'failed'} | {p:.3f} s | "
          f"{f'{p / ms:.2f}' if ms else ''} | {used:.1f} | {mfu} |")
if t:
    print(f"| PyTorch FSDP2 + CPUOffloadPolicy | {t['step_s']:.3f} s | | | | "
          f"{6 * params * 4096 / t['step_s'] / (2 * 989e12) * 100:.1f}% |")
else:
    print("| PyTorch FSDP2 + CPUOffloadPolicy | failed | | | | |")
a, b = rows["cpu"][0], rows["interleaved"][0]
if a and b:
    print(f"interleaved vs cpu: {a / b:.2f}x; losses "
          f"{'identical at every step' if losses['cpu'] == losses['interleaved'] else 'DIFFER'}")
if b and t:
    print(f"Loom interleaved vs FSDP2: {t['step_s'] / b:.2f}x; fsdp2: {json.dumps(t)}")
PY
