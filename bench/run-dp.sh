#!/usr/bin/env bash
# On a host with two GPUs joined by NVLink: data parallelism over NCCL.
#   1. comm_check: every collective through loomrt on 2 GPUs;
#   2. all-reduce / reduce-scatter bus bandwidth through loomrt beside
#      PyTorch's NCCL backend (bench/comm_bench, bench/comm_torch.py);
#   3. a small GPT (bf16) on 2 GPUs at ZeRO 0 and 3 against one GPU with the
#      global batch; GPT-2 124M step time at ZeRO 0 vs 3.
# Ranks are started torchrun-style (RANK, WORLD_SIZE, LOCAL_RANK,
# MASTER_ADDR, MASTER_PORT), one process per GPU. Sources come from
# bench/gen-gpu-sources.sh (carried in .carry/gen).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
GEN=.carry/gen
export NCCL_NVLS_ENABLE=0 MASTER_ADDR=127.0.0.1
NCCL_ROOT=$(python3 -c "import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])")
echo "NCCL from $NCCL_ROOT: $(ls "$NCCL_ROOT"/include/nccl.h "$NCCL_ROOT"/lib/libnccl.so* 2>&1 | tr "\n" " ")"
cmake -G Ninja -S bench -B build-bench -DLOOMRT_NCCL_ROOT="$NCCL_ROOT" > "$OUT/cmake.log" 2>&1 &&
  ninja -C build-bench > "$OUT/ninja.log" 2>&1 || { echo "build failed"; tail -20 "$OUT/ninja.log"; exit 1; }
grep "collectives over" "$OUT/cmake.log"
RT="$PWD/build-bench/runtime"
for f in dp_small_1gpu_cuda dp_small_z0_cuda dp_small_z3_cuda dp_gpt2_z0_cuda dp_gpt2_z3_cuda \
         gpt2_124m_b16_bf16_cuda gpt2_124m_b8_bf16_cuda; do
  [ -f "$GEN/$f.cpp" ] || continue
  { c++ -O2 -std=c++17 -I runtime/include "$GEN/$f.cpp" -o "/tmp/$f" -L"$RT" -lloomrt \
      -Wl,-rpath,"$RT" 2> "$OUT/$f.compile.log" || echo "compiling $f failed"; } &
done
wait

source bench/launch.sh

echo "== comm_check on 2 GPUs (NCCL through loomrt)"
launch 2 "$OUT/comm_check" build-bench/runtime/tests/comm_check cuda; cat "$OUT/comm_check".{0,1}

echo "== bus bandwidth, 2 GPUs"
launch 2 "$OUT/comm_bench" build-bench/bin/comm_bench cuda --iters 20 --max-mib 1024
torchrun --nproc_per_node=2 --master_port=$((port + 50)) bench/comm_torch.py --iters 20 \
  --max-mib 1024 > "$OUT/comm_torch.0" 2> "$OUT/comm_torch.err"
python3 - "$OUT/comm_bench.0" "$OUT/comm_torch.0" <<'PY'
import json, sys
ours = {(r["op"], r["dtype"], r["bytes"]): r for r in map(json.loads, open(sys.argv[1])) }
theirs = {(r["op"], r["dtype"], r["bytes"]): r for r in map(json.loads, open(sys.argv[2])) }
print(f"  {'op':15} {'dtype':5} {'MiB':>6} {'loomrt GB/s':>12} {'torch GB/s':>11} {'ratio':>6}")
for k in sorted(ours):
    o, t = ours[k], theirs.get(k)
    if k[2] < 16 << 20: continue
    print(f"  {k[0]:15} {k[1]:5} {k[2] >> 20:6d} {o['busbw_gbs']:12.1f} "
          f"{t['busbw_gbs'] if t else float('nan'):11.1f} {o['busbw_gbs'] / t['busbw_gbs'] if t else float('nan'):6.2f}")
PY

echo "== small GPT (bf16): 2 GPUs vs one GPU with the global batch (20 steps)"
python3 examples/make_tokens.py /usr/share/common-licenses/GPL-3 /tmp/gpl3.bin > /dev/null 2>&1 ||
  cp "$GEN/gpl3.bin" /tmp/gpl3.bin
/tmp/dp_small_1gpu_cuda --data "$GEN/gpl3.bin" --steps 20 --log-json "$OUT/dp_1gpu.jsonl" > "$OUT/dp_1gpu.txt" 2>&1
for z in 0 3; do
  run_logged 2 dp_z$z /tmp/dp_small_z${z}_cuda --data "$GEN/gpl3.bin" --steps 20
done
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
ref = [json.loads(l)["loss"] for l in open(f"{out}/dp_1gpu.jsonl")]
for z in (0, 3):
    got = [json.loads(l)["loss"] for l in open(f"{out}/dp_z{z}.jsonl")]
    err = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
    print(f"  zero-stage {z}, 2 GPUs: losses {got[0]:.5f} -> {got[-1]:.5f}; max relative "
          f"difference vs 1 GPU: {err:.2e} over {len(got)} steps (bf16 tolerance 1e-2)")
PY

echo "== GPT-2 124M bf16, global batch 16 x 1024: tokens/s"
source bench/gpu-runtime.sh # write_tokens
/tmp/gpt2_124m_b16_bf16_cuda --data /tmp/tok50k.bin --steps 8 --log-json "$OUT/g1.jsonl" > "$OUT/g1.txt" 2>&1 ||
  { write_tokens 50257 "/tmp/tok50k.bin";
    /tmp/gpt2_124m_b16_bf16_cuda --data /tmp/tok50k.bin --steps 8 --log-json "$OUT/g1.jsonl" > "$OUT/g1.txt" 2>&1; }
/tmp/gpt2_124m_b8_bf16_cuda --data /tmp/tok50k.bin --steps 8 --log-json "$OUT/g1b8.jsonl" > "$OUT/g1b8.txt" 2>&1
for z in 0 3; do
  run_logged 2 g2_z$z /tmp/dp_gpt2_z${z}_cuda --data /tmp/tok50k.bin --steps 8
done
python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
def row(name, f, extra=""):
    try:
        r = [json.loads(l) for l in open(f)][2:]
        mem = open(f.replace(".jsonl", ".txt") if "/g1" in f else f.replace(".jsonl", ".0")).read().strip().splitlines()[-1]
        print(f"  {name:28} {statistics.median(x['step_ms'] for x in r):8.1f} ms/step "
              f"{statistics.median(x['tokens_per_s'] for x in r):10.0f} tokens/s  ({mem})")
    except Exception as e:
        print(f"  {name:28} failed: {e}")
row("1 GPU, batch 16", f"{out}/g1.jsonl")
row("1 GPU, batch 8", f"{out}/g1b8.jsonl")
row("2 GPUs, ZeRO 0, 8 per GPU", f"{out}/g2_z0.jsonl")
row("2 GPUs, ZeRO 3, 8 per GPU", f"{out}/g2_z3.jsonl")
PY
