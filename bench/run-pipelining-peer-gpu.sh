#!/usr/bin/env bash
# On nvidia-h200-x2: the bar for issue 48's GPU row, PyTorch's own pipeline
# parallelism (bench/pipelining_torch.py) on the 6.7B Llama (32 layers, d
# 4096, ffn 11008, vocabulary 32000), P=2 GPUs, 8 micro-batches of one
# 1024-token sequence, each schedule torch.distributed.pipelining has for
# one or two stages a rank. A 4-layer model first (seconds; an API
# mismatch shows there). One JSON line a schedule.
#   OUT=/tmp/o SCHEDULES="1f1b zbv" bench/run-pipelining-peer-gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
export MASTER_ADDR=127.0.0.1
source bench/launch.sh
P="python3 bench/pipelining_torch.py"
launch 2 "$OUT/smoke" timeout 120 $P --layers 4 --d 256 --heads 4 --ffn 512 --vocab 512 \
  --seq 128 --micro-batches 4 --steps 3 --schedule 1f1b ||
  { echo "smoke failed:"; tail -n 20 "$OUT/smoke.0" "$OUT/smoke.1"; exit 1; }
grep -h '^{' "$OUT/smoke.0"
for s in ${SCHEDULES:-gpipe 1f1b interleaved-1f1b interleaved-zb zbv}; do
  launch 2 "$OUT/pp-$s" timeout "${TIMEOUT:-150}" $P --layers 32 --d 4096 --heads 32 \
    --ffn 11008 --vocab 32000 --micro-batches 8 --steps 8 --schedule "$s" ||
    { echo "$s failed:"; tail -n 5 "$OUT/pp-$s.0" "$OUT/pp-$s.1"; }
  grep -h '^{' "$OUT/pp-$s.0"
done
