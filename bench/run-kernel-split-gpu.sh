#!/usr/bin/env bash
# On nvidia-h200-x2, after bench/gen-kernel-split-gpu.sh (.carry/ksplit)
# and bench/carry-deps.sh: the Llama 6.7B and the GPT 6.25B at ZeRO-0 on 2
# H200s, 8 steps each with CUPTI's kernel times on every rank
# (bench/kernel_times.cpp), then rank 0's kernel time by kind beside the
# prediction (bench/kernel_split.py) and the measured step beside loomc's.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"; mkdir -p "$OUT"
C=.carry/ksplit
export MASTER_ADDR=127.0.0.1
source bench/gpu-runtime.sh
source bench/launch.sh
for m in l67 g625; do compile_gz "$C/$m.cpp.gz" "/tmp/$m" & done
build_runtime loomrt_shared -DCMAKE_CUDA_ARCHITECTURES=90
build_kernel_times
wait
write_tokens 50304 "$OUT/tok.bin"
STEPS=8
for m in l67 g625; do
  link_gz "$C/$m.cpp.gz" "/tmp/$m"
  rm -f "$OUT/$m.jsonl"
  launch 2 "$OUT/$m" bash -c 'export LD_PRELOAD=/tmp/libkt.so LOOM_KERNEL_TIMES=$0.kt.$RANK.csv; \
    exec /tmp/$1 --data $2 --steps $3 --log-json $0.jsonl' "$OUT/$m" "$m" "$OUT/tok.bin" "$STEPS" ||
    { echo "$m failed:"; tail -n 3 "$OUT/$m".{0,1}; }
done
for m in l67 g625; do
  python3 - "$OUT/$m.jsonl" "$C/$m.pred.json" "$m" <<'PY'
import json, statistics, sys
s = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
meas = statistics.median(x["step_ms"] for x in s if x["step"] >= 3)
pred = json.load(open(sys.argv[2]))["step_ms"]
print(f"\n{sys.argv[3]}: step measured {meas:.1f} ms (median of steps 3-8), predicted {pred:.1f} ms "
      f"({pred / meas:.3f}); kernels of rank 0 a step (all {len(s)} steps: the first "
      f"ones' warm-up included):")
PY
  python3 bench/kernel_split.py compare "$C/$m.pred.json" "$OUT/$m.kt.0.csv" "$STEPS"
done
