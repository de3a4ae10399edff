#!/usr/bin/env bash
# On a host with two GPUs: 1-bit Adam's frozen step on NVLink against
# ZeRO-0 for several bucket sizes (--onebit-bucket-size), GPT-2 124M bf16,
# global batch 16 x 1024. Sources from bench/gen-onebit-gpu.sh
# (.carry/onebit). Prints the median step after the freeze (steps 6-11) and
# its ratio to ZeRO-0's, last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
GEN=.carry/onebit
export NCCL_NVLS_ENABLE=0 MASTER_ADDR=127.0.0.1
source bench/gpu-runtime.sh
build_runtime loomrt_shared -DLOOMRT_NCCL_ROOT="$(nccl_root)" -DCMAKE_CUDA_ARCHITECTURES=90
runs=(z0 ob obb4 obb obb64 obb256)
for f in "${runs[@]}"; do
  link_binary "$GEN/$f.cpp" "/tmp/ob_$f" 2> "$OUT/$f.compile.log" || echo "compiling $f failed" &
done
wait
source bench/launch.sh
for f in "${runs[@]}"; do
  run_logged 2 $f /tmp/ob_$f --data "$GEN/gpl3.bin" --steps 12
done
python3 - "$OUT" "${runs[@]}" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], sys.argv[2:]
names = {"z0": "ZeRO-0", "ob": "1-bit, per parameter", "obb4": "1-bit, 4M buckets",
         "obb": "1-bit, 16M buckets", "obb64": "1-bit, 64M buckets",
         "obb256": "1-bit, one bucket"}
def frozen(f):
    try:
        r = [json.loads(l) for l in open(f"{out}/{f}.jsonl")]
    except OSError:
        return float("nan"), float("nan")
    return statistics.median(s["step_ms"] for s in r[6:]), r[-1]["loss"]
base, _ = frozen("z0")
print(f"{'run (NVLink)':24} {'step (6-11)':>12} {'vs ZeRO-0':>10} {'loss at 11':>11}")
for f in runs:
    t, loss = frozen(f)
    print(f"{names[f]:24} {t:9.1f} ms {base / t:9.3f}x {loss:11.4f}")
PY
