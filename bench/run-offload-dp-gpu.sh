#!/usr/bin/env bash
# On a host with two GPUs, after bench/gen-offload-dp-gpu.sh: GPT-2 124M
# (batch 16 x 1024, 8 a rank) with ZeRO-3 over NCCL, with and without
# --optimizer-offload=cpu (each rank's shard of every bucket and its Adam
# state in pinned memory, updated by the CPU; cpuoff: without the host
# thread), fp32 and bf16, 20 steps on
# random tokens: the offloaded losses against the on-device ones, and the
# step times. Prints a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 MASTER_ADDR=127.0.0.1
source bench/gpu-runtime.sh
build_runtime loomrt_shared -DLOOMRT_NCCL_ROOT="$(nccl_root)" -DCMAKE_CUDA_ARCHITECTURES=90
source bench/launch.sh
C=.carry/offdp
for f in "$C"/z3-*.cpp; do
  b=$(basename "$f" .cpp); link_binary "$f" "/tmp/$b" -O1 2> "$OUT/$b.compile.log" || echo "compiling $b failed" &
done
wait
python3 -c "import numpy as np; np.random.default_rng(0).integers(0, 50304, 4_000_000).astype(np.uint16).tofile('/tmp/tok.bin')"
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
for prec in fp32 bf16; do for o in none cpu cpuoff; do
  run_logged 2 "z3-$prec-$o" "/tmp/z3-$prec-$o" --data /tmp/tok.bin --steps 20
done; done
python3 - "$OUT" <<'PY'
import sys
sys.path.insert(0, "bench")
from jsonlog import loss_table
loss_table(sys.argv[1], ["precision", "offload"],
           [((p, o), f"z3-{p}-{o}", f"z3-{p}-none") for p in ("fp32", "bf16")
            for o in ("none", "cpu", "cpuoff")])
PY
