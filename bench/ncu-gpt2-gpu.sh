#!/usr/bin/env bash
# On a GPU host (Firecracker kinds, where ncu reads the counters): Nsight
# Compute on GPT-2 124M's bf16 step (vocab 50304, batch 16 x 1024), one
# call of each of the kernels outside the GEMMs that take the most time
# (bench/profile-gpt2-gpu.sh's table), in the step's second iteration: how
# busy the DRAM, the SMs and the tensor pipes are, and the occupancy, to
# say what bounds each (issue 22's "where the remaining time goes").
#   here:  loomc --model gpt:layers=12,d_model=768,heads=12,vocab=50304,seq=1024,batch=16 \
#            --target=cuda --precision=bf16 --compile-to=cpp -o .carry/profile/gpt2_bf16.cpp
#   there: bench/ncu-gpt2-gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/ncu}; mkdir -p "$OUT"
source bench/gpu-runtime.sh
build_runtime
link_binary .carry/profile/gpt2_bf16.cpp /tmp/gpt2_bf16 -O1 || { echo "link failed"; exit 1; }
write_tokens 50257 /tmp/tok50k.bin
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "no ncu"; exit 1; }
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
M=$M,sm__throughput.avg.pct_of_peak_sustained_elapsed
M=$M,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread
# Each kernel's first call in step 2 (the kernels each run once or more a
# step; --launch-skip passes step 1's calls of that kernel).
for k in flashForward flashBackwardKV flashBackwardQ layerNormGradWarpKernel unaryWordKernel \
         unaryGradWordKernel crossEntropyGradKernel copyStridedKernel reducePartialKernel adamKernel; do
  skip=$(case $k in flashForward|flashBackwardKV|flashBackwardQ|unaryWordKernel|unaryGradWordKernel) echo 12;;
         layerNormGradWarpKernel) echo 25;; crossEntropyGradKernel) echo 1;;
         copyStridedKernel) echo 96;; reducePartialKernel) echo 48;; adamKernel) echo 148;; esac)
  "$NCU" --clock-control none --csv --metrics "$M" -k "regex:$k" --launch-skip "$skip" \
    --launch-count 1 /tmp/gpt2_bf16 --data /tmp/tok50k.bin --steps 2 --seed 1 \
    > "$OUT/$k.csv" 2> "$OUT/$k.err" || echo "ncu on $k failed: $(tail -2 "$OUT/$k.err")"
done
python3 - "$OUT" <<'PY'
import csv, glob, os, sys
short = {"gpu__time_duration.sum": "us", "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM %",
         "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM %",
         "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor %",
         "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy %",
         "launch__registers_per_thread": "regs"}
cols = list(short.values())
print("| kernel | " + " | ".join(cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.csv"))):
    lines = [l for l in open(f) if l.startswith('"')]
    vals = {}
    for r in csv.DictReader(lines):
        if r.get("Metric Name") in short:
            v = r["Metric Value"].replace(",", "")
            if r["Metric Name"] == "gpu__time_duration.sum":
                v = "%.1f" % (float(v) / (1000 if r.get("Metric Unit") in ("ns", "nsecond") else 1))
            vals[short[r["Metric Name"]]] = v
    name = os.path.basename(f)[:-4]
    print(f"| {name} | " + " | ".join(vals.get(c, "?") for c in cols) + " |")
PY
