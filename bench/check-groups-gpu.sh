#!/usr/bin/env bash
# On a host with four GPUs: collectives over groups smaller than the world
# on NCCL (sources from bench/gen-groups-gpu.sh). Streaming DiLoCo with 2
# replicas of 2 GPUs against 2 replicas of 1 GPU (same global batch), and
# hpZ against flat ZeRO-3 over node=2,gpu=2. Prints the losses of each
# pair, their largest difference, and the bytes by group, last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
GEN=.carry/groups
export NCCL_NVLS_ENABLE=0 MASTER_ADDR=127.0.0.1
source bench/gpu-runtime.sh
build_runtime loomrt_shared -DLOOMRT_NCCL_ROOT="$(nccl_root)" -DCMAKE_CUDA_ARCHITECTURES=90
for f in dl21 dl22 z3 hpz; do
  link_binary "$GEN/$f.cpp" "/tmp/g_$f" 2> "$OUT/$f.compile.log" || echo "compiling $f failed" &
done
wait
source bench/launch.sh
for run in dl21:2 dl22:4 z3:4 hpz:4; do
  run_logged "${run#*:}" "${run%:*}" "/tmp/g_${run%:*}" --data "$GEN/gpl3.bin" --steps 10
done
python3 - "$OUT" <<'PY'
import sys
sys.path.insert(0, "bench")
import jsonlog
out = sys.argv[1]
log = lambda name: jsonlog.steps(out, name)
for a, b in (("dl21", "dl22"), ("z3", "hpz")):
    x, y = log(a), log(b)
    d = max((abs(p["loss"] - q["loss"]) for p, q in zip(x, y)), default=float("nan"))
    fmt = lambda rows: " ".join("%.4f" % r["loss"] for r in rows)
    print(f"{a}: {fmt(x)}")
    print(f"{b}: {fmt(y)}")
    print(f"  largest difference {d:.2e}; bytes a step {x[-1].get('comm_bytes') if x else None} vs "
          f"{y[-1].get('comm_bytes') if y else None}, by group {y[-1].get('comm_bytes_by_group') if y else None}")
PY
