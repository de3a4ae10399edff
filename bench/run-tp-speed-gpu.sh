#!/usr/bin/env bash
# On nvidia-h200-x2, after bench/gen-tp-speed.sh: issue 47's speed row in
# one call. Loom's Llama 6.7B with --tensor-parallel=2 --sequence-parallel
# (one rank a GPU over NCCL), then PyTorch's DTensor tensor parallelism
# with sequence parallelism and loss_parallel (bench/dtensor_tp.py) on the
# same model, batch (8 x 1024 a step) and GPUs. A table last: tokens/s,
# the ratio, Loom's prediction against its measured step, MFU.
#   OUT=/tmp/o bash bench/run-tp-speed-gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
export MASTER_ADDR=127.0.0.1
source bench/gpu-runtime.sh
source bench/launch.sh
C=.carry/tpspeed
[ -n "${RT:-}" ] || build_runtime loomrt_shared -DLOOMRT_NCCL_ROOT="$(nccl_root)" \
  -DCMAKE_CUDA_ARCHITECTURES=90
gunzip -c "$C/l67-tp2sp.cpp.gz" > /tmp/l67-tp2sp.cpp
link_binary /tmp/l67-tp2sp.cpp /tmp/l67-tp2sp -O1 2> "$OUT/compile.log" || echo "compiling failed"
write_tokens 32000 /tmp/tok32k.bin 2_000_000
run_logged 2 loom timeout 300 /tmp/l67-tp2sp --data /tmp/tok32k.bin --steps 12 --seed 1
launch 2 "$OUT/dtensor" timeout 300 python3 bench/dtensor_tp.py --layers 32 --d 4096 \
  --heads 32 --ffn 11008 --vocab 32000 --seq 1024 --batch 8 --steps 12 ||
  { echo "dtensor failed:"; tail -n 5 "$OUT/dtensor.0"; }
python3 - "$OUT" "$C/l67-tp2sp.predicted.txt" <<'PY'
import json, re, statistics, sys
out, predf = sys.argv[1], sys.argv[2]
pred = float(re.search(r"predicted step on .*?: ([0-9.]+) s", open(predf).read())[1])
params, tokens = 6738415616, 8 * 1024
try:
    log = [json.loads(l) for l in open(f"{out}/loom.jsonl") if '"loss"' in l]
    loom = statistics.median(s["step_ms"] for s in log[3:]) / 1000
except (OSError, ValueError, statistics.StatisticsError):
    loom = None
try:
    peer = json.loads([l for l in open(f"{out}/dtensor.0") if l.startswith("{")][-1])
except (OSError, IndexError):
    peer = None
mfu = lambda s: 6 * params * tokens / s / (2 * 989e12)
print("| run | step s | tokens/s | MFU | loss (last) |")
print("|---|---|---|---|---|")
if loom:
    print(f"| Loom --tensor-parallel=2 --sequence-parallel | {loom:.3f} | {tokens / loom:.0f} | "
          f"{mfu(loom):.1%} | {log[-1]['loss']:.4f} |")
if peer:
    print(f"| {peer['impl']} | {peer['step_s']:.3f} | {peer['tokens_per_s']:.0f} | "
          f"{mfu(peer['step_s']):.1%} | {peer['loss']:.4f} |")
if loom and peer:
    print(f"Loom / DTensor: {peer['step_s'] / loom:.2f}x tokens/s (bar 1.2x)")
if loom:
    print(f"Loom predicted {pred:.3f} s, measured {loom:.3f} s: pred/meas {pred / loom:.2f} (bar: within 5%)")
PY
