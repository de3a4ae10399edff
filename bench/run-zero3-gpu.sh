#!/usr/bin/env bash
# On a host with two GPUs (nvidia-h200-x2): issue 43's ZeRO-3 runs, sources
# and predictions from bench/gen-zero3-gpu.sh (committed first), and PyTorch
# FSDP2 beside them in the same call (bench/fsdp2_llama.py: fully_shard per
# layer, bf16 parameters and compute, fp32 reduction, fused AdamW; --ac:
# activation checkpointing per layer). 10 steps each; Loom's mean step of
# steps 3-10 from its log, FSDP2's median of steps 3-9. Prints a table last:
# step, tokens/s, MFU (6 N tokens/s over 989 TFLOP/s a GPU), Loom / FSDP2,
# peak memory of rank 0 (Loom: the step arena + parameters and state it
# holds; FSDP2: what its allocator reserved), the last loss.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
GEN=.carry/zero3
export NCCL_NVLS_ENABLE=0 MASTER_ADDR=127.0.0.1
source bench/gpu-runtime.sh
build_runtime loomrt_shared -DLOOMRT_NCCL_ROOT="$(nccl_root)" -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DLOOM_GTEST_SOURCE_DIR="$PWD/.carry/googletest"
RUNS="${RUNS:-l7 l7-nopf l13 l13-full}"
for f in $RUNS; do
  link_binary "$GEN/$f.cpp" "/tmp/z3_$f" 2> "$OUT/$f.compile.log" || echo "compiling $f failed" &
done
write_tokens 32000 "$OUT/tokens.bin"
wait
source bench/launch.sh
for f in $RUNS; do
  run_logged 2 "$f" "/tmp/z3_$f" --data "$OUT/tokens.bin" --steps 10
done
L7=(--layers 32 --d 4096 --heads 32 --ffn 11008 --vocab 32000 --batch 4)
L13=(--layers 40 --d 5120 --heads 40 --ffn 13824 --vocab 32000 --batch 4)
launch 2 "$OUT/fsdp-l7" python3 bench/fsdp2_llama.py "${L7[@]}" || tail -n 5 "$OUT/fsdp-l7.0"
launch 2 "$OUT/fsdp-l13-ac" python3 bench/fsdp2_llama.py "${L13[@]}" --ac || tail -n 5 "$OUT/fsdp-l13-ac.0"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | sort | uniq -c
python3 - "$OUT" <<'PY'
import json, re, sys
sys.path.insert(0, "bench")
import jsonlog
out = sys.argv[1]
N = {"l7": 6738415616, "l13": 13015864320}
def fsdp(name):
    try:
        return [json.loads(l) for l in open(f"{out}/{name}.0") if l.startswith("{")][-1]
    except (OSError, IndexError):
        return None
def mem(name):
    try:
        m = re.search(r"step memory: ([0-9.]+) MiB of activations and workspace, ([0-9.]+) MiB",
                      open(f"{out}/{name}.0").read())
        return (float(m[1]) + float(m[2])) / 1024
    except (OSError, TypeError):
        return float("nan")
print("| run | step | tokens/s | MFU | vs FSDP2 | peak GiB (rank 0) | last loss |")
print("|---|---|---|---|---|---|---|")
peers = {"l7": fsdp("fsdp-l7"), "l13": fsdp("fsdp-l13-ac")}
for name, peer in (("fsdp-l7", "l7"), ("fsdp-l13-ac", "l13")):
    r = peers[peer]
    if r:
        print(f"| FSDP2 {peer}{' + AC' if 'ac' in name else ''} | {r['step_s']:.3f} s | {r['tokens_per_s']:.0f} | "
              f"{100 * r['mfu']:.1f}% | 1.00x | {r['peak_reserved_gib']:.1f} | {r['loss']:.4f} |")
    else:
        print(f"| FSDP2 {peer} | failed | | | | | |")
for name in ("l7", "l7-nopf", "l13", "l13-full"):
    r = jsonlog.steps(out, name)
    if not r:
        print(f"| Loom {name} | failed | | | | | |")
        continue
    step = sum(x["step_ms"] for x in r[2:]) / len(r[2:]) / 1e3
    tok = 2 * 4 * 1024 / step
    n = N[name.split("-")[0]]
    peer = peers[name.split("-")[0]]
    ratio = f"{peer['step_s'] / step:.2f}x" if peer else "-"
    print(f"| Loom {name} | {step:.3f} s | {tok:.0f} | {100 * 6 * n * tok / (989e12 * 2):.1f}% | {ratio} | "
          f"{mem(name):.1f} | {r[-1]['loss']:.4f} |")
PY
